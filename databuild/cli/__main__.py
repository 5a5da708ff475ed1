from databuild.cli import main

main()
