"""The bridge's per-op host cost: a chain of small ATen ops on 1-element
tensors, devicekit.torch (``dk:0``) against torch's own CPU eager, in one run.

Each step is ``y = y * a + b`` (an ATen ``mul`` and an ``add``, each through
``__torch_dispatch__``, the lowering table, one DeviceKit launch and a new
wrapper tensor on the dk side). The kernels on one element cost next to
nothing, so the figure is what the host spends per op: torch's dispatch into
Python, the bridge, the SDK's launch. Sides alternate round by round (a load
change on a shared machine hits both alike); each row gives the median and
the spread (min, max) of µs per op, as wall time and as the calling thread's
CPU time (``host``: steadier on a loaded machine, since it leaves out the
time the thread waited for a core). The issue's goal: dk at or below 3 µs/op,
torch eager being about 1 µs.

Whole-process mode, for an outside timer: ``--side dk --ops N`` runs only N
ops of one side (``--ops 0``: start-up only; the per-op cost is the
difference over N).
"""

import argparse
import os
import statistics
import time

from _timing import alternate, spread

import torch

import devicekit as dk
import devicekit.torch as dkt


def _chain(y, a, b, steps):
    def run():
        x = y
        for _ in range(steps):
            x = x * a + b
        return x
    return run


def _operands(dev):
    y, a, b = torch.ones(1), torch.full((1,), 0.5), torch.full((1,), 0.25)
    return (y, a, b) if dev is None else (y.to(dev), a.to(dev), b.to(dev))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu:0", help="DeviceKit device (default cpu:0)")
    ap.add_argument("--steps", type=int, default=500, help="steps per chain (2 ops each)")
    ap.add_argument("--calls", type=int, default=10, help="chains per round")
    ap.add_argument("--repeats", type=int, default=9, help="rounds per side")
    ap.add_argument("--side", choices=("dk", "torch"), help="whole-process mode: one side only")
    ap.add_argument("--ops", type=int, default=200_000, help="ops in whole-process mode")
    args = ap.parse_args()
    dev = dkt.device(args.device)
    sync = dk.device(args.device).synchronize
    if args.side:
        steps = args.ops // 2
        if steps:
            _chain(*_operands(dev if args.side == "dk" else None), steps)()
            if args.side == "dk":
                sync()
        return
    sides = {"torch CPU eager": (_chain(*_operands(None), args.steps), None),
             f"{dev} through devicekit.torch": (_chain(*_operands(dev), args.steps), sync)}
    for fn, finish in sides.values():  # warm up
        fn()
        if finish:
            finish()
    t0 = time.perf_counter()
    rounds = alternate(sides, args.repeats, calls=args.calls)
    ops = 2 * args.steps
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
          f"torch threads {torch.get_num_threads()}")
    print(f"== per-op host cost: chain y = y * a + b on 1-element float32, {ops} ops x "
          f"{args.calls} calls x {args.repeats} rounds, {time.perf_counter() - t0:.1f} s ==")
    meds = {}
    for name, r in rounds.items():
        wall = spread([w / ops for w, _ in r])
        host = spread([h / ops for _, h in r])
        meds[name] = host[0]
        print(f"{name:34} wall {wall[0] * 1e6:6.2f} us/op (min {wall[1] * 1e6:.2f}, max "
              f"{wall[2] * 1e6:.2f})   host {host[0] * 1e6:6.2f} us/op (min {host[1] * 1e6:.2f}, "
              f"max {host[2] * 1e6:.2f})")
    eager, bridge = meds.values()
    ratios = [h_dk / h_t for (_, h_t), (_, h_dk) in zip(*rounds.values())]
    print(f"host ratio dk/eager per round: median {statistics.median(ratios):.2f}x "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f}); dk - eager {(bridge - eager) * 1e6:.2f} us/op")


if __name__ == "__main__":
    main()
