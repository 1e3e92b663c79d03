"""The release gate's rules and its bad-input handling, on records built by
the real record builder from small hand-made suite reports (no device runs:
seconds). The gate against real plugins: test_gate_faulty.py (deliberately
broken builds) and test_gate_ci.py (the reference CPU plugin vs its baseline).

Needs: nothing but devicekit importable.
"""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HUNG_S
from conftest import CI_MODELS_LINE

from devicekit.gate import check as check_mod
from devicekit.gate import policy, record
from devicekit.gate import perf as perf_mod
from devicekit.gate.errors import BadPolicy

REPO_ROOT = Path(__file__).resolve().parents[1]
CI_POLICY = REPO_ROOT / "ci" / "policy.toml"


def _conf_report(lib, cases, name="acme"):
    by = {}
    for c in cases:
        by[c[3]] = by.get(c[3], 0) + 1
    return {
        "devicekit_version": "0.1.0", "device_api_version": "1.2",
        "plugin": {"name": name, "vendor": "Acme", "version": "1.0", "api_version": "1.2",
                   "attributes": {"driver": "7"}, "library_path": str(lib),
                   "sha256": record.sha256_file(lib)},
        "device": {"name": f"{name}:0", "properties": {"dtypes": ["float32", "float16"]}},
        "run": {"level": "full", "partial": False, "filter": []},
        "summary": {"passed": all(c[3] == "pass" for c in cases), "by_outcome": by},
        "corpus": {"checked": True, "ok": True}, "implementation": {},
        "unavailable_sections": {},
        "cases": [{"id": cid, "section": cid.split("/")[0], "op": op, "dtype": dt,
                   "required": dt in (None, "float32"), "outcome": o,
                   "message": "" if o == "pass" else f"{cid} is wrong"}
                  for cid, op, dt, o in cases]}


def _models_report(phases=None, curve=(2.0, 1.5, 1.2)):
    phases = phases or {}
    rows = []
    for ph in ("forward", "loss", "backward", "inference", "train"):
        o = phases.get(ph, "pass")
        row = {"id": f"models/mlp/float32/{ph}", "section": "mlp", "op": "mlp",
               "dtype": "float32", "required": True, "outcome": o,
               "message": "" if o == "pass" else "2 of 4 tensors exceed their bound"}
        if o == "fail":
            row["details"] = {"divergence": {"first": {"layer": "fc2"},
                                             "replay": "devicekit models --layer fc2"}}
        rows.append(row)
    return {"run": {"steps": 2, "models": ["mlp"], "dtypes": ["float32"]},
            "summary": {"passed": not phases, "by_outcome": {}}, "cases": rows,
            "models": {"mlp": {"curves": {"float64": list(curve),
                                          "float32": {"plugin": list(curve)}},
                               "config_hash": "abc"}}}


BASE_CASES = [("runtime/alloc_zero", None, None, "pass"),
              ("ops/add/float32/basic", "add", "float32", "pass"),
              ("ops/add/float32/bcast", "add", "float32", "pass"),
              ("ops/exp/float16/basic", "exp", "float16", "not-implemented")]


def make(tmp_path, name="rec", cases=BASE_CASES, phases=None, curve=(2.0, 1.5, 1.2),
         seconds=1e-3, lib=None, plugin="acme", ratio=2.0, perf_rows=None):
    if lib is None:
        lib = tmp_path / "libacme.so"
        if not lib.exists():
            lib.write_bytes(b"\x7fELF acme build 1")
    row = {"op": "add", "dtype": "float32", "size": 1024, "shapes": [[1024]],
           "seconds": seconds, "calls": 10, "repeats": 9}
    if ratio is not None:
        row.update(reference="numpy", reference_seconds=seconds / ratio, ratio=ratio)
    perf = {"measured": True, "source": perf_mod.SOURCE, "machine": record.host_info(),
            "results": perf_rows if perf_rows is not None else [row], "skipped": []}
    rec = record.build(_conf_report(lib, cases, plugin), _models_report(phases, curve), perf,
                       [{"op": "add", "implemented": True, "dtypes": ["float32"]}], [])
    path = tmp_path / f"{name}.json"
    record.write(rec, path)
    return path


def gate(*args):
    return subprocess.run([sys.executable, "-m", "devicekit", "gate", *map(str, args)],
                          capture_output=True, text=True, timeout=HUNG_S)


def write_policy(tmp_path, extra="", perf=True):
    text = CI_POLICY.read_text()
    # these tests judge the figures the records store (timing "recorded");
    # the release policy's alternate timing of binaries: test_gate_timing.py
    assert 'timing = "alternate"' in text
    text = text.replace('timing = "alternate"', 'timing = "recorded"')
    if not perf:
        assert "enabled = true" in text
        text = text.replace("enabled = true", "enabled = false")
    text = text.replace(CI_MODELS_LINE,
                        'required = ["mlp"]')
    p = tmp_path / "policy.toml"
    p.write_text(text + extra)
    return p


# ---- the policy ----------------------------------------------------------

def test_ci_policy_parses_with_the_documented_values():
    pol = policy.load(CI_POLICY)
    assert (pol.level, pol.required_dtypes, pol.allow_partial) == ("full", ["float32"], False)
    assert pol.models == ["mlp", "cnn", "gpt2", "llama", "encoder", "vit", "gpt2-ddp2",
                          "hf-gpt2", "hf-llama", "hf-bert", "hf-vit", "hf-resnet", "hf-t5",
                          "hf-moe", "hf-data2vec-audio", "hf-clip"]
    assert pol.max_slowdown == 1.5 and pol.perf_enabled and pol.waivers == []


@pytest.mark.parametrize("text,problem", [
    ("[conformance]\nlevle = 'full'\n", "unknown key 'conformance.levle'"),
    ("[models]\nloss_band = '1%'\n", "'models.loss_band' must be a number"),
    ("[performance]\nenabled = 1\n", "'performance.enabled' must be true or false"),
    ("[conformance]\nlevel = 'most'\n", "must be one of core, full"),
    ("[models]\nrequired = 'mlp'\n", "must be a list of strings"),
    ("[[waivers]]\nrule = 'conformance.regression'\nsubject = '*'\nreason = 'x'\n"
     "expires = '2027-01-01'\n", "TOML date"),
    ("[[waivers]]\nrule = 'binary.sha256'\nsubject = '*'\nreason = 'x'\nexpires = 2027-01-01\n",
     "must be one of"),
    ("[[waivers]]\nrule = 'conformance.regression'\nsubject = '*'\nexpires = 2027-01-01\n",
     "'waivers[0].reason' is missing"),
    ("schema_version = 2\n", "reads policy schema 1"),
    ("[conformance\n", "not valid TOML"),
])
def test_bad_policy_is_one_error_naming_the_key(text, problem):
    with pytest.raises(BadPolicy) as e:
        policy.parse(text, "p.toml")
    assert problem in str(e.value) and str(e.value).startswith("p.toml: ")


# ---- the rules -----------------------------------------------------------

def _check(tmp_path, new, base, extra="", perf=True, **kw):
    pol = policy.load(write_policy(tmp_path, extra, perf))
    return check_mod.check(record.load(new), record.load(base), pol, new, base, **kw)


def test_same_record_is_admitted_and_nothing_is_listed(tmp_path):
    base = make(tmp_path, "base")
    v = _check(tmp_path, base, base)
    assert v.admitted and not v.waived and not v.gains, [vars(r) for r in v.refusals]
    assert v.binary["actual"] == record.load(base)["plugin"]["sha256"]


def test_regression_missing_case_and_gain(tmp_path):
    base = make(tmp_path, "base")
    cases = [("runtime/alloc_zero", None, None, "pass"),
             ("ops/add/float32/basic", "add", "float32", "crash"),
             ("ops/exp/float16/basic", "exp", "float16", "pass")]
    v = _check(tmp_path, make(tmp_path, "new", cases), base)
    got = {(r.rule, r.subject, r.new) for r in v.refusals}
    assert ("conformance.regression", "ops/add/float32/basic", "crash") in got
    assert ("conformance.regression", "ops/add/float32/bcast", "missing") in got
    assert [g["id"] for g in v.gains] == ["ops/exp/float16/basic"]


def test_required_dtype_must_pass_even_without_a_baseline_pass(tmp_path):
    cases = BASE_CASES + [("ops/mul/float32/basic", "mul", "float32", "not-implemented")]
    base = make(tmp_path, "base", cases)
    v = _check(tmp_path, base, base)
    assert [(r.rule, r.subject) for r in v.refusals] == [
        ("conformance.required", "ops/mul/float32/basic")]


def test_policy_dtypes_are_required_even_where_the_spec_makes_them_optional(tmp_path):
    base = make(tmp_path, "base")  # exp float16 is not implemented (optional in the spec)
    assert _check(tmp_path, base, base).admitted
    pol = policy.parse(write_policy(tmp_path).read_text().replace(
        'required_dtypes = ["float32"]', 'required_dtypes = ["float32", "float16"]'))
    v = check_mod.check(record.load(base), record.load(base), pol, base, base)
    assert [(r.rule, r.subject, r.new) for r in v.refusals] == [
        ("conformance.required", "ops/exp/float16/basic", "not-implemented")]


def test_model_failure_names_the_first_divergent_layer(tmp_path):
    base = make(tmp_path, "base")
    v = _check(tmp_path, make(tmp_path, "new", phases={"forward": "fail"}), base)
    (r,) = [r for r in v.refusals if r.subject == "models/mlp/float32/forward"]
    assert r.rule == "models.regression" and "first divergent layer: fc2" in r.detail


def test_loss_curve_outside_the_band(tmp_path):
    base = make(tmp_path, "base")
    v = _check(tmp_path, make(tmp_path, "new", curve=(2.0, 1.5, 1.3)), base)
    assert [(r.rule, r.subject) for r in v.refusals] == [("models.loss_band", "mlp/float32")]
    assert "step 2" in v.refusals[0].detail
    assert _check(tmp_path, make(tmp_path, "new2", curve=(2.0, 1.5, 1.2001)), base).admitted


def test_slowdown_is_a_ratio_against_the_threshold(tmp_path):
    """Figures compare as ratios to the interleaved numpy reference: the
    absolute seconds (load on the machine) do not decide."""
    base = make(tmp_path, "base", seconds=1e-3, ratio=2.0)
    assert _check(tmp_path, make(tmp_path, "ok", seconds=1.4e-3, ratio=2.8), base).admitted
    v = _check(tmp_path, make(tmp_path, "slow", seconds=1.6e-3, ratio=3.2), base)
    assert [(r.rule, r.subject) for r in v.refusals] == [
        ("performance.slowdown", "add/float32/1024")]
    assert "1.60x slower relative to numpy" in v.refusals[0].detail
    loaded = _check(tmp_path, make(tmp_path, "loaded", seconds=4e-3, ratio=2.1), base)
    assert loaded.admitted, [vars(r) for r in loaded.refusals]
    off = _check(tmp_path, make(tmp_path, "slow2", seconds=9e-3, ratio=18.0), base, perf=False)
    assert off.admitted and any("performance.enabled = false" in n for n in off.notes)


def test_absolute_and_ratio_figures_do_not_mix(tmp_path):
    base = make(tmp_path, "base", ratio=2.0)
    v = _check(tmp_path, make(tmp_path, "bench", ratio=None), base)
    assert [r.rule for r in v.refusals] == ["performance.missing"]
    assert "only absolute seconds" in v.refusals[0].detail
    # two bench documents: absolute seconds, said in a note
    v = _check(tmp_path, make(tmp_path, "b2", ratio=None, seconds=1.2e-3),
               make(tmp_path, "b1", ratio=None))
    assert v.admitted and any("absolute seconds" in n for n in v.notes)


def test_schema_1_records_are_migrated(tmp_path):
    """A version-1 record (best-of-7 absolute seconds) loads; its figures
    become 'not measured' with the reason: as a baseline, performance is not
    compared (a note says to re-certify); as the new record, it is refused."""
    v2 = make(tmp_path, "v2")
    doc = json.loads(v2.read_text())
    doc.pop("content_sha256")  # version-1 records predate the whole-record hash
    doc["schema_version"] = 1
    doc["performance"]["source"] = "devicekit.gate.perf/1"
    for r in doc["performance"]["results"]:
        for k in ("reference", "reference_seconds", "ratio"):
            r.pop(k)
    v1 = tmp_path / "v1.json"
    v1.write_text(json.dumps(doc))
    old = record.load(v1)
    assert old["migrated_from"] == 1 and not old["performance"]["measured"]
    assert "re-certify" in old["performance"]["reason"]
    v = _check(tmp_path, v2, v1)
    assert v.admitted and any("re-certify" in n for n in v.notes), v.notes
    v = _check(tmp_path, v1, v2)
    assert [r.rule for r in v.refusals] == ["performance.missing"]


def _scripted(times):
    """A batch function returning the next scripted duration, logging its calls."""
    it, log = iter(times), []

    def batch():
        log.append(1)
        return next(it)
    return batch, log


def test_interleaved_ratio_holds_under_load():
    """Injected timings: plugin 2 ms, numpy 1 ms per call. Load that lasts
    the whole run (x3 on both sides) cancels in the ratio; bursts that hit
    one side's batch in most rounds (x1.5..x5) do not reach the best-of; the
    sides alternate which goes first."""
    # the plugin side is hit in 5 of 9 rounds: a median would move, the best does not
    p_burst, r_burst = {1: 4.0, 3: 2.0, 5: 2.0, 7: 3.0, 8: 1.5}, {2: 3.0, 6: 5.0}
    for sustained in (1.0, 3.0):
        p_times = [2e-3 * 10 * sustained * p_burst.get(i, 1.0) for i in range(9)]
        r_times = [1e-3 * 20 * sustained * r_burst.get(i, 1.0) for i in range(9)]
        order = []
        plugin, _ = _scripted(p_times)
        ref, _ = _scripted(r_times)
        m = perf_mod.interleaved(lambda order=order, plugin=plugin: (order.append("p"), plugin())[1],
                                 lambda order=order, ref=ref: (order.append("r"), ref())[1], 10, 20, 9)
        assert m["ratio"] == pytest.approx(2.0) and len(m["ratios"]) == 9
        assert m["seconds"] == pytest.approx(2e-3 * sustained)
        assert m["ratios"][1] == pytest.approx(8.0) and m["ratios"][2] == pytest.approx(2 / 3)
        assert order[:4] == ["p", "r", "r", "p"]  # alternating which side goes first


def test_gate_admits_a_loaded_machine_and_refuses_a_real_slowdown(tmp_path):
    """Records whose figures come from :func:`perf.interleaved` on injected
    timings: a quiet baseline; a candidate measured under 3x load (its
    absolute times 3x: a best-of-N rule would refuse it) is admitted; a
    candidate whose kernel really got 2x slower is refused, under load too."""
    def figure(plugin_ms, load):
        p, _ = _scripted([plugin_ms * 1e-3 * f for f in load])
        r, _ = _scripted([1e-3 * f for f in load])
        m = perf_mod.interleaved(p, r, 1, 1, len(load))
        return [{"op": "add", "dtype": "float32", "size": 1024, "shapes": [[1024]],
                 "calls": 1, "repeats": len(load), "reference": "numpy", **m}]

    quiet, busy = [1.0] * 9, [3.0, 2.5, 3.5, 3.0, 2.8, 3.2, 3.0, 2.6, 3.1]
    base = make(tmp_path, "base", perf_rows=figure(2.0, quiet))
    loaded = make(tmp_path, "loaded", perf_rows=figure(2.0, busy))
    v = _check(tmp_path, loaded, base)
    assert v.admitted, [vars(r) for r in v.refusals]
    assert record.load(loaded)["performance"]["results"][0]["seconds"] >= 2.5 * 2e-3
    slower = make(tmp_path, "slower", perf_rows=figure(4.0, busy))
    v = _check(tmp_path, slower, base)
    assert [(r.rule, r.subject) for r in v.refusals] == [
        ("performance.slowdown", "add/float32/1024")]
    assert "2.00x slower relative to numpy" in v.refusals[0].detail


def test_timings_of_another_machine_are_not_compared(tmp_path):
    base = make(tmp_path, "base")
    rec = record.load(base)
    rec["performance"]["machine"]["fingerprint"] = "another"
    rec["performance"]["results"][0]["seconds"] = 1.0
    other = tmp_path / "other.json"
    record.write(rec, other)
    v = _check(tmp_path, other, base)
    assert v.admitted and any("different machines" in n for n in v.notes)
    # the same policy, refusing timings of other machines
    pol = policy.parse(write_policy(tmp_path).read_text().replace(
        'other_machine = "skip"', 'other_machine = "refuse"'))
    v = check_mod.check(record.load(other), record.load(base), pol, other, base)
    assert [r.rule for r in v.refusals] == ["performance.machine"]


def test_waivers_apply_until_they_expire(tmp_path):
    import datetime

    base = make(tmp_path, "base")
    new = make(tmp_path, "new", [c if c[1] != "add" else (*c[:3], "fail") for c in BASE_CASES])
    waiver = ('\n[[waivers]]\nrule = "conformance.regression"\nsubject = "ops/add/float32/*"\n'
              'reason = "vendor bug 12, fixed in 1.1"\nexpires = 2027-01-31\n')
    v = _check(tmp_path, new, base, waiver, today=datetime.date(2027, 1, 31))
    assert v.admitted and {r.subject for r in v.waived} == {"ops/add/float32/basic",
                                                           "ops/add/float32/bcast"}
    v = _check(tmp_path, new, base, waiver, today=datetime.date(2027, 2, 1))
    assert not v.admitted and len(v.refusals) == 2
    assert any("expired on 2027-01-31" in n for n in v.notes)


def test_sha256_mismatch_is_refused_and_not_waivable(tmp_path):
    base = make(tmp_path, "base")
    other = tmp_path / "libother.so"
    other.write_bytes(b"\x7fELF acme build 2")
    waiver = ('\n[[waivers]]\nrule = "conformance.regression"\nsubject = "*"\n'
              'reason = "everything"\nexpires = 2999-01-01\n')
    v = _check(tmp_path, base, base, waiver, binary=str(other))
    assert [r.rule for r in v.refusals] == ["binary.sha256"]


# ---- the command: exit codes, one-line errors, no partial output ---------

def test_cli_admits_refuses_and_writes_junit_and_html(tmp_path):
    base = make(tmp_path, "base")
    new = make(tmp_path, "new", [c if c[1] != "add" else (*c[:3], "fail") for c in BASE_CASES])
    pol = write_policy(tmp_path)
    ok = gate("check", base, "--baseline", base, "--policy", pol)
    assert ok.returncode == 0 and "ADMITTED" in ok.stdout, ok.stderr
    junit, page = tmp_path / "gate.xml", tmp_path / "gate.html"
    bad = gate("check", new, "--baseline", base, "--policy", pol, "--junit", junit,
               "--html", page)
    assert bad.returncode == 1 and "REFUSED" in bad.stdout
    assert "conformance.regression  ops/add/float32/basic" in bad.stdout
    import xml.etree.ElementTree as ET
    root = ET.parse(junit).getroot()
    assert root.get("failures") == "2"
    assert "ops/add/float32/bcast" in page.read_text() and "REFUSED" in page.read_text()


def _variants(tmp_path, base):
    text = base.read_text()
    rec = json.loads(text)
    out = {"truncated": text[: len(text) // 2]}
    edited = copy.deepcopy(rec)
    assert edited["conformance"]["case_fields"][5] == "outcome"
    edited["conformance"]["cases"][0][5] = "fail"
    out["edited"] = json.dumps(edited)
    twice = copy.deepcopy(rec)
    twice["conformance"]["cases"].append(twice["conformance"]["cases"][0])
    out["twice"] = json.dumps(twice)
    newer = copy.deepcopy(rec)
    newer["schema_version"] = record.SCHEMA_VERSION + 1
    out["newer"] = json.dumps(newer)
    other = copy.deepcopy(rec)
    other["plugin"]["name"] = "other"
    out["other"] = json.dumps(record.seal(other))  # a sound record, of another plugin
    paths = {}
    for k, v in out.items():
        paths[k] = tmp_path / f"{k}.json"
        paths[k].write_text(v)
    return paths


@pytest.mark.parametrize("case,code,problem", [
    ("truncated", 4, "not valid JSON (truncated?)"),
    ("edited", 4, "does not match its cases_sha256"),
    ("twice", 4, "lists a case id twice"),
    ("newer", 5, "newer than this DeviceKit reads"),
    ("other", 7, "certifies plugin 'other'"),
    ("missing_baseline", 3, "baseline not found"),
    ("bad_policy", 6, "unknown key 'performance.max_slowdwn'"),
])
def test_bad_input_one_line_distinct_code_no_output(tmp_path, case, code, problem):
    base = make(tmp_path, "base")
    paths = _variants(tmp_path, base)
    pol = write_policy(tmp_path)
    new, baseline = base, base
    if case in paths:
        new = paths[case]
    elif case == "missing_baseline":
        baseline = tmp_path / "nope.json"
    else:
        pol.write_text(pol.read_text().replace("max_slowdown", "max_slowdwn"))
    junit, page = tmp_path / "out" / "g.xml", tmp_path / "out" / "g.html"
    junit.parent.mkdir()
    proc = gate("check", new, "--baseline", baseline, "--policy", pol, "--junit", junit,
                "--html", page)
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and problem in lines[0], proc.stderr
    culprit = {"missing_baseline": baseline, "bad_policy": pol}.get(case, new)
    assert lines[0].startswith(f"devicekit gate check: error: {culprit}: ")
    assert proc.stdout == "" and os.listdir(junit.parent) == []


@pytest.mark.parametrize("text,what", [
    ('{"cases": [{"id": "a"}, {"id": "b"}', "truncated"),  # cut just after an inner "}"
    ('{"cases": [{"id": "a"}, {"id": "b"}]}', None),
    ('{"cases": [{"id": "a"}, {"id": "b"', "truncated"),  # inside a string
    ('{"cases": [{"id": "a"}, {"id": "b"}, ', "truncated"),
    ('{"cases": [{"id": "a", "ok": tr', "truncated"),  # inside a literal
    ('{"cases": [{"id": "\\u00', "truncated"),  # inside an escape
    ('{"cases": [{"id": "a"} {"id": "b"}]}', "corrupted"),  # a comma lost mid-file
    ('{"id": "\u00e9"}'.encode("utf-8")[:-3], "truncated"),  # inside a 2-byte character
    (b'{"id": "\xff"}', "corrupted"),
])
def test_a_record_cut_anywhere_is_called_truncated(tmp_path, text, what):
    """Whether the parser failed at the text's end decides, not the last
    character: a report cut in half can end with an inner object's "}".
    Release records (gate) and shard reports (report merge) say the same."""
    from devicekit.gate import validate
    from devicekit.scale import merge
    raw = text if isinstance(text, bytes) else text.encode()
    path = tmp_path / "r.json"
    path.write_bytes(raw)
    with open(path, "rb") as f:
        if what is None:
            assert validate.read_json(path, "the record", f, len(raw))["cases"][1] == {"id": "b"}
            return
        with pytest.raises(Exception, match=rf"not valid JSON \({what}\?\)"):
            validate.read_json(path, "the record", f, len(raw))
    with pytest.raises(merge.BadReport, match=rf"not valid JSON \({what}\?\)"):
        merge.parse(raw, str(path))


def test_matrix_of_two_plugins_and_versions(tmp_path):
    a1 = make(tmp_path, "a1")
    a2 = make(tmp_path, "a2", [c if c[1] != "add" else (*c[:3], "fail") for c in BASE_CASES])
    rec = record.load(a2)
    rec["devicekit"]["version"] = "0.2.0"
    record.write(rec, a2)
    lib_b = tmp_path / "libbeta.so"
    lib_b.write_bytes(b"beta")
    b1 = make(tmp_path, "b1", plugin="beta", lib=lib_b)
    out, js = tmp_path / "m.html", tmp_path / "m.json"
    proc = gate("matrix", a1, a2, b1, "--out", out, "--json", js, "--policy", write_policy(tmp_path))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(js.read_text())
    assert doc["devicekit_versions"] == ["0.1.0", "0.2.0"]
    verdicts = {(e["plugin"], e["devicekit_version"]): e["verdict"]["admitted"]
                for e in doc["entries"]}
    assert verdicts == {("acme", "0.1.0"): True, ("acme", "0.2.0"): False, ("beta", "0.1.0"): True}
    acme2 = next(e for e in doc["entries"] if e["devicekit_version"] == "0.2.0")
    assert acme2["conformance"]["per_op"]["add/float32"] == {"pass": 0, "total": 2,
                                                             "worst": "fail"}
    page = out.read_text()
    assert "<script" not in page and "http" not in page.replace("http-equiv", "")
    assert page.count("REFUSED") == 1 and page.count("ADMITTED") == 2


# ---- what ships: the release policy and the plugin template's CI ---------

def test_release_policy_ships_as_ci_policy():
    """`--policy release` (the template's CI) is ci/policy.toml, installed."""
    assert Path(policy.release_policy_path()).read_text() == CI_POLICY.read_text()
    assert policy.load("release").raw == policy.load(CI_POLICY).raw


def test_scaffolded_ci_certifies_checks_and_keeps_the_reports(tmp_path):
    from devicekit import cli

    assert cli.main(["new", "acme", "--dir", str(tmp_path / "acme")]) == 0
    ci = (tmp_path / "acme" / ".github" / "workflows" / "ci.yml").read_text()
    certify = ci.index("devicekit gate certify --device acme:0 --wheel dist/*.whl")
    check = ci.index("devicekit gate check gate/record.json --baseline certified/acme.json")
    upload = ci.index("path: gate/")
    assert certify < check < upload
    assert "--policy release --binary dist/*.whl --junit gate/junit.xml --html gate/gate.html" in ci
    assert "--out gate/record.json --reports gate/reports" in ci


def test_wheel_info_finds_the_certified_library(tmp_path):
    import zipfile

    from devicekit.gate.errors import BadRecord

    lib = tmp_path / "libacme.so"
    lib.write_bytes(b"\x7fELF acme build 1")
    good, other = tmp_path / "good.whl", tmp_path / "other.whl"
    with zipfile.ZipFile(good, "w") as z:
        z.writestr("devicekit_acme/__init__.py", "")
        z.write(lib, "devicekit_acme/libdevicekit_acme.so")
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("devicekit_acme/libdevicekit_acme.so", b"\x7fELF acme build 2")
    sha = record.sha256_file(lib)
    info = record.wheel_info(good, sha)
    assert info["library_member"] == "devicekit_acme/libdevicekit_acme.so"
    assert info["sha256"] == record.sha256_file(good) and info["file"] == "good.whl"
    assert record.wheel_info(other, sha)["library_member"] is None
    with pytest.raises(BadRecord, match="not a wheel"):
        record.wheel_info(lib, sha)


def test_bench_json_feeds_the_performance_section(tmp_path):
    from devicekit.gate import perf
    from devicekit.gate.errors import BadRecord

    doc = {"schema": "devicekit.bench/1", "results": [
        {"op": "add", "dtype": "float32", "size": 4096, "shapes": [[4096], [4096]],
         "seconds": 2e-6, "calls": 1000, "repeats": 5, "bytes": 49152, "flops": 4096,
         "gbps": 24.6, "gflops": 2.0}], "skipped": []}
    sec = perf.from_bench(doc, record.host_info(), "b.json")
    assert sec["measured"] and sec["source"] == "devicekit.bench/1"
    assert [perf.key(r) for r in sec["results"]] == ["add/float32/4096"]
    with pytest.raises(BadRecord, match="not a devicekit.bench/1 document"):
        perf.from_bench({"schema": "other"}, record.host_info(), "b.json")


def test_released_wheel_must_be_the_certified_one(tmp_path):
    import zipfile

    lib = tmp_path / "libacme.so"
    lib.write_bytes(b"\x7fELF acme build 1")
    wheel, other = tmp_path / "acme-1.0-py3-none-linux_x86_64.whl", tmp_path / "rebuilt.whl"
    for w, stamp in ((wheel, "1"), (other, "2")):
        with zipfile.ZipFile(w, "w") as z:
            z.write(lib, "devicekit_acme/libdevicekit_acme.so")
            z.writestr("devicekit_acme-1.0.dist-info/RECORD", stamp)
    rec = record.build(_conf_report(lib, BASE_CASES), _models_report(), {"measured": False},
                       [], [], wheel=str(wheel))
    path = tmp_path / "rec.json"
    record.write(rec, path)
    pol = write_policy(tmp_path, perf=False)
    assert gate("check", path, "--baseline", path, "--policy", pol, "--binary", wheel).returncode == 0
    proc = gate("check", path, "--baseline", path, "--policy", pol, "--binary", other)
    assert proc.returncode == 1 and "binary.sha256" in proc.stdout
    missing = gate("check", path, "--baseline", path, "--policy", pol, "--binary", tmp_path / "x.whl")
    assert missing.returncode == 3 and "--binary not found" in missing.stderr


def test_refusals_are_grouped_by_op_with_counts_and_the_baseline_outcome(tmp_path):
    """Hundreds of flat rows read as one heading per op with its
    count and a few examples, each with the baseline's outcome next to the new."""
    from devicekit.gate import reports
    adds = [(f"ops/add/float32/c{i}", "add", "float32") for i in range(8)]
    muls = [(f"ops/mul/float32/c{i}", "mul", "float32") for i in range(7)]
    base = make(tmp_path, "base", BASE_CASES[:1] + [(*c, "pass") for c in adds]
                + [(*c, "not-implemented") for c in muls])
    new = make(tmp_path, "new", BASE_CASES[:1] + [(*c, "fail") for c in adds]
               + [(*c, "not-implemented") for c in muls])
    v = _check(tmp_path, new, base)
    mul = [r for r in v.refusals if r.rule == "conformance.required"]
    assert len(mul) == 7 and {r.baseline for r in mul} == {"not-implemented"}
    out = reports.text(v)
    assert "Refused: 15 reason(s) in 2 group(s)" in out
    assert "\n[add] 8 refused\n" in out and "\n[mul] 7 refused\n" in out
    assert out.index("[add] 8 refused") < out.index("[mul] 7 refused")
    assert "... and 3 more add" in out and "... and 2 more mul" in out
    assert sum("ops/" in line for line in out.splitlines()) == 2 * reports.EXAMPLES
    assert "conformance.regression  ops/add/float32/c0  pass      fail" in out
    assert "conformance.required  ops/mul/float32/c0  not-implemented  not-implemented" in out
    page = reports.html(v)
    assert "<h3>add (8)</h3>" in page and "<h3>mul (7)</h3>" in page
    assert "3 more add" in page and page.count("ops/mul/float32/c") == 7
