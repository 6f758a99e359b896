"""Ways to watch a Local runtime: the watch host serving Liveboard, Liveboard's static files,
and the terminal viewer."""
