"""``devicekit dev``: its refusals and how it turns --run into a command.

The full loop (scaffold, edit a kernel, ``devicekit dev --run conformance``
sees the new kernel's cases pass) runs in tests/test_porting_guide.py. Here:
the exit codes, and that a fresh build takes precedence over an installed
copy of the same plugin (and says so), fast.
Needs: the installed SDK (the reference CPU plugin provides an installed
entry point to shadow); a C compiler for the shadowing cases, and cmake for
the ones that build.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import BAD_PLUGIN_SOURCES, DEVICE_API_INCLUDE, _find_c_compiler, \
    compile_test_plugin
from conftest import HUNG_S
from devicekit import cli, dev

# A valid one-device host-memory plugin that calls itself "cpu", like the
# installed reference plugin: misbehave.c without a misbehaviour.
FAKE_CPU_FLAGS = ('-DBP_PLUGIN_NAME="cpu"',)
FAKE_CPU_DEVICE = "cpu test device (host memory)"  # its Device_GetProperties name


def project(root, name, cmake="project(x C)\n"):
    (root / "src").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text(f"cmake_minimum_required(VERSION 3.18)\n{cmake}")
    (root / "src" / "plugin_info.h").write_text(f'#define PLUGIN_NAME "{name}"\n')
    return root


def test_not_a_project(tmp_path, capsys):
    assert cli.main(["dev", str(tmp_path), "--run", "devices"]) == 3
    assert "is not a plugin project" in capsys.readouterr().err


def _python(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=HUNG_S)


def test_override_takes_precedence_over_the_installed_plugin(tmp_path):
    """DEVICEKIT_PLUGIN_OVERRIDE (what devicekit dev sets): the build named
    there provides 'cpu', lazily (device("cpu:0") first) and in a full
    listing; the installed reference plugin is not loaded and its record
    names the build that shadows it. Without the override, the same build
    in DEVICEKIT_PLUGIN_PATH loses to the installed one, as before."""
    cc = _find_c_compiler()
    if cc is None:
        pytest.skip("no C compiler on PATH")
    lib = compile_test_plugin(cc, BAD_PLUGIN_SOURCES / "misbehave.c", DEVICE_API_INCLUDE,
                              tmp_path / "libdevicekit_cpu.so", flags=FAKE_CPU_FLAGS)
    lazy = _python("import devicekit as dk; print(dk.device('cpu:0').properties['name'])",
                   DEVICEKIT_PLUGIN_OVERRIDE=str(lib))
    assert lazy.stdout.strip() == FAKE_CPU_DEVICE, lazy.stderr
    listing = _python("import json, devicekit as dk; print(json.dumps([[r.name, r.source, "
                      "r.path, r.loaded, r.error] for r in dk.plugins()]))",
                      DEVICEKIT_PLUGIN_OVERRIDE=str(lib))
    records = json.loads(listing.stdout)
    loaded = [r for r in records if r[0] == "cpu" and r[3]]
    assert [r[1:3] for r in loaded] == [["DEVICEKIT_PLUGIN_OVERRIDE", str(lib)]]
    installed = [r for r in records if r[1] == "entry point 'cpu'"]
    assert len(installed) == 1 and not installed[0][3]
    assert f"is shadowed by the development build '{lib}' (DEVICEKIT_PLUGIN_OVERRIDE)" \
        in installed[0][4]
    plain = _python("import devicekit as dk; print(dk.device('cpu:0').properties['name'])",
                    DEVICEKIT_PLUGIN_PATH=str(lib))
    assert plain.stdout.strip() != FAKE_CPU_DEVICE, plain.stdout


def test_dev_build_shadows_the_installed_plugin_and_says_which(tmp_path, capfd):
    """devicekit dev on a project named like an installed plugin: builds,
    prints the build (path, sha256, build time) and the installed library it
    shadows (the same three), and the command runs against the build."""
    if shutil.which("cmake") is None or _find_c_compiler() is None:
        pytest.skip("needs cmake and a C compiler")
    src = BAD_PLUGIN_SOURCES.as_posix()
    root = project(tmp_path / "p", "cpu", cmake=(
        "project(fake_cpu C)\n"
        f'add_library(devicekit_cpu MODULE "{src}/misbehave.c")\n'
        f'target_include_directories(devicekit_cpu PRIVATE "{DEVICE_API_INCLUDE.as_posix()}")\n'
        'target_compile_definitions(devicekit_cpu PRIVATE BP_PLUGIN_NAME="cpu")\n'))
    code = "import devicekit as dk; print('DEVICE', dk.device('cpu:0').properties['name'])"
    assert cli.main(["dev", str(root), "--jobs", "1", "--run", sys.executable, "-c",
                     code]) == 0
    out, err = capfd.readouterr()
    assert f"DEVICE {FAKE_CPU_DEVICE}" in out, err
    lib = root / "build" / "dev" / "libdevicekit_cpu.so"
    digest = hashlib.sha256(lib.read_bytes()).hexdigest()[:16]
    assert f"devicekit dev: cpu -> {lib} (sha256 {digest}, built " in err
    import devicekit_cpu
    installed = os.path.realpath(devicekit_cpu.library_path())
    with open(installed, "rb") as f:
        installed_digest = hashlib.sha256(f.read()).hexdigest()[:16]
    assert ("devicekit dev: it shadows the installed devicekit " in err
            and f": {installed} (sha256 {installed_digest}, built " in err), err
    assert f"DEVICEKIT_PLUGIN_OVERRIDE={lib}" in err


def test_build_failure(tmp_path, capsys):
    if shutil.which("cmake") is None:
        pytest.skip("no cmake on PATH")
    root = project(tmp_path / "p", "zzz_dev", cmake='message(FATAL_ERROR "boom")\n')
    assert cli.main(["dev", str(root), "--run", "devices"]) == 4
    assert "failed with exit code" in capsys.readouterr().err


def test_run_becomes_a_command_against_the_fresh_build():
    py = [sys.executable, "-m", "devicekit"]
    assert dev.command_for(["conformance", "-k", "add"], "acme") == [
        *py, "conformance", "--device", "acme:0", "-k", "add"]
    assert dev.command_for(["conformance", "--device=acme:1"], "acme") == [
        *py, "conformance", "--device=acme:1"]
    assert dev.command_for(["bench", "--op", "add"], "acme") == [
        *py, "bench", "--device", "acme:0", "--op", "add"]
    assert dev.command_for(["devices"], "acme") == [*py, "devices"]
    assert dev.command_for(["python", "-m", "pytest", "tests"], "acme") == [
        "python", "-m", "pytest", "tests"]
    assert dev.command_for([], "acme") == []
