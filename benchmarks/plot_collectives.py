"""Plots a ``bench_collectives.py --csv`` table: bus bandwidth against message
size for the plugin's collectives, torch's gloo and a memcpy of the same
bytes, one panel per rank count, and the time per call at small sizes.

    python benchmarks/plot_collectives.py rows.csv docs/img/collectives.png

Needs matplotlib (not a DeviceKit dependency: ``pip install matplotlib``).
"""

import argparse
import csv
import sys


def load(path):
    with open(path, newline="") as f:
        rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
    if not rows:
        raise SystemExit(f"{path}: no rows")
    return rows


def plot(rows, out, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = sorted({int(r["ranks"]) for r in rows})
    fig, axes = plt.subplots(1, len(ranks) + 1, figsize=(5 * (len(ranks) + 1), 4))
    for ax, n in zip(axes, ranks):
        rs = sorted((r for r in rows if int(r["ranks"]) == n), key=lambda r: r["bytes"])
        x = [r["bytes"] for r in rs]
        ax.plot(x, [r["dk_busbw_GBs"] for r in rs], "o-", label="DeviceKit (cpu plugin)")
        ax.plot(x, [r["gloo_busbw_GBs"] for r in rs], "s-", label="torch gloo")
        ax.plot(x, [r["memcpy_GBs"] for r in rs], "--", color="gray", label="memcpy")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_title(f"all_reduce sum float32, {n} ranks")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax = axes[-1]
    for n in ranks:
        rs = sorted((r for r in rows if int(r["ranks"]) == n and r["bytes"] <= 1 << 16),
                    key=lambda r: r["bytes"])
        x = [r["bytes"] for r in rs]
        ax.plot(x, [r["dk_us"] for r in rs], "o-", label=f"DeviceKit, {n} ranks")
        ax.plot(x, [r["gloo_us"] for r in rs], "s--", label=f"gloo, {n} ranks")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("time per call (us, median)")
    ax.set_title("latency at small sizes")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(f"plot: {out}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="rows written by bench_collectives.py --csv")
    ap.add_argument("out", help="the image to write (.png or .svg)")
    ap.add_argument("--title", default="bench_collectives.py: all_reduce on one host")
    args = ap.parse_args(argv)
    plot(load(args.csv), args.out, args.title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
