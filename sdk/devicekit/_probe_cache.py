"""Successful probe results, cached by the library's identity and content, so
that steady-state start-up loads a plugin without probing it again.

Folder: ``$DEVICEKIT_PROBE_CACHE`` if set (``off`` disables the cache), else
``$XDG_CACHE_HOME/devicekit/probe``, else ``~/.cache/devicekit/probe``.

One JSON file per library (named by a hash of its real path) holds the
library's identity (st_dev, st_ino, size, mtime_ns), its sha256, the SDK that
probed it, and the probe's result. A lookup whose identity matches is a hit
at the cost of one stat and one small read; one whose identity differs (the
file was copied back, touched, restored) is a hit only if the sha256 still
matches. A new SDK build invalidates everything.

Only successes are cached. A failure often depends on the machine rather than
the file (a driver not installed yet, an environment variable), so it is
probed again at each start-up until it is fixed; a broken plugin costs one
probe per process that needs it, never a stale error.
"""

import functools
import hashlib
import json
import os
import tempfile

CACHE_ENV = "DEVICEKIT_PROBE_CACHE"
_FORMAT = 1


def cache_dir():
    """The cache folder, or None when DEVICEKIT_PROBE_CACHE=off."""
    configured = os.environ.get(CACHE_ENV, "")
    if configured.strip().lower() == "off":
        return None
    if configured:
        return configured
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "devicekit", "probe")


@functools.lru_cache(maxsize=None)
def _sdk_identity():
    """A probe is only as good as the SDK that ran it: its version and the
    exact build of the core extension (whose checks the probe applied)."""
    from . import __version__, _core

    st = os.stat(_core.__file__)
    return f"{__version__}|{_core.API_MAJOR}.{_core.API_MINOR}|{st.st_size}|{st.st_mtime_ns}"


def _identity(st):
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _entry_path(folder, real):
    return os.path.join(folder, hashlib.sha256(real.encode("utf-8", "surrogateescape"))
                        .hexdigest()[:40] + ".json")


def lookup(path):
    """The cached probe info for the library at ``path``, or None.
    Returns (info, how) with how "identity" or "sha256"."""
    folder = cache_dir()
    if folder is None:
        return None
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
        with open(_entry_path(folder, real), encoding="utf-8") as f:
            entry = json.load(f)
    except (OSError, ValueError):
        return None
    if (not isinstance(entry, dict) or entry.get("format") != _FORMAT
            or entry.get("sdk") != _sdk_identity() or entry.get("path") != real):
        return None
    if entry.get("identity") == _identity(st):
        return entry["info"], "identity"
    try:
        same = file_sha256(real) == entry.get("sha256")
    except OSError:
        return None
    if not same:
        return None
    entry["identity"] = _identity(st)  # next time the stat alone will do
    _write(folder, real, entry)
    return entry["info"], "sha256"


def store(path, info):
    """Record a successful probe of ``path``. Returns None, or why the cache
    could not be written (the load itself goes on)."""
    folder = cache_dir()
    if folder is None:
        return None
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
        digest = file_sha256(real)
    except OSError as e:
        return str(e)
    entry = {"format": _FORMAT, "sdk": _sdk_identity(), "path": real,
             "identity": _identity(st), "sha256": digest, "info": info}
    return _write(folder, real, entry)


def _write(folder, real, entry):
    # Write-then-rename: a concurrent reader sees the old entry or the new
    # one, never half of one.
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entry, f)
            os.replace(tmp, _entry_path(folder, real))
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        return f"probe cache folder '{folder}' is not writable: {e}"
    return None
