"""Promise 1: a plugin built against device API 1.0 loads, unchanged, into
every DeviceKit 1.x, this one included.

The plugin (tests/fixtures/device_api_1_0/v1_0_plugin.c) is compiled against
the frozen 1.0 header copied verbatim from git history, not the current one.
Refusals of plugins *newer* than the SDK (major or minor, naming both versions
and what to install) are tests/test_loader.py's (major_too_new, minor_too_new).

Needs: a C compiler (skipped with the reason otherwise).
"""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

import devicekit

from conftest import REPO_ROOT, _find_c_compiler, compile_test_plugin

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "device_api_1_0"
FROZEN_HEADER = FIXTURE / "include" / "devicekit" / "device_api.h"
# sha256 of device_api.h at commit ed92c80 (the last with DK_API_MINOR 0).
FROZEN_SHA256 = "aa250f196ae5f9fe41382631304de2241b19ba1e71e4eed78ea2b340fae86e31"


def test_frozen_header_is_untouched():
    text = FROZEN_HEADER.read_bytes()
    assert hashlib.sha256(text).hexdigest() == FROZEN_SHA256, \
        "the frozen 1.0 header changed; it must stay byte-for-byte what 1.0 shipped"
    assert re.search(rb"^#define DK_API_MINOR 0$", text, re.M)


@pytest.fixture(scope="module")
def v1_0_library(tmp_path_factory):
    compiler = _find_c_compiler()
    if compiler is None:
        pytest.skip("no C compiler on PATH (tried $CC, cc, gcc, clang): cannot build the "
                    "device API 1.0 fixture plugin")
    out = tmp_path_factory.mktemp("abi10") / "abi10.so"
    return compile_test_plugin(compiler, FIXTURE / "v1_0_plugin.c",
                               FIXTURE / "include", out)


@pytest.fixture
def abi10(v1_0_library, plugin_path):
    plugin_path([v1_0_library])
    (record,) = [r for r in devicekit.plugins() if r.path == str(v1_0_library)]
    assert record.loaded, f"the 1.0 plugin was refused: {record.error_type}: {record.error}"
    return record


def test_v1_0_plugin_loads_as_1_0(abi10):
    assert abi10.name == "abi10"
    assert abi10.plugin.api_version == "1.0"
    assert devicekit.API_VERSION != "1.0"  # else this test proves nothing new


def test_add_float32_through_ops_add(abi10):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.full((3, 4), 0.5, dtype=np.float32)
    x = devicekit.tensor(a, device="abi10:0")
    y = devicekit.tensor(b, device="abi10:0")
    out = devicekit.ops.add(x, y)
    np.testing.assert_array_equal(out.numpy(), a + b)
    assert out.device.name == "abi10:0"


def test_ops_after_1_0_are_not_implemented(abi10):
    kernels = {k["op"]: k["implemented"] for k in abi10.plugin.kernels()}
    assert kernels["add"] is True
    assert kernels["neg"] is False and kernels["matmul"] is False
    x = devicekit.tensor(np.ones(3, dtype=np.float32), device="abi10:0")
    with pytest.raises(devicekit.NotImplementedByPlugin):
        devicekit.ops.mul(x, x)
