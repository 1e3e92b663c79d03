"""The release policy is validated whole before any rule runs: a typo never
relaxes it (ci/policy.toml's promise, docs/gate.md "The policy").

A dtype, model, level or op the SDK does not know, a threshold that is not a
finite number in its range (``inf`` would switch a rule off), a wrong type,
a waiver subject that can match nothing, a file nested too deeply or too large
to be a policy: each is refused before anything else is read, with exit 6 and
one line naming the key and what is allowed.

Needs: nothing but devicekit importable (no device runs: seconds).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import children_cpu_seconds
from conftest import HUNG_S

from devicekit.gate import policy
from devicekit.gate.errors import BadPolicy

REPO_ROOT = Path(__file__).resolve().parents[1]
CI_POLICY = REPO_ROOT / "ci" / "policy.toml"


def gate_check(pol, record="nothing.json"):
    """`devicekit gate check` on a policy; the records need not exist: the
    policy is read (and refused) first."""
    return subprocess.run([sys.executable, "-m", "devicekit", "gate", "check", str(record),
                           "--baseline", str(record), "--policy", str(pol)],
                          capture_output=True, text=True, timeout=HUNG_S)


def with_line(old, new):
    text = CI_POLICY.read_text()
    assert old in text, old
    return text.replace(old, new)


WAIVER = ('\n[[waivers]]\nrule = "{rule}"\nsubject = "{subject}"\nreason = "x"\n'
          'expires = 2999-01-01\n')

# (policy text, words the one error line must hold)
TYPOS = {
    "dtype": (with_line('required_dtypes = ["float32"]', 'required_dtypes = ["flaot32"]'),
              "'conformance.required_dtypes' = ['flaot32']: 'flaot32' is not a dtype"),
    "model": (with_line('required = ["mlp", "cnn",', 'required = ["mpl", "cnn",'),
              "'models.required'"),
    "model_dtype": (with_line('\ndtypes = ["float32"]', '\ndtypes = ["float23"]'),
                    "'models.dtypes' = ['float23']: 'float23' is not a model dtype"),
    "level": (with_line('level = "full"', 'level = "ful"'),
              "'conformance.level' = 'ful': must be one of core, full"),
    "op_in_waiver": (CI_POLICY.read_text() + WAIVER.format(rule="conformance.regression",
                                                           subject="ops/eft/float16/*"),
                     "'waivers[0].subject' = 'ops/eft/float16/*'"),
    "dtype_in_waiver": (CI_POLICY.read_text() + WAIVER.format(rule="conformance.regression",
                                                              subject="ops/erf/flaot16/*"),
                        "'flaot16' is not a dtype"),
    "model_in_waiver": (CI_POLICY.read_text() + WAIVER.format(rule="models.regression",
                                                              subject="models/lama/*"),
                        "'lama' is not a model"),
    "figure_in_waiver": (CI_POLICY.read_text() + WAIVER.format(rule="performance.slowdown",
                                                               subject="mat_mul/float32/*"),
                         "'mat_mul' is not an op"),
    "rule_in_waiver": (CI_POLICY.read_text() + WAIVER.format(rule="conformance.regresion",
                                                             subject="*"),
                       "'waivers[0].rule' = 'conformance.regresion': must be one of"),
}
THRESHOLDS = {
    "slowdown_inf": (with_line("max_slowdown = 1.5", "max_slowdown = inf"),
                     "'performance.max_slowdown' = inf: must be a finite number from 1 to 100"),
    "slowdown_nan": (with_line("max_slowdown = 1.5", "max_slowdown = nan"),
                     "'performance.max_slowdown' = nan: must be a finite number"),
    "slowdown_below_1": (with_line("max_slowdown = 1.5", "max_slowdown = 0.9"),
                         "'performance.max_slowdown' = 0.9: must be a finite number from 1"),
    "slowdown_huge": (with_line("max_slowdown = 1.5", "max_slowdown = 1e300"),
                      "'performance.max_slowdown' = 1e+300: must be a finite number"),
    "band_inf": (with_line("loss_band = 0.01", "loss_band = inf"),
                 "'models.loss_band' = inf: must be a finite number from 0 to 1"),
    "band_nan": (with_line("loss_band = 0.01", "loss_band = nan"),
                 "'models.loss_band' = nan: must be a finite number"),
    "band_negative": (with_line("loss_band = 0.01", "loss_band = -0.1"),
                      "'models.loss_band' = -0.1: must be a finite number from 0 to 1"),
    "repeats_zero": (with_line("min_repeats = 5", "min_repeats = 0"),
                     "'performance.min_repeats' = 0: must be from 1"),
}
SHAPES = {
    "wrong_type_list": (with_line('required_dtypes = ["float32"]', 'required_dtypes = "float32"'),
                        "'conformance.required_dtypes' must be a list of strings"),
    "wrong_type_table": ("conformance = 5\n", "'conformance' must be a table"),
    "wrong_type_bool": (with_line("enabled = true", 'enabled = "yes"'),
                        "'performance.enabled' must be true or false"),
    "waivers_not_tables": ("waivers = [1, 2]\n", "'waivers' must be an array of tables"),
    "waiver_key_missing": ('[[waivers]]\nrule = "models.regression"\nsubject = "*"\n'
                           'reason = "x"\n', "'waivers[0].expires' is missing"),
    "deep": ("x = " + "[" * 100_000 + "]" * 100_000 + "\n", "too deeply"),
    "deep_but_parseable": ("x = " + "[" * 50 + "1" + "]" * 50 + "\n", "deeper than a policy"),
}
CASES = {**TYPOS, **THRESHOLDS, **SHAPES}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_policy_is_refused_with_one_line(case):
    text, words = CASES[case]
    with pytest.raises(BadPolicy) as e:
        policy.parse(text, "p.toml")
    message = str(e.value)
    assert words in message and message.startswith("p.toml: ") and "\n" not in message
    assert len(message) < 600


@pytest.mark.parametrize("case", ["dtype", "model", "level", "op_in_waiver", "slowdown_inf",
                                  "band_nan", "wrong_type_table", "deep"])
def test_cli_refuses_a_bad_policy_with_exit_6(tmp_path, case):
    text, words = CASES[case]
    pol = tmp_path / "policy.toml"
    pol.write_text(text)
    proc = gate_check(pol)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 6 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith(f"devicekit gate check: error: {pol}: ") and words in lines[0]
    assert proc.stdout == ""


def test_allowed_values_are_named(tmp_path):
    pol = tmp_path / "policy.toml"
    pol.write_text(TYPOS["dtype"][0])
    line = gate_check(pol).stderr
    assert "allowed: float32, float16, bfloat16, float64, int8, int32, int64, uint8, bool" in line
    pol.write_text(TYPOS["model"][0])
    assert "allowed: mlp, cnn, gpt2, llama, encoder, vit" in gate_check(pol).stderr


def test_oversize_policy_is_refused_without_reading_it(tmp_path):
    """A 2 GiB sparse file: refused from its size at once (exit 6), never read."""
    pol = tmp_path / "policy.toml"
    with open(pol, "wb") as f:
        f.truncate(2 << 30)
    t0 = children_cpu_seconds()
    proc = gate_check(pol)
    assert children_cpu_seconds() - t0 < 30  # CPU, not wall time: load does not stretch it
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 6 and len(lines) == 1, proc.stderr[-2000:]
    assert "larger than a policy can be" in lines[0]


def test_a_policy_that_is_not_a_file_or_not_text_is_refused(tmp_path):
    with pytest.raises(BadPolicy, match="not a regular file"):
        policy.load(os.devnull)
    pol = tmp_path / "policy.toml"
    pol.write_bytes(b"level = \xff\n")
    with pytest.raises(BadPolicy, match="not UTF-8"):
        policy.load(pol)


def test_valid_patterns_and_every_known_name_are_accepted():
    """Strict, not narrow: the SDK's own names and fnmatch patterns pass."""
    known = policy.known()
    text = with_line('required_dtypes = ["float32"]',
                     f"required_dtypes = {list(known['dtype'])}".replace("'", '"'))
    text = text.replace('\ndtypes = ["float32"]',
                        f"\ndtypes = {list(known['model dtype'])}".replace("'", '"'))
    for rule, subject in (("conformance.regression", "ops/er*/float16/*"),
                          ("conformance.regression", "fused/cpu.gelu_f32/*"),
                          ("conformance.required", "kernels/neg/invalid/*"),
                          ("conformance.required", "corpus"),
                          ("conformance.level", "conformance"),
                          ("models.required", "models/gpt2/bfloat16/*"),
                          ("models.loss_band", "llama/float16"),
                          ("performance.slowdown", "matmul/float32/256"),
                          ("performance.machine", "performance"),
                          ("performance.missing", "*")):
        text += WAIVER.format(rule=rule, subject=subject)
    pol = policy.parse(text, "p.toml")
    assert pol.required_dtypes == list(known["dtype"]) and len(pol.waivers) == 10
    # the release policy requires the whole zoo and every hf-* model (the
    # committed baseline certified them all; test_gate_ci.py checks that)
    assert policy.parse(CI_POLICY.read_text(), "ci").models == list(known["model"])
    assert [m for m in known["model"] if m.startswith("hf-")] == [
        "hf-gpt2", "hf-llama", "hf-bert", "hf-vit", "hf-resnet", "hf-t5", "hf-moe",
        "hf-data2vec-audio", "hf-clip"]
