"""The gate against deliberately regressed builds of one plugin.

tests/conformance_plugins/faulty.c wraps the reference CPU plugin as a plugin
named "faulty": FAULT=0 changes nothing (the "last certified build"), FAULT=1
makes float32 add off by a relative 1e-3 (the regressed build). Both are
certified for real (`devicekit gate certify`, narrowed to two conformance
cases and the MLP in float32 so it takes seconds), then gated:
one newly failing case -> refused, naming that case and only it; the model
that now diverges -> refused with its first divergent layer; a sha256
mismatch -> refused; waivers -> admitted, and printed.

Needs: a C compiler and the reference CPU plugin (cpu:0).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DEVICE_API_INCLUDE, REPO_ROOT, _find_c_compiler, compile_test_plugin
from conftest import CI_MODELS_LINE
from conftest import HUNG_S

CASES = ("ops/add/float32/odd", "ops/mul/float32/odd")  # add is broken by FAULT=1, mul is not


def gate(*args, timeout=HUNG_S):
    return subprocess.run([sys.executable, "-m", "devicekit", "gate", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    import devicekit_cpu

    compiler = _find_c_compiler()
    if compiler is None:
        pytest.skip("no C compiler on PATH: the faulty plugins cannot be built")
    out = tmp_path_factory.mktemp("gate_faulty")
    real = f'-DREAL_PLUGIN="{devicekit_cpu.library_path()}"'
    source = REPO_ROOT / "tests" / "conformance_plugins" / "faulty.c"
    recs = {}
    for fault in (0, 1):
        lib = compile_test_plugin(compiler, source, DEVICE_API_INCLUDE, out / f"faulty{fault}.so",
                                  flags=("-Werror", f"-DFAULT={fault}", real), libs=("-ldl", "-lm"))
        rec = out / f"faulty{fault}.json"
        proc = gate("certify", "--plugin", lib, *[x for c in CASES for x in ("--case", c)],
                    "--model", "mlp", "--model-dtype", "float32", "--no-perf", "--jobs", "2",
                    "--out", rec, "--reports", out / f"reports{fault}")
        assert proc.returncode == 0 and rec.exists(), proc.stdout + proc.stderr[-3000:]
        recs[f"lib{fault}"], recs[f"rec{fault}"] = lib, rec
        recs[f"reports{fault}"] = out / f"reports{fault}"
    # The test policy: DeviceKit's release policy, accepting these narrowed
    # (partial) records, requiring only the MLP, and without performance.
    text = (REPO_ROOT / "ci" / "policy.toml").read_text()
    for old, new in (("allow_partial = false", "allow_partial = true"),
                     ("enabled = true", "enabled = false"),
                     (CI_MODELS_LINE, 'required = ["mlp"]')):
        assert old in text
        text = text.replace(old, new)
    (out / "policy.toml").write_text(text)
    recs["policy"] = out / "policy.toml"
    return recs


def test_the_good_build_is_admitted_against_itself(records):
    r = records
    proc = gate("check", r["rec0"], "--baseline", r["rec0"], "--policy", r["policy"],
                "--binary", r["lib0"])
    assert proc.returncode == 0 and "ADMITTED" in proc.stdout, proc.stdout + proc.stderr


def test_regressed_build_is_refused_naming_the_case_and_the_layer(records, tmp_path):
    r = records
    junit = tmp_path / "gate.xml"
    proc = gate("check", r["rec1"], "--baseline", r["rec0"], "--policy", r["policy"],
                "--junit", junit)
    assert proc.returncode == 1 and "REFUSED" in proc.stdout, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()
            if line.startswith(("conformance.", "models."))]
    conformance = {r[1] for r in rows if r[0].startswith("conformance.")}
    assert conformance == {"ops/add/float32/odd"}  # the one newly failing case, and only it
    models = {r[1]: " ".join(r) for r in rows if r[0] == "models.regression"}
    assert "models/mlp/float32/forward" in models
    assert "first divergent layer: fc0" in models["models/mlp/float32/forward"]
    assert "models/mlp/float32/forward" in junit.read_text()


def test_sha256_mismatch_is_refused(records):
    r = records
    proc = gate("check", r["rec0"], "--baseline", r["rec0"], "--policy", r["policy"],
                "--binary", r["lib1"])
    assert proc.returncode == 1
    assert [line.split()[0] for line in proc.stdout.splitlines()
            if line.startswith("binary.")] == ["binary.sha256"]
    sha0 = json.loads(Path(r["rec0"]).read_text())["plugin"]["sha256"]
    assert sha0[:16] in proc.stdout


def test_waivers_admit_and_are_printed(records, tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text(Path(records["policy"]).read_text() + """
[[waivers]]
rule = "conformance.regression"
subject = "ops/add/float32/*"
reason = "faulty bug 1: add is off by 1e-3, fixed in the next build"
expires = 2999-12-31

[[waivers]]
rule = "models.regression"
subject = "models/mlp/float32/*"
reason = "follows from faulty bug 1"
expires = 2999-12-31

[[waivers]]
rule = "models.required"
subject = "models/mlp/float32/*"
reason = "follows from faulty bug 1"
expires = 2999-12-31

[[waivers]]
rule = "conformance.regression"
subject = "*"
reason = "an old blanket waiver"
expires = 2020-01-01
""")
    proc = gate("check", records["rec1"], "--baseline", records["rec0"], "--policy", policy)
    assert proc.returncode == 0 and "ADMITTED" in proc.stdout, proc.stdout + proc.stderr
    assert "Waived: 6" in proc.stdout  # the add case and the MLP's five phases
    assert "faulty bug 1: add is off by 1e-3" in proc.stdout
    assert "waiver ignored, expired on 2020-01-01" in proc.stdout


def test_certifying_twice_gives_the_same_record(records, tmp_path):
    """Same binary, same machine: equal records but for the documented
    volatile fields (creation time, durations, measured timings, the
    device memory a plugin sized from the free memory at load)."""
    from devicekit.gate import record

    recs = []
    for i in (1, 2):
        out = tmp_path / f"again{i}.json"
        proc = gate("certify", "--plugin", records["lib0"], "--case", CASES[0], "--model", "mlp",
                    "--model-dtype", "float32", "--jobs", "2", "--out", out)
        assert proc.returncode == 0, proc.stderr[-3000:]
        recs.append(record.load(out))
    a, b = recs
    assert a["performance"]["measured"] and len(a["performance"]["results"]) == 5
    assert record.deterministic_view(a) == record.deterministic_view(b)
    assert a["conformance"]["cases_sha256"] == b["conformance"]["cases_sha256"]
    assert a["models"]["per_model"]["mlp"]["float32"]["loss_curve"] == \
        b["models"]["per_model"]["mlp"]["float32"]["loss_curve"]


def test_certify_from_reports_writes_the_record_the_run_wrote(records, tmp_path):
    """--from-reports: the suites' reports of a certify run give the same record
    without running them again."""
    from devicekit.gate import record

    out = tmp_path / "from.json"
    proc = gate("certify", "--plugin", records["lib1"], "--from-reports", records["reports1"],
                "--no-perf", "--out", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "running conformance" not in proc.stderr and "running models" not in proc.stderr
    a, b = record.load(records["rec1"]), record.load(out)
    assert b["conformance"]["partial"]  # what the reports say: a filtered run stays partial
    assert record.deterministic_view(a) == record.deterministic_view(b)


def test_certify_from_reports_refuses_reports_that_are_not_this_run(records, tmp_path):
    import shutil

    def certify(*args):
        return gate("certify", "--out", tmp_path / "r.json", "--no-perf", *args)

    # another binary's reports (lib0 certified with lib1's results)
    proc = certify("--plugin", records["lib0"], "--from-reports", records["reports1"])
    assert proc.returncode == 2 and "is not the certified binary's" in proc.stderr, proc.stderr
    # another level than the one asked for
    proc = certify("--plugin", records["lib1"], "--from-reports", records["reports1"],
                   "--level", "core")
    assert proc.returncode == 2 and "conformance level 'full', not the requested 'core'" \
        in proc.stderr, proc.stderr
    # one suite's report where the other's belongs
    swapped = tmp_path / "swapped"
    shutil.copytree(records["reports1"] / "models", swapped / "conformance")
    shutil.copytree(records["reports1"] / "models", swapped / "models")
    proc = certify("--plugin", records["lib1"], "--from-reports", swapped)
    assert proc.returncode == 2 and "not a `devicekit conformance` report" in proc.stderr
    # a missing report
    half = tmp_path / "half"
    shutil.copytree(records["reports1"] / "conformance", half / "conformance")
    proc = certify("--plugin", records["lib1"], "--from-reports", half)
    assert proc.returncode == 3 and "models/report.json: not found" in proc.stderr, proc.stderr
    # filters belong to the run that made the reports
    proc = certify("--plugin", records["lib1"], "--from-reports", records["reports1"],
                   "--model", "mlp")
    assert proc.returncode == 2 and "--from-reports takes the suites' reports as they are" \
        in proc.stderr
    assert not (tmp_path / "r.json").exists()
