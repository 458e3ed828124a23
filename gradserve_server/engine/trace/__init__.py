"""The trace layer: an op list (a whole list, or one op of it: a fragment) traced once and replayed as numpy
kernel calls, where nothing can tell it from the eager interpreter (``engine.program``), which stays the reference
and the one fallback. One module for each step, the same for both granularities:

- ``key``: the one keyer (every key a list, an op or a literal is cached under);
- ``tape``: the one executor (the step format, constant folding, the optimiser, the code generator, the loop
  interpreter), with ``sources`` registering the code it generates so that tracebacks show it;
- ``replayed``: what a replay gives back (a namespace made when read, op outcomes, the autograd report);
- ``cache``: the one bounded cache of plans and fragments, per API key;
- ``plan``: what only a whole list needs (sessions, segments, loops, the graphs a replay rebuilds);
- ``compose``: what only a per-op run needs (light nodes, the backward over them, the give-up policy);
- ``dispatch`` and ``route``: the one function that runs a list, and the route it took and why.
"""
