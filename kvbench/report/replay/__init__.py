"""A trace replay in a report: the hit table, its plots and key rows."""
