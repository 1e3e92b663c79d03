"""Throughput of large base ops on the reference CPU plugin, as ratios against
numpy (and PyTorch CPU when installed), all measured in this one run.

- elementwise add on 16M float32: devicekit throughput / numpy's (target >= 0.8)
- matmul float32 1024^3 and 2048^3: devicekit GFLOP/s / numpy's (target >= 0.7)

Each devicekit timing ends with a synchronize, so kernels have really run.
"""

import argparse

import numpy as np
from _timing import best_of

import devicekit as dk


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu:0")
    args = ap.parse_args()
    dev = dk.device(args.device)
    sync = dev.synchronize
    try:
        import torch
    except ImportError:
        torch = None

    n = 16 * 1024 * 1024
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    a, b = dk.tensor(x, device=dev), dk.tensor(y, device=dev)
    out_np = np.empty_like(x)
    dk.ops.add(a, b)
    sync()
    t_dk = best_of(lambda: dk.ops.add(a, b), args.repeats, sync)
    t_np = best_of(lambda: np.add(x, y, out=out_np), args.repeats)
    t_np_alloc = best_of(lambda: np.add(x, y), args.repeats)
    print(f"add 16M float32: devicekit {t_dk * 1e3:.2f} ms, numpy (out=) {t_np * 1e3:.2f} ms, "
          f"numpy (new array) {t_np_alloc * 1e3:.2f} ms")
    print(f"  throughput ratio devicekit/numpy(new array) = {t_np_alloc / t_dk:.2f}x  (target >= 0.8)")
    if torch is not None:
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
        t_th = best_of(lambda: torch.add(tx, ty), args.repeats)
        print(f"  torch.add {t_th * 1e3:.2f} ms; devicekit/torch throughput = {t_th / t_dk:.2f}x")

    for size in (1024, 2048):
        p = rng.standard_normal((size, size), dtype=np.float32)
        q = rng.standard_normal((size, size), dtype=np.float32)
        pa, qa = dk.tensor(p, device=dev), dk.tensor(q, device=dev)
        dk.ops.matmul(pa, qa)
        sync()
        flops = 2.0 * size ** 3
        reps = max(2, args.repeats // (2 if size > 1024 else 1))
        g_dk = flops / best_of(lambda pa=pa, qa=qa: dk.ops.matmul(pa, qa), reps, sync) / 1e9
        g_np = flops / best_of(lambda p=p, q=q: p @ q, reps) / 1e9
        line = (f"matmul {size}^3 float32: devicekit {g_dk:.1f} GFLOP/s, numpy {g_np:.1f} GFLOP/s, "
                f"ratio {g_dk / g_np:.2f}x (target >= 0.7)")
        if torch is not None:
            tp, tq = torch.from_numpy(p), torch.from_numpy(q)
            g_th = flops / best_of(lambda tp=tp, tq=tq: tp @ tq, reps) / 1e9
            line += f"; torch {g_th:.1f} GFLOP/s, devicekit/torch {g_dk / g_th:.2f}x"
        print(line)
        err = np.max(np.abs(dk.ops.matmul(pa, qa).numpy() - p.astype(np.float64) @ q))
        print(f"  max abs error vs float64: {err:.2e}")


if __name__ == "__main__":
    main()
