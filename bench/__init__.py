"""Benchmarks: each script prints its figures against a baseline taken in the same run."""
