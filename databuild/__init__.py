"""DataBuild: declarative data builds on Temporal and Spark."""

__version__ = "0.1.0"
