"""Plugin loading and discovery: every way a plugin can be broken gives its own
error class and its real cause, never a crash, and never takes a good plugin
down with it: one broken plugin never breaks the others.

The bad plugins are built from tests/plugins/*.c by the ``bad_plugins`` fixture.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import HUNG_S

import devicekit
from devicekit import (DeviceError, DeviceKitError, OutOfMemoryError, PluginLoadError,
                       PluginVersionError)

# Must match tests/plugins/init_fails.c and errors_plugin.c.
INIT_FAILS_MESSAGE = "acme driver 3.2 not found; install acme-driver>=3.2"
OOM_MESSAGE = ("errors_plugin.Memory_Allocate: deliberate out-of-memory "
               "(requests of 1 GiB or more always fail)")
ADD_MESSAGE = "errors_plugin.add: deliberate failure"
ERRORS_PLUGIN_NAME = "errplug"  # what errors_plugin.c reports from Plugin_GetInfo

# Every bad plugin that must be refused, and the exact class it must raise.
REFUSED = {
    "not_a_library": PluginLoadError,
    "no_entry": PluginLoadError,
    "major_too_new": PluginVersionError,
    "major_too_old": PluginVersionError,
    "minor_too_new": PluginVersionError,
    "small_struct": PluginVersionError,
    "init_fails": PluginLoadError,
}


def _dlerror(path) -> str:
    """What dlopen itself says about ``path`` (ctypes passes dlerror through)."""
    with pytest.raises(OSError) as excinfo:
        ctypes.CDLL(str(path))
    return str(excinfo.value)


def _expected_fragments(name, path, api_version):
    """The pieces of text each refusal's message must contain."""
    major, minor = api_version
    sdk = f"{major}.{minor}"
    if name == "not_a_library":
        return [_dlerror(path)]
    if name == "no_entry":
        return ["DK_GetApi", path.stem]
    if name == "major_too_new":
        return [f"{major + 1}.{minor}", sdk, "newer", "install"]
    if name == "major_too_old":
        return [f"{major - 1}.{minor}", sdk, "older", "rebuild"]
    if name == "minor_too_new":
        return [f"{major}.{minor + 1}", sdk, "newer", "install"]
    if name == "small_struct":
        lib = ctypes.CDLL(str(path))
        claimed = ctypes.c_size_t.in_dll(lib, "small_struct_claimed_size").value
        expected = ctypes.c_size_t.in_dll(lib, "small_struct_expected_size").value
        assert claimed < expected
        return [str(claimed), str(expected)]
    if name == "init_fails":
        return [INIT_FAILS_MESSAGE]
    raise AssertionError(name)


def _check_message(message, name, path, api_version):
    for fragment in _expected_fragments(name, path, api_version):
        # Case-insensitive for the words ("newer", "install"), exact otherwise;
        # numbers must stand alone ("1.0" must not match inside "11.0").
        if re.fullmatch(r"[\d.]+", fragment):
            assert re.search(rf"(?<![\d.]){re.escape(fragment)}(?![\d.]*\d)", message), \
                f"{name}: {fragment!r} not in {message!r}"
        elif fragment.isalpha():
            assert fragment in message.lower(), f"{name}: {fragment!r} not in {message!r}"
        else:
            assert fragment in message, f"{name}: {fragment!r} not in {message!r}"


def _env_without_plugin_settings():
    """os.environ without DEVICEKIT_* settings, except the probe cache folder
    conftest chose (tests never write to the user's cache)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("DEVICEKIT_") or k == "DEVICEKIT_PROBE_CACHE"}


def _records_by_path(records):
    return {os.path.realpath(str(r.path)): r for r in records}


# --------------------------------------------------------------------------
# Needs: a C compiler (bad plugins). Loads them one at a time.
# --------------------------------------------------------------------------

def test_bad_plugins_do_not_crash_a_process(bad_plugins, run_python):
    # Every refusal in one fresh process: a crash in any of them shows up here
    # as a signal exit code rather than taking the whole pytest run down.
    code = textwrap.dedent(f"""
        import devicekit
        for path in {[str(p) for n, p in sorted(bad_plugins.items()) if n in REFUSED]!r}:
            try:
                devicekit.load_plugin(path)
            except devicekit.DeviceKitError as exc:
                print(type(exc).__name__)
            else:
                print("LOADED", path)
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stdout + result.stderr
    expected = [REFUSED[n].__name__ for n in sorted(bad_plugins) if n in REFUSED]
    assert result.stdout.split() == expected, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_bad_plugin_error_class_and_cause(bad_plugins, api_version, name):
    path = bad_plugins[name]
    with pytest.raises(DeviceKitError) as excinfo:
        devicekit.load_plugin(path)
    assert type(excinfo.value) is REFUSED[name], \
        f"{name}: got {type(excinfo.value).__name__}: {excinfo.value}"
    _check_message(str(excinfo.value), name, path, api_version)


@pytest.mark.parametrize("name", ["major_too_new", "major_too_old", "minor_too_new",
                                  "small_struct"])
def test_version_errors_name_the_plugin(bad_plugins, name):
    # Version checks run before Plugin_GetInfo may be called, so the file is
    # all the SDK can name.
    path = bad_plugins[name]
    with pytest.raises(PluginVersionError) as excinfo:
        devicekit.load_plugin(path)
    assert path.stem in str(excinfo.value)


def test_major_too_new_says_which_devicekit_to_install(bad_plugins):
    with pytest.raises(PluginVersionError) as excinfo:
        devicekit.load_plugin(bad_plugins["major_too_new"])
    # Names the package to install (e.g. "install devicekit>=2", or "install a
    # devicekit release that supports device API 2.x"), not just "upgrade".
    assert re.search(r"\binstall\b.*\bdevicekit\b", str(excinfo.value), re.I), \
        str(excinfo.value)


def test_missing_file_is_a_load_error(tmp_path):
    ghost = tmp_path / "ghost.so"
    with pytest.raises(PluginLoadError) as excinfo:
        devicekit.load_plugin(ghost)
    assert type(excinfo.value) is PluginLoadError
    assert str(ghost) in str(excinfo.value)


def test_a_refused_plugin_can_be_retried(bad_plugins):
    # Nothing is left half-loaded: the same failure, with the same cause, again.
    messages = []
    for _ in range(2):
        with pytest.raises(PluginLoadError) as excinfo:
            devicekit.load_plugin(bad_plugins["init_fails"])
        messages.append(str(excinfo.value))
    assert messages[0] == messages[1]
    assert INIT_FAILS_MESSAGE in messages[1]


def test_load_plugin_reports_plugin_info(bad_plugins, api_version):
    plugin = devicekit.load_plugin(bad_plugins["errors_plugin"])
    assert plugin.name == ERRORS_PLUGIN_NAME
    assert plugin.vendor == "DeviceKit tests"
    assert plugin.version == "0.0.1"
    assert plugin.api_version == f"{api_version[0]}.{api_version[1]}"
    assert os.path.samefile(plugin.path, bad_plugins["errors_plugin"])
    assert [d.name for d in plugin.devices] == [f"{ERRORS_PLUGIN_NAME}:0"]
    props = plugin.devices[0].properties
    assert props["name"] == "errplug test device (host memory)"
    assert props["total_memory"] == 1 << 40
    assert props["alignment"] == 64
    assert len(props["dtypes"]) == 9 and {"float32", "bfloat16", "int64"} <= set(props["dtypes"])


# --------------------------------------------------------------------------
# Needs: a C compiler, discovery through DEVICEKIT_PLUGIN_PATH.
# --------------------------------------------------------------------------

@pytest.fixture
def errplug(bad_plugins, plugin_path):
    plugin_path([bad_plugins["errors_plugin"]])
    return devicekit.device(f"{ERRORS_PLUGIN_NAME}:0")


def test_allocation_error_is_out_of_memory_with_plugin_message(errplug):
    before = errplug.memory_stats()
    with pytest.raises(OutOfMemoryError) as excinfo:
        errplug.alloc(4 << 30)  # above errors_plugin's 1 GiB limit, below total_memory
    exc = excinfo.value
    assert isinstance(exc, MemoryError) and isinstance(exc, DeviceError)
    assert exc.code == "OUT_OF_MEMORY"
    assert OOM_MESSAGE in str(exc)
    # A refused allocation changes no statistic (device API, Memory_Allocate).
    after = errplug.memory_stats()
    for key in ("bytes_in_use", "num_allocs", "allocated_bytes"):
        assert after[key] == before[key], key


def test_tensor_allocation_error_is_out_of_memory(errplug):
    with pytest.raises(OutOfMemoryError) as excinfo:
        devicekit.tensor(np.zeros(1 << 28, np.float32), device=errplug)  # exactly 1 GiB
    assert OOM_MESSAGE in str(excinfo.value)


def test_kernel_error_is_device_error_naming_the_op(errplug):
    a = devicekit.tensor(np.arange(4, dtype=np.float32), device=errplug)
    b = devicekit.tensor(np.ones(4, dtype=np.float32), device=errplug)
    with pytest.raises(DeviceError) as excinfo:
        devicekit.ops.add(a, b)
    exc = excinfo.value
    assert not isinstance(exc, OutOfMemoryError)
    assert exc.code == "INVALID_ARGUMENT"
    assert ADD_MESSAGE in str(exc)
    # The SDK adds which op failed (the plugin's own text mentions "add" too,
    # so look outside it).
    assert re.search(r"\badd\b", str(exc).replace(ADD_MESSAGE, "")), str(exc)
    with pytest.raises(DeviceError) as excinfo:
        a + b
    assert ADD_MESSAGE in str(excinfo.value)


# --------------------------------------------------------------------------
# Needs: a C compiler and the reference CPU plugin (entry point).
# --------------------------------------------------------------------------

def test_discovery_reports_every_bad_plugin_and_cpu_still_works(
        bad_plugins, plugin_path, api_version):
    plugin_path(bad_plugins.values())
    records = devicekit.plugins()  # must not raise
    by_path = _records_by_path(records)
    for name, exc_class in REFUSED.items():
        record = by_path.get(os.path.realpath(bad_plugins[name]))
        assert record is not None, f"{name} missing from plugins(): {records}"
        assert record.plugin is None
        assert record.source == "DEVICEKIT_PLUGIN_PATH"
        assert record.name == name  # refused before GetInfo: the file stem
        assert record.error_type == exc_class.__name__, (name, record.error)
        _check_message(record.error, name, bad_plugins[name], api_version)

    good = by_path[os.path.realpath(bad_plugins["errors_plugin"])]
    assert good.error is None and good.error_type is None
    assert good.name == ERRORS_PLUGIN_NAME and good.plugin.name == ERRORS_PLUGIN_NAME

    [cpu] = [r for r in records if r.source == "entry point 'cpu'"]
    assert cpu.error is None and cpu.plugin is not None
    names = {d.name for d in devicekit.devices()}
    assert {"cpu:0", f"{ERRORS_PLUGIN_NAME}:0"} <= names
    total = devicekit.tensor([1.0, 2.0, 3.0], device="cpu:0") + \
        devicekit.tensor([10.0, 20.0, 30.0], device="cpu:0")
    np.testing.assert_array_equal(total.numpy(), np.array([11.0, 22.0, 33.0], np.float32))


def test_missing_file_in_path_is_reported_not_raised(tmp_path, plugin_path):
    ghost = tmp_path / "ghost.so"
    plugin_path([ghost])
    by_path = _records_by_path(devicekit.plugins())
    record = by_path[os.path.realpath(ghost)]
    assert record.name == "ghost"
    assert record.error_type == "PluginLoadError"
    assert str(ghost) in record.error
    assert "cpu:0" in {d.name for d in devicekit.devices()}


def test_folder_in_path_contributes_every_so(bad_plugins, tmp_path, plugin_path):
    folder = tmp_path / "plugins"
    folder.mkdir()
    for name in ("errors_plugin", "minor_too_new", "not_a_library"):
        shutil.copy(bad_plugins[name], folder)
    (folder / "README.txt").write_text("not a plugin, and not named like one\n")
    plugin_path([folder])
    from_folder = [r for r in devicekit.plugins()
                   if os.path.dirname(os.path.realpath(str(r.path))) == os.path.realpath(folder)]
    assert sorted(os.path.basename(str(r.path)) for r in from_folder) == \
        ["errors_plugin.so", "minor_too_new.so", "not_a_library.so"]
    errors = {os.path.basename(str(r.path)): r.error_type for r in from_folder}
    assert errors == {"errors_plugin.so": None, "minor_too_new.so": "PluginVersionError",
                      "not_a_library.so": "PluginLoadError"}
    assert f"{ERRORS_PLUGIN_NAME}:0" in {d.name for d in devicekit.devices()}


def test_reload_plugins_forgets_removed_paths(bad_plugins, plugin_path):
    plugin_path([bad_plugins["errors_plugin"]])
    assert f"{ERRORS_PLUGIN_NAME}:0" in {d.name for d in devicekit.devices()}
    plugin_path([])
    assert f"{ERRORS_PLUGIN_NAME}:0" not in {d.name for d in devicekit.devices()}
    with pytest.raises(devicekit.DeviceNotFoundError):
        devicekit.device(f"{ERRORS_PLUGIN_NAME}:0")


@pytest.mark.parametrize("var, value", [("DEVICEKIT_CPU_THREADS", "two"),
                                        ("DEVICEKIT_CPU_THREADS", "0"),
                                        ("DEVICEKIT_CPU_DEVICES", "99"),
                                        ("DEVICEKIT_CPU_MEMORY_BYTES", "-5"),
                                        ("DEVICEKIT_CPU_ISA", "sse9")])
def test_cpu_plugin_refuses_a_malformed_setting_at_load(var, value):
    """A setting the reference plugin cannot use fails its Initialize with the
    variable, the value and the accepted range, instead of being ignored."""
    env = _env_without_plugin_settings()
    env[var] = value
    result = subprocess.run([sys.executable, "-m", "devicekit", "devices", "--json"], env=env,
                            capture_output=True, text=True, timeout=HUNG_S)
    assert result.returncode == 0, result.stderr
    cpu = [r for r in json.loads(result.stdout) if r["name"] == "cpu"]
    assert len(cpu) == 1 and not cpu[0]["loaded"], cpu
    assert f"{var}='{value}'" in cpu[0]["error"] and "expected" in cpu[0]["error"], cpu[0]["error"]


def test_operands_on_different_devices_are_refused_with_both_named():
    """With two CPU devices, an op mixing them raises before any launch,
    naming the op and each operand's device."""
    code = textwrap.dedent("""
        import devicekit as dk
        a = dk.tensor([1.0, 2.0], device="cpu:0")
        b = dk.tensor([1.0, 2.0], device="cpu:1")
        for name, f in [("add", lambda: a + b), ("mul", lambda: dk.ops.mul(a, b)),
                        ("where", lambda: dk.ops.where(a > 0, a, b)),
                        ("matmul", lambda: a @ b)]:
            try:
                f()
            except dk.InvalidArgumentError as e:
                assert name in str(e) and "cpu:0" in str(e) and "cpu:1" in str(e), str(e)
            else:
                raise SystemExit(f"{name}: no error for operands on cpu:0 and cpu:1")
        print("ok")
    """)
    env = _env_without_plugin_settings()
    env["DEVICEKIT_CPU_DEVICES"] = "2"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=HUNG_S)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr
