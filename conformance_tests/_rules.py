"""The argument rules, as data (not a section itself).

``device_api/spec/arg_rules.json`` (shipped as ``devicekit/data/arg_rules.json``)
writes down once every rule the header states about a kernel call. Here it is
read, and each rule is matched against the ops it applies to: from the op's
spec facts (inputs, out_shape, output_dtype, attrs, input_dtypes) and from
what the plugin declares (its capability bits). The kernels section makes one
invalid-call case per (rule, op) pair and case name (``kernels/<op>/invalid/
<case>``; ``_invalid`` breaks each rule), the errors section one SDK-level
case per ``sdk_cases`` name, and ``kernels.rule_coverage`` counts which pairs
got their cases (tests/test_arg_rules.py fails on any pair without one; the
status line prints the count).
"""

import functools
import json
from importlib import resources

from devicekit.conformance.registry import spec

CAPS = {"STRIDED": 1, "BROADCAST": 2, "INPLACE": 4}  # DK_KERNEL_CAP_* bits
APPLIES_KEYS = {"min_inputs", "min_value_inputs", "ops", "not_ops", "out_shape", "output_dtype", "attrs",
                "attr_field_type", "input_dtypes", "caps_without"}


@functools.lru_cache(maxsize=None)
def rules():
    """The rules of device_api/spec/arg_rules.json, in file order."""
    text = resources.files("devicekit").joinpath("data/arg_rules.json").read_text()
    return json.loads(text)["rules"]


def rule(rule_id):
    return next(r for r in rules() if r["id"] == rule_id)


def case_names(r):
    """{case name: parameters} of rule ``r`` (its id alone unless it lists cases)."""
    return r.get("cases") or {r["id"]: {}}


def op_spec(op):
    return next(o for o in spec()["ops"] if o["name"] == op)


def caps_of(target, op):
    """The DK_KERNEL_CAP_* bits the plugin declared for ``op`` (0 without a plugin)."""
    try:
        kernels = target.device.plugin.kernels()
    except AttributeError:  # (a stand-in target without a plugin)
        return 0
    return next((k["caps"] for k in kernels if k["op"] == op), 0)


def applies(r, op, caps=0):
    """Whether rule ``r`` applies to ``op`` (a spec op name) whose kernel declared ``caps``."""
    o, a = op_spec(op), r["applies"]
    unknown = set(a) - APPLIES_KEYS
    if unknown:
        raise ValueError(f"arg_rules.json: rule {r['id']}: unknown applies keys {sorted(unknown)}")
    if r["when"] == "sdk":
        return False
    if len(o["inputs"]) < a.get("min_inputs", 0):
        return False
    fixed = o.get("input_dtypes", {})
    if len([i for i in o["inputs"] if i not in fixed]) < a.get("min_value_inputs", 0):
        return False
    if "ops" in a and op not in a["ops"]:
        return False
    if op in a.get("not_ops", ()):
        return False
    for key in ("out_shape", "output_dtype"):
        if key in a and o[key] not in a[key]:
            return False
    if "attrs" in a:
        if o["attrs"] is None or (a["attrs"] != "any" and o["attrs"] not in a["attrs"]):
            return False
    if "attr_field_type" in a:
        fields = spec()["attr_structs"].get(o["attrs"], {}).get("fields", []) if o["attrs"] else []
        if not any(f["type"] == a["attr_field_type"] for f in fields):
            return False
    if "input_dtypes" in a and a["input_dtypes"] not in o.get("input_dtypes", {}):
        return False
    if "caps_without" in a and caps & CAPS[a["caps_without"]]:
        return False
    return True


def spec_ops():
    return [o["name"] for o in spec()["ops"]]


def pairs_of(target, op):
    """The rules that apply to the plugin's ``op``: its (rule, op) pairs."""
    caps = caps_of(target, op)
    return [r for r in rules() if applies(r, op, caps)]


def coverage_line(cov):
    """'argument rules: 49; (rule, op) pairs with their cases 812/812 (3 not
    applicable to this plugin); SDK-level cases 7/7' (kernels.rule_coverage)."""
    line = (f"argument rules: {cov['rules']}; (rule, op) pairs with their cases "
            f"{cov['covered']}/{cov['pairs']}")
    if cov["not_applicable"]:
        line += f" ({len(cov['not_applicable'])} not applicable to this plugin)"
    total = cov["sdk_cases"] + len(cov["sdk_missing"])
    line += f"; SDK-level cases {cov['sdk_cases']}/{total}"
    if cov["uncovered"]:
        line += f"; WITHOUT A CASE: {', '.join(cov['uncovered'][:8])}"
    return line
