"""One rank of a conformance case of the "collectives" section:
``python -m devicekit.conformance._coll_rank JOB_JSON``.

The parent (the case, in a conformance worker) makes the unique ids, starts
one such process per rank with the same job, and reads back each rank's
answer, a JSON file (``job["out"]``) written at the end: never stdout, which
the plugin may write to. A rank computes every rank's inputs from the job's
seed, so it checks its own outputs against a float64 oracle without any data
exchange; it returns a CRC of each output that must be bitwise identical on
every rank, and the parent compares them.

A rank keeps running the whole group after a wrong result (so that the ranks
stay in step) and reports the first wrong one precisely; an exception ends it
(the others then fail within the communicator's timeout). The combinations
and checks live here so that the parent and the ranks agree on them.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback
import zlib

import numpy as np

ODD_COUNT = 7
SMALL_COUNTS = (0, 1, ODD_COUNT)  # empty (still synchronises), one element, odd
#: Larger than the reference plugin's chunk (512 KiB per buffer) in float32;
#: run for float32 only, to bound the time.
BIG_COUNT = 300_001
BIG_COUNT_FULL = (1 << 20) + 3
FLOATS = ("float32", "float64", "float16", "bfloat16")
SENTINEL = 77  # what an output buffer holds before the call (never a result of the inputs)


class Mismatch(Exception):
    pass


# ---- inputs and oracle --------------------------------------------------------------


def _np(dtype):
    if dtype == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype("bool" if dtype == "bool" else dtype)


def gen(seed, key, rank, n, dtype, op=None, nan_rank=None):
    """Rank ``rank``'s ``n`` inputs of combination ``key``: every rank can make
    them. With ``nan_rank``, that rank's element 3 is NaN (it must propagate)."""
    rng = np.random.default_rng(zlib.crc32(f"{seed}/{key}/{rank}".encode()))
    if dtype in FLOATS:
        x = rng.uniform(0.5, 1.5, n) if op == "prod" else rng.uniform(-4, 4, n)
        if rank == nan_rank and n > 3:
            x[3] = np.nan
        return x.astype(_np(dtype))
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if op == "prod":
        lo, hi = (1, 4) if dtype == "uint8" else (-3, 4)
    else:
        lo, hi = (0, 100) if dtype == "uint8" else (-60, 60)
    return rng.integers(lo, hi, n).astype(_np(dtype))


def expected_reduce(xs, dtype, op):
    """(exact float64 / int64 result, error bound or None for bit-exact, wanted bits or None).

    The numeric contract of spec/collectives.json: integers exact (sum and
    prod wrap as the dtype does, avg the int64 sum / nranks truncated toward
    zero), bool or / and, max and min exact; float32 / float64 sums within
    nranks * eps * sum|x_r| (prod: of |exact|); 16-bit types accumulate in
    float32 in rank order and round once (so the bits are known)."""
    n = len(xs)
    if dtype == "bool":
        v = np.stack([x.astype(np.int64) for x in xs])
        r = v.max(0) if op in ("sum", "max") else v.min(0)
        return r.astype(bool), None, r.astype(bool)
    if dtype not in FLOATS:
        v = np.stack([x.astype(np.int64) for x in xs])
        if op == "sum":
            r = v.sum(0)
        elif op == "prod":
            r = v.prod(0)
        elif op == "max":
            r = v.max(0)
        elif op == "min":
            r = v.min(0)
        else:
            s = v.sum(0)
            r = np.sign(s) * (np.abs(s) // n)
        want = r.astype(xs[0].dtype)  # wraps modulo 2^bits as the dtype's arithmetic does
        return want, None, want
    v = np.stack([x.astype(np.float64) for x in xs])
    if op in ("max", "min"):
        r = v.max(0) if op == "max" else v.min(0)
        return r, None, r.astype(xs[0].dtype)
    exact = {"sum": v.sum(0), "prod": v.prod(0), "avg": v.sum(0) / n}[op]
    if dtype in ("float16", "bfloat16"):
        acc = xs[0].astype(np.float32)
        for x in xs[1:]:
            acc = acc * x.astype(np.float32) if op == "prod" else acc + x.astype(np.float32)
        if op == "avg":
            acc = acc / np.float32(n)
        return exact, None, acc.astype(xs[0].dtype)
    eps = np.finfo(xs[0].dtype).eps / 2  # unit roundoff
    if op == "prod":
        bound = n * eps * np.abs(exact)
    else:
        bound = n * eps * np.abs(v).sum(0)
        if op == "avg":
            bound = bound / n + eps * np.abs(exact)
    return exact, bound, None


def first_bad(got, exact, bound, want):
    """Index of the first element outside the contract, or None."""
    if want is not None:
        if got.dtype.kind in "fV" or got.dtype.name == "bfloat16":  # the same value, or both NaN
            g, w = got.astype(np.float64), want.astype(np.float64)
            same = (g == w) | (np.isnan(g) & np.isnan(w))
        else:
            same = got == want
        bad = np.flatnonzero(~same)
    else:
        g = got.astype(np.float64)
        err = np.abs(g - exact)
        bad = np.flatnonzero(~((err <= bound) | (np.isnan(exact) & np.isnan(g))))
    return int(bad[0]) if bad.size else None


# ---- one rank -------------------------------------------------------------------------


class Rank:
    def __init__(self, job):
        from devicekit.conformance.target import open_target

        self.job = job
        self.me, self.n = job["rank"], job["nranks"]
        self.seed, self.timeout = job["seed"], job["timeout"]
        self.dev = open_target(job["device"], job.get("plugin")).device
        self.first_failure = None
        self.hashes = []
        self.combos = 0
        self.not_implemented = {}
        self.events = {}

    def comm(self, uid_hex, nranks=None, rank=None):
        from devicekit import distributed

        return distributed.Communicator(bytes.fromhex(uid_hex), nranks or self.n,
                                        self.me if rank is None else rank, self.dev,
                                        timeout=self.timeout)

    def tensor(self, a, dtype):
        import devicekit as dk

        return dk.tensor(a, self.dev, dtype=dtype)

    def read(self, t):
        return np.asarray(t.numpy()).reshape(-1)

    def fail(self, what, index, expected, got, extra=""):
        if self.first_failure is None:
            self.first_failure = (f"{what}: rank {self.me}, index {index}: expected "
                                  f"{expected!r}, got {got!r}{extra}")

    def check_equal(self, what, got, want):
        if got.shape != want.shape:
            self.fail(what, "-", f"{want.size} elements", f"{got.size} elements")
            return
        b = first_bad(got, None, None, want)
        if b is not None:
            self.fail(what, b, want[b].item(), got[b].item())

    def check_reduce(self, what, got, xs, dtype, op):
        exact, bound, want = expected_reduce(xs, dtype, op)
        b = first_bad(got, exact, bound, want)
        if b is not None:
            extra = (f" (exact {exact[b]!r}, allowed error {bound[b]:.3g})" if bound is not None
                     else " (must be bit-exact)")
            self.fail(what, b, (want if want is not None else exact)[b].item(), got[b].item(),
                      extra)

    def digest(self, what, got):
        self.hashes.append([what, zlib.crc32(np.ascontiguousarray(got).view(np.uint8).tobytes())])

    # -- the matrix of one collective ---------------------------------------------------

    def matrix(self, comm, name):
        from devicekit._op_facts import COLL_REDUCE_OPS, COLLECTIVES

        facts = COLLECTIVES.get(name, {"reduce": False, "root": False})
        ops = COLL_REDUCE_OPS if facts["reduce"] else (None,)
        roots = sorted({0, self.n - 1}) if facts["root"] else (0,)
        places = (True,) if name in ("broadcast", "send_recv") else (False, True)
        big = BIG_COUNT_FULL if self.job.get("level") == "full" else BIG_COUNT
        for dtype in self.dev.properties["dtypes"]:
            # Every combination of a dtype is queued first, then all are read
            # and checked: the calls are stream-ordered, and not waiting for
            # each one lets the ranks run them back to back.
            checks = []
            self.dtype_matrix(comm, name, dtype, facts, ops, roots, places, big, checks)
            for check in checks:
                check()
            self.dev.synchronize()
        if facts["reduce"] and "float32" in self.dev.properties["dtypes"]:
            self.same_bits_again(comm, name, roots[-1], big)

    def same_bits_again(self, comm, name, root, big):
        """The float32 sum larger than a chunk, run again on the same inputs:
        the contract says the bits are the same from run to run (one fixed
        reduction order whatever the timing)."""
        from devicekit.errors import NotImplementedByPlugin

        what = f"{name} float32 op=sum" + (f" root={root}" if name == "reduce" else "") \
            + f" count={big} out-of-place nranks={self.n}"
        first = [h for w, h in self.hashes if w == what]
        if not first:
            return  # not run (outside the part's masks, or this rank is not the root)
        try:
            check = self.one(comm, name, "float32", "sum", root, False, big, what)
        except NotImplementedByPlugin:
            return
        check()
        again = [h for w, h in self.hashes if w == what]
        if len(again) > len(first) and again[-1] != first[0]:
            self.fail(what + ", run a second time", "-", "the same bits as the first run",
                      "different bits (CRC32 differs)")

    def dtype_matrix(self, comm, name, dtype, facts, ops, roots, places, big, checks):
        from devicekit.errors import NotImplementedByPlugin

        for op in ops:
            for root in roots:
                for in_place in places:
                    counts = (ODD_COUNT,)
                    if op == ops[0]:  # the empty and one-element calls: with the first op
                        counts = SMALL_COUNTS
                    if (dtype == "float32" and op == ops[0] and not in_place
                            and root == roots[-1]):
                        counts += (big,)  # larger than a chunk: one dtype, to bound the time
                    elif (dtype in ("float16", "bfloat16") and op == "avg" and not in_place
                          and root == roots[-1]):
                        # the 16-bit bits are known (float32 in rank order, one rounding):
                        # a float32 average computed another way shows in a few of many
                        counts += (BIG_COUNT,)
                    nan = (facts["reduce"] and dtype in FLOATS and not in_place
                           and root == roots[-1])
                    for count in counts + (("nan",) if nan else ()):
                        what = (f"{name} {dtype}" + (f" op={op}" if op else "")
                                + (f" root={root}" if facts["root"] else "")
                                + (f" count={ODD_COUNT} with a NaN at index 3 on rank "
                                   f"{self.n - 1}" if count == "nan" else f" count={count}")
                                + " "
                                + ("in-place" if in_place else "out-of-place")
                                + f" nranks={self.n}")
                        try:
                            checks.append(self.one(comm, name, dtype, op, root, in_place,
                                                   count, what))
                        except NotImplementedByPlugin as e:
                            # the same on every rank (the SDK checks the part's
                            # masks before the plugin sees the call)
                            self.not_implemented[dtype if op is None else f"{dtype}/{op}"] = \
                                str(e)[:300]
                            if op is None:
                                return
                            break
                        self.combos += 1

    def one(self, comm, name, dtype, op, root, in_place, count, what):
        """Queues one combination (no wait); returns the function that reads
        and checks its result."""
        n, me, s = self.n, self.me, self.seed
        key = what
        ndt = _np(dtype)
        fill = np.full
        nan_rank = None
        if count == "nan":  # the odd count, rank n-1's element 3 NaN
            count, nan_rank = ODD_COUNT, n - 1
        if name == "all_reduce":
            xs = [gen(s, key, r, count, dtype, op, nan_rank) for r in range(n)]
            send = self.tensor(xs[me], dtype)
            out = send if in_place else self.tensor(fill(count, SENTINEL, ndt), dtype)
            comm.all_reduce(send, op=op, out=None if in_place else out)

            def check():
                got = self.read(out)
                self.check_reduce(what, got, xs, dtype, op)
                if not in_place:
                    self.check_equal(what + " (its send buffer must not change)",
                                     self.read(send), xs[me])
                self.digest(what, got)
        elif name == "broadcast":
            xs = [gen(s, key, r, count, dtype) for r in range(n)]
            t = self.tensor(xs[me], dtype)
            comm.broadcast(t, root=root)

            def check():
                got = self.read(t)
                self.check_equal(what, got, xs[root])
                self.digest(what, got)
        elif name == "reduce":
            xs = [gen(s, key, r, count, dtype, op, nan_rank) for r in range(n)]
            send = self.tensor(xs[me], dtype)
            out = send if in_place else self.tensor(fill(count, SENTINEL, ndt), dtype)
            comm.reduce(send, root=root, op=op, out=None if in_place else out)

            def check():
                got = self.read(out)
                if me == root:
                    self.check_reduce(what, got, xs, dtype, op)
                else:
                    before = xs[me] if in_place else fill(count, SENTINEL, ndt)
                    self.check_equal(what + " (recv on a rank that is not the root must not "
                                     "be touched)", got, before)
        elif name == "all_gather":
            xs = [gen(s, key, r, count, dtype) for r in range(n)]
            if in_place:
                host = fill(n * count, SENTINEL, ndt)
                host[me * count:(me + 1) * count] = xs[me]
                out = self.tensor(host, dtype)
                comm.all_gather(out, out[me * count:(me + 1) * count])
            else:
                out = self.tensor(fill(n * count, SENTINEL, ndt), dtype)
                comm.all_gather(out, self.tensor(xs[me], dtype))

            def check():
                got = self.read(out)
                self.check_equal(what, got, np.concatenate(xs))
                self.digest(what, got)
        elif name == "reduce_scatter":
            xs = [gen(s, key, r, n * count, dtype, op, nan_rank) for r in range(n)]
            send = self.tensor(xs[me], dtype)
            if in_place:
                out = send[me * count:(me + 1) * count]
            else:
                out = self.tensor(fill(count, SENTINEL, ndt), dtype)
            comm.reduce_scatter(out, send, op=op)

            def check():
                got = self.read(out)
                self.check_reduce(what, got, [x[me * count:(me + 1) * count] for x in xs],
                                  dtype, op)
        elif name == "all_to_all":
            xs = [gen(s, key, r, n * count, dtype) for r in range(n)]
            send = self.tensor(xs[me], dtype)
            out = send if in_place else self.tensor(fill(n * count, SENTINEL, ndt), dtype)
            comm.all_to_all(out, send)

            def check():
                got = self.read(out)
                want = (np.concatenate([x[me * count:(me + 1) * count] for x in xs]) if count
                        else np.empty(0, ndt))
                self.check_equal(what, got, want)
        elif name == "send_recv":
            # A ring inside a group (each rank sends right, receives from the
            # left), then a plain pair: rank 0 to the last rank.
            xs = [gen(s, key, r, count, dtype) for r in range(n)]
            right, left = (me + 1) % n, (me - 1) % n
            src = self.tensor(xs[me], dtype)
            dst = self.tensor(fill(count, SENTINEL, ndt), dtype)
            with comm.group():
                comm.send(src, right)
                comm.recv(dst, left)
            # Groups nest (a count per thread): the inner end issues nothing,
            # the outermost one issues all. Each rank receives first, in an
            # inner group, then sends: issued at the inner end, every rank's
            # receive would wait for a send no rank has made yet.
            nested = self.tensor(fill(count, SENTINEL, ndt), dtype)
            with comm.group():
                with comm.group():
                    comm.recv(nested, left)
                comm.send(src, right)
            pair = None
            if me in (0, n - 1):
                pair = self.tensor(xs[me] if me == 0 else fill(count, SENTINEL, ndt), dtype)
                if me == 0:
                    comm.send(pair, n - 1)
                else:
                    comm.recv(pair, 0)

            def check():
                self.check_equal(what + f" (ring: received from rank {left})", self.read(dst),
                                 xs[left])
                self.check_equal(what + f" (ring in nested groups, receive in the inner one: "
                                 f"received from rank {left})", self.read(nested), xs[left])
                if me == n - 1:
                    self.check_equal(what + " (rank 0 -> last rank, no group)",
                                     self.read(pair), xs[0])
        else:
            raise ValueError(f"unknown collective group {name!r}")
        return check

    # -- ordering, two communicators --------------------------------------------------

    def stream_order(self, comm):
        """An SDK op writes the send buffer, the collective is queued right
        after it, and an op right after the collective reads its output: no
        synchronize anywhere but the final read."""
        from devicekit import ops

        n, me, count = self.n, self.me, BIG_COUNT
        key = "stream_order"
        a = [gen(self.seed, key + "/a", r, count, "float32") for r in range(n)]
        b = [gen(self.seed, key + "/b", r, count, "float32") for r in range(n)]
        hops = 4  # queued work long enough that a collective not ordered after it reads early
        for round_ in range(2):
            bt = self.tensor(b[me], "float32")
            s = self.tensor(a[me], "float32")
            for _ in range(hops):
                s = ops.add(s, bt)
            comm.all_reduce(s)  # in place, not waited for
            after = ops.neg(s)
            got = -self.read(after)
            xs = []
            for r in range(n):  # float32 adds, as the kernels do them
                x = a[r]
                for _ in range(hops):
                    x = x + b[r]
                xs.append(x)
            self.check_reduce(f"stream_order round {round_}: {hops} adds -> all_reduce(sum) -> "
                              f"neg without synchronize, count={count} nranks={n}", got, xs,
                              "float32", "sum")

    def two_comms(self, c1, c2):
        """Two communicators over the same ranks, their calls interleaved,
        none waited for until the end."""
        n, me, count = self.n, self.me, 1001
        xs1 = [gen(self.seed, "two/1", r, count, "float32") for r in range(n)]
        xs2 = [gen(self.seed, "two/2", r, count, "int32") for r in range(n)]
        xs3 = [gen(self.seed, "two/3", r, count, "float32") for r in range(n)]
        t1, t2 = self.tensor(xs1[me], "float32"), self.tensor(xs2[me], "int32")
        g3 = self.tensor(np.zeros(n * count, np.float32), "float32")
        t4 = self.tensor(xs2[me], "int32")
        works = [c1.all_reduce(t1), c2.all_reduce(t2, op="max"),
                 c1.all_gather(g3, self.tensor(xs3[me], "float32")), c2.all_reduce(t4, op="sum")]
        for w in works:
            w.wait()
        self.check_reduce("two communicators: all_reduce(sum) on the first", self.read(t1), xs1,
                          "float32", "sum")
        self.check_reduce("two communicators: all_reduce(max) on the second", self.read(t2), xs2,
                          "int32", "max")
        self.check_equal("two communicators: all_gather on the first", self.read(g3),
                         np.concatenate(xs3))
        self.check_reduce("two communicators: all_reduce(sum) on the second", self.read(t4),
                          xs2, "int32", "sum")

    # -- never a hang -------------------------------------------------------------------

    def expect_error(self, what, call, must_name=(), codes=None):
        """``call`` must raise a DeviceKit error within the timeout (plus a
        margin for the process), naming ``must_name``, with one of the device
        API error ``codes`` (labels such as "UNAVAILABLE") when given."""
        from devicekit.errors import DeviceKitError

        start = time.monotonic()
        try:
            call()
        except DeviceKitError as e:
            took = time.monotonic() - start
            # only what is the same run to run goes in the report: which rank
            # reports first (its own timeout, or a peer's failure) is a race,
            # so the message is checked below, not recorded
            self.events[what] = {"error": type(e).__name__}
            if took > self.timeout + 2.0:
                self.fail(what, "-", f"an error within the {self.timeout:g} s timeout",
                          f"one after {took:.1f} s")
            if codes is not None and getattr(e, "code", None) not in codes:
                self.fail(what, "-", f"an error with code {' or '.join(sorted(codes))}",
                          f"code {getattr(e, 'code', None)}: {str(e)[:300]}")
            low = str(e).lower()
            for word in must_name:
                if str(word).lower() not in low:
                    self.fail(what, "-", f"an error message naming {word!r}", str(e)[:400])
            return e
        took = time.monotonic() - start
        self.fail(what, "-", "a DeviceKit error", f"success after {took:.1f} s")
        return None

    def expect_unusable(self, comm, count):
        """After a collective failed on its stream, the communicator is
        unusable: the next call (on a fresh tensor: the SDK marks the failed
        call's outputs failed) fails with FAILED_PRECONDITION."""
        fresh = self.tensor(np.ones(count, np.float32), "float32")
        self.expect_error("the next all_reduce on a communicator whose last call failed",
                          lambda: comm.all_reduce(fresh).wait(), ("all_reduce",),
                          codes={"FAILED_PRECONDITION"})

    def hang(self, kind):
        import devicekit as dk

        n, me = self.n, self.me
        last = n - 1
        uids = self.job["uids"]
        if kind == "init_missing":
            # The last rank never joins: Comm_Init on the others gives up
            # after the timeout with UNAVAILABLE naming the missing rank.
            if me == last:
                time.sleep(self.timeout + 1.0)
            else:
                self.expect_error(f"Comm_Init with rank {last} never calling it",
                                  lambda: self.comm(uids[0]), (str(last),),
                                  codes={"UNAVAILABLE"})
            return
        comm = self.comm(uids[0])
        if kind == "skipped_rank":
            if me == last:
                # never calls, and stays alive past the others' timeout and its
                # margin: their error must come from the timeout, not from its exit
                time.sleep(2 * self.timeout + 3.0)
            else:
                t = self.tensor(np.ones(5, np.float32), "float32")
                self.expect_error(f"all_reduce with rank {last} never calling it",
                                  lambda: comm.all_reduce(t).wait(),
                                  ("all_reduce", str(last)), codes={"UNAVAILABLE"})
                self.expect_unusable(comm, 5)
        elif kind == "count_mismatch":
            count = 5 if me == 0 else 6
            t = self.tensor(np.ones(count, np.float32), "float32")
            self.expect_error(f"all_reduce with count 5 on rank 0 and 6 on the others "
                              f"(rank {me} passed {count})", lambda: comm.all_reduce(t).wait(),
                              ("all_reduce",), codes={"INVALID_ARGUMENT", "UNAVAILABLE"})
            self.expect_unusable(comm, count)
        elif kind == "aborted":
            # The last rank never calls; each other rank's call is blocked
            # until another thread aborts its communicator: the call ends with
            # UNAVAILABLE ("aborted"), not the timeout, and so does the next.
            if me == last:
                time.sleep(self.timeout + 1.0)
            else:
                t = self.tensor(np.ones(5, np.float32), "float32")
                aborter = threading.Timer(0.3, comm.abort)
                aborter.start()
                self.expect_error(f"all_reduce with rank {last} never calling it, aborted from "
                                  f"another thread", lambda: comm.all_reduce(t).wait(),
                                  ("abort",), codes={"UNAVAILABLE"})
                # the first call may have ended on a peer's abort before this rank's own
                # (the peer's abort fails it, which alone would give FAILED_PRECONDITION
                # next): the next call is made after this rank's Comm_Abort, which the
                # header says every later call reports
                aborter.join()
                fresh = self.tensor(np.ones(5, np.float32), "float32")
                self.expect_error("an all_reduce on an aborted communicator",
                                  lambda: comm.all_reduce(fresh).wait(), ("abort",),
                                  codes={"UNAVAILABLE"})
        elif kind == "killed_rank":
            big = self.tensor(np.ones(BIG_COUNT, np.float32), "float32")
            if me == last:  # killed while inside one of many queued large calls
                threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
                for _ in range(10_000):
                    comm.all_reduce(big)
                dk.synchronize(self.dev)
                raise AssertionError("rank was never killed")

            def loop():
                for _ in range(10_000):
                    comm.all_reduce(big).wait()

            self.expect_error(f"all_reduce while rank {last} is SIGKILLed", loop,
                              ("all_reduce",), codes={"UNAVAILABLE"})
            try:
                comm.destroy()
            except dk.DeviceKitError:
                pass
            # A new communicator over the survivors works.
            c2 = self.comm(uids[1], nranks=n - 1)
            xs = [gen(self.seed, "after_kill", r, 33, "float32") for r in range(n - 1)]
            t = self.tensor(xs[me], "float32")
            c2.all_reduce(t).wait()
            self.check_reduce("all_reduce on a new communicator after a rank was killed",
                              self.read(t), xs, "float32", "sum")
            c2.destroy()
            return
        else:
            raise ValueError(kind)
        try:
            comm.destroy()
        except dk.DeviceKitError:
            pass

    # -- entry -----------------------------------------------------------------------

    def run(self):
        group = self.job["group"]
        if group.startswith("hang/"):
            self.hang(group.split("/", 1)[1])
            return
        if group == "two_comms":
            with self.comm(self.job["uids"][0]) as c1, self.comm(self.job["uids"][1]) as c2:
                self.two_comms(c1, c2)
            return
        with self.comm(self.job["uids"][0]) as comm:
            if group == "stream_order":
                self.stream_order(comm)
            else:
                self.matrix(comm, group)


def run_job(job, log=None):
    """A rank started by multiprocessing (the section's forkserver): its
    stdout and stderr, and the plugin's, go to ``log``."""
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        import faulthandler
        faulthandler.enable()
    _run(job)


def main(argv=None):
    _run(json.loads((argv or sys.argv[1:])[0]))


def _run(job):
    answer = {"rank": job["rank"]}
    start = time.monotonic()
    rank = None
    try:
        rank = Rank(job)
        answer["open_seconds"] = round(time.monotonic() - start, 3)
        answer["library"] = os.path.realpath(rank.dev.plugin.path)
        rank.run()
    except BaseException as e:  # travels back as text; the parent names the rank
        answer["error"] = f"{type(e).__name__}: {e}"
        answer["traceback"] = traceback.format_exc(limit=-6)[-3000:]
    if rank is not None:
        answer.update(failure=rank.first_failure, hashes=rank.hashes, combos=rank.combos,
                      not_implemented=rank.not_implemented, events=rank.events)
    answer["seconds"] = round(time.monotonic() - start, 3)
    tmp = job["out"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(answer, f)
    os.replace(tmp, job["out"])


if __name__ == "__main__":
    main()
