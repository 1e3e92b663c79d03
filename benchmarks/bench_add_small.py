"""Per-call cost of a tiny op: devicekit.ops.add on two 16-element float32
tensors on the reference CPU plugin, as a ratio to numpy.add (and PyTorch CPU
eager when installed), all measured in this one run.

The devicekit loop enqueues N adds and ends with one synchronize, so the time
includes every kernel having run, not just its launch. Target: <= 2x numpy.
"""

import argparse

import numpy as np
from _timing import best_of

import devicekit as dk


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=200_000, help="calls per repeat")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu:0")
    args = ap.parse_args()

    x = np.arange(16, dtype=np.float32)
    y = np.ones(16, dtype=np.float32)
    a, b = dk.tensor(x, device=args.device), dk.tensor(y, device=args.device)
    add = dk.ops.add
    dev = dk.device(args.device)
    best_of(lambda: add(a, b), 1, dev.synchronize, calls=10_000)  # warm the allocator cache

    t_np = best_of(lambda: np.add(x, y), args.repeats, calls=args.n)
    t_dk = best_of(lambda: add(a, b), args.repeats, dev.synchronize, calls=args.n)
    assert np.array_equal(add(a, b).numpy(), x + y)
    stats = dev.memory_stats()

    print(f"devicekit.ops.add 16 x float32 on {args.device}: {t_dk * 1e6:.3f} us/call")
    print(f"numpy.add                                : {t_np * 1e6:.3f} us/call")
    print(f"ratio devicekit/numpy                    : {t_dk / t_np:.2f}x  (target <= 2x)")
    try:
        import torch
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
        t_th = best_of(lambda: torch.add(tx, ty), args.repeats, calls=args.n)
        print(f"torch.add (CPU eager)                    : {t_th * 1e6:.3f} us/call")
        print(f"ratio devicekit/torch                    : {t_dk / t_th:.2f}x")
    except ImportError:
        print("torch not installed: no PyTorch comparison")
    print(f"plugin alloc calls {stats['plugin_alloc_calls']}, cache hits {stats['cache_hits']}")


if __name__ == "__main__":
    main()
