"""The run's results as data (report.json), JUnit XML and the summary table.

report.json, ``schema_version`` 1 (documented in docs/conformance.md):
devicekit/device API versions, the plugin (name, vendor, version, library
path, sha256), the device and its properties, the run (level, jobs, filter,
partial), the summary, the corpus check, and every case with its outcome.

The three files are one set, written by :func:`write` in one
``_output.write_files`` call (all three replaced, or none), and each carries
the run's id (``run.run_id``; a ``devicekit.run_id`` property in every JUnit
``<testsuite>``; a ``devicekit-run-id`` meta tag and the run row of the HTML),
so files of different runs side by side can be told apart.
"""

import json
import os
import shlex
import uuid
import xml.etree.ElementTree as ET

from .case import CRASH, ERROR, FAIL, NOT_IMPLEMENTED, OUTCOMES, PASS, SKIPPED

SCHEMA_VERSION = 1
_FATAL = {FAIL, ERROR, CRASH}


def new_run_id():
    """A fresh id for ``run.run_id``: unique per run, stamped into every file of its set."""
    return uuid.uuid4().hex


def replay_command(case, run):
    """The exact command that reruns ``case`` alone (its seed follows from its id)."""
    where = f"--plugin {shlex.quote(run['plugin_arg'])}" if run.get("plugin_arg") else \
        f"--device {shlex.quote(run['device_arg'])}"
    return f"devicekit conformance {where} --level {run['level']} --case {shlex.quote(case.id)}"


def is_fatal(case, result):
    """Fails the run: fail, error or crash; or not-implemented of a required case."""
    return result["outcome"] in _FATAL or (result["outcome"] == NOT_IMPLEMENTED and case.required)


def build(meta, run, cases, results, corpus, unavailable, status=None):
    rows = []
    for c in cases:
        r = results[c.id]
        row = {"id": c.id, "section": c.section, "op": c.op, "dtype": c.dtype, "seed": c.seed,
               "required": c.required, "level": c.level, **r}
        if r["outcome"] != PASS:
            row["replay"] = replay_command(c, run)
        rows.append(row)
    return assemble(meta, run, rows, corpus, unavailable, status)


def assemble(meta, run, rows, corpus, unavailable, status=None):
    """The report from its case rows (in report order): the summary is
    computed here, so a single run and ``devicekit report merge`` of its
    shards count the same way."""
    by_outcome, by_section = {o: 0 for o in OUTCOMES}, {}
    by_need = {"required": {o: 0 for o in OUTCOMES}, "optional": {o: 0 for o in OUTCOMES}}
    fatal = 0
    for r in rows:
        by_outcome[r["outcome"]] += 1
        by_need["required" if r["required"] else "optional"][r["outcome"]] += 1
        sec = by_section.setdefault(r["section"], {o: 0 for o in OUTCOMES})
        sec[r["outcome"]] += 1
        fatal += r["outcome"] in _FATAL or (r["outcome"] == NOT_IMPLEMENTED and r["required"])
    ok = fatal == 0 and corpus.get("ok", True) and bool(rows)
    rep = {"schema_version": SCHEMA_VERSION, **meta, "run": run,
           "summary": {"total": len(rows), "by_outcome": by_outcome, "by_section": by_section,
                       "by_requirement": by_need, "fatal": fatal, "passed": ok},
           "implementation": status or {},
           "corpus": corpus, "unavailable_sections": unavailable, "cases": rows}
    torch = torch_summary(rows, status)
    if torch is not None:
        rep["torch"] = torch
    return rep


TORCH_OUTCOMES = (PASS, FAIL, ERROR, NOT_IMPLEMENTED)


def torch_summary(rows, status=None):
    """The torch section (PyTorch OpInfo samples, conformance_tests/torch_opinfo.py)
    per lowered ATen op, added up from its cases' sample counts; None when the
    run has no torch case. ``per_aten_op``: {op: {pass, fail, error,
    not-implemented, total (samples that reached it), opinfos}}; ``unlowered``:
    {ATen op with no lowering, or whose base op the plugin lacks: samples};
    ``samples``: {outcome: n} (these three of OpInfo samples only);
    ``reach_samples``: {outcome: n} of the hand-written cases (``_torch_reach``);
    and the section's facts (torch version, op_db entries, OpInfos in scope,
    not attempted, sample cap) or why it was skipped."""
    mine = [r for r in rows if r["section"] == "torch"]
    if not mine:
        return None
    facts = dict(((status or {}).get("sections") or {}).get("torch") or {})
    facts.pop("line", None)
    per_op, unlowered, samples = {}, {}, {o: 0 for o in (*TORCH_OUTCOMES, SKIPPED)}
    reach = {o: 0 for o in (*TORCH_OUTCOMES, SKIPPED)}
    for r in mine:
        t = (r.get("details") or {}).get("torch")
        if not t:
            continue
        if t.get("reach"):  # a hand-written case (_torch_reach): its samples apart
            for o, n in t.get("outcomes", {}).items():
                reach[o] = reach.get(o, 0) + n
            continue
        for o, n in t.get("outcomes", {}).items():
            samples[o] = samples.get(o, 0) + n
        for op, counts in t.get("aten", {}).items():
            cell = per_op.setdefault(op, {**{o: 0 for o in TORCH_OUTCOMES}, "total": 0,
                                          "opinfos": set()})
            for o, n in counts.items():
                cell[o] = cell.get(o, 0) + n
                cell["total"] += n
            cell["opinfos"].add(t.get("opinfo"))
        for op, n in t.get("unlowered", {}).items():
            unlowered[op] = unlowered.get(op, 0) + n
    skipped = [r for r in mine if r["id"] == "torch/unavailable"]
    out = {"available": facts.pop("available", not skipped), **facts}
    if skipped:
        out["reason"] = skipped[0].get("message", "")
    out.update(samples=samples, reach_samples=reach, unlowered=dict(sorted(unlowered.items())),
               per_aten_op={op: {**c, "opinfos": len(c["opinfos"])}
                            for op, c in sorted(per_op.items())})
    return out


def torch_lines(report, per_line=3):
    """The console's torch block: per lowered ATen op, samples passed/reached."""
    t = report.get("torch")
    if not t:
        return []
    if not t.get("available", True):
        return [f"torch section skipped: {t.get('reason', '')}"]
    ops = t["per_aten_op"]
    s = t["samples"]
    clean = sum(1 for c in ops.values() if c[PASS] == c["total"])
    lines = [f"torch (OpInfo samples per lowered ATen op, torch {t.get('torch_version', '?')}): "
             f"{len(ops)} ATen ops reached, {clean} with every sample passing; samples "
             f"{s[PASS]} passed, {s[FAIL]} fail, {s[ERROR]} error, {s[NOT_IMPLEMENTED]} not "
             f"implemented, {s[SKIPPED]} skipped (reasons in the cases); "
             f"{t.get('not_attempted', '?')} of {t.get('op_db_entries', '?')} op_db entries "
             f"not attempted (no lowered ATen op)"]
    cells = []
    for op, c in ops.items():
        bad = ", ".join(f"{c[o]} {o}" for o in (FAIL, ERROR, NOT_IMPLEMENTED) if c[o])
        cells.append(f"{op} {c[PASS]}/{c['total']}" + (f" ({bad})" if bad else ""))
    width = max((len(x) for x in cells), default=0) + 2
    for i in range(0, len(cells), per_line):
        lines.append("  " + "".join(x.ljust(width) for x in cells[i:i + per_line]).rstrip())
    if t["unlowered"]:
        shown = [f"{op} ({n})" for op, n in t["unlowered"].items()]
        lines.append(f"  could not run on the device (samples): {', '.join(shown[:12])}"
                     + (f" and {len(shown) - 12} more" if len(shown) > 12 else ""))
    return lines


def summary_table(report):
    cols = list(OUTCOMES)
    rows = [[sec] + [counts[o] for o in cols] for sec, counts in report["summary"]["by_section"].items()]
    rows.append(["total"] + [report["summary"]["by_outcome"][o] for o in cols])
    for need, counts in report["summary"].get("by_requirement", {}).items():
        rows.append([f"  {need} dtypes"] + [counts[o] for o in cols])
    head = ["section"] + cols
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    fmt = lambda r: "  ".join(str(x).rjust(w) if i else str(x).ljust(w)  # noqa: E731
                              for i, (x, w) in enumerate(zip(r, widths)))
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def junit_xml(report):
    """One <testsuite> per section, one <testcase> per case. fail -> <failure>;
    error -> <error>; crash -> <error type="crash">; not-implemented -> <failure
    type="not-implemented"> when the dtype is required, else <skipped
    message="not-implemented: ...">; skipped -> <skipped>."""
    root = ET.Element("testsuites", name=f"devicekit conformance {report['device']['name']}")
    run = report.get("run", {})
    props = [(k, str(run[k]).lower() if isinstance(run[k], bool) else str(run[k]))
             for k in ("run_id", "partial", "interrupted") if run.get(k) is not None]
    suites = {}
    for row in report["cases"]:
        sec = row["section"]
        if sec not in suites:
            suites[sec] = ET.SubElement(root, "testsuite", name=f"conformance.{sec}")
            if props:  # JUnit's place for run facts: the first child of a testsuite
                el = ET.SubElement(suites[sec], "properties")
                for k, v in props:
                    ET.SubElement(el, "property", name=f"devicekit.{k}", value=v)
        tc = ET.SubElement(suites[sec], "testcase", classname=f"conformance.{sec}",
                           name=row["id"], time=f"{row['duration_s']:.6f}")
        o, msg = row["outcome"], row.get("message", "")
        text = msg + (f"\nreplay: {row['replay']}" if row.get("replay") else "")
        if o == FAIL:
            ET.SubElement(tc, "failure", type="fail", message=msg[:500]).text = text
        elif o in (ERROR, CRASH):
            el = ET.SubElement(tc, "error", type=o, message=msg[:500])
            el.text = text + ("\n" + row["details"].get("stderr_tail", "") if o == CRASH else "")
        elif o == NOT_IMPLEMENTED and row["required"]:
            ET.SubElement(tc, "failure", type="not-implemented", message=msg[:500]).text = text
        elif o == NOT_IMPLEMENTED:
            ET.SubElement(tc, "skipped", message=f"not-implemented: {msg}"[:500])
        elif o == SKIPPED:
            ET.SubElement(tc, "skipped", message=msg[:500])
    torch = report.get("torch")
    if torch and "torch" in suites:  # per lowered ATen op: samples passed/reached
        el = suites["torch"].find("properties")
        if el is None:
            el = ET.Element("properties")
            suites["torch"].insert(0, el)
        for op, c in torch.get("per_aten_op", {}).items():
            ET.SubElement(el, "property", name=f"devicekit.torch.{op}",
                          value=f"{c['pass']}/{c['total']}")
    for el in [root, *suites.values()]:
        cases = list(el.iter("testcase"))
        el.set("tests", str(len(cases)))
        el.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
        el.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
        el.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def render(report):
    """{file name: text} of the report set."""
    from .html import render as render_html

    return {"report.json": json.dumps(report, indent=1, sort_keys=False, default=str),
            "junit.xml": junit_xml(report), "report.html": render_html(report)}


def write(report, folder):
    """Writes the set into ``folder`` (see :func:`write_set`); {name: path}."""
    return write_set(render(report), folder)


def write_set(texts, folder):
    """Writes {name: text}, rendered in full beforehand, into ``folder`` in one
    ``_output.write_files`` call; {name: path}. Raises ``_output.OutputError``
    with every previous file left as it was."""
    from .._util import output as _output

    paths = {name: os.path.join(folder, name) for name in texts}
    _output.write_files({paths[name]: text for name, text in texts.items()})
    return paths
