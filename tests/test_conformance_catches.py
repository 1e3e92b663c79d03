"""The conformance suite (``devicekit conformance``) catches real bugs, and its
CLI, reports and determinism behave as documented (docs/conformance.md).

Needs: a C compiler (the faulty plugins wrap the installed reference CPU
plugin, one fault each: tests/conformance_plugins/faulty.c), cc and c++ for
the kernel-mutant check (benchmarks/mutation_run.py builds variants of
reference_backend/cpu and cuda from source), and cpu:0.
"""

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import HUNG_S

HALF_SUFFIX = {"float16": "f16", "bfloat16": "bf16"}  # the CPU plugin's 16-bit fused kernels


def conformance(*args, timeout=HUNG_S):
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
def full_run(cpu_conformance_run):
    """The whole suite on the reference plugin with reports: the session's run
    (conftest.cpu_conformance_run, which the gate's CI test certifies from)."""
    return cpu_conformance_run


def test_reference_plugin_passes_full_suite(full_run):
    proc, report, _ = full_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    s = report["summary"]
    # The torch section (PyTorch's OpInfo samples through devicekit.torch) is
    # checked in tests/test_torch_opinfo.py: its optional bridge gaps are
    # not-implemented, its samples torch cannot make are skipped.
    torch_cases = [c for c in report["cases"] if c["section"] == "torch"]
    assert all(c["outcome"] in ("pass", "not-implemented", "skipped") for c in torch_cases)
    assert all(not c["required"] for c in torch_cases if c["outcome"] != "pass")
    skipped = [c for c in report["cases"] if c["outcome"] == "skipped" and c["section"] != "torch"]
    others = [c for c in report["cases"] if c["section"] != "torch"]
    assert s["passed"] and sum(c["outcome"] == "pass" for c in others) + len(skipped) \
        == len(others) > 2000
    # only fused-kernel calls a kernel declines (each kernel takes one dtype:
    # cpu.<op>_f32, _bf16, _f16; the 16-bit ones no permuted float32 views),
    # tensors past 2**31 elements that are opt-in or need more memory than there
    # is, and the promise cpu:0 cannot show by default: a wait on another
    # device's event (one device; tests/test_promises.py runs it on two)
    not_here = {"runtime/wait_event_other_device": "needs a second device"}
    assert all((c["section"] == "fused" and ("declined" in c["message"]
                                             or "did not run on permuted" in c["message"]))
               or (c["id"].endswith("/huge_2g") and ("opt-in" in c["message"]
                                                     or "memory" in c["message"]))
               or (c["id"] in not_here and not_here[c["id"]] in c["message"])
               for c in skipped), [(c["id"], c["message"][:100]) for c in skipped
                                   if "huge_2g" not in c["id"]][:5]
    # every 16-bit fused call runs a fused kernel of its dtype (softmax over a
    # non-last axis aside: no kernel takes it; and fused.EXTRA's float16_mask
    # in bfloat16: the attention kernels take an additive mask of q's dtype or
    # float32 only, so that call is declined by design and the decomposition
    # is checked), never the decomposition
    declined_by_design = ("/axis0", "/bfloat16/float16_mask")
    for c in skipped:
        if c["section"] == "fused" and c["dtype"] in HALF_SUFFIX \
                and not any(k in c["id"] for k in declined_by_design):
            ran = rf"cpu\.\w+_{HALF_SUFFIX[c['dtype']]} ran"
            assert re.search(ran, c["message"]), (c["id"], c["message"])
    assert report["corpus"]["checked"] and report["corpus"]["ok"]
    assert set(s["by_section"]) == {"runtime", "ops", "kernels", "rng", "errors", "composites",
                                     "fused", "autograd", "fuzz", "torch", "collectives",
                                     "graphs", "hostile"}
    assert "PASSED" in proc.stdout and "runtime" in proc.stdout  # the summary table
    need = s["by_requirement"]
    assert need["required"]["pass"] > 1000 and need["optional"]["pass"] > 2000
    assert report["implementation"]["required_missing"] == []
    assert "status: implements 43/43 base ops" in proc.stdout
    lib = report["plugin"]
    assert lib["sha256"] in proc.stderr and lib["library_path"] in proc.stderr and "built " in proc.stderr
    # every declared (op, dtype) ran in exactly that dtype (int8 reduce_sum too)
    ran = {tuple(p) for c in report["cases"] for p in c.get("ran", ())}
    declared = {(k["op"], d) for k in report["kernels"] if k["implemented"] for d in k["dtypes"]}
    assert ("reduce_sum", "int8") in ran and ("cumsum", "uint8") in ran
    assert declared <= ran, sorted(declared - ran)[:10]


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
    ("leak", "runtime/leak", ["runtime/leak_check"], "fail"),
    ("no_wait", "runtime/streams", ["runtime/streams_ordered_by_events"], "fail"),
    ("fused_rms", "fused/cpu.rms_norm_f32/", ["fused/cpu.rms_norm_f32/float32/odd",
                                             "fused/cpu.rms_norm_f32/float32/no_weight"], "fail"),
    ("max_nan", "kernels/reduce_max/float32/", ["kernels/reduce_max/float32/axes"], "fail"),
    ("where_bcast", "kernels/where/float32/", ["kernels/where/float32/layouts"], "fail"),
    ("matmul_packed_k", "kernels/matmul/float32/", ["kernels/matmul/float32/layouts"], "fail"),
    # promises the SDK never lets through, checked with raw calls (conformance_tests/_api.py)
    ("free_null", "runtime/free_null", ["runtime/free_null"], "fail"),
    ("ordinal_clamp", "runtime/properties_bad_ordinal", ["runtime/properties_bad_ordinal"],
     "fail"),
    ("graph_nest", "graphs/plugin/", ["graphs/plugin/not_nested"], "fail"),
    # groups that do not nest deadlock the nested ring: a timeout (20 s), not a hang
    ("group_flat", "collectives/send_recv/2ranks", ["collectives/send_recv/2ranks"], "fail"),
]


@pytest.mark.parametrize("fault,pattern,caught,outcome", FAULT_CASES, ids=[f[0] for f in FAULT_CASES])
def test_suite_catches_fault(tmp_path, faulty_plugins, fault, pattern, caught, outcome):
    # one worker: a few cases, and each worker process pays the suite's start
    # (torch's OpInfo corpus, about 6 s of CPU); crash isolation with two is below
    proc, report, _ = run_report(tmp_path, "--plugin", faulty_plugins[fault], "-k", pattern,
                                 "--jobs", "1")
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
    # the direct call has no NaN, no broadcast, no K past 256
    if fault in ("max_nan", "where_bcast", "matmul_packed_k"):
        assert got[caught[0].rsplit("/", 1)[0] + "/direct"] == "pass"
    if fault == "matmul_packed_k":  # the failure names the layout and shape that caught it
        assert "a_T [13, 259]" in bad["message"], bad["message"][:300]
    if fault == "matmul_odd_k":  # even K still passes: the fault is the odd K only
        assert got["ops/matmul/float32/even_k"] == "pass"
    if fault in ("free_null", "ordinal_clamp", "graph_nest"):  # only the case it breaks
        assert [i for i, o in got.items() if o != "pass"] == caught, got
    if fault == "group_flat":
        assert "timed out" in bad["message"] and "Coll_Run(recv)" in bad["message"]
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


def test_pytest_mode_isolates_a_crash_too(tmp_path, faulty_plugins):
    """``pytest --pyargs devicekit.conformance_tests`` runs its cases in the
    CLI's workers: the crashing neg kernel fails its tests, naming the signal
    and the case, and the session goes on; --conformance-in-process keeps the old way (a
    crash ends the session)."""
    import signal

    def pytest_run(*extra):
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "--pyargs", "devicekit.conformance_tests", "--plugin",
                               str(faulty_plugins["segv"]), "--conformance-jobs", "2", "-k",
                               "ops/neg/float64/odd or ops/neg/float64/T or ops/abs/float64/odd",
                               *extra], capture_output=True, text=True, timeout=HUNG_S, cwd=tmp_path)

    proc = pytest_run()
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert re.search(r"\b2 failed, 1 passed\b", proc.stdout), proc.stdout[-3000:]
    assert ("CRASH: worker process killed by SIGSEGV while running ops/neg/float64/odd (op neg)"
            in proc.stdout), proc.stdout[-3000:]
    assert "devicekit conformance --plugin" in proc.stdout  # the replay command
    alone = pytest_run("--conformance-in-process")
    assert alone.returncode == -signal.SIGSEGV, alone.returncode


def test_exit_codes_and_filters(tmp_path):
    assert conformance("--device", "nosuch:0").returncode == 2
    bad = conformance("--plugin", tmp_path / "missing.so")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert conformance().returncode == 2  # neither --device nor --plugin
    listed = conformance("--device", "cpu:0", "-k", "runtime", "--list").stdout.split()
    assert listed and all("runtime" in i for i in listed)
    assert conformance("--device", "cpu:0", "-k", "no-such-case").returncode == 1
    one = conformance("--device", "cpu:0", "--case", "ops/add/float32/bcast", "--jobs", "1")
    assert one.returncode == 0 and re.search(r"^total\s+1\s", one.stdout, re.M), one.stdout


def test_exclude_leaves_out_cases_after_the_other_filters(tmp_path):
    base = conformance("--device", "cpu:0", "-k", "ops/add/float32/", "--list").stdout.split()
    kept = conformance("--device", "cpu:0", "-k", "ops/add/float32/", "--exclude", "/bcast",
                       "--exclude", "/odd", "--list").stdout.split()
    assert "ops/add/float32/bcast" in base and "ops/add/float32/odd" in base
    assert kept == [i for i in base if "/bcast" not in i and "/odd" not in i] and kept
    everything = conformance("--device", "cpu:0", "--op", "add", "--exclude", "ops/add/",
                             "--exclude", "add", "--list")
    assert everything.stdout.strip() == ""
    none = conformance("--device", "cpu:0", "-k", "ops/add/float32/", "--exclude", "float32")
    assert none.returncode == 1 and "not float32" in none.stderr, none.stderr
    # a filtered run's report names the exclusion and is partial
    proc, report, _ = run_report(tmp_path, "--device", "cpu:0", "--case", "ops/add/float32/bcast",
                                 "--case", "ops/add/float32/odd", "--exclude", "/odd", "--jobs", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [c["id"] for c in report["cases"]] == ["ops/add/float32/bcast"]
    assert report["run"]["partial"] and "not /odd" in report["run"]["filter"]


def test_an_excluded_section_is_not_built():
    """--exclude torch/ drops every case of the torch section before it is
    built (its OpInfo samples need torch and take seconds), as a -k that
    cannot select it does; a pattern like /erf/ alone may select it."""
    from devicekit.conformance import registry
    assert "torch" in registry.reachable_sections(["/erf/"])
    assert "torch" not in registry.reachable_sections(["/erf/"], excludes=["torch/"])
    reach = registry.reachable_sections(excludes=["graphs/", "collectives"])
    assert reach == {s.name for s, _ in registry.sections()} - {"graphs", "collectives"}
    assert registry.reachable_sections(excludes=["/erf/"]) == registry.reachable_sections()


def test_same_plugin_same_report(tmp_path, cpu_core_conformance_run):
    """Two runs of one plugin in separate processes draw the same cases with the
    same seeds and reach the same outcomes (level core: the full level draws
    its cases the same way, and tests/test_scale.py merges shards of the same
    core run back into it field for field)."""
    _, first, _ = cpu_core_conformance_run
    _, again, _ = run_report(tmp_path, "--device", "cpu:0", "--jobs", "2", "--level", "core")
    strip = lambda r: [(c["id"], c["seed"], c["outcome"]) for c in r["cases"]]  # noqa: E731
    assert len(first["cases"]) > 1000 and strip(first) == strip(again)


def test_runs_as_plain_pytest(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "devicekit.conformance_tests",
                           "-p", "devicekit.conformance.pytest_plugin", "--device", "cpu:0",
                           "-k", "runtime", "-q", "-p", "no:cacheprovider"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=HUNG_S)
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


def test_required_float32_is_required_for_every_op():
    """spec_dtypes() once iterated required_dtypes "float32" letter by letter, so
    a plugin declaring sign only for float64 passed. Now it is a required
    not-implemented for every op whose spec requires float32."""
    from devicekit.conformance import registry
    from devicekit.conformance.case import Target
    from devicekit.conformance.report import is_fatal

    for o in registry.spec()["ops"]:
        allowed, required = registry.spec_dtypes(o["name"])
        assert required and set(required) <= set(allowed), o["name"]
        assert all(len(d) > 1 for d in required), (o["name"], required)
        if o["required_dtypes"] == "float32":
            assert required == ["float32"]
    dev = type("Dev", (), {"properties": {"dtypes": registry.spec()["dtype_groups"]["all"]}})()
    target = Target(device=dev, declared={"sign": {"float64"}, "argmax": {"float16"}})
    st = registry.implementation_status(target)
    assert "sign/float32" in st["required_missing"] and "argmax/float32" in st["required_missing"]
    assert "implements 2/43 base ops" in registry.status_line(st)
    from devicekit.conformance_tests import ops_elementwise
    sign = [c for c in ops_elementwise.cases(target) if c.id.startswith("ops/sign/float32/")]
    missing = {"outcome": "not-implemented"}
    assert sign and all(c.required and c.not_implemented and is_fatal(c, missing) for c in sign)


def test_bounds_come_from_the_spec_and_are_tight():
    """The per-op bounds are the spec's: exact ops compare bits (and zero signs
    where defined, bool bytes), ulp ops allow only their ulps, and half-precision
    sums may not accumulate in half precision."""
    import numpy as np
    from devicekit.testing import bounds
    from devicekit.testing import oracle as O

    with pytest.raises(AssertionError, match="bit for bit"):
        O.assert_close(np.float32([1.0000001]), np.float32([1.0]), "float32", op="add")
    with pytest.raises(AssertionError):  # maximum(-0.0, +0.0) is +0.0
        O.assert_close(np.float32([-0.0]), O.binary("maximum", np.float32([-0.0]),
                                                     np.float32([0.0])), "float32", op="maximum")
    with pytest.raises(AssertionError, match="bytes other than 0/1"):
        O.assert_close(np.array([2], np.uint8).view(np.bool_), np.array([True]), "bool", op="eq")
    x = np.float32([0.1])
    e = O.unary("erf", x)
    two_ulps = np.nextafter(np.nextafter(e, np.float32(1)), np.float32(1))
    O.assert_close(two_ulps, e, "float32", op="erf")
    with pytest.raises(AssertionError):  # 3 ulps: an erf approximation that atol 1e-5 let through
        O.assert_close(np.nextafter(two_ulps, np.float32(1)), e, "float32", op="erf")
    # a float16 sum of 4096 ones accumulated in float16 stops at 2048
    ones = np.ones(4096, np.float16)
    want = O.reduce_sum(ones, 0, keepdims=False)
    with pytest.raises(AssertionError):
        O.assert_close(np.float16(2048), want, "float16", op="reduce_sum", n=4096, scale=4096.0)
    assert bounds.bound_of("copy")["kind"] == "exact" and bounds.bound_of("matmul")["lambda"] > 0


def test_cli_refuses_bad_input_before_running(tmp_path):
    bad = conformance("--device", "cpu:0", "--timeout", "0")
    assert bad.returncode == 2 and "--timeout" in bad.stderr and len(bad.stderr.splitlines()) == 1
    blocker = tmp_path / "file"
    blocker.write_text("x")
    bad = conformance("--device", "cpu:0", "--report", blocker / "sub")
    assert bad.returncode == 3 and "--report" in bad.stderr and len(bad.stderr.splitlines()) == 1


def test_op_filter_is_exact():
    listed = conformance("--device", "cpu:0", "--op", "add", "--list").stdout.split()
    assert listed and all(i.split("/")[1] == "add" for i in listed)
    assert not any("scatter_add" in i for i in listed)


def test_diff_reports_regressions(tmp_path, full_run):
    _, report, out = full_run
    worse = json.loads(json.dumps(report))
    case = next(c for c in worse["cases"] if c["id"] == "ops/add/float32/odd")
    case["outcome"] = "fail"
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "report.json").write_text(json.dumps(worse))
    same = conformance("diff", out, out)
    assert same.returncode == 0 and "no regressions" in same.stdout
    proc = conformance("diff", out, tmp_path / "new", "--html", tmp_path / "d.html")
    assert proc.returncode == 1 and "add/float32: 1" in proc.stdout
    assert "ops/add/float32/odd" in (tmp_path / "d.html").read_text()
    back = conformance("diff", tmp_path / "new", out)
    assert back.returncode == 0 and "newly passing: 1" in back.stdout


def test_ctrl_c_writes_a_partial_report(tmp_path):
    """SIGINT once the first progress line says a tenth of the cases finished
    (never after a fixed time, which a busy machine overruns): the other nine
    tenths are still to run, so the signal stops the run midway."""
    import signal

    import threading

    rep = tmp_path / "rep"
    # 761 quick cases: a tenth of them is soon done, and nine tenths leave the
    # signal seconds to arrive
    quick = [x for op in ("add", "sub", "mul", "maximum", "minimum") for x in ("-k", f"ops/{op}/")]
    proc = subprocess.Popen([sys.executable, "-m", "devicekit", "conformance", "--device", "cpu:0",
                             "--jobs", "1", *quick, "--report", str(rep)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    progressed, lines = threading.Event(), []

    def read_stderr():
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("["):  # the progress counter: cases have finished
                progressed.set()
    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert progressed.wait(1800), "".join(lines)  # bounds a hung run only
        assert proc.poll() is None, "the run ended before the signal: widen the filter"
        proc.send_signal(signal.SIGINT)
    except BaseException:
        proc.kill()
        raise
    finally:
        out = proc.stdout.read()
        proc.wait(timeout=HUNG_S)
        reader.join(30)
    err = "".join(lines)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert "Traceback" not in err
    report = json.loads((rep / "report.json").read_text())
    assert report["run"]["partial"] and report["run"]["interrupted"]
    assert 0 < report["summary"]["total"] and not report["summary"]["passed"]


def _bench(*names):
    bench = __import__("pathlib").Path(__file__).resolve().parents[1] / "benchmarks"
    sys.path.insert(0, str(bench))
    try:
        return bench, [__import__(n) for n in names]
    finally:
        sys.path.remove(str(bench))


#: The kernel mutants the check judges (docs/conformance.md "The kernel-mutant
#: check"): every kernel mutant but those KERNEL_CHECK_LEFT_OUT names (cpu: the
#: two only a huge_2g case kills; cuda_sim: one believed equivalent) and the
#: shared-header mutants that rebuild more than --max-units 2 units.
KERNEL_CHECK_SIZE = {"cpu": 69, "cuda_sim": 13}


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpu", "cuda_sim"])
def test_the_suite_alone_kills_every_kernel_mutant(tmp_path, target):
    """The kernel-mutant check (benchmarks/mutation_run.py --kernel --narrow):
    each mutant whose bug is in kernel code (every kind but NOT_KERNEL), its
    units rebuilt at -O1, is failed by the conformance suite alone (no model
    suite, no torch section): first by the cases of the ops its patch is in
    (SEES), else by every kernel section, and only a failing case counts.
    cpu runs its own baseline (the unpatched -O1 build passes the union of
    the patterns); cuda_sim's is the CI coverage job's run of the same -O1
    build (.ci/cuda), as the emulator makes that union a 6-minute run."""
    import shutil
    if not (shutil.which("cc") and shutil.which("c++")):
        pytest.skip("needs cc and c++ to build plugin variants")
    bench, (mutation_run, module) = _bench("mutation_run",
                                           "mutants" if target == "cpu" else "mutants_cuda")
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, str(bench / "mutation_run.py"), "--target", target,
                           "--kernel", "--narrow", "--opt=-O1", "--max-units", "2", "--jobs", "1",
                           "--build-jobs", "1", *(["--no-baseline"] if target == "cuda_sim" else []),
                           "--workdir", str(tmp_path / "w"), "--json", str(out)],
                          capture_output=True, text=True, timeout=HUNG_S)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())
    kernel = {m[0] for m in module.MUTANTS if m[4] not in mutation_run.NOT_KERNEL}
    kernel -= set(getattr(module, "KERNEL_CHECK_LEFT_OUT", {}))
    wide = set(re.findall(r"rebuilds \d+ units > --max-units 2\): (\S+)", proc.stdout))
    assert {r["name"] for r in results} == kernel - wide
    assert len(results) == KERNEL_CHECK_SIZE[target], proc.stdout[-4000:]
    # each killed by a case that failed, not by a run that failed as a whole
    missed = [(r["name"], r["first_failure"]) for r in results
              if not (r["killed"] and re.match(r"(fail|error|crash) \S+/", r["first_failure"] or ""))]
    assert not missed, missed


@pytest.mark.slow
def test_cpu_plugin_core_alone_passes_core_conformance(tmp_path):
    """The reference plugin's plain core builds and links without src/fast/
    (DKCPU_FAST=0, as CMake's DEVICEKIT_CPU_FAST=OFF) and passes the core
    level: its plain matmul, norms and attention are real kernels, not a
    fallback that only the fast paths make correct."""
    import concurrent.futures
    import shutil
    if not (shutil.which("cc") and shutil.which("c++")):
        pytest.skip("needs cc and c++ to build the plugin")
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        import mutation_run
    finally:
        sys.path.pop(0)
    src = tmp_path / "src"
    shutil.copytree(mutation_run.SRC, src)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        lib, objs = mutation_run.build(str(src), str(tmp_path / "obj"),
                                       str(tmp_path / "libdevicekit_cpu.so"), pool=pool, fast=False)
    assert "kernels_matmul.cpp" in objs and not [u for u in objs if u.startswith("fast/")]
    proc, report, _ = run_report(tmp_path, "--plugin", lib, "--jobs", "2", "--level", "core")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert report["plugin"]["library_path"] == lib
    ran = outcomes(report)
    # the kernels whose fast paths were left out ran, and passed
    for prefix in ("ops/matmul/float32/", "ops/matmul/bfloat16/", "fused/cpu.rms_norm_f32/",
                   "fused/cpu.sdpa_rows_f32/"):
        mine = [o for i, o in ran.items() if i.startswith(prefix)]
        assert mine and "pass" in mine and set(mine) <= {"pass", "skipped"}, (prefix, mine)
    # and its attention says what it is: no flash tiles in this build
    assert not [i for i in ran if i.startswith("fused/cpu.sdpa_flash_f32/")]


def test_a_missing_mutant_target_fails_loudly():
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        import mutation_run
    finally:
        sys.path.pop(0)
    with pytest.raises(mutation_run.PatchError, match="occurs 0 times"):
        mutation_run.apply("int x = 1;", "int y", "int z", "demo")


def test_a_variant_run_that_hangs_is_not_counted_as_killed(tmp_path):
    """The mutation run's wall-clock limit is a safety net, not a verdict: a
    conformance run stopped by it counts as killed only if its (partial)
    report already holds a failing case; orphaned segments of the reference
    plugin's communicators are removed, a live creator's are kept."""
    import devicekit_cpu

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        import mutation_run
    finally:
        sys.path.pop(0)
    killed, first, took, _ = mutation_run.conformance(
        devicekit_cpu.library_path(), str(tmp_path / "rep"), 1, wall=1.0,
        patterns=["collectives/"])
    assert not killed and first.startswith("hung"), first
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    names = [f"/dev/shm/dkcpu-coll-{pid}-0123456789abcdef-n2" for pid in (dead.pid, os.getpid())]
    try:
        before = mutation_run.shm_segments()
        for name in names:
            open(name, "w").close()
        mutation_run.remove_orphan_segments(before)
        assert [os.path.exists(n) for n in names] == [False, True]
    finally:
        for name in names:
            if os.path.exists(name):
                os.unlink(name)


def test_composite_needs_are_the_recorded_launches():
    """composites.NEEDS (conformance_tests/_needs.json) is what the
    decompositions really launch on cpu:0; regenerate it with
    python -m devicekit.conformance_tests._needs --device cpu:0."""
    import devicekit as dk
    from devicekit.conformance_tests import _needs, composites

    recorded = {k: set(v) for k, v in _needs.record(dk.device("cpu:0")).items()}
    assert recorded == composites.NEEDS, {k: (sorted(recorded[k] ^ composites.NEEDS.get(k, set())))
                                          for k in recorded if recorded[k] != composites.NEEDS.get(k)}
    assert {"copy", "fill"} <= composites.NEEDS["scaled_dot_product_attention"]


def test_kernel_check_narrows_every_kernel_mutant_to_cases_that_exist():
    """The kernel check (mutation_run.py --kernel --narrow, which
    test_the_suite_alone_kills_every_kernel_mutant runs in CI) runs
    each kernel mutant first on the cases of the ops its patch is in
    (mutants.SEES, mutants_cuda.SEES): every mutant of a kernel kind has its
    patterns, every mutant left out is named with a reason, and every pattern
    selects cases the check runs (one selecting none would only cost the
    widened rerun, but would mean a wrong table)."""
    _, (mutants, mutants_cuda, mutation_run) = _bench("mutants", "mutants_cuda", "mutation_run")
    assert set(mutation_run.NOT_KERNEL) <= {m[4] for m in mutants.MUTANTS}  # real kinds
    patterns = set()
    for module in (mutants, mutants_cuda):
        kernel = {m[0] for m in module.MUTANTS if m[4] not in mutation_run.NOT_KERNEL}
        assert set(module.SEES) == kernel, set(module.SEES) ^ kernel
        left_out = getattr(module, "KERNEL_CHECK_LEFT_OUT", {})
        assert set(left_out) <= kernel and all(left_out.values())
        patterns |= {p for pats in module.SEES.values() for p in pats}
    listed = conformance("--device", "cpu:0", "--list")
    assert listed.returncode == 0, listed.stderr[-2000:]
    ids = [i for i in listed.stdout.split()
           if "/" in i and not any(x in i for x in mutation_run.KERNEL_EXCLUDE)]
    assert len(ids) > 5000
    assert not [p for p in patterns if not any(p in i for i in ids)]
