"""The sessions test in a report: per-turn tables, tiers and plots."""
