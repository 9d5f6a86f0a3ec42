"""Alternative readings of a stated figure: the search, its pool and the slip kinds."""
