"""The Temporal boundary: the protocol workflows and activities share; connecting; starting and
signalling wants; schedules and upstream graphs."""
