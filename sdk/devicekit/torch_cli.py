"""``devicekit torch``: PyTorch on a DeviceKit device (docs/torch.md).

``devicekit torch coverage --device cpu:0 --model gpt2`` runs a model once
(a training step: forward, loss, backward, AdamW) on the device through
``devicekit.torch`` and lists every ATen op it reached with how it ran
there: view, plugin kernel, fused kernel, SDK decomposition, decomposition,
fallback or missing. ``--model`` is a small Hugging Face config
(``devicekit.torch.hf_models``: gpt2, llama, bert, vit; needs ``transformers``) or a
Python file defining ``run(device)``, which gets the ``torch.device``;
``--model`` repeats. A missing op does not stop the run (it continues on the
reference plugin, else on torch's CPU kernel), and each missing ATen op lists
the set of base ops the plugin lacks for it; ``--plan`` ranks those base ops by
how many ATen ops each unlocks and how many models need it.

This module imports torch only when the command runs, so ``devicekit``
starts without it.
"""

import argparse
import importlib.util
import json
import os
import sys

EXIT_MISSING, EXIT_USAGE = 1, 2
EXIT_CODES_HELP = """\
exit codes:
  0    every ATen op the model reached has a DeviceKit lowering on the device
  1    some op is missing (listed), or the model itself failed (its error printed)
  2    usage error: no torch or transformers, an unknown model or device, a bad file
  3    the --json file cannot be written
  130  stopped by Ctrl-C (SIGINT); 143: stopped by SIGTERM
"""


def add_parser(sub):
    p = sub.add_parser("torch", help="PyTorch models on a DeviceKit device (coverage)",
                       description="PyTorch models, unmodified, on DeviceKit devices "
                                   "(devicekit.torch; docs/torch.md).")
    tsub = p.add_subparsers(dest="torch_command")
    c = tsub.add_parser("coverage", help="run a model once and list how each ATen op ran",
                        description="Run a model once on a DeviceKit device through "
                                    "devicekit.torch and list every ATen op it reached with how "
                                    "it ran there.",
                        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--device", default="cpu:0", help="DeviceKit device name (default cpu:0)")
    c.add_argument("--model", required=True, action="append",
                   help="a small transformers model (gpt2, llama, bert, vit) or a .py file defining "
                        "run(device); repeat it for several models")
    c.add_argument("--plan", action="store_true",
                   help="also rank the base ops the plugin lacks by how many ATen ops each "
                        "unlocks (and how many ATen ops and models need it)")
    c.add_argument("--fallback", choices=["cpu"], default=None,
                   help="run unlowered ops on the CPU, counted (default: off; they are 'missing')")
    c.add_argument("--json", metavar="FILE", help="also write the coverage as JSON to FILE")
    p.set_defaults(func=lambda args: run(args) if args.torch_command else _no_subcommand(p))


def _no_subcommand(parser):
    parser.print_usage(sys.stderr)
    print("devicekit torch: error: a subcommand is required (coverage)", file=sys.stderr)
    return EXIT_USAGE


def _usage(msg):
    print(f"devicekit torch coverage: error: {msg}", file=sys.stderr)
    return EXIT_USAGE


def _runner(model):
    if model.endswith(".py"):
        if not os.path.isfile(model):
            raise ValueError(f"{model}: no such file")
        spec = importlib.util.spec_from_file_location("devicekit_torch_model", model)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if not callable(getattr(module, "run", None)):
            raise ValueError(f"{model}: defines no run(device)")
        return module.run
    from .torch import hf_models as _models
    if model not in _models.SMALL:
        raise ValueError(f"unknown model {model!r}: give one of {', '.join(_models.names())} or a "
                         f".py file defining run(device)")
    if importlib.util.find_spec("transformers") is None:
        raise ValueError(f"--model {model} needs transformers: pip install transformers")
    return lambda device: _models.run_steps(model, device, steps=1)


def run(args):
    from . import errors
    from ._util import output as _output
    if importlib.util.find_spec("torch") is None:
        return _usage("needs PyTorch: pip install 'devicekit[torch]'")
    if args.json and (why := _output.output_problem(args.json, "--json")):
        print(f"devicekit torch coverage: error: {why}", file=sys.stderr)
        return _output.EXIT_OUTPUT
    import devicekit.torch as dkt
    from .torch import _compile, _coverage
    try:
        dev = dkt.prefer(args.device)  # dk:0: torch's autograd engine serves only dk:0
        fns = {m: _runner(m) for m in args.model}
    except (ValueError, errors.DeviceNotFoundError) as e:
        return _usage(str(e))
    if any(not m.endswith(".py") for m in args.model):
        import transformers
        transformers.logging.set_verbosity_error()
    reports = {}
    _compile.reset_compile_stats()  # a model run under torch.compile(backend="devicekit")
    for model, fn in fns.items():
        with dkt.fallback(args.fallback):
            report = reports[model] = dkt.coverage(fn, dev)
        print(f"devicekit torch coverage: --model {model} on {args.device} ({dev})")
        print(report.format())
        if text := _compile.format_compile_stats():
            print(text)
        _compile.reset_compile_stats()
    ranked = _coverage.plan(reports) if args.plan else None
    if args.plan:
        print(f"\ndevicekit torch coverage --plan: the base ops {args.device} lacks, for "
              f"{', '.join(args.model)}")
        print(_coverage.format_plan(ranked) if ranked else "none: no missing ATen op names a "
              "base op the plugin lacks")
    if args.json:
        doc = ({**reports[args.model[0]].to_json()} if len(reports) == 1 else
               {"models": {m: r.to_json() for m, r in reports.items()}})
        if ranked is not None:
            doc["plan"] = ranked
        _output.write_files({args.json: json.dumps(doc, indent=2) + "\n"})
    return EXIT_MISSING if any(r.missing() or r.error is not None for r in reports.values()) else 0
