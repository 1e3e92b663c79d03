"""Tensor has one visible home, and the autograd engine imports nothing above it.

- Every attribute of ``devicekit.Tensor``, after importing every devicekit
  module, is either one the C++ binding defines and ``tensor._CPP_ATTRIBUTES``
  lists, or the very object ``tensor.install_surface`` bound from its table:
  a module that adds or replaces a Tensor method anywhere else fails here.
- ``autograd.py`` has no function-level imports and imports nothing of
  devicekit but ``_core`` and ``errors``; after ``import devicekit`` every op
  and view that records a node has a registered gradient rule.

Needs: the reference CPU plugin (cpu:0). Runs in fresh interpreters (~5 s).
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

import devicekit
from conftest import HUNG_S

# Attributes pybind11 and Python give every bound class; not part of the surface.
_CLASS_MACHINERY = {"__init__", "__dict__", "__doc__", "__module__", "_pybind11_conduit_v1_"}

_SURFACE_PROBE = r"""
import importlib, json, pkgutil, sys
import devicekit
skipped = []
for info in pkgutil.walk_packages(devicekit.__path__, "devicekit."):
    if info.name == "devicekit.__main__":
        continue  # runs the CLI
    try:
        importlib.import_module(info.name)
    except ModuleNotFoundError as e:  # an optional dependency (ray, torch, ...) is absent
        if (e.name or "").startswith("devicekit"):
            raise
        skipped.append(info.name)
from devicekit import _core, tensor as _t
T, installed = _core.Tensor, sys.modules["devicekit.tensor"]._installed
cpp_list = sys.modules["devicekit.tensor"]._CPP_ATTRIBUTES

def from_cpp(v):
    fn = v.fget if isinstance(v, property) else v
    return type(fn).__name__ in ("instancemethod", "builtin_function_or_method")

out = {"skipped": skipped, "cpp_list": list(cpp_list), "table": sorted(installed), "bad": []}
MACHINERY = %r
for name, v in vars(T).items():
    if name in MACHINERY:
        continue
    if name in installed:
        if v is not installed[name]:
            out["bad"].append(f"{name}: replaced after install_surface bound it ({v!r})")
    elif name in cpp_list:
        if not from_cpp(v):
            out["bad"].append(f"{name}: listed as C++ but is {v!r}")
    else:
        out["bad"].append(f"{name}: {v!r} is neither in tensor.py's table nor a listed C++ name")
out["attrs"] = sorted(vars(T))
print(json.dumps(out))
""" % (sorted(_CLASS_MACHINERY),)


def _run(code):
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HUNG_S)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_tensor_attribute_is_bound_from_tensor_py():
    out = _run(_SURFACE_PROBE)
    assert out["bad"] == []
    attrs = set(out["attrs"]) - _CLASS_MACHINERY
    # Nothing listed that is not there (the C++ list and the table cannot rot) ...
    assert set(out["cpp_list"]) <= attrs
    assert set(out["table"]) <= attrs
    # ... and no name both bound by the table and claimed by C++.
    assert not set(out["cpp_list"]) & set(out["table"])
    assert attrs == set(out["cpp_list"]) | set(out["table"])


def test_a_method_added_elsewhere_is_caught():
    # The probe itself must fail on a Tensor attribute set outside tensor.py.
    code = _SURFACE_PROBE.replace("from devicekit import _core, tensor as _t",
                                  "from devicekit import _core, tensor as _t\n"
                                  "_core.Tensor.stray = lambda self: self\n"
                                  "_core.Tensor.sum = lambda self: self")
    bad = _run(code)["bad"]
    assert any(b.startswith("stray:") for b in bad) and any(b.startswith("sum:") for b in bad)


def _function_level_imports(tree):
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            found += [f"line {n.lineno}" for n in ast.walk(node)
                      if isinstance(n, (ast.Import, ast.ImportFrom))]
    return found


def test_autograd_imports_nothing_above_core():
    tree = ast.parse(Path(devicekit.autograd.__file__).read_text())
    assert _function_level_imports(tree) == []
    relative = {a.name if n.module is None else n.module
                for n in tree.body if isinstance(n, ast.ImportFrom) and n.level
                for a in n.names}
    assert relative <= {"_core", "errors"}, relative


_RULES_PROBE = r"""
import json, math, sys
import devicekit as dk
from devicekit import autograd, ops, _core
# Every base op that has an ops function taking float tensors, and every view.
x = lambda *s: dk.tensor([[0.5, 1.5, 2.5], [1.0, 2.0, 3.0]][: s[0]] if s else 1.0,
                         requires_grad=True)
made, missing_fn = set(), []
def node(t):
    stack = [t.grad_fn] if t.grad_fn is not None else []
    while stack:  # every node of the graph, not only the last
        n = stack.pop()
        made.add(n.name)
        stack += [i.grad_fn for i in n.inputs if isinstance(i, dk.Tensor) and i.grad_fn]
    if t.grad_fn is not None:
        t.sum().backward()  # needs the rule of every node on the way
for name in _core.OP_NAMES:
    fn = getattr(ops, name[len("reduce_"):] if name.startswith("reduce_") else name, None)
    if fn is None:
        missing_fn.append(name)
        continue
    a, b = x(2), x(2)
    idx = dk.tensor([[0, 1, 0]])
    # (never a None tensor argument: gather/scatter_add crash on one)
    for args in ((a,), (a, b), (a > 1.0, a, b), (a, 0, idx, b[:1]), (a, 0, idx)):
        try:
            out = fn(*args)
        except Exception:
            continue
        node(out if not isinstance(out, tuple) else out[0])
        break
a = x(2)
for out in (a.reshape(3, 2), a.permute(1, 0), a[0], a.expand(2, 2, 3), a.T.contiguous(),
            a.to(dk.float64), a.to("cpu:0"), ops.narrow(a, 1, 0, 2), ops.cat([a, a]),
            ops.matmul(a, a.T), ops.scatter_add(a, 0, dk.tensor([[0, 1, 0]]), a[:1]),
            ops.gather(a, 0, dk.tensor([[0, 1, 0]])), ops.cumsum(a, 1)):
    node(out)
# The composites a plugin runs fused while recording (one fused:<op> node each
# when it has the backward kernel too, as the CPU plugin has).
import devicekit.nn.functional as F
q = dk.tensor([[[[0.5, 1.0], [1.5, 2.0]]]], requires_grad=True)
for out in (F.layer_norm(a), F.rms_norm(a), F.softmax(a, axis=-1), F.gelu(a),
            F.scaled_dot_product_attention(q, q, q)):
    node(out)
print(json.dumps({"made": sorted(made), "rules": autograd.rule_names(),
                  "grad_rules_loaded": "devicekit._grad_rules" in sys.modules}))
"""


def test_gradient_rules_are_registered_by_import_devicekit():
    out = _run(_RULES_PROBE)
    assert out["grad_rules_loaded"]
    # Every node an op or view records has a rule (backward ran for each) ...
    assert set(out["made"]) <= set(out["rules"]), set(out["made"]) - set(out["rules"])
    # ... and every registered rule belongs to something that records nodes
    # (to_device records only between two devices; the CPU plugin has one).
    assert set(out["rules"]) - set(out["made"]) <= {"to_device"}, set(out["rules"]) - set(out["made"])
