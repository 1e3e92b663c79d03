"""The first layer that diverges (Polygraphy's per-layer comparison, for a model).

Each layer is re-run alone with *identical inputs* on three sides: the
plugin and a correct run (the reference CPU plugin), both in the run dtype,
and the float64 reference. The input of layer i is the float64 reference's
output of layer i-1, rounded once to the run dtype; all three sides get those
same values (the reference in float64). Forward outputs are compared layer
by layer in order, then gradients in backward order: the upstream gradient
of layer i is the reference's gradient of the loss with respect to layer i's
output (rounded likewise), and the comparison covers the gradient of the
layer's input and of each of its parameters. Each comparison uses the same
bound as the whole-model checks (``harness.bound``). The plugin side records
the base ops and fused kernels it launched for that layer.
"""

import shlex

import numpy as np

from ..autograd import no_grad
from ..tensor import tensor
from . import harness as H
from .base import Layer

_LOSS = Layer("loss", lambda p, x, inp: H.loss_of(x, inp), (), "cross_entropy")


def _round(a, dtype):
    """``a`` rounded to ``dtype`` and back to float64 (identical inputs for every side)."""
    if a is None:
        return None
    return tensor(a, dtype=dtype).numpy().astype(np.float64) if dtype != "float64" else a


class _Side:
    """One side of the comparison: a device, a dtype, the model's batch there."""

    def __init__(self, model, device, dtype):
        self.model, self.device, self.dtype = model, device, dtype
        self.inp = H.device_inputs(model, device, dtype)
        self.values = model.init_params()

    def run(self, layer, x_in, g_out, grad):
        """(output, {"input"|param: gradient}, base ops, fused kernels) of ``layer``."""
        master = {n: tensor(np.asarray(self.values[n], np.float64), device=self.device,
                            dtype=H.master_dtype(self.dtype), requires_grad=grad)
                  for n in layer.params}
        x = None if x_in is None else tensor(x_in, device=self.device, dtype=self.dtype,
                                             requires_grad=grad)
        ops_before, fused_before = H._snapshot(), H._fused_snapshot()
        grads = {}
        if grad:
            y = layer.fn(H.cast_params(master, self.dtype), x, self.inp)
            if g_out is not None or layer is _LOSS:
                g = None if g_out is None else tensor(g_out, device=self.device, dtype=str(y.dtype))
                y.backward(g)
                grads = {n: H.to_numpy(t.grad) for n, t in master.items() if t.grad is not None}
                if x is not None and x.grad is not None:
                    grads["input"] = H.to_numpy(x.grad)
        else:
            with no_grad():
                y = layer.fn(H.cast_params(master, self.dtype), x, self.inp)
        return (H.to_numpy(y), grads, H._delta(H._snapshot(), ops_before),
                H._delta(H._fused_snapshot(), fused_before))


def _row(layer, direction, check, launched):
    ops, fused = launched
    return {"layer": layer.name, "kind": layer.kind, "direction": direction, **check,
            "base_ops": dict(sorted(ops.items())), "fused_kernels": fused}


def localise(model, device, dtype, inference=False, only=None, ref_device="cpu:0"):
    """Per-layer comparison rows and the first row that exceeds its bound.

    ``inference``: forward only, under ``no_grad`` (fused kernels may run);
    otherwise forward with autograd recording, then backward. ``only``: one
    layer name (the replay of a reported layer); the reference still walks
    the whole chain to get that layer's inputs.
    """
    layers = [*model.layers(), _LOSS]
    names = [layer.name for layer in layers]
    if only is not None and only not in names:
        from ..errors import InvalidArgumentError
        raise InvalidArgumentError(f"model {model.name} has no layer {only!r}; its layers: "
                                   f"{', '.join(names)}")
    plugin, correct = _Side(model, device, dtype), _Side(model, ref_device, dtype)
    ref = _Side(model, ref_device, "float64")
    grad = not inference

    # The reference chain: every layer's float64 input, from the float64 outputs.
    inputs, x = [], None
    with no_grad():
        for layer in layers:
            inputs.append(x)
            x = ref.run(layer, x, None, False)[0]

    rows = []
    for i, layer in enumerate(layers):
        if only is not None and layer.name != only:
            continue
        xr = _round(inputs[i], dtype)
        y = {s: side.run(layer, xr, None, grad) for s, side in
             (("plugin", plugin), ("correct", correct), ("ref", ref))}
        rows.append(_row(layer, "forward", H.check("output", y["plugin"][0], y["correct"][0],
                                                   y["ref"][0], dtype), y["plugin"][2:]))
    if not inference:
        g_ref = None  # the reference's d(loss)/d(output of the current layer)
        for i in reversed(range(len(layers))):
            layer = layers[i]
            xr, gr = _round(inputs[i], dtype), _round(g_ref, dtype)
            ref_out = ref.run(layer, inputs[i], g_ref, True)
            if only is None or layer.name == only:
                got = {"plugin": plugin.run(layer, xr, gr, True),
                       "correct": correct.run(layer, xr, gr, True),
                       "ref": ref.run(layer, xr, gr, True)}
                scales = H.grad_scales(got["ref"][1])
                for name in got["ref"][1]:
                    rows.append(_row(layer, "backward", H.check(
                        f"grad:{name}", got["plugin"][1].get(name, np.nan), got["correct"][1][name],
                        got["ref"][1][name], dtype, scales[name]), got["plugin"][2:]))
            g_ref = ref_out[1].get("input")
            if g_ref is None:
                break
    first = next((r for r in rows if not r["ok"]), None)
    worst = max(rows, key=lambda r: r["ratio"]) if rows else None
    return {"rows": rows, "first": first, "worst": worst, "inference": inference}


def replay_command(target_args, model, dtype, layer, inference):
    """The command that re-runs just ``layer`` (``target_args``: ``--device X`` or ``--plugin P``)."""
    cmd = (f"devicekit models {target_args} --model {shlex.quote(model)} --dtype {dtype} "
           f"--layer {shlex.quote(layer)}")
    return cmd + (" --inference" if inference else "")


def describe(row):
    """One line: where, how far over the bound, what ran."""
    fused = ", ".join(f"fused kernel '{k}'" for k in row["fused_kernels"]) or "no fused kernel"
    ops = ", ".join(row["base_ops"]) or "none"
    return (f"layer {row['layer']} ({row['kind']}), {row['direction']} {row['tensor']}: error "
            f"{H._fmt(row['error'])} = {H._fmt(row['ratio'])}x the bound {H._fmt(row['bound'])}; "
            f"{fused}; base ops: {ops}")
