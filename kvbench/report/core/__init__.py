"""Shared report machinery: formats, stats, plots, the manifest reader, delivery, goodput, timelines, fits."""
