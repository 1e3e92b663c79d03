"""Loading is never fatal (README, "Loading is never fatal"): a plugin is
probed in a subprocess before it enters the process, so one that crashes,
hangs or exits while loading becomes its load error and cpu:0 keeps working;
probe results are cached by the library's identity and content; asking for
cpu:0 loads only the plugin that provides cpu; Plugin_Initialize runs once
per loaded library; DEVICEKIT_PLUGIN_PATH holds file-system paths.

Needs: a C compiler (tests/plugins/misbehave.c, built per misbehaviour by the
``misbehaving_plugins`` fixture) and the reference CPU plugin. Tests that load
a crashing plugin do it in a subprocess, so a regression fails one test
instead of killing the test run.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from conftest import HUNG_S

import devicekit
from devicekit import PluginLoadError, _core
from devicekit._plugins import probe as _probe
from devicekit._plugins import probe_cache as _probe_cache
from devicekit._plugins import registry as _registry

HANG_TIMEOUT_S = "5"  # DEVICEKIT_PROBE_TIMEOUT for the hanging plugin: short, but
                      # well above a probe's start-up (~0.5 s) on a loaded machine


def _assert_cpu_works():
    total = devicekit.tensor([1.0, 2.0], device="cpu:0") + devicekit.tensor([10.0, 20.0],
                                                                           device="cpu:0")
    np.testing.assert_array_equal(total.numpy(), np.array([11.0, 22.0], np.float32))


# Loads argv[1] with devicekit.load_plugin, then runs an op on cpu:0, in the
# same process; prints what happened as JSON.
_LOAD_THEN_CPU = textwrap.dedent("""
    import json, sys
    import devicekit as dk
    out = {}
    try:
        dk.load_plugin(sys.argv[1])
        out["loaded"] = True
    except dk.DeviceKitError as e:
        out["error_type"], out["error"] = type(e).__name__, str(e)
    t = dk.tensor([1.0, 2.0], device="cpu:0")
    out["cpu"] = (t + t).numpy().tolist()
    print(json.dumps(out))
""")


def _python(code, *args, env=None, cwd=None, timeout=HUNG_S):
    full_env = dict(os.environ)
    full_env.pop("DEVICEKIT_PLUGIN_PATH", None)
    full_env.update(env or {})
    result = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=full_env,
                            cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------
# A crash, hang or exit while loading is that plugin's load error.
# --------------------------------------------------------------------------

CRASHES = {
    # misbehaviour: fragments of the load error
    "segv_getapi": [f"crashed the probe process with SIGSEGV (signal {signal.SIGSEGV.value}) "
                    f"in DK_GetApi", "not loaded into this process"],
    "abort_init": [f"crashed the probe process with SIGABRT (signal {signal.SIGABRT.value}) "
                   f"in Plugin_Initialize"],
    "ctor_abort": [f"crashed the probe process with SIGABRT (signal {signal.SIGABRT.value}) "
                   f"in dlopen (the library's constructors"],
    "hang_init": [f"the probe did not finish within {HANG_TIMEOUT_S} s",
                  "(stuck in Plugin_Initialize) and was killed",
                  "allow it longer with DEVICEKIT_PROBE_TIMEOUT=SECONDS"],
    "exit_init": ["ended the probe process with exit code 0 in Plugin_Initialize",
                  "not loaded into this process"],
}


@pytest.mark.parametrize("name", sorted(CRASHES))
def test_crash_hang_or_exit_at_load_is_a_load_error(misbehaving_plugins, name):
    path = misbehaving_plugins[name]
    out = _python(_LOAD_THEN_CPU, path, env={"DEVICEKIT_PROBE_TIMEOUT": HANG_TIMEOUT_S})
    assert out.get("error_type") == "PluginLoadError", out
    assert out["error"].startswith(f"cannot load plugin '{path}': "), out["error"]
    for fragment in CRASHES[name]:
        assert fragment in out["error"], f"{fragment!r} not in {out['error']!r}"
    assert out["cpu"] == [2.0, 4.0]  # the same process goes on working


def test_discovery_lists_every_crash_and_loads_the_rest(misbehaving_plugins):
    crashing = [misbehaving_plugins[n] for n in sorted(CRASHES)]
    good = misbehaving_plugins["none"]
    code = textwrap.dedent("""
        import json
        import devicekit as dk
        records = {r.path: [r.loaded, r.error_type, r.error, r.probe] for r in dk.plugins()}
        t = dk.tensor([1.0, 2.0], device="cpu:0")
        print(json.dumps({"records": records, "cpu": (t + t).numpy().tolist(),
                          "devices": [d.name for d in dk.devices()]}))
    """)
    out = _python(code, env={"DEVICEKIT_PLUGIN_PATH": os.pathsep.join(map(str, [*crashing, good])),
                             "DEVICEKIT_PROBE_TIMEOUT": HANG_TIMEOUT_S})
    for name in CRASHES:
        loaded, error_type, error, probe = out["records"][str(misbehaving_plugins[name])]
        assert (loaded, error_type, probe) == (False, "PluginLoadError", "failed"), (name, error)
        assert CRASHES[name][0] in error, (name, error)
    assert out["records"][str(good)][:2] == [True, None]
    assert {"cpu:0", "mb_none:0"} <= set(out["devices"])
    assert out["cpu"] == [2.0, 4.0]


def test_malformed_probe_timeout_is_each_plugins_load_error(misbehaving_plugins, tmp_path):
    # (An uncached library: the limit is only read when a probe runs.)
    out = _python(_LOAD_THEN_CPU, _fresh_copy(misbehaving_plugins["none"], tmp_path),
                  env={"DEVICEKIT_PROBE_TIMEOUT": "soon"})
    assert "DEVICEKIT_PROBE_TIMEOUT='soon' is not a number of seconds > 0" in out["error"], out
    assert out["cpu"] == [2.0, 4.0]


# --------------------------------------------------------------------------
# The probe cache.
# --------------------------------------------------------------------------

@pytest.fixture
def probe_counter(monkeypatch, tmp_path):
    """A fresh probe cache folder for this test, and a list that records
    every probe subprocess started in this process."""
    monkeypatch.setenv("DEVICEKIT_PROBE_CACHE", str(tmp_path / "cache"))
    probed = []
    real_probe = _probe.probe

    def counting_probe(path):
        probed.append(path)
        return real_probe(path)

    monkeypatch.setattr(_probe, "probe", counting_probe)
    return probed


def _fresh_copy(src, folder, name="lib.so"):
    """A copy with its own inode, never loaded in this process before."""
    folder.mkdir(parents=True, exist_ok=True)
    dst = folder / name
    shutil.copy(src, dst)
    return str(dst)


def test_probe_once_then_cached(misbehaving_plugins, tmp_path, probe_counter):
    lib = _fresh_copy(misbehaving_plugins["none"], tmp_path / "a")
    assert _registry._vet(lib) == ("probed", "mb_none")
    assert _registry._vet(lib) == ("cached", "mb_none")
    assert probe_counter == [lib]
    [entry] = os.listdir(tmp_path / "cache")
    stored = _probe_cache.read_entry(tmp_path / "cache" / entry)
    assert stored["path"] == os.path.realpath(lib)
    assert stored["sha256"] == _probe_cache.file_sha256(lib)
    assert stored["name"] == "mb_none"
    info = json.loads(stored["info"])  # the probe's whole result, for people
    assert (info["name"], info["devices"]) == ("mb_none", [{"name": "mb_none:0", "error": None}])
    _assert_cpu_works()


def test_touched_library_is_verified_by_sha256_not_probed(misbehaving_plugins, tmp_path,
                                                         probe_counter):
    lib = _fresh_copy(misbehaving_plugins["none"], tmp_path / "a")
    _registry._vet(lib)
    st = os.stat(lib)
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # same bytes, new mtime
    assert _probe_cache.lookup(lib)[1] == "sha256"
    assert _probe_cache.lookup(lib)[1] == "identity"  # the entry took the new identity
    assert probe_counter == [lib]


def test_changed_library_is_probed_again(misbehaving_plugins, tmp_path, probe_counter):
    lib = _fresh_copy(misbehaving_plugins["none"], tmp_path / "a")
    assert _registry._vet(lib) == ("probed", "mb_none")
    shutil.copy(misbehaving_plugins["props_error"], lib)  # new content, same path
    assert _registry._vet(lib) == ("probed", "mb_props_error")
    assert probe_counter == [lib, lib]


def test_new_sdk_build_invalidates_the_cache(misbehaving_plugins, tmp_path, probe_counter,
                                            monkeypatch):
    lib = _fresh_copy(misbehaving_plugins["none"], tmp_path / "a")
    _registry._vet(lib)
    monkeypatch.setattr(_probe_cache, "_sdk_identity", lambda: "another build")
    assert _probe_cache.lookup(lib) is None


def test_failures_are_not_cached(misbehaving_plugins, tmp_path, probe_counter):
    lib = _fresh_copy(misbehaving_plugins["abort_init"], tmp_path / "a")
    for _ in range(2):
        with pytest.raises(PluginLoadError, match="SIGABRT"):
            _registry._vet(lib)
    assert probe_counter == [lib, lib]
    assert not (tmp_path / "cache").exists() or not os.listdir(tmp_path / "cache")
    _assert_cpu_works()


def test_cache_off_probes_every_time_and_writes_nothing(misbehaving_plugins, tmp_path,
                                                       probe_counter, monkeypatch):
    monkeypatch.setenv("DEVICEKIT_PROBE_CACHE", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    lib = _fresh_copy(misbehaving_plugins["none"], tmp_path / "a")
    assert _registry._vet(lib)[0] == "probed"
    assert _registry._vet(lib)[0] == "probed"
    assert probe_counter == [lib, lib]
    assert not (tmp_path / "xdg").exists()


def test_cache_folder_follows_xdg_cache_home(misbehaving_plugins, tmp_path, probe_counter,
                                            monkeypatch):
    monkeypatch.delenv("DEVICEKIT_PROBE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _probe_cache.cache_dir() == str(tmp_path / "xdg" / "devicekit" / "probe")
    lib = _fresh_copy(misbehaving_plugins["none"], tmp_path / "a")
    _registry._vet(lib)
    assert len(os.listdir(tmp_path / "xdg" / "devicekit" / "probe")) == 1


def test_second_process_start_uses_the_cache(misbehaving_plugins, tmp_path):
    lib = _fresh_copy(misbehaving_plugins["none"], tmp_path / "a")
    code = textwrap.dedent("""
        import json
        import devicekit as dk
        dk.device("mb_none:0")
        print(json.dumps({r.name: r.probe for r in dk.plugins()}))
    """)
    env = {"DEVICEKIT_PLUGIN_PATH": lib, "DEVICEKIT_PROBE_CACHE": str(tmp_path / "cache")}
    assert _python(code, env=env) == {"cpu": "probed", "mb_none": "probed"}
    assert _python(code, env=env) == {"cpu": "cached", "mb_none": "cached"}


# --------------------------------------------------------------------------
# Asking for cpu:0 loads only the plugin that provides cpu.
# --------------------------------------------------------------------------

_MAPPED_AFTER_CPU_OP = textwrap.dedent("""
    import json, sys
    import devicekit as dk
    t = dk.tensor([1.0, 2.0], device="cpu:0")
    result = (t + t).numpy().tolist()
    maps = open("/proc/self/maps").read()
    pending = [r.path for r in dk._plugins.registry._current().records if r._pending]
    print(json.dumps({"cpu": result, "mapped": [p for p in sys.argv[1:] if p in maps],
                      "pending": pending, "cpu_mapped": dk.device("cpu:0").plugin.path in maps}))
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/self/maps (Linux)")
def test_cpu0_loads_and_probes_only_the_cpu_plugin(misbehaving_plugins, tmp_path):
    # A good plugin and one that would abort the process if it were loaded.
    others = [_fresh_copy(misbehaving_plugins["none"], tmp_path / "p", "good.so"),
              _fresh_copy(misbehaving_plugins["abort_init"], tmp_path / "p", "bad.so")]
    out = _python(_MAPPED_AFTER_CPU_OP, *others,
                  env={"DEVICEKIT_PLUGIN_PATH": os.pathsep.join(others),
                       "DEVICEKIT_PROBE_CACHE": str(tmp_path / "cache")})
    assert out["cpu"] == [2.0, 4.0] and out["cpu_mapped"]
    assert out["mapped"] == []          # neither was loaded into the process
    assert out["pending"] == others     # nor even probed
    assert len(os.listdir(tmp_path / "cache")) == 1  # only cpu's probe was recorded


def test_name_found_by_file_name_or_by_probing_everything(misbehaving_plugins, tmp_path,
                                                         plugin_path):
    # "mb_none.so" names its plugin; "other.so" (plugin mb_props_error) does not,
    # so asking for mb_props_error probes every candidate and then finds it.
    named = _fresh_copy(misbehaving_plugins["none"], tmp_path / "p", "mb_none.so")
    other = _fresh_copy(misbehaving_plugins["props_error"], tmp_path / "p", "other.so")
    plugin_path([])
    os.environ["DEVICEKIT_PLUGIN_PATH"] = os.pathsep.join([named, other])
    _registry._discovery = None  # a fresh, lazy discovery (reload_plugins loads everything)
    assert devicekit.device("mb_none:0").name == "mb_none:0"
    pending = [r.path for r in _registry._current().records if r._pending]
    assert other in pending and named not in pending
    assert devicekit.device("mb_props_error:1").name == "mb_props_error:1"
    assert not [r for r in _registry._current().records if r._pending]
    _assert_cpu_works()


# --------------------------------------------------------------------------
# Plugin_Initialize once per loaded library; paths are file-system paths.
# --------------------------------------------------------------------------

def _initialize_calls(path):
    # ctypes opens the same loaded object (same file), so it reads the
    # counter of the copy the SDK initialised.
    return ctypes.c_int.in_dll(ctypes.CDLL(str(path)), "misbehave_initialize_calls").value


def test_initialize_once_across_reload_and_hard_link(misbehaving_plugins, tmp_path,
                                                     plugin_path):
    target = _fresh_copy(misbehaving_plugins["none"], tmp_path / "p", "target.so")
    link = str(tmp_path / "p" / "link.so")
    os.link(target, link)
    plugin_path([target, link])
    by_path = {r.path: r for r in devicekit.plugins()}
    assert by_path[target].loaded
    assert by_path[link].error == f"'{link}' is the same library as '{target}', listed twice"
    devicekit.reload_plugins()
    devicekit.reload_plugins()
    plugin_path([link])  # the link alone: the library already loaded, not a new one
    [rec] = [r for r in devicekit.plugins() if r.path == link]
    assert rec.loaded and rec.probe == "loaded"
    assert rec.plugin.path == target  # the Plugin first loaded from the target
    assert devicekit.load_plugin(link).path == target
    assert _initialize_calls(target) == 1
    _assert_cpu_works()


def test_failure_after_initialize_is_repeated_not_reinitialised(misbehaving_plugins, tmp_path):
    # Device_Count fails after a successful Initialize. Loading again, by the
    # same path or a hard link, must repeat the error without a second
    # Initialize (the core is called directly: no probe in between).
    target = _fresh_copy(misbehaving_plugins["count_fails"], tmp_path / "p", "target.so")
    link = str(tmp_path / "p" / "link.so")
    os.link(target, link)
    messages = []
    for path in (target, target, link):
        with pytest.raises(PluginLoadError) as excinfo:
            _core.load_plugin(path)
        messages.append(str(excinfo.value))
    assert messages[0] == messages[1] == messages[2]
    assert "Device_Count failed [UNAVAILABLE]: misbehave.Device_Count: deliberate failure" \
        in messages[0]
    with pytest.raises(PluginLoadError) as excinfo:  # and through the public path
        devicekit.load_plugin(link)
    assert str(excinfo.value) == messages[0]
    assert _initialize_calls(target) == 1
    _assert_cpu_works()


def test_bare_file_name_in_plugin_path_is_the_file_in_the_current_folder(
        misbehaving_plugins, tmp_path):
    here, elsewhere = tmp_path / "here", tmp_path / "on_ld_library_path"
    _fresh_copy(misbehaving_plugins["none"], here, "libbare.so")
    _fresh_copy(misbehaving_plugins["props_error"], elsewhere, "libbare.so")
    code = textwrap.dedent("""
        import json
        import devicekit as dk
        [rec] = [r for r in dk.plugins() if r.source == "DEVICEKIT_PLUGIN_PATH"]
        direct = dk.load_plugin("libbare.so")
        print(json.dumps({"name": rec.name, "path": rec.path, "direct": direct.name}))
    """)
    out = _python(code, cwd=here, env={"DEVICEKIT_PLUGIN_PATH": "libbare.so",
                                       "LD_LIBRARY_PATH": str(elsewhere),
                                       "DEVICEKIT_PROBE_CACHE": str(tmp_path / "cache")})
    assert out == {"name": "mb_none", "path": str(here / "libbare.so"), "direct": "mb_none"}


def test_probe_that_cannot_start_is_that_plugins_load_error(misbehaving_plugins, tmp_path,
                                                           monkeypatch):
    monkeypatch.setenv("DEVICEKIT_PROBE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    lib = _fresh_copy(misbehaving_plugins["none"], tmp_path / "p")
    with pytest.raises(PluginLoadError) as excinfo:
        _registry._vet(lib)
    assert f"cannot load plugin '{lib}': the probe process (" in str(excinfo.value)
    assert "could not be started" in str(excinfo.value)
    monkeypatch.undo()
    _assert_cpu_works()


def test_unwritable_cache_is_said_once_and_the_plugin_still_loads(misbehaving_plugins, tmp_path,
                                                                  monkeypatch):
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    monkeypatch.setenv("DEVICEKIT_PROBE_CACHE", str(not_a_folder))
    monkeypatch.setattr(_registry, "_warned_cache", False)
    lib = _fresh_copy(misbehaving_plugins["none"], tmp_path / "p")
    with pytest.warns(RuntimeWarning, match=f"probe cache folder '{not_a_folder}' is not "
                                            f"writable.*DEVICEKIT_PROBE_CACHE"):
        assert _registry._vet(lib) == ("probed", "mb_none")
    with warnings.catch_warnings(record=True) as later:
        warnings.simplefilter("always")
        assert _registry._vet(lib) == ("probed", "mb_none")
    assert later == []  # once per process
    _assert_cpu_works()
