"""Capture eager torch code on ``dk`` into a device graph; replay it with no Python per op.

In the spirit of ``torch.cuda.CUDAGraph`` / ``torch.cuda.graph``::

    x = torch.zeros(8, 64, device="dk:0")         # static input, made before the capture
    model(x)                                      # warm-up: eager, fills the caches
    g = devicekit.torch.DKGraph()
    with devicekit.torch.graph(g):                # dk:0 unless graph(g, device=...)
        y = model(x)                              # recorded, not run
    x.copy_(new_values)                           # update the input in place
    g.replay()                                    # y now holds model(new_values)

The ATen ops of the block go through the bridge as in eager mode
(``__torch_dispatch__``, the lowering table); the DeviceKit launches they
make are recorded into a ``devicekit.graphs.Graph`` (the plugin's graphs part,
or DeviceKit's own recording: ``mode`` as in ``devicekit.graphs.Graph``), and
``replay()`` issues them again from C++: no Python, no dispatch and no torch
per op. Results are bitwise those of eager ``dk`` (the same kernels, the same
arguments, the same order).

What is made inside the capture (``y``, the temporaries, the tensors autograd
saves, ``.grad`` tensors a captured backward creates) lives in the graph's
private pool and holds its values after each replay; what the bridge caches
during the capture (scalar constants) is kept alive by the graph. Tensors
made before the capture are the caller's: keep them alive and update them in
place. Python state is not replayed: a replay repeats the device work only
(a step that advances a counter must keep it in a dk tensor, updated in
place, as a decode loop's cache position).

Refused inside a capture, with :class:`devicekit.InvalidArgumentError`
naming the ATen op (and the torch call that reaches it), after which the
capture is discarded and the device runs eagerly again:

- anything that needs the host: ``.item()``, ``bool(t)``, ``.tolist()``,
  ``.cpu()``, ``.numpy()``, printing, a data-dependent branch, a copy from a
  CPU tensor (``torch.tensor(..., device="dk")`` included);
- an op run by the CPU fallback (``devicekit.torch.fallback("cpu")``): it copies
  its operands to the host;
- a random op (dropout in training mode, ``torch.rand``) in a capture made
  with ``DKGraph(mode="native")``: the plugin's graph would replay its Philox
  counters as captured, the same numbers every time.

Random ops in the default ``mode="auto"`` (or ``"recorded"``) draw fresh
numbers per replay, as CUDA graphs do. On a plugin with the graphs part an
"auto" capture keeps DeviceKit's recording of its launches beside the
plugin's capture and, when it ends, keeps the recording if random ops ran
(``DKGraph.mode == "recorded"``, ``DKGraph.auto_recorded``), else the
plugin's graph (``"native"``); see ``devicekit.graphs``. Then: the capture
consumes nothing from the device's Philox stream (the counters its ops took
are given back), and each ``replay()`` takes the capture's whole consumption
from the stream in one host step, passing the seed and offset shift to the
C++ replay, which patches every random launch. So N replays
give, bitwise, what N eager runs from the same ``torch.manual_seed`` give.

A backward pass can be captured (``loss.backward()`` inside the block): the
autograd engine's ops reach the same dispatch. A refusal inside a captured
backward is raised by ``capture_end()`` where the refused op can return a
placeholder (an exception leaving a dk op inside torch's backward is not
safe; see ``_dispatch.dispatch``), else (a scalar read) at once.
"""

from __future__ import annotations

import contextlib
import threading

import torch
from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                   register_optimizer_step_pre_hook)

from .. import graphs as _graphs
from ..errors import DeviceKitError, InvalidArgumentError
from . import _device, _dispatch
from ._device import DKTensor

__all__ = ["DKGraph", "graph", "make_graphed_callables"]

# ATen op -> the torch calls a user writes that reach it (for the error)
_HOST_CALLS = {
    "aten._local_scalar_dense": "Tensor.item(), bool(t), int(t), float(t), a value-dependent "
                                "branch",
    "aten._to_copy": "Tensor.cpu(), Tensor.to('cpu'), Tensor.numpy(), Tensor.tolist(), or a "
                     "dk tensor made from host data",
    "aten.copy_": "Tensor.copy_() between a CPU tensor and a dk tensor",
    "aten.nonzero": "torch.nonzero(), a boolean-mask index (its size depends on the data)",
    "aten.index": "a boolean-mask index (its size depends on the data)",
    "aten.masked_select": "a boolean-mask index (its size depends on the data)",
    "aten.unique": "torch.unique() (its size depends on the data)",
}

_lock = threading.Lock()
_active = {}  # DeviceKit device name -> the DKGraph capturing it
_eager_dispatch = None  # the bridge's dispatch while a capture has its own hooked in
_hooked = None  # the capture's dispatch (hooked in while a capture is open)


def _aten_name(func):
    return f"aten.{func._schema.name.split('::')[1]}"


def _op_name(func):
    return f"{_aten_name(func)}.{func._overloadname}"


def _refusal(msg):
    """The error of a refused capture. Marked, so that the outer ATen ops of
    a decomposition (which come back through the dispatch) pass the
    innermost op's error on unchanged."""
    err = InvalidArgumentError(msg)
    err.capture_refused = True
    return err


def _capturing_dispatch(inner):
    """The dispatch the bridge uses while a ``dk`` device captures: ``inner``
    (the eager dispatch), with random ops refused and host work named."""

    def capturing(func, args, kwargs):
        g = _target(args, kwargs)
        if g is None:
            return inner(func, args, kwargs)
        rng = _device.rng(g.dk_device)
        drawn = rng.offset
        try:
            out = inner(func, args, kwargs)
        except Exception as e:
            if getattr(e, "capture_refused", False):
                return g._refuse(e, func, args, kwargs)
            if not g._capturing:
                raise
            # inside torch's backward the eager dispatch keeps the op's own
            # error for later (_dispatch._pending) and makes a placeholder,
            # which a capture refuses in turn: the kept error is the cause
            cause = _dispatch._pending[-1] if _dispatch._pending else e
            if not _is_capture_refusal(cause) and not _is_capture_refusal(e):
                raise  # an error of the op itself, not of the capture
            if cause is not e:
                _dispatch._pending.pop()
            calls = _HOST_CALLS.get(_aten_name(func))
            reached = f" (reached by {calls})" if calls else ""
            err = _refusal(
                f"devicekit.torch.graphs: {_op_name(func)}{reached} on {g.torch_device} needs "
                f"the host, but the device is capturing a graph, which records device work "
                f"only. The capture is discarded. Hint: run the code once before capturing (a "
                f"warm-up fills the bridge's caches, such as convolution's index tensors), "
                f"keep the step on the device (argmax, in-place updates of static dk "
                f"tensors) and read results after replay(). "
                f"DeviceKit said: {cause}")
            return g._refuse(err, func, args, kwargs, cause=cause)
        if rng.offset != drawn and g._capturing and g.mode == "native":
            return g._refuse(_random_refusal(func, g), func, args, kwargs)
        return out

    return capturing


_RANDOM_HINT = ("The capture is discarded. Hint: capture with DKGraph() or "
                "DKGraph(mode='recorded') (DeviceKit's recording draws fresh numbers per "
                "replay), or capture in eval mode (no dropout).")


def _random_refusal(func, g):
    return _refusal(
        f"devicekit.torch.graphs: {_op_name(func)} draws random numbers, but "
        f"{g.torch_device} is capturing a native graph (the plugin's graphs part), which "
        f"replays the op's Philox seed and offset as captured: every replay would repeat the "
        f"same numbers. {_RANDOM_HINT}")


def refuse_random_in_native(device_name, ops):
    """A ``torch.compile``'d graph with random ops (``ops``) run inside a
    capture of ``device_name``: refused where the capture is native (its
    lowered nodes do not pass the capturing dispatch, which refuses them for
    eager code). Inside torch's backward the refusal waits for capture_end."""
    g = _active.get(device_name)
    if g is None or not g._capturing or g.mode != "native":
        return
    err = _refusal(
        f"devicekit.torch.graphs: a torch.compile'd graph with random ops "
        f"({', '.join(sorted(set(ops)))}) runs inside a capture on {g.torch_device} made with "
        f"DKGraph(mode='native'): the plugin's graph would replay their Philox counters as "
        f"captured, the same numbers every time. {_RANDOM_HINT}")
    g.reset()  # the device runs eagerly again
    if torch._C._current_autograd_node() is not None:
        g._error = g._error or err  # (an exception inside torch's backward is not safe)
        return
    raise err


def _is_capture_refusal(e):
    text = str(e)
    return isinstance(e, DeviceKitError) and (
        "devicekit.graphs.capture" in text
        or ("CPU fallback" in text and "capturing a graph" in text))


def _target(args, kwargs):
    """The DKGraph capturing the device of the first dk tensor among the
    operands (or of a factory's ``device=``), or None."""
    if not _active:
        return None
    for a in (*args, *kwargs.values()):
        dev = None
        if type(a) is DKTensor:
            dev = a._dk.device
        elif isinstance(a, (list, tuple)):
            for v in a:
                if type(v) is DKTensor:
                    dev = v._dk.device
                    break
        elif isinstance(a, torch.device) and a.type == _device.BACKEND:
            dev = _device.dk_device(a)
        if dev is not None:
            return _active.get(dev.name)
    return None


class DKGraph:
    """A capture of eager torch work on one ``dk`` device (see the module docstring).

    ``mode``: "auto" (the plugin's graphs part when it has one and no random
    op ran in the capture, else DeviceKit's recording), "native" or
    "recorded", as ``devicekit.graphs.Graph``."""

    def __init__(self, mode: str = "auto"):
        self._graph = _graphs.Graph(mode)
        self._mode = mode
        self._capturing = False
        self._error = None  # a refusal inside a captured backward, raised by capture_end
        self._philox = None  # (origin, used) of the device's Philox stream; see replay
        self.torch_device = self.dk_device = None

    # -- what was captured --
    @property
    def mode(self) -> str:
        return self._graph.mode

    @property
    def auto_recorded(self) -> bool:
        """An "auto" capture that became DeviceKit's recording for its random ops."""
        return self._graph.auto_recorded

    @property
    def calls(self) -> int:
        """Device calls (kernels, fused kernels, device copies) one replay issues."""
        return self._graph.calls

    @property
    def captured(self) -> bool:
        return self._graph.captured

    @property
    def device_graph(self):
        """The ``devicekit.graphs.Graph`` underneath."""
        return self._graph

    # -- capture --
    def capture_begin(self, device=None):
        """Start recording the work of ``device`` (a ``dk`` torch device, an
        index, or None: ``dk:0``). Prefer :func:`graph`."""
        global _eager_dispatch, _hooked
        if self._capturing:
            raise InvalidArgumentError("devicekit.torch.DKGraph.capture_begin: this graph is "
                                       "capturing already (captures do not nest)")
        if device is None or isinstance(device, int):
            tdev = torch.device(_device.BACKEND, device or 0)
        else:
            tdev = torch.device(device)
        dev = _device.dk_device(tdev)
        with _lock:
            if dev.name in _active:
                raise InvalidArgumentError(
                    f"devicekit.torch.DKGraph.capture_begin: {tdev} (DeviceKit {dev.name}) is "
                    f"capturing another graph already; captures do not nest")
            if self._graph.captured:
                self._graph.reset()  # as CUDAGraph: capturing again replaces the recording
            self._graph.capture_begin(dev)
            _active[dev.name] = self
            self._capturing, self._error = True, None
            self._philox = (_device.rng(dev).offset, 0)
            self.torch_device, self.dk_device = tdev, dev
            if len(_active) == 1:  # the first capturing device swaps the dispatch in
                _eager_dispatch = _device._dispatch
                _hooked = _capturing_dispatch(_eager_dispatch)
                _device.hook_dispatch(_hooked)

    def _stop(self):
        global _eager_dispatch, _hooked
        with _lock:
            dev = _device.dk_device(self.torch_device)
            if _active.get(dev.name) is self:
                del _active[dev.name]
                if not _active and _eager_dispatch is not None:  # the last one swaps it out
                    if _device._dispatch is _hooked:  # (else devicekit.trace swapped it since)
                        _device.hook_dispatch(_eager_dispatch)
                    _eager_dispatch = _hooked = None
            self._capturing = False

    def capture_end(self):
        """Stop recording. Raises what a captured backward pass refused (the
        capture is then discarded) or the plugin's error."""
        if not self._capturing:
            if self._error is not None:
                err, self._error = self._error, None
                raise err
            raise InvalidArgumentError("devicekit.torch.DKGraph.capture_end: no capture is open "
                                       "(capture_begin first)")
        self._stop()
        origin = self._philox[0]
        self._philox = (origin, _device.rng(self.dk_device).captured(origin))
        try:
            self._graph.capture_end()
        except BaseException:
            self._graph.reset()
            raise
        if _dispatch._pending:  # an error inside the captured backward
            self._graph.reset()
            raise _dispatch._pending.pop(0)

    def replay(self):
        """Run the captured work again on the device (asynchronously, as any dk
        op). A capture that drew random numbers takes its counters from the
        device's Philox stream now (see the module docstring)."""
        if self._philox is None or self._philox[1] == 0 or not self._graph.captured:
            self._graph.replay()
            return
        seed, shift = _device.rng(self.dk_device).replay_patch(*self._philox)
        if self._graph.mode == "native":  # counters taken but no random launch (empty draws)
            self._graph.replay()
            return
        self._graph.replay(seed=seed, offset_shift=shift)

    def reset(self):
        """Discard the capture (or the recording) and give the graph's pool back."""
        if self._capturing:
            self._stop()
            _device.rng(self.dk_device).captured(self._philox[0])  # nothing was drawn
        self._philox = None
        self._graph.reset()

    # -- refusals (called by the capturing dispatch) --
    def _refuse(self, err, func, args, kwargs, cause=None):
        if self._capturing:
            self.reset()  # the device runs eagerly again
        if torch._C._current_autograd_node() is not None:
            # An exception leaving a dk op inside torch's backward may abort the
            # process (see _dispatch.dispatch): the op returns a placeholder,
            # made eagerly now that the capture is discarded, and capture_end
            # raises the refusal.
            self._error = self._error or err
            try:
                return _dispatch._placeholder(func, args, kwargs)
            except Exception:
                pass  # (a scalar op has no placeholder: the refusal leaves the backward)
        if cause is not None:
            raise err from cause
        raise err


def _capturing_graph_of(optimizer):
    """The DKGraph capturing the device of one of the optimizer's parameters, or None."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            g = _active.get(p._dk.device.name) if type(p) is DKTensor else None
            if g is not None and g._capturing:
                return g
    return None


_state_before = {}  # id(optimizer) -> [(parameter, its state's keys)] over a captured step


def _optimizer_step_check(optimizer, args, kwargs):
    """A torch.optim step inside a capture: refused where the optimizer keeps
    its step count on the host (``capturable=False``: Adam, AdamW, RMSprop
    ...), whose bias corrections would then be fixed at the capture's values
    in every replay, silently (torch refuses the same under CUDA graphs).
    Else the state's keys are noted for ``_optimizer_step_after``."""
    if not _active:
        return
    g = _capturing_graph_of(optimizer)
    if g is None:
        return
    if not all(group.get("capturable", True) for group in optimizer.param_groups):
        g.reset()  # the device runs eagerly again
        raise _refusal(
            f"devicekit.torch.graphs: {type(optimizer).__name__}.step() with "
            f"capturable=False on {g.torch_device}, which is capturing a graph: the "
            f"optimizer keeps its step count on the host, so every replay would repeat "
            f"the capture's bias corrections. The capture is discarded. Hint: make the "
            f"optimizer with capturable=True (its step count then lives on the device).")
    _state_before[id(optimizer)] = [(p, set(optimizer.state.get(p, ())))
                                    for group in optimizer.param_groups for p in group["params"]]


def _optimizer_step_after(optimizer, args, kwargs):
    """A captured step that created optimizer state (a first step: SGD's
    momentum buffers, Adam's moments) is refused: the creation is a host
    decision, so every replay would create it afresh (Adam's moments zeroed,
    the momentum reset to the gradient) and the optimizer would never
    accumulate, silently. The new state is removed again."""
    before = _state_before.pop(id(optimizer), None)
    if before is None:
        return
    made = {}
    for p, keys in before:
        new = set(optimizer.state.get(p, ())) - keys
        if new:
            made.update(dict.fromkeys(sorted(new)))
            state = optimizer.state[p]
            for k in new:
                del state[k]
            if not state:
                del optimizer.state[p]
    if not made:
        return
    g = _capturing_graph_of(optimizer)
    if g is not None:
        g.reset()  # the device runs eagerly again
    raise _refusal(
        f"devicekit.torch.graphs: {type(optimizer).__name__}.step() inside a capture made "
        f"the optimizer's state ({', '.join(made)}): a first step, which every replay would "
        f"repeat (the state made afresh each time, never accumulated). The capture is "
        f"discarded and that state removed. Hint: run the step eagerly at least once before "
        f"capturing (a warm-up), as with CUDA graphs.")


register_optimizer_step_pre_hook(_optimizer_step_check)  # (no-ops unless capturing)
register_optimizer_step_post_hook(_optimizer_step_after)


@contextlib.contextmanager
def graph(dk_graph: DKGraph, device=None):
    """Capture the ``dk`` work of the block into ``dk_graph`` (``dk:0`` unless
    ``device`` says otherwise). An exception inside the block discards the
    capture and propagates."""
    dk_graph.capture_begin(device)
    try:
        yield dk_graph
    except BaseException:
        dk_graph.reset()
        raise
    dk_graph.capture_end()


def make_graphed_callables(fn, sample_args, *, warmup=1, mode="auto"):
    """``fn`` (a module or function of dk tensors) captured once, forward
    only, as a function of the same positional tensors.

    ``sample_args`` (dk tensors) fix the shapes, dtypes and device; ``fn``
    runs ``warmup`` times eagerly on copies of them (under ``torch.no_grad``),
    then is captured on those copies (the graph's static inputs). Each call
    copies its arguments into the static inputs, replays, and returns the
    static outputs: the same tensors every call, overwritten by the next call
    (clone what you keep). Training through a graphed callable is not
    supported: use :func:`graph` around forward and backward instead."""
    sample_args = tuple(sample_args)
    if not sample_args:
        raise InvalidArgumentError("devicekit.torch.make_graphed_callables: sample_args is empty")
    for i, a in enumerate(sample_args):
        if type(a) is not DKTensor:
            raise InvalidArgumentError(
                f"devicekit.torch.make_graphed_callables: sample_args[{i}] is a "
                f"{getattr(a, 'device', type(a).__name__)} value; every argument must be a dk "
                f"tensor (the graph's static inputs live on the device)")
    device = sample_args[0].device
    static = tuple(a.detach().clone() for a in sample_args)
    g = DKGraph(mode)
    with torch.no_grad():
        for _ in range(warmup):
            fn(*static)
        with graph(g, device):
            out = fn(*static)

    def graphed(*args):
        if len(args) != len(static):
            raise InvalidArgumentError(
                f"devicekit.torch.make_graphed_callables: the graphed callable takes "
                f"{len(static)} tensor(s), got {len(args)}")
        for i, (s, a) in enumerate(zip(static, args)):
            if a.shape != s.shape or a.dtype != s.dtype:
                raise InvalidArgumentError(
                    f"devicekit.torch.make_graphed_callables: argument {i} is "
                    f"{tuple(a.shape)} {a.dtype}; the graph was captured for "
                    f"{tuple(s.shape)} {s.dtype} (capture another for other shapes)")
        with torch.no_grad():
            for s, a in zip(static, args):
                if a is not s:
                    s.copy_(a)
        g.replay()
        return out

    graphed.graph = g
    graphed.static_inputs = static
    return graphed
