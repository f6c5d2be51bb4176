"""Side-by-side benchmarks: actorrt vs raw torch RPC vs Ray (``python -m benchmarks``)."""
