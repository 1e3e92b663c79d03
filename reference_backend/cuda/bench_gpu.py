"""The CUDA plugin against the PyTorch CUDA installed beside it, on one GPU.

Figures (each side timed in alternating rounds, so clock and thermal drift hit
both alike; medians and the min-max spread of --rounds rounds):

- matmul 4096^3 in float32 (TF32 off on both sides: the plugin has no TF32
  path) and bfloat16: TFLOP/s;
- rms_norm and softmax (last dim) on 16384 x 8192 bfloat16: achieved bytes/s
  (one read, one write) as a fraction of a plain device copy of the same
  tensor (torch's ``copy_``), the memory-bound ceiling;
- causal scaled_dot_product_attention, bfloat16, B=4 H=16 L=4096 D=128:
  TFLOP/s counting the causal half (2 * 2 * B*H*L*L*D / 2);
- the cost of one tiny op (add of two 1-element tensors), microseconds per
  call, 2000 calls between two synchronizes.

Ratios are printed and written (``--json``), never asserted. ``--dry-run``
runs every code path at tiny sizes on any DeviceKit device (default cpu:0)
against torch on the CPU: how CI proves this script before a GPU sees it.

Usage: python bench_gpu.py [--device cuda:0] [--rounds 7] [--json FILE] [--dry-run]
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np

import devicekit as dk
import devicekit.nn.functional as F


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="DeviceKit device (default cuda:0; dry run cpu:0)")
    ap.add_argument("--rounds", type=int, default=7, help="alternating rounds per figure")
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument("--dry-run", action="store_true",
                    help="tiny sizes, torch on the CPU: every code path, no GPU needed")
    return ap.parse_args(argv)


class Bench:
    def __init__(self, args):
        import torch

        self.torch = torch
        self.dry = args.dry_run
        self.dev = args.device or ("cpu:0" if self.dry else "cuda:0")
        self.tdev = "cpu" if self.dry else "cuda"
        if not self.dry and not torch.cuda.is_available():
            sys.exit("bench_gpu: torch sees no CUDA device (use --dry-run without a GPU)")
        if not self.dry:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        self.rounds = args.rounds
        self.rng = np.random.default_rng(0)
        self.figures = {}

    def tsync(self):
        if not self.dry:
            self.torch.cuda.synchronize()

    def time(self, fn, sync, inner=1):
        fn()
        sync()
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        return (time.perf_counter() - t0) / inner

    def pair(self, dk_fn, torch_fn, inner=1):
        """Alternating rounds: (dk seconds list, torch seconds list)."""
        a, b = [], []
        for r in range(self.rounds):
            sides = [(dk_fn, dk.synchronize, a), (torch_fn, self.tsync, b)]
            for fn, sync, out in sides if r % 2 == 0 else sides[::-1]:
                out.append(self.time(fn, sync, inner))
        return a, b

    def both(self, shape, dtype):
        x = self.rng.standard_normal(shape, dtype=np.float32)
        t = self.torch.from_numpy(x).to(self.tdev, getattr(self.torch, dtype))
        return dk.tensor(x, device=self.dev, dtype=dtype), t

    def record(self, name, unit, dk_value, torch_value, note=""):
        self.figures[name] = {"unit": unit, "devicekit": dk_value, "torch": torch_value, "note": note}
        ratio = dk_value["median"] / torch_value["median"] if torch_value["median"] else float("nan")
        print(f"{name:44s} devicekit {dk_value['median']:10.3f} [{dk_value['min']:.3f}-"
              f"{dk_value['max']:.3f}] | torch {torch_value['median']:10.3f} [{torch_value['min']:.3f}-"
              f"{torch_value['max']:.3f}] {unit} | ratio {ratio:.2f} {note}", flush=True)


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def rate(work, seconds):
    return summary([work / s for s in seconds])


def bench_matmul(b):
    n = 64 if b.dry else 4096
    for dtype in ("float32", "bfloat16"):
        da, ta = b.both((n, n), dtype)
        db, tb = b.both((n, n), dtype)
        s_dk, s_t = b.pair(lambda da=da, db=db: da @ db, lambda ta=ta, tb=tb: ta @ tb)
        flop = 2.0 * n ** 3 / 1e12
        b.record(f"matmul {n}^3 {dtype}", "TFLOP/s", rate(flop, s_dk), rate(flop, s_t))


def bench_rowwise(b):
    rows, cols = (64, 256) if b.dry else (16384, 8192)
    dx, tx = b.both((rows, cols), "bfloat16")
    dw, tw = b.both((cols,), "bfloat16")
    dst = b.torch.empty_like(tx)
    moved = 2.0 * rows * cols * 2 / 1e9  # bytes read + written, GB
    copy = [b.time(lambda: dst.copy_(tx), b.tsync) for _ in range(b.rounds)]
    copy_gbs = statistics.median(moved / s for s in copy)
    b.figures["device copy bf16"] = {"unit": "GB/s", "torch": rate(moved, copy)}
    print(f"{'device copy ' + str(rows) + 'x' + str(cols) + ' bf16':44s} torch {copy_gbs:.1f} GB/s")
    tF = b.torch.nn.functional
    cases = [
        ("rms_norm", lambda: F.rms_norm(dx, dw), lambda: tF.rms_norm(tx, (cols,), tw)),
        ("softmax", lambda: F.softmax(dx, -1), lambda: b.torch.softmax(tx, -1)),
    ]
    for name, dk_fn, t_fn in cases:
        s_dk, s_t = b.pair(dk_fn, t_fn)
        frac = lambda s: summary([moved / x / copy_gbs for x in s])  # noqa: E731
        b.record(f"{name} {rows}x{cols} bf16", "of copy GB/s", frac(s_dk), frac(s_t))


def bench_sdpa(b):
    B, H, L, D = (1, 2, 64, 32) if b.dry else (4, 16, 4096, 128)
    dq, tq = b.both((B, H, L, D), "bfloat16")
    dk_, tk = b.both((B, H, L, D), "bfloat16")
    dv, tv = b.both((B, H, L, D), "bfloat16")
    tF = b.torch.nn.functional
    s_dk, s_t = b.pair(lambda: F.scaled_dot_product_attention(dq, dk_, dv, is_causal=True),
                       lambda: tF.scaled_dot_product_attention(tq, tk, tv, is_causal=True))
    flop = 2.0 * 2 * B * H * L * L * D / 2 / 1e12
    b.record(f"sdpa causal B{B} H{H} L{L} D{D} bf16", "TFLOP/s", rate(flop, s_dk), rate(flop, s_t))


def bench_launch(b):
    inner = 100 if b.dry else 2000
    dx, tx = b.both((1,), "float32")
    s_dk, s_t = b.pair(lambda: dx + dx, lambda: tx + tx, inner=inner)
    us = lambda s: summary([x * 1e6 for x in s])  # noqa: E731
    b.record("tiny add (1 element), per call", "us", us(s_dk), us(s_t), "(lower is better)")


def main(argv=None):
    args = parse(argv)
    b = Bench(args)
    print(f"bench_gpu: devicekit {b.dev} vs torch {b.torch.__version__} on {b.tdev}"
          f"{' (dry run: tiny sizes)' if b.dry else ''}, {b.rounds} alternating rounds", flush=True)
    for fn in (bench_matmul, bench_rowwise, bench_sdpa, bench_launch):
        fn(b)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": b.dev, "torch": b.torch.__version__, "dry_run": b.dry,
                       "figures": b.figures}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
