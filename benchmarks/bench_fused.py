"""Fused kernels against their decompositions, on the reference CPU plugin.

- rms_norm on a 4096 x 4096 float32 array: F.rms_norm(x, w) (the fused
  kernel), the same call under ``devicekit.fused_kernels(False)`` (the
  decomposition into base ops), and a plain numpy copy of the same array into a
  preallocated buffer (``np.copyto``), the memory-traffic floor.
  Targets: fused >= 3x decomposed, fused <= 2x the copy.
- causal scaled_dot_product_attention, q/k/v 1 x 8 x 1024 x 64 float32: fused,
  decomposed, and PyTorch CPU ``scaled_dot_product_attention(is_causal=True)``
  (column skipped when torch is not installed). Target: fused >= 3x decomposed.
  Then the same call on the permuted views attention code makes: q/k/v as
  pieces of ``qkv.split(512, dim=2)`` of a [1, 1024, 3*512] tensor, each
  ``reshape(1, 1024, 8, 64).transpose(1, 2)``, against the dense call (target:
  about 1x; a kernel that declines the views shows the decomposition's time).

With ``--dtype bfloat16`` (or float16): the 16-bit fused kernels (cpu.<op>_bf16,
cpu.<op>_f16) against the decomposition at the shapes of the scaled GPT of
benchmarks/bench_gpt_speed.py (8 x 128 tokens, d_model 256, 8 heads of 32,
MLP 1024): rms_norm and layer_norm on [1024, 256], softmax on [64, 128, 128],
gelu on [1024, 1024], causal attention on 8 x 8 x 128 x 32, each forward
alone and forward + backward (autograd, a ones cotangent), plus rms_norm on
4096 x 4096. Sides alternate round by round (``_timing.alternate``), so load on
a shared machine hits both alike; medians and the spread (min-max) of
--rounds rounds are printed.

Each float32 time is the best of --repeats runs, each ending with a synchronize, so
every kernel has run. Ratios are printed, never asserted; composite_stats()
is printed too, so a run where the fused path was not taken is visible.
"""

import argparse

import numpy as np
from _timing import alternate, best_of, spread

import devicekit as dk
import devicekit.nn.functional as F


def best_ms(fn, repeats, finish=dk.synchronize):
    fn()  # warm-up: allocator cache, first-call dispatch
    finish()
    return best_of(fn, repeats, finish) * 1e3


def decomposed(fn):
    def run():
        with dk.fused_kernels(False):
            return fn()
    return run


def bench_rms_norm(repeats):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, 4096), dtype=np.float32)
    w = rng.standard_normal(4096, dtype=np.float32)
    tx, tw = dk.tensor(x), dk.tensor(w)
    fused = best_ms(lambda: F.rms_norm(tx, tw), repeats)
    dec = best_ms(decomposed(lambda: F.rms_norm(tx, tw)), repeats)
    dst = np.empty_like(x)
    copy = best_ms(lambda: np.copyto(dst, x), repeats, finish=lambda: None)
    print(f"rms_norm 4096x4096 f32: fused {fused:.2f} ms | decomposed {dec:.2f} ms "
          f"({dec / fused:.2f}x fused, target >= 3) | np.copyto {copy:.2f} ms "
          f"(fused / copy {fused / copy:.2f}, target <= 2)")


def bench_sdpa(repeats):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 8, 1024, 64), dtype=np.float32) for _ in range(3))
    tq, tk, tv = dk.tensor(q), dk.tensor(k), dk.tensor(v)
    call = lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)  # noqa: E731
    fused = best_ms(call, repeats)
    dec = best_ms(decomposed(call), repeats)
    line = (f"sdpa causal 1x8x1024x64 f32: fused {fused:.2f} ms | decomposed {dec:.2f} ms "
            f"({dec / fused:.2f}x fused, target >= 3)")
    try:
        import torch
    except ImportError:
        print(line + " | torch: not installed")
        return
    Q, K, V = (torch.from_numpy(a) for a in (q, k, v))
    ref = best_ms(lambda: torch.nn.functional.scaled_dot_product_attention(Q, K, V, is_causal=True),
                  repeats, finish=lambda: None)
    print(line + f" | torch {ref:.2f} ms (fused / torch {fused / ref:.2f})")


def bench_sdpa_permuted(repeats):
    """The dense call of bench_sdpa against the same call on permuted q/k/v views."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 8, 1024, 64), dtype=np.float32) for _ in range(3))
    tq, tk, tv = dk.tensor(q), dk.tensor(k), dk.tensor(v)
    qkv = dk.tensor(rng.standard_normal((1, 1024, 3 * 512), dtype=np.float32))
    pq, pk, pv = (t.reshape(1, 1024, 8, 64).transpose(1, 2) for t in qkv.split(512, dim=2))
    dense = best_ms(lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=True), repeats)
    dk.reset_composite_stats()
    permuted = best_ms(lambda: F.scaled_dot_product_attention(pq, pk, pv, is_causal=True), repeats)
    st = dk.composite_stats().get("scaled_dot_product_attention", {})
    ran = ", ".join(st.get("fused", {})) or "the decomposition"
    print(f"sdpa causal 1x8x1024x64 f32, permuted q/k/v views: {permuted:.2f} ms ({ran}) | "
          f"dense {dense:.2f} ms (permuted / dense {permuted / dense:.2f}, target about 1)")


# name -> (op, shapes of the floating inputs, kwargs): the scaled GPT's shapes
HALF_CASES = {
    "rms_norm [1024, 256]": (F.rms_norm, [(1024, 256), (256,)], {}),
    "layer_norm [1024, 256]": (F.layer_norm, [(1024, 256), (256,), (256,)], {}),
    "softmax [64, 128, 128]": (F.softmax, [(64, 128, 128)], {}),
    "gelu [1024, 1024]": (F.gelu, [(1024, 1024)], {}),
    "sdpa causal 8x8x128x32": (F.scaled_dot_product_attention,
                               [(8, 8, 128, 32)] * 3, {"is_causal": True}),
    "rms_norm [4096, 4096]": (F.rms_norm, [(4096, 4096), (4096,)], {}),
}


def _half_case(name, fn, shapes, kw, dtype, rounds, rng):
    xs = [dk.tensor(rng.standard_normal(s), dtype=dtype) for s in shapes]
    leaves = [x.detach().requires_grad_(True) for x in xs]
    ones = dk.ones(list(fn(*xs, **kw).shape), dtype=dtype)

    def fwd():
        with dk.no_grad():
            return fn(*xs, **kw)

    def train():
        fn(*leaves, **kw).backward(ones)

    sides = {"fused": (fwd, dk.synchronize), "decomposed": (decomposed(fwd), dk.synchronize),
             "fused train": (train, dk.synchronize),
             "decomposed train": (decomposed(train), dk.synchronize)}
    for f, _ in sides.values():  # warm-up
        f()
    dk.reset_composite_stats()
    t = {k: [w * 1e3 for w, _ in v] for k, v in alternate(sides, rounds).items()}
    kernels = sorted({k for s in dk.composite_stats().values() for k in s["fused"]})
    line = []
    for a, b in (("fused", "decomposed"), ("fused train", "decomposed train")):
        (fm, flo, fhi), (dm, dlo, dhi) = spread(t[a]), spread(t[b])
        line.append(f"{a} {fm:.2f} ({flo:.2f}-{fhi:.2f}) vs {dm:.2f} ({dlo:.2f}-{dhi:.2f}), "
                    f"{dm / fm:.2f}x")
    print(f"  {name}: " + " | ".join(line) + f"  [{', '.join(kernels)}]")


def bench_half(dtype, rounds, names=None):
    """Fused vs decomposed, forward and forward + backward, alternated."""
    rng = np.random.default_rng(0)
    print(f"{dtype}: median (min-max) of {rounds} alternated rounds, ms per call")
    for name, (fn, shapes, kw) in HALF_CASES.items():
        if not names or any(n in name for n in names):
            _half_case(name, fn, shapes, kw, dtype, rounds, rng)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", help="run one kernel's benchmarks (float32: rms_norm or sdpa; "
                                   "16-bit: a substring of a case name)")
    ap.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                    help="float32: the benchmarks above; bfloat16 / float16: the 16-bit kernels "
                         "at the scaled GPT's shapes")
    ap.add_argument("--rounds", type=int, default=11, help="alternated rounds (16-bit runs)")
    args = ap.parse_args()
    if args.dtype != "float32":
        bench_half(args.dtype, args.rounds, [args.only] if args.only else None)
        return
    if args.only not in (None, "rms_norm", "sdpa"):
        ap.error("--only for float32: rms_norm or sdpa")
    dk.reset_composite_stats()
    if args.only != "sdpa":
        bench_rms_norm(args.repeats)
    if args.only == "rms_norm":
        print("composite_stats:", dk.composite_stats())
        return
    bench_sdpa(args.repeats)
    print("composite_stats:", dk.composite_stats())
    bench_sdpa_permuted(args.repeats)  # resets the stats: it prints which path it ran


if __name__ == "__main__":
    main()
