"""The reference side, in its own process: ``python -m devicekit.models.reference``.

Everything the verdicts compare against is computed on the reference CPU
plugin (cpu:0): the float64 reference run, the correct run in each dtype
and the perturbed correct run in each dtype (``harness.perturb``: inputs and
initial parameters one ulp away; the larger of the two runs' errors scales the
bounds) and, for a failed model, the per-layer
reference data (``divergence.reference_layers``). It runs in a separate
process so that it never shares a process with the plugin under test: a
vendor plugin may wrap or embed the reference CPU plugin (the test suite's
faulty plugins do), may crash, or may change process-wide state.
``DEVICEKIT_PLUGIN_PATH`` and ``DEVICEKIT_PLUGIN_OVERRIDE`` (``devicekit
dev``'s fresh build, which would shadow an installed plugin of the same name)
are cleared there: only the installed reference plugin is needed. Results cross as a
pickle in a temporary file.

For the Hugging Face models (``hf-*``) the reference side is torch on the
CPU (float64, and the correct run in each dtype) and never ``devicekit.torch``
(``hf.compute``, ``hf.reference_modules``).
"""

import argparse
import os
import pickle
import subprocess
import sys
import tempfile

from .._plugins.registry import OVERRIDE_ENV
from ..errors import DeviceKitError

# Where plugins other than the installed reference could come from.
_PLUGIN_ENV = ("DEVICEKIT_PLUGIN_PATH", OVERRIDE_ENV)


def compute(model_name, dtypes, steps, layers=None):
    """{"runs": {dtype: harness.Run} (float64 included), "perturbed": {dtype:
    harness.Run} (the correct run on perturbed inputs), "layers": per-layer data or None}."""
    from . import divergence, get, hf
    from . import harness as H

    if model_name in hf.NAMES:
        if layers is not None:
            return {"runs": {}, "layers": hf.reference_modules(model_name, *layers)}
        return hf.compute(model_name, dtypes, steps)
    model = get(model_name)
    if layers is not None:
        dtype, inference = layers
        return {"runs": {}, "layers": divergence.reference_layers(model, dtype, inference)}
    runs = {"float64": H.execute(model, "cpu:0", "float64", steps, record=True)}
    perturbed = {}
    for dt in dtypes:
        runs[dt] = H.execute(model, "cpu:0", dt, steps, record=True)
        perturbed[dt] = H.execute(model, "cpu:0", dt, steps, perturbed=True)
    return {"runs": runs, "perturbed": perturbed, "layers": None}


def fetch(model_name, dtypes=(), steps=1, layers=None, timeout=600):
    """:func:`compute` in a fresh process; raises ``DeviceKitError`` with its stderr if it fails."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "reference.pickle")
        cmd = [sys.executable, "-m", "devicekit.models.reference", "--model", model_name,
               "--dtypes", ",".join(dtypes), "--steps", str(steps), "--out", out]
        if layers is not None:
            cmd += ["--layers", layers[0]] + (["--inference"] if layers[1] else [])
        env = {k: v for k, v in os.environ.items() if k not in _PLUGIN_ENV}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        if proc.returncode != 0 or not os.path.exists(out):
            raise DeviceKitError(f"the reference run of model {model_name} on cpu:0 failed "
                                 f"(exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
        with open(out, "rb") as f:
            return pickle.load(f)


def main(argv=None):
    p = argparse.ArgumentParser(prog="devicekit.models.reference")
    p.add_argument("--model", required=True)
    p.add_argument("--dtypes", default="")
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--layers", metavar="DTYPE", help="per-layer data for this dtype instead")
    p.add_argument("--inference", action="store_true")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    layers = (args.layers, args.inference) if args.layers else None
    result = compute(args.model, [d for d in args.dtypes.split(",") if d], args.steps, layers)
    from .._util.output import write_file  # whole or absent: fetch() tests that it exists

    write_file(args.out, pickle.dumps(result))


if __name__ == "__main__":
    main()
