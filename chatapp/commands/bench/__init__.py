"""`chatapp bench`'s benchmarks: the speed run and its modes, their contenders and loads."""
