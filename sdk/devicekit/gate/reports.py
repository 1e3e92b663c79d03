"""The check's verdict for people and CI: a console table, JUnit XML, HTML.

JUnit follows the conformance report's mapping (``devicekit.conformance
.report.junit_xml``): one ``<testsuite name="gate">``; one ``<testcase>`` per
refusal (``<failure type=RULE>``), per waived reason (``<skipped>`` with the
waiver) and one passing ``<testcase>`` per rule group with nothing against it.
The HTML is a jinja2 template like the conformance report's: self-contained,
no scripts, opens offline.
"""

import xml.etree.ElementTree as ET
from importlib import resources

import jinja2

from .._util.text import table as _table

GROUPS = ("binary.sha256", "conformance", "models", "performance")


def _cut(s, n=90):
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[:n - 3] + "..."


EXAMPLES = 5  # rows shown per op before "... and N more"


def _group(r):
    """The op a refusal is about: ``add`` for ``ops/add/float32/basic`` and
    ``models/mlp/float32/forward``'s ``mlp``; the section for a dtype-less case
    (``runtime/...``); else the rule (binary, level, performance, corpus)."""
    parts = r.subject.split("/")
    if r.rule.startswith(("conformance.", "models.")) and len(parts) >= 3:
        return parts[1]
    if r.rule.startswith("conformance.") and len(parts) == 2:
        return parts[0]
    return r.rule


def refusal_groups(refusals):
    """[(op, [reasons])] in the order the ops first appear (the check lists the
    sha256 first, then conformance, models, performance), so one partial
    plugin's hundreds of rows read as one heading per op with its count."""
    groups = {}
    for r in refusals:
        groups.setdefault(_group(r), []).append(r)
    return list(groups.items())


def text(v):
    p, b = v.plugin, v.baseline_plugin
    lines = [f"plugin:   {p['name']} {p['version']} ({p['vendor']}) sha256 {p['sha256'][:16]}",
             f"baseline: {b['name']} {b['version']} sha256 {b['sha256'][:16]} ({v.baseline_path})",
             f"policy:   {v.policy_path}"]
    if v.binary.get("actual"):
        lines.append(f"binary:   {v.binary['path']} sha256 {v.binary['actual'][:16]}")
    if v.refusals:
        groups = refusal_groups(v.refusals)
        lines += ["", f"Refused: {len(v.refusals)} reason(s) in {len(groups)} group(s)"]
        for name, rows in groups:
            # "[op]": a heading no parser of the rule rows mistakes for a row
            lines += ["", f"[{name}] {len(rows)} refused",
                      _table([(r.rule, _cut(r.subject, 60), r.baseline, r.new, _cut(r.detail))
                              for r in rows[:EXAMPLES]],
                             ["rule", "subject", "baseline", "new", "detail"])]
            if len(rows) > EXAMPLES:
                lines.append(f"... and {len(rows) - EXAMPLES} more {name} (see --html or --junit)")
    if v.waived:
        lines += ["", f"Waived: {len(v.waived)}",
                  _table([(r.rule, _cut(r.subject, 60), r.new, r.waiver.expires.isoformat(),
                           _cut(r.waiver.reason)) for r in v.waived],
                         ["rule", "subject", "new", "expires", "reason"])]
    if v.gains:
        lines += ["", f"Gains (newly passing): {len(v.gains)}"]
        lines += [f"  {g['id']}: {g['baseline']} -> {g['new']}" for g in v.gains[:30]]
        if len(v.gains) > 30:
            lines.append(f"  ... and {len(v.gains) - 30} more (see --html)")
    lines += [f"note: {n}" for n in v.notes]
    lines += ["", "ADMITTED" if v.admitted else "REFUSED"]
    return "\n".join(lines)


def junit_xml(v):
    root = ET.Element("testsuites", name=f"devicekit gate {v.plugin['name']}")
    suite = ET.SubElement(root, "testsuite", name="gate")
    for r in v.refusals:
        tc = ET.SubElement(suite, "testcase", classname=f"gate.{r.rule}", name=r.subject, time="0")
        ET.SubElement(tc, "failure", type=r.rule, message=_cut(
            f"{r.baseline} -> {r.new}: {r.detail}", 500)).text = r.detail
    for r in v.waived:
        tc = ET.SubElement(suite, "testcase", classname=f"gate.{r.rule}", name=r.subject, time="0")
        ET.SubElement(tc, "skipped", message=_cut(f"waived until {r.waiver.expires}: "
                                                  f"{r.waiver.reason}", 500))
    bad = {r.rule.split(".")[0] if not r.rule.startswith("binary") else r.rule
           for r in v.refusals}
    for g in GROUPS:
        if g not in bad:
            ET.SubElement(suite, "testcase", classname="gate", name=g, time="0")
    cases = list(suite.iter("testcase"))
    for el in (root, suite):
        el.set("tests", str(len(cases)))
        el.set("failures", str(sum(c.find("failure") is not None for c in cases)))
        el.set("errors", "0")
        el.set("skipped", str(sum(c.find("skipped") is not None for c in cases)))
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def _env():
    return jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)


def template(name):
    return resources.files("devicekit.gate").joinpath(f"templates/{name}").read_text()


def html(v):
    return _env().from_string(template("check.html.j2")).render(
        v=v, groups=refusal_groups(v.refusals), examples=EXAMPLES)
