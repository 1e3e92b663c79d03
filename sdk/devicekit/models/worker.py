"""A model-regression worker: ``python -m devicekit.models.worker --model NAME``.

Runs one model on the device under test in every requested dtype and
answers on its private stdout, one JSON object per line: ``{"start": dtype}``
before the plugin runs that dtype (so a crash is attributed to it), then one
``{"case": id, ...result}`` per phase, and ``{"model": {...}}`` at the end.
As in the conformance worker, fd 1 is pointed at stderr so a plugin that
prints cannot corrupt the protocol, and a crash kills only this process.

Per model: the reference side (the float64 reference and the correct run
of each dtype, on cpu:0 in a separate process: ``models.reference``), then
per dtype the plugin's run, the verdicts, and, when a phase fails, the search
for the first diverging layer. The Hugging Face models (``hf-*``) run
the same way through ``devicekit.torch`` (``models.hf``); without torch or
transformers their cases are skipped with the reason, and their first
diverging *module* is found with module hooks.
"""

import argparse
import json
import os
import shlex
import sys


#: Seconds the ranks of a multi-rank model case may take (every dtype, every phase).
DDP_TIMEOUT_S = 300


def case_id(model, dtype, phase):
    return f"models/{model}/{dtype}/{phase}"


def blocked_by(needed, declared):
    """Base ops the phase launches on the reference plugin that the plugin lacks."""
    return sorted(op for op in needed if op not in declared)


def _needed(correct, phase):
    """Base ops a phase needs, with the phases it depends on (inference counts
    the decomposed forward's ops: a plugin without fused kernels needs them)."""
    from .harness import NEEDS
    chain, p = [], phase
    while p:
        chain.append(p)
        p = NEEDS.get(p)
    if phase == "inference":
        chain.append("forward")
    return {op for p in chain for op in correct.ops.get(p, {})}


def _has_collectives(target):
    from .. import distributed
    return distributed.is_available(target.device)


def run_model(model, target, dtypes, steps, target_args, emit, padding_threshold=None):
    """Runs ``model`` against ``target`` (a conformance ``Target``); ``emit(obj)`` answers."""
    from ..conformance.case import ERROR, FAIL, NOT_IMPLEMENTED, SKIPPED
    from . import ddp, goldens, hf, reference
    from . import harness as H

    phases = H.phases_of(model)
    is_hf = getattr(model, "hf", False)
    is_ddp = getattr(model, "ddp", False)
    if is_ddp and not _has_collectives(target):
        for dtype in dtypes:
            for phase in phases:
                emit({"case": case_id(model.name, dtype, phase), "outcome": NOT_IMPLEMENTED,
                      "message": ddp.NOT_IMPLEMENTED_WHY, "details": {}, "duration_s": 0.0})
        emit({"model": {"not_implemented": ddp.NOT_IMPLEMENTED_WHY}})
        return
    why = is_hf and hf.missing()
    if why:  # never a pass: every case says why it did not run
        for dtype in dtypes:
            for phase in phases:
                emit({"case": case_id(model.name, dtype, phase), "outcome": SKIPPED,
                      "message": f"{model.name} {why}", "details": {}, "duration_s": 0.0})
        emit({"model": {"skipped": f"{model.name} {why}"}})
        return
    try:
        side = reference.fetch(model.name, [d for d in dtypes if d in target.dtypes], steps)
        runs, perturbed = side["runs"], side.get("perturbed", {})
    except Exception as e:  # no reference, no verdict: every case is an error, with the cause
        for dtype in dtypes:
            for phase in phases:
                emit({"case": case_id(model.name, dtype, phase), "outcome": ERROR,
                      "message": f"{type(e).__name__}: {e}", "details": {}, "duration_s": 0.0})
        emit({"model": {"error": f"reference side failed: {e}"}})
        return
    ref = runs["float64"]
    info = {"curves": {"float64": ref.curve}, "needs": {}}
    ranks, ranks_error = {}, None
    if is_ddp:  # every dtype's ranks in one spawn: the ranks import and open the plugin once
        declared = [d for d in dtypes if d in target.dtypes]
        try:
            ranks = ddp.spawn(model, target.device, target.plugin, declared, steps,
                              timeout=DDP_TIMEOUT_S) if declared else {}
        except Exception as e:  # no ranks, no verdict on the plugin: an error with the cause
            ranks_error = f"{type(e).__name__}: {e}"
        info["ranks"] = model.nranks
    if is_hf:
        info["layers"] = [layer.name for layer in model.layers()]
    for dtype in dtypes:
        emit({"start": dtype})
        if dtype not in target.dtypes:
            why = f"the plugin does not declare {dtype} (declares {', '.join(target.dtypes)})"
            for phase in phases:
                emit({"case": case_id(model.name, dtype, phase), "outcome": NOT_IMPLEMENTED,
                      "message": why, "details": {}, "duration_s": 0.0})
            continue
        correct = runs[dtype]
        # (an hf model's correct run is torch's CPU: it launches no base ops to count)
        needs = {p: blocked_by(_needed(correct, p), target.declared) for p in phases}
        info["needs"][dtype] = sorted(_needed(correct, "train") | _needed(correct, "inference"))
        if ranks_error:
            plugin = H.Run(model.name, target.device.name, dtype)
            plugin.problems = {p: (ERROR, ranks_error) for p in phases}
        elif is_ddp:
            plugin = ddp.combine(model, dtype, ranks[dtype])
        elif is_hf:
            plugin = hf.execute(model, target.device, dtype, steps)
        elif needs["forward"]:
            plugin = H.Run(model.name, target.device.name, dtype)
            plugin.problems = {p: (NOT_IMPLEMENTED, "") for p in phases}
        else:
            plugin = H.execute(model, target.device, dtype, steps)
        info["curves"][dtype] = {"plugin": plugin.curve, "correct": correct.curve}
        results = {}
        for phase in phases:
            outcome, message, details = H.judge(phase, plugin, correct, ref, dtype,
                                                perturbed.get(dtype))
            if outcome == NOT_IMPLEMENTED and needs[phase]:
                message = f"blocked by: {', '.join(needs[phase])}" + (
                    f" ({message})" if message else "")
                details = {"blocked_by": needs[phase]}
            results[phase] = [outcome, message, details]
        failed = [p for p, r in results.items() if r[0] == FAIL]
        if failed:
            _locate(model, target, dtype, failed, results, target_args)
        for phase, (outcome, message, details) in results.items():
            emit({"case": case_id(model.name, dtype, phase), "outcome": outcome,
                  "message": message, "details": details, "duration_s": 0.0})
    # An hf model's low-precision correct runs are torch's own CPU kernels, whose
    # rounding follows the instruction set torch dispatches to (AVX2 or AVX-512
    # builds): a golden of them pins the machine's CPU, not DeviceKit's numerics
    # (which the cases above judge against them). Its float64 reference is held.
    # (a multi-rank case's reference is its single-process model's: that golden)
    info["golden"] = goldens.compare(model.inner if is_ddp else model,
                                     {"float64": ref} if is_hf else runs, steps)
    if padding_threshold is not None and is_hf:
        info["padding"] = {"threshold": padding_threshold, "rows": [], "suggestions": [],
                           "not_run": "the padding advisor times zoo models only"}
    elif padding_threshold is not None:
        from . import align
        rows = align.advise(model, target.device, padding_threshold)
        info["padding"] = {"threshold": padding_threshold, "rows": rows,
                           "suggestions": align.summary(rows)}
    emit({"model": info})


def _locate(model, target, dtype, failed, results, target_args):
    """Adds the first diverging layer (or why there is none) to the failed phases."""
    from . import divergence, hf, reference

    inference = all(p == "inference" for p in failed)
    where = hf if getattr(model, "hf", False) else divergence  # modules, or the zoo's layers
    try:
        layers = reference.fetch(model.name, layers=(dtype, inference))["layers"]
        found = where.localise(model, target.device, dtype, layers)
    except Exception as e:  # the search is a diagnosis: its failure must not hide the verdict
        found = {"error": f"{type(e).__name__}: {e}", "first": None, "worst": None, "rows": []}
    first = found["first"]
    if first is not None:
        replay = divergence.replay_command(target_args, model.name, dtype,
                                           first["layer"].split("#")[0], inference)
        line = (f"first diverging {'module' if where is hf else 'layer'}: "
                f"{divergence.describe(first)}")
    elif found.get("error"):
        replay, line = None, f"the per-layer search failed: {found['error']}"
    else:
        replay = None
        worst = found["worst"]
        line = (("no module's output or input gradient exceeds its bound in one forward and "
                 "backward: the error builds up across modules" if where is hf else
                 "no single layer exceeds its bound when given the reference's inputs: the error "
                 "builds up across layers") + (" or optimizer steps" if "train" in failed else "") +
                (f" (closest: {divergence.describe(worst)})" if worst else ""))
    for phase in failed:
        outcome, message, details = results[phase]
        details["divergence"] = {"first": first, "replay": replay, "inference": inference,
                                 "layers_checked": len(found["rows"]),
                                 "rows": [r for r in found["rows"] if not r["ok"]][:10]}
        if replay:
            details["layer_replay"] = replay
        results[phase][1] = f"{message}\n{line}" + (
            f"\nreplay {'module' if where is hf else 'layer'}: {replay}" if replay else "")


def main(argv=None):
    p = argparse.ArgumentParser(prog="devicekit.models.worker")
    p.add_argument("--model", required=True)
    p.add_argument("--dtypes", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--device")
    p.add_argument("--plugin")
    p.add_argument("--padding-threshold", type=float)
    args = p.parse_args(argv)
    from ..conformance.worker import _quiet_crashes  # same crash policy as conformance

    _quiet_crashes()
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    from . import get, hf
    from ..conformance.case import TORCH_DEVICES_ENV
    from ..conformance.target import open_target

    if args.plugin and args.model in hf.NAMES:
        hf.discover(args.plugin)  # devicekit.torch runs the discovered devices only

    def emit(obj):
        proto.write(json.dumps(obj, default=float) + "\n")

    target = open_target(args.device, args.plugin)
    # The device under test is dk:0 for the hf models (TORCH_DEVICES_ENV).
    os.environ.setdefault(TORCH_DEVICES_ENV, target.device.name)
    target_args = " ".join(f"--{k} {shlex.quote(v)}" for k, v in
                           (("plugin", args.plugin), ("device", args.device)) if v)
    run_model(get(args.model), target, args.dtypes.split(","), args.steps, target_args, emit,
              args.padding_threshold)


if __name__ == "__main__":
    main()
