"""Lowerings of torch.distributed's library ops on dk tensors: FSDP2's
``torch.ops.fsdp.*`` and the functional collectives ``torch.ops._c10d_functional.*``.

torch's FSDP2 (``torch.distributed.fsdp.fully_shard``) defines three ops in
its own library, with one Python kernel per device key: ``all_gather_copy_in``
(copy a rank's shards into its block of the all-gather buffer),
``split_with_sizes_copy`` (copy the gathered buffer out into the unsharded
parameters) and ``chunk_cat`` (lay the gradients out for reduce-scatter). A
dk tensor reaches ``DKTensor.__torch_dispatch__`` before any device-key kernel,
so each op comes to the bridge, which finds its lowering here: written in
torch ops on dk tensors, each of which is lowered in turn (copies, narrows,
``cat``), so nothing runs on the CPU.

The functional collectives (what DTensor's ``full_tensor()`` and
``redistribute`` call) return a new tensor: here each allocates its output
on the device and runs the c10d collective of the group named in the call
(for a ``dk`` group, the DeviceKit collective), waiting for it, so
``wait_tensor`` has nothing left to wait for.

These libraries exist only once torch.distributed (FSDP2) is imported, so
``lowering`` adds an op to the bridge's table the first time it is
dispatched rather than at import.
"""

import torch

from ._table import COMPOSITE, LOWERINGS, Lowering


def _all_gather_copy_in(all_gather_inputs, all_gather_output, inp_split_sizes,
                        all_gather_input_numel, rank):
    """This rank's block of ``all_gather_output`` (a view), the shards copied
    into it in order; returns (that block, the whole output)."""
    block = all_gather_output.narrow(0, all_gather_input_numel * rank, all_gather_input_numel)
    with torch.no_grad():
        for dst, src in zip(torch.split(block, list(inp_split_sizes)), all_gather_inputs):
            dst.copy_(src.reshape(-1))
    return block, all_gather_output


def _split_with_sizes_copy(all_gather_output, all_gather_input_split_sizes, dim=0, *, out):
    """``out[i]`` = the i-th piece of ``all_gather_output`` split along ``dim``."""
    with torch.no_grad():
        for dst, src in zip(out, torch.split(all_gather_output,
                                             list(all_gather_input_split_sizes), dim=dim)):
            dst.copy_(src)


def _chunk_cat(tensors, dim, num_chunks, *, out):
    """torch's ``_chunk_cat``: each tensor padded with zeros along ``dim`` to a
    multiple of ``num_chunks``, cut into ``num_chunks`` chunks there, each chunk
    flattened after ``dim``; chunk i of every tensor, in order, makes row i
    of ``out`` (shape ``(*sizes before dim, num_chunks, total)``)."""
    pieces = []
    with torch.no_grad():
        for t in tensors:
            d = dim % t.dim() if t.dim() else 0
            size = t.shape[d] if t.dim() else 1
            pad = -size % num_chunks
            if t.dim() == 0:
                t = t.reshape(1)
            if pad:
                zeros = torch.zeros((*t.shape[:d], pad, *t.shape[d + 1:]), dtype=t.dtype,
                                    device=t.device)
                t = torch.cat([t, zeros], dim=d)
            pieces.append(t.reshape(*t.shape[:d], num_chunks, -1))
        joined = torch.cat(pieces, dim=pieces[0].dim() - 1)
        out.copy_(joined.reshape(out.shape))


def _group(group_name):
    from torch.distributed import distributed_c10d as c10d
    if isinstance(group_name, torch._C._distributed_c10d.ProcessGroup):
        return group_name
    return c10d._resolve_process_group(group_name)


def _reduce_op(name):
    import torch.distributed as dist
    return getattr(dist.ReduceOp, name.upper())


def _c_all_gather_into_tensor(input, group_size, group_name):
    import torch.distributed as dist
    out = torch.empty((input.shape[0] * group_size, *input.shape[1:]), dtype=input.dtype,
                      device=input.device)
    dist.all_gather_into_tensor(out, input.contiguous(), group=_group(group_name))
    return out


def _c_all_reduce(input, reduce_op, group_name):
    import torch.distributed as dist
    out = input.clone(memory_format=torch.contiguous_format)
    dist.all_reduce(out, op=_reduce_op(reduce_op), group=_group(group_name))
    return out


def _c_all_reduce_(input, reduce_op, group_name):
    import torch.distributed as dist
    dist.all_reduce(input, op=_reduce_op(reduce_op), group=_group(group_name))
    return input


def _c_reduce_scatter_tensor(input, reduce_op, group_size, group_name):
    import torch.distributed as dist
    out = torch.empty((input.shape[0] // group_size, *input.shape[1:]), dtype=input.dtype,
                      device=input.device)
    dist.reduce_scatter_tensor(out, input.contiguous(), op=_reduce_op(reduce_op),
                               group=_group(group_name))
    return out


def _c_broadcast(input, src, group_name):
    import torch.distributed as dist
    out = input.clone(memory_format=torch.contiguous_format)
    group = _group(group_name)
    dist.broadcast(out, src=dist.get_global_rank(group, src), group=group)
    return out


def _c_wait_tensor(tensor):
    return tensor  # the collective that made it has already been waited for


def _c_wrap_tensor_autograd(input):
    # torch wraps a collective's result in an AsyncCollectiveTensor that waits
    # on first use; these results are complete, so a plain copy serves (a new
    # tensor, as the op's schema promises)
    return input.clone()


_BY_NAME = {
    "fsdp::all_gather_copy_in": _all_gather_copy_in,
    "fsdp::split_with_sizes_copy": _split_with_sizes_copy,
    "fsdp::chunk_cat": _chunk_cat,
    "_c10d_functional::all_gather_into_tensor": _c_all_gather_into_tensor,
    "_c10d_functional::all_reduce": _c_all_reduce,
    "_c10d_functional::all_reduce_": _c_all_reduce_,
    "_c10d_functional::reduce_scatter_tensor": _c_reduce_scatter_tensor,
    "_c10d_functional::broadcast": _c_broadcast,
    "_c10d_functional::wait_tensor": _c_wait_tensor,
    "_c10d_functional::_wrap_tensor_autograd": _c_wrap_tensor_autograd,
}


def lowering(func):
    """The table entry for ``func`` when it is one of these ops (added to
    ``LOWERINGS`` on first use), else None."""
    fn = _BY_NAME.get(func._schema.name)
    if fn is None or func._overloadname not in ("", "default"):
        return None
    LOWERINGS[func] = hit = Lowering(fn, COMPOSITE, True)
    return hit
