"""Every observable promise of the device API is a conformance case
(device_api/spec/promises.json, table in docs/promises.md).

- The list is well formed: unique ids, each promise says where it is stated
  and lists at least one case (there is no "no case because" field).
- Every listed case id or pattern matches a case the suite collects on cpu:0
  (``registry.build``, the suite's own listing), so no promise points at a
  case that was renamed or never written.
- The spec is walked whole: every base op, fused op, collective and sentence
  of the collectives' numeric contract has its promise.
- docs/promises.md is what device_api/tools/gen_promises.py makes of the json.
- The runtime cases written for promises nothing checked before can fail:
  each is run against the real cpu:0 behind a proxy that plants one
  violation (elapsed times in seconds, a peak that a free lowers, a time for
  a pending event, a stream that ignores an event wait, a non-NULL zero-byte
  allocation, a fused kernel's predicate that changes its answer, a device
  synchronize that reports the newest stream's error first, a stream destroy
  that drops its pending error).

Needs: the installed SDK and cpu:0. About 15 s on 2 cores.
"""

import fnmatch
import functools
import json
import os
import re
import subprocess
import sys

import pytest

import devicekit as dk
from devicekit.conformance import registry
from devicekit.conformance.case import Context, Target
from devicekit.conformance.target import open_target
from devicekit.conformance_tests import fused, runtime, runtime_strict

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(REPO, "device_api", "spec")
FIELDS = {"id", "where", "promise", "cases"}
SOURCES = re.compile(r"device_api(_ops)?\.h|spec/(base_ops|collectives|arg_rules)\.json")


def load(name):
    with open(os.path.join(SPEC, name)) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def promises():
    return load("promises.json")["promises"]


@pytest.fixture(scope="module")
def cpu_target():
    return open_target("cpu:0")


@pytest.fixture(scope="module")
def case_ids(cpu_target, promises):
    """The ids of the cases the suite collects on cpu:0 in the sections the
    promises name (the torch section's listing imports torch: not needed)."""
    sections = {pat.split("/", 1)[0] for p in promises for pat in p["cases"]}
    cases, unavailable = registry.build(cpu_target, only=sections)
    assert not unavailable, unavailable
    return sorted(c.id for c in cases)


def unmatched(promises, ids):
    """'promise: pattern' for every listed case entry no collected case id matches."""
    return [f"{p['id']}: {pat}" for p in promises for pat in p["cases"]
            if not any(fnmatch.fnmatchcase(i, pat) for i in ids)]


def test_promises_are_well_formed_and_each_lists_a_case(promises):
    ids = [p["id"] for p in promises]
    assert len(ids) == len(set(ids)), "duplicate promise ids"
    for p in promises:
        assert set(p) == FIELDS, f"{p.get('id')}: fields {sorted(set(p))}, expected {sorted(FIELDS)}"
        assert SOURCES.search(p["where"]), f"{p['id']}: 'where' must name the header or spec"
        assert p["promise"].strip() and p["cases"], f"{p['id']}: a promise needs at least one case"
        assert all(isinstance(c, str) and c.strip() for c in p["cases"]), p["id"]


def test_every_listed_case_is_collected_on_cpu0(promises, case_ids):
    assert len(case_ids) > 5000
    missing = unmatched(promises, case_ids)
    assert not missing, "case ids or patterns that match no case the suite collects on cpu:0:\n" \
        + "\n".join(missing)
    # The check can fail: a promise naming a case nobody wrote is reported.
    made_up = [{"id": "x.made_up", "cases": ["runtime/no_such_case", "runtime/alloc_zero"]}]
    assert unmatched(made_up, case_ids) == ["x.made_up: runtime/no_such_case"]


def test_the_spec_is_walked_whole(promises):
    ids = {p["id"] for p in promises}
    base = load("base_ops.json")
    want = {f"op.{o['name']}" for o in base["ops"]}
    want |= {f"fused_op.{o['name']}" for o in base["fused_ops"]}
    coll = load("collectives.json")
    want |= {f"coll.{c['name']}" for c in coll["collectives"]}
    assert want <= ids, f"spec entries without a promise: {sorted(want - ids)}"
    where = " ".join(p["where"] for p in promises)
    for i in range(len(coll["numeric_contract"])):
        assert f"numeric_contract[{i}]" in where, f"collectives.json numeric_contract[{i}]"


def test_docs_table_matches_the_json():
    tool = os.path.join(REPO, "device_api", "tools", "gen_promises.py")
    proc = subprocess.run([sys.executable, tool, "--check"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- the new runtime cases catch what they promise to ----------------------------


def _unwrap(x):
    return x._inner if isinstance(x, Proxy) else x


class Proxy:
    """Wraps an SDK object; ``overrides`` replace some of its attributes. The
    wrapped object's own methods get the real objects back (a proxy never
    reaches the C++ core)."""

    def __init__(self, inner, **overrides):
        self._inner, self._over = inner, overrides

    def __getattr__(self, name):
        if name in self._over:
            return self._over[name]
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr
        return lambda *a, **k: attr(*map(_unwrap, a), **{n: _unwrap(v) for n, v in k.items()})


def run_case(cpu_target, fn, device):
    target = Target(device=device, declared=cpu_target.declared, level=cpu_target.level,
                    plugin=cpu_target.plugin)
    fn(Context(target=target, seed=1234))


def wrap_events(dev, elapsed):
    def event():
        e = dev.event()
        return Proxy(e, elapsed_ms=lambda other: elapsed(e, _unwrap(other)))
    return Proxy(dev, event=event)


def test_the_new_cases_pass_on_cpu0(cpu_target):
    dev = cpu_target.device
    for fn in (runtime_strict.memory_stats_peak, runtime_strict.event_elapsed_milliseconds,
               runtime_strict.event_elapsed_not_reached, runtime_strict.wait_event_edges,
               runtime_strict.stream_destroy, runtime.alloc_zero,
               runtime.first_async_error_two_streams):
        run_case(cpu_target, fn, dev)


def test_elapsed_time_in_seconds_is_caught(cpu_target):
    dev = wrap_events(cpu_target.device, lambda a, b: a.elapsed_ms(b) / 1000.0)
    with pytest.raises(AssertionError, match="in milliseconds"):
        run_case(cpu_target, runtime_strict.event_elapsed_milliseconds, dev)


def test_a_time_for_a_pending_event_is_caught(cpu_target):
    def elapsed(a, b):
        try:
            return a.elapsed_ms(b)
        except dk.DeviceKitError:
            return 0.0  # the lie: a time instead of FAILED_PRECONDITION
    dev = wrap_events(cpu_target.device, elapsed)
    with pytest.raises(AssertionError, match="FAILED_PRECONDITION"):
        run_case(cpu_target, runtime_strict.event_elapsed_not_reached, dev)


def test_a_peak_that_a_free_lowers_is_caught(cpu_target):
    real = cpu_target.device

    def stats():
        s = dict(real.memory_stats())
        s["peak_bytes_in_use"] = max(s["bytes_in_use"], 1)  # the lie: current, not maximum
        return s
    with pytest.raises(AssertionError, match="never goes down|maximum of bytes_in_use"):
        run_case(cpu_target, runtime_strict.memory_stats_peak, Proxy(real, memory_stats=stats))


def test_a_stream_that_ignores_an_event_wait_is_caught(cpu_target):
    real = cpu_target.device
    dev = Proxy(real, stream=lambda: Proxy(real.stream(), wait_event=lambda e: None))
    with pytest.raises(AssertionError, match="stale data"):
        run_case(cpu_target, runtime_strict.wait_event_edges, dev)


def test_a_non_null_zero_byte_allocation_is_caught(cpu_target):
    real = cpu_target.device

    def alloc(n):
        buf = real.alloc(n)
        return Proxy(buf, ptr=4096) if n == 0 else buf
    with pytest.raises(AssertionError, match="the header says NULL"):
        run_case(cpu_target, runtime.alloc_zero, Proxy(real, alloc=alloc))


def test_an_impure_supports_predicate_is_caught(monkeypatch, cpu_target):
    answers = iter([{"cpu.rms_norm_f32": 1}, {}])  # accepted once, declined the same call after
    monkeypatch.setattr(fused, "_launched", lambda *a, **k: next(answers))
    check = functools.partial(fused.check_accepts, kernel="cpu.rms_norm_f32", op="rms_norm")
    with pytest.raises(AssertionError, match="must be pure"):
        run_case(cpu_target, check, cpu_target.device)


def test_a_device_synchronize_that_reports_the_newest_stream_first_is_caught(monkeypatch,
                                                                            cpu_target):
    # The case hands its device to dk.tensor, so the plant goes on the class.
    real, made = cpu_target.device, []
    cls = type(real)
    make_stream, sync_device = cls.stream, cls.synchronize

    def stream(self):
        made.append(make_stream(self))
        return made[-1]

    def synchronize(self, *a, **k):  # the plant: the newest stream's error first
        for s in reversed(made):
            s.synchronize()
        return sync_device(self, *a, **k)
    monkeypatch.setattr(cls, "stream", stream)
    monkeypatch.setattr(cls, "synchronize", synchronize)
    with pytest.raises(AssertionError, match="earliest-created stream"):
        run_case(cpu_target, runtime.first_async_error_two_streams, real)
    monkeypatch.undo()
    real.synchronize()


def test_a_stream_destroy_that_drops_the_pending_error_is_caught(monkeypatch, cpu_target):
    # What the case sees of a plugin whose Stream_Destroy returns no error.
    monkeypatch.setattr(runtime_strict, "_stderr_of", lambda fn: fn() or "")
    with pytest.raises(AssertionError, match="returns the stream's pending asynchronous error"):
        run_case(cpu_target, runtime_strict.stream_destroy, cpu_target.device)
    cpu_target.device.synchronize()


def test_every_cast_pair_has_its_exact_case(cpu_target, case_ids):
    """cast.every_pair_exact's patterns stand for every (input, output) pair of
    the dtypes cpu:0 stores: each pair through the SDK, each input dtype to
    every output (itself included) called directly."""
    dtypes = cpu_target.dtypes
    ids = set(case_ids)
    missing = [f"ops/cast/{a}/to_{b}" for a in dtypes for b in dtypes
               if a != b and f"ops/cast/{a}/to_{b}" not in ids]
    missing += [f"kernels/cast/{a}/ladder" for a in dtypes if f"kernels/cast/{a}/ladder" not in ids]
    assert len(dtypes) == 9 and not missing, missing
