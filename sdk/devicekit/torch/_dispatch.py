"""One ATen call on ``dk`` tensors: find its lowering, run it, say how.

Order, for an ATen op overload ``func``:

1. its lowering in ``LOWERINGS`` (registered by ``lowers`` in the
   ``_lower_*`` modules; an in-place ``foo_`` without its own entry runs
   ``foo``'s lowering and writes the result through into ``self``, and
   ``_foreach_foo`` runs ``foo`` per element);
2. a ``torch._decomp`` decomposition into other ATen ops (which come back
   here), or torch's own decomposition of a CompositeImplicitAutograd op;
3. with ``fallback("cpu")`` on, the op on the CPU (``_fallback``);
4. else ``UnloweredOpError`` naming the op and overload.

A lowering whose plugin lacks a base op raises ``UnloweredOpError`` naming
the ATen op and the missing base op (the plugin's own message kept whole).
Every call is reported to the coverage recorder when one is active.
"""

import threading

import torch

from .. import bridge, composite_stats
from ..errors import NotImplementedByPlugin, UnloweredOpError
from . import _coverage, _device, _fallback
from ._device import DKTensor, wrap
from ._table import (COMPOSITE, DERIVERS, KERNEL, LOWERINGS, VIEW, HostOperandError, Lowering, aten,
                     rewrap, unwrap, unwrap_kwargs)

# ---- lookup -----------------------------------------------------------------------

_derived = {}  # OpOverload -> Lowering or None, built on first use


def lookup(func):
    """The lowering of ATen overload ``func`` (the table's, or one derived
    from it: in-place, ``out=``, ``_foreach_*``, distributed), or None."""
    return LOWERINGS.get(func) or _lookup(func)


def _lookup(func):
    hit = LOWERINGS.get(func)
    if hit is not None:
        return hit
    if func in _derived:
        return _derived[func]
    _derived[func] = hit = _derive(func)
    return hit


def _functional_of(func):
    """``add_.Tensor`` -> ``add.Tensor`` when that one is lowered."""
    name = func._schema.name.split("::")[1]
    if not name.endswith("_") or name.startswith("_foreach"):
        return None
    base = getattr(aten, name[:-1], None)
    op = getattr(base, func._overloadname, None) if base is not None else None
    return op if op in LOWERINGS else None


def _no_inplace_view(func):
    def refuse(*args, **kwargs):
        raise NotImplementedError(
            f"{func} changes its operand's sizes and strides in place, which a dk tensor "
            f"(a wrapper whose metadata torch fixes when it is made) cannot; its out-of-place "
            f"form is lowered")
    return refuse


def _functional_of_out(func):
    """``exp.out`` -> (``exp.default``, ["out"]), ``max.dim_max`` ->
    (``max.dim``, ["max", "max_values"]): the lowered overload of the same
    name whose arguments are the ``out=`` form's but its out tensors, and
    the names of those; None when there is none."""
    schema = func._schema
    names = [a.name for a in schema.arguments if a.is_out]
    if not names or func.namespace != "aten":
        return None
    want = [(a.name, str(a.type)) for a in schema.arguments if not a.is_out]
    packet = getattr(aten, schema.name.split("::")[1])
    for overload in packet.overloads():
        op = getattr(packet, overload)
        s = op._schema
        if (not s.is_mutable and len(s.returns) == len(names)
                and [(a.name, str(a.type)) for a in s.arguments] == want):
            inner = lookup(op)
            if inner is not None and inner.kind != VIEW:
                return inner, names
    return None


def _derive(func):
    functional = _functional_of(func)
    if functional is not None:
        write_through = DERIVERS["in_place"]
        inner = LOWERINGS[functional]
        if inner.kind == VIEW:  # squeeze_, t_, ...: a copy cannot change sizes and strides
            return Lowering(_no_inplace_view(func), KERNEL, True)
        return Lowering(lambda *a, **k: write_through(inner, a, k), inner.kind, True)
    out_form = _functional_of_out(func)
    if out_form is not None:
        write_out = DERIVERS["out"]
        inner, names = out_form
        return Lowering(lambda *a, **k: write_out(lambda a2, k2: _run(inner, a2, k2), names, a, k),
                        inner.kind, True)
    if func.namespace in ("fsdp", "_c10d_functional"):  # torch.distributed's library ops
        from ._lower_dist import lowering  # (adds them to the table)
        return lowering(func)
    name = func._schema.name.split("::")[1]
    if name.startswith("_foreach_"):
        foreach = DERIVERS["foreach"]
        return Lowering(lambda *a, **k: foreach(func, a, k), KERNEL, True)
    return None


# ---- the dispatch -----------------------------------------------------------------------

_local = threading.local()


def _decomposing():
    stack = getattr(_local, "decomposing", None)
    if stack is None:
        stack = _local.decomposing = set()
    return stack


_pending = []  # errors raised inside a backward pass, for the next op outside one


def clear_pending_errors():
    """Forget the errors raised inside a backward pass that the next dk op
    would raise (see ``dispatch``): a harness that runs many independent
    samples in one process starts each clean."""
    _pending.clear()


def dispatch(func, args, kwargs):
    if _pending and torch._C._current_autograd_node() is None:
        raise _pending.pop(0)
    try:
        return _dispatch(func, args, kwargs)
    except Exception as e:
        if torch._C._current_autograd_node() is None:
            raise
        # Inside torch's backward, an exception leaving a dk op aborts the
        # process (torch 2.13/2.14: the autograd engine's stream guard calls
        # back into Python while the error is pending). So the op returns
        # NaN-filled results of the right shapes, and its error is raised by
        # the first dk op after the backward (like an asynchronous device
        # error): optimizer.step(), .item(), .cpu(), ...
        try:
            out = _placeholder(func, args, kwargs)
        except Exception:  # noqa: BLE001 - no shapes for its results: the op's own error, now
            raise e from None
        note = (f"(raised inside the backward pass by {_name(func)}; devicekit.torch reports "
                f"such errors at the next dk op, here)")
        if hasattr(e, "add_note"):
            e.add_note(note)
        _pending.append(e)
        return out


def _placeholder(func, args, kwargs):
    """Results of ``func``'s shapes and dtypes (from torch's meta kernels),
    NaN-filled (0 for integers); an in-place or ``out=`` op returns the
    operands it writes, untouched."""
    written = _written(func, args, kwargs)
    if written is not None:
        return written
    dev = _coverage._target(args, kwargs) or _device.dk_device(0)  # (a factory: its device=)

    def meta(x):
        # a host tensor too: the op's error may be that operand (HostOperandError)
        if isinstance(x, torch.Tensor):
            return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        if isinstance(x, (list, tuple)):
            return type(x)(meta(v) for v in x)
        if isinstance(x, dict):
            return {k: meta(v) for k, v in x.items()}
        if isinstance(x, torch.device) and x.type == _device.BACKEND:
            return torch.device("meta")
        return x

    out = func(*meta(args), **meta(kwargs))

    def fill(x):
        # made on the host and copied over: a plugin without the fill kernel (the
        # op that failed may be its lack) must still get its placeholder, since an
        # exception here, inside the backward, aborts the process
        if isinstance(x, torch.Tensor):
            value = float("nan") if x.dtype.is_floating_point else 0
            return wrap(_device.from_host(torch.full(tuple(x.shape), value, dtype=x.dtype),
                                          dev))
        if isinstance(x, (list, tuple)):
            return type(x)(fill(v) for v in x)
        return x
    return fill(out)


def _written(func, args, kwargs):
    """What an in-place or ``out=`` op returns: the operands its results alias
    for writing (``Tensor(a!)`` in its schema), by position or by name; None
    when a result is not such an operand (and for ops with no results)."""
    schema = func._schema
    if not schema.is_mutable or not schema.returns:
        return None
    operands = {}
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            operands[frozenset(a.alias_info.before_set)] = (
                args[i] if i < len(args) else kwargs.get(a.name))
    outs = [operands.get(frozenset(r.alias_info.before_set)) if r.alias_info is not None
            else None for r in schema.returns]
    if any(o is None for o in outs):
        return None
    return outs[0] if len(outs) == 1 else tuple(outs)


_HOST_INDEX = None


def _host_index_ops():
    """The overloads whose index tensors torch lets stay on the CPU beside an
    accelerator tensor (``x[i]``, ``x[i] = v``)."""
    global _HOST_INDEX
    if _HOST_INDEX is None:
        names = (("index", "Tensor"), ("index_put", "default"), ("index_put_", "default"),
                 ("_index_put_impl_", "default"), ("_unsafe_index", "Tensor"),
                 ("_unsafe_index_put", "default"))
        _HOST_INDEX = frozenset(getattr(getattr(aten, n), o) for n, o in names
                                if hasattr(aten, n) and hasattr(getattr(aten, n), o))
    return _HOST_INDEX


def _indices_on_device(args):
    """``args`` with the CPU index tensors of ``args[1]`` copied to the device
    of ``args[0]`` (as torch does for an accelerator tensor's index)."""
    dev = args[0]._dk.device
    idx = [wrap(_device.from_host(i, dev)) if type(i) is torch.Tensor else i for i in args[1]]
    return (args[0], type(args[1])(idx), *args[2:])


def _dispatch(func, args, kwargs):
    rec = _coverage._active
    lowering = LOWERINGS.get(func) or _lookup(func)  # (the table's hit without a call)
    if lowering is not None:
        before = composite_stats() if rec is not None and lowering.kind == COMPOSITE else None
        try:
            check = None
            if rec is not None:
                rec.enter(func)
                if rec.checker is not None:  # compares each lowered call with torch's CPU op
                    check = rec.checker.before(func, lowering.kind, args, kwargs)
            try:
                out = _run(lowering, args, kwargs)
            finally:
                if rec is not None:
                    rec.leave()
            if check is not None:
                rec.checker.after(check, out)
        except NotImplementedByPlugin as e:
            err = _plugin_gap(func, (*args, *kwargs.values()), e)  # (a factory: its device=)
            if rec is not None:  # the run goes on; the reference run names every base op
                return rec.missing(func, err, args, kwargs, lambda a, k: _run(lowering, a, k))
            raise err from None
        except UnloweredOpError:
            raise
        except HostOperandError as e:
            if func not in _host_index_ops():  # torch's error, naming the op and the device
                raise HostOperandError(f"{_name(func)} on {_where((*args, *kwargs.values())) or 'dk'}"
                                       f"{_context()}: "
                                       f"{e}") from None
            return _dispatch(func, _indices_on_device(args), kwargs)
        except NotImplementedError as e:
            # the lowering covers some calls of the op, not this one
            return _unlowered(func, args, kwargs, rec, f"its lowering does not cover this call: {e}")
        if rec is not None:
            rec.lowered(func, lowering.kind, before)
        return out
    decomp = _decomposition(func)
    if decomp is not None and func not in _decomposing():
        if rec is not None:
            rec.note(func, "decomposition")
            rec.enter(func)
        _decomposing().add(func)
        chain = getattr(_local, "chain", None)
        if chain is None:
            chain = _local.chain = []
        chain.append(_name(func))
        try:
            out = decomp(*args, **kwargs)
        finally:
            chain.pop()
            _decomposing().discard(func)
            if rec is not None:
                rec.leave()
        if out is not NotImplemented:
            return out
        return _unlowered(func, args, kwargs, rec, "torch._decomp's decomposition of it declines "
                                                   "this call (it returned NotImplemented)")
    return _unlowered(func, args, kwargs, rec, None)


def _unlowered(func, args, kwargs, rec, reason):
    """The CPU fallback when it is on and accepts ``func``, else the error
    (in a coverage run: recorded as missing, and the run goes on)."""
    refusal = None
    if _fallback.policy() is not None:
        refusal = _fallback.refusal(func, args, kwargs)
        if refusal is None:
            if rec is not None:
                rec.note(func, "fallback")
            return _fallback.run(func, args, kwargs)
    err = unlowered(func, (*args, *kwargs.values()), refusal, reason)
    if rec is not None:
        return rec.missing(func, err, args, kwargs)
    raise err


_HOST_TENSOR = torch.Tensor  # (a plain torch.Tensor operand is on the host; the scan
#                                below is per op, so it runs in C: `in map(type, ...)`)


def _run(lowering, args, kwargs):
    if lowering.raw:
        return lowering.fn(*args, **kwargs)
    vals = [a._dk if type(a) is DKTensor else unwrap(a) for a in args]
    if _HOST_TENSOR in map(type, args):  # a CPU operand (0-d, else unwrap raised)
        vals = _zero_d_operands(args, vals)
    out = lowering.fn(*vals, **(unwrap_kwargs(kwargs) if kwargs else {}))
    return wrap(out) if type(out) is bridge.Tensor else rewrap(out)  # (the common case first)


def _category(dtype):
    return 0 if dtype == torch.bool else 2 if dtype.is_floating_point else 1


def _zero_d_operands(args, vals):
    """torch's promotion gives a 0-d CPU tensor operand whose category (bool <
    integer < floating) is above every dk tensor operand's its own dtype (int8
    dk tensor + 0-d float16 tensor is float16; bool + 0-d int8 is int8); the
    host number ``unwrap`` makes of it would give the default dtype (float32,
    int64). Such an operand goes to the device as a 0-d tensor, which
    DeviceKit's promotion treats as torch does. Of a lower or the same
    category it stays a number: it cannot change the result dtype then."""
    dks = [a for a in args if type(a) is DKTensor]
    if not dks:
        return vals
    top = max(_category(a.dtype) for a in dks)
    dev = dks[0]._dk.device
    return [_device.from_host(a, dev) if type(a) is torch.Tensor and _category(a.dtype) > top
            else v for a, v in zip(args, vals)]


def _decomposition(func):
    from torch._decomp import decomposition_table
    fn = decomposition_table.get(func)
    if fn is not None:
        return fn
    if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
        return func.decompose
    return None


# ---- errors -------------------------------------------------------------------------------

def _where(args):
    """The device an error names: the first dk tensor's (in a list too), else a
    factory's ``device=`` ("" for neither)."""
    dev = _coverage._target(args, {})
    if dev is None:
        return ""
    return f"{_device.torch_device_of(dev)} (DeviceKit {dev.name}, plugin '{dev.plugin.name}')"


def _name(func):
    return f"{func._schema.name}.{func._overloadname}"


def _context():
    outer = getattr(_local, "chain", None)
    return f" (reached while decomposing {' -> '.join(outer)})" if outer else ""


def unlowered(func, args, refusal=None, reason=None):
    where = _where(args) or "dk"
    if reason is None:
        msg = (f"{_name(func)} has no DeviceKit lowering on {where}{_context()}: devicekit.torch "
               f"lowers no such op and torch._decomp has no decomposition for it.")
    else:
        msg = f"{_name(func)} on {where}{_context()}: {reason}."
    if refusal is not None:
        msg += f" fallback('cpu') is on but refuses it: {refusal}."
    else:
        msg += (" devicekit.torch.fallback('cpu') runs such ops on the CPU (counted); "
                "'devicekit torch coverage' lists every op a model needs.")
    return UnloweredOpError(msg, op=str(func), missing_base_ops=())


def _plugin_gap(func, args, e):
    text = str(e)
    missing = ()
    if text.startswith("op '"):
        missing = (text.split("'")[1],)
    where = _where(args) or "dk"
    names = ", ".join(missing) or "(see below)"
    return UnloweredOpError(
        f"{_name(func)} on {where}{_context()}: its lowering needs base op {names}, which the "
        f"plugin lacks: {text}",
        op=str(func), missing_base_ops=missing)
