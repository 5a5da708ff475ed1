"""Running jobs: the context a job body sees, the executors (a Spark session, spark-submit, Spark
Connect), partition storage, the catalog, attempt logs and OpenLineage."""
