"""The mock's HTTP side: the server, app, routes, request parsing and the token loop."""
