"""The reference CPU plugin's collectives part (device API 1.5), called directly
through ctypes (tests/_dk_ctypes.py) from 2, 3 and 4 processes: every
collective against a float64 oracle and bitwise across ranks, groups of
send / recv, stream ordering, and the never-a-hang cases (a rank that never
calls, a mismatched count, a rank killed mid-call, an abort), with nothing left
in /dev/shm afterwards.

Run as a script, this file is one rank: ``python test_cpu_collectives.py
SCENARIO RANK NRANKS WORKDIR``.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _dk_ctypes as dk  # noqa: E402

TIMEOUT_MS = 2000  # the never-a-hang scenarios' communicator timeout
# Larger than the plugin's chunk (512 KiB per buffer: 131072 float32).
BIG = 300_001

# ---- inputs and oracle (shared by the ranks and the parent) ---------------------------

NP = {dk.FLOAT32: np.float32, dk.FLOAT64: np.float64, dk.FLOAT16: np.float16,
      dk.BFLOAT16: np.uint16, dk.INT8: np.int8, dk.INT32: np.int32, dk.INT64: np.int64,
      dk.UINT8: np.uint8, dk.BOOL: np.uint8}
FLOATS = (dk.FLOAT32, dk.FLOAT64, dk.FLOAT16, dk.BFLOAT16)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def as_f64(a: np.ndarray, dtype: int) -> np.ndarray:
    return (bf16_to_f32(a) if dtype == dk.BFLOAT16 else a).astype(np.float64)


def gen(name: str, rank: int, n: int, dtype: int, op: int = dk.SUM) -> np.ndarray:
    """Rank `rank`'s input of case `name`: n elements of `dtype`."""
    rng = np.random.default_rng(zlib.crc32(f"{name}/{rank}".encode()))
    if dtype in FLOATS:
        x = rng.uniform(0.5, 1.5, n) if op == dk.PROD else rng.uniform(-4, 4, n)
        if dtype == dk.BFLOAT16:
            return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return x.astype(NP[dtype])
    if dtype == dk.BOOL:
        return rng.integers(0, 2, n).astype(np.uint8)
    lo, hi = (1, 3) if op == dk.PROD else ((0, 60) if dtype == dk.UINT8 else (-60, 60))
    return rng.integers(lo, hi, n).astype(NP[dtype])


def oracle(xs: list[np.ndarray], dtype: int, op: int) -> np.ndarray:
    """The exact reduction over ranks, in float64 (integers: int64, exact here)."""
    n = len(xs)
    if dtype in FLOATS:
        v = np.stack([as_f64(x, dtype) for x in xs])
    else:
        v = np.stack([x.astype(np.int64) for x in xs])
    if dtype == dk.BOOL:
        return (v.max(0) if op in (dk.SUM, dk.MAX) else v.min(0)).astype(np.int64)
    if op == dk.SUM:
        return v.sum(0)
    if op == dk.PROD:
        return v.prod(0)
    if op == dk.MAX:
        return v.max(0)
    if op == dk.MIN:
        return v.min(0)
    s = v.sum(0)
    if dtype in FLOATS:
        return s / n
    return np.sign(s) * (np.abs(s) // n)  # truncates toward zero


def check_reduced(got: np.ndarray, xs: list[np.ndarray], dtype: int, op: int, what: str) -> None:
    exact = oracle(xs, dtype, op)
    if dtype not in FLOATS:  # sum and prod wrap as the dtype does
        assert np.array_equal(got, exact.astype(got.dtype)), what
        return
    g = as_f64(got, dtype)
    n = len(xs)
    absum = np.sum([np.abs(as_f64(x, dtype)) for x in xs], axis=0)
    if op == dk.PROD:
        absum = np.abs(exact)
    acc_eps = np.finfo(np.float64 if dtype == dk.FLOAT64 else np.float32).eps
    bound = n * acc_eps * absum
    if dtype in (dk.FLOAT16, dk.BFLOAT16):  # one rounding to 16 bits
        bound = bound + (2.0 ** -10 if dtype == dk.FLOAT16 else 2.0 ** -7) * np.abs(exact)
    err = np.abs(g - exact)
    assert np.all(err <= bound + 1e-300), (what, float(np.max(err - bound)))


# ---- one rank ---------------------------------------------------------------------------


class Rank:
    def __init__(self, rank: int, n: int, work: str):
        import devicekit_cpu

        self.rank, self.n, self.work = rank, n, work
        self.p = dk.Plugin(devicekit_cpu.library_path())
        self.c = self.p.collectives()
        assert self.c is not None, "the cpu plugin lists no collectives extension"
        self.results: dict[str, np.ndarray] = {}

    def uid(self, tag: str = "id") -> bytes:
        """Rank 0 makes the id and writes it to a file; the others read it."""
        path = os.path.join(self.work, tag)
        if self.rank == 0:
            uid = self.c.unique_id()
            with open(path + ".tmp", "wb") as f:
                f.write(uid)
            os.replace(path + ".tmp", path)
            return uid
        deadline = time.monotonic() + 20
        while not os.path.exists(path):
            assert time.monotonic() < deadline, "rank 0 never wrote the unique id"
            time.sleep(0.005)
        with open(path, "rb") as f:
            return f.read()

    def dev(self, host: np.ndarray | int) -> int:
        """A device buffer holding `host` (or `host` bytes of garbage)."""
        size = host if isinstance(host, int) else host.nbytes
        ptr = self.p.alloc(max(size, 1))
        if not isinstance(host, int) and size:
            ctypes.memmove(ptr, host.ctypes.data, size)
        elif size:
            ctypes.memset(ptr, 0xA5, size)
        return ptr

    def read(self, ptr: int, n: int, dtype: int) -> np.ndarray:
        out = np.empty(n, NP[dtype])
        if n:
            ctypes.memmove(out.ctypes.data, ptr, out.nbytes)
        return out

    def save(self, **extra) -> None:
        np.savez(os.path.join(self.work, f"out{self.rank}.npz"), **self.results)
        with open(os.path.join(self.work, f"info{self.rank}.json"), "w") as f:
            json.dump(extra, f)


def run_battery(r: Rank) -> None:
    """Every collective; results go to out<rank>.npz for the parent to check."""
    p, c, n, me = r.p, r.c, r.n, r.rank
    comm = c.comm_init(r.uid(), n, me, timeout_ms=20000)
    res = r.results

    def all_reduce(name, count, dtype, op, in_place=False, stream=None):
        x = gen(name, me, count, dtype, op)
        s = r.dev(x)
        d = s if in_place else r.dev(x.nbytes)
        c.run(comm, dk.ALL_REDUCE, s, d, count, dtype, op, stream=stream)
        res[name] = r.read(d, count, dtype)

    for dtype in (dk.FLOAT32, dk.INT32, dk.BFLOAT16, dk.FLOAT16):
        for op in range(5):
            all_reduce(f"ar/{dtype}/{op}/7", 7, dtype, op)
    for dtype in (dk.FLOAT64, dk.INT8, dk.INT64, dk.UINT8, dk.BOOL):
        for op in (dk.SUM, dk.MAX, dk.AVG):
            all_reduce(f"ar/{dtype}/{op}/5", 5, dtype, op)
    for count in (0, 1, BIG):
        all_reduce(f"ar/{dk.FLOAT32}/{dk.SUM}/{count}", count, dk.FLOAT32, dk.SUM)
    all_reduce(f"ar/{dk.BFLOAT16}/{dk.AVG}/{BIG}", BIG, dk.BFLOAT16, dk.AVG)
    all_reduce(f"arip/{dk.FLOAT32}/{dk.SUM}/{BIG}", BIG, dk.FLOAT32, dk.SUM, in_place=True)
    # Run to run: the same call again gives the same bits.
    x = gen(f"ar/{dk.FLOAT32}/{dk.SUM}/{BIG}", me, BIG, dk.FLOAT32)
    s, d = r.dev(x), r.dev(x.nbytes)
    c.run(comm, dk.ALL_REDUCE, s, d, BIG, dk.FLOAT32, dk.SUM)
    res["ar_again"] = r.read(d, BIG, dk.FLOAT32)

    root = n - 1
    for count in (0, 7, BIG):
        x = gen(f"bc/{count}", root, count, dk.FLOAT32)
        s = r.dev(x) if me == root else 0
        d = r.dev(x.nbytes)
        c.run(comm, dk.BROADCAST, s, d, count, dk.FLOAT32, root=root)
        res[f"bc/{count}"] = r.read(d, count, dk.FLOAT32)
    for count in (7, BIG):
        x = gen(f"rd/{count}", me, count, dk.FLOAT32)
        d = r.dev(x.nbytes) if me == 1 else 0
        c.run(comm, dk.REDUCE, r.dev(x), d, count, dk.FLOAT32, dk.MAX if count == 7 else dk.SUM,
              root=1)
        if me == 1:
            res[f"rd/{count}"] = r.read(d, count, dk.FLOAT32)
    for count in (0, 5, BIG):
        x = gen(f"ag/{count}", me, count, dk.INT32)
        d = r.dev(x.nbytes * n)
        c.run(comm, dk.ALL_GATHER, r.dev(x), d, count, dk.INT32)
        res[f"ag/{count}"] = r.read(d, n * count, dk.INT32)
    # In place: send == recv + rank * count.
    x = gen("agip/5", me, 5, dk.INT32)
    d = r.dev(x.nbytes * n)
    ctypes.memmove(d + me * x.nbytes, x.ctypes.data, x.nbytes)
    c.run(comm, dk.ALL_GATHER, d + me * x.nbytes, d, 5, dk.INT32)
    res["agip/5"] = r.read(d, 5 * n, dk.INT32)
    for count, in_place in ((0, False), (5, False), (BIG // n, False), (5, True)):
        name = f"rs/{count}/{in_place}"
        x = gen(name, me, count * n, dk.FLOAT32)
        s = r.dev(x)
        d = s + me * count * 4 if in_place else r.dev(count * 4)
        c.run(comm, dk.REDUCE_SCATTER, s, d, count, dk.FLOAT32, dk.SUM)
        res[name] = r.read(d, count, dk.FLOAT32)
    for count, in_place in ((3, False), (BIG // n, False), (3, True)):
        name = f"a2a/{count}/{in_place}"
        x = gen(name, me, count * n, dk.INT64)
        s = r.dev(x)
        d = s if in_place else r.dev(x.nbytes)
        c.run(comm, dk.ALL_TO_ALL, s, d, count, dk.INT64)
        res[name] = r.read(d, count * n, dk.INT64)

    # send / recv around the ring in a group, send first or recv first; large
    # enough that ungrouped blocking calls in these orders would deadlock.
    nxt, prv = (me + 1) % n, (me - 1) % n
    for order in ("send_first", "recv_first"):
        for count in (0, 1, BIG):
            name = f"p2p/{order}/{count}"
            x = gen(name, me, count, dk.FLOAT32)
            s, d = r.dev(x), r.dev(x.nbytes)
            c.group(False)
            if order == "send_first":
                c.run(comm, dk.SEND, s, 0, count, dk.FLOAT32, peer=nxt)
                c.run(comm, dk.RECV, 0, d, count, dk.FLOAT32, peer=prv)
            else:
                c.run(comm, dk.RECV, 0, d, count, dk.FLOAT32, peer=prv)
                c.run(comm, dk.SEND, s, 0, count, dk.FLOAT32, peer=nxt)
            c.group(True)
            res[name] = r.read(d, count, dk.FLOAT32)

    # Stream ordering: a copy queued before the all_reduce is seen; the copy
    # back queued after it waits for it.
    st = p.stream_create()
    x = gen("stream", me, BIG, dk.FLOAT32)
    s, d = r.dev(BIG * 4), r.dev(BIG * 4)
    out = np.zeros(BIG, np.float32)
    p.memcpy(s, x.ctypes.data, x.nbytes, dk.H2D, stream=st)
    c.run(comm, dk.ALL_REDUCE, s, d, BIG, dk.FLOAT32, dk.SUM, stream=st)
    p.memcpy(out.ctypes.data, d, out.nbytes, dk.D2H, stream=st)
    p.stream_sync(st)
    res["stream"] = out
    # A grouped call on a stream, too.
    c.group(False)
    c.run(comm, dk.ALL_REDUCE, s, d, 7, dk.FLOAT32, dk.MIN, stream=st)
    c.group(True)
    p.stream_sync(st)
    res["stream_group"] = r.read(d, 7, dk.FLOAT32)
    p.stream_destroy(st)
    c.comm_destroy(comm)
    r.save(masks=[c.mask_collectives, c.mask_dtypes, c.mask_reduce_ops])


def expect_error(fn, code: int) -> dict:
    t0 = time.monotonic()
    try:
        fn()
    except dk.DKError as e:
        assert e.code == code, e
        return {"code": e.code, "message": e.message, "seconds": time.monotonic() - t0}
    raise AssertionError("the call succeeded; expected an error")


def run_skip(r: Rank) -> None:
    """Rank n-1 makes the communicator but never calls the all_reduce."""
    c, me, n = r.c, r.rank, r.n
    comm = c.comm_init(r.uid(), n, me, timeout_ms=TIMEOUT_MS)
    info = {}
    if me != n - 1:
        x = r.dev(16)
        info = expect_error(lambda: c.run(comm, dk.ALL_REDUCE, x, x, 4, dk.FLOAT32, dk.SUM),
                            dk.UNAVAILABLE)
        info["later"] = expect_error(
            lambda: c.run(comm, dk.ALL_REDUCE, x, x, 4, dk.FLOAT32, dk.SUM),
            dk.FAILED_PRECONDITION)["message"]
    else:
        time.sleep(TIMEOUT_MS / 1000 + 0.5)
    c.comm_destroy(comm)
    r.save(**info)


def run_mismatch(r: Rank) -> None:
    """Rank 1 passes another count: INVALID_ARGUMENT naming both sides."""
    c, me, n = r.c, r.rank, r.n
    comm = c.comm_init(r.uid(), n, me, timeout_ms=TIMEOUT_MS)
    x = r.dev(64)
    count = 5 if me == 1 else 4
    info = expect_error(lambda: c.run(comm, dk.ALL_REDUCE, x, x, count, dk.FLOAT32, dk.SUM),
                        dk.INVALID_ARGUMENT)
    c.comm_destroy(comm)
    # The plugin makes new communicators afterwards.
    comm = c.comm_init(r.uid("id2"), n, me, timeout_ms=TIMEOUT_MS)
    c.run(comm, dk.ALL_REDUCE, x, x, 4, dk.FLOAT32, dk.SUM)
    c.comm_destroy(comm)
    r.save(**info)


def run_kill(r: Rank) -> None:
    """Rank n-1 is SIGKILLed while the others are inside a large all_reduce;
    they fail within the timeout, then make a new communicator without it."""
    c, me, n = r.c, r.rank, r.n
    comm = c.comm_init(r.uid(), n, me, timeout_ms=TIMEOUT_MS)
    x = r.dev(BIG * 4)
    if me == n - 1:  # many large calls queued on a stream: killed inside one of them
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
        st = r.p.stream_create()
        for _ in range(400):
            c.run(comm, dk.ALL_REDUCE, x, x, BIG, dk.FLOAT32, dk.SUM, stream=st)
        time.sleep(60)
    info, calls = None, 0
    while info is None:
        assert calls < 400, "400 all_reduces succeeded; rank n-1 was never killed"
        try:
            info = expect_error(
                lambda: c.run(comm, dk.ALL_REDUCE, x, x, BIG, dk.FLOAT32, dk.SUM), dk.UNAVAILABLE)
        except AssertionError:  # the call succeeded: rank n-1 is still alive
            calls += 1
    info["calls_before"] = calls
    c.comm_destroy(comm)
    comm = c.comm_init(r.uid("id2"), n - 1, me, timeout_ms=TIMEOUT_MS)
    y = np.full(3, me + 1, np.float32)
    d = r.dev(y)
    c.run(comm, dk.ALL_REDUCE, d, d, 3, dk.FLOAT32, dk.SUM)
    info["new_comm_result"] = r.read(d, 3, dk.FLOAT32).tolist()
    c.comm_destroy(comm)
    r.save(**info)


def run_abort(r: Rank) -> None:
    """Rank 0 blocks on an all_reduce rank 1 never makes; another thread aborts."""
    c, me, n = r.c, r.rank, r.n
    comm = c.comm_init(r.uid(), n, me, timeout_ms=60000)
    info = {}
    if me == 0:
        x = r.dev(16)
        threading.Timer(0.3, lambda: c.comm_abort(comm)).start()
        info = expect_error(lambda: c.run(comm, dk.ALL_REDUCE, x, x, 4, dk.FLOAT32, dk.SUM),
                            dk.UNAVAILABLE)
    else:
        time.sleep(1.0)
    c.comm_destroy(comm)
    r.save(**info)


SCENARIOS = {"battery": run_battery, "skip": run_skip, "mismatch": run_mismatch,
             "kill": run_kill, "abort": run_abort}

if __name__ == "__main__":
    scenario, rank, nranks, work = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    SCENARIOS[scenario](Rank(rank, nranks, work))
    sys.exit(0)


# ---- the tests (the parent side) ---------------------------------------------------------

import pytest  # noqa: E402


def _shm_entries(work: str) -> list[str]:
    """/dev/shm entries of the communicators this run made (the ids name them)."""
    names = []
    for tag in ("id", "id2"):
        path = os.path.join(work, tag)
        if os.path.exists(path):
            with open(path, "rb") as f:
                raw = f.read()
            name = raw[16:16 + 96].split(b"\0")[0].decode()
            names += glob.glob("/dev/shm" + name + "*")
    return names


def spawn(scenario: str, n: int, work: str, timeout: float = 60) -> list[int]:
    """Runs the ranks; returns their exit codes. Every child is killed at the end."""
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, __file__, scenario, str(i), str(n), work], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for i in range(n)]
    deadline = time.monotonic() + timeout
    try:
        # poll() reaps a child as soon as it exits, so its peers see it gone.
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                raise AssertionError(f"{scenario}: ranks still running after {timeout} s")
            time.sleep(0.01)
        codes = [p.returncode for p in procs]
        outs = [p.stdout.read().decode(errors="replace") for p in procs]
        return codes, outs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()


def _load(work: str, rank: int):
    with open(os.path.join(work, f"info{rank}.json")) as f:
        info = json.load(f)
    return dict(np.load(os.path.join(work, f"out{rank}.npz"))), info


def _ok(codes, outs):
    assert all(c == 0 for c in codes), "\n".join(
        f"--- rank {i} exit {c}\n{o[-3000:]}" for i, (c, o) in enumerate(zip(codes, outs)))


@pytest.fixture
def work(tmp_path):
    yield str(tmp_path)
    assert _shm_entries(str(tmp_path)) == [], "a shared-memory segment was left in /dev/shm"


@pytest.mark.parametrize("n", [2, 3, 4])
def test_collectives_match_oracle_and_ranks(n, work):
    codes, outs = spawn("battery", n, work)
    _ok(codes, outs)
    res = [_load(work, i)[0] for i in range(n)]
    # The part's masks: all 8 collectives, all 9 dtypes, all 5 reduce ops.
    assert _load(work, 0)[1]["masks"] == [0xFF, 0x1FF, 0x1F]
    for name in res[0]:
        if name.startswith("rd/"):
            continue
        for i in range(1, n):  # every rank: the same bits
            if name.startswith(("ar", "bc/", "ag", "stream")):
                assert res[i][name].tobytes() == res[0][name].tobytes(), (name, i)
    for name, got in res[0].items():
        if name.startswith(("ar/", "arip/")):
            _, dtype, op, count = name.split("/")
            dtype, op, count = int(dtype), int(op), int(count)
            xs = [gen(name, i, count, dtype, op) for i in range(n)]
            check_reduced(got, xs, dtype, op, name)
    big = f"ar/{dk.FLOAT32}/{dk.SUM}/{BIG}"
    assert res[0]["ar_again"].tobytes() == res[0][big].tobytes(), "not the same bits run to run"
    check_reduced(res[0]["stream"], [gen("stream", i, BIG, dk.FLOAT32) for i in range(n)],
                  dk.FLOAT32, dk.SUM, "stream")
    for count in (0, 7, BIG):
        for i in range(n):
            assert np.array_equal(res[i][f"bc/{count}"], gen(f"bc/{count}", n - 1, count,
                                                             dk.FLOAT32)), (count, i)
    r1 = res[1]
    check_reduced(r1["rd/7"], [gen("rd/7", i, 7, dk.FLOAT32) for i in range(n)], dk.FLOAT32,
                  dk.MAX, "reduce max")
    check_reduced(r1[f"rd/{BIG}"], [gen(f"rd/{BIG}", i, BIG, dk.FLOAT32) for i in range(n)],
                  dk.FLOAT32, dk.SUM, "reduce sum")
    for count in (0, 5, BIG):
        want = np.concatenate([gen(f"ag/{count}", i, count, dk.INT32) for i in range(n)])
        for i in range(n):
            assert np.array_equal(res[i][f"ag/{count}"], want), (count, i)
    want = np.concatenate([gen("agip/5", i, 5, dk.INT32) for i in range(n)])
    assert all(np.array_equal(res[i]["agip/5"], want) for i in range(n))
    for count, in_place in ((0, False), (5, False), (BIG // n, False), (5, True)):
        name = f"rs/{count}/{in_place}"
        xs = [gen(name, i, count * n, dk.FLOAT32) for i in range(n)]
        for k in range(n):
            check_reduced(res[k][name], [x[k * count:(k + 1) * count] for x in xs], dk.FLOAT32,
                          dk.SUM, (name, k))
    for count, in_place in ((3, False), (BIG // n, False), (3, True)):
        name = f"a2a/{count}/{in_place}"
        xs = [gen(name, i, count * n, dk.INT64) for i in range(n)]
        for k in range(n):
            want = np.concatenate([x[k * count:(k + 1) * count] for x in xs])
            assert np.array_equal(res[k][name], want), (name, k)
    for order in ("send_first", "recv_first"):
        for count in (0, 1, BIG):
            name = f"p2p/{order}/{count}"
            for k in range(n):
                assert np.array_equal(res[k][name], gen(name, (k - 1) % n, count, dk.FLOAT32)), \
                    (name, k)
    want = np.min(np.stack([gen("stream", i, BIG, dk.FLOAT32)[:7] for i in range(n)]), 0)
    assert all(np.array_equal(res[i]["stream_group"], want) for i in range(n))


def test_rank_that_never_calls_times_out_naming_it(work):
    codes, outs = spawn("skip", 3, work)
    _ok(codes, outs)
    for i in range(2):
        info = _load(work, i)[1]
        assert "all_reduce" in info["message"] and "rank %d of 3" % i in info["message"]
        # Timed out itself, or stopped at once by the peer that timed out first.
        assert "waited for ranks 2" in info["message"] or "waiting for ranks 2" in info["message"]
        assert "timed out after 2000 ms waiting for ranks 2" in info["message"], info["message"]
        assert info["seconds"] < TIMEOUT_MS / 1000 + 1.5, info
        assert "unusable" in info["later"]


def test_mismatched_count_is_invalid_argument_on_every_rank(work):
    codes, outs = spawn("mismatch", 2, work)
    _ok(codes, outs)
    for i in range(2):
        msg = _load(work, i)[1]["message"]
        assert "count=4" in msg and "count=5" in msg, msg


def test_killed_rank_fails_the_others_in_time_and_a_new_comm_works(work):
    codes, outs = spawn("kill", 3, work)
    assert codes[2] == -signal.SIGKILL, (codes, outs[2][-2000:])
    _ok(codes[:2], outs[:2])
    for i in range(2):
        info = _load(work, i)[1]
        assert "2" in info["message"].split("ranks", 1)[1], info["message"]
        assert info["seconds"] < TIMEOUT_MS / 1000 + 1.5, info
        assert info["new_comm_result"] == [3.0, 3.0, 3.0]


def test_abort_from_another_thread_unblocks_promptly(work):
    codes, outs = spawn("abort", 2, work)
    _ok(codes, outs)
    info = _load(work, 0)[1]
    assert "abort" in info["message"] and info["seconds"] < 2.0, info
