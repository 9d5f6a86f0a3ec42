"""One run end to end: the runner, the shared run state, one module per test type, the registry."""
