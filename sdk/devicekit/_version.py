"""The installed devicekit's version: a leaf, so that any module (the probe
cache's SDK identity, the CLI, the benchmarks) can read it without importing
the package's ``__init__``."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("devicekit")
except _metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0+unknown"
