"""The domain core: the events the build event log records and the rules that decide them. Pure: no
database, no clock, no Temporal."""
