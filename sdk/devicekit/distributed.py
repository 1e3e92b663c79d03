"""Collectives between the ranks of a job, over DeviceKit tensors.

The optional collectives part of the device API (since 1.5), one device per
rank (the ranks usually live in different processes)::

    uid = devicekit.distributed.unique_id(device)      # on one rank; pass the bytes on
    comm = devicekit.distributed.Communicator(uid, nranks, rank, device)
    comm.all_reduce(t, op="sum").wait()

Rendezvous is the caller's: one rank makes the unique id and hands the bytes
to every other rank by any means (``devicekit.torch``'s process group uses
torch's Store). Every collective is enqueued on the stream that the tensors'
device runs DeviceKit's ops on, so it is ordered after the ops that wrote its
inputs and before the ops that read its outputs, with no synchronize in
between; each returns a :class:`Work`. Never a hang: a collective that cannot
complete fails within the communicator's timeout with an error that names the
collective, the communicator and the missing ranks (raised by
:meth:`Work.wait`, or by the next read of a tensor it wrote).

A plugin without the part raises :class:`devicekit.NotImplementedByPlugin`
("not implemented: the plugin has no collectives part").
"""

from __future__ import annotations

import contextlib

from . import _core, _tracing
from ._op_facts import COLL_REDUCE_OPS, COLLECTIVES
from ._plugins.registry import device as _device
from .errors import InvalidArgumentError

__all__ = ["Communicator", "Work", "is_available", "unique_id", "DEFAULT_TIMEOUT",
           "UNIQUE_ID_BYTES"]

#: Seconds a collective (and the communicator's creation) waits for the other
#: ranks before it fails; the device API's default (DK_COLL_DEFAULT_TIMEOUT_MS).
DEFAULT_TIMEOUT = 300.0
#: Length of a unique id (DK_COLL_UNIQUE_ID_BYTES).
UNIQUE_ID_BYTES = _core.COLL_UNIQUE_ID_BYTES

_IDS = {name: i for i, name in enumerate(_core.COLLECTIVE_NAMES)}
assert tuple(_IDS) == tuple(COLLECTIVES), "the core and _op_facts disagree on the collectives"


def is_available(device=None) -> bool:
    """Whether the device's plugin has the collectives part."""
    return "collectives" in _device(device).plugin.parts


def unique_id(device=None) -> bytes:
    """A new communicator's unique id (``UNIQUE_ID_BYTES`` bytes), made by the
    device's plugin. One rank calls it and passes the bytes to all."""
    return _core.coll_unique_id(_device(device))


class Work:
    """A collective enqueued on its device's stream.

    ``wait()`` returns once it has run and raises its error (a timeout, a
    mismatch between ranks, an abort); ``is_completed()`` polls."""

    __slots__ = ("_work", "tensors")

    def __init__(self, work, tensors):
        self._work = work
        self.tensors = tensors  # the tensors it writes (for framework wrappers)

    def wait(self):
        self._work.wait()
        return True

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def __repr__(self):
        return f"<devicekit.distributed.Work {self._work.what}>"


def _op_id(op):
    try:
        return COLL_REDUCE_OPS.index(op)
    except ValueError:
        raise InvalidArgumentError(
            f"unknown reduce op {op!r}; expected one of {', '.join(COLL_REDUCE_OPS)}") from None


def _count(name, send, recv, nranks):
    """The call's ``count`` from its buffers, by the spec's send/recv rules
    ("count" or "nranks*count"), from the buffer that holds exactly ``count``
    where there is one; the core then checks both buffers against it."""
    rules = COLLECTIVES[name]
    for t in (send, recv):
        if t is not None and not isinstance(t, _core.Tensor):
            raise InvalidArgumentError(f"{name}: expected devicekit Tensors, got {type(t).__name__}")
    given = [(t, rule) for t, rule in ((send, rules["send_count"]), (recv, rules["recv_count"]))
             if t is not None and rule != "-"]
    if not given:
        raise InvalidArgumentError(f"{name}: no tensor given")
    t, rule = min(given, key=lambda g: g[1] != "count")
    n = t.numel()
    if rule == "count":
        return n
    if rule != "nranks*count":
        raise AssertionError(f"unknown buffer rule {rule!r} for {name}")
    if n % nranks:
        raise InvalidArgumentError(
            f"{name}: a tensor of {n} elements cannot be split into {nranks} equal parts "
            f"(the buffer holds nranks*count elements)")
    return n // nranks


class Communicator:
    """This rank's end of a communicator of ``nranks`` ranks on ``device``.

    Creating it blocks until every rank has created its end with the same
    unique id (or ``timeout`` seconds pass: a DeviceError naming the missing
    ranks). ``timeout`` also bounds every collective. Use it as a context
    manager, or call :meth:`destroy`; :meth:`abort` (from any thread) ends
    every pending and later call with an error."""

    def __init__(self, uid: bytes, nranks: int, rank: int, device=None,
                 timeout: float = DEFAULT_TIMEOUT):
        self.device = _device(device)
        self._comm = _core.Comm(bytes(uid), int(nranks), int(rank), self.device, float(timeout))
        self.nranks, self.rank, self.timeout = int(nranks), int(rank), float(timeout)

    # -- lifetime -------------------------------------------------------

    def abort(self):
        """Ends every blocked or queued call on this communicator promptly with
        an error, and every later one. Safe from another thread."""
        self._comm.abort()

    def destroy(self):
        """Waits (within the timeout) for this communicator's queued work and
        frees it. Local, not collective; idempotent."""
        self._comm.destroy()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()
        return False

    def __repr__(self):
        return f"<devicekit.distributed.Communicator {self._comm!r}>"

    @contextlib.contextmanager
    def group(self):
        """Issue the collectives and send/recv calls made inside together at
        the end of the block, so matched sends and recvs never deadlock."""
        _core.coll_group(self.device, False)
        try:
            yield self
        finally:
            _core.coll_group(self.device, True)

    # -- collectives ----------------------------------------------------

    def _run(self, name, send, recv, op="sum", root=0, peer=0, writes=()):
        count = _count(name, send, recv, self.nranks)
        op_id = _op_id(op) if COLLECTIVES[name]["reduce"] else 0
        if _tracing.on:  # the one test tracing costs when off
            t0 = _tracing.now_ns()
            work = self._comm.run(_IDS[name], send, recv, count, op_id, int(root), int(peer))
            _tracing.add("collective", name, t0, {"count": count, "op": op, "rank": self.rank,
                                                  "nranks": self.nranks, "device": self.device.name})
        else:
            work = self._comm.run(_IDS[name], send, recv, count, op_id, int(root), int(peer))
        return Work(work, writes)

    def all_reduce(self, t, op="sum", out=None):
        """``out`` (``t`` itself when None) = ``op`` over the ranks of ``t``."""
        out = t if out is None else out
        return self._run("all_reduce", t, out, op=op, writes=(out,))

    def broadcast(self, t, root=0):
        """``t`` = the root's ``t``, on every rank (in place)."""
        return self._run("broadcast", t, t, root=root, writes=(t,))

    def reduce(self, t, root=0, op="sum", out=None):
        """On the root: ``out`` (``t`` when None) = ``op`` over the ranks of ``t``;
        the other ranks' ``out`` is not touched."""
        out = t if out is None else out
        return self._run("reduce", t, out, op=op, root=root, writes=(out,))

    def all_gather(self, out, t):
        """``out`` (nranks times ``t``'s elements) = every rank's ``t``, in rank order."""
        return self._run("all_gather", t, out, writes=(out,))

    def reduce_scatter(self, out, t, op="sum"):
        """``out`` on rank k = ``op`` over the ranks of the k-th of ``t``'s nranks parts."""
        return self._run("reduce_scatter", t, out, op=op, writes=(out,))

    def all_to_all(self, out, t):
        """The k-th of ``out``'s nranks parts = rank k's part for this rank of ``t``."""
        return self._run("all_to_all", t, out, writes=(out,))

    def send(self, t, peer):
        """Sends ``t`` to rank ``peer``, which posts a matching :meth:`recv`."""
        return self._run("send", t, None, peer=peer)

    def recv(self, t, peer):
        """Receives ``t`` from rank ``peer`` (see :meth:`send`)."""
        return self._run("recv", None, t, peer=peer, writes=(t,))
