"""Device memory over a long training run that re-creates its model: flat, or leaking?

Trains the nanoGPT of bench_gpt_speed.py (vocab 65, 2 layers, 4 heads,
d_model 64, block 32, batch 8; forward, loss, backward, AdamW) on cpu:0 and
drops the model and its optimizer every ``--every`` steps for a new one, for
``--seconds`` (or ``--steps``). Prints, at the start and then every
``--report`` seconds, the device memory in use: the SDK's ``allocated_bytes``
(tensors alive), ``reserved_bytes`` (those plus the blocks the caching
allocator keeps) and the plugin's own ``bytes_in_use`` and
``peak_bytes_in_use``. A leak shows as figures that climb with the number of
models made; a flat run stays within one model's working set.

``--no-gc`` runs with ``gc.disable()``: the figures then show what reference
counting alone gives back (a model kept alive by a reference cycle would
grow them by one model each re-creation). Figures are printed, never asserted.

Usage: python benchmarks/bench_memory_soak.py [--seconds 60] [--every 500] [--no-gc]
"""

import argparse
import gc
import time

from _gpt import DeviceKitGPT

import devicekit as dk
from devicekit.models.transformers import GPT2, GPT2Config


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to run")
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps instead")
    ap.add_argument("--every", type=int, default=500, help="steps per model before a new one")
    ap.add_argument("--report", type=float, default=5.0, help="seconds between report lines")
    ap.add_argument("--device", default="cpu:0")
    ap.add_argument("--no-gc", action="store_true", help="run with gc.disable()")
    args = ap.parse_args()

    model = GPT2(GPT2Config(vocab=65, seq=32, dim=64, heads=4, layers=2, batch=8))
    dev = dk.device(args.device)
    if args.no_gc:
        gc.collect()
        gc.disable()
    print(f"nanoGPT training on {args.device}, a new model every {args.every} steps, "
          f"Python gc {'disabled' if args.no_gc else 'enabled'}")
    print(f"{'seconds':>8} {'steps':>7} {'models':>6} {'allocated MB':>12} {'reserved MB':>11} "
          f"{'plugin in use MB':>16} {'plugin peak MB':>14}")

    def report(elapsed, steps, models):
        s = dev.memory_stats()
        mb = [s[k] / 1e6 for k in ("allocated_bytes", "reserved_bytes", "bytes_in_use",
                                    "peak_bytes_in_use")]
        print(f"{elapsed:8.1f} {steps:7d} {models:6d} {mb[0]:12.3f} {mb[1]:11.3f} {mb[2]:16.3f} "
              f"{mb[3]:14.3f}", flush=True)
        return mb

    start = time.perf_counter()
    steps, models, trainer = 0, 0, None
    next_report = 0.0
    first = last = None
    while True:
        elapsed = time.perf_counter() - start
        if elapsed >= next_report:
            last = report(elapsed, steps, models)
            if first is None and steps:
                first = last  # the first figures with a model trained: the baseline
            next_report += args.report
        if (args.steps and steps >= args.steps) or (not args.steps and elapsed >= args.seconds):
            break
        if steps % args.every == 0:
            trainer = None  # drop the model and its optimizer before the next one exists
            trainer = DeviceKitGPT(model, device=args.device)
            models += 1
        trainer.step()
        steps += 1
    dev.synchronize()
    last = report(time.perf_counter() - start, steps, models)
    first = first or last
    print(f"from the first report with a model to the last, over {models} models and {steps} "
          f"steps: allocated {first[0]:.3f} -> {last[0]:.3f} MB, plugin in use "
          f"{first[2]:.3f} -> {last[2]:.3f} MB")


if __name__ == "__main__":
    main()
