"""The one-command GPU check (reference_backend/cuda/verify_on_gpu.sh) and its
benchmark script, on a machine without a GPU: what CI can prove of them.

The full dry run (it builds the real plugin) runs in .ci/run; here: the
script's usage and argument errors, and bench_gpu.py's dry run, whose every
figure must come out on cpu:0 against torch on the CPU.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HUNG_S

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "reference_backend" / "cuda" / "verify_on_gpu.sh"
BENCH = ROOT / "reference_backend" / "cuda" / "bench_gpu.py"


def test_help_lists_every_step_and_option():
    p = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True)
    assert p.returncode == 0
    for word in ("--dry-run", "--wheelhouse", "--arch", "memcheck", "racecheck", "initcheck",
                 "synccheck", "summary.json", "bench_gpu.py"):
        assert word in p.stdout


def test_unknown_argument_is_a_usage_error(tmp_path):
    p = subprocess.run(["bash", str(SCRIPT), "--frobnicate"], capture_output=True, text=True)
    assert p.returncode == 2 and "unknown argument --frobnicate" in p.stderr


def test_bench_dry_run_produces_every_figure(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "bench.json"
    p = subprocess.run([sys.executable, str(BENCH), "--dry-run", "--rounds", "2", "--json", str(out)],
                       capture_output=True, text=True, timeout=HUNG_S)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["dry_run"] is True and doc["device"] == "cpu:0"
    names = set(doc["figures"])
    for prefix in ("matmul 64^3 float32", "matmul 64^3 bfloat16", "rms_norm", "softmax",
                   "sdpa causal", "tiny add", "device copy"):
        assert any(n.startswith(prefix) for n in names), (prefix, names)
    for name, fig in doc["figures"].items():
        assert fig["torch"]["median"] > 0, name
        if "devicekit" in fig:
            assert fig["devicekit"]["median"] > 0, name
