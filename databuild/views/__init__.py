"""Read models over the BEL: lineage and detail views, job logs and the graph page, as the CLI, API
and dashboard show them."""
