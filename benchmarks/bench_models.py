"""The model regression's cost, and the GPT-2-style model's speed against PyTorch.

1. The whole model suite on cpu:0 (every model; float32 and bfloat16 as the
   issue's budget names them, then all three dtypes; forward, backward, 5
   AdamW steps, inference) with --jobs 2 (budget: 120 s on a 2-core machine).
2. One training step (forward, loss, backward, AdamW) and one inference
   forward of the zoo's GPT-2-style model on cpu:0, as a ratio to PyTorch CPU
   eager on the same model and thread count, when torch is installed (the two
   models are in benchmarks/_gpt.py).

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

from _gpt import DeviceKitGPT, TorchGPT  # noqa: E402

model = zoo.get("gpt2")
d = DeviceKitGPT(model)
sync = dk.synchronize
t_step, t_infer = best_of(d.step, 5, sync), best_of(d.infer, 5, sync)
print(f"gpt2 ({model.config}) on cpu:0: train step (with AdamW) {t_step * 1e3:.1f} ms, "
      f"inference forward {t_infer * 1e3:.1f} ms")
try:
    import torch
except ImportError:
    print("PyTorch is not installed: no ratio to PyTorch CPU eager")
    sys.exit(0)

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1)))
t = TorchGPT(model)
tt_step, tt_infer = best_of(t.step, 5), best_of(t.infer, 5)
print(f"PyTorch CPU eager ({torch.get_num_threads()} threads): train step {tt_step * 1e3:.1f} ms, "
      f"inference {tt_infer * 1e3:.1f} ms")
print(f"ratio DeviceKit / PyTorch: train step {t_step / tt_step:.2f}x, "
      f"inference {t_infer / tt_infer:.2f}x (lower is better; "
      f"benchmarks/bench_gpt_speed.py times a nanoGPT side by side)")
