"""kvbench report: statistics, speedups, claims audit, KV sizing, fits, plots and rendering.

Modules import pandas/matplotlib inside functions only; see render.write_report.
"""
