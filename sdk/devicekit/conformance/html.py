"""report.html: the shipped jinja2 template, self-contained (inline CSS, no
scripts or external resources), so it opens offline.

Separate op x dtype tables for base ops (sections ops and kernels),
composites, fused kernels and gradients; runtime, rng and errors as case
lists. A cell shows passed/total and is coloured by its worst outcome, with
missing required dtypes told apart from missing optional ones; it links to
its cases in the problem list, which is grouped by op and ordered by severity:
real problems first, an op's optional not-implemented cases folded into one line.
"""

from importlib import resources

import jinja2

from .case import OUTCOMES

_SEVERITY = ["crash", "error", "fail", "not-implemented", "skipped", "pass"]
TABLES = [("Base ops", ("ops", "kernels")), ("Composites", ("composites",)),
          ("Fused kernels", ("fused",)), ("Gradients", ("autograd",)),
          ("PyTorch OpInfos (cases: samples, noncontig, grad)", ("torch",))]
LISTS = [("Runtime", "runtime"), ("RNG", "rng"), ("Errors", "errors")]


def anchor(op, dtype):
    return f"c-{op}-{dtype}".replace(".", "_")


def matrix(report, sections=None):
    """(ops, dtypes, {(op, dtype): cell}) over the cases of ``sections`` (all:
    None). A cell: counts per outcome, passed, total, worst outcome, and
    ``missing``: "required"/"optional" when every case is not-implemented."""
    cells, ops, dtypes = {}, [], []
    order = report["device"]["properties"].get("dtypes", [])
    for row in report["cases"]:
        op, dt = row["op"], row["dtype"]
        if op is None or dt is None or (sections and row["section"] not in sections):
            continue
        if op not in ops:
            ops.append(op)
        if dt not in dtypes:
            dtypes.append(dt)
        cell = cells.setdefault((op, dt), {"counts": {o: 0 for o in OUTCOMES}, "required": False})
        cell["counts"][row["outcome"]] += 1
        cell["required"] |= bool(row["required"])
    dtypes.sort(key=lambda d: order.index(d) if d in order else len(order))
    for cell in cells.values():
        c = cell["counts"]
        cell["total"] = sum(c.values())
        cell["passed"] = c["pass"]
        cell["worst"] = next(o for o in _SEVERITY if c[o])
        cell["missing"] = None
        if c["not-implemented"] == cell["total"]:
            cell["missing"] = "required" if cell["required"] else "optional"
    return ops, dtypes, cells


def _optional_missing(r):
    return r["outcome"] == "not-implemented" and not r["required"]


def problem_groups(report):
    """[(op or section, [case rows], folded)] of cases that did not pass.

    The rows are the real problems (crash, error, fail, required
    not-implemented), then skipped ones; optional not-implemented cases are no
    rows but ``folded``, one line per op: ``None`` or {count, dtypes, anchors
    (the cells' link targets no row carries)}. Groups with the most severe row
    first, so an op with only optional gaps comes after every real problem."""
    groups = {}
    for r in report["cases"]:
        if r["outcome"] != "pass":
            groups.setdefault(r["op"] or r["section"], []).append(r)
    rank = {o: i for i, o in enumerate(_SEVERITY)}

    def key(r):
        return len(_SEVERITY) if _optional_missing(r) else rank[r["outcome"]]
    out = []
    for name, rows in groups.items():
        rows.sort(key=key)
        shown = [r for r in rows if not _optional_missing(r)]
        gaps = [r for r in rows if _optional_missing(r)]
        folded = None
        if gaps:
            dtypes = list(dict.fromkeys(r["dtype"] for r in gaps if r["dtype"]))
            op, linked = gaps[0]["op"], {r["dtype"] for r in shown}
            folded = {"count": len(gaps), "dtypes": dtypes,
                      "anchors": [anchor(op, d) for d in dtypes if op and d not in linked]}
        out.append((name, shown, folded, key(rows[0])))
    out.sort(key=lambda g: (g[3], g[0]))
    return [g[:3] for g in out]


def render(report):
    import time

    text = resources.files("devicekit.conformance").joinpath("templates/report.html.j2").read_text()
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    tables = [(title, *matrix(report, secs)) for title, secs in TABLES]
    lists = [(title, [r for r in report["cases"] if r["section"] == sec]) for title, sec in LISTS]
    mtime = report["plugin"].get("mtime")
    built = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime)) if mtime else "unknown"
    from .registry import status_line
    status = status_line(report["implementation"]) if report.get("implementation") else ""
    return env.from_string(text).render(r=report, tables=tables, lists=lists, built=built,
                                        status=status, groups=problem_groups(report),
                                        outcomes=OUTCOMES, anchor=anchor)
