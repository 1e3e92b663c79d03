"""``devicekit models``: the model regression against one device.

    devicekit models --device NAME | --plugin PATH [--model M ...] [--dtype D ...]
                     [--steps N] [--report DIR] [--jobs N] [--advise-padding]
    devicekit models --device NAME --model M --dtype D --layer NAME [--inference]
    devicekit models --update-goldens [--goldens-dir DIR]

Exit codes as ``devicekit conformance`` (:data:`EXIT_CODES_HELP`, also in
``--help``): 0 every required case passed; 1 any fail/error/crash or a
required (float32) not-implemented; 2 usage errors or a plugin/device that
cannot be opened; 3 a --report (or --goldens-dir) that cannot be written,
checked before any model runs, or a write that failed (one line, the
previous files left as they were); 130 Ctrl-C (SIGINT), 143 SIGTERM: the
workers are stopped, and the report, if asked for, is written with the
cases that answered, marked partial and interrupted (a case that did not
answer is left out, never counted as a crash).
"""

import argparse
import os
import sys
import time

from .._util import output as _output

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_OUTPUT = 0, 1, 2, _output.EXIT_OUTPUT
EXIT_CODES_HELP = f"""\
exit codes:
  0    every required case passed (--list, --update-goldens: done)
  1    a fail/error/crash, or a required (float32) not-implemented
  2    usage error, or the plugin/device cannot be opened (one line)
  3    --report or --goldens-dir cannot be written (checked before any model
       runs), or writing failed (one line; the previous files are left as they
       were)
{_output.INTERRUPT_CODES_HELP}\
       130 and 143 stop the workers and still write the --report with the
       cases that answered, marked partial (run.partial, run.interrupted)
"""


def _list(values):
    return [v for item in values for v in item.split(",") if v]


def add_parser(sub):
    from .harness import DEFAULT_STEPS, DTYPES

    p = sub.add_parser("models", help="run the model regression (zoo and Hugging Face models) "
                                      "against a device",
                       description="Run the zoo's and the hf-* transformers models forward, "
                                   "backward, AdamW steps and inference on a device against a "
                                   "float64 reference.",
                       epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", help="device name, e.g. cpu:0 (with --plugin: one of its devices)")
    p.add_argument("--plugin", help="a plugin library path (development builds; no install needed)")
    p.add_argument("--model", action="append", default=[], metavar="NAME",
                   help="model(s) to run (repeatable or comma-separated; default: all: the zoo "
                        "and hf-gpt2, hf-llama, hf-bert, hf-vit, hf-resnet, hf-t5, hf-moe, "
                        "hf-data2vec-audio, hf-clip, which need torch and "
                        "transformers and are skipped with the reason without them)")
    p.add_argument("--dtype", action="append", default=[], metavar="DTYPE",
                   help=f"dtype(s) (default: {','.join(DTYPES)}; float32 is required, the others "
                        f"run as mixed precision where the plugin declares them)")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                   help=f"AdamW steps of the train phase (default {DEFAULT_STEPS})")
    p.add_argument("--report", metavar="DIR", help="write report.json, junit.xml, report.html here")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="models run in parallel worker processes (default: CPU count)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per model (default 600)")
    p.add_argument("--layer", metavar="NAME",
                   help="compare just this layer (an hf-* model: this module) against the "
                        "reference (how a divergence replays)")
    p.add_argument("--inference", action="store_true",
                   help="with --layer: forward under no_grad, where fused kernels run")
    p.add_argument("--advise-padding", action="store_true",
                   help="also time each model's matmuls padded to multiples of 8..128 and suggest "
                        "padding (the shape-alignment advisor; results in the report)")
    p.add_argument("--padding-threshold", type=float, default=0.10, metavar="GAIN",
                   help="suggest padding above this throughput gain (default 0.10 = 10%%)")
    p.add_argument("--shard", metavar="K/N",
                   help="run only part K of N (K from 1; round-robin over the selected models, "
                        "a model is never split); join the parts with 'devicekit report merge'")
    p.add_argument("--list", action="store_true", help="print the models and their layers and exit")
    p.add_argument("--update-goldens", action="store_true",
                   help="rewrite the golden summaries from the reference CPU plugin and exit")
    p.add_argument("--goldens-dir", metavar="DIR",
                   help="with --update-goldens: where to write (default: the installed package)")
    p.set_defaults(func=run)
    return p


def _error(message):
    print(f"devicekit models: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def run(args):
    try:
        return _run(args)
    except KeyboardInterrupt:  # outside the model runs (during them: a partial report)
        print(f"devicekit models: stopped by {_output.interrupt_name()}", file=sys.stderr)
        return _output.interrupt_exit_code()


def _output_problem(args):
    """The one line why --report / --goldens-dir cannot be written, or None."""
    if args.update_goldens:
        return args.goldens_dir and _output.output_problem(args.goldens_dir, "--goldens-dir",
                                                           folder=True)
    if args.report and not (args.list or args.layer):
        return _output.output_problem(args.report, "--report", folder=True)
    return None


def _run(args):
    from .. import errors
    from . import ALL_NAMES, get
    from .harness import DTYPES

    models = _list(args.model) or list(ALL_NAMES)
    dtypes = _list(args.dtype) or list(DTYPES)
    unknown = [m for m in models if m not in ALL_NAMES]
    if unknown:
        return _error(f"unknown model(s) {', '.join(unknown)}; the models are: "
                      f"{', '.join(ALL_NAMES)}")
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        return _error(f"unsupported dtype(s) {', '.join(bad)}; choose from {', '.join(DTYPES)}")
    if args.steps < 1 or args.jobs < 1:
        return _error("--steps and --jobs must be at least 1")
    shard = None
    if args.shard:
        from ..scale import shard as sharding
        try:
            shard = sharding.parse(args.shard)
        except sharding.ShardError as e:
            return _error(str(e))
        if why := sharding.too_few(*shard, len(models), "model"):
            return _error(why)
        if args.layer or args.update_goldens:
            return _error("--shard applies to a model run, not to --layer or --update-goldens")
    selected = models
    if shard:
        models = sharding.pick(models, *shard)
    if why := _output_problem(args):
        print(f"devicekit models: error: {why}", file=sys.stderr)
        return EXIT_OUTPUT
    if args.list:
        from . import hf
        for m in models:
            model = get(m)
            why = getattr(model, "hf", False) and hf.missing()
            print(f"{m}: {model.title}\n    " + (f"skipped: {why}" if why else (
                "modules" if getattr(model, "hf", False) else "layers") + ": " +
                ", ".join(layer.name for layer in model.layers())))
        return EXIT_OK
    if args.update_goldens:
        return _update_goldens(models, args)
    if not args.device and not args.plugin:
        return _error("give --device NAME or --plugin PATH")
    from ..conformance.target import open_target
    from . import hf

    if args.plugin and args.layer and any(m in hf.NAMES for m in models):
        hf.discover(args.plugin)  # the replay runs devicekit.torch in this process
    try:
        target = open_target(args.device, os.path.abspath(args.plugin) if args.plugin else None)
    except errors.DeviceKitError as e:
        return _error(" ".join(str(e).split()))
    if args.layer:
        if len(models) != 1 or len(dtypes) != 1:
            return _error("--layer needs exactly one --model and one --dtype")
        return _replay_layer(get(models[0]), target, dtypes[0], args.layer, args.inference)
    return _run_suite(models, dtypes, target, args, shard, selected)


def _run_suite(models, dtypes, target, args, shard=None, selected=None):
    """``models`` is what this process runs: ``selected`` or, with ``shard``
    (K, N), its part K."""
    from ..conformance.cli import Progress, stopped_line, write_reports
    from ..conformance.report import new_run_id, summary_table
    from ..conformance.target import describe
    from .._util import workers as _workers
    from . import get, report, runner
    from .harness import MULTIPLIER, phases_of

    zoo = {m: get(m) for m in models}
    # a multi-rank case needs the optional collectives part: required only where declared
    from .. import distributed
    optional = [m for m, z in zoo.items()
                if getattr(z, "ddp", False) and not distributed.is_available(target.device)]
    cases = report.make_cases(models, dtypes, {m: phases_of(z) for m, z in zoo.items()},
                              {m: z.config.seed for m, z in zoo.items()}, optional)
    by_id = {c.id: c for c in cases}
    plugin = os.path.abspath(args.plugin) if args.plugin else None
    print(f"devicekit models: {target.device.name} ({target.device.plugin.name} "
          f"{target.device.plugin.version}), {len(models)} models x {len(dtypes)} dtypes x "
          f"{len(phases_of(None))} phases (+ generate for decoders), {args.steps} steps, "
          f"{args.jobs} jobs", file=sys.stderr)
    progress = Progress(len(cases))
    start = time.monotonic()
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime())
    corpus = None
    try:
        results, infos = runner.run(
            models, lambda m: [c.id for c in cases if c.section == m],
            device=target.device.name if not plugin else args.device, plugin=plugin,
            dtypes=dtypes, steps=args.steps, jobs=args.jobs, timeout=args.timeout,
            on_result=lambda cid, r: progress(by_id[cid], r),
            padding_threshold=args.padding_threshold if args.advise_padding else None)
    except _workers.Interrupted as e:  # the cases that answered make a partial report
        results, infos = e.results, e.infos
        corpus = {"checked": False, "ok": False,
                  "reason": f"interrupted by {_output.interrupt_name()} after {len(results)} of "
                            f"{len(cases)} cases"}
        cases = [c for c in cases if c.id in results]
        ran = {c.section for c in cases}
        infos = {m: infos.get(m) or {"error": "interrupted before the model finished"}
                 for m in models if m in ran}
    progress.finish()
    for m, info in infos.items():
        z = zoo[m]
        # an hf model's worker sends its module names: listing them here would
        # import torch and transformers into this process only for that
        layers = info.pop("layers", []) if getattr(z, "hf", False) else \
            [layer.name for layer in z.layers()]
        info.update(title=z.title, config=z.config_dict(), config_hash=z.config_hash(),
                    layers=layers)
    run_info = {"run_id": new_run_id(), "suite": "models", "level": "full", "jobs": args.jobs,
                "steps": args.steps, "models": models, "dtypes": dtypes,
                "partial": corpus is not None, "interrupted": corpus is not None, "filter": [],
                "device_arg": target.device.name, "plugin_arg": plugin,
                "criterion": f"err(plugin) <= {MULTIPLIER:g} x max(err(correct run), err(perturbed "
                             f"correct run)) + unit roundoff, "
                             f"err = relative L2 error against float64",
                "duration_s": round(time.monotonic() - start, 3), "started": started}
    if shard:
        from ..scale import shard as sharding
        run_info["shard"] = sharding.block(*shard, "model", selected)
    rep = report.build(describe(target), run_info, cases, results,
                       {m: infos[m] for m in models if m in infos}, corpus)
    _print_outcome(rep, summary_table)
    prog = "devicekit models"
    if args.report and write_reports(prog, report.write, rep, args.report):
        return EXIT_OUTPUT
    if corpus is not None:
        print(stopped_line(prog, len(results), "cases", args.report), file=sys.stderr)
        return _output.interrupt_exit_code()
    return EXIT_OK if rep["summary"]["passed"] else EXIT_FAILED


def _print_outcome(rep, summary_table):
    bad = [c for c in rep["cases"] if c["outcome"] in ("fail", "error", "crash")
           or (c["outcome"] == "not-implemented" and c["required"])]
    for c in bad[:20]:
        lines = (c["message"] or "").splitlines() or [""]
        print(f"{c['outcome'].upper()} {c['id']}\n    " + "\n    ".join(line[:400] for line in lines[:4]))
        print(f"    replay: {c['replay']}")
    if len(bad) > 20:
        print(f"... and {len(bad) - 20} more (see --report)")
    blocked = {}
    for c in rep["cases"]:
        for op in c["details"].get("blocked_by", []):
            blocked.setdefault(op, set()).add(c["op"])
    if blocked:
        print("base ops that would unblock the most models: " + ", ".join(
            f"{op} ({len(ms)})" for op, ms in sorted(blocked.items(), key=lambda kv: -len(kv[1]))))
    print(summary_table(rep))
    for m, info in rep["models"].items():
        golden = info.get("golden")
        if golden and not golden["match"]:
            print(f"warning: {m}: the float64 reference differs from the committed golden "
                  f"({golden['file']}): {'; '.join(golden['diffs'][:3])}")
        if info.get("error"):
            print(f"warning: {m}: {info['error']}")
        if "padding" in info:
            tips = info["padding"]["suggestions"]
            print(f"padding advice for {m} ({len(info['padding']['rows'])} padded shapes timed, "
                  f"threshold {info['padding']['threshold']:.0%}): " +
                  ("; ".join(tips) if tips else "no padding gains enough"))
    if rep["run"].get("interrupted"):
        print(f"partial run: {rep['corpus']['reason']}")
    print("PASSED" if rep["summary"]["passed"] else "FAILED")


def _replay_layer(model, target, dtype, layer, inference):
    from . import divergence, hf, reference
    from .harness import _fmt

    is_hf = getattr(model, "hf", False)
    if is_hf and hf.missing():
        return _error(f"{model.name} {hf.missing()}")
    layers = [layer.name for layer in model.layers()] + ([] if is_hf else ["loss"])
    if layer not in layers:
        return _error(f"model {model.name} has no {'module' if is_hf else 'layer'} {layer!r}; "
                      f"its {'modules' if is_hf else 'layers'}: {', '.join(layers)}")
    data = reference.fetch(model.name, layers=(dtype, inference))["layers"]
    found = (hf if is_hf else divergence).localise(model, target.device, dtype, data, only=layer)
    print(f"{model.name} {dtype} layer {layer} on {target.device.name} "
          f"({'inference, no_grad' if inference else 'training: forward and backward'})")
    for row in found["rows"]:
        print(f"  {'ok  ' if row['ok'] else 'FAIL'} {row['direction']:8s} {row['tensor']:40s} error "
              f"{_fmt(row['error'])}  bound {_fmt(row['bound'])}  ({_fmt(row['ratio'])}x)")
    rows = found["rows"]
    if rows:
        print(f"  fused kernels: {', '.join(rows[0]['fused_kernels']) or 'none'}; base ops: "
              f"{', '.join(rows[0]['base_ops']) or 'none'}")
    print("FAILED" if found["first"] else "PASSED")
    return EXIT_FAILED if found["first"] else EXIT_OK


def _update_goldens(models, args):
    from . import get, goldens, reference
    from .harness import DTYPES

    from . import hf
    for m in models:
        model = get(m)
        if getattr(model, "hf", False) and hf.missing():
            print(f"devicekit models: {m} {hf.missing()}: its golden is left as it is",
                  file=sys.stderr)
            continue
        runs = reference.compute(m, DTYPES, args.steps)["runs"]
        problems = {dt: r.problems for dt, r in runs.items() if r.problems}
        if problems:
            print(f"devicekit models: {m}: the reference runs failed: {problems}", file=sys.stderr)
            return EXIT_FAILED
        try:
            print(f"wrote {goldens.write(model, runs, args.steps, args.goldens_dir)}")
        except _output.OutputError as e:
            print(f"devicekit models: error: {e}", file=sys.stderr)
            return EXIT_OUTPUT
    return EXIT_OK
