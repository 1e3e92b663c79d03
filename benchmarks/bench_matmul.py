"""matmul speed against numpy (its BLAS) and PyTorch CPU, at square sizes and
at the shapes a GPT-2-style model's training step multiplies.

Shapes (float32 unless ``--dtype bfloat16``):

- square 1024^3 and 2048^3;
- the scaled GPT of bench_gpt_speed.py (1024 tokens, d_model 256, MLP 1024,
  vocab 65), with the layouts its linear layers hand the kernel:
  forward ``x @ W^T`` (W [out, in] read transposed, in place), the input
  gradient ``dy @ W`` (dense) and the weight gradient ``dy^T @ x`` (a read
  transposed).

All three sides run at the same thread count (``--threads``: DEVICEKIT_CPU_THREADS,
OPENBLAS_NUM_THREADS / OMP_NUM_THREADS, torch.set_num_threads), each timed in
alternating rounds (benchmarks/_timing.alternate); the line prints each
side's median GFLOP/s with the min-max spread, and the ratio of the medians
DeviceKit / numpy and DeviceKit / PyTorch (higher is better). Nothing is
asserted. numpy has no bfloat16: with ``--dtype bfloat16`` the numpy column
is float32 (the yardstick a bfloat16 kernel that widens to float32 works
against).

Usage: python benchmarks/bench_matmul.py [--threads N] [--repeats R] [--dtype float32|bfloat16]
       [--only square|model]
"""

import argparse
import os

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--repeats", type=int, default=9, help="alternating rounds per shape")
ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
ap.add_argument("--only", choices=("square", "model"), default=None)
args = ap.parse_args()
for var in ("DEVICEKIT_CPU_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(args.threads)  # read when each library loads

import numpy as np  # noqa: E402
from _timing import alternate, spread  # noqa: E402

import devicekit as dk  # noqa: E402

try:
    import torch
    torch.set_num_threads(args.threads)
except ImportError:
    torch = None

T, D, F, V = 1024, 256, 1024, 65  # tokens (batch 8 x block 128), d_model, MLP width, vocab
SQUARE = [("square 1024^3", 1024, 1024, 1024, "", ""), ("square 2048^3", 2048, 2048, 2048, "", "")]
# (label, M, K, N, a layout, b layout): "t" = the operand is a transposed view;
# the gradients are what the SDK's matmul rule launches for y = x @ W^T
MODEL = [
    ("qkv x @ W^T", T, D, 3 * D, "", "t"),
    ("proj x @ W^T", T, D, D, "", "t"),
    ("fc x @ W^T", T, D, F, "", "t"),
    ("mlp.proj h @ W^T", T, F, D, "", "t"),
    ("head x @ wte^T", T, D, V, "", "t"),
    ("qkv dy @ W", T, 3 * D, D, "", ""),
    ("fc dy @ W", T, F, D, "", ""),
    ("mlp.proj dy @ W", T, D, F, "", ""),
    ("qkv x^T @ dy", D, T, 3 * D, "t", ""),
    ("fc x^T @ dy", D, T, F, "t", ""),
    ("mlp.proj h^T @ dy", F, T, D, "t", ""),
]
shapes = {"square": SQUARE, "model": MODEL, None: SQUARE + MODEL}[args.only]
rng = np.random.default_rng(0)
dev = dk.device("cpu:0")


def operand(rows, cols, layout):
    """A [rows, cols] array; "t": stored [cols, rows] and seen transposed."""
    if layout == "t":
        return rng.standard_normal((cols, rows), dtype=np.float32).T
    return rng.standard_normal((rows, cols), dtype=np.float32)


def dk_operand(a):
    if a.flags.c_contiguous:
        return dk.tensor(a, device=dev, dtype=args.dtype)
    return dk.tensor(np.ascontiguousarray(a.T), device=dev, dtype=args.dtype).transpose(0, 1)


print(f"matmul {args.dtype}, threads {args.threads}, {args.repeats} alternating rounds, "
      f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
for label, m, k, n, la, lb in shapes:
    a, b = operand(m, k, la), operand(k, n, lb)
    da, db = dk_operand(a), dk_operand(b)
    calls = max(1, int(2e9 / (2.0 * m * k * n)))  # about a second of work per round at 1 GFLOP/s
    sides = {"DeviceKit": (lambda da=da, db=db: dk.ops.matmul(da, db), dev.synchronize),
             "numpy": (lambda a=a, b=b: a @ b, None)}
    if torch is not None:
        tdt = torch.bfloat16 if args.dtype == "bfloat16" else torch.float32
        ta, tb = torch.from_numpy(a).to(tdt), torch.from_numpy(b).to(tdt)
        sides["PyTorch"] = (lambda ta=ta, tb=tb: ta @ tb, None)
    for fn, fin in sides.values():
        fn()
        if fin:
            fin()
    times = alternate(sides, args.repeats, max(1, min(calls, 20)))
    flops = 2.0 * m * k * n
    g = {name: spread([flops / w / 1e9 for w, _ in t]) for name, t in times.items()}
    cells = ", ".join(f"{name} {med:.0f} [{lo:.0f}-{hi:.0f}]" for name, (med, lo, hi) in g.items())
    ratios = ", ".join(f"/{name} {g['DeviceKit'][0] / g[name][0]:.2f}x" for name in g
                       if name != "DeviceKit")
    print(f"{label:18} [{m}x{k}]@[{k}x{n}]: GFLOP/s {cells}; "
          f"DeviceKit {ratios}")
print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
