"""The vendor-to-user journey, end to end, with no compiler where the user is.

Vendor side (compiler available): ``devicekit new`` -> ``pip wheel`` of the
fresh plugin -> the wheel must be tagged ``py3-none-<platform>``. DeviceKit's
own wheel is built from this checkout (reusing its build folder).

User side: a fresh venv, isolated from the base interpreter, gets both wheels
with ``--no-index --no-deps``. DeviceKit's runtime dependencies (numpy, jinja2,
ml_dtypes and what they require) and pip are exposed to it from the *test*
environment through a ``.pth`` file naming a folder of links to exactly those
distributions (tests/_venv.py), so the run needs no network and never reads
the base interpreter's site-packages (which may lack them); devicekit itself
must come from the wheel. Every command runs with a PATH holding only the
venv's bin folder and a folder with a python symlink: no cc, gcc, cmake, nvcc.
There ``devicekit devices`` must list the plugin as loaded through its entry
point, and ``devicekit conformance`` must pass the runtime part and report the
stubbed ops as not implemented.

Slow (two wheel builds, about a minute on 2 cores): marked ``slow``, and still
part of ``python -m pytest tests``. Needs a C compiler and CMake (skipped with
the reason otherwise).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path

import pytest

from _venv import check, expose_distributions, run, runtime_requirements, user_site_packages
from conftest import _find_c_compiler
from conftest import HUNG_S

pytestmark = pytest.mark.slow

PLUGIN = "journey"
COMPILER_TOOLS = ["cc", "c++", "gcc", "g++", "clang", "clang++", "cmake", "ninja", "make",
                  "nvcc", "ld"]
NOT_IMPLEMENTED = {"not-implemented", "not_implemented", "notimplemented"}


def platform_tag() -> str:
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


class Journey:
    """Paths and the user-side environment, built once per module."""

    def __init__(self, root: Path):
        self.root = root
        self.project = root / "plugin"
        self.wheels = root / "wheels"
        self.venv = root / "user-venv"
        self.nocc = root / "no-compiler-bin"
        self.plugin_wheel: Path | None = None

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items()
               if k not in ("DEVICEKIT_PLUGIN_PATH", "PYTHONPATH", "VIRTUAL_ENV", "CC", "CXX",
                            "PYTHONHOME")}
        env["PATH"] = os.pathsep.join([str(self.venv / "bin"), str(self.nocc)])
        return env

    def user(self, *args, timeout=HUNG_S):
        """Runs a command as the user: no compiler on PATH."""
        return run(args, timeout=timeout, env=self.env(), cwd=self.root)

    def devicekit(self, *args, timeout=HUNG_S):
        return self.user(self.venv / "bin" / "devicekit", *args, timeout=timeout)


@pytest.fixture(scope="module")
def journey(tmp_path_factory, devicekit_wheel) -> Journey:
    if _find_c_compiler() is None or shutil.which("cmake") is None:
        pytest.skip("the vendor side of the journey needs a C compiler and cmake on PATH")
    j = Journey(tmp_path_factory.mktemp("journey"))
    py = sys.executable

    # Vendor: scaffold and build the plugin wheel.
    check([py, "-m", "devicekit", "new", PLUGIN, "--dir", j.project], "devicekit new")
    check([py, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q",
           "-w", j.wheels, j.project], "building the plugin wheel")
    (j.plugin_wheel,) = j.wheels.glob("*.whl")

    # DeviceKit's own wheel from this checkout (conftest.py: built once per session).
    shutil.copy(devicekit_wheel, j.wheels)

    # User: a fresh venv without the base interpreter's site-packages (a fresh
    # machine's base Python has none of DeviceKit's dependencies). Its
    # dependencies and pip come from this test environment, linked one
    # distribution at a time; --without-pip saves the ensurepip step.
    check([py, "-m", "venv", "--without-pip", j.venv], "venv")
    expose_distributions(runtime_requirements("devicekit") | {"pip"},
                         j.root / "deps", user_site_packages(j.venv))
    check([j.venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-index",
           "--no-deps", *sorted(j.wheels.glob("*.whl"))], "installing the wheels")

    j.nocc.mkdir()
    for name in ("python", "python3"):
        (j.nocc / name).symlink_to(j.venv / "bin" / "python")
    return j


def test_plugin_wheel_is_py3_none_platform(journey):
    name = journey.plugin_wheel.name
    assert name.endswith(f"-py3-none-{platform_tag()}.whl"), name
    assert name.startswith(f"devicekit_{PLUGIN}-0.1.0-"), name


def test_user_path_has_no_compiler(journey):
    path = journey.env()["PATH"]
    found = {t: shutil.which(t, path=path) for t in COMPILER_TOOLS}
    assert not any(found.values()), f"compiler tools on the user's PATH: {found}"
    # The runtime check, from inside the user's environment.
    result = journey.user("python", "-c", "import shutil, sys; "
                          f"sys.exit(any(shutil.which(t) for t in {COMPILER_TOOLS!r}))")
    assert result.returncode == 0, result.stdout + result.stderr


def test_devicekit_comes_from_the_wheel(journey):
    result = journey.user("python", "-c", "import devicekit; print(devicekit.__file__)")
    assert result.returncode == 0, result.stderr
    location = Path(result.stdout.strip()).resolve()
    assert journey.venv.resolve() in location.parents, location


def test_user_venv_never_reads_the_base_interpreters_site_packages(journey):
    base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})
    result = journey.user("python", "-c", "import sys, json; print(json.dumps(sys.path))")
    assert result.returncode == 0, result.stderr
    user_path = {str(Path(p).resolve()) for p in json.loads(result.stdout) if p}
    for key in ("purelib", "platlib"):
        assert str(Path(base[key]).resolve()) not in user_path, (key, base[key])


def test_devices_lists_the_plugin_as_loaded(journey):
    result = journey.devicekit("devices", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    records = {r["name"]: r for r in json.loads(result.stdout)}
    assert PLUGIN in records, f"{PLUGIN} not discovered: {result.stdout}"
    rec = records[PLUGIN]
    assert rec["loaded"], rec["error"]
    assert rec["source"] == f"entry point '{PLUGIN}'"
    assert len(rec["devices"]) == 1, rec["devices"]  # (their "name" is the device's own)
    implemented = [k["op"] for k in rec["kernels"] if k["implemented"]]
    assert implemented == ["copy", "add"]
    # The human-readable table says the same.
    table = journey.devicekit("devices")
    assert table.returncode == 0 and f"{PLUGIN}:0" in table.stdout, table.stdout


def test_runtime_conformance_passes(journey):
    result = journey.devicekit("conformance", "--device", f"{PLUGIN}:0", "-k", "runtime",
                               "--report", journey.root / "reports-runtime")
    assert result.returncode == 0, result.stdout + result.stderr


def outcomes(node, found=None):
    """Every (op-ish text, outcome) pair found in a JSON report, whatever its
    exact schema: dicts carrying an outcome/status next to names."""
    found = [] if found is None else found
    if isinstance(node, dict):
        outcome = node.get("outcome", node.get("status"))
        if isinstance(outcome, str):
            found.append((json.dumps({k: v for k, v in node.items()
                                      if isinstance(v, str)}), outcome.lower()))
        for value in node.values():
            outcomes(value, found)
    elif isinstance(node, list):
        for value in node:
            outcomes(value, found)
    return found


def test_full_conformance_reports_stubbed_ops_as_not_implemented(journey):
    reports = journey.root / "reports-full"
    result = journey.devicekit("conformance", "--device", f"{PLUGIN}:0", "--report", reports)
    # Not implemented is not passed: the run must not succeed silently, and
    # must not crash either.
    assert result.returncode > 0, result.stdout + result.stderr
    json_reports = sorted(reports.rglob("*.json"))
    assert json_reports, f"no JSON report under {reports}:\n{result.stdout}{result.stderr}"
    found = [o for path in json_reports for o in outcomes(json.loads(path.read_text()))]
    not_impl = [text for text, outcome in found if outcome.replace(" ", "-") in NOT_IMPLEMENTED]
    for op in ("matmul", "neg", "fill"):
        assert any(op in text for text in not_impl), \
            f"{op}: no not-implemented outcome in {[str(p) for p in json_reports]}"
    passed_add = [text for text, outcome in found
                  if '"add' in text and outcome in ("pass", "passed")]
    assert passed_add, "add (float32) has no passing case"


def test_plugin_library_exports_only_dk_getapi(journey, tmp_path):
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm on PATH: cannot list the library's dynamic symbols")
    import zipfile

    with zipfile.ZipFile(journey.plugin_wheel) as wheel:
        (member,) = [n for n in wheel.namelist() if n.endswith(".so")]
        library = Path(wheel.extract(member, tmp_path))
    result = check([nm, "-D", "--defined-only", library], "nm")
    symbols = [line.split()[-1] for line in result.stdout.splitlines() if line.strip()]
    assert symbols == ["DK_GetApi"], symbols
