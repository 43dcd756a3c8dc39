"""A tracing hook for benchmarks and experiments (None: no tracing).

Set ``actkit.ica._trace.hook = f`` with ``f(W, iteration, criterion, step, n_rows)``; the
solvers call it after every iteration.
"""

hook = None
