from worker.commands import main

main()
