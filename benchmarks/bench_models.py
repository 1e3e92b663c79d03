"""The model regression's cost, and the GPT-2-style model's speed against PyTorch.

1. The whole model suite on cpu:0 (every model; float32 and bfloat16 as the
   issue's budget names them, then all three dtypes; forward, backward, 5
   AdamW steps, inference) with --jobs 2 (budget: 120 s on a 2-core machine).
2. One training step (forward, loss, backward) and one inference forward of
   the zoo's GPT-2-style model on cpu:0, as a ratio to PyTorch CPU eager on the
   same model and thread count, when torch is installed.

Usage: python benchmarks/bench_models.py [JOBS]
"""

import json
import os
import subprocess
import sys
import tempfile
import time

from _timing import best_of

jobs = sys.argv[1] if len(sys.argv) > 1 else "2"
for dtypes in ("float32,bfloat16", "float32,bfloat16,float16"):
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "devicekit", "models", "--device", "cpu:0",
                               "--jobs", jobs, "--dtype", dtypes, "--report", out],
                              capture_output=True, text=True)
        took = time.perf_counter() - start
        summary = json.load(open(f"{out}/report.json"))["summary"]
    print(f"models cpu:0 --jobs {jobs} --dtype {dtypes}: {summary['total']} cases in {took:.1f} s "
          f"(budget 120 s), exit {proc.returncode}, {summary['by_outcome']}")

import devicekit as dk  # noqa: E402
import devicekit.models as zoo  # noqa: E402
from devicekit.models import harness as H  # noqa: E402

model = zoo.get("gpt2")
master = H.master_params(model, "cpu:0", "float32")
inp = H.device_inputs(model, "cpu:0", "float32")


def dk_step():
    for t in master.values():
        t.grad = None
    H.loss_of(H.forward(model, master, inp, "float32"), inp).backward()


def dk_infer():
    with dk.no_grad():
        H.forward(model, master, inp, "float32")


sync = dk.synchronize
t_step, t_infer = best_of(dk_step, 5, sync), best_of(dk_infer, 5, sync)
print(f"gpt2 ({model.config}) on cpu:0: train step {t_step * 1e3:.1f} ms, "
      f"inference forward {t_infer * 1e3:.1f} ms")
try:
    import torch
except ImportError:
    print("PyTorch is not installed: no ratio to PyTorch CPU eager")
    sys.exit(0)

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1)))
c = model.config
tp = {n: torch.tensor(a, requires_grad=True) for n, a in model.init_params().items()}
data = {k: torch.tensor(v) for k, v in model.make_data().items()}
TF = torch.nn.functional


def torch_forward():
    x = TF.embedding(data["ids"], tp["wte"]) + TF.embedding(data["positions"], tp["wpe"])
    b, n, d, h = c.batch, c.seq, c.dim, c.heads
    for i in range(c.layers):
        p = lambda s: tp[f"block{i}.{s}"]  # noqa: E731
        y = TF.layer_norm(x, (d,), p("attn.ln.weight"), p("attn.ln.bias"))
        q, k, v = TF.linear(y, p("attn.qkv.weight"), p("attn.qkv.bias")).split(d, -1)
        q, k, v = (t.reshape(b, n, h, d // h).transpose(1, 2) for t in (q, k, v))
        a = TF.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, n, d)
        x = x + TF.linear(a, p("attn.proj.weight"), p("attn.proj.bias"))
        y = TF.layer_norm(x, (d,), p("mlp.ln.weight"), p("mlp.ln.bias"))
        y = TF.gelu(TF.linear(y, p("mlp.fc.weight"), p("mlp.fc.bias")), approximate="tanh")
        x = x + TF.linear(y, p("mlp.proj.weight"), p("mlp.proj.bias"))
    return TF.linear(TF.layer_norm(x, (d,), tp["ln_f.weight"], tp["ln_f.bias"]), tp["wte"])


def torch_step():
    for t in tp.values():
        t.grad = None
    logits = torch_forward()
    TF.cross_entropy(logits.reshape(-1, logits.shape[-1]), data["targets"].reshape(-1)).backward()


def torch_infer():
    with torch.no_grad():
        torch_forward()


tt_step, tt_infer = best_of(torch_step, 5), best_of(torch_infer, 5)
print(f"PyTorch CPU eager ({torch.get_num_threads()} threads): train step {tt_step * 1e3:.1f} ms, "
      f"inference {tt_infer * 1e3:.1f} ms")
print(f"ratio DeviceKit / PyTorch: train step {t_step / tt_step:.2f}x, "
      f"inference {t_infer / tt_infer:.2f}x (lower is better)")
