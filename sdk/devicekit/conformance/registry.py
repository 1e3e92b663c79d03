"""The section registry, the case list, selection, and the collapsed-corpus floor.

Sections are discovered, not listed: every module of
``devicekit.conformance_tests`` that defines ``SECTION`` (a :class:`Section`)
and ``cases(target)`` is one. Adding a section (composites, fused kernels,
autograd) is adding one such file; nothing here changes.
"""

import functools
import importlib
import json
import os
import pkgutil
import re
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
    o = next(x for x in s["ops"] if x["name"] == op)
    return _dtype_list(s, o["dtypes"]), _dtype_list(s, o["required_dtypes"])


def _dtype_list(s, value):
    """A spec dtype field as a list: a group name ("all"), one dtype name
    ("float32") or a list. A bare string is never iterated letter by letter
    (that once made float32 optional for 35 ops)."""
    if isinstance(value, str):
        return list(s["dtype_groups"].get(value, [value]))
    return list(value)


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


# ---- the fuzz section's seeds (conformance_tests/fuzz.py) ----------------------------
# `devicekit conformance --fuzz-seed S --fuzz-cases N` reach the worker
# processes (which build the case list again) through the environment, as the
# pytest entry can too: DEVICEKIT_FUZZ_SEED, DEVICEKIT_FUZZ_CASES, and
# DEVICEKIT_FUZZ_REPLAY, the seeds of the fuzz ids named with --case, so that
# the replay command of a failure (`--case fuzz/<op>/<dtype>/s<seed>`) finds
# its case whichever seed set it came from.

FUZZ_ENV = ("DEVICEKIT_FUZZ_SEED", "DEVICEKIT_FUZZ_CASES", "DEVICEKIT_FUZZ_REPLAY")
_FUZZ_ID = re.compile(r"^fuzz/.*/s(\d+)$")


def configure_fuzz(seed=None, cases=None, exact=()):
    """Sets the fuzz section's seed set for this process and its workers; returns
    a usage error (a string) or None."""
    if seed is not None and not 0 <= seed < 2**32:
        return f"--fuzz-seed must be in [0, 2**32), got {seed}"
    if cases is not None and not 0 <= cases <= 10_000:
        return f"--fuzz-cases must be in [0, 10000], got {cases}"
    replay = sorted({m.group(1) for i in exact if (m := _FUZZ_ID.match(i))})
    for name, value in zip(FUZZ_ENV, (seed, cases, ",".join(replay) or None)):
        if value is not None:
            os.environ[name] = str(value)
    return None


def fuzz_settings():
    """(seed or None, cases or None, [replay seeds]) as configure_fuzz set them."""
    seed, cases, replay = (os.environ.get(n) for n in FUZZ_ENV)
    return (int(seed) if seed else None, int(cases) if cases else None,
            [int(s) for s in replay.split(",")] if replay else [])


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


def build(target, only=None):
    """(cases, unavailable sections {name: reason}) for ``target`` at its
    level; with ``only`` (section names), those sections' alone. Deterministic:
    the same plugin gives the same list in every process."""
    cases, unavailable = [], {}
    allowed_levels = LEVELS[:LEVELS.index(target.level) + 1]
    for section, mod in sections():
        if only is not None and section.name not in only:
            continue
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


def select(cases, patterns=(), exact=(), ops=(), excludes=()):
    """Cases whose id contains any of ``patterns`` (-k), equals one of ``exact``
    (--case) or whose op is exactly one of ``ops`` (--op); everything when all
    are empty. Then those whose id contains one of ``excludes`` (--exclude) are
    left out."""
    if patterns or exact or ops:
        cases = [c for c in cases
                 if c.id in exact or c.op in ops or any(p in c.id for p in patterns)]
    return [c for c in cases if not any(p in c.id for p in excludes)]


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
    error or crash (not-implemented and skipped cases did not run). Every
    declared (op, dtype) must have at least MIN_CASES_PER_OP_DTYPE executed
    cases and at least one whose kernel ran in exactly that dtype (what the
    case recorded in ``ran``, not its label: the SDK runs integer sums as
    int64). A pair whose cases did not run because another kernel is missing
    (not-implemented naming that op) is *blocked*, not collapsed: it is
    listed, and fails the run only as the not-implemented cases it is. Returns
    a dict for the report: ok, expected_min, executed, short, blocked."""
    rows = [{"op": c.op, "dtype": c.dtype, "section": c.section, **results[c.id]} for c in cases]
    return judge_corpus(floor_of(target, run_sections), rows)


def floor_of(target, run_sections):
    """:func:`expected_floor` as plain JSON data (what a shard report carries,
    so that ``devicekit report merge`` judges the merged corpus without the
    device): {total, pairs: [[op, dtype, n]], sections: {name: n}}."""
    total, pairs, per_section = expected_floor(target, run_sections)
    return {"total": total, "pairs": [[op, dt, n] for (op, dt), n in pairs.items()],
            "sections": per_section}


def judge_corpus(floor, rows):
    """:func:`corpus_check` on report rows (op, dtype, section, outcome, ran,
    message) against a :func:`floor_of`."""
    executed_outcomes = {"pass", "fail", "error", "crash"}
    executed = [r for r in rows if r["outcome"] in executed_outcomes]
    pairs = {(op, dt): n for op, dt, n in floor["pairs"]}
    per_section = floor["sections"]
    by_pair, ran_pair, by_section, blocked = {}, {}, {}, {}
    for r in executed:
        if r["op"] is not None:
            by_pair[(r["op"], r["dtype"])] = by_pair.get((r["op"], r["dtype"]), 0) + 1
        for op, dt in r.get("ran", ()):
            ran_pair[(op, dt)] = ran_pair.get((op, dt), 0) + 1
        by_section[r["section"]] = by_section.get(r["section"], 0) + 1
    blocked_in_section = {}
    for r in rows:
        if r["outcome"] == "not-implemented":
            blocked_in_section[r["section"]] = blocked_in_section.get(r["section"], 0) + 1
            if (r["op"], r["dtype"]) in pairs:
                blocked.setdefault((r["op"], r["dtype"]), r["message"])
    short, blocked_pairs = [], []
    for (op, dt), n in pairs.items():
        have, ran = by_pair.get((op, dt), 0), ran_pair.get((op, dt), 0)
        if have >= n and ran >= 1:
            continue
        if (op, dt) in blocked:
            blocked_pairs.append(f"{op}/{dt}: {have} cases ran; others blocked: "
                                 f"{blocked[(op, dt)][:160]}")
        elif have < n:
            short.append(f"{op}/{dt}: {have} executed cases < {n}")
        else:
            short.append(f"{op}/{dt}: no executed case ran the {op} kernel in {dt}")
    for sec, n in per_section.items():  # cases blocked by a missing kernel count as there
        have, held = by_section.get(sec, 0), blocked_in_section.get(sec, 0)
        if have + held < n:
            short.append(f"section {sec}: {have} executed (+{held} not implemented) < {n}")
        elif have < n:
            blocked_pairs.append(f"section {sec}: {have} executed < {n}; {held} cases not "
                                 f"implemented")
    ok = not short and (len(executed) >= floor["total"] or bool(blocked_pairs))
    return {"checked": True, "ok": ok, "expected_min": floor["total"], "executed": len(executed),
            "short": short[:50], "blocked": blocked_pairs[:50]}


def reachable_sections(patterns=(), exact=(), ops=(), excludes=()):
    """Names of the sections a run with these filters can select a case of
    (every section when there is no filter): a section that says, without
    building its cases, that none can match (``Section.may_select``) is left
    out, so a run filtered to other sections never pays for building it; so
    is one whose every case an exclusion drops (every case id of a section
    starts with its name and "/": ``--exclude torch/``)."""
    return {section.name for section, _ in sections()
            if not any(p in f"{section.name}/" for p in excludes)
            and (not (patterns or exact or ops) or section.may_select is None
                 or section.may_select(patterns, exact, ops))}


def implementation_status(target, only=None):
    """What the plugin implements against the spec, for the console and the
    report: base ops with a kernel, required (op, dtype) pairs missing, and
    optional pairs missing. Not a verdict on the suite: a partial plugin is
    simply partial. ``only``: the sections whose own facts are added (None: all)."""
    ops = spec()["ops"]
    have = [o["name"] for o in ops if o["name"] in target.declared]
    missing_required, missing_optional, req_total, opt_total = [], [], 0, 0
    for o in ops:
        allowed, required = spec_dtypes(o["name"])
        declared = target.declared.get(o["name"], set())
        for dt in allowed:
            if dt in required:
                req_total += 1
                if dt not in declared:
                    missing_required.append(f"{o['name']}/{dt}")
            else:
                opt_total += 1
                if dt not in declared:
                    missing_optional.append(f"{o['name']}/{dt}")
    status = {"base_ops": len(ops), "implemented_ops": len(have),
              "required_pairs": req_total, "required_missing": missing_required,
              "optional_pairs": opt_total, "optional_missing": missing_optional}
    # A section may add facts of its own (kernels: the argument rules it covers),
    # each with the "line" the status line shows.
    for section, mod in sections():
        if only is not None and section.name not in only:
            continue
        if hasattr(mod, "status") and section.available(target) is None:
            status.setdefault("sections", {})[section.name] = mod.status(target)
    return status


def status_line(st):
    """'implements 12/43 base ops; required dtypes 30/52 (missing: ...); optional 100/200'."""
    req_have = st["required_pairs"] - len(st["required_missing"])
    opt_have = st["optional_pairs"] - len(st["optional_missing"])
    line = (f"implements {st['implemented_ops']}/{st['base_ops']} base ops; required (op, dtype) "
            f"{req_have}/{st['required_pairs']}; optional {opt_have}/{st['optional_pairs']}")
    if st["required_missing"]:
        shown = ", ".join(st["required_missing"][:12])
        more = len(st["required_missing"]) - 12
        line += f"; missing required: {shown}" + (f" and {more} more" if more > 0 else "")
    for facts in st.get("sections", {}).values():
        line += f"; {facts['line']}"
    return line
