"""devicekit.distributed on the reference CPU plugin, with real ranks.

Each rank is a separate Python process (subprocess, a timeout, every child
killed in a finally) running _WORKER on its own "cpu:0"; the parent makes the
unique id and passes it on, as a launcher would. The ranks print JSON that
the parent checks against numpy and across ranks.

Needs: the reference CPU plugin with its collectives part (skipped, with the
reason, where it reports the part absent). The part-absent error itself is in
tests/test_plugin_parts.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import devicekit
from devicekit import distributed

RANK_TIMEOUT = 60.0  # seconds a whole rank may run; the collectives' own timeout is smaller

# argv: rank nranks uid_hex scenario. Prints one JSON object on its last line.
_WORKER = textwrap.dedent(r"""
    import json, sys, threading, time
    import numpy as np
    import devicekit as dk
    from devicekit import distributed

    rank, nranks, uid, scenario = int(sys.argv[1]), int(sys.argv[2]), bytes.fromhex(sys.argv[3]), sys.argv[4]
    dev = dk.device("cpu:0")
    out = {}

    def data(seed, n, dtype):
        # Every rank can compute every rank's input (the oracle needs them all).
        rng = np.random.default_rng(1000 + seed)
        return rng.standard_normal(n).astype(np.float32) * (seed + 1)

    def read(t):
        return np.asarray(t.numpy(), dtype=np.float64).tolist()

    with distributed.Communicator(uid, nranks, rank, dev, timeout=20.0) as comm:
        if scenario == "collectives":
            for dtype in ("float32", "bfloat16"):
                for op in ("sum", "avg"):
                    t = dk.tensor(data(rank, 37, dtype), dev, dtype=dtype)
                    comm.all_reduce(t, op=op).wait()
                    out[f"all_reduce_{op}_{dtype}"] = read(t)
            x = dk.tensor(data(rank, 5, "float32"), dev)
            o = dk.zeros((5,), dtype="float32", device=dev)
            comm.all_reduce(x, op="max", out=o).wait()
            out["all_reduce_max_out"] = read(o)
            out["all_reduce_max_in_untouched"] = read(x)
            g = dk.zeros((nranks * 3,), dtype="float32", device=dev)
            comm.all_gather(g, dk.tensor(data(rank, 3, "float32"), dev)).wait()
            out["all_gather"] = read(g)
            rs = dk.zeros((4,), dtype="float32", device=dev)
            comm.reduce_scatter(rs, dk.tensor(data(rank, nranks * 4, "float32"), dev)).wait()
            out["reduce_scatter"] = read(rs)
            b = dk.tensor(data(rank, 6, "float32"), dev)
            comm.broadcast(b, root=nranks - 1).wait()
            out["broadcast"] = read(b)
            # Ordered after an SDK op on the same stream, no synchronize between:
            # the collective must see y = x * 2 + 1, and the read after it its result.
            x = dk.tensor(np.full(1000, rank + 1.0, np.float32), dev)
            y = x * 2 + 1
            w = comm.all_reduce(y)
            out["ordered"] = read(y)[:3]
            w.wait()
            out["completed"] = w.is_completed()
        elif scenario == "abort":
            t = dk.tensor(np.ones(8, np.float32), dev)
            if rank == 0:
                # Rank 1 never makes the call: rank 0's collective blocks until
                # another thread aborts the communicator.
                threading.Timer(1.0, comm.abort).start()
                start = time.monotonic()
                try:
                    comm.all_reduce(t).wait()
                    out["error"] = None
                except dk.DeviceKitError as exc:
                    out["error"] = f"{type(exc).__name__}: {exc}"
                out["seconds"] = time.monotonic() - start
            else:
                time.sleep(4.0)
                comm.abort()
    print(json.dumps(out))
""")


def _run_ranks(nranks, scenario, timeout=RANK_TIMEOUT):
    uid = distributed.unique_id("cpu:0")
    procs = []
    try:
        for rank in range(nranks):
            procs.append(subprocess.Popen(
                [sys.executable, "-c", _WORKER, str(rank), str(nranks), uid.hex(), scenario],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        results = []
        for rank, p in enumerate(procs):
            stdout, stderr = p.communicate(timeout=timeout)
            assert p.returncode == 0, f"rank {rank} exited {p.returncode}:\n{stdout}\n{stderr}"
            results.append(json.loads(stdout.strip().splitlines()[-1]))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.fixture(scope="module")
def cpu_collectives():
    dev = devicekit.device("cpu:0")
    if not distributed.is_available(dev):
        pytest.skip("the reference CPU plugin reports no collectives part in this build")
    return dev


def _inputs(nranks, n):
    return [np.random.default_rng(1000 + r).standard_normal(n).astype(np.float32) * (r + 1)
            for r in range(nranks)]


def _bf16(a):
    import ml_dtypes
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


@pytest.mark.parametrize("nranks", [2, 3])
def test_collectives_match_numpy_on_every_rank(cpu_collectives, nranks):
    results = _run_ranks(nranks, "collectives")
    first = results[0]
    for r, res in enumerate(results[1:], 1):  # every rank receives the same bits
        for key in ("all_reduce_sum_float32", "all_reduce_avg_float32", "all_reduce_sum_bfloat16",
                    "all_reduce_avg_bfloat16", "all_gather", "broadcast", "all_reduce_max_out"):
            assert res[key] == first[key], f"{key}: rank {r} differs from rank 0"
    xs = _inputs(nranks, 37)
    exact = np.sum(np.asarray(xs, np.float64), axis=0)
    np.testing.assert_allclose(first["all_reduce_sum_float32"], exact, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(first["all_reduce_avg_float32"], exact / nranks, rtol=1e-5,
                               atol=1e-5)
    # bfloat16: inputs rounded to bfloat16, summed in float32, rounded once.
    xs16 = np.asarray([_bf16(x) for x in xs])
    np.testing.assert_array_equal(first["all_reduce_sum_bfloat16"],
                                  _bf16(np.sum(xs16.astype(np.float32), axis=0)))
    np.testing.assert_allclose(first["all_reduce_avg_bfloat16"], xs16.sum(0) / nranks,
                               rtol=2 ** -7, atol=1e-2)
    xs5 = _inputs(nranks, 5)
    np.testing.assert_array_equal(first["all_reduce_max_out"], np.max(xs5, axis=0))
    for r, res in enumerate(results):
        np.testing.assert_array_equal(res["all_reduce_max_in_untouched"], xs5[r])
    np.testing.assert_array_equal(first["all_gather"], np.concatenate(_inputs(nranks, 3)))
    send = np.asarray(_inputs(nranks, nranks * 4), np.float64)
    for r, res in enumerate(results):
        np.testing.assert_allclose(res["reduce_scatter"], send.sum(0)[r * 4:(r + 1) * 4],
                                   rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(first["broadcast"], _inputs(nranks, 6)[nranks - 1])
    total = sum(2 * (r + 1.0) + 1 for r in range(nranks))
    for res in results:
        assert res["ordered"] == [total] * 3
        assert res["completed"] is True


def test_abort_from_another_thread_ends_a_blocked_collective(cpu_collectives):
    rank0, _ = _run_ranks(2, "abort")
    assert rank0["error"] is not None, "the collective completed although rank 1 never called it"
    assert "abort" in rank0["error"].lower(), rank0["error"]
    assert rank0["seconds"] < 10.0, rank0  # the abort, not the 20 s timeout, ended it


def test_arguments_are_checked_before_the_plugin(cpu_collectives):
    # One rank: checks that need no peer. A size that breaks the spec's rule is
    # refused by the SDK, naming the collective and the expected size.
    uid = distributed.unique_id(cpu_collectives)
    with distributed.Communicator(uid, 1, 0, cpu_collectives, timeout=10.0) as comm:
        t = devicekit.tensor(np.arange(6, dtype=np.float32), cpu_collectives)
        with pytest.raises(devicekit.InvalidArgumentError, match="all_gather.*expected 6"):
            comm.all_gather(devicekit.zeros((4,), dtype="float32", device=cpu_collectives), t)
        with pytest.raises(devicekit.DTypeError, match="dtypes must be equal"):
            comm.all_reduce(t, out=devicekit.zeros((6,), dtype="int32", device=cpu_collectives))
        with pytest.raises(devicekit.InvalidArgumentError, match="unknown reduce op"):
            comm.all_reduce(t, op="mean")
        with pytest.raises(devicekit.InvalidArgumentError, match="root 3 is not a rank"):
            comm.broadcast(t, root=3)
        comm.all_reduce(t).wait()  # one rank: the identity
        np.testing.assert_array_equal(t.numpy(), np.arange(6, dtype=np.float32))
