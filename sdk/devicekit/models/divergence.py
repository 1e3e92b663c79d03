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
the base ops and fused kernels it launched for that layer; a forward layer
that fails after fused kernels ran is run again with them disabled, which
tells a wrong fused kernel from wrong base ops.

No input depends on the plugin, so the two reference sides are computed
apart (:func:`reference_layers`, in the reference process) and the plugin's
process only runs :func:`localise`.
"""

import shlex

import numpy as np

from .._fused import fused_kernels
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


def reference_layers(model, dtype, inference, ref_device="cpu:0"):
    """The reference side of the per-layer comparison, computed on the
    reference CPU plugin only (``devicekit.models.reference`` runs it in its
    own process): per layer its rounded input, and the correct run's and the
    float64 reference's output; then, in backward order, the rounded upstream
    gradient and both sides' gradients. Nothing here depends on the plugin
    under test, so it can be computed apart from it."""
    layers = [*model.layers(), _LOSS]
    correct, ref = _Side(model, ref_device, dtype), _Side(model, ref_device, "float64")
    grad = not inference
    inputs, x = [], None
    with no_grad():  # the reference chain: every layer's float64 input
        for layer in layers:
            inputs.append(x)
            x = ref.run(layer, x, None, False)[0]
    out = {"forward": [], "backward": [], "inference": inference}
    for layer, x in zip(layers, inputs):
        xr = _round(x, dtype)
        out["forward"].append({"layer": layer.name, "x": xr,
                               "correct": correct.run(layer, xr, None, grad)[0],
                               "ref": ref.run(layer, xr, None, grad)[0]})
    if inference:
        return out
    g_ref = None  # the reference's d(loss)/d(output of the current layer)
    for layer, x in reversed(list(zip(layers, inputs))):
        xr, gr = _round(x, dtype), _round(g_ref, dtype)
        out["backward"].append({"layer": layer.name, "x": xr, "g": gr,
                                "correct": correct.run(layer, xr, gr, True)[1],
                                "ref": ref.run(layer, xr, gr, True)[1]})
        g_ref = ref.run(layer, x, g_ref, True)[1].get("input")
        if g_ref is None:
            break
    return out


def localise(model, device, dtype, reference, only=None):
    """Per-layer comparison rows of the plugin on ``device`` against
    ``reference`` (from :func:`reference_layers`), and the first row that
    exceeds its bound. ``only``: one layer name (the replay of a reported layer)."""
    layers = {layer.name: layer for layer in [*model.layers(), _LOSS]}
    if only is not None and only not in layers:
        from ..errors import InvalidArgumentError
        raise InvalidArgumentError(f"model {model.name} has no layer {only!r}; its layers: "
                                   f"{', '.join(layers)}")
    plugin = _Side(model, device, dtype)
    grad = not reference["inference"]
    rows = []
    for e in reference["forward"]:
        if only in (None, e["layer"]):
            layer = layers[e["layer"]]
            got = plugin.run(layer, e["x"], None, grad)
            row = _row(layer, "forward", H.check("output", got[0], e["correct"], e["ref"], dtype),
                       got[2:])
            if not row["ok"] and row["fused_kernels"]:
                # Which side of the dispatcher is wrong: the same layer on its decompositions.
                with fused_kernels(False):
                    plain = plugin.run(layer, e["x"], None, grad)
                row["without_fused"] = H.check("output", plain[0], e["correct"], e["ref"], dtype)
            rows.append(row)
    for e in reference["backward"]:
        if only in (None, e["layer"]):
            layer = layers[e["layer"]]
            got = plugin.run(layer, e["x"], e["g"], True)
            scales = H.grad_scales(e["ref"])
            for name, ref_grad in e["ref"].items():
                rows.append(_row(layer, "backward", H.check(
                    f"grad:{name}", got[1].get(name, np.nan), e["correct"][name], ref_grad, dtype,
                    scales[name]), got[2:]))
    first = next((r for r in rows if not r["ok"]), None)
    worst = max(rows, key=lambda r: r["ratio"]) if rows else None
    return {"rows": rows, "first": first, "worst": worst, "inference": reference["inference"]}


def replay_command(target_args, model, dtype, layer, inference):
    """The command that re-runs just ``layer`` (``target_args``: ``--device X`` or ``--plugin P``)."""
    cmd = (f"devicekit models {target_args} --model {shlex.quote(model)} --dtype {dtype} "
           f"--layer {shlex.quote(layer)}")
    return cmd + (" --inference" if inference else "")


def describe(row):
    """One line: where, how far over the bound, what ran."""
    fused = ", ".join(f"fused kernel '{k}'" for k in row["fused_kernels"]) or "no fused kernel"
    ops = ", ".join(row["base_ops"]) or "none"
    text = (f"layer {row['layer']} ({row['kind']}), {row['direction']} {row['tensor']}: error "
            f"{H._fmt(row['error'])} = {H._fmt(row['ratio'])}x the bound {H._fmt(row['bound'])}; "
            f"{fused}; base ops: {ops}")
    plain = row.get("without_fused")
    if plain is not None:
        text += (f"; with fused kernels disabled the layer passes (error {H._fmt(plain['error'])}): "
                 f"the fault is in the fused kernel(s)" if plain["ok"] else
                 f"; it fails with fused kernels disabled too (error {H._fmt(plain['error'])}): "
                 f"the fault is in the base ops")
    return text
