"""``devicekit conformance diff OLD NEW``: what changed between two report.json.

Per case: *regressed* (passed in OLD, anything else or absent in NEW),
*newly passing*, *newly implemented* (not-implemented in OLD, run in NEW) and
*newly not implemented*; the same rolled up per (op, dtype). Text on stdout,
optional HTML (``--html FILE``, checked before anything is compared and
written atomically). Exit codes: :data:`EXIT_CODES_HELP`.
"""

import html
import json
import os
import sys

from .._util import output as _output

PASS, NI = "pass", "not-implemented"
EXIT_CODES_HELP = f"""\
exit codes:
  0    nothing that passed in OLD fails in NEW
  1    regressed: something that passed in OLD does not in NEW (the release
       gate builds on this)
  2    OLD or NEW cannot be read, or is not a conformance report.json
  3    the --html file cannot be written (checked before comparing), or
       writing it failed (one line; a previous file is left as it was)
{_output.INTERRUPT_CODES_HELP}"""


def load(path):
    if os.path.isdir(path):
        path = os.path.join(path, "report.json")
    with open(path) as f:
        rep = json.load(f)
    if "cases" not in rep:
        raise ValueError(f"{path} is not a conformance report.json (no 'cases')")
    return rep


def compare(old, new):
    """{kind: [(case id, op, dtype, old outcome, new outcome)]} for kinds
    regressed, newly_passing, newly_implemented, newly_not_implemented."""
    o = {c["id"]: c for c in old["cases"]}
    n = {c["id"]: c for c in new["cases"]}
    out = {"regressed": [], "newly_passing": [], "newly_implemented": [],
           "newly_not_implemented": []}
    for cid in sorted(set(o) | set(n)):
        a, b = o.get(cid), n.get(cid)
        ao, bo = (a or {}).get("outcome", "absent"), (b or {}).get("outcome", "absent")
        row = (cid, (b or a)["op"], (b or a)["dtype"], ao, bo)
        if ao == PASS and bo != PASS:
            out["regressed"].append(row)
        elif ao != PASS and bo == PASS:
            out["newly_passing"].append(row)
        if ao == NI and bo not in (NI, "absent"):
            out["newly_implemented"].append(row)
        elif ao != NI and bo == NI:
            out["newly_not_implemented"].append(row)
    return out


def per_op(rows):
    """{"op/dtype": count} of rows (cases without an op count under their id's section)."""
    agg = {}
    for cid, op, dtype, _, _ in rows:
        key = f"{op}/{dtype}" if op else cid.split("/")[0]
        agg[key] = agg.get(key, 0) + 1
    return agg


def text(old, new, d):
    lines = [f"old: {old['plugin']['library_path']} sha256 {old['plugin']['sha256'][:16]} "
             f"({old['summary']['by_outcome'].get(PASS, 0)}/{old['summary']['total']} pass)",
             f"new: {new['plugin']['library_path']} sha256 {new['plugin']['sha256'][:16]} "
             f"({new['summary']['by_outcome'].get(PASS, 0)}/{new['summary']['total']} pass)"]
    for kind, rows in d.items():
        lines.append(f"{kind.replace('_', ' ')}: {len(rows)}")
        for key, count in sorted(per_op(rows).items()):
            lines.append(f"  {key}: {count}")
        for cid, _, _, ao, bo in rows[:20] if kind == "regressed" else []:
            lines.append(f"    {cid}: {ao} -> {bo}")
    lines.append("REGRESSED" if d["regressed"] else "no regressions")
    return "\n".join(lines)


def to_html(old, new, d):
    e = html.escape
    parts = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
             "<title>DeviceKit conformance diff</title><style>body{font-family:system-ui,"
             "sans-serif;margin:1.5em}table{border-collapse:collapse;font-size:13px}td,th{border:"
             "1px solid #ccc;padding:3px 6px}.regressed{background:#ffcdd2}.newly_passing{"
             "background:#c8e6c9}</style></head><body><h1>Conformance diff</h1>",
             f"<p>old: {e(old['plugin']['library_path'])} ({e(old['plugin']['sha256'])})<br>"
             f"new: {e(new['plugin']['library_path'])} ({e(new['plugin']['sha256'])})</p>",
             f"<p><b>{'REGRESSED' if d['regressed'] else 'no regressions'}</b></p>"]
    for kind, rows in d.items():
        parts.append(f"<h2 class=\"{kind}\">{e(kind.replace('_', ' '))} ({len(rows)})</h2>")
        if rows:
            parts.append("<table><tr><th>case</th><th>old</th><th>new</th></tr>")
            parts += [f"<tr class=\"{kind}\"><td>{e(c)}</td><td>{e(a)}</td><td>{e(b)}</td></tr>"
                      for c, _, _, a, b in rows]
            parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts)


def main(args):
    prog = "devicekit conformance diff"
    try:
        old, new = load(args.old), load(args.new)
    except (OSError, ValueError) as err:
        print(f"{prog}: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    if args.html and (why := _output.output_problem(args.html, "--html")):
        print(f"{prog}: error: {why}", file=sys.stderr)
        return _output.EXIT_OUTPUT
    d = compare(old, new)
    print(text(old, new, d))
    if args.html:
        try:
            _output.write_file(args.html, to_html(old, new, d))
        except _output.OutputError as e:
            print(f"{prog}: error: {e}", file=sys.stderr)
            return _output.EXIT_OUTPUT
    return 1 if d["regressed"] else 0
