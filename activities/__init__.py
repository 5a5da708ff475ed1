"""Temporal activities: thin adapters over the domain core in ``databuild``."""
