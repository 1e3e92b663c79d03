"""Section "composites": every composite op of ``devicekit.nn.functional``,
decomposed into the plugin's base ops, against the float64 oracle
(``devicekit.testing.oracle_nn``).

Cases ``composites/<name>/<dtype>/<shape class>`` (the classes are in
``_nn.CALLS``: size 1, odd sizes, and what each op singles out: -inf entries,
all -inf rows, two-pass variance, GQA, causal with Lq != Lk, broadcast bool
masks, -inf float masks, fully masked attention rows, ignore_index,
all-ignored targets). They run under ``devicekit.fused_kernels(False)``, so
this section tests the decomposition on the plugin's base ops; fused kernels
have their own section.

Dtypes: float32 (required), float16 and bfloat16 where the plugin declares
``cast`` for them (composites compute those in float32). A base op missing
from the kernel table gives not-implemented before the case runs; a dtype
the plugin lacks for some base op, found while running (the SDK had to insert
a cast), gives not-implemented naming the op: the case did not test the
plugin's own kernels, so it is never a pass. Tolerances: ``_nn.tolerance``.
"""

import functools

from devicekit.conformance.case import Case, Section
from devicekit.errors import NotImplementedByPlugin
from devicekit.testing import oracle_nn

from . import _needs, _nn
from ._common import O, dk

MIN_CASES_PER_COMPOSITE = 2  # every composite has at least "one" and "odd"

# The base ops each decomposition launches in float32, recorded from the
# decompositions themselves (_needs.py; _needs.json is regenerated and checked
# by the project's tests); a plugin with NULL for one of them gets
# not-implemented for that composite.
NEEDS = _needs.load()
_ANY_DTYPE = {"cast", "copy", "fill"}  # launched on ids, masks and constants too


def _missing(target, name, dtype):
    """Why the plugin cannot run composite ``name`` in ``dtype``, or None."""
    lacking = sorted(op for op in NEEDS.get(name, ())
                     if op not in target.declared
                     or (op not in _ANY_DTYPE and "float32" not in target.declared[op]))
    if lacking:
        return f"'{name}' decomposes into base ops the plugin lacks in float32: {lacking}"
    if dtype != "float32" and dtype not in target.declared.get("cast", ()):
        return f"the plugin does not declare {dtype} for 'cast' ('{name}' computes {dtype} in float32)"
    return None


def _floor(target):
    """MIN_CASES_PER_COMPOSITE float32 cases per composite the oracle knows and
    the plugin's kernel table can run (not counted from the generator)."""
    runnable = [n for n in oracle_nn.__all__ if _missing(target, n, "float32") is None]
    return MIN_CASES_PER_COMPOSITE * len(runnable)


SECTION = Section("composites", "Composite ops decomposed into the plugin's base ops vs the "
                                "float64 oracle", order=45, min_cases=_floor)


def run_decomposed(ctx, name, args, kwargs):
    """Runs composite ``name`` on the device with fused kernels off; returns its
    outputs on the host. A base op the SDK had to cast around (the plugin lacks
    the dtype) makes the case not-implemented."""
    dev = ctx.device
    dk.reset_dispatch_stats()
    with dk.fused_kernels(False):
        out = _nn.function(name)(*[_nn.to_device(a, dev) for a in args],
                                 **{k: _nn.to_device(v, dev) for k, v in kwargs.items()})
        got = [o.numpy() for o in _nn.outputs(out)]
    inserted = sorted(op for op, s in dk.dispatch_stats().items() if s["cast_inserted"])
    if inserted:
        raise NotImplementedByPlugin(
            f"'{name}': the plugin lacks the operand dtype for base ops {inserted} (the SDK "
            f"inserted casts), so this case would not test the plugin's kernels")
    return got


def check(ctx, name, dtype, shape):
    call = _nn.CALLS[name][shape](ctx.rng())
    args, kwargs = _nn.rounded(call, dtype)
    got = run_decomposed(ctx, name, args, kwargs)
    want = _nn.expected(name, args, kwargs, dtype)
    tol = _nn.tolerance(name, dtype, call.n)
    assert len(got) == len(want), f"{name}: {len(got)} outputs, the oracle has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        O.assert_close(g, w, dtype, op=name, tol=tol,
                       case=f"{shape} output {i} n={call.n} seed={ctx.seed}")


def cases(target):
    out = []
    for name in sorted(_nn.CALLS):
        for dtype in ("float32",) + _nn.LOW_PRECISION:
            why = _missing(target, name, dtype)
            for shape in _nn.CALLS[name]:
                out.append(Case(id=f"composites/{name}/{dtype}/{shape}", section="composites",
                                op=name, dtype=dtype, required=dtype == "float32",
                                not_implemented=why,
                                fn=functools.partial(check, name=name, dtype=dtype, shape=shape)))
    return out
