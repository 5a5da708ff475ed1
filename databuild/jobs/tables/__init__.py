"""Tables over what the BEL says is live: each output pattern that maps to a table is published in its
format (a Hive metastore's partitions, or Apache Iceberg commits) after the BEL commit that made its
instances live, and brought back in line from the BEL after a crash. The BEL stays the source of truth; a
table is a view of it.

``spec`` names the tables of a graph; ``base`` is the interface every format implements (publish a run's
instances, withdraw partitions, describe, expire); ``hive`` and ``iceberg`` are the formats; ``publisher``
follows the BEL and records each commit in it."""
