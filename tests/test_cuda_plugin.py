"""The reference CUDA plugin (reference_backend/cuda/) on a machine without a GPU.

What can be proven here, grouped by what it needs:
- a host C++ compiler: the plugin's float16 / bfloat16 and cast conversions
  give the CPU plugin's bits (tests/convert_matches_cpu.cpp); the package's
  library_path() picks the one library a build installed;
- the emulated build (`cuda_sim`, built once per session with CMake, ~1 min;
  or the one in DEVICEKIT_CUDA_SIM_LIBRARY): it loads under its own name, its
  copy / fill / cast / add give the CPU plugin's bits on every dtype and
  layout, the conformance suite passes those ops, and a kernel's data error
  (a gather index out of range) is reported once at the stream's synchronize;
- nvcc (the real build for sm_90, built once per session): the library
  exports only DK_GetApi, needs only libc / libstdc++ / libm / libgcc_s, and
  on a machine without the NVIDIA driver `devicekit devices` shows plugin
  `cuda` with the one-line "no NVIDIA driver" load error while cpu:0 works
  beside it.
The GPU itself is verify_on_gpu.sh's job.
"""

import ctypes
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cmake_build
from conftest import HUNG_S

ROOT = Path(__file__).resolve().parents[1]
CUDA = ROOT / "reference_backend" / "cuda"
INCLUDE = ROOT / "device_api" / "include"


def _cxx():
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    pytest.skip("no host C++ compiler on PATH (CXX, c++, g++, clang++)")


def _nvcc():
    for cand in (os.environ.get("CUDACXX"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and Path(cand).is_file():
            return cand
    return None




# ------------------------------------------------------------ needs a host compiler

def test_conversions_give_the_cpu_plugins_bits(tmp_path):
    exe = tmp_path / "convert_matches_cpu"
    cmd = [_cxx(), "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE}",
           f"-I{CUDA / 'src'}", f"-I{ROOT / 'reference_backend' / 'cpu' / 'src'}",
           str(CUDA / "tests" / "convert_matches_cpu.cpp"), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    p = subprocess.run([str(exe)], capture_output=True, text=True, timeout=HUNG_S)
    assert (p.returncode, p.stdout.strip()) == (0, "ok"), p.stdout


def _package_copy(tmp_path, libraries):
    pkg = tmp_path / "devicekit_cuda"
    pkg.mkdir()
    shutil.copy(CUDA / "python" / "devicekit_cuda" / "__init__.py", pkg)
    for lib in libraries:
        (pkg / lib).write_bytes(b"")
    spec = importlib.util.spec_from_file_location(f"dkc_{tmp_path.name}", pkg / "__init__.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return pkg, mod


@pytest.mark.parametrize("lib,name", [("libdevicekit_cuda.so", "cuda"),
                                      ("libdevicekit_cuda_sim.so", "cuda_sim")])
def test_library_path_is_the_library_the_build_installed(tmp_path, lib, name):
    pkg, mod = _package_copy(tmp_path, [lib])
    assert mod.built_plugin() == name
    assert mod.library_path() == str((pkg / lib).resolve())


@pytest.mark.parametrize("libs", [[], ["libdevicekit_cuda.so", "libdevicekit_cuda_sim.so"]])
def test_library_path_refuses_a_package_without_exactly_one_library(tmp_path, libs):
    _, mod = _package_copy(tmp_path, libs)
    with pytest.raises(FileNotFoundError, match=f"holds {len(libs)} plugin libraries"):
        mod.library_path()


# ------------------------------------------------------------------ the emulated build

@pytest.fixture(scope="session")
def sim_library(cuda_sim_library):
    return cuda_sim_library


@pytest.mark.slow
def test_emulated_build_loads_as_cuda_sim(sim_library, run_cli):
    p = run_cli(["devices"], plugin_path=[sim_library])
    assert p.returncode == 0, p.stderr
    assert "cuda_sim:0" in p.stdout and "cpu:0" in p.stdout
    assert "Load errors (0)" in p.stdout, p.stdout


# Every base op of 1.0 on both plugins, results compared bit for bit: the
# emulated kernels are the CUDA kernels, so this is what the GPU will compute
# (up to the GPU's own arithmetic: add and cast round like IEEE 754 hardware).
SAME_BITS = r"""
import numpy as np, devicekit as dk
DTYPES = [dk.float32, dk.float16, dk.bfloat16, dk.float64, dk.int8, dk.int32, dk.int64,
          dk.uint8, dk.bool_]
special = np.array([0.0, -0.0, 1.5, -2.5, 0.1, 65504, 65520, 1e-8, 1e30, -1e30, np.inf,
                    -np.inf, np.nan, 255.6, -128.9, 3e9, -3e9, 1e19], dtype=np.float64)
def run(dev):
    rng = np.random.default_rng(7)  # the same data on both devices
    out = []
    x = dk.tensor(np.concatenate([special, rng.standard_normal(1000) * 300]), device=dev)
    for src in DTYPES:
        xs = dk.ops.cast(x, src)
        for dst in DTYPES:
            out.append(dk.ops.cast(xs, dst).numpy().tobytes())
    for dt in DTYPES:
        for v in (2.5, -7, True, 1e10, float("nan")):
            out.append(dk.full((3, 70), v, dtype=dt, device=dev).numpy().tobytes())
        a = dk.ops.cast(dk.tensor(rng.standard_normal((4, 1, 37)) * 50, device=dev), dt)
        b = dk.ops.cast(dk.tensor(rng.standard_normal((5, 1)) * 50, device=dev), dt)
        out.append(dk.ops.add(a, b).numpy().tobytes())          # broadcast both ways
        out.append(dk.ops.add(a[:, :, :36:3], a[:, :, 1::3]).numpy().tobytes())  # strided
        t = dk.ops.cast(dk.tensor(rng.standard_normal((6, 7, 9)) * 50, device=dev), dt)
        out.append(t.permute(2, 0, 1).contiguous().numpy().tobytes())   # strided copy
        out.append(t[::2, 1:, ::4].contiguous().numpy().tobytes())
    return out
cpu, sim = run("cpu:0"), run("cuda_sim:0")
bad = [i for i, (p, q) in enumerate(zip(cpu, sim)) if p != q]
print("cases", len(cpu), "differ", bad)
"""


@pytest.mark.slow
def test_base_ops_1_0_give_the_cpu_plugins_bits(sim_library, run_python):
    p = run_python(SAME_BITS, plugin_path=[sim_library])
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().endswith("differ []"), p.stdout
    assert int(p.stdout.split()[1]) > 81 + 9 * 5, p.stdout


@pytest.mark.slow
def test_conformance_passes_copy_fill_cast_add(sim_library, tmp_path):
    report = tmp_path / "report"
    cmd = [sys.executable, "-m", "devicekit", "conformance", "--plugin", str(sim_library),
           "--device", "cuda_sim:0", "--level", "core", "--jobs", "2", "--report", str(report)]
    for op in ("copy", "fill", "cast", "add"):
        cmd += ["--op", op]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=HUNG_S)
    doc = json.loads((report / "report.json").read_text())
    assert p.returncode in (0, 1), p.stderr  # 1: ops without a kernel are not implemented
    outcomes = {}
    for case in doc["cases"]:
        outcomes[case["outcome"]] = outcomes.get(case["outcome"], 0) + 1
    assert outcomes.get("fail", 0) == outcomes.get("error", 0) == outcomes.get("crash", 0) == 0, \
        [c for c in doc["cases"] if c["outcome"] in ("fail", "error", "crash")][:5]
    assert outcomes.get("pass", 0) >= 400, outcomes


# A kernel's data error (kernel.h report_error) reaches the SDK at the
# stream's synchronize as one DK_Error naming the op, the input, the index
# and the bound, and is cleared: the next op on the device works.
KERNEL_ERROR = r"""
import numpy as np, devicekit as dk
x = dk.zeros((4, 5), device="cuda_sim:0")
idx = dk.tensor(np.array([[0, 1, 2, 3, 9], [0, 7, 0, 0, 0]], dtype=np.int64), device="cuda_sim:0")
try:
    dk.ops.gather(x, 0, idx).numpy()
    print("no error")
except dk.DeviceKitError as e:
    print(type(e).__name__, "|", e)
print("after", dk.ops.add(x, x).numpy().sum())
"""


@pytest.mark.slow
def test_a_kernels_index_error_is_reported_once_at_synchronize(sim_library, run_python):
    if "gather" not in (CUDA / "src" / "ops_1_1.def").read_text():
        pytest.skip("no gather kernel in ops_1_1.def yet")
    p = run_python(KERNEL_ERROR, plugin_path=[sim_library])
    assert p.returncode == 0, p.stderr
    first, after = p.stdout.strip().splitlines()
    assert "[OUT_OF_RANGE]: cuda_sim.Kernel(gather): input 1 holds index " in first, first
    assert ("index 9," in first or "index 7," in first) and "dimension of size 4" in first, first
    assert "(2 element(s) reported" in first, first
    assert after == "after 0.0"


# ----------------------------------------------------------------------- the real build

@pytest.fixture(scope="session")
def real_library(tmp_path_factory):
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("no nvcc (CUDACXX, PATH, /usr/local/cuda/bin): the real build needs one")
    build = cmake_build(CUDA, tmp_path_factory.mktemp("cuda_real"),
                         {"CMAKE_CUDA_COMPILER": nvcc, "CMAKE_CUDA_ARCHITECTURES": "90"})
    return build / "libdevicekit_cuda.so"


def _readelf(*args):
    if not shutil.which("readelf"):
        pytest.skip("no readelf on PATH")
    return subprocess.run(["readelf", *args], check=True, capture_output=True, text=True).stdout


@pytest.mark.slow
def test_real_build_exports_only_dk_getapi_and_needs_no_cuda_library(real_library):
    syms = [line.split()[-1] for line in _readelf("--dyn-syms", "-W", str(real_library)).splitlines()
            if " GLOBAL " in line and " UND " not in line]
    assert syms == ["DK_GetApi"], syms
    needed = {line.split("[")[1].rstrip("]") for line in _readelf("-d", str(real_library)).splitlines()
              if "(NEEDED)" in line}
    allowed = {"libc.so.6", "libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2",
               "libdl.so.2", "libpthread.so.0", "librt.so.1"}
    assert needed <= allowed, needed - allowed  # no libcudart: linked statically


def _has_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@pytest.mark.slow
def test_without_a_driver_cuda_is_a_one_line_load_error_beside_a_working_cpu(real_library,
                                                                              run_cli, run_python):
    if _has_driver():
        pytest.skip("this machine has an NVIDIA driver: verify_on_gpu.sh checks cuda:0 there")
    p = run_cli(["devices"], plugin_path=[real_library])
    assert p.returncode == 0, p.stderr
    assert "Load errors (1)" in p.stdout, p.stdout
    error = [line for line in p.stdout.splitlines() if "Plugin_Initialize failed" in line]
    assert len(error) == 1 and "[UNAVAILABLE]: cuda.Plugin_Initialize: no NVIDIA driver " \
        "(libcuda.so.1 not found): libcuda.so.1: " in error[0], p.stdout
    p = run_python("import devicekit as dk; print(dk.ops.add(dk.ones((2,), device='cpu:0'), "
                   "dk.ones((2,), device='cpu:0')).numpy().tolist())", plugin_path=[real_library])
    assert p.returncode == 0 and p.stdout.strip() == "[2.0, 2.0]", p.stderr
