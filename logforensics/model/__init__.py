"""Model: events -> the run model and its typed summary (with statistics and server arguments)."""
