"""Whole-model speed against PyTorch CPU eager (whole models, not single ops).

A GPT-2-style model (the zoo's GPT-2 architecture, vocab 65) in DeviceKit on
cpu:0 and, when torch is installed, in PyTorch CPU eager, from identical
weights, at the same thread count (DEVICEKIT_CPU_THREADS and
torch.set_num_threads), in two sizes (``--size``):

- ``nano`` (default): 2 layers, 4 heads, d_model 64, block 32: the host
  (Python, the SDK, launches) decides the time;
- ``scaled``: 4 layers, 8 heads, d_model 256, block 128: the kernels do
  (GEMMs of 1024 tokens x 256..1024, attention over 128 keys).

Timed side by side in one run, alternating the sides each round
(benchmarks/_timing.alternate), for

- the training step (forward, loss, backward, AdamW) at batch 8;
- the inference forward (no_grad) at batch 8 (and 64 for ``nano``).

``--style`` picks how the DeviceKit side is written (comma-separated; all
styles named are timed in the same alternating rounds, each against torch
eager, so the styles compare with each other too):

- ``harness`` (default): the model harness's forward (devicekit.nn.functional
  per layer) and ``devicekit.optim.AdamW`` (one flat update per step);
- ``functional``: the same GPT written by hand with devicekit.nn.functional
  (linear, layer norm, GELU, SDPA, the LM head tied to the token embedding,
  cross_entropy) on a dict of leaf tensors, and one ``F.adamw_step`` per
  parameter (benchmarks/_gpt.FunctionalGPT); float32 only;
- ``hf-bridge``: Hugging Face's GPT2LMHeadModel at the same size on ``dk:0``
  through devicekit.torch, with torch.optim.AdamW, against the same HF model
  in torch eager ("PyTorch HF"; its own random weights, torch seed 0);
  float32 only, needs transformers.

``--dtype bfloat16`` runs DeviceKit's mixed precision (the model harness's:
float32 masters and AdamW state, the forward in bfloat16, the loss in
float32) against both of PyTorch's bfloat16 forms, ``autocast`` (the same
recipe) and ``weights`` (bfloat16 parameters); the ratio is taken against
the faster of the two, which the line names.

Prints per case both medians with their min-max spread, the ratio of the
medians (DeviceKit / PyTorch; lower is better), DeviceKit's kernel launches
per call (all base ops, ``fill`` separately, fused kernels, and why each
composite that did not run fused was decomposed) and its *host
share*: the calling thread's CPU time until the last op is issued, over the
wall time. The reference plugin runs kernels on its stream's worker thread,
so the host share is the time spent outside kernels (Python, the SDK,
enqueueing); near 100% means the host, not the kernels, decides the time.
Before timing, the two sides' losses over 3 AdamW steps are compared (they
must agree to 1e-5 relative in float32, 1e-2 in bfloat16). Ratios are
printed, never asserted.

At 2 threads and more the sides share the process, so they share the
cores: PyTorch's OpenMP workers spin for a while after each of its calls
(libgomp's default wait policy) and take a core from DeviceKit's next round.
On a quiet 2-core host the nano step at 2 threads read DeviceKit 4.9 ms
that way, 2.5 ms with ``OMP_WAIT_POLICY=PASSIVE`` (which slows PyTorch's own
side instead: 4.2 -> 7.9 ms). Read the 2-thread ratios with that in mind, and
time one side alone (no torch imported) for DeviceKit's own scaling.

``--threads`` and ``--dtype`` take comma-separated lists (``--threads 1,2
--dtype float32,bfloat16``): the thread count is read once, when the plugin
loads, so each combination then runs in a child process of its own.

Usage: python benchmarks/bench_gpt_speed.py [--size nano|scaled] [--threads N[,N]]
       [--dtype float32|bfloat16[,...]] [--style harness|functional|hf-bridge[,...]]
       [--repeats R] [--calls C]
"""

import argparse
import os
import subprocess
import sys

SIZES = {  # GPT2Config fields besides batch; vocab 65 (characters) for both
    "nano": dict(vocab=65, seq=32, dim=64, heads=4, layers=2),
    "scaled": dict(vocab=65, seq=128, dim=256, heads=8, layers=4),
}

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--size", choices=sorted(SIZES), default="nano")
ap.add_argument("--threads", default="1", help="thread count(s), comma-separated")
ap.add_argument("--dtype", default="float32", help="float32 and / or bfloat16, comma-separated")
ap.add_argument("--style", default="harness",
                help="harness, functional and / or hf-bridge, comma-separated (see the docstring)")
ap.add_argument("--repeats", type=int, default=15, help="alternating rounds per case")
ap.add_argument("--calls", type=int, default=None,
                help="calls per round (default 3 for nano, 1 for scaled)")
args = ap.parse_args()
threads = [int(t) for t in args.threads.split(",")]
dtypes = args.dtype.split(",")
STYLES = args.style.split(",")
if any(st not in ("harness", "functional", "hf-bridge") for st in STYLES) or len(set(STYLES)) < len(STYLES):
    ap.error(f"--style takes harness, functional and / or hf-bridge, each once; got {args.style!r}")
if "bfloat16" in dtypes and STYLES != ["harness"]:
    ap.error(f"--style {args.style}: the functional and hf-bridge styles run float32 only")
if any(d not in ("float32", "bfloat16") for d in dtypes) or any(t < 1 for t in threads):
    ap.error(f"--threads takes positive integers, --dtype float32 / bfloat16; got "
             f"{args.threads!r}, {args.dtype!r}")
if len(threads) * len(dtypes) > 1:  # one child per combination (see the docstring)
    for t in threads:
        for dt in dtypes:
            argv = [sys.executable, __file__, "--size", args.size, "--threads", str(t),
                    "--dtype", dt, "--style", args.style, "--repeats", str(args.repeats)]
            if args.calls:
                argv += ["--calls", str(args.calls)]
            sys.stdout.flush()
            if subprocess.call(argv):
                sys.exit(1)
    sys.exit(0)
THREADS, DTYPE = threads[0], dtypes[0]
CALLS = args.calls or (3 if args.size == "nano" else 1)
os.environ["DEVICEKIT_CPU_THREADS"] = str(THREADS)  # read when the plugin loads

import devicekit as dk  # noqa: E402
from devicekit.models.transformers import GPT2, GPT2Config  # noqa: E402

from _gpt import TORCH_BF16, DeviceKitGPT, FunctionalGPT, HFGPT, TorchGPT  # noqa: E402
from _timing import alternate, spread  # noqa: E402

try:
    import torch
    torch.set_num_threads(THREADS)
except ImportError:
    torch = None
    print("PyTorch is not installed: DeviceKit's times only, no ratio")
    if "hf-bridge" in STYLES:
        sys.exit("--style hf-bridge needs torch and transformers")
if torch is not None and "hf-bridge" in STYLES:
    # before torch's first backward: its autograd engine sizes its device
    # queues then, and a device registered later has none
    import devicekit.torch  # noqa: E402, F401


def model(batch):
    return GPT2(GPT2Config(**SIZES[args.size], batch=batch))


# PyTorch's forms at this dtype: {label: TorchGPT's bf16 argument}
TORCH_FORMS = ({"PyTorch": None} if DTYPE == "float32"
               else {f"PyTorch bf16 {form}": form for form in TORCH_BF16})


def launches(fn):
    """(all base-op launches, fill launches, fused launches) of one call of ``fn``."""
    dk.synchronize()
    dk.reset_dispatch_stats()
    dk.reset_composite_stats()
    fn()
    dk.synchronize()
    ops = {op: s["kernel"] for op, s in dk.dispatch_stats().items() if s.get("kernel")}
    stats = dk.composite_stats()
    fused = sum(n for s in stats.values() for n in s["fused"].values())
    why = {f"{op}: {w}": n for op, s in stats.items()
           for w, n in s.get("why_decomposed", {}).items()}  # older SDKs: none
    return sum(ops.values()), ops.get("fill", 0), fused, why


def dk_side(style, model):
    """The DeviceKit side written in ``style`` (see the docstring)."""
    if style == "harness":
        return DeviceKitGPT(model, dtype=DTYPE)
    if style == "functional":
        return FunctionalGPT(model)
    return HFGPT(model, "dk:0")


def torch_sides(style, model):
    """{label: the torch eager side ``style``'s ratio is taken against}."""
    if torch is None:
        return {}
    if style == "hf-bridge":
        return {"PyTorch HF": HFGPT(model, "cpu")}
    return {label: TorchGPT(model, bf16=form) for label, form in TORCH_FORMS.items()}


def dk_label(style):
    return "DeviceKit" if STYLES == ["harness"] else f"DeviceKit {style}"


def check_agreement(model):
    if torch is None:
        return
    limit = 1e-5 if DTYPE == "float32" else 1e-2
    for style in STYLES:
        for label, t in torch_sides(style, model).items():
            d = dk_side(style, model)
            worst = 0.0
            for _ in range(3):
                a, b = float(d.step().item()), float(t.step().item())
                worst = max(worst, abs(a - b) / abs(b))
            print(f"  {dk_label(style)}: loss agreement with {label} over 3 AdamW steps: worst "
                  f"relative difference {worst:.1e}" + ("" if worst <= limit else
                  f"  ** MORE THAN {limit:g}: the two sides do not compute the same **"))


def case(title, model, what):
    sides, ds, against = {}, {}, {}  # against: DeviceKit label -> its torch labels
    for style in STYLES:
        d = ds[dk_label(style)] = dk_side(style, model)
        sides[dk_label(style)] = (getattr(d, what), dk.synchronize)
        against[dk_label(style)] = []
        for label, t in torch_sides(style, model).items():
            sides[label] = (getattr(t, what), None)
            against[dk_label(style)].append(label)
    for fn, fin in sides.values():  # warm up: caches, first-call paths, optimizer state
        fn(), fn()
        if fin:
            fin()
    times = alternate(sides, args.repeats, CALLS)
    meds = {name: spread([w for w, _ in t]) for name, t in times.items()}
    print(f"{title}: " + ", ".join(f"{name} {m * 1e3:.2f} ms [{lo * 1e3:.2f}-{hi * 1e3:.2f}]"
                                   for name, (m, lo, hi) in meds.items()))
    ratios = {}
    for name, d in ds.items():
        if against[name]:
            best = min(against[name], key=lambda k: meds[k][0])
            # the ratio of the medians, and the spread of the per-round ratios
            # (each round times both sides back to back)
            per_round = [dw / tw for (dw, _), (tw, _) in zip(times[name], times[best])]
            _, rlo, rhi = spread(per_round)
            ratios[name] = meds[name][0] / meds[best][0]
            print(f"  ratio {name} / {best} (the faster PyTorch form): "
                  f"{ratios[name]:.2f}x (per round {rlo:.2f}-{rhi:.2f})")
        n, fills, fused, why = launches(getattr(d, what))
        host = spread([h / w for w, h in times[name]])[0]
        print(f"  {name}: {n} launches per call ({fills} fill, {fused} fused kernels), "
              f"host share (time outside kernels) {host:.0%}")
        for reason, count in sorted(why.items()):
            print(f"    decomposed {count}x: {reason}")
    if len(ratios) > 1:  # the goal: every style within 10% of the best
        print(f"  styles: worst ratio / best ratio {max(ratios.values()) / min(ratios.values()):.2f}")


cfg = SIZES[args.size]
print(f"== {args.size} GPT ({cfg['layers']} layers, {cfg['heads']} heads, d_model {cfg['dim']}, "
      f"block {cfg['seq']}), {DTYPE}, threads {THREADS}, styles {', '.join(STYLES)}: "
      f"{args.repeats} alternating rounds of "
      f"{CALLS} calls, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
check_agreement(model(8))
case("train step (fwd+bwd+AdamW), batch 8", model(8), "step")
case("inference, batch 8", model(8), "infer")
if args.size == "nano":
    case("inference, batch 64", model(64), "infer")
print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
sys.exit(0)
