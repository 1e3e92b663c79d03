"""``devicekit new`` and ``devicekit upgrade-api``: render the plugin templates
into a temp dir and check the tree, the contents and every bad-input path
(templates are tested by rendering them, not by reading them). One project is built with
CMake (no devicekit in sight of the build) to check the version it claims and
to run its generated tests/test_conformance.py; the wheel and the user's side
are tests/test_plugin_journey.py and tests/test_porting_guide.py.

Needs: the installed SDK. The compile and build checks also need a C compiler
(and cmake for the build; skipped with the reason otherwise).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from devicekit import api_target, cli, scaffold

from conftest import _find_c_compiler
from conftest import HUNG_S

EXPECTED_TREE = {
    ".gitignore",
    ".github/workflows/ci.yml",
    "CMakeLists.txt",
    "README.md",
    "exports.map",
    "include/devicekit/device_api.h",
    "include/devicekit/device_api_ops.h",
    "include/devicekit/plugin_helpers.h",
    "include/devicekit/plugin_helpers_ops.h",
    "include/devicekit/plugin_errors.h",
    "include/devicekit/plugin_views.h",
    "include/devicekit/plugin_check_call.h",
    "include/devicekit/plugin_runtime.h",
    "include/devicekit/plugin_runtime.hpp",
    "include/devicekit/plugin_half.h",
    "include/devicekit/plugin_philox.h",
    "include/devicekit/plugin_coverage.h",
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
    import devicekit

    latest = tuple(map(int, devicekit.API_VERSION.split(".")))
    assert dep == api_target.devicekit_requirement(latest), dep
    # Building needs scikit-build-core and nothing else: the header is in include/.
    assert data["build-system"]["requires"] == ["scikit-build-core>=0.10"]
    # Every scikit-build setting has a comment right above it: a vendor reads
    # why each is there before changing it.
    lines = text.splitlines()
    start = lines.index("[tool.scikit-build]")
    for i, line in enumerate(lines[start + 1:], start + 1):
        if line and not line.startswith("#"):
            assert lines[i - 1].startswith("#"), f"uncommented setting: {line}"


def test_cmake_uses_the_vendored_header_and_exports_one_symbol(project):
    text = (project / "CMakeLists.txt").read_text()
    code = "\n".join(line.split("#")[0] for line in text.splitlines())  # no comments
    assert "find_package(devicekit" not in code and "Python" not in code
    assert "target_include_directories(devicekit_acme PRIVATE include)" in code
    assert "find_library(MATH_LIBRARY m)" in code  # kernels call expf & co
    assert "C_VISIBILITY_PRESET hidden" in text
    assert "--version-script=" in text
    assert "OUTPUT_NAME devicekit_acme" in text
    exports = (project / "exports.map").read_text()
    assert re.search(r"global:\s*DK_GetApi;\s*local:\s*\*;", exports)


OPS_DEF_ROW = re.compile(r"^(?:PLUGIN_OP\((\w+), (\w+),.*|PLUGIN_NO_KERNEL\((\w+)\))$", re.M)


def ops_def_rows(project: Path) -> list[tuple[str, str | None]]:
    """[(OP, kernel function or None)] in file order."""
    return [(m[1] or m[3], m[2]) for m in OPS_DEF_ROW.finditer((project / "src/ops.def").read_text())]


def test_kernel_table_lists_every_op_and_implements_copy_and_add(project):
    import devicekit

    major, minor = map(int, devicekit.API_VERSION.split("."))
    ops = scaffold.base_ops(major, minor)
    rows = ops_def_rows(project)
    assert [r[0] for r in rows] == [op["id"] for op in ops]
    assert [r for r in rows if r[1]] == [("COPY", "plugin_kernel_copy"),
                                         ("ADD", "plugin_kernel_add")]
    assert len(rows) > 40  # the whole 1.1 set, not a collapsed parse


def test_project_carries_the_installed_headers(project):
    include = api_target.header_dir() / "devicekit"
    for name in api_target.HEADERS:
        assert (project / "include/devicekit" / name).read_bytes() == (include / name).read_bytes()


def test_every_api_version_maps_to_a_first_devicekit():
    # A DK_API_MINOR bump must add its row to FIRST_DEVICEKIT (the requirement
    # a plugin of that version gets), and no row may name a future release.
    import devicekit

    major, minor = map(int, devicekit.API_VERSION.split("."))
    assert set(api_target.FIRST_DEVICEKIT) >= {(major, m) for m in range(minor + 1)}
    ours = tuple(int(x) for x in re.findall(r"\d+", devicekit.__version__)[:2])
    assert all(first <= ours for first in api_target.FIRST_DEVICEKIT.values())


def test_api_option_targets_an_older_minor(tmp_path):
    target = tmp_path / "old"
    assert new("acme", "--dir", target, "--api", "1.0") == 0
    info = (target / "src/plugin_info.h").read_text()
    assert "#define PLUGIN_API_MAJOR 1\n" in info and "#define PLUGIN_API_MINOR 0\n" in info
    assert "#define PLUGIN_NUM_OPS DK_OP_COUNT_1_0" in info
    assert [r[0] for r in ops_def_rows(target)] == ["COPY", "FILL", "CAST", "ADD"]
    (dep,) = tomllib.loads((target / "pyproject.toml").read_text())["project"]["dependencies"]
    assert dep == api_target.devicekit_requirement((1, 0))


@pytest.mark.parametrize("api", ["1.99", "2.0", "0.9", "1", "one.two"])
def test_api_option_refuses_what_this_devicekit_cannot_target(tmp_path, capsys, api):
    target = tmp_path / "out"
    assert new("acme", "--dir", target, "--api", api) == scaffold.InvalidApiError.exit_code == 7
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "device API" in err
    assert not target.exists() and leftovers(tmp_path) == []


def test_upgrade_api_moves_a_project_to_the_newest_minor(tmp_path, capsys):
    import devicekit

    latest = tuple(map(int, devicekit.API_VERSION.split(".")))
    target = tmp_path / "old"
    assert new("acme", "--dir", target, "--api", "1.0") == 0
    (target / "include/devicekit/device_api.h").write_text("/* an old header */\n")
    assert cli.main(["upgrade-api", str(target)]) == 0
    info = (target / "src/plugin_info.h").read_text()
    assert f"#define PLUGIN_API_MINOR {latest[1]}\n" in info
    assert f"#define PLUGIN_NUM_OPS {scaffold.op_count_macro(*latest)}" in info
    rows = ops_def_rows(target)
    assert [r[0] for r in rows] == [op["id"] for op in scaffold.base_ops(*latest)]
    # What the vendor had is kept; the new ops arrive not implemented.
    assert [r for r in rows if r[1]] == [("COPY", "plugin_kernel_copy"), ("ADD", "plugin_kernel_add")]
    test_project_carries_the_installed_headers(target)
    (dep,) = tomllib.loads((target / "pyproject.toml").read_text())["project"]["dependencies"]
    assert dep == api_target.devicekit_requirement(latest)
    # Again: nothing to do. Down: refused, nothing changed.
    assert cli.main(["upgrade-api", str(target)]) == 0
    before = (target / "src/plugin_info.h").read_text()
    assert cli.main(["upgrade-api", str(target), "--api", "1.0"]) == 7
    assert "not to 1.0" in capsys.readouterr().err
    assert (target / "src/plugin_info.h").read_text() == before


def test_upgrade_api_refuses_a_folder_that_is_no_project(tmp_path, capsys):
    assert cli.main(["upgrade-api", str(tmp_path)]) == 7
    assert "plugin_info.h" in capsys.readouterr().err


def test_names_reach_every_place(project):
    info = (project / "src/plugin_info.h").read_text()
    assert '#define PLUGIN_NAME "acme"' in info
    assert r'#define PLUGIN_VENDOR "Acme \"Silicon\" Inc."' in info
    assert '"DEVICEKIT_ACME_MEMORY_BYTES"' in info
    ci = (project / ".github/workflows/ci.yml").read_text()
    assert "devicekit conformance --device acme:0 --report reports" in ci
    assert "upload-artifact" in ci


def test_ci_and_readme_bring_pytorch_so_certify_runs_the_torch_section(project):
    # Without torch and transformers, gate certify skips the torch section and
    # the hf-* models: the generated CI installs both, and shows the coverage plan.
    ci = (project / ".github/workflows/ci.yml").read_text()
    install = ci.index('pip install "devicekit[torch]" transformers')
    assert install < ci.index("devicekit conformance --device acme:0") < ci.index(
        "devicekit gate certify")
    assert "devicekit torch coverage --device acme:0 --model gpt2 --plan" in ci
    readme = (project / "README.md").read_text()
    assert "## 5. PyTorch on your device" in readme
    assert 'pip install "devicekit[torch]"' in readme and "-k torch/" in readme


def test_c_string_escapes_anything():
    assert scaffold._c_string('a"b\\c?') == r'"a\"b\\c\?"'
    assert scaffold._c_string("Ünï\n") == r'"\303\234n\303\257\012"'


@pytest.mark.parametrize("api", [None, "1.0"])
def test_rendered_sources_compile(tmp_path, api):
    compiler = _find_c_compiler()
    if compiler is None:
        pytest.skip("no C compiler on PATH: cannot syntax-check the rendered sources")
    project = tmp_path / "acme"
    assert new("acme", "--dir", project, *(["--api", api] if api else [])) == 0
    include_dir = project / "include"  # the vendored header, as CMakeLists.txt uses it
    for source in sorted((project / "src").glob("*.c")):
        cmd = [compiler, "-fsyntax-only", "-std=c11", "-Wall", "-Wextra", "-Werror",
               f"-I{include_dir}", '-DPLUGIN_VERSION="0.1.0"', str(source)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        assert result.returncode == 0, f"{source.name}:\n{result.stderr}"


# ---- built: the version it claims, its generated tests ------------------------

FAKE_NEWER_MINOR = 99


def _fake_newer_devicekit(root: Path) -> dict:
    """Everywhere the old template looked for the device API (``python -m
    devicekit --cmake-dir``, ``devicekit_DIR``, the compiler's CPATH), a
    devicekit whose header claims API 1.FAKE_NEWER_MINOR. Returns the build env."""
    header = (api_target.header_dir() / "devicekit" / "device_api.h").read_text()
    newer = re.sub(r"^#define DK_API_MINOR \d+", f"#define DK_API_MINOR {FAKE_NEWER_MINOR}",
                   header, flags=re.M)
    assert newer != header
    package = root / "fake" / "devicekit"
    (package / "include" / "devicekit").mkdir(parents=True)
    (package / "include" / "devicekit" / "device_api.h").write_text(newer)
    shutil.copyfile(api_target.header_dir() / "devicekit" / "device_api_ops.h",
                    package / "include" / "devicekit" / "device_api_ops.h")
    (package / "cmake").mkdir()
    (package / "cmake" / "devicekit-config.cmake").write_text(
        f'add_library(devicekit::device_api INTERFACE IMPORTED)\n'
        f'set_target_properties(devicekit::device_api PROPERTIES INTERFACE_INCLUDE_DIRECTORIES '
        f'"{package / "include"}")\n')
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(f"print({str(package / 'cmake')!r})\n")
    return {**os.environ, "PYTHONPATH": str(package.parent), "CPATH": str(package / "include"),
            "devicekit_DIR": str(package / "cmake")}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A project targeting the newest API, built with plain CMake while a
    *newer* devicekit is in every place a build could look; returns
    (project, library)."""
    if _find_c_compiler() is None or shutil.which("cmake") is None:
        pytest.skip("building the rendered project needs a C compiler and cmake on PATH")
    root = tmp_path_factory.mktemp("built")
    project = root / "acme"
    assert new("acme", "--dir", project) == 0
    env = _fake_newer_devicekit(root)
    build = project / "build" / "plain"
    for cmd in (["cmake", "-S", project, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                 f"-Ddevicekit_DIR={env['devicekit_DIR']}"],
                ["cmake", "--build", build, "--parallel", "2"]):
        result = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True)
        assert result.returncode == 0, f"{cmd}:\n{result.stdout}{result.stderr}"
    return project, build / "libdevicekit_acme.so"


class _ApiHead(ctypes.Structure):
    """The first fields of DK_Api (device_api.h), enough to read the claim."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("api_major", ctypes.c_int32), ("api_minor", ctypes.c_int32)]


def test_built_plugin_claims_its_target_not_the_newest_devicekit_around(built):
    import devicekit

    project, library = built
    lib = ctypes.CDLL(str(library))
    lib.DK_GetApi.restype = ctypes.POINTER(_ApiHead)
    head = lib.DK_GetApi().contents
    target = tuple(map(int, devicekit.API_VERSION.split(".")))
    assert (head.api_major, head.api_minor) == target  # not 1.FAKE_NEWER_MINOR
    # And the wheel would require what that version needs, whatever was installed.
    (dep,) = tomllib.loads((project / "pyproject.toml").read_text())["project"]["dependencies"]
    assert dep == api_target.devicekit_requirement(target)


def _generated_tests(project, library, *args):
    env = {k: v for k, v in os.environ.items() if k != "DEVICEKIT_PLUGIN_PATH"}
    if library is not None:
        env["DEVICEKIT_PLUGIN_PATH"] = str(library)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests", *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=HUNG_S)


def test_generated_conformance_test_passes_the_runtime_part(built):
    project, library = built
    result = _generated_tests(project, library, "-k", "runtime")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout, result.stdout


def test_generated_conformance_test_fails_without_the_plugin(built):
    # The same test with no acme plugin discoverable: it must fail, not pass
    # vacuously (no device -> the suite cannot run).
    project, _ = built
    result = _generated_tests(project, None, "-k", "runtime")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed" in result.stdout, result.stdout


# ---- the scaffold passes its own suite: every case of the ops it shows ----------

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "porting_guide.md"


def _guide_exp_edit() -> str:
    """The porting guide's exp example, as the shell commands it gives: the
    kernel appended to src/kernels.c and the ops.def row turned on."""
    block = next(b for b in re.findall(r"^```sh\n(.*?)^```", GUIDE.read_text(), re.S | re.M)
                 if "plugin_kernel_exp" in b)
    return "".join(line for line in block.splitlines(keepends=True)
                   if not line.startswith("devicekit "))


@pytest.fixture(scope="module")
def built_with_exp(tmp_path_factory):
    """A fresh project plus the guide's exp kernel, built with CMake."""
    if _find_c_compiler() is None or shutil.which("cmake") is None:
        pytest.skip("building the rendered project needs a C compiler and cmake on PATH")
    project = tmp_path_factory.mktemp("own_suite") / "acme"
    assert new("acme", "--dir", project) == 0
    edit = subprocess.run(["bash", "-euo", "pipefail", "-c", _guide_exp_edit()], cwd=project,
                          capture_output=True, text=True)
    assert edit.returncode == 0, edit.stderr
    assert "PLUGIN_OP(EXP, plugin_kernel_exp" in (project / "src/ops.def").read_text()
    build = project / "build"
    for cmd in (["cmake", "-S", project, "-B", build, "-DCMAKE_BUILD_TYPE=Release"],
                ["cmake", "--build", build, "--parallel", "2"]):
        result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
        assert result.returncode == 0, f"{cmd}:\n{result.stdout}{result.stderr}"
    return build / "libdevicekit_acme.so"


def test_scaffold_passes_every_case_of_the_ops_it_shows(built_with_exp, tmp_path):
    """copy and add (the template) and exp (the porting guide): every case of
    each op (--op: ops, the kernel called directly with every argument rule
    broken, autograd) passes, or is not implemented (a dtype the row does not
    declare, the autograd case waiting for mul) or skipped (the memory-bound
    rules: the template does not track its allocations). No fail, no error,
    no crash."""
    rep = tmp_path / "rep"
    env = {k: v for k, v in os.environ.items() if k != "DEVICEKIT_PLUGIN_PATH"}
    proc = subprocess.run([sys.executable, "-m", "devicekit", "conformance", "--plugin",
                           str(built_with_exp), "--op", "copy", "--op", "add", "--op", "exp",
                           "--jobs", "2", "--report", str(rep)], capture_output=True, text=True,
                          timeout=HUNG_S, env=env)
    cases = json.loads((rep / "report.json").read_text())["cases"]
    bad = [f"{c['outcome']} {c['id']}: {c['message'][:200]}" for c in cases
           if c["outcome"] in ("fail", "error", "crash")]
    assert not bad, "\n".join(bad)
    outcome = {c["id"]: c["outcome"] for c in cases}
    for op in ("copy", "add", "exp"):
        invalid = {i: o for i, o in outcome.items() if i.startswith(f"kernels/{op}/invalid/")}
        assert len(invalid) > 20 and set(invalid.values()) <= {"pass", "skipped"}, invalid
        assert [i for i, o in invalid.items() if o == "skipped"] == [
            f"kernels/{op}/invalid/input_past_allocation",
            f"kernels/{op}/invalid/input_offset_past_allocation"]
    for case in ("kernels/copy/invalid/output_null_data", "kernels/add/invalid/output_null_data",
                 "kernels/add/invalid/output_aliases_input", "kernels/copy/invalid/"
                 "input_negative_stride", "kernels/exp/invalid/input_not_dense",
                 "ops/add/float32/odd", "ops/exp/float32/T", "kernels/copy/float64/direct"):
        assert outcome[case] == "pass", case
    # exit 1 only for the required cases that wait for other ops (mul)
    assert proc.returncode == 1 and "mul: no kernel; blocks add, exp" in proc.stdout


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
    for code in ("0", "2", "3", "4", "5", "6", "7"):
        assert re.search(rf"^\s+{code}\s+\w", out, re.M), f"exit code {code} not in help"
