"""Shared fixtures for the SDK's own tests.

What each group of tests needs, so a missing one is named, not guessed:
- ``bad_plugins``: a C compiler on PATH (the purpose-built bad plugins in
  tests/plugins are compiled once per session); skipped with the reason if none.
- ``cpu``: the reference CPU plugin, found through its entry point. It ships with
  devicekit, so a missing or broken one fails the test (with the load errors)
  instead of skipping it.
- ``plugin_path``: points DEVICEKIT_PLUGIN_PATH somewhere for one test and
  re-runs discovery before and after.
- ``run_cli`` / ``run_python``: run ``python -m devicekit ...`` / ``python -c
  ...`` in a subprocess with a given DEVICEKIT_PLUGIN_PATH.
- ``devicekit_wheel``: DeviceKit's wheel built from this checkout, once per
  session (the slow end-to-end tests install it into fresh venvs, tests/_venv.py).
- ``misbehaving_plugins``: tests/plugins/misbehave.c built once per way it
  misbehaves (a C compiler, as ``bad_plugins``).
- ``cpu_conformance_run`` / ``cpu_models_run``: the whole conformance suite
  (level full) and every model (the default list, as certify runs it) on cpu:0, each run once per session into
  ``cpu_suite_reports`` (conformance/, models/), the layout ``gate certify
  --from-reports`` reads: the tests of both suites and the gate's CI test judge
  the same runs instead of repeating the longest runs of the session.

Every test, and every process a test starts, keeps its plugin probe cache in
a temporary folder (DEVICEKIT_PROBE_CACHE), never in the user's ~/.cache.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# devicekit is imported inside the fixtures that need it, so tests that need no
# SDK (e.g. the header layout check) still run where the SDK does not import.

REPO_ROOT = Path(__file__).resolve().parents[1]
# ci/policy.toml's line of required models, which the gate tests replace to
# certify a quick subset (one model) with the policy's other rules unchanged.
CI_MODELS_LINE = next(line for line in (REPO_ROOT / "ci" / "policy.toml").read_text().splitlines()
                      if line.startswith("required = ["))
DEVICE_API_INCLUDE = REPO_ROOT / "device_api" / "include"
DEVICE_API_HEADER = DEVICE_API_INCLUDE / "devicekit" / "device_api.h"
BAD_PLUGIN_SOURCES = Path(__file__).resolve().parent / "plugins"

# The time after which a test takes a subprocess (a suite run, a build, a
# script) for hung. It bounds a hang, never measures speed: a one-case
# conformance run takes 3 s at rest and 100 s at load 16 on two cores, a full
# run many minutes; a test that needs "soon" waits for an event instead.
HUNG_S = 3600

_PROBE_CACHE = tempfile.mkdtemp(prefix="devicekit-test-probe-cache-")
os.environ["DEVICEKIT_PROBE_CACHE"] = _PROBE_CACHE


def pytest_unconfigure(config):
    shutil.rmtree(_PROBE_CACHE, ignore_errors=True)


# Long enough that the loader reads past the first bytes: dlopen says
# "invalid ELF header" rather than "file too short".
NOT_A_LIBRARY_TEXT = "This is a text file named like a plugin library. It is not one.\n" * 4


def _header_define(name: str) -> int:
    match = re.search(rf"^#define {name} (\d+)\s*$", DEVICE_API_HEADER.read_text(), re.M)
    assert match, f"{name} not found in {DEVICE_API_HEADER}"
    return int(match.group(1))


@pytest.fixture(scope="session")
def api_version() -> tuple[int, int]:
    """(major, minor) of the device API in this checkout's header: the version
    the SDK under test supports."""
    return _header_define("DK_API_MAJOR"), _header_define("DK_API_MINOR")


def children_cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process's waited-for
    children. The difference around a command is what it cost: unlike wall
    time, a busy machine does not stretch it, so a bound on it holds under load."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _find_c_compiler() -> str | None:
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate):
            return candidate
    return None


def compile_test_plugin(compiler: str, source: Path, include_dir: Path, library: Path,
                        flags=(), libs=()) -> Path:
    """Compiles one single-file test plugin against the header in ``include_dir``
    (``flags`` go before the source, ``libs`` after it). A compile error fails
    the test: it is a bug in the test plugin."""
    command = [compiler, "-shared", "-fPIC", "-std=c11", "-Wall", "-Wextra", *flags,
               f"-I{include_dir}", "-o", str(library), str(source), *libs]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        pytest.fail(f"building {source.name} failed:\n$ {' '.join(command)}\n"
                    f"{result.stdout}{result.stderr}")
    return library


@pytest.fixture(scope="session")
def bad_plugins(tmp_path_factory) -> dict[str, Path]:
    """Builds every tests/plugins/*.c into a temporary folder.

    Returns {file stem: library path}, plus "not_a_library": a text file with a
    .so name. Compile errors fail loudly (they are bugs in the test plugins);
    only a missing compiler skips.
    """
    compiler = _find_c_compiler()
    if compiler is None:
        pytest.skip("no C compiler on PATH (tried $CC, cc, gcc, clang): "
                    "the bad test plugins in tests/plugins cannot be built")
    out_dir = tmp_path_factory.mktemp("bad_plugins")
    built: dict[str, Path] = {}
    for source in sorted(BAD_PLUGIN_SOURCES.glob("*.c")):
        built[source.stem] = compile_test_plugin(compiler, source, DEVICE_API_INCLUDE,
                                                 out_dir / f"{source.stem}.so")
    not_a_library = out_dir / "not_a_library.so"
    not_a_library.write_text(NOT_A_LIBRARY_TEXT)
    built["not_a_library"] = not_a_library
    return built


# tests/plugins/misbehave.c's MB_* numbers (keep in sync with that file).
MISBEHAVIOURS = {
    "none": 0, "segv_getapi": 1, "abort_init": 2, "ctor_abort": 3, "hang_init": 4,
    "exit_init": 5, "count_neg": 6, "count_max": 7, "align_0": 8, "align_48": 9,
    "alloc_null": 10, "alloc_misaligned": 11, "stream_null": 12, "name_empty": 13,
    "name_bad": 14, "name_not_utf8": 15, "text_not_utf8": 16, "msg_huge": 17, "msg_long": 18,
    "unknown_code": 19, "props_error": 20, "count_fails": 21,
}


@pytest.fixture(scope="session")
def misbehaving_plugins(tmp_path_factory) -> dict[str, Path]:
    """tests/plugins/misbehave.c built once per MISBEHAVIOURS entry:
    {name: library path}. Each reports the plugin name "mb_<name>" (unless its
    misbehaviour is the name), so several can be discovered side by side. The
    builds run in parallel (each is mostly compiler start-up)."""
    compiler = _find_c_compiler()
    if compiler is None:
        pytest.skip("no C compiler on PATH: the misbehaving test plugins cannot be built")
    out_dir = tmp_path_factory.mktemp("misbehaving_plugins")
    source = BAD_PLUGIN_SOURCES / "misbehave.c"

    def build(item):
        name, number = item
        return name, compile_test_plugin(compiler, source, DEVICE_API_INCLUDE,
                                         out_dir / f"mb_{name}.so",
                                         flags=(f"-DMISBEHAVE={number}",
                                                f'-DBP_PLUGIN_NAME="mb_{name}"'))

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        return dict(pool.map(build, MISBEHAVIOURS.items()))


FAULTS = {"add_rel": 1, "sum_drop": 2, "matmul_odd_k": 3, "exp_neg_inf": 4, "segv": 5,
          "leak": 6, "no_wait": 7, "fused_rms": 8, "max_nan": 13, "where_bcast": 14,
          "matmul_packed_k": 17, "free_null": 18, "ordinal_clamp": 19, "graph_nest": 20,
          "group_flat": 21}


@pytest.fixture(scope="session")
def faulty_plugins(tmp_path_factory) -> dict[str, Path]:
    """tests/conformance_plugins/faulty.c built once per fault (see its header):
    {fault name: library path}. Each wraps the installed reference CPU plugin."""
    import devicekit_cpu

    compiler = _find_c_compiler()
    if compiler is None:
        pytest.skip("no C compiler on PATH: the faulty conformance plugins cannot be built")
    out_dir = tmp_path_factory.mktemp("faulty_plugins")
    source = Path(__file__).resolve().parent / "conformance_plugins" / "faulty.c"
    real_plugin = f'-DREAL_PLUGIN="{devicekit_cpu.library_path()}"'
    return {name: compile_test_plugin(compiler, source, DEVICE_API_INCLUDE,
                                      out_dir / f"faulty_{name}.so",
                                      flags=("-Werror", f"-DFAULT={number}", real_plugin),
                                      libs=("-ldl", "-lm"))
            for name, number in FAULTS.items()}


@pytest.fixture
def cpu():
    """The reference CPU plugin's device "cpu:0"."""
    import devicekit

    try:
        return devicekit.device("cpu:0")
    except devicekit.DeviceNotFoundError as exc:
        errors = "\n".join(f"  {r.path}: {r.error_type}: {r.error}"
                           for r in devicekit.plugins() if r.error is not None)
        pytest.fail(f"the reference CPU plugin did not provide cpu:0 ({exc}); "
                    f"plugin load errors:\n{errors or '  (none)'}")


def _join(paths) -> str:
    return os.pathsep.join(str(p) for p in paths)


@pytest.fixture
def plugin_path():
    """Call ``plugin_path([path, ...])`` to set DEVICEKIT_PLUGIN_PATH and re-run
    discovery. The old value (and a fresh discovery) is restored afterwards, so
    no other test sees these plugins."""
    import devicekit

    old = os.environ.get("DEVICEKIT_PLUGIN_PATH")

    def set_path(paths):
        os.environ["DEVICEKIT_PLUGIN_PATH"] = _join(paths)
        devicekit.reload_plugins()

    yield set_path
    if old is None:
        os.environ.pop("DEVICEKIT_PLUGIN_PATH", None)
    else:
        os.environ["DEVICEKIT_PLUGIN_PATH"] = old
    devicekit.reload_plugins()


def _run_python(python_args, plugin_path=(), timeout=HUNG_S):
    """Runs ``python PYTHON_ARGS`` in a fresh process with DEVICEKIT_PLUGIN_PATH
    set to ``plugin_path`` (paths; empty: the variable is unset)."""
    env = dict(os.environ)
    env.pop("DEVICEKIT_PLUGIN_PATH", None)
    if plugin_path:
        env["DEVICEKIT_PLUGIN_PATH"] = _join(plugin_path)
    return subprocess.run([sys.executable, *python_args], env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def run_cli():
    """``run_cli(["devices"], plugin_path=[...])`` runs ``python -m devicekit
    devices`` in a subprocess; returns the CompletedProcess (text mode)."""
    def run(args, plugin_path=()):
        return _run_python(["-m", "devicekit", *args], plugin_path)
    return run


@pytest.fixture
def run_python():
    """``run_python(code, plugin_path=[...])`` runs ``python -c code`` in a
    subprocess, for checks that must not share (or crash) the test process."""
    def run(code, plugin_path=()):
        return _run_python(["-c", code], plugin_path)
    return run


@pytest.fixture(scope="session")
def devicekit_wheel(tmp_path_factory) -> Path:
    """DeviceKit's wheel from this checkout, built once per session (slow)."""
    from _venv import build_devicekit_wheel

    return build_devicekit_wheel(tmp_path_factory.mktemp("devicekit_wheel"))


@pytest.fixture
def torch_no_fallback():
    """For devicekit.torch tests: no CPU fallback, and none may have happened."""
    import devicekit.torch as dkt

    dkt.reset_fallback_stats()
    with dkt.fallback(None):
        yield
    assert dkt.fallback_stats() == {}, "an op fell back to the CPU"


# ---------------------------------------------------------------- the suites on cpu:0, once

@pytest.fixture(scope="session")
def cpu_suite_reports(tmp_path_factory) -> Path:
    """The folder the session's cpu:0 suite runs write into (conformance/, models/)."""
    return tmp_path_factory.mktemp("cpu_suites")


def _suite_run(folder, name, *args):
    out = folder / name
    suite = name.split("-")[0]
    proc = subprocess.run([sys.executable, "-m", "devicekit", suite, "--device", "cpu:0",
                           "--jobs", "2", *args, "--report", str(out)],
                          capture_output=True, text=True, timeout=HUNG_S)
    assert (out / "report.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    import json

    return proc, json.loads((out / "report.json").read_text()), out


@pytest.fixture(scope="session")
def cpu_conformance_run(cpu_suite_reports):
    """``devicekit conformance --device cpu:0 --level full``: (proc, report, folder)."""
    return _suite_run(cpu_suite_reports, "conformance", "--level", "full")


@pytest.fixture(scope="session")
def cpu_core_conformance_run(cpu_suite_reports):
    """``devicekit conformance --device cpu:0 --level core``: (proc, report, folder)."""
    return _suite_run(cpu_suite_reports, "conformance-core", "--level", "core")


@pytest.fixture(scope="session")
def cpu_models_run(cpu_suite_reports):
    """``devicekit models --device cpu:0``, the default list (the zoo, the
    multi-rank cases, and the hf-* models, skipped with the reason where
    transformers is not installed), every dtype: (proc, report, folder)."""
    return _suite_run(cpu_suite_reports, "models")


# ---------------------------------------------------------------- the emulated CUDA plugin

def cmake_build(src, build, defines, timeout=HUNG_S):
    """Configures and builds src into build with CMake (Ninja when there is
    one, two jobs); returns the folder. A failure fails the test with the log."""
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    cfg = ["cmake", "-S", str(src), "-B", str(build), *gen, "-DCMAKE_BUILD_TYPE=Release",
           *[f"-D{k}={v}" for k, v in defines.items()]]
    for cmd in (cfg, ["cmake", "--build", str(build), "-j", "2"]):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            pytest.fail(f"$ {' '.join(cmd)}\n{p.stdout[-4000:]}{p.stderr[-4000:]}")
    return build


@pytest.fixture(scope="session")
def cuda_sim_library(tmp_path_factory) -> Path:
    """The emulated CUDA plugin (reference_backend/cuda, DEVICEKIT_CUDA_SIM=ON):
    DEVICEKIT_CUDA_SIM_LIBRARY when set, else built here once per session from
    this tree with the host compiler (about a minute), so its tests run on
    any machine with cmake and a C++ compiler, installed or not."""
    given = os.environ.get("DEVICEKIT_CUDA_SIM_LIBRARY")
    if given:
        return Path(given)
    if not shutil.which("cmake") or not any(
            shutil.which(c) for c in (os.environ.get("CXX") or "c++", "g++", "clang++")):
        pytest.skip("building the emulated CUDA plugin needs cmake and a C++ compiler")
    src = Path(__file__).resolve().parents[1] / "reference_backend" / "cuda"
    build = cmake_build(src, tmp_path_factory.mktemp("cuda_sim"), {"DEVICEKIT_CUDA_SIM": "ON"})
    return build / "libdevicekit_cuda_sim.so"


@pytest.fixture(scope="module")
def cuda_sim_device(request):
    """'cuda_sim:0' in this process for one test module: the installed plugin,
    else the session's build (cuda_sim_library) put on DEVICEKIT_PLUGIN_PATH
    and discovered; the path is restored (and discovery rerun) after the
    module, so later tests see the plugins they expect."""
    import devicekit as dk
    if any(str(d) == "cuda_sim:0" for d in dk.devices()):
        yield "cuda_sim:0"
        return
    lib = request.getfixturevalue("cuda_sim_library")
    old = os.environ.get("DEVICEKIT_PLUGIN_PATH")
    os.environ["DEVICEKIT_PLUGIN_PATH"] = os.pathsep.join(p for p in (str(lib), old) if p)
    dk.reload_plugins()
    try:
        yield "cuda_sim:0"
    finally:
        if old is None:
            os.environ.pop("DEVICEKIT_PLUGIN_PATH", None)
        else:
            os.environ["DEVICEKIT_PLUGIN_PATH"] = old
        dk.reload_plugins()
