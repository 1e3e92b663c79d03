"""The conformance section "hostile" (conformance_tests/hostile.py): every case
passes on cpu:0, and careless kernels planted in its device table fail the
cases aimed at them.

The careless kernels are numpy in the precision a careless kernel keeps (a
sequential float32 or float16 running sum, exp without the max subtracted,
a one-pass variance, a float16 GEMM accumulator), swapped in for the SDK calls
the cases make (``hostile.IMPL``) with the kernel-ran check off: what this
shows is that the data and the bounds tell them from careful kernels. That
the same cases kill such bugs inside the CPU plugin's C++ is the mutation
run's job (``benchmarks/mutation_run.py --kind hostile -k hostile/``).

Needs: cpu:0.
"""

import numpy as np
import pytest

import devicekit as dk
from devicekit.conformance.case import Target, run_case
from devicekit.conformance_tests import hostile


@pytest.fixture(scope="module")
def target():
    return Target.of(dk.device("cpu:0"))


@pytest.fixture(scope="module")
def cases(target):
    return {c.id: c for c in hostile.cases(target)}


def test_every_hostile_case_passes_on_the_reference_plugin(target, cases):
    results = {i: run_case(c, target) for i, c in cases.items()}
    bad = {i: r["message"][:300] for i, r in results.items() if r["outcome"] != "pass"}
    assert not bad, bad
    assert len(results) == len(hostile.PLAN) >= 20
    assert {c.op for c in cases.values()} >= {"reduce_sum", "mean", "var", "layer_norm",
                                              "rms_norm", "softmax", "log_softmax", "sdpa",
                                              "matmul"}


# ---- careless kernels (host numpy; each returns a device tensor) ----------------------

def _back(arr, like):
    return dk.tensor(np.ascontiguousarray(arr), device=like.device)


def running_sum(x, axes):
    """A sequential running sum in the storage precision (numpy's cumsum does
    not split the sum, unlike np.sum)."""
    a = x.numpy()
    return _back(np.cumsum(a, axis=axes[0], dtype=a.dtype).take([-1], axis=axes[0]), x)


def one_pass_var(x):
    a = x.numpy()
    n = a.shape[-1]
    m = a.mean(-1, keepdims=True, dtype=np.float32)
    return _back((np.mean(a * a, -1, keepdims=True) - m * m) * np.float32(n / (n - 1)), x)


def one_pass_layer_norm(x):
    a = x.numpy()
    m = a.mean(-1, keepdims=True, dtype=np.float32)
    var = np.mean(a * a, -1, keepdims=True) - m * m
    with np.errstate(all="ignore"):
        return _back(((a - m) / np.sqrt(var + np.float32(1e-5))).astype(np.float32), x)


def unshifted_softmax(x):
    a = x.numpy().astype(np.float32)
    with np.errstate(all="ignore"):
        e = np.exp(a)
        return _back((e / e.sum(-1, keepdims=True)).astype(x.numpy().dtype), x)


def unshifted_log_softmax(x):
    a = x.numpy()
    with np.errstate(all="ignore"):
        return _back(a - np.log(np.exp(a).sum(-1, keepdims=True)), x)


def unshifted_sdpa(q, k, v):
    qa, ka, va = q.numpy(), k.numpy(), v.numpy()
    with np.errstate(all="ignore"):
        e = np.exp(np.float32(0.25) * qa @ np.swapaxes(ka, -1, -2))
        return _back((e / e.sum(-1, keepdims=True)) @ va, q)


def half_accumulating_matmul(a, b):
    """A float16 GEMM whose running sum is float16: each product added and rounded in turn."""
    x, y = a.numpy(), b.numpy()
    prods = (x[..., :, :, None].astype(np.float32) * y[..., None, :, :]).astype(np.float16)
    return _back(np.cumsum(prods, axis=-2, dtype=np.float16)[..., -1, :], a)


def rms_norm_in_half(x):
    a = x.numpy()
    with np.errstate(all="ignore"):
        ms = np.mean((a * a).astype(np.float16), -1, keepdims=True, dtype=np.float16)
        return _back((a / np.sqrt(ms.astype(np.float32) + np.float32(1e-6))).astype(np.float32), x)


def tf32_matmul(a, b):
    """float32 GEMM on inputs rounded to 10 significand bits (TF32)."""
    def tf32(t):
        bits = t.numpy().view(np.uint32)
        return ((bits + 0x1000) & np.uint32(0xFFFFE000)).view(np.float32)
    return _back(np.matmul(tf32(a), tf32(b)), a)


CARELESS = [  # (name, IMPL key, fake, cases it must fail)
    ("sequential_float32_sum", "reduce_sum", running_sum,
     ["hostile/reduce_sum/float32/absorb", "hostile/reduce_sum/float32/cancel",
      "hostile/reduce_sum/float32/columns", "hostile/reduce_sum/float64/absorb"]),
    ("float16_accumulator_sum", "reduce_sum", running_sum, ["hostile/reduce_sum/float16/exact"]),
    ("one_pass_variance", "var", one_pass_var, ["hostile/var/float32/large_mean"]),
    ("one_pass_layer_norm", "layer_norm", one_pass_layer_norm,
     ["hostile/layer_norm/float32/large_mean"]),
    ("softmax_without_max", "softmax", unshifted_softmax,
     ["hostile/softmax/float32/offset", "hostile/softmax/float16/offset"]),
    ("log_softmax_without_max", "log_softmax", unshifted_log_softmax,
     ["hostile/log_softmax/float32/offset"]),
    ("attention_without_max", "sdpa", unshifted_sdpa, ["hostile/sdpa/float32/offset"]),
    ("float16_accumulator_gemm", "matmul", half_accumulating_matmul,
     ["hostile/matmul/float16/exact"]),
    ("tf32_gemm", "matmul", tf32_matmul, ["hostile/matmul/float32/mixed"]),
    ("rms_norm_squares_in_float16", "rms_norm", rms_norm_in_half,
     ["hostile/rms_norm/float32/long_rows"]),
]


@pytest.mark.parametrize("name,key,fake,must_fail", CARELESS, ids=[c[0] for c in CARELESS])
def test_careless_kernels_fail_the_cases_aimed_at_them(monkeypatch, target, cases, name, key,
                                                       fake, must_fail):
    monkeypatch.setitem(hostile.IMPL, key, fake)
    monkeypatch.setattr(hostile, "KERNEL_CHECK", False)
    for case_id in must_fail:
        r = run_case(cases[case_id], target)
        assert r["outcome"] == "fail", (name, case_id, r["outcome"], r["message"][:300])
        assert "outside the bound" in r["message"] or "differ from the exact" in r["message"]
