"""The reference CPU plugin's DEVICEKIT_CPU_ISA cap (src/fast/fast.h,
``cpu_isa``): each instruction-set level's copy of a fast path (the GEMM's and
attention's register tiles, gelu, tanh, the norms, F16C conversions) is
different code, and a machine runs only its own level's copy unless the level
is capped. So the copies below the machine's are checked here, with the
conformance cases that reach the fast paths, and a value the plugin cannot use
is refused at load (tests/test_loader.py).

Needs: cpu:0 on x86-64 (elsewhere only the base level exists).
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import HUNG_S

#: The cases that reach src/fast/: matmul in every layout at a ladder of
#: sizes, float64 and a 16-bit dtype too; attention forward and backward
#: (tiles, masks, causal, GQA, permuted views); gelu and the norms.
FAST_CASES = ("kernels/matmul/float32/layouts", "kernels/matmul/float64/layouts",
              "kernels/matmul/float16/layouts", "fused/cpu.sdpa_flash_f32/float32/",
              "fused/cpu.sdpa_flash_f32/permuted/", "fused/cpu.sdpa_backward_f32/float32/",
              "fused/cpu.gelu_f32/float32/", "fused/cpu.gelu_backward_f32/float32/",
              "fused/cpu.layer_norm_f32/float32/", "fused/cpu.sdpa_flash_f16/float16/")


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "AMD64"),
                    reason="only x86-64 builds have more than the base level")
def test_base_level_passes_the_fast_path_cases(tmp_path):
    env = dict(os.environ, DEVICEKIT_CPU_ISA="base")
    env.pop("DEVICEKIT_CPU_THREADS", None)  # default threads: work split as users get it
    cmd = [sys.executable, "-m", "devicekit", "conformance", "--device", "cpu:0", "--jobs", "2",
           "--report", str(tmp_path / "rep")]
    for pattern in FAST_CASES:
        cmd += ["-k", pattern]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=HUNG_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    ran = {c["id"] for c in report["cases"] if c["outcome"] == "pass"}
    for pattern in FAST_CASES:  # each pattern ran something (a renamed case fails here)
        assert any(pattern in i for i in ran), (pattern, sorted(ran)[:20])


_TANH = """
import sys, numpy as np, devicekit as dk
x = np.concatenate([np.linspace(-12, 12, 40001), np.geomspace(1e-9, 1e-2, 2001),
                    -np.geomspace(1e-9, 1e-2, 2001), [0.0, -0.0, np.inf, -np.inf, np.nan]])
x = x.astype(np.float32)
np.save(sys.argv[1], dk.ops.tanh(dk.tensor(x)).numpy())
"""


def _has_avx512():
    try:
        with open("/proc/cpuinfo") as f:
            return "avx512f" in f.read()
    except OSError:
        return False


@pytest.mark.skipif(not _has_avx512(), reason="needs an AVX-512 CPU to run both tanh builds")
def test_tanh_avx2_and_avx512_builds_give_the_same_bits(tmp_path):
    """fast/elementwise.cpp compiles tanh_float twice (AVX2: 4 doubles per
    vector, AVX-512: 8); the level picks one, and the values must not depend
    on which (the conformance cases check the running level's accuracy)."""
    import numpy as np

    out = {}
    for isa in ("avx2", "avx512"):
        env = dict(os.environ, DEVICEKIT_CPU_ISA=isa, DEVICEKIT_CPU_THREADS="1")
        path = tmp_path / f"{isa}.npy"
        proc = subprocess.run([sys.executable, "-c", _TANH, str(path)], env=env,
                              capture_output=True, text=True, timeout=HUNG_S)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[isa] = np.load(path)
    assert out["avx2"].tobytes() == out["avx512"].tobytes()
    assert np.isnan(out["avx2"][-1]) and list(out["avx2"][-5:-1]) == [0.0, -0.0, 1.0, -1.0]


_EXP = """
import sys, numpy as np, devicekit as dk
x = np.concatenate([np.linspace(-110, 90, 40001), np.geomspace(1e-9, 1e-2, 2001),
                    -np.geomspace(1e-9, 1e-2, 2001), [-103.5, -87.5, 88.72, 88.73, 0.0, -0.0,
                                                      np.inf, -np.inf, np.nan]])
x = x.astype(np.float32)
np.save(sys.argv[1], np.stack([x, dk.ops.exp(dk.tensor(x)).numpy()]))
"""


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "AMD64"),
                    reason="only x86-64 builds have more than the base level")
def test_exp_is_within_one_ulp_at_every_level_and_the_same_bits_in_avx2_and_avx512(tmp_path):
    """exp of dense float32 (fast/elementwise.cpp, exp_float in tanh.h: double
    arithmetic rounded once) at each level the machine has: within 1 ulp of
    float64's exp, exact at the ends (subnormal results, overflow to inf,
    +-0, +-inf, NaN); the AVX2 and AVX-512 builds give the same bits."""
    import numpy as np

    levels = ["base", "avx2"] + (["avx512"] if _has_avx512() else [])
    out = {}
    for isa in levels:
        env = dict(os.environ, DEVICEKIT_CPU_ISA=isa, DEVICEKIT_CPU_THREADS="1")
        path = tmp_path / f"{isa}.npy"
        proc = subprocess.run([sys.executable, "-c", _EXP, str(path)], env=env,
                              capture_output=True, text=True, timeout=HUNG_S)
        assert proc.returncode == 0, proc.stderr[-2000:]
        x, got = np.load(path)
        want = np.exp(x.astype(np.float64))
        finite = np.isfinite(want) & (want < np.finfo(np.float32).max)
        ulp = np.spacing(want[finite].astype(np.float32)).astype(np.float64)
        err = np.abs(got[finite].astype(np.float64) - want[finite]) / ulp
        assert err.max() <= 1.0, (isa, float(err.max()), x[finite][err.argmax()])
        assert list(got[-6:-1]) == [np.inf, 1.0, 1.0, np.inf, 0.0]  # 88.73 overflows
        assert np.isnan(got[-1])
        out[isa] = got
    if "avx512" in out:
        assert out["avx2"].tobytes() == out["avx512"].tobytes()
