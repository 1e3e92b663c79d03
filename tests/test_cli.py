"""The ``devicekit`` command line, run as ``python -m devicekit`` in a subprocess
(so discovery starts fresh from the DEVICEKIT_PLUGIN_PATH each test gives it).

Needs: the reference CPU plugin; the broken-plugin tests also need a C compiler.
"""

from __future__ import annotations

import ctypes
import re

import pytest

import devicekit

# Must match tests/plugins/init_fails.c.
INIT_FAILS_MESSAGE = "acme driver 3.2 not found; install acme-driver>=3.2"


def _output(result) -> str:
    return result.stdout + result.stderr


def _assert_ok(result):
    assert result.returncode == 0, f"exit {result.returncode}\n{_output(result)}"


def _cpu_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if re.search(r"\bcpu\b", line)]


# --------------------------------------------------------------------------
# Needs: nothing but the SDK.
# --------------------------------------------------------------------------

def test_version_prints_the_package_version(run_cli):
    result = run_cli(["--version"])
    _assert_ok(result)
    assert re.search(rf"(?<![\w.]){re.escape(devicekit.__version__)}(?![\w.])", result.stdout), \
        result.stdout


def test_unknown_command_fails_cleanly(run_cli):
    result = run_cli(["no-such-command"])
    assert result.returncode not in (0, None)
    assert "Traceback" not in _output(result), _output(result)


# --------------------------------------------------------------------------
# Needs: the reference CPU plugin.
# --------------------------------------------------------------------------

def test_devices_lists_cpu_with_api_version_and_path(run_cli, cpu, api_version):
    result = run_cli(["devices"])
    _assert_ok(result)
    out = result.stdout
    assert "cpu:0" in out
    # The full library path, never shortened: it is how users find the binary.
    assert str(cpu.plugin.path) in out
    version = f"{api_version[0]}.{api_version[1]}"
    assert any(re.search(rf"(?<![\d.]){re.escape(version)}(?![\d.]*\d)", line)
               for line in _cpu_lines(out)), out
    assert cpu.plugin.version in out


# --------------------------------------------------------------------------
# Needs: the reference CPU plugin and a C compiler (bad plugins).
# --------------------------------------------------------------------------

def test_devices_exits_zero_and_shows_each_load_error(run_cli, cpu, bad_plugins, tmp_path,
                                                      api_version):
    ghost = tmp_path / "ghost.so"
    broken = [bad_plugins["init_fails"], bad_plugins["major_too_new"],
              bad_plugins["not_a_library"], ghost]
    result = run_cli(["devices"], plugin_path=broken)
    _assert_ok(result)  # a broken plugin is reported, never fatal
    out, everything = result.stdout, _output(result)

    # The good plugin is still listed in full.
    assert "cpu:0" in out and str(cpu.plugin.path) in out

    # Each broken plugin appears with its real cause.
    with pytest.raises(OSError) as dlopen_error:
        ctypes.CDLL(str(bad_plugins["not_a_library"]))
    causes = {
        "init_fails": INIT_FAILS_MESSAGE,
        "major_too_new": f"{api_version[0] + 1}.{api_version[1]}",
        "not_a_library": str(dlopen_error.value).rsplit(": ", 1)[-1],  # "invalid ELF header"
        "ghost": str(ghost),
    }
    for stem, cause in causes.items():
        assert stem in everything, f"{stem} not reported:\n{everything}"
        assert cause in everything, f"cause of {stem} ({cause!r}) not shown:\n{everything}"
    assert "Traceback" not in everything, everything


def test_devices_lists_a_working_path_plugin(run_cli, cpu, bad_plugins, api_version):
    result = run_cli(["devices"], plugin_path=[bad_plugins["errors_plugin"]])
    _assert_ok(result)
    out = result.stdout
    # errors_plugin loads fine (it only fails when used): name, version, device, path.
    assert "errplug" in out and "errplug:0" in out and "0.0.1" in out
    assert str(bad_plugins["errors_plugin"]) in out
    assert "cpu:0" in out
