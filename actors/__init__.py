"""Ray actors: thin shells over runtime/ and offload/ (see issue: distributed runtime)."""
