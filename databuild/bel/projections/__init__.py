"""The projections of the build event log, one module per aggregate; ``bel.projector`` applies them."""
