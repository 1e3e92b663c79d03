"""The ``torch.distributed`` backend ``dk``: c10d collectives on ``dk`` tensors
through ``devicekit.distributed``.

torch accepts a process group written in Python (a ``dist.ProcessGroup``
subclass whose methods torch's C++ calls back; torch's
``test/distributed/test_c10d_pypg.py``). ``register`` (called by
``import devicekit.torch``; it imports nothing) names the creator to
``dist.Backend.register_backend("dk", ..., devices=["dk"])``, so
``init_process_group("dk")`` and ``init_process_group("cpu:gloo,dk:dk")``
reach ``create``, which builds a ``DKProcessGroup``: rank 0 of the group makes
the DeviceKit unique id and puts it in the group's Store, every other rank
gets it there, and each rank makes its ``Communicator`` on its own ``dk:0``.

Each op maps to one DeviceKit collective and returns a torch ``Work`` whose
``wait()`` waits on the DeviceKit work (so its errors, such as a peer that
died or a timeout naming the missing ranks, surface there). An op or form the
backend does not have (gather, scatter, unequal all-to-all splits, a reduce op
other than sum/avg/product/min/max) raises ``UnloweredOpError`` naming it;
nothing runs on the CPU in its place. CPU tensors go to a gloo process group
made on first use when the backend string names gloo for cpu
(``"cpu:gloo,dk:dk"``; torch hands the whole group to a Python process group,
so this one serves both devices), and are refused otherwise.
"""

import datetime

import torch
import torch.distributed as dist
from torch.futures import Future

from ..errors import InvalidArgumentError, UnloweredOpError
from ._device import BACKEND, DKTensor, dk_device

NAME = "dk"
_UID_KEY = "devicekit/unique_id"
_DEFAULT_TIMEOUT = 300.0  # seconds: devicekit.distributed.Communicator's default


def _reduce_ops():
    R = dist.ReduceOp
    return ((R.SUM, "sum"), (R.AVG, "avg"), (R.PRODUCT, "prod"), (R.MIN, "min"), (R.MAX, "max"))


def _op_name(reduce_op, what):
    for torch_op, name in _reduce_ops():
        if reduce_op == torch_op:
            return name
    raise UnloweredOpError(
        f"torch.distributed backend '{NAME}': {what} with reduce op {reduce_op} is not supported "
        f"(DeviceKit collectives reduce with SUM, AVG, PRODUCT, MIN and MAX)",
        op=f"torch.distributed.{what}")


def _unsupported(what, why=""):
    return UnloweredOpError(
        f"torch.distributed backend '{NAME}' has no {what}{': ' + why if why else ''}; "
        f"it runs nothing on the CPU in its place", op=f"torch.distributed.{what}")


class DKWork(dist._Work):
    """A torch Work over DeviceKit works: ``wait()`` waits on each of them,
    then runs the op's finishing copies (into non-contiguous or listed
    outputs). ``get_future()`` waits too and returns a completed future, so
    DDP's reducer, which waits on the future, sees finished gradients."""

    def __init__(self, works, result, finish=()):
        super().__init__()
        self._works, self._result, self._finish = list(works), result, list(finish)
        self._future, self._done = Future(), False

    def wait(self, timeout=None):
        if not self._done:
            for w in self._works:
                w.wait()
            for fn in self._finish:
                fn()
            self._done = True
            self._future.set_result(self._result)
        return True

    def is_completed(self):
        return self._done or all(w.is_completed() for w in self._works)

    def is_success(self):
        return self._done

    def get_future(self):
        self.wait()
        return self._future


class _Done:
    """A DeviceKit-work stand-in for work already finished (gloo's, once waited)."""

    def __init__(self, work):
        self._work = work

    def wait(self):
        self._work.wait()

    def is_completed(self):
        return self._work.is_completed()


class DKProcessGroup(dist.ProcessGroup):
    """A c10d process group over one ``devicekit.distributed.Communicator``.
    Made by ``create``; see the module docstring."""

    def __init__(self, store, rank, size, timeout, device=None):
        super().__init__(rank, size)
        from .. import distributed as dkd  # only a process that makes a group pays for it

        self._rank, self._size, self._store = rank, size, store
        self._timeout = timeout
        self.torch_device = torch.device(BACKEND, 0) if device is None else torch.device(device)
        dev = dk_device(self.torch_device)
        if not dkd.is_available(dev):
            raise _unsupported(
                f"communicator on {dev.name}",
                f"the plugin of {dev.name} does not implement the device API's collectives part")
        if rank == 0:
            uid = bytes(dkd.unique_id(dev))
            store.set(_UID_KEY, uid)
        else:
            uid = bytes(store.get(_UID_KEY))
        self._comm = dkd.Communicator(uid, size, rank, dev, timeout=timeout)
        self._gloo = None
        self._one = None  # barrier's tensor
        self._group_name = self._group_desc = ""

    # ---- what torch asks of every process group -------------------------------------

    def getBackendName(self):
        return NAME

    def getRank(self):
        return self._rank

    def getSize(self):
        return self._size

    # (torch stores a group's name and description in its backends; a Python
    # process group has none, so it keeps them: DeviceMesh and FSDP2 read them)
    def setGroupName(self, name):
        self._group_name = name

    def getGroupName(self):
        return self._group_name

    def setGroupDesc(self, desc):
        self._group_desc = desc

    def getGroupDesc(self):
        return self._group_desc

    def abort(self):
        self._comm.abort()

    def shutdown(self):
        self._comm.destroy()

    # ---- routing: dk tensors to DeviceKit, CPU tensors to gloo when asked ------------

    def _cpu_group(self, what):
        if self._gloo is None:
            config = dist.distributed_c10d._world.pg_backend_config.get(self, "")
            if "cpu:gloo" not in config.replace(" ", ""):
                raise InvalidArgumentError(
                    f"torch.distributed backend '{NAME}': {what} got CPU tensors, and this group "
                    f"({config or NAME!r}) has no CPU backend; use "
                    f"init_process_group('cpu:gloo,{BACKEND}:{NAME}') for CPU collectives")
            store = dist.PrefixStore("devicekit/gloo", self._store)
            self._gloo = dist.ProcessGroupGloo(
                store, self._rank, self._size, datetime.timedelta(seconds=self._timeout))
        return self._gloo

    def _route(self, what, tensors):
        """True when every tensor is a dk tensor of this group's device; False
        when all are CPU tensors; a DeviceKit error otherwise."""
        devices = {t.device.type for t in tensors}
        if devices <= {"cpu"} and tensors:
            return False
        for t in tensors:
            if not isinstance(t, DKTensor) or t.device != self.torch_device:
                raise InvalidArgumentError(
                    f"torch.distributed backend '{NAME}': {what} got a tensor on {t.device}; this "
                    f"rank's communicator is on {self.torch_device} (one device per process)")
        return True

    def _gloo_work(self, work, result):
        return DKWork([_Done(work)], result)

    # ---- helpers ---------------------------------------------------------------------

    @staticmethod
    def _dense(t, finish):
        """The DeviceKit tensor of ``t`` when contiguous; else of a contiguous
        copy, written back into ``t`` by ``finish`` after the collective."""
        if t.is_contiguous():
            return t._dk
        tmp = t.contiguous()
        finish.append(lambda: t.copy_(tmp))
        return tmp._dk

    def _one_tensor(self, what, tensors):
        if len(tensors) != 1:
            raise _unsupported(f"{what} of {len(tensors)} tensors",
                               "one tensor per rank (one device per process)")
        return tensors[0]

    # ---- collectives -----------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        opts = opts or dist.AllreduceOptions()
        if not self._route("allreduce", tensors):
            return self._gloo_work(self._cpu_group("allreduce").allreduce(tensors, opts), tensors)
        op = _op_name(opts.reduceOp, "allreduce")
        t = self._one_tensor("allreduce", tensors)
        finish = []
        work = self._comm.all_reduce(self._dense(t, finish), op=op)
        return DKWork([work], tensors, finish)

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        if not self._route("allreduce_coalesced", tensors):
            return self._gloo_work(
                self._cpu_group("allreduce_coalesced").allreduce_coalesced(tensors, opts), tensors)
        op = _op_name(opts.reduceOp, "allreduce_coalesced")
        finish = []
        works = [self._comm.all_reduce(self._dense(t, finish), op=op) for t in tensors]
        return DKWork(works, tensors, finish)

    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        if not self._route("broadcast", tensors):
            return self._gloo_work(self._cpu_group("broadcast").broadcast(tensors, opts), tensors)
        t = self._one_tensor("broadcast", tensors)
        finish = []
        work = self._comm.broadcast(self._dense(t, finish), root=opts.rootRank)
        return DKWork([work], tensors, finish)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        if not self._route("reduce", tensors):
            return self._gloo_work(self._cpu_group("reduce").reduce(tensors, opts), tensors)
        op = _op_name(opts.reduceOp, "reduce")
        t = self._one_tensor("reduce", tensors)
        finish = []
        work = self._comm.reduce(self._dense(t, finish), root=opts.rootRank, op=op)
        return DKWork([work], tensors, finish)

    def _all_gather_flat(self, out, inp, finish):
        """all_gather of ``inp`` into the contiguous ``out`` (ranks' blocks in order)."""
        if out.numel() != inp.numel() * self._size:
            raise InvalidArgumentError(
                f"torch.distributed backend '{NAME}': all_gather output has {out.numel()} "
                f"elements; expected {self._size} x {inp.numel()}")
        return self._comm.all_gather(self._dense(out, finish), self._dense(inp, finish))

    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllgatherOptions()
        if not self._route("allgather",
                           list(input_tensors) + [o for outs in output_tensors for o in outs]):
            return self._gloo_work(
                self._cpu_group("allgather").allgather(output_tensors, input_tensors, opts),
                output_tensors)
        inp = self._one_tensor("allgather", input_tensors)
        outs = self._one_tensor("allgather", output_tensors)
        if len(outs) != self._size:
            raise InvalidArgumentError(
                f"torch.distributed backend '{NAME}': allgather got {len(outs)} output tensors "
                f"for {self._size} ranks")
        flat = torch.empty((self._size * inp.numel(),), dtype=inp.dtype, device=inp.device)
        finish = []
        work = self._all_gather_flat(flat, inp, finish)
        n = inp.numel()

        def scatter_out():
            for i, o in enumerate(outs):
                o.copy_(flat[i * n:(i + 1) * n].view(o.shape))
        finish.append(scatter_out)
        return DKWork([work], output_tensors, finish)

    def _allgather_base(self, output, input, opts=None):
        if not self._route("_allgather_base", [output, input]):
            return self._gloo_work(
                self._cpu_group("_allgather_base")._allgather_base(
                    output, input, opts or dist.AllgatherOptions()), [output])
        finish = []
        work = self._all_gather_flat(output, input, finish)
        return DKWork([work], [output], finish)

    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        if not self._route("allgather_into_tensor_coalesced", list(outputs) + list(inputs)):
            return self._gloo_work(
                self._cpu_group("allgather_into_tensor_coalesced").allgather_into_tensor_coalesced(
                    outputs, inputs, opts or dist.AllgatherOptions()), list(outputs))
        finish = []
        works = [self._all_gather_flat(o, i, finish) for o, i in zip(outputs, inputs)]
        return DKWork(works, list(outputs), finish)

    def _reduce_scatter_flat(self, out, inp, op, finish):
        if inp.numel() != out.numel() * self._size:
            raise InvalidArgumentError(
                f"torch.distributed backend '{NAME}': reduce_scatter input has {inp.numel()} "
                f"elements; expected {self._size} x {out.numel()}")
        return self._comm.reduce_scatter(self._dense(out, finish), self._dense(inp, finish), op=op)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        if not self._route("reduce_scatter",
                           list(output_tensors) + [i for ins in input_tensors for i in ins]):
            return self._gloo_work(
                self._cpu_group("reduce_scatter").reduce_scatter(
                    output_tensors, input_tensors, opts), output_tensors)
        op = _op_name(opts.reduceOp, "reduce_scatter")
        out = self._one_tensor("reduce_scatter", output_tensors)
        ins = self._one_tensor("reduce_scatter", input_tensors)
        if len(ins) != self._size:
            raise InvalidArgumentError(
                f"torch.distributed backend '{NAME}': reduce_scatter got {len(ins)} input tensors "
                f"for {self._size} ranks")
        flat = torch.cat([i.reshape(-1) for i in ins])
        finish = []
        work = self._reduce_scatter_flat(out, flat, op, finish)
        return DKWork([work], output_tensors, finish)

    def _reduce_scatter_base(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        if not self._route("_reduce_scatter_base", [output, input]):
            return self._gloo_work(
                self._cpu_group("_reduce_scatter_base")._reduce_scatter_base(output, input, opts),
                [output])
        finish = []
        work = self._reduce_scatter_flat(
            output, input, _op_name(opts.reduceOp, "reduce_scatter"), finish)
        return DKWork([work], [output], finish)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_base(output, input, opts)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        if not self._route("reduce_scatter_tensor_coalesced", list(outputs) + list(inputs)):
            return self._gloo_work(
                self._cpu_group("reduce_scatter_tensor_coalesced").reduce_scatter_tensor_coalesced(
                    outputs, inputs, opts), list(outputs))
        op = _op_name(opts.reduceOp, "reduce_scatter")
        finish = []
        works = [self._reduce_scatter_flat(o, i, op, finish) for o, i in zip(outputs, inputs)]
        return DKWork(works, list(outputs), finish)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts or dist.AllToAllOptions()
        if not self._route("alltoall_base", [output, input]):
            return self._gloo_work(
                self._cpu_group("alltoall_base").alltoall_base(
                    output, input, output_split_sizes, input_split_sizes, opts), [output])
        for name, splits, t in (("output", output_split_sizes, output),
                                ("input", input_split_sizes, input)):
            if splits and (len(set(splits)) != 1 or splits[0] * self._size != t.shape[0]):
                raise _unsupported(
                    "alltoall_base with unequal splits",
                    f"{name}_split_sizes={list(splits)}; DeviceKit's all_to_all sends equal blocks "
                    f"(leave the split sizes empty, or pad to equal sizes)")
        if output.numel() != input.numel() or input.numel() % self._size:
            raise InvalidArgumentError(
                f"torch.distributed backend '{NAME}': alltoall_base needs input and output of "
                f"the same size, divisible by {self._size} ranks (got {input.numel()} and "
                f"{output.numel()})")
        finish = []
        work = self._comm.all_to_all(self._dense(output, finish), self._dense(input, finish))
        return DKWork([work], [output], finish)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        if not self._route("alltoall", list(output_tensors) + list(input_tensors)):
            return self._gloo_work(
                self._cpu_group("alltoall").alltoall(
                    output_tensors, input_tensors, opts or dist.AllToAllOptions()),
                list(output_tensors))
        sizes = {t.numel() for t in list(output_tensors) + list(input_tensors)}
        if len(sizes) != 1:
            raise _unsupported("alltoall with unequal tensor sizes",
                               "DeviceKit's all_to_all sends equal blocks")
        flat_in = torch.cat([t.reshape(-1) for t in input_tensors])
        flat_out = torch.empty_like(flat_in)
        finish = []
        work = self._comm.all_to_all(flat_out._dk, flat_in._dk)
        n = sizes.pop()

        def scatter_out():
            for i, o in enumerate(output_tensors):
                o.copy_(flat_out[i * n:(i + 1) * n].view(o.shape))
        finish.append(scatter_out)
        return DKWork([work], list(output_tensors), finish)

    def send(self, tensors, dst, tag=0):
        if not self._route("send", tensors):
            return self._gloo_work(self._cpu_group("send").send(tensors, dst, tag), tensors)
        if tag:
            raise _unsupported("send with a tag", f"tag={tag}; DeviceKit's send/recv are ordered "
                               f"per peer and have no tags")
        t = self._one_tensor("send", tensors)
        finish = []
        return DKWork([self._comm.send(self._dense(t, finish), dst)], tensors, finish)

    def recv(self, tensors, src, tag=0):
        if not self._route("recv", tensors):
            return self._gloo_work(self._cpu_group("recv").recv(tensors, src, tag), tensors)
        if tag:
            raise _unsupported("recv with a tag", f"tag={tag}; DeviceKit's send/recv are ordered "
                               f"per peer and have no tags")
        t = self._one_tensor("recv", tensors)
        finish = []
        return DKWork([self._comm.recv(self._dense(t, finish), src)], tensors, finish)

    def recv_anysource(self, tensors, tag=0):
        raise _unsupported("recv_anysource", "DeviceKit's recv names its peer")

    def barrier(self, opts=None):
        if self._one is None:
            self._one = torch.zeros((1,), dtype=torch.float32, device=self.torch_device)
        return DKWork([self._comm.all_reduce(self._one._dk, op="sum")], [])

    def gather(self, output_tensors, input_tensors, opts=None):
        raise _unsupported("gather", "use all_gather")

    def scatter(self, output_tensors, input_tensors, opts=None):
        raise _unsupported("scatter", "use broadcast or all_to_all")

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        raise _unsupported("allgather_coalesced", "use all_gather_into_tensor")


def create(dist_backend_opts, backend_options=None):
    """The creator ``register_backend`` gets (``extended_api=True``): a
    ``DKProcessGroup`` for the group's rank and size, rendezvousing through
    the group's Store, with torch's group timeout."""
    timeout = dist_backend_opts.timeout
    seconds = timeout.total_seconds() if timeout is not None else _DEFAULT_TIMEOUT
    return DKProcessGroup(dist_backend_opts.store, dist_backend_opts.group_rank,
                          dist_backend_opts.group_size, seconds)
