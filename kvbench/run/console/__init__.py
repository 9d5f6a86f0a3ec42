"""What a run shows while it runs: the progress display and its live counters."""
