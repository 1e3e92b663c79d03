"""``torch.compile(model, backend="devicekit")``: FX graphs lowered to DeviceKit ops.

Dynamo captures the Python; AOTAutograd (``aot_autograd``) traces the
forward and backward ATen graphs with the bridge's decomposition choices (a
``torch._decomp`` decomposition only for an op the lowering table does not
name, as eager dispatch does). Each graph node is then run by the bridge's
own lowering (``_dispatch.lookup``, the one table) on the DeviceKit tensors
directly: no ``__torch_dispatch__``, no wrap/unwrap between nodes.

A node with no lowering is a *graph break*: it runs through the eager bridge
(``_dispatch.dispatch``: a decomposition, the counted CPU fallback when it is
on, else ``UnloweredOpError``), and is counted by its name in
``compile_stats()``. Nothing runs on the CPU unseen.

Device graphs: the first call of a compiled graph runs op by op (warm-up);
the second captures it into a ``devicekit.graphs.Graph`` over static input
buffers, and later calls copy the inputs in (a parameter or buffer that is
the same DeviceKit tensor on every call is used in place) and replay it;
outputs are copied out of the graph's pool, so a later call never changes
an earlier result, except a training forward's activations (the outputs
AOTAutograd saves for the backward): those are lent as views of the pool
and the backward graph reads them there, and a replay that would overwrite
lent activations still held runs op by op instead (``_Graphed``). Capture
is skipped, counted with its reason, for a graph with a graph break, and
where the device refuses it (a host read). A plugin without the graphs part
replays DeviceKit's own recording of the graph (``devicekit.graphs``, mode
"auto"). Replay is bitwise equal to op by op: the same kernels, same order.

A graph with a random op (dropout in training, ``torch.rand``) is captured in
DeviceKit's recording (mode "recorded", also on a plugin with native graphs,
which cannot patch a launch's Philox counters; counted as ``random_graphs``):
as ``devicekit.torch.DKGraph``, the capture takes nothing from the device's
Philox stream and each replay takes the graph's whole consumption in one host
step, the C++ replay patching every random launch's seed and offset. So the
calls draw, bitwise, what op-by-op calls from the same stream state draw.

Shapes: static. A new input shape makes Dynamo recompile (its cache is
bounded by ``torch._dynamo.config.recompile_limit``); if Dynamo marks a
size dynamic, the graph's symbolic sizes are computed per call and one
device graph is kept per input-shape signature (at most ``GRAPHS_PER_SHAPE``).
A device graph belongs to the tensors it reads in place (a model's
parameters; Dynamo serves every instance of a class from one program): a
call with other ones captures its own (``_Graphed.owns``).
"""

import collections
import operator
import threading
import weakref

import torch
import torch.utils._pytree as pytree

from .. import _graph_state, bridge, graphs
from .. import dtypes as _dt
from ..errors import DeviceKitError, NotImplementedByPlugin
from . import _device, _dispatch, _lower_nn, _rewrite
from ._device import DKTensor, wrap
from ._table import RANDOM, rewrap

GRAPHS_PER_SHAPE = 8


class _Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.graphs = 0           # FX graphs compiled (forward and backward count apart)
        self.nodes = 0            # ATen nodes lowered straight to DeviceKit
        self.breaks = collections.Counter()       # op name -> nodes run by the eager bridge
        self.break_calls = collections.Counter()  # op name -> calls of those nodes
        self.captured = 0         # device graphs captured
        self.replays = 0
        self.op_by_op = 0         # calls run node by node (warm-up included)
        self.random_graphs = 0    # device graphs captured recorded for their random ops
        self.no_capture = collections.Counter()  # reason -> graphs left op by op
        self.not_replayed = 0     # calls of a captured graph run op by op (activations held)
        self.in_capture = 0       # calls made inside an outer capture (recorded op by op there)
        self.rewrites = collections.Counter()    # rewrite name -> times applied (_rewrite)

    def as_dict(self):
        with self.lock:
            return {"graphs": self.graphs, "lowered_nodes": self.nodes,
                    "graph_breaks": dict(self.breaks), "graph_break_calls": dict(self.break_calls),
                    "captured": self.captured, "replays": self.replays,
                    "random_graphs": self.random_graphs,
                    "op_by_op_calls": self.op_by_op, "not_replayed": self.not_replayed,
                    "in_capture_calls": self.in_capture,
                    "not_captured": dict(self.no_capture), "rewrites": dict(self.rewrites)}


_stats = _Stats()


def compile_stats():
    """What ``backend="devicekit"`` did in this process: graphs compiled,
    nodes lowered, graph breaks by ATen op (nodes, and calls of them), device
    graphs captured and replayed, calls run op by op and why graphs were not
    captured."""
    return _stats.as_dict()


def format_compile_stats(stats=None):
    """``compile_stats()`` as lines for a terminal (empty when nothing was compiled)."""
    s = stats or compile_stats()
    if not s["graphs"]:
        return ""
    lines = [f"torch.compile(backend='devicekit'): {s['graphs']} graph(s), {s['lowered_nodes']} "
             f"node(s) lowered, {s['captured']} device graph(s) captured, {s['replays']} "
             f"replay(s), {s['op_by_op_calls']} call(s) op by op"]
    if s.get("not_replayed"):
        lines.append(f"  {s['not_replayed']} call(s) of a captured graph run op by op: the "
                     f"activations an earlier replay lent were still held")
    if s.get("in_capture_calls"):
        lines.append(f"  {s['in_capture_calls']} call(s) inside a devicekit.torch.graph capture, "
                     f"recorded op by op into it")
    if s.get("random_graphs"):
        lines.append(f"  {s['random_graphs']} device graph(s) with random ops, recorded by "
                     f"DeviceKit (Philox offsets patched per replay)")
    for name, n in sorted(s.get("rewrites", {}).items()):
        lines.append(f"  rewritten to a fused op: {name} ({n} time(s); docs/torch_compile.md)")
    for op, n in sorted(s["graph_breaks"].items()):
        lines.append(f"  graph break: {op} ({n} node(s), {s['graph_break_calls'].get(op, 0)} "
                     f"call(s) through the eager bridge)")
    for why, n in sorted(s["not_captured"].items()):
        lines.append(f"  not captured ({n} graph(s)): {why}")
    return "\n".join(lines)


def reset_compile_stats():
    _stats.reset()


def _name(target):
    if isinstance(target, torch._ops.OpOverload):
        return f"{target._schema.name}.{target._overloadname}"
    return getattr(target, "__name__", str(target))


# Size queries on symbolic graphs: answered from the DeviceKit tensor.
_SIZES = {
    torch.ops.aten.sym_size.int: lambda t, d: t.shape[d],
    torch.ops.aten.sym_stride.int: lambda t, d: t.strides[d],
    torch.ops.aten.sym_numel.default: lambda t: _numel(t.shape),
    torch.ops.aten.sym_storage_offset.default: lambda t: bridge.storage_offset(t),
}


# A lowered op's output may have other strides than torch's meta kernel gave
# the traced graph (which then views it without a contiguous() between), so a
# view the strides refuse views a contiguous copy: the graph is functional
# (AOTAutograd), so no write can reach the copy's source through it.
_VIEWS = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)


def _view_or_copy(fn):
    def view(t, *args, **kwargs):
        try:
            return fn(t, *args, **kwargs)
        except RuntimeError:
            return fn(_static_copy(t), *args, **kwargs)
    return view


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _tree(fn, x):
    t = type(x)
    if t is list or t is tuple:
        return t(_tree(fn, v) for v in x)
    return fn(x)


def _to_dk(x):
    return x._dk if isinstance(x, DKTensor) else x


def _to_torch(x):
    return wrap(x) if type(x) is bridge.Tensor else x


class _Program:
    """One FX graph as a list of steps over a value list (slot per node)."""

    def __init__(self, gm):
        self.steps = []  # (kind, fn, args template, kwargs template, slot, ATen op or None)
        self.breaks = []
        self.random = []
        self.mutated = []  # ops that write into a graph input
        slots = {}
        self.inputs = []
        # Host constants: a CPU tensor the graph holds (``torch.tensor(data,
        # device="dk:0")`` in the traced code becomes a CPU constant, its
        # lift_fresh_copy and a copy to dk) and the nodes computed from host
        # constants alone, evaluated here once, on the CPU; a node that uses
        # one beside dk tensors gets it uploaded once, at build time, so a
        # call (and its device graph) never copies from the host.
        self.host = {}    # node -> its CPU value
        # A node traced as a CPU tensor from CPU tensors that are not all
        # constants, so from a CPU graph input (``dynamic=True`` makes a Python
        # float global such as ``math.pi`` a 0-d CPU input, whose arithmetic
        # AOTAutograd traces as tensor ops), runs on the CPU with torch at each
        # call, as eager torch runs it; its values may change from call to
        # call, so a graph with one is not captured (``_Compiled``).
        self.host_nodes = set()
        self.host_steps = []  # their ops' names
        self.uploaded = {}  # (host node, DeviceKit device) -> slot of its value there
        self.nslots = 0
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                slots[node] = self._slot()
                self.inputs.append(slots[node])
            elif node.op == "call_function":
                slots[node] = self._slot()
                if self._fold(node, slots):
                    continue
                if _on_host(node):
                    self.host_nodes.add(node)
                    self.host_steps.append(_name(node.target))
                    self.steps.append(("host", node.target, self._template(node.args, slots),
                                       self._template(node.kwargs, slots), slots[node],
                                       node.target))
                else:
                    self.steps.append(self._step(node, self._uploading(node, slots)))
            elif node.op == "output":
                self.output = self._template(node.args[0], slots)  # (a host output stays one)
            elif node.op == "get_attr":
                slots[node] = self._slot()
                value = getattr(gm, node.target)
                if type(value) is torch.Tensor and value.device.type == "cpu":
                    self.host[node] = value
                self.steps.append(("const", _to_dk(value), None, None, slots[node], None))
            else:
                raise DeviceKitError(f"devicekit.torch compile: FX node kind {node.op!r} "
                                     f"({node.name}) is not supported")

    def _slot(self):
        self.nslots += 1
        return self.nslots - 1

    def _fold(self, node, slots):
        """Evaluates ``node`` on the CPU now when all its tensor inputs are host
        constants, or it has no inputs and is traced as a CPU tensor (a CPU
        factory: ``scalar_tensor(2.0)``), and it is not random: a const step.
        False otherwise."""
        ins = node.all_input_nodes
        target = node.target
        val = node.meta.get("val")
        if (any(n not in self.host for n in ins)
                or (not ins and not (isinstance(val, torch.Tensor) and val.device.type == "cpu"))
                or not isinstance(target, torch._ops.OpOverload)
                or torch.Tag.nondeterministic_seeded in target.tags):
            return False
        get = lambda n: self.host[n]  # noqa: E731
        with _unfaked(), torch.no_grad():
            value = target(*torch.fx.node.map_arg(node.args, get),
                           **torch.fx.node.map_arg(node.kwargs, get))
        if not (type(value) is torch.Tensor and value.device.type == "cpu"):
            return False
        self.host[node] = value
        self.steps.append(("const", value, None, None, slots[node], None))
        return True

    def _uploading(self, node, slots):
        """``slots`` with each host-constant input of ``node`` replaced by a
        slot holding it on the device of ``node``'s dk tensors, uploaded once.
        A 0-d one is a scalar operand (as in eager dispatch: its dtype does not
        promote), so it stays on the host, but for a copy into dk (what a 0-d
        ``torch.tensor(v, device=dk)`` traces to)."""
        copy = node.target is torch.ops.aten.copy.default
        ups = [n for n in node.all_input_nodes
               if n in self.host and (copy or self.host[n].dim() > 0)]
        if not ups:
            return slots
        dev = _dk_device_of(node)
        slots = dict(slots)
        for n in ups:
            if (n, dev) not in self.uploaded:
                slot = self._slot()
                with _unfaked():
                    value = _device.from_host(self.host[n].contiguous(), dev)
                self.steps.append(("const", value, None, None, slot, None))
                self.uploaded[(n, dev)] = slot
            slots[n] = self.uploaded[(n, dev)]
        return slots

    @staticmethod
    def _template(a, slots):
        if isinstance(a, torch.fx.Node):
            return ("slot", slots[a])
        if isinstance(a, (list, tuple)):
            return (type(a), [_Program._template(v, slots) for v in a])
        if isinstance(a, dict):
            return (dict, {k: _Program._template(v, slots) for k, v in a.items()})
        return ("const", a)

    def _step(self, node, slots):
        target = node.target
        args = self._template(node.args, slots)
        kwargs = self._template(node.kwargs, slots)
        slot = slots[node]
        if target in _SIZES:
            return ("python", _SIZES[target], args, kwargs, slot, None)
        if not isinstance(target, torch._ops.OpOverload):
            # operator.getitem, SymInt arithmetic: plain Python on the values
            return ("python", target, args, kwargs, slot, None)
        if (target._schema.is_mutable and node.args and isinstance(node.args[0], torch.fx.Node)
                and node.args[0].op == "placeholder"):
            self.mutated.append(_name(target))
        if target is torch.ops.aten.native_layer_norm.default and all(
                u.target is operator.getitem and u.args[1] == 0 for u in node.users):
            # an inference graph: nothing reads the mean and rstd, so they are
            # not computed (eight launches a layer norm)
            return ("lowered", _lower_nn.native_layer_norm_without_statistics, args, kwargs,
                    slot, target)
        lowering = _dispatch.lookup(target)
        if lowering is None:
            self.breaks.append(_name(target))
            return ("eager", target, args, kwargs, slot, target)
        if lowering.kind == RANDOM:
            self.random.append(_name(target))
        if lowering.raw:  # a lowering that takes the torch tensors as they are
            return ("raw", lowering.fn, args, kwargs, slot, target)
        fn = _view_or_copy(lowering.fn) if target in _VIEWS else lowering.fn
        if any(n in self.host_nodes for n in node.all_input_nodes):
            fn = _host_operands(fn)
        return ("lowered", fn, args, kwargs, slot, target)

    def run(self, inputs):
        values = [None] * self.nslots
        for i, x in zip(self.inputs, inputs):
            values[i] = x

        def fill(tpl):
            kind, v = tpl
            if kind == "slot":
                return values[v]
            if kind == "const":
                return v
            if kind is dict:
                return {k: fill(x) for k, x in v.items()}
            return kind(fill(x) for x in v)

        for kind, fn, args, kwargs, slot, op in self.steps:
            if kind == "const":
                values[slot] = fn
                continue
            a, k = fill(args), fill(kwargs)
            try:
                if kind == "lowered" or kind == "python":
                    out = fn(*a, **k)
                elif kind == "host":
                    with torch.no_grad():
                        out = fn(*a, **k)
                elif kind == "raw":
                    out = _tree(_to_dk, rewrap(fn(*_tree(_to_torch, a),
                                                  **{n: _tree(_to_torch, v) for n, v in k.items()})))
                else:
                    out = _eager(op, a, k)
            except NotImplementedByPlugin as e:  # named as eager dispatch names it
                raise _dispatch._plugin_gap(op, _tree(_to_torch, a), e) from None
            except NotImplementedError:
                if kind not in ("lowered", "raw"):
                    raise
                out = _eager(op, a, k)  # the lowering does not cover this call
            values[slot] = out
        return fill(self.output)


def _on_host(node):
    """True for an ATen node whose traced value is a CPU tensor and whose
    inputs are all CPU tensors or not tensors (no dk operand)."""
    if not isinstance(node.target, torch._ops.OpOverload):
        return False
    vals = [node.meta.get("val")] + [n.meta.get("val") for n in node.all_input_nodes]
    leaves = [v for x in vals for v in pytree.tree_leaves(x) if isinstance(v, torch.Tensor)]
    return (isinstance(vals[0], torch.Tensor) and bool(leaves)
            and all(v.device.type == "cpu" for v in leaves))


def _host_operands(fn):
    """``fn`` (a lowering) taking CPU tensors a host step computed, as eager
    dispatch passes them (``_dispatch._zero_d_operands``): a 0-d one is a
    number, unless its category (bool < integer < floating) is above every dk
    operand's, when it goes to their device as a 0-d tensor, which promotes as
    torch does; a larger one goes to the device."""
    def run(*args, **kwargs):
        dks = [x for x in args if type(x) is bridge.Tensor]
        top = max((_dk_category(x) for x in dks), default=2)
        dev = dks[0].device if dks else _device.dk_device(0)

        def operand(x):
            if type(x) is not torch.Tensor:
                return x
            if x.dim() == 0 and _dispatch._category(x.dtype) <= top:
                return x.item()
            return _device.from_host(x, dev)
        return fn(*[operand(x) for x in args], **{n: operand(v) for n, v in kwargs.items()})
    return run


def _dk_category(x):
    dt = x.dtype
    return 0 if dt == _dt.bool_ else 2 if dt.is_floating_point else 1


def _unfaked():
    """Real tensors while AOTAutograd's fake mode is on (it calls the
    compiler under it)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    return unset_fake_temporarily()


def _dk_device_of(node):
    """The DeviceKit device of ``node``'s traced value or of its inputs' (the
    first dk one), else ``dk:0``'s."""
    for n in (node, *node.all_input_nodes):
        for v in pytree.tree_leaves(n.meta.get("val")):
            if isinstance(v, torch.Tensor) and v.device.type == _device.BACKEND:
                return _device.dk_device(v.device)
    return _device.dk_device(0)


def _eager(op, a, k):
    """A graph break: ``op`` through the eager bridge (decomposition, the
    counted CPU fallback, or UnloweredOpError), counted by name."""
    with _stats.lock:
        _stats.break_calls[_name(op)] += 1
    out = _dispatch.dispatch(op, _tree(_to_torch, a), {n: _tree(_to_torch, v) for n, v in k.items()})
    return _tree(_to_dk, out)


def _shape_key(inputs):
    return tuple(tuple(x.shape) if type(x) is bridge.Tensor else x for x in inputs)


def _where_in_memory(x):
    return (x._storage_id, bridge.storage_offset(x), tuple(x.shape), tuple(x.strides),
            bridge.dtype_id(x))


def _alias(x):
    """A new tensor object over ``x``'s memory (a weak reference to it says
    whether anyone still holds it)."""
    return _same_tags(x, bridge.view(x, *_view_args(x)))


def _view_args(x):
    return tuple(x.shape), tuple(x.strides), bridge.storage_offset(x)


def _empty_args(x):
    return x.device, tuple(x.shape), bridge.dtype_id(x)


def _same_tags(x, y):
    """``y`` with the lowering tags of ``x``: layer norm's ``rstd`` carries the
    forward's eps (``_lower_nn``), without which its backward cannot be
    offered to the fused kernel and is decomposed (other rounding than op by
    op, and slower)."""
    eps = getattr(x, "_dk_eps", None)
    if eps is not None:
        y._dk_eps = eps
    return y


# Forward outputs saved for the backward are lent out of the forward graph's
# pool instead of copied out: id(view) -> (weak reference to the view, the
# _Graphed that lent it), an entry dropped when its view dies. (Keyed by id:
# a tensor's == is elementwise.)
_lent_by = {}


def _lend(view, lender, position):
    key = id(view)
    ref = weakref.ref(view, lambda _, key=key: _lent_by.pop(key, None))
    _lent_by[key] = (ref, lender, position)
    return ref


def _lent(x):
    """(the _Graphed that lent ``x``, the output position it lent it at), or None."""
    hit = _lent_by.get(id(x))
    return hit[1:] if hit is not None and hit[0]() is x else None


class _Graphed:
    """A device graph of one program for one input-shape signature.

    Activations: a forward graph's outputs that AOTAutograd saves for the
    backward (``program.saved``) are not copied out of the graph's pool:
    each replay lends views of them, and the backward graph captured over
    such views reads them where they are (no copy in either direction, two
    per activation before). The rule that keeps this exact: a forward replay
    would overwrite what it lent before, so while any view lent by the last
    replay is still held (its backward has not run: a second forward before
    the first's backward, ``retain_graph=True``), the call runs op by op
    instead, into new memory; and a backward replay reads lent memory only
    when this call's activations are those very views of a live graph, else
    it runs op by op (it never copies into another graph's pool)."""

    def __init__(self, program, inputs, device):
        self.program = program
        self.alive = True
        self.lent = ()  # weak references to the views the last replay lent
        # random ops: only DeviceKit's recording patches their Philox counters
        self.graph = graphs.Graph("recorded" if program.random else "auto")
        # the same DeviceKit tensor on the warm-up and capture calls: a
        # parameter or buffer, used in place; an activation lent by a forward
        # graph: read in place, through a view of its own (``borrowed``);
        # others get a static buffer
        self.static, self.borrowed = [], []
        for i, (x, w) in enumerate(zip(inputs, program.last_inputs)):
            lent = _lent(x) if type(x) is bridge.Tensor else None
            if lent is not None:
                self.static.append(_alias(x))
                self.borrowed.append((i, *lent, _where_in_memory(x)))
            elif type(x) is not bridge.Tensor or x is w:
                self.static.append(x)
            else:
                self.static.append(_static_copy(x))
        self.rng = _device.rng(device)
        origin = self.rng.offset
        try:
            with graphs.capture(self.graph, device):
                out = program.run(self.static)
        finally:
            used = self.rng.captured(origin)  # a capture draws nothing (see replay)
        self.philox = (origin, used)
        self.outputs = out
        flat = out if isinstance(out, (list, tuple)) else ()
        self.lends = {i for i in program.saved if i < len(flat) and type(flat[i]) is bridge.Tensor}
        # What a replay does, worked out once (it runs per call, and a
        # training graph has tens of inputs and outputs): which inputs are
        # copied into their static buffer (not a borrowed activation, and not
        # the very tensor captured: a parameter); and per output, the input
        # it is (a saved parameter: that call's input), a view to lend (an
        # activation saved for the backward) or a copy out of the pool.
        borrowed = {i for i, *_ in self.borrowed}
        # the caller's tensors the graph reads and writes in place (a model's
        # parameters): a replay is this graph's only for those very tensors
        # (Dynamo serves every instance of a model class from one program)
        self.in_place = [(i, s) for i, s in enumerate(self.static)
                         if type(s) is bridge.Tensor and s is inputs[i]]
        self.copy_in = [(i, s) for i, s in enumerate(self.static)
                        if type(s) is bridge.Tensor and i not in borrowed and s is not inputs[i]]
        position_of = {id(s): i for i, s in enumerate(self.static) if type(s) is bridge.Tensor}
        self.plan = [(_INPUT, position_of[id(y)]) if id(y) in position_of
                     else (_LEND, _view_args(y)) if i in self.lends
                     else (_COPY, _empty_args(y)) if type(y) is bridge.Tensor
                     else (_COPY, None)
                     for i, y in enumerate(flat)]

    def reset(self):
        self.alive = False
        self.graph.reset()

    def owns(self, inputs):
        """Whether ``inputs`` hold, where the capture used the caller's
        tensors in place, those very tensors (a replay for another model's
        parameters would read this model's, and an update write into them),
        and no activation lent by a graph other than the one this capture
        read its activations from."""
        for i, s in self.in_place:
            if inputs[i] is not s:
                return False
        for i, lender, *_ in self.borrowed:  # activations another graph lent: its call's
            lent = _lent(inputs[i])
            if lent is not None and lent[0] is not lender:
                return False
        return True

    def replayable(self, inputs):
        """False when a replay would overwrite activations still held, or
        would read activations other than this call's (see the class)."""
        for r in self.lent:
            if r() is not None:
                return False
        for i, lender, position, where in self.borrowed:
            x = inputs[i]
            if not lender.alive or type(x) is not bridge.Tensor:
                return False
            # the view that lender's last replay lent at that position is
            # where the capture read it (the cheap check); any other tensor
            # must be at the very same place in memory
            if _lent(x) != (lender, position) and _where_in_memory(x) != where:
                return False
        return True

    def run(self, inputs):
        for i, s in self.copy_in:
            x = inputs[i]
            if type(x) is bridge.Tensor:
                bridge.copy_into(s, x)
        if self.philox[1]:
            seed, shift = self.rng.replay_patch(*self.philox)
            self.graph.replay(seed=seed, offset_shift=shift)
        else:
            self.graph.replay()
        outputs = self.outputs
        if type(outputs) is not list and type(outputs) is not tuple:
            return _tree(self._pass_or_copy(inputs), outputs)
        # an output that is an input (a saved parameter) is that call's input;
        # an activation saved for the backward is lent (a view of the pool);
        # the others are copied out of the graph's pool
        lent, out = [], []
        for i, (y, (kind, a)) in enumerate(zip(outputs, self.plan)):
            if kind is _INPUT:
                out.append(inputs[a])
            elif kind is _LEND:
                view = _same_tags(y, bridge.view(y, *a))
                out.append(view)
                lent.append(_lend(view, self, i))
            elif a is not None:
                copy = bridge.empty(*a)
                bridge.copy_into(copy, y)
                out.append(_same_tags(y, copy))
            else:  # (not a tensor: a nested list, a number)
                out.append(_tree(self._pass_or_copy(inputs), y))
        self.lent = lent
        return type(outputs)(out)

    def _pass_or_copy(self, inputs):
        """For outputs outside the flat plan: an input of the capture is that
        call's input, another tensor is copied out of the pool."""
        inputs_of = {id(s): x for s, x in zip(self.static, inputs) if type(s) is bridge.Tensor}
        return lambda y: inputs_of[id(y)] if id(y) in inputs_of else _copy_out(y)


_INPUT, _LEND, _COPY = "input", "lend", "copy"  # (_Graphed.plan)


def _device_of(inputs):
    """The device of the call's first DeviceKit tensor, or None."""
    for x in inputs:
        if type(x) is bridge.Tensor:
            return x.device
    return None


def _in_capture(inputs):
    """Whether the device of the call's tensors is capturing a graph."""
    dev = _device_of(inputs)
    return dev is not None and dev.name in _graph_state.capturing


def _static_copy(x):
    out = bridge.empty(*_empty_args(x))
    bridge.copy_into(out, x)
    return _same_tags(x, out)


def _copy_out(x):
    return _static_copy(x) if type(x) is bridge.Tensor else x


class _Compiled:
    """The callable AOTAutograd gets for one FX graph (forward, backward or
    inference): DKTensors in, DKTensors out. ``saved``: the positions of a
    forward graph's outputs that AOTAutograd saves for the backward."""

    def __init__(self, gm, saved=()):
        self.program = _Program(gm)
        self.program.last_inputs = ()
        self.program.saved = tuple(saved)
        # shape key -> the _Graphed of that shape, one per set of in-place
        # tensors (see _Graphed.owns); at most GRAPHS_PER_SHAPE in all
        self.device_graphs = collections.OrderedDict()
        self.seen = set()   # shape keys run once (warm-up done)
        self.why_not = None
        self._counted = False  # why_not counted in the stats
        p = self.program
        if p.breaks:
            self.why_not = f"graph break ({', '.join(sorted(set(p.breaks)))})"
        elif p.host_steps:
            self.why_not = (f"computes on host tensors that are graph inputs "
                            f"({', '.join(sorted(set(p.host_steps)))}): a replay would keep "
                            f"their values from the capture")
        elif p.mutated:
            self.why_not = (f"writes into an input ({', '.join(sorted(set(p.mutated)))}), which a "
                            f"replay would write into its static copy")
        with _stats.lock:
            _stats.graphs += 1
            _stats.nodes += sum(1 for step in p.steps if step[0] in ("lowered", "raw"))
            for name in p.breaks:
                _stats.breaks[name] += 1

    def _no_capture(self, why):
        self.why_not, self._counted = why, True
        with _stats.lock:
            _stats.no_capture[why] += 1

    def __call__(self, *args):
        inputs = [_to_dk(a) for a in args]
        out = self._run(inputs)
        t = type(out)
        if t is list or t is tuple:  # (per call, tens of outputs: the flat case inline)
            return t([wrap(y) if type(y) is bridge.Tensor else _tree(_to_torch, y) for y in out])
        return _tree(_to_torch, out)

    def _run(self, inputs):
        p = self.program
        if _graph_state.capturing and _in_capture(inputs):
            # Inside a capture of the caller's (devicekit.torch.graph around
            # a step that calls the compiled model): the nodes' launches are
            # recorded into that graph, op by op; a replay of this graph's own
            # device graph would not be (captures do not nest).
            if p.random:
                from .graphs import refuse_random_in_native
                refuse_random_in_native(_device_of(inputs).name, p.random)
            with _stats.lock:
                _stats.in_capture += 1
            return p.run(inputs)
        if self.why_not is None and capture_enabled:
            key = _shape_key(inputs)
            g = None
            for c in self.device_graphs.get(key, ()):
                if c.owns(inputs):
                    g = c
                    break
            if g is None and key in self.seen and self._warmed_up(inputs, key):
                g = self._capture(inputs, key)
            if g is not None and g.replayable(inputs):
                with _stats.lock:
                    _stats.replays += 1
                return g.run(inputs)
            if g is not None:  # activations of an earlier call still held: op by op
                with _stats.lock:
                    _stats.not_replayed += 1
            self.seen.add(key)
        elif self.why_not is not None and not self._counted:
            self._counted = True
            with _stats.lock:
                _stats.no_capture[self.why_not] += 1
        with _stats.lock:
            _stats.op_by_op += 1
        p.last_inputs = list(inputs)
        return p.run(inputs)

    def _warmed_up(self, inputs, key):
        """Whether this shape's last op-by-op call had these in-place tensors
        (a capture uses in place only what the warm-up call had), where a
        graph of the shape for other ones exists."""
        others = self.device_graphs.get(key)
        if not others:
            return True
        last = self.program.last_inputs
        return len(last) == len(inputs) and all(inputs[i] is last[i]
                                                for i, _ in others[0].in_place)

    def _capture(self, inputs, key):
        device = _device_of(inputs)
        if device is None:
            self._no_capture("no tensor inputs")
            return None
        try:
            g = _Graphed(self.program, inputs, device)
        except DeviceKitError as e:
            self._no_capture(f"capture refused: {type(e).__name__}: {e}")
            return None
        finally:
            self.program.last_inputs = ()  # (the warm-up's tensors: not kept alive)
        if sum(len(v) for v in self.device_graphs.values()) >= GRAPHS_PER_SHAPE:
            oldest_key, oldest = next(iter(self.device_graphs.items()))
            oldest.pop(0).reset()
            if not oldest:
                del self.device_graphs[oldest_key]
        self.device_graphs.setdefault(key, []).append(g)
        with _stats.lock:
            _stats.captured += 1
            _stats.random_graphs += bool(self.program.random)
        return g


#: False: every call runs op by op (no device graphs); for comparisons and debugging.
capture_enabled = True

#: False: the Dynamo graph is lowered as written, without ``_rewrite``'s
#: fused-op rewrites; for comparisons and debugging.
rewrites_enabled = True


def _compiler(gm, example_inputs):
    from torch._functorch.aot_autograd import make_boxed_func
    return make_boxed_func(_Compiled(gm))  # AOTAutograd's convention: one list of inputs


def _forward_compiler(gm, example_inputs):
    """The forward graph of a training graph: as ``_compiler``, knowing which
    outputs are activations saved for the backward (AOTAutograd's metadata;
    none where this torch does not give it: they are then copied out)."""
    from torch._functorch.aot_autograd import make_boxed_func
    saved = ()
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None)
    try:
        nout = len(next(n for n in gm.graph.nodes if n.op == "output").args[0])
        saved = range(nout)[meta.tensors_saved_for_backwards_slice]
    except (AttributeError, AssertionError, TypeError, StopIteration):
        saved = ()
    return make_boxed_func(_Compiled(gm, saved))


_decomps = None


def decompositions():
    """The bridge's decomposition choices for AOTAutograd: torch._decomp's
    decomposition of every op the lowering table does not lower."""
    global _decomps
    if _decomps is None:
        from torch._decomp import decomposition_table
        _decomps = {op: fn for op, fn in decomposition_table.items()
                    if isinstance(op, torch._ops.OpOverload) and _dispatch.lookup(op) is None}
    return _decomps


def backend(gm, example_inputs, **kwargs):
    """The Dynamo backend ``"devicekit"``: ``torch.compile(model, backend="devicekit")``."""
    from torch._dynamo.backends.common import aot_autograd

    # Dynamo hands the real inputs; AOTAutograd would take a DKTensor (a
    # wrapper subclass with no inner tensors) for a fake one, so each is
    # fakified here, as the plain dk tensor it traces as (_device.DKTensor).
    ctx = torch._guards.TracingContext.try_get()
    fake_mode = torch._guards.detect_fake_mode(example_inputs)
    if fake_mode is not None:
        known = ctx.tensor_to_context if ctx is not None else {}
        example_inputs = [fake_mode.from_tensor(x, symbolic_context=known.get(x))
                          if isinstance(x, DKTensor) else x for x in example_inputs]
    if rewrites_enabled:
        done = _rewrite.rewrite(gm)
        with _stats.lock:
            _stats.rewrites.update(done)
    aot = aot_autograd(fw_compiler=_forward_compiler, bw_compiler=_compiler,
                       inference_compiler=_compiler, decompositions=decompositions())
    return aot(gm, example_inputs, **kwargs)


_frames_skipped = False


def skip_devicekit_frames():
    """Puts DeviceKit's own files on Dynamo's skip list, once. At a graph
    break inside a compiled function the unlowered call runs eagerly with
    Dynamo's frame hook still set, so every Python frame it enters is a
    candidate for compiling: the bridge's lowerings (``ctc_loss``'s, which
    read host lengths, breaks the graph) would be traced as graphs of their
    own, with host tensors, and handed to this backend. DeviceKit's frames are
    never user code: skipped, they run as plain Python. Called where Dynamo is
    loaded already: the entry point (``_dynamo_entry``), :func:`register`."""
    global _frames_skipped
    if not _frames_skipped:
        from torch._dynamo import trace_rules
        trace_rules.add("devicekit")
        _frames_skipped = True


def register():
    """Registers ``backend`` with Dynamo as ``"devicekit"`` (an installed
    DeviceKit does it through the ``torch_dynamo_backends`` entry point)."""
    from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS, register_backend
    skip_devicekit_frames()
    if "devicekit" not in _COMPILER_FNS:
        _BACKENDS.pop("devicekit", None)
        register_backend(name="devicekit")(backend)
