"""Measured vs published: a dataset's compare section checked against summary.json."""
