"""Whole models through devicekit.torch (``dk:0``, the reference CPU plugin)
against torch's own CPU eager: the same model code, the same weights, in one
run, the sides alternating round by round (benchmarks/_timing.alternate) so a
load change on a shared machine hits both alike.

Cases (``--only`` picks some):

- ``gpt``: a Hugging Face GPT2LMHeadModel at the "scaled" size (4 layers, 8
  heads, d_model 256, block 128, vocab 65, batch 8, dropout off): the
  training step (forward, the model's loss, backward, AdamW) and the
  ``no_grad`` forward, in float32 (for reference), in bfloat16 weights (the
  model and AdamW in bfloat16) and under ``torch.autocast(dtype=bfloat16)``
  (float32 weights; device type "dk" on our side, "cpu" on torch's);
- ``cnn``: the ``hf-resnet`` config (ResNetForImageClassification: 7x7/2
  stem, max pool, two basic stages of 8 and 16 channels, batch norm) at
  32x32 images, batch 16: the training step (train mode: batch statistics)
  and inference (eval mode: running statistics), float32;
- ``generate``: HF greedy ``generate`` with its KV cache (``do_sample=False``,
  ``min_new_tokens = max_new_tokens = 32``, prompt 8, batch 2) of GPT-2 at
  the ``hf-gpt2`` test size (2 layers, d_model 64; n_positions raised from 32
  to 64 to hold 40 positions) and at the scaled size, float32; reported in
  ms per new token;
- ``perop``: the bridge's per-op host cost, bench_torch_host.py's chain
  ``y = y * a + b`` on 1-element float32 tensors, in us per op (wall and
  the calling thread's CPU time).

Every dk timing ends with a device synchronize (or reads a value back), so
the kernels have run. Each row: the medians of both sides with their min-max
spread, and dk / torch, the ratio of the medians (lower is better; the goal
is 1.0 or less, 3 us per op for ``perop``). Before timing, each GPT and CNN
case checks that both sides compute the same (the first loss or output) and
generation that both produce the same tokens, and says so. The load average
is printed before and after.

The thread count (DEVICEKIT_CPU_THREADS and torch.set_num_threads) is read
once, when the plugin loads: ``--threads 1,2`` runs each count in a child
process of its own. Both sides share the process, hence the cores (torch's
OpenMP workers spin a while after each call: see bench_gpt_speed.py).

Usage: python benchmarks/bench_torch_models.py [--threads 1,2] [--repeats R]
       [--only gpt,cnn,generate,perop]
"""

import argparse
import copy
import os
import subprocess
import sys
import time

CASES = ("gpt", "cnn", "generate", "perop")

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--threads", default="1", help="thread count(s), comma-separated")
ap.add_argument("--repeats", type=int, default=5, help="alternating rounds per model case")
ap.add_argument("--slow-repeats", type=int, default=3,
                help="rounds for the bfloat16 GPT cases (torch's side takes seconds a call)")
ap.add_argument("--only", default=",".join(CASES), help=f"cases, comma-separated: {CASES}")
ap.add_argument("--device", default="cpu:0", help="DeviceKit device (default cpu:0)")
args = ap.parse_args()
threads = [int(t) for t in args.threads.split(",")]
only = args.only.split(",")
if any(t < 1 for t in threads) or any(c not in CASES for c in only):
    ap.error(f"--threads takes positive integers, --only some of {CASES}; got "
             f"{args.threads!r}, {args.only!r}")
if len(threads) > 1:  # one child per thread count (see the docstring)
    for t in threads:
        sys.stdout.flush()
        if subprocess.call([sys.executable, __file__, "--threads", str(t), "--repeats",
                            str(args.repeats), "--slow-repeats", str(args.slow_repeats),
                            "--only", args.only, "--device", args.device]):
            sys.exit(1)
    sys.exit(0)
THREADS = threads[0]
os.environ["DEVICEKIT_CPU_THREADS"] = str(THREADS)  # read when the plugin loads

import torch  # noqa: E402
import transformers  # noqa: E402

import devicekit as dk  # noqa: E402
import devicekit.torch as dkt  # noqa: E402

from _timing import alternate, spread  # noqa: E402

torch.set_num_threads(THREADS)
transformers.logging.set_verbosity_error()
DEV = dkt.device(args.device)
SYNC = dk.device(args.device).synchronize
ROWS = []  # (case, dk (med, lo, hi), torch (med, lo, hi), unit, scale)

GPT_SCALED = dict(n_layer=4, n_embd=256, n_head=8, n_positions=128, vocab_size=65,
                  bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
GPT_TEST = dict(n_layer=2, n_embd=64, n_head=4, n_positions=64, vocab_size=131,
                bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def load():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(case, sides, repeats, unit="ms", scale=1e3, per=1):
    """Warm both sides up (one call: the agreement check ran one already),
    time them alternating, record the row."""
    for fn, fin in sides.values():
        fn()
        if fin:
            fin()
    t0 = time.perf_counter()
    rounds = alternate(sides, repeats)
    (dk_r, torch_r) = rounds.values()
    d = spread([w / per for w, _ in dk_r])
    t = spread([w / per for w, _ in torch_r])
    ROWS.append((case, d, t, unit, scale))
    print(f"  {case}: dk {d[0] * scale:.2f} {unit}, torch {t[0] * scale:.2f} {unit}, "
          f"{d[0] / t[0]:.2f}x ({time.perf_counter() - t0:.0f} s)", flush=True)


def same(what, a, b, tol):
    a, b = a.detach().float().cpu(), b.detach().float().cpu()
    rel = float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))
    print(f"  {what}: dk vs torch max relative difference {rel:.1e}"
          + ("" if rel <= tol else f"  ** MORE THAN {tol:g}: not the same computation **"),
          flush=True)


def train_step(model, batch, opt, autocast):
    with autocast():
        loss = model(**batch).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def no_grad_forward(model, batch, autocast):
    with torch.no_grad(), autocast():
        return model(**batch).logits


def pair(build, form):
    """(torch model, dk model, autocast factories) of ``form``: float32,
    bf16 weights, or autocast (float32 weights)."""
    import contextlib
    ref = build()
    if form == "bf16 weights":
        ref = ref.to(torch.bfloat16)
    mine = copy.deepcopy(ref).to(DEV)
    if form == "autocast":
        ac_t = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
        ac_d = lambda: torch.autocast("dk", dtype=torch.bfloat16)  # noqa: E731
    else:
        ac_t = ac_d = contextlib.nullcontext
    return ref, mine, ac_t, ac_d


def gpt_form(build, form, batch, dbatch):
    ref, mine, ac_t, ac_d = pair(build, form)
    tol = 1e-4 if form == "float32" else 2e-2
    same(f"GPT {form} first loss", train_step(mine, dbatch, torch.optim.AdamW(
        mine.parameters(), lr=0.0), ac_d), train_step(ref, batch, torch.optim.AdamW(
            ref.parameters(), lr=0.0), ac_t), tol)
    opt_d = torch.optim.AdamW(mine.parameters(), lr=1e-4)
    opt_t = torch.optim.AdamW(ref.parameters(), lr=1e-4)
    rounds = args.repeats if form == "float32" else args.slow_repeats
    timed(f"GPT scaled train step, {form}",
          {"dk": (lambda: train_step(mine, dbatch, opt_d, ac_d), SYNC),
           "torch": (lambda: train_step(ref, batch, opt_t, ac_t), None)}, rounds)
    timed(f"GPT scaled no_grad forward, {form}",
          {"dk": (lambda: no_grad_forward(mine, dbatch, ac_d), SYNC),
           "torch": (lambda: no_grad_forward(ref, batch, ac_t), None)}, rounds)


def gpt_cases():
    def build():
        torch.manual_seed(0)
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(**GPT_SCALED))
    ids = torch.randint(0, 65, (8, 128), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids, "labels": ids}
    dbatch = {k: v.to(DEV) for k, v in batch.items()}
    for form in ("float32", "bf16 weights", "autocast"):
        gpt_form(build, form, batch, dbatch)


def cnn_cases():
    from devicekit.models.hf import SPECS
    kw = {k: v for k, v in SPECS["hf-resnet"][3].items() if k != "image_size"}

    def build():
        torch.manual_seed(0)
        return transformers.ResNetForImageClassification(transformers.ResNetConfig(**kw))
    gen = torch.Generator().manual_seed(0)
    batch = {"pixel_values": torch.randn(16, 3, 32, 32, generator=gen),
             "labels": torch.randint(0, kw["num_labels"], (16,), generator=gen)}
    dbatch = {k: v.to(DEV) for k, v in batch.items()}
    ref, mine, ac_t, ac_d = pair(build, "float32")
    same("CNN first loss", train_step(mine, dbatch, torch.optim.AdamW(mine.parameters(), lr=0.0),
                                      ac_d),
         train_step(ref, batch, torch.optim.AdamW(ref.parameters(), lr=0.0), ac_t), 1e-4)
    opt_d = torch.optim.AdamW(mine.parameters(), lr=1e-4)
    opt_t = torch.optim.AdamW(ref.parameters(), lr=1e-4)
    ref.train(), mine.train()
    timed("CNN (hf-resnet, 32x32, batch 16) train step, float32",
          {"dk": (lambda: train_step(mine, dbatch, opt_d, ac_d), SYNC),
           "torch": (lambda: train_step(ref, batch, opt_t, ac_t), None)}, args.repeats)
    ref.eval(), mine.eval()
    same("CNN eval logits", no_grad_forward(mine, dbatch, ac_d),
         no_grad_forward(ref, batch, ac_t), 1e-4)
    timed("CNN (hf-resnet, 32x32, batch 16) inference, float32",
          {"dk": (lambda: no_grad_forward(mine, dbatch, ac_d), SYNC),
           "torch": (lambda: no_grad_forward(ref, batch, ac_t), None)}, args.repeats)


def generate_one(label, cfg, new, prompt):
    torch.manual_seed(0)
    ref = transformers.GPT2LMHeadModel(transformers.GPT2Config(**cfg)).eval()
    mine = copy.deepcopy(ref).to(DEV)
    ids = torch.randint(1, cfg["vocab_size"], (2, prompt), generator=torch.Generator().manual_seed(0))
    dids = ids.to(DEV)

    def gen(m, x):
        with torch.no_grad():
            return m.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new,
                              min_new_tokens=new, do_sample=False, pad_token_id=0)
    out_d, out_t = gen(mine, dids).cpu(), gen(ref, ids)
    print(f"  generation {label}: {out_t.shape[1] - prompt} new tokens, dk's tokens "
          f"{'equal' if torch.equal(out_d, out_t) else '** DIFFER FROM **'} torch's", flush=True)
    timed(f"GPT-2 {label} greedy generate, per token",
          {"dk": (lambda: gen(mine, dids), SYNC), "torch": (lambda: gen(ref, ids), None)},
          args.repeats, per=new)


def generate_cases(new=32, prompt=8):
    for label, cfg in (("hf-gpt2 test size", GPT_TEST), ("scaled", GPT_SCALED)):
        generate_one(label, cfg, new, prompt)


def perop_case(steps=500, calls=10):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_torch_host import _chain, _operands
    sides = {"dk": (_chain(*_operands(DEV), steps), SYNC),
             "torch": (_chain(*_operands(None), steps), None)}
    for fn, fin in sides.values():
        fn()
        if fin:
            fin()
    rounds = alternate(sides, 9, calls=calls)
    ops = 2 * steps
    for kind, i in (("wall", 0), ("host CPU time", 1)):
        d = spread([r[i] / ops for r in rounds["dk"]])
        t = spread([r[i] / ops for r in rounds["torch"]])
        ROWS.append((f"per-op cost (1-element mul/add chain), {kind}", d, t, "us", 1e6))
        print(f"  per-op {kind}: dk {d[0] * 1e6:.2f} us, torch {t[0] * 1e6:.2f} us", flush=True)


print(f"== devicekit.torch on {DEV} ({args.device}) vs torch CPU eager: torch {torch.__version__}, "
      f"transformers {transformers.__version__}, threads {THREADS}, {os.cpu_count()} CPUs, "
      f"{args.repeats} alternating rounds; load average {load()}", flush=True)
T0 = time.perf_counter()
for c in only:
    {"gpt": gpt_cases, "cnn": cnn_cases, "generate": generate_cases, "perop": perop_case}[c]()
print(f"\n== threads {THREADS}: median [min-max]; ratio = dk / torch (goal <= 1.00; per-op "
      f"goal dk <= 3 us) ==")
print(f"{'case':54} {'dk':>26} {'torch':>26} {'ratio':>6} {'vs fp32':>7}")
fp32 = {case.rsplit(", ", 1)[0]: t[0] for case, _, t, _, _ in ROWS if case.endswith(", float32")}


def fmt(m, s, unit):
    return f"{m[0] * s:.2f} [{m[1] * s:.2f}-{m[2] * s:.2f}] {unit}"


for case, d, t, unit, s in ROWS:
    base = fp32.get(case.rsplit(", ", 1)[0]) if not case.endswith("float32") else None
    # a bfloat16 case against torch's float32 of the same model, timed in this
    # run but in other rounds: torch's own bfloat16 may be its slower form
    vs = f"{d[0] / base:7.2f}" if base else ""
    print(f"{case:54} {fmt(d, s, unit):>26} {fmt(t, s, unit):>26} {d[0] / t[0]:6.2f} {vs}")
if any(not c.endswith("float32") and c.rsplit(", ", 1)[0] in fp32 for c, *_ in ROWS):
    print("vs fp32: a bfloat16 case's dk median over torch's float32 median of the same model "
          "(other rounds of this run)")
print(f"load average at the end {load()}; {time.perf_counter() - T0:.0f} s", flush=True)
