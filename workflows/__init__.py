"""Temporal workflows. Deterministic, no I/O: every effect goes through an activity."""
