"""Example graphs."""
