"""Host cost per op: eager DeviceKit ops against one replay of their graph.

A chain of N small elementwise ops (``x = x * a + b`` style, 64 float32
elements, so the device work is tiny and the host decides) is run eagerly
and as a ``devicekit.graphs`` replay on the same device, alternating rounds
so a load change on a shared machine hits both alike. Per side, the median
over rounds of:

- host us/op: the time the host spends issuing the work (the ops' Python and
  C++ for eager; the one ``replay()`` call for the graph), divided by N;
- total us/op: issue plus a synchronize (the device's time included).

    python benchmarks/bench_graphs.py [--ops 200] [--rounds 30] [--device cpu:0]
"""

import argparse
import statistics
import time

import numpy as np

import devicekit
from devicekit import ops


def chain(x, n):
    for i in range(n // 2):
        x = ops.mul(x, 1.0001)
        x = ops.add(x, float(i % 3))
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--device", default="cpu:0")
    a = ap.parse_args()
    dev = devicekit.device(a.device)
    x = devicekit.tensor(np.ones(64, np.float32), device=dev)
    chain(x, a.ops)  # warm-up: constants, caches
    g = devicekit.graphs.Graph()
    with devicekit.graphs.capture(g, dev):
        y = chain(x, a.ops)
    g.replay()
    assert np.array_equal(y.numpy(), chain(x, a.ops).numpy()), "replay differs from eager"
    res = {"eager": ([], []), "replay": ([], [])}
    for _ in range(a.rounds):
        for side in ("eager", "replay"):
            dev.synchronize()
            t0 = time.perf_counter()
            if side == "eager":
                chain(x, a.ops)
            else:
                g.replay()
            t1 = time.perf_counter()
            dev.synchronize()
            t2 = time.perf_counter()
            res[side][0].append((t1 - t0) / a.ops * 1e6)
            res[side][1].append((t2 - t0) / a.ops * 1e6)
    print(f"{a.ops} ops of 64 float32 on {dev.name}, median of {a.rounds} rounds")
    print(f"{'':8}{'host us/op':>12}{'total us/op':>13}")
    for side, (host, total) in res.items():
        print(f"{side:8}{statistics.median(host):12.3f}{statistics.median(total):13.3f}")
    g.reset()


if __name__ == "__main__":
    main()
