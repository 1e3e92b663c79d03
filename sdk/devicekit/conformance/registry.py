"""The section registry, the case list, selection, and the collapsed-corpus floor.

Sections are discovered, not listed: every module of
``devicekit.conformance_tests`` that defines ``SECTION`` (a :class:`Section`)
and ``cases(target)`` is one. Adding a section (composites, fused kernels,
autograd) is adding one such file; nothing here changes.
"""

import functools
import importlib
import json
import pkgutil
from importlib import resources

from .case import LEVELS, Case, Target  # noqa: F401  (re-exported for section modules)

SUITE_PACKAGE = "devicekit.conformance_tests"

# The collapsed-corpus floor: every (op, dtype) pair the plugin declares
# (within the spec) must have executed at least this many cases. Each op
# family generates more than this per pair at either level (the smallest is
# iota on uint8 with 3 ranges that fit), so a generator loop that silently
# lost shapes or dtypes drops below it. Deliberately a constant here, not a
# count taken from the generators.
MIN_CASES_PER_OP_DTYPE = 3


@functools.lru_cache(maxsize=None)
def spec():
    """device_api/spec/base_ops.json as shipped in devicekit/data."""
    text = resources.files("devicekit").joinpath("data/base_ops.json").read_text()
    return json.loads(text)


def spec_dtypes(op):
    """(dtypes the spec allows for ``op``, dtypes it requires), in spec order."""
    s = spec()
    every = s["dtype_groups"]["all"]
    o = next(x for x in s["ops"] if x["name"] == op)
    allowed = every if o["dtypes"] == "all" else o["dtypes"]
    required = every if o["required_dtypes"] == "all" else o["required_dtypes"]
    return list(allowed), list(required)


def op_cases(target, section, op, shape_classes, make, level_of=lambda shape: "core"):
    """Cases ``{section}/{op}/{dtype}/{shape}`` for every dtype the spec allows
    for ``op``. ``make(op, dtype, shape)`` returns the case function. A dtype
    the plugin does not declare (or an op with a NULL kernel) gives a
    not-implemented case instead: it is reported, never run, never a pass; it
    fails the run only when the spec requires that dtype."""
    allowed, required = spec_dtypes(op)
    have = target.declared.get(op)
    out = []
    for dtype in allowed:
        if have is None:
            why = f"the plugin's kernel table has NULL for '{op}'"
        elif dtype not in have:
            why = f"the plugin does not declare {dtype} for '{op}' (declares {sorted(have)})"
        else:
            why = None
        for shape in (shape_classes(dtype) if callable(shape_classes) else shape_classes):
            out.append(Case(id=f"{section}/{op}/{dtype}/{shape}", section=section, op=op,
                            dtype=dtype, fn=make(op, dtype, shape), required=dtype in required,
                            not_implemented=why, level=level_of(shape)))
    return out


def sections():
    """[(Section, module)] of every section module, in (order, name) order."""
    pkg = importlib.import_module(SUITE_PACKAGE)
    found = []
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith(("_", "test_", "conftest")):
            continue
        mod = importlib.import_module(f"{SUITE_PACKAGE}.{info.name}")
        if hasattr(mod, "SECTION") and hasattr(mod, "cases"):
            found.append((mod.SECTION, mod))
    return sorted(found, key=lambda sm: (sm[0].order, sm[0].name))


def build(target):
    """(cases, unavailable sections {name: reason}) for ``target`` at its
    level. Deterministic: the same plugin gives the same list in every process."""
    cases, unavailable = [], {}
    allowed_levels = LEVELS[:LEVELS.index(target.level) + 1]
    for section, mod in sections():
        why = section.available(target)
        if why:
            unavailable[section.name] = why
            continue
        cases.extend(c for c in mod.cases(target) if c.level in allowed_levels)
    ids = [c.id for c in cases]
    dup = {i for i in ids if ids.count(i) > 1} if len(set(ids)) != len(ids) else set()
    if dup:
        raise RuntimeError(f"duplicate conformance case ids: {sorted(dup)[:5]}")
    return cases, unavailable


def select(cases, patterns=(), exact=()):
    """Cases whose id contains any of ``patterns`` (-k) or equals one of ``exact``
    (--case); everything when both are empty."""
    if not patterns and not exact:
        return list(cases)
    return [c for c in cases if c.id in exact or any(p in c.id for p in patterns)]


def expected_floor(target, run_sections):
    """The least number of executed cases a full run must have, computed from
    the plugin's kernel table and the spec, not from the case generators:
    MIN_CASES_PER_OP_DTYPE per declared (op, dtype) pair the spec allows, plus
    each section's own floor. Returns (total, {(op, dtype): floor}, {section: floor})."""
    pairs = {}
    for op, dtypes in sorted(target.declared.items()):
        try:
            allowed, _ = spec_dtypes(op)
        except StopIteration:  # an op newer than this DeviceKit's spec
            continue
        for dt in allowed:
            if dt in dtypes:
                pairs[(op, dt)] = MIN_CASES_PER_OP_DTYPE
    per_section = {}
    for section, _ in sections():
        if section.name in run_sections:
            n = section.min_cases(target)
            if n:
                per_section[section.name] = n
    return sum(pairs.values()) + sum(per_section.values()), pairs, per_section


def corpus_check(target, cases, results, run_sections):
    """Compares what ran with :func:`expected_floor`. Executed = pass, fail,
    error or crash (not-implemented and skipped cases did not run). Returns a
    dict for the report: ok, expected_min, executed, and what fell short."""
    executed_outcomes = {"pass", "fail", "error", "crash"}
    executed = [c for c in cases if results[c.id]["outcome"] in executed_outcomes]
    floor, pairs, per_section = expected_floor(target, run_sections)
    by_pair, by_section = {}, {}
    for c in executed:
        if c.op is not None:
            by_pair[(c.op, c.dtype)] = by_pair.get((c.op, c.dtype), 0) + 1
        by_section[c.section] = by_section.get(c.section, 0) + 1
    short = [f"{op}/{dt}: {by_pair.get((op, dt), 0)} < {n}" for (op, dt), n in pairs.items()
             if by_pair.get((op, dt), 0) < n]
    short += [f"section {s}: {by_section.get(s, 0)} < {n}" for s, n in per_section.items()
              if by_section.get(s, 0) < n]
    ok = not short and len(executed) >= floor
    return {"checked": True, "ok": ok, "expected_min": floor, "executed": len(executed),
            "short": short[:50]}
