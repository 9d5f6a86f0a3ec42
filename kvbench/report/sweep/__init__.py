"""A sweep directory in a report: its tables and the compare of two sweeps."""
