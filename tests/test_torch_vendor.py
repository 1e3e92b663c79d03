"""A vendor's first day through devicekit.torch: on a freshly scaffolded plugin
(``devicekit new``: copy and add only), ``devicekit torch coverage``
runs a GPT-2 training step to its end, lists per missing ATen op the set of
base ops it needs, and ``--plan`` ranks them; the conformance ``torch``
section reports what the plugin lacks as not implemented ("needs base ops"),
never a crash or an error (the NaN placeholder inside a backward once needed
the fill kernel the plugin lacks: a SIGABRT or a SystemError).

Needs torch, transformers, a C compiler and cmake (skipped with the reason
otherwise). The plugin is built with CMake straight from the scaffold (about
2 s), not as a wheel; it is found through DEVICEKIT_PLUGIN_PATH.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import HUNG_S, _find_c_compiler

pytest.importorskip("torch", reason="devicekit.torch needs torch: pip install 'devicekit[torch]'")

NAME = "mini"


@pytest.fixture(scope="module")
def minimal_plugin(tmp_path_factory):
    if _find_c_compiler() is None or shutil.which("cmake") is None:
        pytest.skip("building the scaffolded plugin needs a C compiler and cmake on PATH")
    root = tmp_path_factory.mktemp("vendor")
    project, build = root / "plugin", root / "build"
    for cmd in ([sys.executable, "-m", "devicekit", "new", NAME, "--dir", project],
                ["cmake", "-S", project, "-B", build, "-DCMAKE_BUILD_TYPE=Release"],
                ["cmake", "--build", build, "--parallel", "2"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=HUNG_S)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return build / f"libdevicekit_{NAME}.so"


def _run(args, plugin):
    env = dict(os.environ, DEVICEKIT_PLUGIN_PATH=str(plugin))
    env.pop("DEVICEKIT_PLUGIN_OVERRIDE", None)
    env.pop("DEVICEKIT_TORCH_DEVICES", None)
    return subprocess.run([sys.executable, "-m", "devicekit", *args], env=env,
                          capture_output=True, text=True, timeout=HUNG_S)


def test_coverage_of_gpt2_on_a_minimal_plugin_runs_to_the_end_and_plans(minimal_plugin, tmp_path):
    pytest.importorskip("transformers", reason="--model gpt2 builds a transformers model")
    out = tmp_path / "cov.json"
    proc = _run(["torch", "coverage", "--device", f"{NAME}:0", "--model", "gpt2", "--plan",
                 "--json", str(out)], minimal_plugin)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # 1: ops missing
    assert "the run stopped" not in proc.stdout and "recursion" not in proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["error"] is None
    ops = {r["op"]: r for r in doc["ops"]}
    # The whole step ran: forward, loss, backward and AdamW's update.
    for op in ("aten.nll_loss_forward.default", "aten.nll_loss_backward.default",
               "aten.embedding_dense_backward.default", "aten.addcdiv_.default"):
        assert op in ops, sorted(ops)
    needs = doc["needs"]
    assert needs["aten.embedding.default"] == ["gather"]
    assert needs["aten.arange.default"] == ["iota"]        # a factory: once the recursion
    assert needs["aten.mm.default"] == ["matmul"]
    # The set, not only the first base op that raised.
    assert {"div", "mul", "reduce_sum", "rsqrt", "sub"} <= set(needs["aten.native_layer_norm.default"])
    for have in ("copy", "add"):                           # what the scaffold implements
        assert all(have not in lacks for lacks in needs.values()), have
    # What the plugin runs itself is not missing.
    assert ops["aten.empty_strided.default"]["how"] == {"plugin kernel": ops[
        "aten.empty_strided.default"]["calls"]}
    # --plan: ranked by ATen ops unlocked, each base op once, every listed op needed.
    plan = doc["plan"]
    names = [e["op"] for e in plan]
    assert len(names) == len(set(names)) == len({op for lacks in needs.values() for op in lacks})
    unlocks = [len(e["unlocks"]) for e in plan]
    assert unlocks == sorted(unlocks, reverse=True)
    assert plan[0]["op"] == "fill" and "aten.ones_like.default" in plan[0]["unlocks"]
    for e in plan:
        assert e["models"] == ["gpt2"]
        assert set(e["unlocks"]) <= set(e["aten_ops"])
        assert all(needs[a] == [e["op"]] for a in e["unlocks"])
    assert "base ops that would unlock the most ATen ops: fill (" in proc.stdout


def test_torch_section_on_a_minimal_plugin_says_which_base_ops_it_needs(minimal_plugin, tmp_path):
    # Gradient cases whose backward reaches base ops the plugin lacks (the NaN
    # placeholder path): before, mm and constant_pad_nd were a CRASH (SIGABRT)
    # and max.reduction_no_dim a SystemError from run_backward (its backward
    # now also reaches isnan, lowered as ne(x, x)); cat runs whole.
    lacking = {"torch/mm/float32/grad": "fill, matmul",
               "torch/constant_pad_nd/float32/grad": "fill",
               "torch/max.reduction_no_dim/float32/grad":
                   "cast, div, eq, logical_and, logical_or, mul, ne, reduce_max, reduce_sum"}
    cases = [*lacking, "torch/cat/float32/grad"]
    report = tmp_path / "report"
    proc = _run(["conformance", "--device", f"{NAME}:0", "--jobs", "1", "--report", str(report),
                 *[a for c in cases for a in ("--case", c)]], minimal_plugin)
    assert "SystemError" not in proc.stdout + proc.stderr and "CRASH" not in proc.stdout
    got = {c["id"]: c for c in json.loads((report / "report.json").read_text())["cases"]}
    assert set(got) == set(cases), proc.stdout[-3000:] + proc.stderr[-3000:]
    assert got["torch/cat/float32/grad"]["outcome"] == "pass", got["torch/cat/float32/grad"]
    for case, ops in lacking.items():
        c = got[case]
        assert c["outcome"] == "not-implemented", (case, c["outcome"], c["message"][:500])
        assert f"needs base ops {ops}: " in c["message"], c["message"][:500]


def test_a_factory_failing_inside_a_backward_is_raised_at_the_next_op(minimal_plugin, tmp_path):
    # The scaffold lacks the fill kernel, so torch.zeros(device=dk) fails; inside a
    # backward its placeholder comes from its device= argument (no dk tensor
    # among its operands), and its error from the next dk op after the backward.
    script = tmp_path / "factory_in_backward.py"
    script.write_text(
        "import torch\n"
        "import devicekit.torch\n"
        "from devicekit.errors import UnloweredOpError\n"
        "class Op(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        return x.clone()\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g + torch.zeros(tuple(g.shape), device=g.device)\n"
        f"dev = devicekit.torch.prefer('{NAME}:0')\n"
        "x = torch.ones(3, 4).to(dev).requires_grad_(True)\n"
        "Op.apply(x).backward(torch.ones(3, 4).to(dev))\n"
        "print('backward returned')\n"
        "try:\n"
        "    x.grad.cpu()\n"
        "except UnloweredOpError as e:\n"
        "    print('raised:', str(e).splitlines()[0])\n"
        "    print('notes:', e.__notes__)\n"
        "print('after:', x.grad.cpu().isnan().all().item())\n")
    env = dict(os.environ, DEVICEKIT_PLUGIN_PATH=str(minimal_plugin))
    env.pop("DEVICEKIT_PLUGIN_OVERRIDE", None)
    env.pop("DEVICEKIT_TORCH_DEVICES", None)
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                          timeout=HUNG_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "backward returned", proc.stdout
    assert lines[1].startswith("raised: aten::zeros.default on dk:0 (DeviceKit mini:0, plugin "
                               "'mini'): its lowering needs base op fill"), proc.stdout
    assert "raised inside the backward pass by aten::zeros.default" in lines[2], proc.stdout
    assert lines[3] == "after: True", proc.stdout  # the gradient is the NaN placeholder's sum
