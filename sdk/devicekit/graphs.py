"""Capture DeviceKit work once, replay it with one plugin call.

In the spirit of ``torch.cuda.CUDAGraph`` / ``torch.cuda.graph``::

    x = devicekit.ones(64, 64, device="cpu:0")      # static input, allocated before
    y = f(x)                                         # warm-up: eager, fills caches
    g = devicekit.graphs.Graph()
    with devicekit.graphs.capture(g, "cpu:0"):
        y = f(x)                                     # recorded, not run
    x.copy_(new_values)                              # update the input in place
    g.replay()                                       # y now holds f(new_values)

Inside the ``with`` block every op the device runs is recorded instead of
run: by the plugin's graphs part (device API 1.5) when it has one, else by
DeviceKit itself (``Graph(mode="recorded")`` asks for that on any plugin:
the SDK keeps a copy of every kernel launch's arguments and every
device-to-device copy, and ``replay()`` issues them again from C++, with no
Python and no dispatch per op). ``replay()`` launches the whole recording on
the device's stream (or ``replay(stream)`` on another
stream of the device, ordered after the earlier work and before the later
work of the default stream). Results are bitwise those of eager execution: the
same kernels run with the same arguments. The tensors made inside the capture
(``y``) hold their values only after a replay (the capture runs nothing).

Memory: the tensors made inside the capture (``y`` and every temporary)
come from a pool that belongs to the graph; their blocks are never handed to
another tensor while the graph lives, even after Python drops them, because
each replay writes them again. Tensors made before the capture (``x``) are
the caller's: keep them alive and update them in place, never rebind them.
A warm-up run before the capture is recommended (it fills DeviceKit's
constant cache; a constant first made inside a capture only holds its value
after the first replay and then belongs to the graph).

Inside a capture, anything that needs the host raises
:class:`devicekit.InvalidArgumentError` naming the call (``Tensor.item()``,
``numpy()``, ``tolist()``, ``bool(t)``, a synchronize, a copy from or to host
memory, so a shape- or value-dependent branch cannot be recorded); the capture
is then discarded. Captures do not nest. ``Graph(mode="native")`` on a plugin
without the graphs part raises :class:`devicekit.NotImplementedByPlugin`.

Random ops (``random_bits``, ``random_uniform`` and what is built on them:
``ops.rand``, ``randn``, ``randint``) take their Philox seed and offset as
host attributes. In a recorded graph each is marked, and
``replay(seed=s, offset_shift=k)`` runs every one with seed ``s`` and offset
``(captured offset + k) mod 2**64``: the C++ replay patches a copy of each
launch's attributes (no Python per op), so the numbers are bitwise those an
eager call with the shifted counters draws. Without ``seed``/``offset_shift``
a replay repeats the captured numbers (what an explicit seed asks for). A
native graph (``mode="native"``, or ``"auto"`` on a plugin with the graphs
part) cannot patch them: it always repeats them, and ``replay(seed=...)`` or a
non-zero ``offset_shift`` on it raises :class:`devicekit.InvalidArgumentError`.
So ``mode="auto"`` on a plugin with the graphs part records a copy of every
call beside the plugin's capture (a shadow recording, in C++) and, when the
capture ends, keeps the plugin's graph if the capture holds no random launch,
else the recording: ``Graph.mode`` is then "recorded" and
``Graph.auto_recorded`` True, and ``replay(seed=..., offset_shift=...)`` works
as in mode "recorded". ``devicekit.torch`` graphs and ``torch.compile`` drive
the shift from the device's Philox stream (and refuse a random op in a capture
made with ``mode="native"``).
"""

from __future__ import annotations

import contextlib
import numbers

from . import _core, _graph_state
from ._plugins.registry import device as _device
from .errors import InvalidArgumentError

__all__ = ["Graph", "capture", "is_available"]


def is_available(device=None) -> bool:
    """Whether the device's plugin has the graphs part (native graphs). Every
    device can capture: without the part DeviceKit records the work itself."""
    return "graphs" in _device(device).plugin.parts


class Graph:
    """A captured sequence of device work; see the module docstring."""

    __slots__ = ("_g", "_mode")

    MODES = ("auto", "native", "recorded")

    def __init__(self, mode: str = "auto"):
        """``mode``: "auto" (the plugin's graphs part when it has one and the
        capture holds no random launch, else DeviceKit's recording), "native"
        (the plugin's part; an error without it) or "recorded" (DeviceKit's
        recording on any plugin)."""
        if mode not in self.MODES:
            raise InvalidArgumentError(
                f"devicekit.graphs.Graph: mode is {mode!r}; expected one of {self.MODES}")
        self._g = _core.Graph()
        self._mode = mode

    @property
    def mode(self) -> str:
        """How the capture is recorded: "native" or "recorded" once captured,
        else the mode asked for ("auto" also while an auto capture on a plugin
        with the graphs part is open: it ends as either)."""
        return self._g.mode or self._mode

    @property
    def auto_recorded(self) -> bool:
        """True for an "auto" capture on a plugin with the graphs part that
        became DeviceKit's recording because it holds random launches (which
        only the recording can patch per replay)."""
        return self._g.auto_recorded

    @property
    def calls(self) -> int:
        """The calls one replay issues (kernels, fused kernels, device copies)."""
        return self._g.calls

    @property
    def recorded_calls(self) -> int:
        """The calls DeviceKit's recording holds (0 for a native graph)."""
        return self._g.recorded_calls

    @property
    def random_calls(self) -> int:
        """The random launches (random_bits, random_uniform) a recorded graph
        patches per replay (0 for a native graph, which cannot)."""
        return self._g.random_calls

    @property
    def device(self):
        """The device it was captured on (None before a capture)."""
        return self._g.device

    @property
    def captured(self) -> bool:
        return self._g.captured

    def capture_begin(self, device=None):
        """Start recording the device's work (prefer :func:`capture`)."""
        dev = _device(device)
        self._g.begin_capture(dev, self._mode)
        _graph_state.capturing.add(dev.name)

    def capture_end(self):
        """Stop recording; raises the plugin's error if the capture was invalidated."""
        dev = self._g.device
        try:
            self._g.end_capture()
        finally:
            if dev is not None:
                _graph_state.capturing.discard(dev.name)

    def replay(self, stream=None, *, seed=None, offset_shift=0):
        """Launch the recorded work on the default stream, or on ``stream``
        (a :meth:`Device.stream` of the same device). ``seed`` and
        ``offset_shift`` (ints in [0, 2**64)) patch the random launches of a
        recorded graph: each runs with ``seed`` (default: its captured one) and
        offset ``(captured offset + offset_shift) mod 2**64``."""
        for name, v in (("seed", seed), ("offset_shift", offset_shift)):
            if v is None and name == "seed":
                continue
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not 0 <= v < 2**64:
                raise InvalidArgumentError(
                    f"Graph.replay: {name} must be an int in [0, 2**64), got {v!r}")
        if (seed is not None or offset_shift) and self.mode == "native":
            raise InvalidArgumentError(
                "Graph.replay: seed/offset_shift patch the random launches of a recorded graph; "
                "this one is native (the plugin's graph replays them as captured). Capture "
                "with mode='recorded' or 'auto' to draw fresh numbers per replay")
        if stream is None:
            self._g.replay(0, seed, int(offset_shift))
        else:
            if self._g.device is not None and stream.device.name != self._g.device.name:
                raise InvalidArgumentError(
                    f"Graph.replay: the stream belongs to device {stream.device.name}, the "
                    f"graph to {getattr(self._g.device, 'name', None)}")
            self._g.replay(stream._handle, seed, int(offset_shift))

    def reset(self):
        """Destroy the recording and give its pool back; the Graph can capture again.
        Launches already queued still run (the plugin frees the graph after them)."""
        dev = self._g.device
        try:
            self._g.destroy()
        finally:
            if dev is not None:
                _graph_state.capturing.discard(dev.name)


@contextlib.contextmanager
def capture(graph: Graph, device=None):
    """Record the device's work inside the block into ``graph``.

    An exception inside the block discards the capture and propagates."""
    graph.capture_begin(device)
    try:
        yield graph
    except BaseException:
        graph.reset()
        raise
    graph.capture_end()
