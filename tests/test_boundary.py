"""Everything a plugin returns is checked at the boundary against the header's
rules (device_api.h), with an error naming the plugin, the call, the field,
the value and the rule; free text is decoded with replacement; error
messages are bounded; error objects are always destroyed; unknown error
codes keep their number. Each test also checks that cpu:0 still works.

Needs: a C compiler (tests/plugins/misbehave.c, one build per misbehaviour,
from the ``misbehaving_plugins`` fixture) and the reference CPU plugin.
"""

from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest

import devicekit
from devicekit import (DeviceError, OutOfMemoryError, PluginContractError, PluginLoadError,
                       _core)

# Must match tests/plugins/misbehave.c.
FAIL_SIZE = 1 << 30
LONG_MESSAGE_BYTES = 100 * 1024
MESSAGE_CAP = 64 * 1024


def _assert_cpu_works():
    total = devicekit.tensor([1.0, 2.0], device="cpu:0") + devicekit.tensor([10.0, 20.0],
                                                                           device="cpu:0")
    np.testing.assert_array_equal(total.numpy(), np.array([11.0, 22.0], np.float32))


def _counter(path, name):
    return ctypes.c_long.in_dll(ctypes.CDLL(str(path)), name).value


@pytest.fixture
def device_of(misbehaving_plugins):
    """``device_of(name)``: device 0 of the misbehave build ``name``, loaded
    (after its probe) into this process."""
    def get(name):
        plugin = devicekit.load_plugin(misbehaving_plugins[name])
        return plugin.devices[0]
    return get


# --------------------------------------------------------------------------
# Refused at load: the plugin is listed with the rule it broke.
# --------------------------------------------------------------------------

LOAD_REFUSALS = {
    "count_neg": "plugin 'mb_count_neg' Device_Count returned count=-1; the device API requires "
                 "0 <= count <= 4096 (device_api.h, DK_Device_Count_Args.count)",
    "count_max": "plugin 'mb_count_max' Device_Count returned count=2147483647; the device API "
                 "requires 0 <= count <= 4096 (device_api.h, DK_Device_Count_Args.count)",
    "name_empty": "Plugin_GetInfo returned name=''; the device API requires a non-empty "
                  "[a-z][a-z0-9_]* identifier",
    "name_bad": "Plugin_GetInfo returned name='Bad-Name'; the device API requires a non-empty "
                "[a-z][a-z0-9_]* identifier",
    "name_not_utf8": "Plugin_GetInfo returned name='\\xff\\xfe'; the device API requires a "
                     "non-empty [a-z][a-z0-9_]* identifier",
}


@pytest.mark.parametrize("name", sorted(LOAD_REFUSALS))
def test_forbidden_value_at_load_is_a_load_error(misbehaving_plugins, name):
    path = misbehaving_plugins[name]
    with pytest.raises(PluginLoadError) as excinfo:
        devicekit.load_plugin(path)
    assert type(excinfo.value) is PluginLoadError
    message = str(excinfo.value)
    assert message.startswith(f"cannot load plugin '{path}': "), message
    assert LOAD_REFUSALS[name] in message, message
    _assert_cpu_works()


@pytest.mark.parametrize("name", ["count_max", "name_not_utf8"])
def test_core_refuses_without_the_probe_too(misbehaving_plugins, name):
    # The checks live in the core itself (the probe runs the same code): no
    # std::bad_alloc for INT32_MAX devices, no UnicodeDecodeError for a name.
    with pytest.raises(PluginLoadError) as excinfo:
        _core.load_plugin(str(misbehaving_plugins[name]))
    assert LOAD_REFUSALS[name] in str(excinfo.value)
    _assert_cpu_works()


def test_refused_plugins_do_not_stop_discovery(misbehaving_plugins, plugin_path):
    plugin_path([misbehaving_plugins[n] for n in sorted(LOAD_REFUSALS)]
                + [misbehaving_plugins["text_not_utf8"]])
    by_path = {r.path: r for r in devicekit.plugins()}
    for name, rule in LOAD_REFUSALS.items():
        rec = by_path[str(misbehaving_plugins[name])]
        assert not rec.loaded and rec.error_type == "PluginLoadError"
        assert rule in rec.error, rec.error
    assert by_path[str(misbehaving_plugins["text_not_utf8"])].loaded
    _assert_cpu_works()


# --------------------------------------------------------------------------
# Device properties: a bad value is that device's error.
# --------------------------------------------------------------------------

@pytest.mark.parametrize("name, value", [("align_0", 0), ("align_48", 48)])
def test_alignment_must_be_a_power_of_two_of_16_or_more(device_of, name, value):
    device = device_of(name)
    expected = (f"plugin 'mb_{name}' (device mb_{name}:0) Device_GetProperties returned "
                f"alignment={value}; the device API requires a power of two >= 16 "
                f"(device_api.h, DK_Device_GetProperties_Args.alignment)")
    with pytest.raises(PluginContractError) as excinfo:
        _ = device.properties
    assert str(excinfo.value) == expected
    assert isinstance(excinfo.value, DeviceError) and excinfo.value.code is None
    with pytest.raises(PluginContractError) as excinfo:  # nothing is allocated against it
        device.alloc(256)
    assert str(excinfo.value) == expected
    _assert_cpu_works()


def test_free_text_that_is_not_utf8_is_decoded_with_replacement(device_of):
    device = device_of("text_not_utf8")
    assert device.plugin.vendor == b"Acme \xff Corp".decode("utf-8", "replace")
    assert device.properties["name"] == b"X1 \xc3( rev \xed\xa0\x80".decode("utf-8", "replace")
    _assert_cpu_works()


# --------------------------------------------------------------------------
# Results of runtime calls.
# --------------------------------------------------------------------------

def test_allocation_success_with_null_pointer_is_refused(device_of):
    device = device_of("alloc_null")
    with pytest.raises(PluginContractError) as excinfo:
        device.alloc(256)
    assert str(excinfo.value) == (
        "plugin 'mb_alloc_null' (device mb_alloc_null:0) Memory_Allocate returned ptr=NULL on "
        "success (size=256); the device API requires a non-NULL pointer for size > 0, or "
        "DK_ERROR_OUT_OF_MEMORY (device_api.h, DK_Memory_Allocate_Args.ptr)")
    assert device.alloc(0).ptr == 0  # size 0 yields NULL, as the header says
    with pytest.raises(PluginContractError, match="Memory_Allocate returned ptr=NULL"):
        devicekit.tensor([1.0, 2.0], device=device)  # the caching allocator's path too
    _assert_cpu_works()


def test_misaligned_allocation_is_freed_and_refused(device_of):
    device = device_of("alloc_misaligned")
    with pytest.raises(PluginContractError) as excinfo:
        device.alloc(256)
    message = str(excinfo.value)
    assert message.startswith("plugin 'mb_alloc_misaligned' (device mb_alloc_misaligned:0) "
                              "Memory_Allocate returned ptr=0x"), message
    assert message.endswith("(size=256); the device API requires a pointer aligned to the "
                            "device's alignment (64 bytes) (device_api.h, "
                            "DK_Memory_Allocate_Args.ptr)"), message
    assert device.memory_stats()["num_allocs"] == 0  # the refused block was given back
    _assert_cpu_works()


def test_create_success_with_null_stream_or_event_is_refused(device_of):
    device = device_of("stream_null")
    with pytest.raises(PluginContractError) as excinfo:
        device.stream()
    assert str(excinfo.value) == (
        "plugin 'mb_stream_null' (device mb_stream_null:0) Stream_Create returned stream=NULL "
        "on success; the device API requires a non-NULL object whenever the call returns no "
        "error (device_api.h, DK_Stream_Create_Args.stream)")
    with pytest.raises(PluginContractError, match=r"Event_Create returned event=NULL on success"):
        device.event()
    # The default stream of tensor work: never NULL (which Memcpy reads as
    # "synchronous"), on every attempt.
    for _ in range(2):
        with pytest.raises(PluginContractError, match=r"Stream_Create returned stream=NULL"):
            devicekit.tensor([1.0, 2.0], device=device)
    _assert_cpu_works()


# --------------------------------------------------------------------------
# Error objects: bounded messages, always destroyed, codes kept.
# --------------------------------------------------------------------------

def _failing_allocation(misbehaving_plugins, name):
    path = misbehaving_plugins[name]
    device = devicekit.load_plugin(path).devices[0]
    created = _counter(path, "misbehave_errors_created")
    destroyed = _counter(path, "misbehave_errors_destroyed")
    with pytest.raises(DeviceError) as excinfo:
        device.alloc(FAIL_SIZE)
    assert _counter(path, "misbehave_errors_created") == created + 1
    assert _counter(path, "misbehave_errors_destroyed") == destroyed + 1  # never leaked
    return excinfo.value


def test_message_size_past_the_string_is_not_trusted(misbehaving_plugins):
    # Error_Message claims 2^40 bytes; the SDK stops at the real end.
    exc = _failing_allocation(misbehaving_plugins, "msg_huge")
    assert type(exc) is OutOfMemoryError and exc.code == "OUT_OF_MEMORY"
    assert str(exc) == ("plugin 'mb_msg_huge' (device mb_msg_huge:0) Memory_Allocate failed "
                        "[OUT_OF_MEMORY]: misbehave.Memory_Allocate: message_size lies")
    _assert_cpu_works()


def test_long_message_is_cut_at_64_kib(misbehaving_plugins):
    exc = _failing_allocation(misbehaving_plugins, "msg_long")
    prefix = "plugin 'mb_msg_long' (device mb_msg_long:0) Memory_Allocate failed [OUT_OF_MEMORY]: "
    assert str(exc) == prefix + "x" * MESSAGE_CAP + f" [... cut at {MESSAGE_CAP} bytes]"
    assert LONG_MESSAGE_BYTES > MESSAGE_CAP
    _assert_cpu_works()


def test_unknown_error_code_keeps_its_number(misbehaving_plugins):
    exc = _failing_allocation(misbehaving_plugins, "unknown_code")
    assert type(exc) is DeviceError
    assert exc.code == "unknown error code 1234"
    assert str(exc) == ("plugin 'mb_unknown_code' (device mb_unknown_code:0) Memory_Allocate "
                        "failed [unknown error code 1234]: misbehave.Memory_Allocate: a code "
                        "from the future")
    _assert_cpu_works()


# --------------------------------------------------------------------------
# devicekit devices: every section, valid JSON, exit 0, whatever one plugin
# or device does.
# --------------------------------------------------------------------------

def test_devices_command_survives_every_misbehaviour(misbehaving_plugins, run_cli, monkeypatch):
    monkeypatch.setenv("DEVICEKIT_PROBE_TIMEOUT", "5")
    every = [misbehaving_plugins[n] for n in sorted(misbehaving_plugins)]
    result = run_cli(["devices", "--json"], plugin_path=every)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    listed = json.loads(result.stdout)
    assert [r["loaded"] for r in listed if r["source"] == "entry point 'cpu'"] == [True]
    items = {r["path"]: r for r in listed}
    props = items[str(misbehaving_plugins["props_error"])]
    assert props["loaded"]
    assert [d["device"] for d in props["devices"]] == ["mb_props_error:0", "mb_props_error:1"]
    assert props["devices"][0]["error"] is None and props["devices"][0]["alignment"] == 64
    assert props["devices"][1]["error"] == (
        "plugin 'mb_props_error' (device mb_props_error:1) Device_GetProperties failed "
        "[INTERNAL]: misbehave.Device_GetProperties: device 1 is broken")
    align = items[str(misbehaving_plugins["align_48"])]
    assert align["loaded"] and align["devices"][0]["error_type"] == "PluginContractError"
    for name in ("segv_getapi", "hang_init", "exit_init", "count_max", "name_not_utf8"):
        item = items[str(misbehaving_plugins[name])]
        assert not item["loaded"] and item["error"], (name, item)

    result = run_cli(["devices"], plugin_path=every)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    out = result.stdout
    for section in ("Plugins", "Devices", "Device errors (", "Load errors ("):
        assert section in out, f"{section!r} missing:\n{out}"
    assert "device 1 is broken" in out and "alignment=48" in out
    assert "SIGSEGV" in out and "did not finish within 5 s" in out
    assert b"Acme \xff Corp".decode("utf-8", "replace") in out
    _assert_cpu_works()
