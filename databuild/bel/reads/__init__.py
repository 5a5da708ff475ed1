"""The read models of the build event log: indexed lookups on the projections and the rows they return,
lineage facts for staleness, cost reports summed by the database, and the measures the metrics scrape."""
