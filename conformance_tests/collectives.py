"""Section "collectives": the optional collectives part (device API 1.5),
through ``devicekit.distributed``, with real ranks.

Each multi-rank case starts its ranks (``devicekit.conformance._coll_rank``,
one process each, opening the case's own device: by name or by the plugin's
library path) under a hard timeout, and kills every one of them when it ends.
One spawn runs a whole group: a collective over every dtype the device
stores x every reduce op x root (0 and the last rank) x in place / out of
place x counts 0, 1, 7 and one larger than a chunk (float32 only), against a
float64 oracle with the spec's numeric contract, and bitwise across ranks. The
first wrong combination is reported with the collective, dtype, op, root,
count, rank, index, expected and got. Other cases: stream ordering (an op
before the collective and one after, no synchronize), two communicators
interleaved, and never a hang (a rank that skips a call, a mismatched count,
a rank SIGKILLed mid-call: the others fail within the timeout, a new
communicator works, no shared memory is left; a call blocked on a missing
rank ends with UNAVAILABLE when another thread aborts its communicator; a
rank that never joins fails the others' Comm_Init within the timeout).
Argument rules are checked in one process (rejected before any
communication).

A plugin without the part gets one not-implemented case saying so (optional:
it does not fail the run; the release policy requires the section where the
plugin declares the part).
"""

import functools
import glob
import json
import os
import re
import shutil
import signal
import tempfile
import time

import numpy as np

from devicekit.conformance.case import Case, Section

NRANKS = (2, 3, 4)
GROUPS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all",
          "send_recv")
HANG_KINDS = ("skipped_rank", "count_mismatch", "killed_rank", "aborted", "init_missing")
HANG_TIMEOUT = 2.0  # the never-a-hang cases' communicator timeout (seconds)
MATRIX_TIMEOUT = 20.0  # the other cases' (a wrong plugin fails a rank, the others time out)
CASE_LIMIT = 90.0  # a whole spawn, hard (under the runner's 120 s per case)
NO_PART = "not implemented: the plugin has no collectives part"


def _has_part(target):
    return "collectives" in target.device.plugin.parts


def _invalid_names():
    return list(INVALID)


def _fixed_ids():
    ids = [f"collectives/{g}/{n}ranks" for g in GROUPS for n in NRANKS]
    ids += ["collectives/stream_order/2ranks", "collectives/stream_order/3ranks",
            "collectives/two_communicators/3ranks"]
    ids += [f"collectives/never_hang/{k}/3ranks" for k in HANG_KINDS]
    ids += [f"collectives/invalid_argument/{name}" for name in _invalid_names()]
    ids += ["collectives/one_rank/dtypes_and_ops"]
    return ids


def _available(target):
    try:
        import devicekit.distributed  # noqa: F401
    except ImportError as e:
        return f"this DeviceKit has no devicekit.distributed ({e})"
    return None


SECTION = Section("collectives", "Collectives between ranks (optional part, device API 1.5+)",
                  order=70, available=_available,
                  min_cases=lambda target: len(_fixed_ids()) if _has_part(target) else None)


# ---- spawning ranks ----------------------------------------------------------------


def _segments(uid):
    """/dev/shm entries named by a unique id (a plugin over POSIX shared memory
    may put the segment's name in it): printable runs of 8+ bytes."""
    found = []
    for run in re.findall(rb"/?[\x21-\x7e]{8,}", uid):
        base = run.decode().lstrip("/")
        if "/" not in base:
            found += glob.glob(os.path.join("/dev/shm", glob.escape(base) + "*"))
    return found


_MP = None


def _mp_context():
    """The rank processes' start method: a forkserver that has imported
    DeviceKit and numpy once, and never opens a device (so every rank starts
    as clean as a spawned one, without paying ~0.35 s of CPU for the imports:
    half the section's time). Where there is none, spawn."""
    global _MP
    if _MP is None:
        import multiprocessing

        try:
            _MP = multiprocessing.get_context("forkserver")
            _MP.set_forkserver_preload(["devicekit", "devicekit.conformance._coll_rank"])
        except ValueError:
            _MP = multiprocessing.get_context("spawn")
    return _MP


def spawn(ctx, group, nranks, n_uids=1, timeout=MATRIX_TIMEOUT, expect_killed=()):
    """Runs ``group`` on ``nranks`` rank processes; returns their answers
    (a list, by rank). A rank that died, hung or raised fails the case with
    its rank named; every child is killed in the end."""
    from devicekit import distributed
    from devicekit.conformance import _coll_rank

    target = ctx.target
    dev = target.device
    uids = [distributed.unique_id(dev) for _ in range(n_uids)]
    work = tempfile.mkdtemp(prefix="dk-coll-")
    mp = _mp_context()
    procs, logs = [], []
    try:
        for r in range(nranks):
            job = {"rank": r, "nranks": nranks, "device": dev.name, "plugin": target.plugin,
                   "level": target.level, "group": group, "seed": ctx.seed,
                   "timeout": timeout, "uids": [u.hex() for u in uids],
                   "out": os.path.join(work, f"rank{r}.json")}
            logs.append(os.path.join(work, f"rank{r}.log"))
            p = mp.Process(target=_coll_rank.run_job, args=(job, logs[-1]), daemon=True)
            p.start()
            procs.append(p)
        deadline = time.monotonic() + CASE_LIMIT
        for r, p in enumerate(procs):
            p.join(max(0.1, deadline - time.monotonic()))
            if p.exitcode is None:
                raise AssertionError(
                    f"{group} on {nranks} ranks: rank {r} did not finish within {CASE_LIMIT:g} s "
                    f"(a hang){_tail(logs[r])}")
        answers = []
        for r, p in enumerate(procs):
            if r in expect_killed:
                assert p.exitcode == -signal.SIGKILL, \
                    f"{group}: rank {r} should have been SIGKILLed, exited {p.exitcode}"
                answers.append(None)
                continue
            path = os.path.join(work, f"rank{r}.json")
            if p.exitcode != 0 or not os.path.exists(path):
                raise AssertionError(f"{group} on {nranks} ranks: rank {r} crashed (exit status "
                                     f"{p.exitcode}){_tail(logs[r])}")
            with open(path) as f:
                answers.append(json.load(f))
        for u in uids:  # nothing of these communicators is left in /dev/shm
            left = _segments(u)
            assert not left, f"{group}: shared memory left behind by its communicator: {left}"
        return answers
    finally:
        for p in procs:
            if p.exitcode is None:
                p.kill()
        for p in procs:
            p.join(5)
        shutil.rmtree(work, ignore_errors=True)


def _tail(path):
    try:
        with open(path, errors="replace") as f:
            text = f.read()[-1500:].strip()
    except OSError:
        return ""
    return f"; its output ends:\n{text}" if text else ""


def judge(ctx, group, answers):
    """Fails on the first rank's exception or wrong result; compares the
    outputs that must be bitwise identical on every rank."""
    live = [a for a in answers if a is not None]
    for a in live:
        if a.get("error"):
            raise AssertionError(f"{group}: rank {a['rank']} raised {a['error']}\n"
                                 f"{a.get('traceback', '')[-1500:]}")
    lib = os.path.realpath(ctx.device.plugin.path)
    for a in live:  # the ranks ran the binary under test, not another of its name
        if a.get("library") != lib:
            raise AssertionError(f"{group}: rank {a['rank']} opened {a.get('library')}, not the "
                                 f"plugin under test {lib}")
    for a in live:
        if a.get("failure"):
            raise AssertionError(f"collectives/{group}: {a['failure']}")
    base = live[0]
    for a in live[1:]:
        if [k for k, _ in a["hashes"]] != [k for k, _ in base["hashes"]]:
            raise AssertionError(f"{group}: ranks {base['rank']} and {a['rank']} ran different "
                                 f"combinations")
        for (what, h0), (_, h) in zip(base["hashes"], a["hashes"]):
            if h0 != h:
                raise AssertionError(f"{what}: the output on rank {a['rank']} differs bitwise "
                                     f"from rank {base['rank']}'s (the contract: every rank "
                                     f"receives the same bits)")
    ctx.details["combinations"] = base.get("combos", 0)
    ni = base.get("not_implemented") or {}
    if ni:
        ctx.details["not_implemented"] = ni
    if group in GROUPS and not base.get("combos"):
        from devicekit.errors import NotImplementedByPlugin

        raise NotImplementedByPlugin(f"{group}: no dtype or op of it is implemented: "
                                     f"{next(iter(ni.values()), '')}")
    if ni.get("float32"):
        raise AssertionError(f"{group}: float32 is not implemented: {ni['float32']}")
    return live


# ---- the cases -----------------------------------------------------------------------


def matrix(ctx, group, nranks):
    judge(ctx, group, spawn(ctx, group, nranks))


def stream_order(ctx, nranks):
    judge(ctx, "stream_order", spawn(ctx, "stream_order", nranks))


def two_communicators(ctx, nranks):
    judge(ctx, "two_communicators", spawn(ctx, "two_comms", nranks, n_uids=2))


def never_hang(ctx, kind, nranks):
    start = time.monotonic()
    killed = (nranks - 1,) if kind == "killed_rank" else ()
    answers = spawn(ctx, f"hang/{kind}", nranks, n_uids=2, timeout=HANG_TIMEOUT,
                    expect_killed=killed)
    judge(ctx, kind, answers)
    events = {f"rank {a['rank']}": a.get("events") for a in answers if a}
    ctx.details["events"] = events
    took = time.monotonic() - start
    limit = 3 * HANG_TIMEOUT + 15  # process start-up on a busy machine, then the timeouts
    assert took < limit, f"{kind}: the ranks took {took:.1f} s (more than {limit:g} s)"


# Argument rules, in one process on a one-rank communicator: each call breaks
# one rule and must raise the documented DeviceKit error at once.

def _t(dev, n, dtype="float32"):
    import devicekit as dk

    return dk.tensor(np.zeros(n, np.float32), dev, dtype=dtype)


def _comm_rule(nranks, rank):
    def call(dev, comm):
        from devicekit import distributed
        distributed.Communicator(distributed.unique_id(dev), nranks, rank, dev, timeout=2.0)
    return call


INVALID = {
    # name: (call(dev, comm), the error's class name, words the message names)
    "nranks_zero": (_comm_rule(0, 0), "InvalidArgumentError", ("nranks",)),
    "nranks_negative": (_comm_rule(-2, 0), "InvalidArgumentError", ("nranks",)),
    "rank_out_of_range": (_comm_rule(2, 2), "InvalidArgumentError", ("rank",)),
    "rank_negative": (_comm_rule(2, -1), "InvalidArgumentError", ("rank",)),
    "bad_root_broadcast": (lambda dev, c: c.broadcast(_t(dev, 4), root=1),
                           "InvalidArgumentError", ("broadcast", "root")),
    "bad_root_reduce": (lambda dev, c: c.reduce(_t(dev, 4), root=-1),
                        "InvalidArgumentError", ("reduce", "root")),
    "bad_peer_self": (lambda dev, c: c.send(_t(dev, 4), 0), "InvalidArgumentError",
                      ("send", "peer")),
    "bad_peer_out_of_range": (lambda dev, c: c.recv(_t(dev, 4), 3), "InvalidArgumentError",
                              ("recv", "peer")),
    "unknown_reduce_op": (lambda dev, c: c.all_reduce(_t(dev, 4), op="median"),
                          "InvalidArgumentError", ("median",)),
    "send_recv_sizes_differ": (lambda dev, c: c.all_reduce(_t(dev, 4), out=_t(dev, 5)),
                               "InvalidArgumentError", ("all_reduce",)),
    "send_recv_dtypes_differ": (lambda dev, c: c.all_reduce(_t(dev, 4), out=_t(dev, 4, "int32")),
                                "DTypeError", ("all_reduce",)),
    "all_gather_recv_not_nranks_times_send": (
        lambda dev, c: c.all_gather(_t(dev, 5), _t(dev, 4)), "InvalidArgumentError",
        ("all_gather",)),
    "reduce_scatter_send_not_nranks_times_recv": (
        lambda dev, c: c.reduce_scatter(_t(dev, 2), _t(dev, 5)), "InvalidArgumentError",
        ("reduce_scatter",)),
    "all_to_all_sizes_differ": (lambda dev, c: c.all_to_all(_t(dev, 6), _t(dev, 4)),
                                "InvalidArgumentError", ("all_to_all",)),
}


def invalid_argument(ctx, name):
    import devicekit as dk
    from devicekit import distributed

    call, cls, words = INVALID[name]
    dev = ctx.device
    with distributed.Communicator(distributed.unique_id(dev), 1, 0, dev, timeout=2.0) as comm:
        start = time.monotonic()
        try:
            w = call(dev, comm)
            if w is not None:
                w.wait()
        except dk.DeviceKitError as e:
            took = time.monotonic() - start
            names = [k.__name__ for k in type(e).__mro__]
            assert cls in names, f"{name}: expected {cls}, got {type(e).__name__}: {e}"
            for word in words:
                assert word in str(e), f"{name}: the error does not name {word!r}: {e}"
            assert took < 1.5, f"{name}: the error took {took:.1f} s (checked before any wait?)"
        else:
            raise AssertionError(f"{name}: accepted instead of raising {cls}")
        # The communicator is still usable: nothing was enqueued.
        t = dk.tensor(np.arange(3, dtype=np.float32), dev)
        comm.all_reduce(t).wait()
        assert np.array_equal(t.numpy(), np.arange(3, dtype=np.float32)), \
            f"{name}: an all_reduce on one rank after the rejected call changed its data"


def dtypes_and_ops_on_one_rank(ctx):
    """Every dtype the device stores and every reduce op, on a one-rank
    communicator: one the part takes gives its input back (an all_reduce over
    one rank), one outside the part's masks raises NotImplementedByPlugin at
    once; the communicator works afterwards either way."""
    import devicekit as dk
    from devicekit import distributed
    from devicekit._op_facts import COLL_REDUCE_OPS

    dev = ctx.device
    outside = []
    with distributed.Communicator(distributed.unique_id(dev), 1, 0, dev, timeout=2.0) as comm:
        probes = [(dt, op) for dt in dev.properties["dtypes"] for op in COLL_REDUCE_OPS]
        for dtype, op in probes:
            host = np.array([1, 0, 1], np.float32)
            t = dk.tensor(host, dev, dtype=dtype)
            start = time.monotonic()
            try:
                comm.all_reduce(t, op=op).wait()
            except dk.NotImplementedByPlugin as e:
                outside.append(f"{dtype}/{op}")
                assert "not implemented" in str(e), f"{dtype}/{op}: {e}"
                assert time.monotonic() - start < 1.5, f"{dtype}/{op}: the error was not at once"
                continue
            got = np.asarray(t.numpy()).astype(np.float64)
            assert np.array_equal(got, host), \
                f"all_reduce {dtype} op={op} on one rank: expected {host.tolist()}, got {got.tolist()}"
        t = dk.tensor(np.arange(3, dtype=np.float32), dev)
        comm.all_reduce(t).wait()
        assert np.array_equal(t.numpy(), np.arange(3, dtype=np.float32))
    ctx.details["outside_the_part"] = outside
    assert "float32/sum" not in outside, "the collectives part does not take float32 sum"


def cases(target):
    if not _has_part(target):
        def absent(ctx):
            from devicekit.errors import NotImplementedByPlugin
            raise NotImplementedByPlugin(NO_PART)
        return [Case(id="collectives/part", section="collectives", fn=absent, required=False,
                     not_implemented=f"{NO_PART} (plugin '{target.device.plugin.name}')")]
    out = []
    for g in GROUPS:
        for n in NRANKS:
            out.append(Case(id=f"collectives/{g}/{n}ranks", section="collectives",
                            fn=functools.partial(matrix, group=g, nranks=n)))
    for n in (2, 3):
        out.append(Case(id=f"collectives/stream_order/{n}ranks", section="collectives",
                        fn=functools.partial(stream_order, nranks=n)))
    out.append(Case(id="collectives/two_communicators/3ranks", section="collectives",
                    fn=functools.partial(two_communicators, nranks=3)))
    for k in HANG_KINDS:
        out.append(Case(id=f"collectives/never_hang/{k}/3ranks", section="collectives",
                        fn=functools.partial(never_hang, kind=k, nranks=3)))
    for name in INVALID:
        out.append(Case(id=f"collectives/invalid_argument/{name}", section="collectives",
                        fn=functools.partial(invalid_argument, name=name)))
    out.append(Case(id="collectives/one_rank/dtypes_and_ops", section="collectives",
                    fn=dtypes_and_ops_on_one_rank))
    return out
