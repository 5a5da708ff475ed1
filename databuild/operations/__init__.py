"""Operating a graph: alerts, SLA watch, Prometheus metrics and garbage collection."""
