"""``devicekit models`` end to end: the reference plugin passes every model,
and deliberately faulty plugins fail with the outcome they deserve and the
first diverging layer named (docs/models.md).

Needs: a C compiler (the faulty plugins wrap the installed reference CPU
plugin, one fault each: tests/conformance_plugins/faulty.c) and cpu:0.
"""

import json
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import DEVICE_API_INCLUDE, REPO_ROOT, _find_c_compiler, compile_test_plugin
from conftest import HUNG_S
from devicekit import models as zoo

# faulty.c's fault numbers used here (see its header)
FAULTS = {"add_rel": 1, "fused_rms": 8, "erf_segv": 9, "no_scatter": 10}


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    import devicekit_cpu

    compiler = _find_c_compiler()
    if compiler is None:
        pytest.skip("no C compiler on PATH: the faulty plugins cannot be built")
    out = tmp_path_factory.mktemp("faulty_models")
    real = f'-DREAL_PLUGIN="{devicekit_cpu.library_path()}"'
    source = REPO_ROOT / "tests" / "conformance_plugins" / "faulty.c"
    return {name: compile_test_plugin(compiler, source, DEVICE_API_INCLUDE, out / f"faulty_{name}.so",
                                      flags=("-Werror", f"-DFAULT={n}", real), libs=("-ldl", "-lm"))
            for name, n in FAULTS.items()}


def models(*args, timeout=HUNG_S):
    return subprocess.run([sys.executable, "-m", "devicekit", "models", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def run_report(tmp_path, *args):
    out = tmp_path / "rep"
    proc = models(*args, "--report", out)
    assert (out / "report.json").exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc, json.loads((out / "report.json").read_text()), out


def outcomes(report):
    return {c["id"]: c["outcome"] for c in report["cases"]}


def test_reference_plugin_passes_every_model(cpu_models_run):
    # the session's run of every model (conftest.cpu_models_run); the hf-* models
    # in it are test_models_hf.py's to judge, the zoo's are judged here
    proc, report, out = cpu_models_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    s = report["summary"]
    total = s["total"]
    zoo_cases = [c for c in report["cases"] if c["op"] in zoo.NAMES]
    assert s["passed"] and total == s["by_outcome"]["pass"]
    assert len(zoo_cases) == 6 * 3 * 5 and all(c["outcome"] == "pass" for c in zoo_cases)
    assert report["suite"] == "models" and report["schema_version"] == 1
    assert len(report["plugin"]["sha256"]) == 64 and report["device"]["name"] == "cpu:0"
    assert {"mlp", "cnn", "gpt2", "llama", "encoder", "vit"} <= set(s["by_section"])
    for name in zoo.NAMES:
        info = report["models"][name]
        assert info["golden"]["match"], (name, info["golden"])
        assert len(info["curves"]["float64"]) == 6 and info["layers"][0] in ("fc0", "stem", "embed")
    gpt = next(c for c in report["cases"] if c["id"] == "models/gpt2/float32/inference")
    assert "cpu.sdpa_flash_f32" in gpt["details"]["fused_kernels"]  # no_grad ran the fused kernels
    root = ET.parse(out / "junit.xml").getroot()
    assert root.get("name") == "devicekit models cpu:0" and int(root.get("tests")) == total
    assert {t.get("name") for t in root} == {f"models.{m}" for m in s["by_section"]}
    html = (out / "report.html").read_text()
    assert "PASSED" in html and "http" not in html.split("</style>")[0]
    assert "PASSED" in proc.stdout and "llama" in proc.stdout  # the summary table
    assert f"[{total}/{total}]" in proc.stderr  # progress


def test_wrong_add_fails_and_names_the_first_layer(tmp_path, faulty):
    proc, report, _ = run_report(tmp_path, "--plugin", faulty["add_rel"], "--model", "mlp,llama",
                                 "--dtype", "float32", "--jobs", "2")
    assert proc.returncode == 1
    assert set(outcomes(report).values()) == {"fail"}, outcomes(report)
    firsts = {}
    for case in report["cases"]:
        first = case["details"]["divergence"]["first"]
        firsts[case["op"]] = first["layer"]
        assert "add" in first["base_ops"] and first["ratio"] > 100
        assert "first diverging layer: layer" in case["message"]
        assert f"--model {case['op']}" in case["replay"] and "--plugin" in case["replay"]
    # Llama's embedding is a gather (no add): its first attention block is where it starts
    assert firsts == {"mlp": "fc0", "llama": "block0.attn"}
    replay = report["cases"][0]["details"]["layer_replay"]
    assert replay.endswith("--layer fc0")
    again = subprocess.run([sys.executable, "-m", "devicekit", *shlex.split(replay)[1:]],
                           capture_output=True, text=True, timeout=HUNG_S)
    assert again.returncode == 1 and "FAIL forward  output" in again.stdout, again.stdout


def test_wrong_fused_kernel_fails_every_phase_that_runs_it(tmp_path, faulty):
    # The plugin also registers the backward kernels (device API 1.3), so
    # training runs the wrong fused forward too: every float32 phase fails.
    proc, report, _ = run_report(tmp_path, "--plugin", faulty["fused_rms"], "--model", "llama",
                                 "--dtype", "float32", "--jobs", "1")
    assert proc.returncode == 1
    got = outcomes(report)
    assert set(got.values()) == {"fail"}, got
    case = next(c for c in report["cases"] if c["id"] == "models/llama/float32/inference")
    first = case["details"]["divergence"]["first"]
    assert first["layer"] == "block0.attn" and "cpu.rms_norm_f32" in first["fused_kernels"]
    assert "fused kernel 'cpu.rms_norm_f32'" in case["message"]
    assert first["without_fused"]["ok"] and "the fault is in the fused kernel(s)" in case["message"]
    assert "--model llama --dtype float32 --layer block0.attn" in case["details"]["layer_replay"]


def test_crash_is_isolated_per_model(tmp_path, faulty):
    proc, report, _ = run_report(tmp_path, "--plugin", faulty["erf_segv"], "--model", "mlp,cnn",
                                 "--dtype", "float32", "--jobs", "2")
    assert proc.returncode == 1
    got = outcomes(report)
    assert {v for k, v in got.items() if "/mlp/" in k} == {"crash"}  # GELU(erf) segfaults
    assert {v for k, v in got.items() if "/cnn/" in k} == {"pass"}   # no erf: runs on
    crash = next(c for c in report["cases"] if c["outcome"] == "crash")
    assert "SIGSEGV" in crash["message"] and "in float32" in crash["message"]


def test_missing_op_blocks_the_phases_that_need_it(tmp_path, faulty):
    proc, report, _ = run_report(tmp_path, "--plugin", faulty["no_scatter"], "--model", "mlp",
                                 "--dtype", "float32", "--jobs", "1")
    assert proc.returncode == 1  # float32 is required: not-implemented fails the run
    got = outcomes(report)
    for phase in ("forward", "loss", "inference"):
        assert got[f"models/mlp/float32/{phase}"] == "pass"
    for phase in ("backward", "train"):
        case = next(c for c in report["cases"] if c["id"] == f"models/mlp/float32/{phase}")
        assert case["outcome"] == "not-implemented"
        assert case["message"].startswith("blocked by: scatter_add")
        assert case["details"]["blocked_by"] == ["scatter_add"]
    assert "would unblock the most models: scatter_add (1)" in proc.stdout


def test_runs_as_plain_pytest(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "devicekit.models.suite",
                           "-p", "devicekit.conformance.pytest_plugin", "--device", "cpu:0",
                           "-k", "mlp and float32", "-q", "-p", "no:cacheprovider"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=HUNG_S)
    assert proc.returncode == 0 and "5 passed" in proc.stdout, proc.stdout[-2000:]
