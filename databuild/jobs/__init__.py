"""Running jobs: the context a job body sees, the executors (a Spark session, spark-submit, Spark
Connect), partition storage, the tables (Hive, Iceberg), attempt logs and OpenLineage."""
