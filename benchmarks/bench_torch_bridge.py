"""devicekit.torch against torch's own CPU eager, in this one run, alternating.

1. The bridge's cost per ATen call: ``x + y`` on two 16-element float32
   tensors on ``dk:0`` (an ATen add through ``__torch_dispatch__``, the
   lowering table and one DeviceKit add) vs the same op in torch CPU eager vs
   ``devicekit.ops.add`` itself. Aim: the bridge adds under 10 us per call.
2. The Hugging Face GPT-2 small config of the tests
   (``devicekit.torch.hf_models``): a training step (forward, loss, backward,
   AdamW) and a ``no_grad`` forward, on ``dk:0`` (the reference CPU plugin)
   vs torch CPU eager, same threads, medians and spreads over alternating
   rounds. Aim: within 2x of torch eager.

Every dk timing ends with a device synchronize, so the kernels have run.
"""

import argparse
import os

from _timing import alternate, spread

import torch

import devicekit as dk
import devicekit.torch as dkt
from devicekit.torch import hf_models as _models


def _fmt(name, rounds):
    med, lo, hi = spread([w for w, _ in rounds])
    return f"{name:34} {med * 1e6:10.1f} us  (min {lo * 1e6:.1f}, max {hi * 1e6:.1f})", med


def per_call(args, dev):
    a, b = torch.arange(16.0), torch.ones(16)
    da, db = a.to(dev), b.to(dev)
    na, nb = dkt.from_torch(da), dkt.from_torch(db)
    sync = dk.device(args.device).synchronize
    sides = {"torch CPU eager  a + b": (lambda: a + b, None),
             "dk:0 through the bridge  a + b": (lambda: da + db, sync),
             "devicekit.ops.add (no torch)": (lambda: dk.ops.add(na, nb), sync)}
    for fn, _ in sides.values():  # warm up
        for _ in range(1000):
            fn()
    rounds = alternate(sides, args.repeats, calls=args.calls)
    print(f"== per ATen call: add of 16 float32, {args.calls} calls x {args.repeats} rounds ==")
    meds = {}
    for name, r in rounds.items():
        line, meds[name] = _fmt(name, r)
        print(line)
    bridge = meds["dk:0 through the bridge  a + b"]
    print(f"bridge overhead over devicekit.ops.add: "
          f"{(bridge - meds['devicekit.ops.add (no torch)']) * 1e6:.1f} us/call; "
          f"over torch eager: {(bridge - meds['torch CPU eager  a + b']) * 1e6:.1f} us/call")


def model(args, dev):
    import transformers
    transformers.logging.set_verbosity_error()
    ref, batch = _models.build("gpt2", 0, dropout=False)
    mine, _ = _models.build("gpt2", 0, dropout=False)
    mine = mine.to(dev)
    dbatch = {k: v.to(dev) for k, v in batch.items()}
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    opt_dk = torch.optim.AdamW(mine.parameters(), lr=1e-3)
    sync = dk.device(args.device).synchronize

    def infer(m, b):
        with torch.no_grad():
            m(**b)

    sides = {"torch CPU train step": (lambda: _models.train_step(ref, batch, opt_ref), None),
             "dk:0 train step": (lambda: _models.train_step(mine, dbatch, opt_dk), sync),
             "torch CPU no_grad forward": (lambda: infer(ref, batch), None),
             "dk:0 no_grad forward": (lambda: infer(mine, dbatch), sync)}
    for fn, _ in sides.values():
        fn()
        fn()
    rounds = alternate(sides, args.model_repeats)
    print(f"== GPT-2 {_models.SMALL['gpt2'][2]}, batch {_models.BATCH}x{_models.LENGTH}, "
          f"{args.model_repeats} rounds, torch threads {torch.get_num_threads()} ==")
    meds = {}
    for name, r in rounds.items():
        line, meds[name] = _fmt(name, r)
        print(line)
    print(f"ratio dk/torch: train step {meds['dk:0 train step'] / meds['torch CPU train step']:.2f}x,"
          f" no_grad forward "
          f"{meds['dk:0 no_grad forward'] / meds['torch CPU no_grad forward']:.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cpu:0", help="DeviceKit device (default cpu:0)")
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--model-repeats", type=int, default=10)
    ap.add_argument("--no-model", action="store_true", help="only the per-call cost")
    args = ap.parse_args()
    dev = dkt.device(args.device)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, device {args.device} = {dev}")
    per_call(args, dev)
    if not args.no_model:
        model(args, dev)


if __name__ == "__main__":
    main()
