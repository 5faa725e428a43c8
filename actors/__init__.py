"""Ray actors: thin process boundaries around the pure core in `rlrun`."""
