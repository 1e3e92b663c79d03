"""Plugin management: finding plugin libraries, probing each in a subprocess
before it enters this process, caching the probes, and loading them.

``registry`` (discovery, loading, ``devicekit.plugins()``/``devices()``),
``probe`` and ``probe_child`` (the subprocess, ``python -m
devicekit._plugins.probe_child PATH``), ``probe_cache`` (probe results per
exact library file). Nothing here imports the framework (tensors, ops, nn):
it stands below it.
"""
