"""Successful probe results, cached by the library's identity and content, so
that steady-state start-up loads a plugin without probing it again.

Folder: ``$DEVICEKIT_PROBE_CACHE`` if set (``off`` disables the cache), else
``$XDG_CACHE_HOME/devicekit/probe``, else ``~/.cache/devicekit/probe``.

One small text file per library (named by its file name and a hash of its
real path) holds the library's real path, identity (st_dev, st_ino, size,
mtime_ns) and sha256, the SDK build that probed it, the plugin name, and the
probe's full result as a JSON line (for people; start-up never parses it). A
lookup whose identity matches is a hit at the cost of one stat and one small
read; one whose identity differs (the file was copied back, touched,
restored) is a hit only if the sha256 still matches. A new SDK build
invalidates everything. The format is plain "key<TAB>value" lines so that the
warm path imports nothing (not even json).

The key is the plugin file itself: a change in what it depends on (a driver
library updated under it) does not invalidate its entry. Remove the folder,
or set DEVICEKIT_PROBE_CACHE=off, to probe everything again.

Only successes are cached. A failure often depends on the machine rather than
the file (a driver not installed yet, an environment variable), so it is
probed again at each start-up until it is fixed; a broken plugin costs one
probe per process that needs it, never a stale error.
"""

import functools
import os
import tempfile

# hashlib, json and tempfile are imported where needed (a changed library, a
# new entry): a warm start-up pays for a stat and a small read, nothing more.

CACHE_ENV = "DEVICEKIT_PROBE_CACHE"
_HEADER = "devicekit probe cache 2"


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
    # devicekit/__init__ imports this module (via _registry) before it sets __version__
    from . import __version__, _core

    st = os.stat(_core.__file__)
    return f"{__version__}|{_core.API_MAJOR}.{_core.API_MINOR}|{st.st_size}|{st.st_mtime_ns}"


def _identity(st):
    return f"{st.st_dev} {st.st_ino} {st.st_size} {st.st_mtime_ns}"


def file_sha256(path):
    import hashlib  # only once a plugin is probed: kept out of import devicekit's start-up

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _entry_path(folder, real):
    # FNV-1a (64-bit) of the real path: cheap, and a collision only costs a
    # probe, since an entry records the path it is for and lookup checks it.
    h = 0xCBF29CE484222325
    for byte in real.encode("utf-8", "surrogateescape"):
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    stem = os.path.basename(real).replace(".", "_")[:40]
    return os.path.join(folder, f"{stem}-{h:016x}.txt")


def read_entry(entry_file):
    """The fields of one cache file as {key: str}, or None if it is not one."""
    try:
        with open(entry_file, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().split("\n")
    except OSError:
        return None
    if not lines or lines[0] != _HEADER:
        return None
    return dict(line.partition("\t")[::2] for line in lines[1:] if line)


def lookup(path):
    """(plugin name, how) from the cached probe of the library at ``path``,
    with how "identity" or "sha256"; None when there is no valid entry."""
    folder = cache_dir()
    if folder is None:
        return None
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return None
    entry = read_entry(_entry_path(folder, real))
    if (entry is None or entry.get("sdk") != _sdk_identity() or entry.get("path") != real
            or not entry.get("name")):
        return None
    if entry.get("identity") == _identity(st):
        return entry["name"], "identity"
    try:
        same = file_sha256(real) == entry.get("sha256")
    except OSError:
        return None
    if not same:
        return None
    entry["identity"] = _identity(st)  # next time the stat alone will do
    _write(folder, real, entry)
    return entry["name"], "sha256"


def store(path, info):
    """Record a successful probe of ``path`` (``info``: the probe's result,
    with the plugin's "name"). Returns None, or why the cache could not be
    written (the load itself goes on)."""
    import json  # only once a plugin is probed: kept out of import devicekit's start-up

    folder = cache_dir()
    if folder is None:
        return None
    real = os.path.realpath(path)
    if "\n" in real:
        return None  # not representable in the format; such a library is probed each time
    try:
        st = os.stat(real)
        digest = file_sha256(real)
    except OSError as e:
        return str(e)
    entry = {"sdk": _sdk_identity(), "path": real, "identity": _identity(st), "sha256": digest,
             "name": info["name"], "info": json.dumps(info)}
    return _write(folder, real, entry)


def _write(folder, real, entry):
    # Write-then-rename: a concurrent reader sees the old entry or the new
    # one, never half of one.
    text = "\n".join([_HEADER, *(f"{k}\t{v}" for k, v in entry.items())]) + "\n"
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".txt")
        try:
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(text)
            os.replace(tmp, _entry_path(folder, real))
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        return f"probe cache folder '{folder}' is not writable: {e}"
    return None
