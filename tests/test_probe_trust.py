"""Probing is bounded and the probe cache is trustworthy: nothing is forged.

- A probe child dies with the process that started it, even one killed by
  SIGKILL while the plugin hangs in Plugin_Initialize (Linux's parent-death
  signal, set first thing in devicekit._plugins.probe_child), and a child whose
  parent is already gone exits before it touches the plugin.
- The cache vouches for a library only while its sha256 matches: a plugin
  rewritten in place with its mtime put back is probed again.
- A cache entry that is not a regular file of this user's (a symbolic link, a
  FIFO, another user's file), that is larger than MAX_ENTRY_BYTES, or whose
  sha256 is not the library's, is never trusted: the library is probed again.

Each case ends in a plugin that aborts in Plugin_Initialize (or hangs there),
so a cache that vouched for it would abort the process that loads it; that
process is a subprocess here. Needs: a C compiler (``misbehaving_plugins``)
and Linux's /proc for the two orphan tests.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import HUNG_S

from devicekit._plugins import probe_cache as _probe_cache

# Loads argv[1] with devicekit.load_plugin; prints what happened as JSON.
_LOAD = textwrap.dedent("""
    import json, sys
    import devicekit as dk
    try:
        plugin = dk.load_plugin(sys.argv[1])
        print(json.dumps({"loaded": plugin.name}))
    except dk.DeviceKitError as e:
        print(json.dumps({"error_type": type(e).__name__, "error": str(e)}))
""")


def _load(lib, cache):
    env = dict(os.environ, DEVICEKIT_PROBE_CACHE=str(cache))
    env.pop("DEVICEKIT_PLUGIN_PATH", None)
    r = subprocess.run([sys.executable, "-c", _LOAD, str(lib)], env=env, capture_output=True,
                       text=True, timeout=HUNG_S)
    assert r.returncode == 0, (f"the loading process ended with {r.returncode} (a cache entry "
                               f"was trusted?)\n{r.stdout}{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _padded_copy(src, dst, size):
    """``src``'s bytes, zero-padded to ``size`` (the loader ignores what
    follows the ELF sections), so two different plugins can have one size."""
    data = open(src, "rb").read()
    assert len(data) <= size
    with open(dst, "wb") as f:
        f.write(data + bytes(size - len(data)))


def _assert_aborting_plugin_refused(out):
    assert out.get("error_type") == "PluginLoadError", out
    assert "crashed the probe process with SIGABRT" in out["error"], out


# --------------------------------------------------------------------------
# Probe children die with their parent.
# --------------------------------------------------------------------------

def _proc_field(pid, name):
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return None


def _probe_children(parent, lib):
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        cmdline = _proc_field(entry, "cmdline") or b""
        stat = (_proc_field(entry, "stat") or b"").rsplit(b")", 1)[-1].split()
        if (b"devicekit._plugins.probe_child" in cmdline and os.fsencode(lib) in cmdline
                and len(stat) > 1 and int(stat[1]) == parent):
            found.append(int(entry))
    return found


def _state(pid):
    stat = (_proc_field(pid, "stat") or b"").rsplit(b")", 1)[-1].split()
    return stat[0] if stat else None


def _alive(pid, lib):
    """Running (a zombie is dead: it only waits to be reaped) and still the
    probe of ``lib`` (not a reused pid)."""
    stat = (_proc_field(pid, "stat") or b"").rsplit(b")", 1)[-1].split()
    return bool(stat) and stat[0] != b"Z" and os.fsencode(lib) in (_proc_field(pid, "cmdline")
                                                                     or b"")


def _wait_for(condition, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    return condition()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="finds the probe through /proc (Linux)")
def test_probe_child_dies_when_its_parent_is_killed(misbehaving_plugins, tmp_path):
    lib = str(tmp_path / "hangs.so")  # a path of its own: it names this test's probe
    shutil.copy(misbehaving_plugins["hang_init"], lib)
    env = dict(os.environ, DEVICEKIT_PROBE_CACHE=str(tmp_path / "cache"),
               DEVICEKIT_PROBE_TIMEOUT="600")  # the parent's time limit never comes into it
    user = subprocess.Popen([sys.executable, "-c", _LOAD, lib], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = None
    try:
        found = _wait_for(lambda: _probe_children(user.pid, lib), 60)
        assert found, "the probe process never started"
        [child] = found
        # In the plugin: the library is mapped and the probe sleeps in
        # Plugin_Initialize's pause() (waited for, not guessed with a sleep).
        assert _wait_for(lambda: os.fsencode(lib) in (_proc_field(child, "maps") or b"")
                         and _state(child) == b"S", 60)
        os.kill(user.pid, signal.SIGKILL)
        user.wait(timeout=HUNG_S)
        assert _wait_for(lambda: not _alive(child, lib), 60), \
            f"probe process {child} outlived its parent by 60 s"
    finally:
        if user.poll() is None:
            user.kill()
            user.wait()
        if child is not None and _alive(child, lib):
            os.killpg(child, signal.SIGKILL)  # its own session: its group is its own


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="Linux: checks the death signal path")
def test_probe_child_exits_at_once_when_its_parent_is_already_gone(misbehaving_plugins, tmp_path):
    # The parent died while the child was starting: getppid() is no longer the
    # pid the parent passed. The child must exit before it loads the plugin.
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    env = dict(os.environ, DEVICEKIT_PROBE_PARENT=str(gone.pid), DEVICEKIT_PROBE_TIMEOUT="600")
    try:
        r = subprocess.run([sys.executable, "-m", "devicekit._plugins.probe_child",
                            str(misbehaving_plugins["hang_init"])], env=env,
                           capture_output=True, text=True, timeout=HUNG_S)
    except subprocess.TimeoutExpired:
        pytest.fail("the probe of a plugin hanging in Plugin_Initialize ran on without its parent")
    assert r.returncode == 3, r
    assert "step" not in r.stdout, r.stdout  # no plugin call was reached


# --------------------------------------------------------------------------
# The probe cache checks the library's bytes.
# --------------------------------------------------------------------------

def test_plugin_rewritten_in_place_with_its_mtime_restored_is_probed_again(misbehaving_plugins,
                                                                          tmp_path):
    good, bad = misbehaving_plugins["none"], misbehaving_plugins["abort_init"]
    size = max(os.path.getsize(good), os.path.getsize(bad))
    lib, cache = tmp_path / "lib.so", tmp_path / "cache"
    _padded_copy(good, lib, size)
    assert _load(lib, cache) == {"loaded": "mb_none"}
    before = os.stat(lib)
    with open(bad, "rb") as src, open(lib, "r+b") as dst:  # same inode, same size
        dst.write(src.read())
    os.utime(lib, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(lib)
    assert ((after.st_dev, after.st_ino, after.st_size, after.st_mtime_ns)
            == (before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns))
    _assert_aborting_plugin_refused(_load(lib, cache))


# --------------------------------------------------------------------------
# Entries that are not trusted.
# --------------------------------------------------------------------------

def _forged_entry(lib, sha256=None, extra=()):
    """The text of an entry that says the aborting library ``lib`` probed fine
    as "mb_none", in the format this SDK writes, with its current identity."""
    real = os.path.realpath(lib)
    fields = [("sdk", _probe_cache._sdk_identity()), ("path", real),
              ("identity", _probe_cache._identity(os.stat(real))),
              ("sha256", sha256 or _probe_cache.file_sha256(real)), ("name", "mb_none"),
              *extra, ("info", "{}")]
    return "\n".join([_probe_cache._HEADER, *(f"{k}\t{v}" for k, v in fields)]) + "\n"


def _poison(how, lib, entry, other):
    if how == "sha256 of another library":
        entry.write_text(_forged_entry(lib, sha256=_probe_cache.file_sha256(other)))
    elif how == "symbolic link":
        target = entry.parent / "elsewhere.txt"
        target.write_text(_forged_entry(lib))
        entry.symlink_to(target)
    elif how == "larger than the cap":
        entry.write_text(_forged_entry(lib, extra=[("padding", "x" * _probe_cache.MAX_ENTRY_BYTES)]))
    elif how == "sparse 16 MiB file":
        entry.write_text(_forged_entry(lib))
        with open(entry, "r+b") as f:
            f.truncate(16 << 20)  # zeros after the last field
    elif how == "FIFO":
        os.mkfifo(entry)
    elif how == "another user's file":
        if os.geteuid() != 0:
            pytest.skip("only root can make a file owned by another user")
        entry.write_text(_forged_entry(lib))
        os.chown(entry, 65534, 65534)
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["sha256 of another library", "symbolic link",
                                 "larger than the cap", "sparse 16 MiB file", "FIFO",
                                 "another user's file"])
def test_poisoned_entry_is_not_trusted(misbehaving_plugins, tmp_path, how):
    lib, cache = tmp_path / "lib.so", tmp_path / "cache"
    shutil.copy(misbehaving_plugins["abort_init"], lib)
    cache.mkdir()
    entry = cache / os.path.basename(_probe_cache._entry_path(str(cache), os.path.realpath(lib)))
    _poison(how, lib, entry, misbehaving_plugins["none"])
    _assert_aborting_plugin_refused(_load(lib, cache))  # probed, not vouched for


def test_malformed_entries_are_ignored(misbehaving_plugins, tmp_path, monkeypatch):
    lib, cache = tmp_path / "lib.so", tmp_path / "cache"
    shutil.copy(misbehaving_plugins["none"], lib)
    monkeypatch.setenv("DEVICEKIT_PROBE_CACHE", str(cache))
    cache.mkdir()
    entry = cache / os.path.basename(_probe_cache._entry_path(str(cache), os.path.realpath(lib)))
    good = _forged_entry(lib)  # lib is the good plugin: a true entry
    digest = _probe_cache.file_sha256(str(lib))
    for text in [b"\xff\xfe garbage\n", good[:-1].encode(),  # no final newline: a torn write
                 good.replace("name\tmb_none", "name mb_none").encode(),  # a line without a tab
                 (good + "name\tmb_other\n").encode(),  # a key twice
                 good.replace(digest, digest[:-1] + "Z").encode(),  # not a hex digest
                 good.replace(_probe_cache._HEADER, _probe_cache._HEADER + "0").encode()]:
        entry.write_bytes(text)
        assert _probe_cache.lookup(str(lib)) is None, text[-120:]
    entry.write_text(good)
    assert _probe_cache.lookup(str(lib)) == ("mb_none", "identity")
