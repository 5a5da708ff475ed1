"""The aggregates of the build event log: wants, decisions, job runs, partitions, pools and admission,
backfills, costs, workers and the log itself, each a set of commands (and the reads they answer with) on the
engine's one write path; which events a command appends is decided in ``databuild.domain``."""
