"""The twin: a mock profile fitted to a user's own saved runs (`kvbench fit`).

Reads run directories only (results/), writes a mock profile YAML that `--mock-profile PATH` runs;
like report/ and audit/ it never talks to a server.
"""
