"""devicekit.trace and ``devicekit trace``: the Chrome-trace / Perfetto JSON.

Records a small DeviceKit program and a small torch program on ``dk`` (on the
reference CPU plugin, which has timing events) and checks that the file is
what Perfetto's JSON importer reads (required keys per phase, ts/dur in
microseconds, spans in time order and nested per track, process and thread
names), that it holds every launch the SDK's own counters saw, named by op and
caused by the ATen op or composite that made it, the copies and the
allocations; that the summary's counts are the events'; and that after a
trace no hook is left installed.
"""

import json
from collections import Counter

import numpy as np
import pytest

import devicekit as dk
from devicekit import _core, _fused, _tracing
from devicekit import trace as dktrace


def _check_well_formed(doc):
    doc = json.loads(json.dumps(doc))  # plain JSON, nothing Python-only
    events = doc["traceEvents"]
    assert events
    named_pids = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    named_tracks = {(e["pid"], e["tid"]) for e in events
                    if e["ph"] == "M" and e["name"] == "thread_name"}
    tracks = {}
    for e in events:
        assert {"name", "ph", "pid", "tid"} <= e.keys(), e
        assert e["ph"] in ("X", "M", "C", "i"), e
        if e["ph"] == "M":
            assert isinstance(e["args"]["name" if e["name"].endswith("_name") else "sort_index"],
                              (str, int))
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        assert e["pid"] in named_pids, e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
            assert (e["pid"], e["tid"]) in named_tracks, e
            tracks.setdefault((e["pid"], e["tid"]), []).append(e)
        elif e["ph"] == "C":
            assert all(isinstance(v, (int, float)) for v in e["args"].values()), e
        else:
            assert e["s"] in ("t", "p", "g"), e
    for spans in tracks.values():
        ts = [e["ts"] for e in spans]
        assert ts == sorted(ts), "spans out of time order on one track"
        # complete events on one track nest (Perfetto drops those that overlap)
        stack = []
        for e in spans:
            end = e["ts"] + e["dur"]
            while stack and stack[-1] <= e["ts"]:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-3, f"{e} overlaps its enclosing span"
            stack.append(end)
    return doc


def _host_launches(doc):
    return [e for e in doc["traceEvents"]
            if e["ph"] == "X" and e["pid"] == 1 and e["cat"] in ("launch", "fused")]


def _no_hooks_left():
    assert not dktrace.is_recording() and not _core._trace_on() and not _tracing.on
    assert _fused.dispatch is dktrace._untraced_dispatch


def test_trace_of_a_devicekit_program(cpu, tmp_path):
    x = dk.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device="cpu:0")
    dk.synchronize()
    dk.reset_dispatch_stats()
    path = tmp_path / "t.json"
    with dktrace.record(str(path)) as rec:
        w = dk.tensor(np.ones((4, 2), np.float32), device="cpu:0")  # h2d, alloc
        y = (x * 2.0 + 1.0) @ w
        z = dk.nn.functional.softmax(y, -1)
        host = z.numpy()  # d2h, synchronize
        del y
    _no_hooks_left()
    assert host.shape == (3, 2)
    doc = _check_well_formed(json.loads(path.read_text()))
    assert doc == json.loads(json.dumps(rec.trace))
    events = doc["traceEvents"]

    # every launch the SDK counted is in the trace, by op name, once
    counted = {op: s["kernel"] for op, s in dk.dispatch_stats().items() if s["kernel"]}
    launches = [e for e in _host_launches(doc) if e["cat"] == "launch"]
    assert Counter(e["name"] for e in launches) == Counter(counted)
    assert {"mul", "add", "matmul"} <= counted.keys()
    # each on the device's stream track, with device time from timing events
    device = [e for e in events if e["ph"] == "X" and e["pid"] != 1 and e["cat"] == "launch"]
    assert Counter(e["name"] for e in device) == Counter(counted)
    assert all(e["args"]["time"] == "device (timing events)" for e in device)
    # no launch starts on the stream before the host enqueued it (one thread:
    # the host's launches and the stream's are in the same order)
    host = sorted((e for e in events if e["ph"] == "X" and e["pid"] == 1
                   and e["cat"] in ("launch", "fused", "copy")), key=lambda e: e["ts"])
    stream = sorted((e for e in events if e["ph"] == "X" and e["pid"] != 1),
                    key=lambda e: e["ts"])
    assert [e["name"] for e in host] == [e["name"] for e in stream]
    assert all(d["ts"] >= h["ts"] - 1e-3 for h, d in zip(host, stream))
    # the composite, its fused-kernel decision, and its launches named by it
    soft = [e for e in events if e["ph"] == "X" and e["cat"] == "composite"]
    assert [e["name"] for e in soft] == ["softmax"]
    assert soft[0]["args"].keys() & {"fused_kernel", "decomposed"}
    inside = [e for e in _host_launches(doc) if e["args"]["cause"] == "softmax"]
    assert inside and all(soft[0]["ts"] <= e["ts"] <= soft[0]["ts"] + soft[0]["dur"]
                          for e in inside)
    # copies, allocations, memory counter, synchronize
    copies = Counter(e["name"] for e in events if e["ph"] == "X" and e["cat"] == "copy"
                     and e["pid"] == 1)
    assert copies["h2d"] >= 1 and copies["d2h"] >= 1
    h2d = next(e for e in events if e.get("cat") == "copy" and e["name"] == "h2d")
    assert h2d["args"]["bytes"] == 4 * 2 * 4
    allocs = [e for e in events if e["ph"] == "i" and e["name"] == "alloc"]
    assert allocs and all(e["args"]["bytes"] > 0 for e in allocs)
    assert any(e["ph"] == "i" and e["name"] == "free" for e in events)  # y's block
    assert any(e["ph"] == "C" and e["name"] == "memory in use" for e in events)

    # the summary counts what the trace holds
    s = dktrace.summary(str(path))
    for op, n in counted.items():
        assert s["ops"][op]["count"] == n and s["ops"][op]["device_timed"]
    assert s["causes"]["composite softmax"]["count"] == 1
    assert s["allocs"] == len(allocs)
    assert s["syncs"] == sum(e["ph"] == "X" and e["cat"] == "sync" for e in events) > 0
    text = dktrace.format_summary(doc)
    assert "matmul" in text and "composite softmax" in text


def _launch(name, t0, t1, dev_t0, dev_t1):
    return {"kind": "launch", "name": name, "device": "cpu:0", "tid": 7, "t0": t0, "t1": t1,
            "bytes": 0, "in_use": 0, "scope": "", "stream": 0,
            "dev_t0": float(dev_t0), "dev_t1": float(dev_t1)}


def test_a_stream_that_started_late_is_not_placed_before_its_launches():
    # The core places the first launch at its host enqueue (1000 ns) and the
    # rest by device time from it. Here the stream began late and then ran the
    # three back to back: as placed, "b" and "c" would start on the stream
    # before the host enqueued them (at 5000 and 9000 ns).
    recs = [_launch("a", 1000, 2000, 1000, 1500), _launch("b", 5000, 6000, 1600, 2100),
            _launch("c", 9000, 9500, 2200, 3200)]
    doc = _check_well_formed(dktrace.to_chrome(recs, []))
    dev = {e["name"]: e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] != 1}
    host = {e["name"]: e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 1}
    # shifted by the least amount (c's 6.8 us) that puts none before its enqueue,
    # with the device's own durations and gaps kept
    assert dev["c"]["ts"] == pytest.approx(host["c"]["ts"])
    assert [dev[n]["ts"] for n in "abc"] == pytest.approx([6.8, 7.4, 8.0])
    assert [dev[n]["dur"] for n in "abc"] == pytest.approx([0.5, 0.5, 1.0])
    assert all(dev[n]["ts"] >= host[n]["ts"] for n in "abc")
    # a stream that kept up is left where the events put it
    recs = [_launch("a", 1000, 2000, 1000, 1500), _launch("b", 5000, 6000, 5200, 5700)]
    dev = [e for e in dktrace.to_chrome(recs, [])["traceEvents"] if e["ph"] == "X" and e["pid"] != 1]
    assert [e["ts"] for e in dev] == pytest.approx([0.0, 4.2])


def test_one_trace_at_a_time(cpu):
    with pytest.raises(dk.InvalidArgumentError, match="no trace is recording"):
        dktrace.stop()
    with dktrace.record():
        with pytest.raises(dk.InvalidArgumentError, match="already recording"):
            dktrace.start()
    _no_hooks_left()


def test_trace_of_a_torch_program(cpu):
    torch = pytest.importorskip("torch", reason="devicekit.torch needs torch")
    import devicekit.torch as dkt
    from devicekit.torch import _device

    untraced = _device._dispatch
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 3).to("dk:0")
    x = torch.randn(4, 8).to("dk:0")
    with dktrace.record() as rec:
        y = torch.relu(lin(x))
        out = y.cpu()
        assert _device._dispatch is dkt._traced_dispatch_op
    assert _device._dispatch is untraced  # the hook is gone with the trace
    _no_hooks_left()
    assert out.shape == (4, 3)
    doc = _check_well_formed(rec.trace)
    aten = {e["name"] for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "aten"}
    assert "aten.relu.default" in aten
    caused = {e["args"]["cause"] for e in _host_launches(doc)}
    assert any(c.startswith("aten.") for c in caused)
    assert any(e["args"]["cause"] == "aten.relu.default" for e in _host_launches(doc))
    assert any(e["name"] == "d2h" for e in doc["traceEvents"] if e.get("cat") == "copy")


def test_cli_records_a_script_and_summarises(cpu, tmp_path, capsys):
    from devicekit.cli import main

    script = tmp_path / "prog.py"
    script.write_text("import sys, numpy as np, devicekit as dk\n"
                      "x = dk.tensor(np.ones(8, np.float32), device='cpu:0')\n"
                      "print('sum', float((x + x).sum().numpy()), sys.argv[1:])\n")
    out = tmp_path / "run.json"
    assert main(["trace", "--out", str(out), "--", "python", str(script), "a1"]) == 0
    printed = capsys.readouterr().out
    assert "sum 16.0 ['a1']" in printed and "Top" in printed
    doc = _check_well_formed(json.loads(out.read_text()))
    assert {"add", "reduce_sum"} <= {e["name"] for e in _host_launches(doc)}
    assert main(["trace", "--summary", str(out)]) == 0
    assert "reduce_sum" in capsys.readouterr().out
    _no_hooks_left()


def test_collectives_are_spans(cpu):
    from devicekit import distributed

    if not distributed.is_available("cpu:0"):
        pytest.skip("the CPU plugin here has no collectives part")
    comm = distributed.Communicator(distributed.unique_id("cpu:0"), 1, 0, device="cpu:0")
    try:
        t = dk.tensor(np.ones(4, np.float32), device="cpu:0")
        with dktrace.record() as rec:
            comm.all_reduce(t).wait()
    finally:
        comm.destroy()
    doc = _check_well_formed(rec.trace)
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "collective"]
    assert [(e["name"], e["args"]["count"], e["args"]["nranks"]) for e in spans] == [
        ("all_reduce", 4, 1)]
    assert dktrace.summary(doc)["causes"]["collective all_reduce"]["count"] == 1
