"""The noisy-neighbour test in a report: attribution, effect, explanation, its section and plots."""
