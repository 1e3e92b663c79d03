"""Committed golden summaries of the zoo on the reference CPU plugin.

One file per model, ``devicekit/models/goldens/<model>.json``: per dtype
(the float64 reference and the correct float32/bfloat16/float16 runs) the
loss curve, norms and checksums (sums) of the logits and of every gradient,
and per-layer activation statistics; with provenance (DeviceKit version,
device API, the model's config and its hash, the steps, the command that
made them). They change only through ``devicekit models --update-goldens``,
so a change to the numerics shows up in review as a diff of these files.

:func:`compare` checks live runs against them. Tolerances are relative and
per dtype (``RTOL``): float64 summaries must agree to 1e-9, low-precision
ones to a few of their ulps, so a different compiler or BLAS-free build of
the same kernels passes, and a changed decomposition does not.
"""

import json
import math
import os
from importlib import resources

import numpy as np

RTOL = {"float64": 1e-9, "float32": 1e-5, "float16": 5e-3, "bfloat16": 3e-2}
# A gradient more than 1/GRAD_NOISE times smaller than the model's largest
# (by l2) is judged on that scale, not its own: such a gradient is rounding
# noise around an exact 0 (an attention key bias, which softmax's shift
# invariance cancels), and any change to the float32 arithmetic reshuffles
# it completely. A real fault there still shows: it is far above the floor.
GRAD_NOISE = 1e-4
UPDATE_COMMAND = "devicekit models --update-goldens --goldens-dir sdk/devicekit/models/goldens"


def _stats(a):
    a = np.asarray(a, np.float64)
    return {"l2": float(np.linalg.norm(a.ravel())), "sum": float(a.sum()),
            "absmax": float(np.abs(a).max()) if a.size else 0.0}


def summary(run):
    """The golden summary of one ``harness.Run``."""
    out = {"loss": run.loss, "curve": run.curve,
           "logits": _stats(run.logits) if run.logits is not None else None,
           "grads": {n: _stats(g) for n, g in sorted(run.grads.items())}}
    if run.activations:
        out["activations"] = {n: {"mean": float(a.mean()), "std": float(a.std()),
                                  "absmax": float(np.abs(a).max())}
                              for n, a in run.activations.items()}
    return out


def default_dir():
    return str(resources.files("devicekit.models").joinpath("goldens"))


def path(model_name, folder=None):
    return os.path.join(folder or default_dir(), f"{model_name}.json")


def load(model_name, folder=None):
    p = path(model_name, folder)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def write(model, runs, steps, folder=None):
    """Writes ``<model>.json`` from ``runs`` ({dtype: Run}); returns the path."""
    from .. import API_VERSION, __version__

    from .._util import output as _output

    folder = folder or default_dir()
    doc = {"provenance": {"devicekit_version": __version__, "device_api_version": API_VERSION,
                          "device": runs["float64"].device, "config": model.config_dict(),
                          "config_hash": model.config_hash(), "steps": steps,
                          "command": UPDATE_COMMAND},
           "dtypes": {dt: summary(r) for dt, r in runs.items()}}
    # atomically: an interrupted or failed update leaves the committed golden whole
    return _output.write_file(path(model.name, folder),
                              json.dumps(doc, indent=1, sort_keys=True) + "\n")


def _walk(live, gold, where, rtol, scale, out, floor=0.0):
    if isinstance(gold, dict):
        if not isinstance(live, dict) or set(live) != set(gold):
            out.append(f"{where}: keys differ")
            return
        inner = gold.get("l2", gold.get("std", scale))
        for k in gold:
            _walk(live[k], gold[k], f"{where}.{k}", rtol, inner, out, floor)
    elif isinstance(gold, list):
        if not isinstance(live, list) or len(live) != len(gold):
            out.append(f"{where}: length {len(live) if isinstance(live, list) else '-'} != {len(gold)}")
            return
        for i, (a, b) in enumerate(zip(live, gold)):
            _walk(a, b, f"{where}[{i}]", rtol, scale, out, floor)
    elif gold is None or live is None:
        if gold is not live:
            out.append(f"{where}: {live!r} != {gold!r}")
    else:
        # sums and means can be near 0: they are judged against the tensor's scale
        ref = abs(gold) if where.rsplit(".", 1)[-1] not in ("sum", "mean") else max(abs(gold), scale)
        ref = max(ref, floor)
        if not (math.isfinite(live) and abs(live - gold) <= rtol * ref):
            out.append(f"{where}: live {live!r}, golden {gold!r}")


def _grad_floor(summary):
    """GRAD_NOISE times the largest gradient l2 of a golden summary (0 without grads)."""
    grads = summary.get("grads") or {}
    return GRAD_NOISE * max((g["l2"] for g in grads.values()), default=0.0)


def compare(model, runs, steps, folder=None):
    """{"match": bool, "diffs": [...], "file": path} of live ``runs`` against the golden."""
    gold = load(model.name, folder)
    p = path(model.name, folder)
    if gold is None:
        return {"match": False, "file": p, "diffs": [f"no golden file; create it with {UPDATE_COMMAND}"]}
    diffs = []
    prov = gold["provenance"]
    if prov["config_hash"] != model.config_hash():
        diffs.append(f"config hash {model.config_hash()} != golden {prov['config_hash']} "
                     f"(the model's config changed)")
    if prov["steps"] != steps:
        diffs.append(f"steps {steps} != golden {prov['steps']}: not comparable")
    else:
        for dt, run in runs.items():
            if dt not in gold["dtypes"]:
                diffs.append(f"{dt}: no golden")
                continue
            live = summary(run)
            want = gold["dtypes"][dt]
            if "activations" not in live:
                want = {k: v for k, v in want.items() if k != "activations"}
            floor = _grad_floor(want)
            for k in want:
                if k not in live:
                    diffs.append(f"{dt}.{k}: missing")
                    continue
                _walk(live[k], want[k], f"{dt}.{k}", RTOL[dt], 0.0, diffs,
                      floor if k == "grads" else 0.0)
            diffs += [f"{dt}.{k}: not in the golden" for k in live if k not in want]
    return {"match": not diffs, "file": p, "diffs": diffs[:20]}
