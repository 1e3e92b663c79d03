"""Collectives bandwidth and latency, nccl-tests style: a device's collectives
part (through ``devicekit.distributed``) against torch's gloo backend on the
same machine, the same sizes and the same processes, in one run, and against
a memcpy of the same size.

For each message size (8 B .. 256 MiB of float32) and each rank count, every
rank runs ``all_reduce`` (sum, in place) back to back; the two sides
alternate round by round, so a load change on a shared machine hits both
alike. Per row: the median time per call over the rounds (the slowest rank's
time of each round: a collective is done when the last rank is), with the
spread (min-max), and nccl-tests' two bandwidths:

- algbw = bytes / time;
- busbw = algbw * 2 (n - 1) / n for all_reduce: the bytes each rank's link
  really moves, comparable across rank counts and with a copy's bandwidth.

``memcpy`` is numpy's copy of the same bytes in one process (its bandwidth
counts the bytes copied). The goals: busbw at least 2x gloo's from 1 MiB up,
a lower time than gloo at 8 B, and at least half of memcpy's bandwidth at
64 MiB.

    python benchmarks/bench_collectives.py --ranks 2 4 [--max-size 256M] [--csv out.csv]

The ranks are processes on this host, each with device ``--device`` (the
reference CPU plugin's ``cpu:0`` by default); rendezvous through torch's
FileStore. Needs torch (for gloo) and a plugin with the collectives part.
"""

import argparse
import csv
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time

import numpy as np

SIZES = [8 << (3 * i) for i in range(8)] + [64 << 20, 256 << 20]  # 8 B .. 16 MiB, 64 MiB, 256 MiB


def _parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def _human(n):
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f:
            return f"{n / f:g} {unit}"
    return f"{n} B"


def _iters(nbytes):
    """Calls per round: enough to see small messages, few for large ones."""
    return int(max(2, min(200, (64 << 20) // max(nbytes, 1))))


def _rank_main(rank, nranks, store_path, device, sizes, rounds, out_q):
    import torch
    import torch.distributed as dist

    import devicekit as dk
    import devicekit.distributed as dkd

    store = dist.FileStore(store_path, nranks)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=nranks)
    dev = dk.device(device)
    if rank == 0:
        store.set("dk_uid", dkd.unique_id(dev))
    uid = store.get("dk_uid")
    comm = dkd.Communicator(uid, nranks, rank, dev, timeout=120.0)
    rows = []
    for nbytes in sizes:
        count = max(nbytes // 4, 1)
        host = np.zeros(count, np.float32)
        t_dk = dk.tensor(host, device=dev)
        t_gloo = torch.from_numpy(host.copy())
        iters = _iters(nbytes)

        def run_dk(t=t_dk, iters=iters):
            work = None
            for _ in range(iters):
                work = comm.all_reduce(t, op="sum")
            work.wait()

        def run_gloo(t=t_gloo, iters=iters):
            for _ in range(iters):
                dist.all_reduce(t)

        run_dk(), run_gloo()  # warm-up: first-touch pages, connections
        times = {"dk": [], "gloo": []}
        for _ in range(rounds):
            for side, fn in (("dk", run_dk), ("gloo", run_gloo)):
                dist.barrier()
                t0 = time.perf_counter()
                fn()
                dt = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
                dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # the slowest rank's time
                times[side].append(dt.item())
        if rank == 0:
            src, dst = np.ones(count, np.float32), np.empty(count, np.float32)
            cp = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                for _ in range(iters):
                    np.copyto(dst, src)
                cp.append((time.perf_counter() - t0) / iters)
            rows.append((nbytes, times["dk"], times["gloo"], cp))
    comm.destroy()
    dist.destroy_process_group()
    if rank == 0:
        out_q.put(rows)


def run(nranks, device, sizes, rounds):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=_rank_main, args=(r, nranks, store, device, sizes, rounds, q))
                 for r in range(nranks)]
        for p in procs:
            p.start()
        try:
            rows = q.get(timeout=3600)
        finally:
            for p in procs:
                p.join(timeout=60)
                if p.is_alive():
                    p.kill()
    return rows


def table(nranks, rows):
    factor = 2 * (nranks - 1) / nranks
    out = []
    for nbytes, dk_t, gloo_t, cp_t in rows:
        d, g, c = statistics.median(dk_t), statistics.median(gloo_t), statistics.median(cp_t)
        out.append({
            "ranks": nranks, "bytes": nbytes,
            "dk_us": d * 1e6, "dk_min_us": min(dk_t) * 1e6, "dk_max_us": max(dk_t) * 1e6,
            "gloo_us": g * 1e6, "gloo_min_us": min(gloo_t) * 1e6, "gloo_max_us": max(gloo_t) * 1e6,
            "dk_busbw_GBs": nbytes / d * factor / 1e9, "gloo_busbw_GBs": nbytes / g * factor / 1e9,
            "memcpy_GBs": nbytes / c / 1e9,
        })
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--device", default="cpu:0")
    ap.add_argument("--max-size", default="256M", help="largest message (e.g. 64M)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds per size")
    ap.add_argument("--csv", help="also write the rows to this CSV file")
    args = ap.parse_args(argv)
    sizes = [s for s in SIZES if s <= _parse_size(args.max_size)]
    print(f"all_reduce sum float32 on {args.device}, {args.rounds} alternating rounds per size; "
          f"time per call (median, min-max over rounds, slowest rank); busbw = algbw * 2(n-1)/n")
    all_rows = []
    for n in args.ranks:
        rows = table(n, run(n, args.device, sizes, args.rounds))
        all_rows += rows
        print(f"\n{n} ranks")
        print(f"{'size':>10} {'dk us':>22} {'gloo us':>22} {'dk GB/s':>8} {'gloo GB/s':>9} "
              f"{'dk/gloo':>7} {'memcpy GB/s':>11} {'dk/memcpy':>9}")
        for r in rows:
            print(f"{_human(r['bytes']):>10} "
                  f"{r['dk_us']:9.1f} ({r['dk_min_us']:.1f}-{r['dk_max_us']:.1f})".ljust(33)
                  + f"{r['gloo_us']:9.1f} ({r['gloo_min_us']:.1f}-{r['gloo_max_us']:.1f})".ljust(23)
                  + f"{r['dk_busbw_GBs']:8.2f} {r['gloo_busbw_GBs']:9.2f} "
                  f"{r['dk_busbw_GBs'] / r['gloo_busbw_GBs']:7.2f} {r['memcpy_GBs']:11.2f} "
                  f"{r['dk_busbw_GBs'] / r['memcpy_GBs']:9.2f}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(all_rows[0]))
            w.writeheader()
            w.writerows(all_rows)
        print(f"\nrows: {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
