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

Each time is the best of --repeats runs, each ending with a synchronize, so
every kernel has run. Ratios are printed, never asserted; composite_stats()
is printed too, so a run where the fused path was not taken is visible.
"""

import argparse

import numpy as np
from _timing import best_of

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", choices=("rms_norm", "sdpa"), help="run one kernel's benchmarks")
    args = ap.parse_args()
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
