"""A run on a fitted twin in a report: where it left the fitted range, and the error to expect."""
