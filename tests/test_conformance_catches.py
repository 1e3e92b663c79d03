"""The conformance suite (``devicekit conformance``) catches real bugs, and its
CLI, reports and determinism behave as documented (docs/conformance.md).

Needs: a C compiler (the faulty plugins wrap the installed reference CPU
plugin, one fault each: tests/conformance_plugins/faulty.c) and cpu:0.
"""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest


def conformance(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "devicekit", "conformance", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def run_report(tmp_path, *args):
    out = tmp_path / "rep"
    proc = conformance(*args, "--report", out)
    report = json.loads((out / "report.json").read_text())
    return proc, report, out


def outcomes(report, prefix=""):
    return {c["id"]: c["outcome"] for c in report["cases"] if c["id"].startswith(prefix)}


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """The whole suite on the reference plugin, once, with reports."""
    tmp = tmp_path_factory.mktemp("full")
    return run_report(tmp, "--device", "cpu:0", "--jobs", "2")


def test_reference_plugin_passes_full_suite(full_run):
    proc, report, _ = full_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    s = report["summary"]
    skipped = [c for c in report["cases"] if c["outcome"] == "skipped"]
    assert s["passed"] and s["by_outcome"]["pass"] + len(skipped) == s["total"] > 2000
    # only fused-kernel calls its float32-only kernels decline (float16/bfloat16 ...)
    assert all(c["section"] == "fused" and "declined" in c["message"] for c in skipped)
    assert report["corpus"]["checked"] and report["corpus"]["ok"]
    assert set(s["by_section"]) == {"runtime", "ops", "rng", "errors", "composites", "fused",
                                     "autograd"}
    assert "PASSED" in proc.stdout and "runtime" in proc.stdout  # the summary table


def test_report_json_and_junit_are_valid(full_run):
    _, report, out = full_run
    assert report["schema_version"] == 1
    assert len(report["plugin"]["sha256"]) == 64 and report["plugin"]["name"] == "cpu"
    assert report["device"]["name"] == "cpu:0" and report["device_api_version"]
    case = report["cases"][0]
    assert {"id", "section", "op", "dtype", "seed", "outcome", "duration_s", "message"} <= set(case)
    root = ET.parse(out / "junit.xml").getroot()
    assert root.tag == "testsuites"
    assert sum(int(s.get("tests")) for s in root) == report["summary"]["total"]
    html = (out / "report.html").read_text()
    assert "PASSED" in html and "http" not in html.split("</style>")[0]  # offline: no links


FAULT_CASES = [  # fault, -k filter, cases that must be caught, their outcome
    ("add_rel", "ops/add/float32", ["ops/add/float32/odd", "ops/add/float32/bcast"], "fail"),
    ("sum_drop", "ops/reduce_sum/float32", ["ops/reduce_sum/float32/ax0",
                                            "ops/reduce_sum/float32/all"], "fail"),
    ("matmul_odd_k", "ops/matmul/float32", ["ops/matmul/float32/odd"], "fail"),
    ("exp_neg_inf", "ops/exp/float32", ["ops/exp/float32/edge"], "fail"),
    ("leak", "runtime", ["runtime/leak_check"], "fail"),
    ("no_wait", "runtime/streams", ["runtime/streams_ordered_by_events"], "fail"),
    ("fused_rms", "fused/cpu.rms_norm_f32/", ["fused/cpu.rms_norm_f32/float32/odd",
                                             "fused/cpu.rms_norm_f32/float32/no_weight"], "fail"),
]


@pytest.mark.parametrize("fault,pattern,caught,outcome", FAULT_CASES, ids=[f[0] for f in FAULT_CASES])
def test_suite_catches_fault(tmp_path, faulty_plugins, fault, pattern, caught, outcome):
    proc, report, _ = run_report(tmp_path, "--plugin", faulty_plugins[fault], "-k", pattern,
                                 "--jobs", "2")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    got = outcomes(report)
    for case_id in caught:
        assert got[case_id] == outcome, (case_id, got[case_id])
    bad = next(c for c in report["cases"] if c["id"] == caught[0])
    assert f"--case {caught[0]}" in bad["replay"] and "replay:" in proc.stdout
    if fault in ("add_rel", "exp_neg_inf"):
        assert bad["details"]["max_abs_err"] > 0 and "worst_index" in bad["details"]
    if fault == "fused_rms":  # the fused kernel still runs, and what it declines stays right
        assert "ran: cpu.rms_norm_f32" in bad["message"]
        assert got["fused/cpu.rms_norm_f32/accepts_some_call"] == "pass"
        assert got["fused/cpu.rms_norm_f32/rejects/float64"] == "pass"
    if fault == "matmul_odd_k":  # even K still passes: the fault is the odd K only
        assert got["ops/matmul/float32/even_k"] == "pass"
    assert report["run"]["partial"] and not report["corpus"]["checked"]


def test_crash_is_isolated_and_the_run_continues(tmp_path, faulty_plugins):
    proc, report, _ = run_report(tmp_path, "--plugin", faulty_plugins["segv"],
                                 "-k", "ops/neg/float64/", "-k", "ops/abs/float64/", "--jobs", "2")
    assert proc.returncode == 1
    got = outcomes(report)
    neg = {k: v for k, v in got.items()  # (an empty tensor launches no kernel)
           if k.startswith("ops/neg/float64/") and not k.endswith("/empty")}
    assert neg and set(neg.values()) == {"crash"}, neg
    assert all(v == "pass" for k, v in got.items() if k.startswith("ops/abs/")), got
    crash = next(c for c in report["cases"] if c["outcome"] == "crash")
    assert "SIGSEGV" in crash["message"] and crash["op"] == "neg"


def test_exit_codes_and_filters(tmp_path):
    assert conformance("--device", "nosuch:0").returncode == 2
    bad = conformance("--plugin", tmp_path / "missing.so")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert conformance().returncode == 2  # neither --device nor --plugin
    listed = conformance("--device", "cpu:0", "-k", "runtime", "--list").stdout.split()
    assert listed and all("runtime" in i for i in listed)
    assert conformance("--device", "cpu:0", "-k", "no-such-case").returncode == 1
    one = conformance("--device", "cpu:0", "--case", "ops/add/float32/bcast", "--jobs", "1")
    assert one.returncode == 0 and "total       1" in one.stdout.replace(" 1 ", " 1 ")


def test_same_plugin_same_report(tmp_path, full_run):
    _, first, _ = full_run
    _, again, _ = run_report(tmp_path, "--device", "cpu:0", "--jobs", "2")
    strip = lambda r: [(c["id"], c["seed"], c["outcome"]) for c in r["cases"]]  # noqa: E731
    assert strip(first) == strip(again)


def test_runs_as_plain_pytest(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "devicekit.conformance_tests",
                           "-p", "devicekit.conformance.pytest_plugin", "--device", "cpu:0",
                           "-k", "runtime", "-q", "-p", "no:cacheprovider"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0 and " passed" in proc.stdout, proc.stdout[-2000:]


def test_fused_section_without_kernels_is_skipped_never_passed():
    from devicekit.conformance.case import Target, run_case
    from devicekit.conformance_tests import fused

    class Bare:
        name = "bare"

        def fused_kernels(self):
            return []

    target = Target(device=type("Dev", (), {"plugin": Bare()})())
    (case,) = fused.cases(target)
    result = run_case(case, target)
    assert result["outcome"] == "skipped" and "no fused kernels" in result["message"]
    assert fused.SECTION.min_cases(target) is None
