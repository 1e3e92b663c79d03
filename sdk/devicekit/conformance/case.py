"""What a conformance case is, what a section is, and how one case runs.

A *case* is one named check (``ops/add/float32/bcast``) with a function
``fn(ctx)`` that raises on failure. A *section* (runtime, ops, rng, errors;
later composites, fused, autograd) is one module in
``devicekit.conformance_tests`` that defines ``SECTION`` and ``cases(target)``.
The CLI runner (in worker processes) and the pytest entry both run cases with
:func:`run_case`, so there is one suite and one way to classify outcomes.
"""

import re
import time
import traceback
import zlib
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Set

# Never merged: each one is counted and shown on its own.
PASS, FAIL, ERROR, CRASH, NOT_IMPLEMENTED, SKIPPED = (
    "pass", "fail", "error", "crash", "not-implemented", "skipped")
OUTCOMES = (PASS, FAIL, ERROR, CRASH, NOT_IMPLEMENTED, SKIPPED)
LEVELS = ("core", "full")

#: The environment variable that numbers devicekit.torch's devices (its
#: ``_device.ORDER_ENV``, read once per process): the conformance and models
#: workers set it to the device under test, so it is ``dk:0`` (torch's autograd
#: serves dk:0 only). Spelled here, in a leaf, so the workers need not import torch.
TORCH_DEVICES_ENV = "DEVICEKIT_TORCH_DEVICES"


class Skip(Exception):
    """Raised by a case that cannot apply to this device; the message is the reason."""


@dataclass(frozen=True)
class Section:
    """One part of the suite. ``available(target)`` returns None when the
    section can run, else the reason it cannot (e.g. the DeviceKit API it
    checks is not installed): its cases are then not generated, and the report
    lists the section as unavailable with that reason. ``min_cases(target)``
    is the section's own floor for the collapsed-corpus check, computed
    without its case generator (None: no floor beyond the op x dtype one)."""

    name: str
    title: str
    order: int = 100
    available: Callable = lambda target: None
    min_cases: Callable = lambda target: None
    #: ``may_select(patterns, exact, ops)`` -> False when no case of the
    #: section can match those filters, decided without building its cases
    #: (the torch section: without importing torch). None: always built.
    may_select: Optional[Callable] = None


def id_may_contain(shape, pattern):
    """Whether some case id of ``shape`` contains ``pattern`` (a ``-k``
    substring). ``shape`` lists an id's ``/``-separated segments: a str is
    that segment exactly, a tuple is one of its strs, None is any non-empty
    segment. Exact: True only when such an id exists."""
    parts = pattern.split("/")

    def fits(seg, test):
        return test(seg) if isinstance(seg, str) else (
            any(test(v) for v in seg) if isinstance(seg, tuple) else None)

    def inside(seg, p):
        return fits(seg, lambda v: p in v) is not False

    def ends(seg, p):
        return fits(seg, lambda v: v.endswith(p)) is not False

    def starts(seg, p):
        return fits(seg, lambda v: v.startswith(p)) is not False

    def equals(seg, p):
        r = fits(seg, lambda v: v == p)
        return bool(p) if r is None else r

    n = len(parts) - 1
    if n == 0:
        return any(inside(seg, pattern) for seg in shape)
    for i in range(len(shape) - n):
        if (ends(shape[i], parts[0]) and starts(shape[i + n], parts[n])
                and all(equals(shape[i + j], parts[j]) for j in range(1, n))):
            return True
    return False


@dataclass(frozen=True)
class Case:
    """One check. ``not_implemented`` (a reason) marks a case the plugin cannot
    run (a NULL kernel, an undeclared dtype): it is reported, never run and
    never a pass. ``required`` is False only for dtypes the spec lists but does
    not require, so their absence does not fail the run."""

    id: str
    fn: Callable
    section: str
    op: Optional[str] = None
    dtype: Optional[str] = None
    required: bool = True
    not_implemented: Optional[str] = None
    level: str = "core"

    @property
    def seed(self):
        """The case's seed: a function of its id only, so a case replays alone."""
        return case_seed(self.id)


def case_seed(case_id):
    return zlib.crc32(case_id.encode()) % 100_000


@dataclass
class Target:
    """The device under test and what its plugin declares. ``device.name``
    ("acme:0") and ``plugin`` (the absolute library path of a development
    build, None through discovery) are the one form the device travels in, to
    the workers and into the report."""

    device: object
    declared: Dict[str, Set[str]] = field(default_factory=dict)  # op -> dtypes, implemented only
    level: str = "full"
    plugin: Optional[str] = None

    @classmethod
    def of(cls, device, level="full", plugin=None):
        declared = {k["op"]: set(k["dtypes"]) for k in device.plugin.kernels() if k["implemented"]}
        return cls(device=device, declared=declared, level=level, plugin=plugin)

    @property
    def dtypes(self):
        return list(self.device.properties["dtypes"])


@dataclass
class Context:
    """What a case function gets: the device, its target facts, and a seeded rng."""

    target: Target
    seed: int
    dtype: Optional[str] = None  # the case's dtype label
    _rng: object = None
    #: (op, dtype) of the kernels this case checked, as the case ran them
    #: (helpers record it; the corpus floor counts these, not the case labels).
    ran: set = field(default_factory=set)
    #: facts a case reports whatever its outcome (kept in the result's
    #: ``details``; the torch section's per-ATen-op sample counts).
    details: dict = field(default_factory=dict)

    @property
    def device(self):
        return self.target.device

    def rng(self):
        """The case's one generator (seeded by its id): successive draws differ,
        and the whole sequence replays exactly."""
        if self._rng is None:
            import numpy as np
            self._rng = np.random.default_rng(self.seed)
        return self._rng


# assert_close (devicekit.testing.oracle) writes these lines; the report keeps
# them as numbers so people and tools need not parse prose.
_WORST = re.compile(r"worst index (\([^)]*\)): actual (.*?), expected (.*?)\n")
_ERRS = re.compile(r"max abs error (\S+), max rel error (\S+)")


def failure_details(message):
    d = {}
    m = _WORST.search(message)
    if m:
        d.update(worst_index=m.group(1), actual=m.group(2), expected=m.group(3))
    m = _ERRS.search(message)
    if m:
        d.update(max_abs_err=float(m.group(1)), max_rel_err=float(m.group(2)))
    return d


def run_case(case, target):
    """Runs one case in this process and classifies it. Returns a dict:
    outcome, message, details, duration_s (see docs/conformance.md)."""
    from ..errors import NotImplementedByPlugin

    if case.not_implemented:
        return {"outcome": NOT_IMPLEMENTED, "message": case.not_implemented, "details": {},
                "duration_s": 0.0}
    start = time.perf_counter()
    details = {}
    ctx = Context(target, case.seed, case.dtype)
    try:
        case.fn(ctx)
        outcome, message = PASS, ""
    except Skip as e:
        outcome, message = SKIPPED, str(e)
    except NotImplementedByPlugin as e:
        outcome, message = NOT_IMPLEMENTED, str(e)
    except AssertionError as e:
        outcome, message = FAIL, str(e) or "assertion failed"
        details = failure_details(message)
        details["traceback"] = _short_tb(e)
    except Exception as e:  # anything else the plugin or the case raised
        outcome, message = ERROR, f"{type(e).__name__}: {e}"
        details["traceback"] = _short_tb(e)
    if ctx.details:
        details = {**ctx.details, **details}
    return {"outcome": outcome, "message": message, "details": details,
            "ran": sorted([op, dt] for op, dt in ctx.ran),
            "duration_s": round(time.perf_counter() - start, 6)}


def _short_tb(exc):
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-4))
