"""The SIMT dialect and its CPU emulator (reference_backend/cuda/src/simt/).

Builds reference_backend/cuda/tests/simt_selftest.cu with the host C++
compiler (the emulator) and runs each case: the correct kernels must compute
the right results, and each kernel with one planted bug must be reported with
the finding that names it. With nvcc present, the same file must also compile
as CUDA: one source, two builds.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import HUNG_S

ROOT = Path(__file__).resolve().parents[1]
CUDA = ROOT / "reference_backend" / "cuda"
SELFTEST = CUDA / "tests" / "simt_selftest.cu"
EMULATOR = CUDA / "src" / "simt" / "simt_sim.cpp"


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


@pytest.fixture(scope="module")
def selftest(tmp_path_factory):
    exe = tmp_path_factory.mktemp("simt") / "simt_selftest"
    cmd = [_cxx(), "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror",
           "-x", "c++", str(SELFTEST), "-x", "none", str(EMULATOR), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return exe


def _run(exe, case):
    p = subprocess.run([str(exe), case], capture_output=True, text=True, timeout=HUNG_S)
    return p.returncode, p.stdout.strip()


@pytest.mark.parametrize("case", ["add_strided", "row_sum", "warp_allreduce"])
def test_correct_kernels_run_and_compute_the_right_result(selftest, case):
    assert _run(selftest, case) == (0, "ok")


# Each planted bug, and the words its report must contain: the kind of
# finding and where (array and slot, or barrier line, or lane).
PLANTED = {
    "row_sum_missing_barrier": ["read of partial[64]", "no thread of the block has written yet"],
    "row_sum_barrier_in_branch": ["waits at the barrier at simt_selftest.cu:", "has returned"],
    "row_sum_shared_too_small": ["write of partial[64] out of bounds", "has 64 elements"],
    "scale_early_return": ["thread (100,0,0) never reaches", "early return"],
    "shift_unwritten": ["read of tile[128]", "no thread of the block has written"],
    "scan_war": ["race: reads s[0]", "written by block (0,0,0) thread (0,0,0)"],
    "rotate_in_place": ["race: writes s[1]", "read by block (0,0,0) thread (0,0,0)"],
    "last_writer_wins": ["race: writes s[0]", "also written by"],
    "divergent_shuffle": ["not reached by every lane of its warp", "lane 16"],
    "too_much_shared": ["static shared memory reaches 65536 bytes", "at most 49152"],
    "block_too_large": ["invalid configuration argument", "2048 threads"],
}


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_each_planted_bug_is_reported_with_where_it_is(selftest, case):
    rc, out = _run(selftest, case)
    assert rc == 0, out
    assert out != "ok", f"{case}: the emulator ran a buggy kernel without a finding"
    for words in PLANTED[case]:
        assert words in out, out
    assert out.startswith(("kernel ", "launch of ")), out


def test_grid_stride_without_the_grid_size_gives_a_wrong_result(selftest):
    # The emulator gives grid-stride loops several blocks, so blocks overlap
    # and the `+=` counts elements twice: the result check catches it.
    rc, out = _run(selftest, "accumulate_no_grid_stride")
    assert rc == 1 and out.startswith("WRONG RESULT"), out


def test_block_order_is_shuffled_but_reproducible(selftest):
    # A finding names the first failing block in the launch's shuffled order:
    # the same seed gives the same block, another seed (usually) another one.
    def first_block(seed):
        env = dict(os.environ, DK_CUDA_SIM_SEED=str(seed))
        p = subprocess.run([str(selftest), "row_sum_missing_barrier"], env=env,
                           capture_output=True, text=True, timeout=HUNG_S)
        return p.stdout.split("block ")[1].split(" ")[0]

    assert first_block(1) == first_block(1)
    assert len({first_block(s) for s in range(8)}) > 1


def test_the_same_source_compiles_as_cuda(tmp_path):
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (CUDACXX, PATH, /usr/local/cuda/bin)")
    p = subprocess.run([nvcc, "-std=c++17", "-arch=sm_90", "-c", str(SELFTEST),
                        "-o", str(tmp_path / "simt_selftest.o")],
                       capture_output=True, text=True, timeout=HUNG_S)
    assert p.returncode == 0, p.stderr
