"""Time slices of a run: the per-slice frame, series, plots and section."""
