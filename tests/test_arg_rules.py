"""Every argument rule is written once (device_api/spec/arg_rules.json) and
becomes a case for every op it applies to.

- The rules are well formed, and each has exactly one way to break it in the
  suite (conformance_tests/_invalid.py's BREAK, errors.py's INVALID for the
  SDK-level ones).
- Rule coverage: on the reference plugin, and on a stand-in partial plugin
  (copy, add and exp in float32, no capability bits: the scaffold's
  shape), every (rule, applicable op) pair has its kernels/<op>/invalid/<case>
  cases; a rule the suite cannot break yet is reported as a pair without a
  case (and fails here); the status line prints the count.
- plugin_helpers.h's dkh_check_call enforces every rule marked "helper": a
  plugin rendered from the template whose every kernel is nothing but
  plugin_check_kernel passes every such invalid call of every op.

Needs: the installed SDK and cpu:0; the helper test also a C compiler and
cmake (skipped with the reason otherwise). About 20 s on 2 cores.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from devicekit import cli
from devicekit.conformance import registry
from devicekit.conformance.case import Target
from devicekit.conformance.target import open_target
from devicekit.conformance_tests import _invalid, _rules, errors, kernels

from conftest import _find_c_compiler
from conftest import HUNG_S

WHEN = {"call", "run", "sdk"}
FIELDS = {"id", "group", "header", "rule", "when", "expect", "codes", "applies", "needs", "cases",
          "helper", "sdk_cases"}


def test_rules_are_well_formed_and_each_has_one_way_to_break_it():
    rules = _rules.rules()
    ids = [r["id"] for r in rules]
    assert len(ids) == len(set(ids)), "duplicate rule ids"
    for r in rules:
        assert set(r) <= FIELDS and {"id", "group", "header", "rule", "when", "applies",
                                     "helper"} <= set(r), r["id"]
        assert r["when"] in WHEN, r["id"]
        assert re.search(r"device_api(_ops)?\.h|SDK", r["header"]), \
            f"{r['id']}: its header field must say where the rule is stated"
        assert set(r.get("needs", ())) <= set(_invalid.NEEDS), r["id"]
        assert set(r.get("codes", ())) <= set(_invalid._raw.CODES), r["id"]
        for op in _rules.spec_ops():
            _rules.applies(r, op)  # raises on an unknown applies key
        if r["when"] == "sdk":
            assert r.get("sdk_cases") and not r["helper"], r["id"]
        if r["when"] == "run":
            assert not r["helper"], f"{r['id']}: a view does not carry index values"
    kernel_rules = {r["id"] for r in rules if r["when"] != "sdk"}
    assert set(_invalid.BREAK) == kernel_rules, (
        f"rules without a way to break them: {sorted(kernel_rules - set(_invalid.BREAK))}; "
        f"ways to break no rule: {sorted(set(_invalid.BREAK) - kernel_rules)}")
    assert set(errors.INVALID) == set(errors.sdk_case_names())


@pytest.fixture(scope="module")
def cpu_target():
    return open_target("cpu:0")


def test_every_rule_and_op_pair_of_the_reference_plugin_has_its_cases(cpu_target):
    cases, _ = registry.build(cpu_target)
    cov = kernels.rule_coverage(cpu_target, cases)
    assert cov["uncovered"] == [], f"(rule, op) pairs without a case: {cov['uncovered']}"
    assert cov["sdk_missing"] == []
    assert cov["covered"] == cov["pairs"] > 900
    # What is not applicable to cpu:0 is so because it declares everything.
    assert all("declares every dtype" in why for why in cov["not_applicable"]), \
        cov["not_applicable"]
    # The rules that were hand-written cases kept their case ids, and the
    # rules the header states about batch dims, index dtypes, offsets into an
    # allocation and negative indices are cases now.
    ids = {c.id for c in cases}
    for case in ("kernels/add/invalid/out_shape", "kernels/argmax/invalid/axis_-1",
                 "kernels/reduce_sum/invalid/axes_beyond_rank",
                 "kernels/matmul/invalid/out_shape_dim0", "kernels/gather/invalid/index_dtype",
                 "kernels/add/invalid/input_offset_past_allocation",
                 "kernels/scatter_add/invalid/index_negative",
                 "errors/invalid_argument/matmul_inner_dims_differ"):
        assert case in ids, case
    print(f"\n{_rules.coverage_line(cov)}; "
          f"{sum('/invalid/' in i for i in ids)} invalid-call cases")


def test_a_partial_plugin_without_capabilities_gets_every_pair_too():
    everything = set(_invalid._raw.DTYPE_IDS)
    target = Target(device=None, declared={"copy": everything, "add": {"float32"},
                                           "exp": {"float32"}})
    cases = kernels.cases(target) + errors.cases(target)
    cov = kernels.rule_coverage(target, cases)
    assert cov["uncovered"] == [] and cov["covered"] == cov["pairs"] > 60
    ids = {c.id for c in cases}
    # no DK_KERNEL_CAP_BROADCAST / STRIDED: those rules apply to add and exp now
    assert {"kernels/add/invalid/input_needs_broadcast", "kernels/exp/invalid/input_not_dense",
            "kernels/add/invalid/undeclared_dtype"} <= ids
    assert "kernels/copy/invalid/input_not_dense" not in ids  # copy takes any strides


def test_a_rule_the_suite_cannot_break_is_a_pair_without_a_case(monkeypatch, cpu_target):
    new = {"id": "made_up_rule", "group": "views", "header": "device_api.h, nowhere",
           "rule": "a rule added to the data but not to the suite", "when": "call",
           "applies": {"ops": ["add", "exp"]}, "helper": True}
    real = _rules.rules()
    monkeypatch.setattr(_rules, "rules", lambda: real + [new])
    cases = kernels.cases(cpu_target) + errors.cases(cpu_target)
    cov = kernels.rule_coverage(cpu_target, cases)
    assert cov["uncovered"] == ["made_up_rule/add", "made_up_rule/exp"]
    assert "WITHOUT A CASE: made_up_rule/add, made_up_rule/exp" in _rules.coverage_line(cov)


def test_the_run_reports_the_rule_coverage(tmp_path, cpu_target):
    proc = subprocess.run([sys.executable, "-m", "devicekit", "conformance", "--device", "cpu:0",
                           "-k", "kernels/matmul/invalid/", "--jobs", "2", "--report",
                           tmp_path / "rep"], capture_output=True, text=True, timeout=HUNG_S)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    line = re.search(r"argument rules: (\d+); \(rule, op\) pairs with their cases (\d+)/(\d+)",
                     proc.stdout)
    assert line and int(line[1]) == len(_rules.rules()) and line[2] == line[3], proc.stdout
    facts = json.loads((tmp_path / "rep" / "report.json").read_text())["implementation"]
    k = facts["sections"]["kernels"]
    assert k["rule_pairs_covered"] == k["rule_pairs"] == int(line[2])
    assert k["rule_pairs_uncovered"] == []


# ---- the helper: dkh_check_call enforces the rules marked "helper" ----------------

CHECK_ONLY = r"""
/* Test only: every base op's kernel is its argument checks and nothing else. */
#define CHECK_ONLY(ID, name)                                          \
  DK_Error* check_only_##name(const DK_Kernel_Args* args) {           \
    return plugin_check_kernel(PLUGIN_NAME "." #name, args, DK_OP_##ID); \
  }
DK_BASE_OPS(CHECK_ONLY)
"""


@pytest.fixture(scope="module")
def check_only_plugin(tmp_path_factory):
    """The template with every op's kernel = plugin_check_kernel alone,
    declaring every dtype the spec allows and no capability bits."""
    if _find_c_compiler() is None or shutil.which("cmake") is None:
        pytest.skip("building a plugin from the template needs a C compiler and cmake")
    project = tmp_path_factory.mktemp("checks") / "acme"
    assert cli.main(["new", "acme", "--dir", str(project)]) == 0
    with open(project / "src" / "kernels.c", "a") as f:
        f.write(CHECK_ONLY)
    ops_def = project / "src" / "ops.def"
    rows = re.sub(r"^PLUGIN_(?:OP\((\w+),.*|NO_KERNEL\((\w+)\))$",
                  lambda m: (f"PLUGIN_OP({m[1] or m[2]}, check_only_{(m[1] or m[2]).lower()}, "
                             f"DK_OP_DTYPES_{m[1] or m[2]}, 0)"), ops_def.read_text(), flags=re.M)
    ops_def.write_text(rows)
    build = project / "build"
    for cmd in (["cmake", "-S", project, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                 "-DCMAKE_C_FLAGS=-Werror"], ["cmake", "--build", build, "--parallel", "2"]):
        r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return build / "libdevicekit_acme.so"


def test_dkh_check_call_enforces_every_helper_rule_for_every_op(check_only_plugin, tmp_path):
    rep = tmp_path / "rep"
    proc = subprocess.run([sys.executable, "-m", "devicekit", "conformance", "--plugin",
                           check_only_plugin, "-k", "/invalid/", "--jobs", "2", "--report", rep],
                          capture_output=True, text=True, timeout=HUNG_S,
                          env={k: v for k, v in os.environ.items() if k != "DEVICEKIT_PLUGIN_PATH"})
    cases = json.loads((rep / "report.json").read_text())["cases"]
    by_rule = {}
    for c in cases:
        name = c["id"].split("/invalid/")[1]
        rule = next(r for r in _rules.rules() if name in _rules.case_names(r))
        by_rule.setdefault(rule["id"], []).append(c)
    helper = {r["id"] for r in _rules.rules() if r["helper"]}
    assert helper <= set(by_rule), sorted(helper - set(by_rule))
    bad = [f"{c['id']}: {c['outcome']}: {c['message'][:300]}" for rid in helper
           for c in by_rule[rid] if c["outcome"] != "pass"]
    assert not bad, "\n".join(bad)
    assert len({c["op"] for rid in helper for c in by_rule[rid]}) == len(_rules.spec_ops())
    # What a view does not carry: allocations (skipped: the template does not
    # track them), index values (a kernel that computes nothing reports none).
    assert {c["outcome"] for c in by_rule["input_offset_past_allocation"]} == {"skipped"}
    assert {c["outcome"] for c in by_rule["index_negative"]} == {"fail"}
    assert proc.returncode == 1
