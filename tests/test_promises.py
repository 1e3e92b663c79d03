"""Every observable promise of the device API is a conformance case
(device_api/spec/promises.json, table in docs/promises.md).

- The list is well formed: unique ids, each promise says where it is stated
  and lists at least one case (there is no "no case because" field), except
  the promises the suite cannot reach (group "load": kept at load, or the
  SDK's own about a plugin that does not load), which list the tests that
  check them instead; each listed test must be a test function of its file.
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
  that drops its pending error, a Memory_Free(NULL) that fails, a bad device
  ordinal answered, host work or a nested begin accepted on a capturing
  stream, a kernel declaring DK_KERNEL_CAP_INPLACE that leaves stale data, a
  cross-device event wait that does not wait).
- The promises whose case needs what cpu:0 lacks by default still run here:
  the cross-device event wait on cpu with DEVICEKIT_CPU_DEVICES=2 (a child
  process), and the in-place case on a kernel that declares the capability
  (planted: cpu:0 declares it nowhere, and there the case is skipped as not
  applicable, saying so).

Needs: the installed SDK and cpu:0. About 15 s on 2 cores.
"""

import fnmatch
import functools
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import devicekit as dk
from devicekit.conformance import registry
from devicekit.conformance.case import Context, Target
from devicekit.conformance.target import open_target
from devicekit.conformance_tests import _api, _raw, fused, graphs, kernels, runtime, runtime_strict

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(REPO, "device_api", "spec")
FIELDS = {"id", "where", "promise", "cases"}
OPTIONAL = {"tests"}
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
        assert FIELDS <= set(p) <= FIELDS | OPTIONAL, \
            f"{p.get('id')}: fields {sorted(set(p))}, expected {sorted(FIELDS)} (+ {OPTIONAL})"
        assert SOURCES.search(p["where"]), f"{p['id']}: 'where' must name the header or spec"
        assert p["promise"].strip(), p["id"]
        if "tests" in p:  # only what the suite cannot reach is checked by tests alone
            assert p["id"].startswith("load.") and p["tests"], \
                f"{p['id']}: only a load. promise lists tests, and then at least one"
        else:
            assert p["cases"], f"{p['id']}: a promise needs at least one case"
        assert all(isinstance(c, str) and c.strip() for c in p["cases"]), p["id"]


def missing_tests(promises):
    """'promise: test' for every listed test that is not a test function
    (def test_...) at the top level of its file."""
    import ast

    out = []
    for p in promises:
        for t in p.get("tests", ()):
            path, _, name = t.partition("::")
            full = os.path.join(REPO, path)
            names = set()
            if path.startswith("tests/") and os.path.isfile(full) and name.startswith("test_"):
                with open(full) as f:
                    names = {n.name for n in ast.parse(f.read()).body
                             if isinstance(n, ast.FunctionDef)}
            if name not in names:
                out.append(f"{p['id']}: {t}")
    return out


def test_every_listed_test_exists(promises):
    assert any("tests" in p for p in promises)
    missing = missing_tests(promises)
    assert not missing, "listed tests that are not test functions of their file:\n" + \
        "\n".join(missing)
    # The check can fail: a renamed test is reported.
    made_up = [{"id": "load.x", "tests": ["tests/test_loader.py::test_no_such_test",
                                          "tests/test_loader.py::test_missing_file_is_a_load_error",
                                          "tests/no_such_file.py::test_x"]}]
    assert missing_tests(made_up) == ["load.x: tests/test_loader.py::test_no_such_test",
                                      "load.x: tests/no_such_file.py::test_x"]


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
               runtime.first_async_error_two_streams, runtime_strict.free_null,
               runtime_strict.properties_bad_ordinal, runtime_strict.load_facts):
        run_case(cpu_target, fn, dev)
    for rule in graphs.PLUGIN_RULES:
        run_case(cpu_target, functools.partial(graphs.check_plugin_rule, rule=rule), dev)


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


# ---- the raw-call cases (conformance_tests/_api.py) catch what they promise to -----


def _plant_call(monkeypatch, lie):
    """Every raw API call's outcome goes through ``lie(name, struct, outcome)``."""
    real = _api.Api.call

    def call(self, name, struct, fn=None):
        return lie(name, struct, real(self, name, struct, fn))
    monkeypatch.setattr(_api.Api, "call", call)


def test_a_failing_free_of_null_is_caught(monkeypatch, cpu_target):
    _plant_call(monkeypatch, lambda name, a, got: (
        (_api.INVALID_ARGUMENT, "Memory_Free: NULL is not a live allocation")
        if name == "Memory_Free" and not a.ptr else got))
    with pytest.raises(AssertionError, match="NULL is a no-op"):
        run_case(cpu_target, runtime_strict.free_null, cpu_target.device)


def test_a_device_count_that_changed_after_initialize_is_caught(monkeypatch, cpu_target):
    _plant_call(monkeypatch, lambda name, a, got: (
        setattr(a, "count", a.count + 1) or got if name == "Device_Count" else got))
    with pytest.raises(AssertionError, match="fixed after Initialize"):
        run_case(cpu_target, runtime_strict.load_facts, cpu_target.device)


def test_an_answered_bad_ordinal_is_caught(monkeypatch, cpu_target):
    # the lie: an ordinal past the count clamped to the last device
    _plant_call(monkeypatch, lambda name, a, got: (
        (0, "") if name == "Device_GetProperties" and a.device == 1 else got))
    with pytest.raises(AssertionError, match=r"device=1\) on a plugin with 1 device.*OUT_OF_RANGE"):
        run_case(cpu_target, runtime_strict.properties_bad_ordinal, cpu_target.device)


@pytest.mark.parametrize("rule,lied_call", [("not_nested", "Graph_Capture"),
                                            ("host_work/stream_synchronize", "Stream_Synchronize"),
                                            ("host_work/memcpy_d2h", "Memcpy")])
def test_capture_rules_accepted_by_the_plugin_are_caught(monkeypatch, cpu_target, rule,
                                                         lied_call):
    # the lie: the plugin's refusal (DK_ERROR_FAILED_PRECONDITION) becomes a success
    _plant_call(monkeypatch, lambda name, a, got: (
        (0, "") if name == lied_call and got[0] == _api.FAILED_PRECONDITION else got))
    with pytest.raises(AssertionError, match="DK_ERROR_FAILED_PRECONDITION"):
        run_case(cpu_target, functools.partial(graphs.check_plugin_rule, rule=rule),
                 cpu_target.device)
    monkeypatch.undo()
    cpu_target.device.synchronize()
    # the plugin is left as it was: the case passes again
    run_case(cpu_target, functools.partial(graphs.check_plugin_rule, rule=rule), cpu_target.device)


def test_inplace_cases_are_the_declaring_kernels_and_pass_on_cpu0(cpu_target):
    # cpu:0 declares DK_KERNEL_CAP_INPLACE on add, sub, mul and div (the
    # bridge's in-place ops write through them): one case per declared dtype
    made = {c.id: c for c in kernels.inplace_cases(cpu_target)}
    assert {i.split("/")[1] for i in made} == {"add", "sub", "mul", "div"}, sorted(made)
    assert "kernels/inplace" not in made
    for op in ("add", "div"):
        run_case(cpu_target, made[f"kernels/{op}/float32/inplace"].fn, cpu_target.device)


def test_inplace_is_not_applicable_where_no_kernel_declares_it_and_says_so(monkeypatch,
                                                                         cpu_target):
    from devicekit.conformance.case import Skip
    from devicekit.conformance_tests import _rules

    real_caps = _rules.caps_of
    monkeypatch.setattr(_rules, "caps_of",
                        lambda t, op: real_caps(t, op) & ~_rules.CAPS["INPLACE"])
    made = kernels.inplace_cases(cpu_target)
    assert [c.id for c in made] == ["kernels/inplace"]
    with pytest.raises(Skip, match="not applicable: no kernel of plugin 'cpu' declares"):
        made[0].fn(None)


def test_inplace_case_passes_a_correct_kernel_and_catches_stale_data(monkeypatch, cpu_target):
    from devicekit.conformance_tests import _rules

    real_caps, real_call = _rules.caps_of, _raw.call
    monkeypatch.setattr(_rules, "caps_of", lambda t, op: real_caps(t, op) | (
        _rules.CAPS["INPLACE"] if op in ("neg", "add") else 0))
    made = {c.id for c in kernels.inplace_cases(cpu_target)}
    assert {"kernels/neg/float32/inplace", "kernels/add/int64/inplace"} <= made
    assert not any(i.startswith(("kernels/exp/", "kernels/eq/")) for i in made)
    dev = cpu_target.device
    stale = {"from": None}

    def call(device, op, ins, outs, attrs=None, **kw):
        if outs[0][0] != ins[0][0]:
            return real_call(device, op, ins, outs, attrs, **kw)
        # what a correct in-place kernel computes: out of place into scratch,
        # then over input 0 (the planted fault keeps input 0's tail: stale data)
        shape, dt = outs[0][2], {v: k for k, v in _raw.DTYPE_IDS.items()}[outs[0][1]]
        nbytes = int(np.prod(shape, dtype=np.int64)) * _raw.O.np_dtype(dt).itemsize
        tmp = dev.alloc(nbytes)
        try:
            codes = real_call(device, op, ins, [(tmp.ptr,) + tuple(outs[0][1:])], attrs, **kw)
            keep = nbytes if stale["from"] is None else stale["from"]
            dev.synchronize()
            host = np.empty(nbytes, np.uint8)
            dev.copy_d2h(host, tmp)
            _write_at(dev, ins[0][0], host[:keep])
            return codes
        finally:
            tmp.free()
    monkeypatch.setattr(_raw, "call", call)
    for op, dtype in (("neg", "float32"), ("add", "int64")):
        check = functools.partial(kernels.check_inplace, op=op, dtype=dtype, shape="inplace")
        run_case(cpu_target, check, dev)
        stale["from"] = 4 * 1000
        with pytest.raises(AssertionError, match="differs from the out-of-place call"):
            run_case(cpu_target, check, dev)
        stale["from"] = None


def _write_at(dev, addr, data):
    """Host bytes to device address ``addr`` (inside a live allocation): a
    synchronous raw Memcpy."""
    api = _api.of(dev)
    got = api.call("Memcpy", _api.Memcpy(device=dev.index, kind=_api.H2D, dst=addr,
                                         src=data.ctypes.data, size=data.nbytes, stream=None))
    assert got[0] == 0, _api.describe(got)


CROSS_DEVICE = """
import sys, devicekit as dk
from devicekit.conformance.case import Context, Target
from devicekit.conformance.target import open_target
from devicekit.conformance_tests import runtime_strict
t = open_target("cpu:0")
assert len(t.device.plugin.devices) == 2, t.device.plugin.devices
run = lambda: runtime_strict.wait_event_other_device(Context(target=t, seed=1))
run()
print("passed")
Stream = type(t.device.stream())
Stream.wait_event = lambda self, e: None  # the plant: a wait that does not wait
try:
    run()
except AssertionError as e:
    print("caught:", str(e)[:300])
"""


def test_the_cross_device_wait_runs_on_two_cpu_devices_and_catches_a_wait_that_does_not_wait():
    env = dict(os.environ, DEVICEKIT_CPU_DEVICES="2")
    proc = subprocess.run([sys.executable, "-c", CROSS_DEVICE], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "passed" in proc.stdout, proc.stdout
    assert "caught:" in proc.stdout and "went on before that event's point" in proc.stdout, \
        proc.stdout + proc.stderr
