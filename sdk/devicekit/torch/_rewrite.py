"""Rewrites of a Dynamo graph before AOTAutograd traces it (``_compile.backend``).

A model that spells a composite out in elementwise ops gets one launch per
op, forward and backward, where DeviceKit has one fused kernel for each
direction. The rewrite puts the op that the kernel serves in place of the
spelled-out form, so AOTAutograd differentiates that op and the lowering
offers both directions to the plugin's fused kernels (a plugin without them
gets the SDK's decomposition, as for the op written directly).

One rewrite so far, found by tracing the HF GPT-2 training step:

- ``gelu_tanh``: ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))``,
  the tanh GELU as GPT-2, Hugging Face's ``NewGELUActivation`` (``gelu_new``)
  and nanoGPT write it, becomes ``F.gelu(x, approximate="tanh")``. Written
  out it is 8 launches forward and 13 backward over the MLP's widest
  activation; fused, one each. ONNX Runtime's ``FastGeluFusion`` matches the
  same formula. The products and sums may come in either operand order; the
  constants must be GELU's (to 1e-6 relative: a truncated ``0.7978845608``
  matches, a different formula does not); every intermediate must have no
  other use (else it is left as written); ``x`` must be floating point.

The result is the same function computed by the fused kernel: equal to the
written-out ops within float rounding, not bitwise (as with any fusing
compiler). ``compile_stats()["rewrites"]`` counts each rewrite;
``_compile.rewrites_enabled = False`` lowers the graph as written.
"""

import math
import operator

import torch
from torch.fx import Node

#: canonical name of each spelling of the ops the patterns use
_FUNCTIONS = {operator.mul: "mul", torch.mul: "mul", operator.add: "add", torch.add: "add",
              torch.tanh: "tanh", torch.pow: "pow", operator.pow: "pow"}
_METHODS = {"mul": "mul", "add": "add", "tanh": "tanh", "pow": "pow"}

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_CUBIC = 0.044715


def _kind(n):
    """The canonical op of node ``n`` ("mul", "add", "tanh", "pow"), or None
    (another op, or keyword arguments such as ``add``'s ``alpha``)."""
    if not isinstance(n, Node) or n.kwargs:
        return None
    if n.op == "call_function":
        return _FUNCTIONS.get(n.target)
    if n.op == "call_method":
        return _METHODS.get(n.target)
    return None


def _close(v, want):
    return (isinstance(v, (int, float)) and not isinstance(v, bool)
            and abs(v - want) <= 1e-6 * abs(want))


def _binary(n, kind):
    """The two operands of ``n`` when it is the binary op ``kind``, else None."""
    return tuple(n.args) if _kind(n) == kind and len(n.args) == 2 else None


def _times(n, kind, const):
    """The node operand of ``n`` = ``kind(const, other)`` in either order, else None."""
    ab = _binary(n, kind)
    if ab is None:
        return None
    a, b = ab
    if _close(a, const) and isinstance(b, Node):
        return b
    if _close(b, const) and isinstance(a, Node):
        return a
    return None


def _match_gelu_tanh(out):
    """(x, interior nodes) when ``out`` computes the tanh GELU of ``x``, else None."""
    ab = _binary(out, "mul")
    if ab is None:
        return None
    for half, one_plus in (ab, ab[::-1]):
        x = _times(half, "mul", 0.5)
        t = _times(one_plus, "add", 1.0)
        if x is None or t is None or _kind(t) != "tanh" or len(t.args) != 1:
            continue
        scaled = t.args[0]                      # sqrt(2/pi) * (x + 0.044715 * x**3)
        inner = _times(scaled, "mul", SQRT_2_OVER_PI)
        terms = _binary(inner, "add") if inner is not None else None
        if terms is None or x not in terms:
            continue
        cubic = terms[1] if terms[0] is x else terms[0]   # 0.044715 * x**3
        cube = _times(cubic, "mul", GELU_CUBIC)
        power = _binary(cube, "pow") if cube is not None else None
        if power is None or power[0] is not x or not _close(power[1], 3.0):
            continue
        # each one's only user is the one before it (erased in this order)
        return x, (half, one_plus, t, scaled, inner, cubic, cube)
    return None


def _floating(x):
    v = x.meta.get("example_value")
    return isinstance(v, torch.Tensor) and v.is_floating_point()


def rewrite(gm):
    """Applies every rewrite to ``gm`` (a Dynamo ``GraphModule``) in place;
    returns {rewrite name: times applied} (empty when none applied)."""
    done = {}
    for out in list(gm.graph.nodes):  # a match's interior precedes it: never visited erased
        hit = _match_gelu_tanh(out)
        if hit is None:
            continue
        x, interior = hit
        if not _floating(x) or any(len(n.users) != 1 for n in interior):
            continue
        with gm.graph.inserting_before(out):
            g = gm.graph.call_function(torch.nn.functional.gelu, (x,), {"approximate": "tanh"})
        g.meta = dict(out.meta)
        out.replace_all_uses_with(g)
        gm.graph.erase_node(out)
        for n in interior:  # outermost first: each has lost its one user by then
            gm.graph.erase_node(n)
        done["gelu_tanh"] = done.get("gelu_tanh", 0) + 1
    if done:
        gm.graph.lint()
        gm.recompile()
    return done
