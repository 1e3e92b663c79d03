"""Memory is given back when a model is dropped: nothing is lost.

- A parameter refers to the modules that hold it by weak reference, so
  ``del model`` frees its tensors by reference counting alone: nothing waits
  for Python's cyclic garbage collector, which a device running out of memory
  does not start. Checked with ``gc.disable()`` in effect.
- When the plugin is out of memory anyway, the SDK's allocator runs one
  ``gc.collect()``, empties its cache and retries once (``Device::allocate``,
  sdk/csrc/device.cpp; the hook is ``collect_garbage`` in sdk/csrc/module.cpp);
  an allocation that still does not fit raises the plugin's OutOfMemoryError.

Needs: the reference CPU plugin. The scenarios under a device budget run in a
subprocess: the plugin reads DEVICEKIT_CPU_MEMORY_BYTES when it loads.
"""

import gc
import json
import os
import subprocess
import sys
import textwrap

import numpy as np

import devicekit as dk
from devicekit import nn, optim

from conftest import HUNG_S

BUDGET = 64 << 20  # bytes: the device budget of the scenarios below
MODEL_FLOATS = 10 << 20  # a 40 MiB model: two of them do not fit in BUDGET


class _Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(dk.tensor(np.eye(d, dtype=np.float32)))
        self.b = nn.Parameter(dk.zeros(d))

    def forward(self, x):
        return (x @ self.w + self.b).relu()


class _Net(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.blocks = nn.ParameterDict({"scale": np.ones(d, np.float32)})
        self.first, self.second = _Block(d), _Block(d)
        self.tied = self.first.w  # one parameter held by two modules

    def forward(self, x):
        return self.second(self.first(x) * self.blocks["scale"]) @ self.tied


def _train_and_drop(cpu):
    net = _Net()
    opt = optim.AdamW(net.parameters(), lr=1e-2)
    x = dk.tensor(np.ones((8, 64), np.float32))
    for _ in range(3):  # flat AdamW steps: parameters become views of one tensor
        opt.zero_grad()
        loss = net(x).sum()
        loss.backward()
        opt.step()
    live = cpu.memory_stats()["allocated_bytes"]
    del net, opt, x, loss
    return live


def test_dropping_a_trained_model_frees_its_memory_without_the_cyclic_gc(cpu):
    gc.collect()
    gc.disable()
    try:
        _train_and_drop(cpu)  # a first round: the SDK's scalar constants stay cached
        base = cpu.memory_stats()["allocated_bytes"]
        live = _train_and_drop(cpu)
        after = cpu.memory_stats()["allocated_bytes"]
        # Nothing the round made is left for the cyclic collector either.
        assert gc.collect() == 0
    finally:
        gc.enable()
    assert live > base + 64 * 64 * 4, (base, live)
    assert after == base, f"{after - base} bytes still allocated after del (gc disabled)"


def _run(source):
    env = dict(os.environ, DEVICEKIT_CPU_MEMORY_BYTES=str(BUDGET))
    env.pop("DEVICEKIT_PLUGIN_PATH", None)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(source)], env=env,
                       capture_output=True, text=True, timeout=HUNG_S)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}{r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


# Counts the garbage collections that start, with gc.disable() in effect.
_PRELUDE = f"""
    import gc, json, threading
    import numpy as np
    import devicekit as dk
    from devicekit import nn
    gc.disable()
    collections = []
    gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(1))
    cpu = dk.device("cpu:0")
    MODEL_FLOATS = {MODEL_FLOATS}
"""


def test_a_second_model_fits_in_the_budget_after_the_first_is_dropped():
    out = _run(_PRELUDE + """
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(dk.zeros(MODEL_FLOATS))

        def forward(self, x):
            return (self.w.sum() * x).sum()

    model = Model()
    model(dk.ones(4)).backward()  # a graph and a gradient, dropped with the model
    del model
    model = Model()  # 40 MiB more: fits only if the first model's memory came back
    print(json.dumps({"collections": len(collections),
                      "allocated": cpu.memory_stats()["allocated_bytes"]}))
    """)
    # The drop alone gave the memory back: no collection was needed.
    assert out["collections"] == 0, out
    assert out["allocated"] < BUDGET, out


def test_out_of_memory_collects_once_and_retries():
    out = _run(_PRELUDE + """
    def cyclic_garbage():  # 40 MiB that only the cyclic collector frees
        junk = [dk.zeros(MODEL_FLOATS)]
        junk.append(junk)

    result = {}
    cyclic_garbage()
    del collections[:]
    x = dk.zeros(MODEL_FLOATS)
    result["op"] = len(collections)
    del x
    cyclic_garbage()
    del collections[:]
    y = dk.tensor(np.ones(MODEL_FLOATS, np.float32))  # allocates with the GIL released
    result["from_host"] = [len(collections), float(y.sum().item())]
    del y
    cyclic_garbage()
    del collections[:]
    threads = [threading.Thread(target=lambda: result.setdefault("thread", dk.zeros(MODEL_FLOATS)))]
    threads[0].start()
    threads[0].join()
    result["thread"] = [len(collections), result["thread"].shape[0]]
    print(json.dumps(result))
    """)
    assert out == {"op": 1, "from_host": [1, float(MODEL_FLOATS)], "thread": [1, MODEL_FLOATS]}


def test_a_genuine_out_of_memory_still_raises_after_one_collection():
    out = _run(_PRELUDE + """
    keep = dk.zeros(MODEL_FLOATS)
    before = cpu.memory_stats()
    try:
        dk.zeros(2 * MODEL_FLOATS)
        error = None
    except dk.OutOfMemoryError as e:
        error = [str(e), e.code]
    after = cpu.memory_stats()
    print(json.dumps({"error": error, "collections": len(collections),
                      "allocated": [before["allocated_bytes"], after["allocated_bytes"]],
                      "kept": float(keep.sum().item())}))
    """)
    message, code = out["error"]
    assert code == "OUT_OF_MEMORY"
    assert "Memory_Allocate failed [OUT_OF_MEMORY]" in message, message
    assert "DEVICEKIT_CPU_MEMORY_BYTES" in message, message  # the plugin's own hint
    assert out["collections"] == 1, out  # one collection, one retry: no loop
    assert out["allocated"][0] == out["allocated"][1], out
    assert out["kept"] == 0.0
