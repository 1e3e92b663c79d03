"""Successful probe results, cached by the library's identity and content, so
that steady-state start-up loads a plugin without probing it again.

Folder: ``$DEVICEKIT_PROBE_CACHE`` if set (``off`` disables the cache), else
``$XDG_CACHE_HOME/devicekit/probe``, else ``~/.cache/devicekit/probe``.

One small text file per library (named by its file name and a hash of its
real path) holds the library's real path, identity (st_dev, st_ino, size,
mtime_ns, ctime_ns) and sha256, the SDK build that probed it, the plugin
name, and the probe's full result as a JSON line (for people; start-up never
parses it). The format is plain "key<TAB>value" lines so that the warm path
imports nothing heavy (not even json).

What a lookup trusts. An entry is the reason a library is loaded into the
user's process without a probe, so it must describe the file as it is now:

- The library's sha256 is computed at every lookup (once per process and
  identity, see ``_digest``) and must match the entry's; the identity alone
  is not enough, since mtime can be set back (``os.utime``) after the file
  was rewritten in place. A match whose identity differs (the file was
  copied back, touched) is a hit, and the entry takes the new identity.
  Cost, measured on the reference CPU plugin (1.7 MB): about 1.5 ms to hash
  plus about 2 ms to import hashlib, once per process start. It grows with
  the library (OpenSSL's sha256, about 1-2 GB/s): a plugin of a few hundred
  MB would add a few hundred ms to every start-up; that is the price of not
  trusting metadata that the file's owner can set. ctime_ns (which no
  unprivileged process can set back) is in the identity too, so that within
  a process a file whose identity is unchanged is not hashed again.
- The entry file itself is only read if it is a regular file (opened with
  O_NOFOLLOW: never through a symbolic link), owned by the current user, and
  at most ``MAX_ENTRY_BYTES``; at most that many bytes (plus one) are read.
  Anything else, and any malformed entry, is ignored: the library is probed
  again and the entry rewritten. Never trusted, never an error.

A new SDK build invalidates everything. The key is the plugin file itself:
a change in what it depends on (a driver library updated under it) does not
invalidate its entry. Remove the folder, or set DEVICEKIT_PROBE_CACHE=off,
to probe everything again. The checks protect against a changed library, a
damaged entry and other users' files, not against the user's own processes:
whoever can write this folder as this user can also write the plugin.

Only successes are cached. A failure often depends on the machine rather than
the file (a driver not installed yet, an environment variable), so it is
probed again at each start-up until it is fixed; a broken plugin costs one
probe per process that needs it, never a stale error.
"""

import functools
import os
import stat

# json and tempfile are imported where needed (a new entry), hashlib at the
# first lookup: a warm start-up pays for a stat, a small read and a hash.

CACHE_ENV = "DEVICEKIT_PROBE_CACHE"
_HEADER = "devicekit probe cache 3"  # 3: identity with ctime_ns, entries checked before trust
MAX_ENTRY_BYTES = 64 * 1024  # an entry is well under 4 KiB; a larger file is not one of ours


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
    from .. import _core
    from .._version import __version__

    st = os.stat(_core.__file__)
    return (f"{__version__}|{_core.API_MAJOR}.{_core.API_MINOR}|{st.st_size}|{st.st_mtime_ns}"
            f"|{st.st_ctime_ns}")


def _identity(st):
    return f"{st.st_dev} {st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}"


def file_sha256(path):
    return _hash_and_stat(path)[0]


def _hash_and_stat(path):
    """(sha256 hex digest, os.stat_result) of one open file, so that the
    digest and the identity describe the same file even if ``path`` is
    replaced meanwhile."""
    import hashlib  # a few ms (OpenSSL); kept out of import devicekit's start-up

    h = hashlib.sha256()
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        buf = memoryview(bytearray(1 << 20))
        while True:
            n = f.readinto(buf)
            if not n:
                break
            h.update(buf[:n])
    return h.hexdigest(), st


_digests = {}  # real path -> (identity, sha256) hashed in this process


def _digest(real, st):
    """The sha256 of the library at ``real`` whose stat is ``st``, hashed
    once per process and identity: a rewrite changes ctime, which no
    unprivileged process can set back, so an unchanged identity within one
    process means unchanged bytes. Returns (sha256, identity of the bytes
    hashed)."""
    identity = _identity(st)
    known = _digests.get(real)
    if known is not None and known[0] == identity:
        return known[1], identity
    digest, hashed = _hash_and_stat(real)
    identity = _identity(hashed)
    _digests[real] = (identity, digest)
    return digest, identity


def _entry_path(folder, real):
    # FNV-1a (64-bit) of the real path: cheap, and a collision only costs a
    # probe, since an entry records the path it is for and lookup checks it.
    h = 0xCBF29CE484222325
    for byte in real.encode("utf-8", "surrogateescape"):
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    stem = os.path.basename(real).replace(".", "_")[:40]
    return os.path.join(folder, f"{stem}-{h:016x}.txt")


def _read_capped(entry_file):
    """The bytes of ``entry_file`` if it is a regular file of the current
    user's, not reached through a symbolic link, of at most MAX_ENTRY_BYTES;
    else None. The checks are on the open file, so what is checked is what
    is read."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_NONBLOCK", 0)  # a FIFO planted there must not block start-up
    try:
        fd = os.open(entry_file, flags)
    except OSError:  # missing, a symbolic link (ELOOP), unreadable
        return None
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENTRY_BYTES
                or (hasattr(os, "getuid") and st.st_uid != os.getuid())):
            return None
        chunks, left = [], MAX_ENTRY_BYTES + 1  # it may have grown since the fstat
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data if len(data) <= MAX_ENTRY_BYTES else None


def read_entry(entry_file):
    """The fields of one cache file as {key: str}, or None if it is not a
    well-formed entry that this user may trust (see the module docstring)."""
    data = _read_capped(entry_file)
    if data is None:
        return None
    lines = data.decode("utf-8", errors="surrogateescape").split("\n")
    if lines[0] != _HEADER or lines[-1] != "":  # a truncated write has no final newline
        return None
    fields = {}
    for line in lines[1:-1]:
        key, tab, value = line.partition("\t")
        if not tab or not key or key in fields:
            return None
        fields[key] = value
    return fields


def _is_sha256(text):
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def lookup(path):
    """(plugin name, how) from the cached probe of the library at ``path``,
    with how "identity" (unchanged file) or "sha256" (same bytes, new
    identity: the entry is updated); None when there is no valid entry."""
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
            or not entry.get("name") or not _is_sha256(entry.get("sha256", ""))):
        return None
    try:
        digest, identity = _digest(real, st)
    except OSError:
        return None
    if digest != entry["sha256"]:
        return None
    if entry.get("identity") == identity:
        return entry["name"], "identity"
    entry["identity"] = identity  # the bytes probed, under a new identity
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
        digest, identity = _digest(real, os.stat(real))
    except OSError as e:
        return str(e)
    entry = {"sdk": _sdk_identity(), "path": real, "identity": identity, "sha256": digest,
             "name": info["name"], "info": json.dumps(info)}
    if len(_text(entry).encode("utf-8", "surrogateescape")) > MAX_ENTRY_BYTES:
        # Long per-device error texts: the full result would make an entry
        # that lookup refuses. It is for people only; keep what fits.
        entry["info"] = json.dumps({"name": info["name"], "note": "the probe's full result "
                                    f"is over {MAX_ENTRY_BYTES} bytes and is not kept"})
    return _write(folder, real, entry)


def _text(entry):
    return "\n".join([_HEADER, *(f"{k}\t{v}" for k, v in entry.items())]) + "\n"


def _write(folder, real, entry):
    import tempfile  # only once a plugin is probed or its entry updated

    # Write-then-rename: a concurrent reader sees the old entry or the new
    # one, never half of one. os.replace renames over whatever is at the
    # entry's name (a symbolic link is replaced, never followed).
    text = _text(entry)
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
