"""Checks before a run sends anything: the target, limits, names and the cold start."""
