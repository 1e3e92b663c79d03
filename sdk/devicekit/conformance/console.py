"""What ``devicekit conformance`` prints: the header naming the exact library,
failures grouped by op (each with its replay command) before anything else,
not-implemented summarised per op with the composites it blocks, the summary
table, the implementation status and the corpus verdict.
"""

import re
import time

from .case import CRASH, ERROR, FAIL, NOT_IMPLEMENTED

_BAD = (CRASH, ERROR, FAIL)
MAX_GROUPS, MAX_PER_GROUP = 40, 4


def library_line(meta):
    p = meta["plugin"]
    built = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(p["mtime"])) if p.get("mtime") \
        else "unknown"
    return f"library {p['library_path']} (sha256 {p['sha256']}, built {built})"


def header(meta, target, n_cases, args):
    p = meta["plugin"]
    return (f"devicekit conformance: {target.device.name} ({p['name']} {p['version']}, device API "
            f"{p['api_version']}), {n_cases} cases, level {args.level}, {args.jobs} jobs\n"
            f"  {library_line(meta)}")


def _group(row):
    return row["op"] or row["section"]


def _base_ops(report):
    return {k["op"] for k in report.get("kernels", [])}


def not_implemented_summary(report):
    """[(op, line)]: per base op with not-implemented cases, how many of its spec
    dtypes the plugin declares, which required ones are missing, how many of
    its cases were blocked by another missing kernel, and which composites and
    sections its absence blocks (read off the cases' messages)."""
    declared = {k["op"]: set(k["dtypes"]) for k in report.get("kernels", []) if k["implemented"]}
    base = _base_ops(report)
    info, blocks = {}, {}
    for row in report["cases"]:
        if row["outcome"] != NOT_IMPLEMENTED:
            continue
        op = row["op"]
        if op in base:
            m = info.setdefault(op, {"spec": set(), "required": set(), "blocked": 0})
            m["spec"].add(row["dtype"])
            if row["dtype"] not in declared.get(op, set()):
                if row["required"]:
                    m["required"].add(row["dtype"])
            elif row["section"] in ("ops", "kernels"):
                m["blocked"] += 1
        names = set(re.findall(r"'([a-z_0-9]+)'", row["message"])) & base
        for other in names - {op}:
            blocks.setdefault(other, set()).add(op or row["section"])
            info.setdefault(other, {"spec": set(), "required": set(), "blocked": 0})
    out = []
    for op in sorted(info):
        m = info[op]
        have = declared.get(op)
        if have is None:
            line = f"{op}: no kernel"
        else:
            total = len(m["spec"] | have)
            line = f"{op}: {len(have)}/{total} dtypes"
        if m["required"]:
            line += f"; missing required: {', '.join(sorted(m['required']))}"
        if m["blocked"]:
            line += f"; {m['blocked']} cases blocked by other missing kernels"
        if blocks.get(op):
            shown = sorted(blocks[op])
            line += f"; blocks {', '.join(shown[:8])}" + (f" and {len(shown) - 8} more"
                                                          if len(shown) > 8 else "")
        if m["required"] or m["blocked"] or blocks.get(op) or have is None or len(m["spec"]):
            out.append((op, line))
    return out


def print_outcome(rep):
    from .report import summary_table, torch_lines

    bad = [c for c in rep["cases"] if c["outcome"] in _BAD]
    groups = {}
    for c in bad:
        groups.setdefault(_group(c), []).append(c)
    severity = {CRASH: 0, ERROR: 1, FAIL: 2}
    ordered = sorted(groups.items(), key=lambda g: (min(severity[c["outcome"]] for c in g[1]),
                                                    g[0]))
    if ordered:
        print(f"PROBLEMS ({len(bad)} cases in {len(groups)} ops/sections; crashes first):")
    for name, rows in ordered[:MAX_GROUPS]:
        counts = {}
        for c in rows:
            counts[c["outcome"]] = counts.get(c["outcome"], 0) + 1
        print(f"  {name}: " + ", ".join(f"{n} {o}" for o, n in sorted(counts.items(),
                                                                       key=lambda x: severity[x[0]])))
        for c in sorted(rows, key=lambda c: severity[c["outcome"]])[:MAX_PER_GROUP]:
            first = c["message"].splitlines()[0] if c["message"] else ""
            d = c["details"]
            nums = (f" [max abs err {d['max_abs_err']:.3g}, max rel err {d['max_rel_err']:.3g}, "
                    f"worst index {d.get('worst_index')}]" if "max_abs_err" in d else "")
            print(f"    {c['outcome'].upper()} {c['id']} (seed {c['seed']}){nums}\n"
                  f"        {first[:300]}\n        replay: {c['replay']}")
        if len(rows) > MAX_PER_GROUP:
            print(f"    ... and {len(rows) - MAX_PER_GROUP} more {name} cases (see --report)")
    if len(ordered) > MAX_GROUPS:
        print(f"  ... and {len(ordered) - MAX_GROUPS} more ops/sections (see --report)")
    ni = not_implemented_summary(rep)
    if ni:
        print("NOT IMPLEMENTED (per op; never a pass):")
        for _, line in ni:
            print(f"  {line}")
    print(summary_table(rep))
    for line in torch_lines(rep):
        print(line)
    if rep.get("implementation"):
        from .registry import status_line
        print(f"status: {status_line(rep['implementation'])}")
    corpus = rep["corpus"]
    if corpus["checked"]:
        verdict = "ok" if corpus["ok"] else \
            "COLLAPSED: cases that should have run did not (a suite or SDK bug, or a plugin " \
            "that declares kernels it cannot run)"
        print(f"corpus: executed {corpus['executed']} cases, expected at least "
              f"{corpus['expected_min']}: {verdict}")
        for s in corpus["short"]:
            print(f"    short: {s}")
        for s in corpus.get("blocked", [])[:10]:
            print(f"    blocked: {s}")
    else:
        print(f"corpus: not checked ({corpus['reason']})")
    for s, why in rep["unavailable_sections"].items():
        print(f"section {s} not run: {why}")
    for line in coverage_lines(rep):
        print(line)
    print("PASSED" if rep["summary"]["passed"] else "FAILED")


def coverage_lines(rep, most=20):
    """The --coverage summary: totals, then the functions with untaken
    branches (the most-missed first; the report lists them all)."""
    cov = rep.get("coverage")
    if cov is None:
        return []
    if "error" in cov:
        return [f"coverage: not read ({cov['error']})"]
    (lc, lt), (bc, bt) = cov["lines"], cov["branches"]
    out = [f"coverage of the plugin ({cov['build_dir']}): lines {lc}/{lt}, branches {bc}/{bt}; "
           f"{len(cov['unreached'])} functions with branches no case reached"]
    rows = sorted(cov["unreached"], key=lambda u: -u["branches"])
    for u in rows[:most]:
        out.append(f"  {u['file']}  {u['function']}: {u['branches']} untaken "
                   f"(lines {', '.join(map(str, u['lines'][:8]))}{' ...' if len(u['lines']) > 8 else ''})")
    if len(rows) > most:
        out.append(f"  ... {len(rows) - most} more functions (see report.html)")
    return out
