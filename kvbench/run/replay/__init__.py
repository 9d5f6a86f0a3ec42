"""The replay test: the trace feed, its phases and the remote (Ray) replay phase."""
