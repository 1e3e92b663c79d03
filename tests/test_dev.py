"""``devicekit dev``: its refusals and how it turns --run into a command.

The full loop (scaffold, edit a kernel, ``devicekit dev --run conformance``
sees the new kernel's cases pass) runs in tests/test_porting_guide.py. Here:
the exit codes that keep a vendor from testing the wrong binary, fast.
Needs: the installed SDK (the reference CPU plugin provides an installed
entry point to collide with); the build-failure case needs cmake.
"""

from __future__ import annotations

import shutil
import sys

import pytest

from devicekit import cli, dev


def project(root, name, cmake="project(x C)\n"):
    (root / "src").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text(f"cmake_minimum_required(VERSION 3.18)\n{cmake}")
    (root / "src" / "plugin_info.h").write_text(f'#define PLUGIN_NAME "{name}"\n')
    return root


def test_not_a_project(tmp_path, capsys):
    assert cli.main(["dev", str(tmp_path), "--run", "devices"]) == 3
    assert "is not a plugin project" in capsys.readouterr().err


def test_refuses_when_an_installed_copy_would_shadow_the_build(tmp_path, capsys):
    # 'cpu' is installed (the reference plugin's entry point): a development
    # build named cpu would lose to it at discovery.
    root = project(tmp_path / "p", "cpu")
    assert cli.main(["dev", str(root), "--run", "conformance"]) == 5
    err = capsys.readouterr().err
    assert "plugin 'cpu' is also installed" in err and "pip uninstall -y devicekit" in err
    assert not (root / "build").exists()  # refused before building anything


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
