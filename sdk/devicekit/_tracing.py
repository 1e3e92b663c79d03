"""What the modules that report to ``devicekit.trace`` share while a trace
records: the flag they test and the spans they add. A leaf (it imports
nothing of devicekit), so that ``_fused``, ``distributed`` and
``devicekit.torch`` can report without importing ``devicekit.trace``.

When no trace records, ``on`` is False and nothing else here is used: the
SDK's C++ hooks test their own flag (``_core._trace_on()``), and the Python
ones either test ``on`` once or are swapped in only while a trace records
(``hooks``).
"""

import threading
import time

on = False
# (category, name, native thread id, t0 ns, t1 ns, args): the Python-side spans
# (an ATen op, an SDK composite, a collective). Times are CLOCK_MONOTONIC ns,
# the clock the SDK core's spans use (std::chrono::steady_clock).
spans = []
# (install, uninstall) pairs a layer above registers (devicekit.torch): the
# trace calls install() at start and uninstall() at stop.
hooks = []
_lock = threading.Lock()
now_ns = time.monotonic_ns


def add(category, name, t0, args=None):
    """Record a span from ``t0`` (``now_ns()``) to now on this thread."""
    t1 = time.monotonic_ns()
    with _lock:
        spans.append((category, name, threading.get_native_id(), t0, t1, args or {}))
