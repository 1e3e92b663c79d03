"""Helpers shared by the op sections (not a section itself: leading underscore)."""

import numpy as np

import devicekit as dk
from devicekit.testing import oracle as O
from devicekit.testing.inputs import place, rand

FLOATS = ("float32", "float16", "bfloat16", "float64")


def run(ctx, op, fn, check=True, ran=None):
    """Calls fn(), fetches the result to the host, and checks that ``op``'s own
    kernel ran with no SDK-inserted cast: a case only counts for a kernel the
    plugin actually executed (undeclared dtypes never get here). Records
    (op, dtype the kernel ran in) for the corpus floor: ``ran``, else the
    case's dtype (the SDK sums integers as int64: those callers say so)."""
    dk.reset_dispatch_stats()
    out = fn().numpy()
    if check and out.size:
        st = dk.dispatch_stats().get(op, {})
        assert st.get("kernel", 0) >= 1, f"no {op} kernel call recorded: {st}"
        assert st.get("cast_inserted", 0) == 0, f"{op}: the SDK inserted a cast: {st}"
        ctx.ran.add((op, ran or ctx.dtype))
    return out


def tensor(ctx, arr, layout="dense"):
    return place(arr, layout, device=ctx.device)


def sample(ctx, dtype, shape, kind="normal"):
    return rand(dtype, shape, ctx.rng(), kind)


def case_note(ctx, shape):
    return f"{shape} seed={ctx.seed}"


def float_scale(dtype, fn, *arrays):
    """The ``scale`` of an accumulating op (its sum of |terms|), floats only."""
    if dtype not in FLOATS:
        return None
    return fn(*(np.abs(np.asarray(a).astype(np.float64)) for a in arrays))


__all__ = ["FLOATS", "O", "dk", "run", "tensor", "sample", "case_note", "float_scale"]
