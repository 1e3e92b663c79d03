"""Whole-model speed against PyTorch CPU eager (whole models, not single ops).

A nanoGPT-style model (vocab 65, 2 layers, 4 heads, d_model 64,
block 32; the zoo's GPT-2 architecture) in DeviceKit on cpu:0 and, when torch
is installed, in PyTorch CPU eager, from identical weights, at the same thread
count (``--threads``, default 1: DEVICEKIT_CPU_THREADS and
torch.set_num_threads). Timed side by side in one run, alternating the sides
each round (benchmarks/_timing.alternate), for

- the training step (forward, loss, backward, AdamW) at batch 8;
- the inference forward (no_grad) at batch 8 and 64.

Prints per case both medians with their min-max spread, the ratio of the
medians (DeviceKit / PyTorch; lower is better), DeviceKit's kernel launches
per call (all base ops, ``fill`` separately, fused kernels, and why each
composite that did not run fused was decomposed) and its *host
share*: the calling thread's CPU time until the last op is issued, over the
wall time. The reference plugin runs kernels on its stream's worker thread,
so the host share is the time spent outside kernels (Python, the SDK,
enqueueing); near 100% means the host, not the kernels, decides the time.
Before timing, the two sides' losses over 3 AdamW steps are compared (they
must agree to 1e-5 relative). Ratios are printed, never asserted.

Usage: python benchmarks/bench_gpt_speed.py [--threads N] [--repeats R]
"""

import argparse
import os
import sys

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--repeats", type=int, default=15, help="alternating rounds per case")
ap.add_argument("--calls", type=int, default=3, help="calls per round")
args = ap.parse_args()
os.environ["DEVICEKIT_CPU_THREADS"] = str(args.threads)  # read when the plugin loads

import devicekit as dk  # noqa: E402
from devicekit.models.transformers import GPT2, GPT2Config  # noqa: E402

from _gpt import DeviceKitGPT, TorchGPT  # noqa: E402
from _timing import alternate, spread  # noqa: E402

try:
    import torch
    torch.set_num_threads(args.threads)
except ImportError:
    torch = None
    print("PyTorch is not installed: DeviceKit's times only, no ratio")


def nano(batch):
    return GPT2(GPT2Config(vocab=65, seq=32, dim=64, heads=4, layers=2, batch=batch))


def launches(fn):
    """(all base-op launches, fill launches, fused launches) of one call of ``fn``."""
    dk.synchronize()
    dk.reset_dispatch_stats()
    dk.reset_composite_stats()
    fn()
    dk.synchronize()
    ops = {op: s["kernel"] for op, s in dk.dispatch_stats().items() if s.get("kernel")}
    stats = dk.composite_stats()
    fused = sum(n for s in stats.values() for n in s["fused"].values())
    why = {f"{op}: {w}": n for op, s in stats.items()
           for w, n in s.get("why_decomposed", {}).items()}  # older SDKs: none
    return sum(ops.values()), ops.get("fill", 0), fused, why


def check_agreement(model):
    if torch is None:
        return
    d, t = DeviceKitGPT(model), TorchGPT(model)
    worst = 0.0
    for _ in range(3):
        a, b = float(d.step().item()), float(t.step().item())
        worst = max(worst, abs(a - b) / abs(b))
    print(f"  loss agreement over 3 AdamW steps: worst relative difference {worst:.1e}"
          + ("" if worst <= 1e-5 else "  ** MORE THAN 1e-5: the two sides do not compute the same **"))


def case(title, model, what):
    d = DeviceKitGPT(model)
    sides = {"devicekit": (getattr(d, what), dk.synchronize)}
    if torch is not None:
        t = TorchGPT(model)
        sides["pytorch"] = (getattr(t, what), None)
    for fn, fin in sides.values():  # warm up: caches, first-call paths, optimizer state
        fn(), fn()
        if fin:
            fin()
    times = alternate(sides, args.repeats, args.calls)
    n, fills, fused, why = launches(getattr(d, what))
    med, lo, hi = spread([w for w, _ in times["devicekit"]])
    host = spread([h / w for w, h in times["devicekit"]])[0]
    line = f"{title}: DeviceKit {med * 1e3:.2f} ms [{lo * 1e3:.2f}-{hi * 1e3:.2f}]"
    if "pytorch" in times:
        tmed, tlo, thi = spread([w for w, _ in times["pytorch"]])
        line += (f", PyTorch {tmed * 1e3:.2f} ms [{tlo * 1e3:.2f}-{thi * 1e3:.2f}], "
                 f"ratio {med / tmed:.2f}x")
    print(line)
    print(f"  DeviceKit: {n} launches per call ({fills} fill, {fused} fused kernels), "
          f"host share (time outside kernels) {host:.0%}")
    for reason, count in sorted(why.items()):
        print(f"  decomposed {count}x: {reason}")


print(f"threads {args.threads}, {args.repeats} alternating rounds of {args.calls} calls, "
      f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
check_agreement(nano(8))
case("train step (fwd+bwd+AdamW), batch 8", nano(8), "step")
case("inference, batch 8", nano(8), "infer")
case("inference, batch 64", nano(64), "infer")
print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
sys.exit(0)
