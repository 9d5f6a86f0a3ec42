"""`kvbench sweep`: many runs of one scenario with one or two fields stepped (a grid, or a
goodput search), each point a normal run directory; the sweep's own files (sweep.json, the
summary table, plots) sit beside them. Above `run` (a sweep is a sequence of runs); the report
reads a sweep directory from files only (kvbench.report.sweep.tables)."""
