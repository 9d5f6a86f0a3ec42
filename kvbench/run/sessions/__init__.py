"""The sessions test: multi-turn phases and the per-tier counter windows."""
