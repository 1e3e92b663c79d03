"""report.html: the shipped jinja2 template, self-contained (inline CSS, no
scripts or external resources), so it opens offline."""

from importlib import resources

import jinja2

from .case import OUTCOMES

# A cell shows its worst outcome, so one failing case is never hidden by passes.
_SEVERITY = ["crash", "error", "fail", "not-implemented", "skipped", "pass"]


def matrix(report):
    """(ops, dtypes, {(op, dtype): {"worst": outcome, "counts": {...}}})."""
    cells, ops, dtypes = {}, [], []
    order = report["device"]["properties"].get("dtypes", [])
    for row in report["cases"]:
        op, dt = row["op"], row["dtype"]
        if op is None or dt is None:
            continue
        if op not in ops:
            ops.append(op)
        if dt not in dtypes:
            dtypes.append(dt)
        cell = cells.setdefault((op, dt), {o: 0 for o in OUTCOMES})
        cell[row["outcome"]] += 1
    dtypes.sort(key=lambda d: order.index(d) if d in order else len(order))
    out = {k: {"counts": v, "worst": next(o for o in _SEVERITY if v[o])} for k, v in cells.items()}
    return ops, dtypes, out


def render(report):
    text = resources.files("devicekit.conformance").joinpath("templates/report.html.j2").read_text()
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    ops, dtypes, cells = matrix(report)
    problems = [r for r in report["cases"] if r["outcome"] not in ("pass",)]
    return env.from_string(text).render(r=report, ops=ops, dtypes=dtypes, cells=cells,
                                        problems=problems, outcomes=OUTCOMES)
