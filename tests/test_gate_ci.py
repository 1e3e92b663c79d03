"""The project's own CI gates the reference CPU plugin on every change,
exactly as the release gates a vendor's plugin (ci/README.md): certify cpu:0
and check the record against the committed ci/baselines/cpu.json under
ci/policy.toml. A change that regresses the CPU plugin (or drops a case it
passed) fails here with the gate's table of reasons.

The check runs ci/policy.toml as it is, performance included: it times the
baseline's binary and the candidate's alternately on this machine (docs/gate.md,
"Performance timed alternately"), so a busy CI machine cannot make it flap. A
build identical to the baseline's binary (sha256) is not timed at all; a
baseline binary that is not on the CI machine is skipped with a note
(other_machine = "skip"), as records of another machine were before.

Needs: the reference CPU plugin (cpu:0) and the session's suite runs on it
(conftest.cpu_conformance_run, cpu_models_run); the certify itself then
measures only performance.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HUNG_S

from devicekit.gate import check, policy, record

REPO_ROOT = Path(__file__).resolve().parents[1]
BASELINE = REPO_ROOT / "ci" / "baselines" / "cpu.json"
POLICY = REPO_ROOT / "ci" / "policy.toml"


def gate(*args, timeout=HUNG_S):
    return subprocess.run([sys.executable, "-m", "devicekit", "gate", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def test_committed_baseline_is_a_full_release_record():
    rec = record.load(BASELINE, "baseline")
    pol = policy.load(POLICY)
    assert rec["plugin"]["name"] == "cpu" and rec["device"]["name"] == "cpu:0"
    c = rec["conformance"]
    assert c["level"] == "full" and not c["partial"] and c["passed"], c["by_outcome"]
    assert rec["models"]["passed"] and set(pol.models) <= set(rec["models"]["per_model"])
    assert rec["performance"]["measured"] and rec["performance"]["results"]
    # It meets the release policy's required rules on its own (checked against
    # itself; the binary it names is the certifying machine's, not this one's).
    v = check.check(rec, rec, pol, BASELINE, BASELINE, check_binary=False)
    assert v.admitted, [vars(r) for r in v.refusals]


@pytest.mark.slow
def test_reference_plugin_passes_the_release_gate(tmp_path, cpu_conformance_run, cpu_models_run,
                                                  cpu_suite_reports):
    # Certified from the session's full conformance run and its run of every
    # model on this binary (conftest), which the suites' own tests judge too:
    # certify checks that both reports are this binary's and this device's, at
    # level full, and measures performance itself.
    assert cpu_conformance_run[1]["run"]["level"] == "full" and not cpu_models_run[1]["run"].get(
        "partial")
    new = tmp_path / "cpu.json"
    proc = gate("certify", "--device", "cpu:0", "--out", new, "--from-reports", cpu_suite_reports)
    assert proc.returncode == 0 and new.exists(), proc.stdout + proc.stderr[-3000:]
    assert 'timing = "alternate"' in POLICY.read_text()
    proc = gate("check", new, "--baseline", BASELINE, "--policy", POLICY,
                "--junit", tmp_path / "gate.xml", "--html", tmp_path / "gate.html")
    assert proc.returncode == 0, (
        f"the reference CPU plugin no longer passes the release gate against {BASELINE} "
        f"(if a suite deliberately changed its cases, regenerate the baseline: ci/README.md)\n"
        + proc.stdout[-6000:] + proc.stderr[-2000:])
    assert "ADMITTED" in proc.stdout and os.path.exists(tmp_path / "gate.html")
    assert "performance" in proc.stdout  # timed, or a note saying why not
