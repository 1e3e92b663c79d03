"""``devicekit new``: render the plugin templates into a temp dir and check the
tree, the contents and every bad-input path (STYLE item 9: templates are
tested by rendering). Building and loading the result is
tests/test_plugin_journey.py; here at most a syntax-only compile.

Needs: the installed SDK. The compile check also needs a C compiler (skipped
with the reason otherwise).
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from devicekit import cli, scaffold

from conftest import _find_c_compiler

EXPECTED_TREE = {
    ".gitignore",
    ".github/workflows/ci.yml",
    "CMakeLists.txt",
    "README.md",
    "exports.map",
    "pyproject.toml",
    "python/devicekit_acme/__init__.py",
    "src/api.c",
    "src/kernels.c",
    "src/memory.c",
    "src/ops.def",
    "src/plugin.c",
    "src/plugin.h",
    "src/plugin_info.h",
    "src/stream.c",
    "tests/test_conformance.py",
}


def new(*argv):
    """Runs ``devicekit new ARGV`` in this process; returns the exit code."""
    return cli.main(["new", *map(str, argv)])


def tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def project(tmp_path) -> Path:
    target = tmp_path / "acme"
    assert new("acme", "--dir", target, "--vendor", 'Acme "Silicon" Inc.') == 0
    return target


def leftovers(parent: Path) -> list[str]:
    """Temporary render folders (".NAME.xxxx") left next to a target."""
    return [p.name for p in parent.iterdir() if p.name.startswith(".")]


# ---- the rendered tree -----------------------------------------------------

def test_tree_is_exactly_the_template(project):
    assert tree(project) == EXPECTED_TREE
    assert leftovers(project.parent) == []


def test_nothing_left_unrendered(project):
    for rel in EXPECTED_TREE:
        text = (project / rel).read_text()
        assert not re.search(r"{{|{%|\.jinja\b", text), f"{rel} has template syntax left"


def test_default_dir_is_devicekit_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert new("acme_x1") == 0
    assert (tmp_path / "devicekit-acme-x1" / "python" / "devicekit_acme_x1").is_dir()


def test_pyproject_builds_a_py3_none_wheel_with_entry_point(project):
    text = (project / "pyproject.toml").read_text()
    data = tomllib.loads(text)
    skb = data["tool"]["scikit-build"]
    assert skb["wheel"]["py-api"] == "py3"
    assert skb["minimum-version"] == "0.10"
    assert skb["wheel"]["packages"] == ["python/devicekit_acme"]
    assert data["project"]["entry-points"]["devicekit.plugins"] == {
        "acme": "devicekit_acme:library_path"}
    (dep,) = data["project"]["dependencies"]
    assert re.fullmatch(r"devicekit>=\d+\.\d+,<\d+", dep), dep
    assert dep in data["build-system"]["requires"]
    # STYLE item 8: every scikit-build setting has a comment right above it.
    lines = text.splitlines()
    start = lines.index("[tool.scikit-build]")
    for i, line in enumerate(lines[start + 1:], start + 1):
        if line and not line.startswith("#"):
            assert lines[i - 1].startswith("#"), f"uncommented setting: {line}"


def test_cmake_finds_devicekit_and_exports_one_symbol(project):
    text = (project / "CMakeLists.txt").read_text()
    import devicekit

    assert f"find_package(devicekit {devicekit.API_VERSION} CONFIG REQUIRED)" in text
    assert "-m devicekit --cmake-dir" in text
    assert "C_VISIBILITY_PRESET hidden" in text
    assert "--version-script=" in text
    assert "OUTPUT_NAME devicekit_acme" in text
    exports = (project / "exports.map").read_text()
    assert re.search(r"global:\s*DK_GetApi;\s*local:\s*\*;", exports)


def test_kernel_table_lists_every_op_and_implements_only_add(project):
    import devicekit

    major, minor = map(int, devicekit.API_VERSION.split("."))
    ops = scaffold.base_ops(major, minor)
    rows = re.findall(r"^PLUGIN_OP\((\w+), (\w+),", (project / "src/ops.def").read_text(), re.M)
    assert [r[0] for r in rows] == [op["id"] for op in ops]
    assert [r for r in rows if r[1] != "NULL"] == [("ADD", "plugin_kernel_add")]
    assert len(rows) > 40  # the whole 1.1 set, not a collapsed parse


def test_names_reach_every_place(project):
    info = (project / "src/plugin_info.h").read_text()
    assert '#define PLUGIN_NAME "acme"' in info
    assert r'#define PLUGIN_VENDOR "Acme \"Silicon\" Inc."' in info
    assert '"DEVICEKIT_ACME_MEMORY_BYTES"' in info
    assert "--device acme:0" in (project / "tests/test_conformance.py").read_text()
    ci = (project / ".github/workflows/ci.yml").read_text()
    assert "devicekit conformance --device acme:0 --report reports" in ci
    assert "upload-artifact" in ci


def test_c_string_escapes_anything():
    assert scaffold._c_string('a"b\\c?') == r'"a\"b\\c\?"'
    assert scaffold._c_string("Ünï\n") == r'"\303\234n\303\257\012"'


def test_rendered_sources_compile(project):
    compiler = _find_c_compiler()
    if compiler is None:
        pytest.skip("no C compiler on PATH: cannot syntax-check the rendered sources")
    import devicekit

    include_dir = Path(devicekit.__file__).parent / "include"
    for source in sorted((project / "src").glob("*.c")):
        cmd = [compiler, "-fsyntax-only", "-std=c11", "-Wall", "-Wextra", "-Werror",
               f"-I{include_dir}", '-DPLUGIN_VERSION="0.1.0"', str(source)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        assert result.returncode == 0, f"{source.name}:\n{result.stderr}"


# ---- bad input: one line on stderr, a distinct exit code, nothing written ---

@pytest.mark.parametrize("name", ["Acme", "1acme", "ac-me", "acme!", "_acme", "a" * 33,
                                  "ac me", ""])
def test_invalid_name(tmp_path, capsys, name):
    target = tmp_path / "out"
    assert new(name, "--dir", target) == scaffold.InvalidNameError.exit_code == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid plugin name" in err
    assert "lowercase letter" in err
    assert not target.exists() and leftovers(tmp_path) == []


def test_reserved_name(tmp_path, capsys):
    assert new("cpu", "--dir", tmp_path / "out") == 3
    assert "reference CPU plugin" in capsys.readouterr().err


def test_non_empty_target_refused_without_force(tmp_path, capsys):
    target = tmp_path / "busy"
    target.mkdir()
    (target / "mine.txt").write_text("keep me")
    assert new("acme", "--dir", target) == scaffold.TargetExistsError.exit_code == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" in err
    assert tree(target) == {"mine.txt"} and leftovers(tmp_path) == []


def test_force_replaces_a_non_empty_target(tmp_path):
    target = tmp_path / "busy"
    target.mkdir()
    (target / "mine.txt").write_text("old")
    assert new("acme", "--dir", target, "--force") == 0
    assert tree(target) == EXPECTED_TREE and leftovers(tmp_path) == []


def test_empty_target_is_fine_without_force(tmp_path):
    target = tmp_path / "empty"
    target.mkdir()
    assert new("acme", "--dir", target) == 0
    assert tree(target) == EXPECTED_TREE


@pytest.mark.parametrize("where", ["target_is_a_file", "parent_is_a_file"])
def test_unwritable_target(tmp_path, capsys, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    target = blocker if where == "target_is_a_file" else blocker / "sub" / "acme"
    assert new("acme", "--dir", target) == scaffold.TargetNotWritableError.exit_code == 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(blocker) in err
    assert blocker.read_text() == "a file, not a folder"
    assert leftovers(tmp_path) == []


def test_failed_render_leaves_nothing(tmp_path, monkeypatch):
    # A failure half-way through rendering (here: a template error) must leave
    # neither the target nor the temporary folder behind.
    def broken(src, dst, ctx):
        (dst / "half.txt").write_text("half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(scaffold, "_render_tree", broken)
    target = tmp_path / "acme"
    assert new("acme", "--dir", target) == 5
    assert not target.exists() and leftovers(tmp_path) == []


def test_missing_name_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as excinfo:
        new()
    assert excinfo.value.code == 2


def test_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        new("--help")
    out = capsys.readouterr().out
    for code in ("0", "2", "3", "4", "5", "6"):
        assert re.search(rf"^\s+{code}\s+\w", out, re.M), f"exit code {code} not in help"
