"""The optional device API parts (since 1.5) at load time: the extension chain.

Each variant of tests/plugins/ext_chain.c builds a chain that is right or
wrong in one way. A malformed known part is a load error naming the plugin,
the struct and the cause; an unknown type is skipped; a plugin older than 1.5
reports every part absent; a plugin without the collectives part gives the
"not implemented" error from devicekit.distributed.

Needs: a C compiler (skipped with the reason otherwise).
"""

from __future__ import annotations

import json

import pytest

import devicekit
from conftest import DEVICE_API_INCLUDE, REPO_ROOT, _find_c_compiler, compile_test_plugin
from devicekit import NotImplementedByPlugin, PluginLoadError, PluginVersionError

SOURCE = REPO_ROOT / "tests" / "plugins" / "ext_chain.c"
VARIANTS = {"valid": 0, "small": 1, "null_fn": 2, "twice": 3, "loop": 4, "unknown_only": 5,
            "api_1_4": 6}


@pytest.fixture(scope="module")
def ext_plugins(tmp_path_factory):
    compiler = _find_c_compiler()
    if compiler is None:
        pytest.skip("no C compiler on PATH (tried $CC, cc, gcc, clang): "
                    "tests/plugins/ext_chain.c cannot be built")
    out = tmp_path_factory.mktemp("ext_chain")
    return {name: compile_test_plugin(compiler, SOURCE, DEVICE_API_INCLUDE, out / f"ext_{name}.so",
                                      flags=(f"-DEXT_VARIANT={n}",
                                             f'-DBP_PLUGIN_NAME="ext_{name}"'))
            for name, n in VARIANTS.items()}


def test_valid_chain_reports_its_parts_and_skips_an_unknown_type(ext_plugins):
    plugin = devicekit.load_plugin(ext_plugins["valid"])
    assert list(plugin.parts) == ["collectives", "graphs"]
    assert devicekit.distributed.is_available(plugin.devices[0])


def test_only_an_unknown_type_loads_with_no_part(ext_plugins):
    plugin = devicekit.load_plugin(ext_plugins["unknown_only"])
    assert list(plugin.parts) == []


def test_a_1_4_plugin_reports_the_parts_absent(ext_plugins):
    # Its chain holds a collectives struct, but 1.4 has no such part: never read.
    plugin = devicekit.load_plugin(ext_plugins["api_1_4"])
    assert plugin.api_version == "1.4"
    assert list(plugin.parts) == []
    dev = plugin.devices[0]
    assert not devicekit.distributed.is_available(dev)
    for call in (lambda: devicekit.distributed.unique_id(dev),
                 lambda: devicekit.distributed.Communicator(b"\0" * 128, 1, 0, dev)):
        with pytest.raises(NotImplementedByPlugin) as excinfo:
            call()
        msg = str(excinfo.value)
        assert "not implemented: the plugin has no collectives part" in msg, msg
        assert "ext_api_1_4" in msg, msg


@pytest.mark.parametrize("name,error,fragments", [
    ("small", PluginVersionError, ["DK_Collectives", "expected at least"]),
    ("null_fn", PluginLoadError, ["DK_Collectives.Coll_Run is NULL"]),
    ("twice", PluginLoadError, ["DK_Collectives extension is listed twice"]),
    ("loop", PluginLoadError, ["extension list loops"]),
])
def test_a_malformed_chain_is_a_load_error_with_its_cause(ext_plugins, name, error, fragments):
    path = ext_plugins[name]
    with pytest.raises(error) as excinfo:
        devicekit.load_plugin(path)
    msg = str(excinfo.value)
    assert str(path) in msg, msg
    for fragment in fragments:
        assert fragment in msg, msg


def test_devices_command_shows_the_parts(ext_plugins, run_cli):
    result = run_cli(["devices", "--json"],
                     plugin_path=[ext_plugins["valid"], ext_plugins["api_1_4"]])
    assert result.returncode == 0, result.stderr
    parts = {r["name"]: r.get("parts") for r in json.loads(result.stdout) if r["loaded"]}
    assert parts["ext_valid"] == ["collectives", "graphs"]
    assert parts["ext_api_1_4"] == []
    text = run_cli(["devices"], plugin_path=[ext_plugins["valid"], ext_plugins["api_1_4"]])
    assert "Optional parts" in text.stdout, text.stdout
    section = text.stdout.split("Optional parts", 1)[1].split("\n\n", 1)[0]
    rows = {line.split()[0]: line.split()[1:] for line in section.splitlines()
            if line.startswith("ext_")}
    assert rows["ext_api_1_4"][-2:] == ["absent", "absent"], text.stdout
    assert rows["ext_valid"][-2:] == ["yes", "yes"], text.stdout
