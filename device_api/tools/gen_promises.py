#!/usr/bin/env python3
"""Generate docs/promises.md, the promise-coverage table, from spec/promises.json.

spec/promises.json lists every observable promise of the device API (the
header, its op part and the two specs) with the conformance cases that check
it; it is the only place that mapping is written by hand. This script writes
the table people read. With --check it changes nothing and exits 1 when the
table is stale (tests/test_promises.py runs that, so the json and the docs
cannot drift).
"""

import argparse
import json
import os
import sys

TOOLS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(TOOLS))
SPEC = os.path.join(REPO, "device_api", "spec", "promises.json")
DOCS = os.path.join(REPO, "docs", "promises.md")

# The first word of an id names its group; groups are shown in this order,
# each under the title here (an unknown group fails: add it here).
GROUPS = {
    "load": "Loading", "errors": "Errors", "dtypes": "Data types", "devices": "Devices",
    "stats": "Memory statistics",
    "device_sync": "Device synchronize", "memory": "Memory", "streams": "Streams",
    "events": "Events", "copies": "Copies", "kernels": "Kernels", "fused": "Fused kernels",
    "coll": "Collectives", "graphs": "Graphs", "ops": "Base ops: error bounds",
    "cast": "Base ops: cast", "rng": "Base ops: random", "op": "Base ops: one per op",
    "fused_op": "Fused ops: one per op",
}


def load():
    with open(SPEC) as f:
        return json.load(f)


def _cell(text):
    return text.replace("|", "\\|")


def render(spec):
    promises = spec["promises"]
    lines = ["# Promise coverage", "",
             "Generated from `device_api/spec/promises.json` by `device_api/tools/gen_promises.py`;",
             "do not edit. Every observable promise of the device API (`device_api.h`, its op part",
             "`device_api_ops.h`, `spec/base_ops.json`, `spec/collectives.json`) with the",
             "conformance cases that check it; a case column entry is a case id or an fnmatch",
             "pattern over case ids (`*` also matches `/`). `tests/test_promises.py` fails when a",
             "promise has no case, when an entry matches no case the suite collects on cpu:0, or",
             "when this page is stale. The argument rules of a kernel call are listed in",
             "`device_api/spec/arg_rules.json` (docs/conformance.md, section \"kernels\").",
             "A promise the suite cannot reach (kept at load: the SDK refuses a plugin that",
             "breaks it; or the SDK's own promise about a plugin that does not load) names the",
             "pytest tests that check it (`test:`); each must be a test function of that file.", "",
             f"{len(promises)} promises.", ""]
    by_group = {}
    for p in promises:
        group = p["id"].split(".", 1)[0]
        if group not in GROUPS:
            raise SystemExit(f"gen_promises.py: promise {p['id']!r} is in group {group!r}, "
                             f"which GROUPS does not list; add it there")
        by_group.setdefault(group, []).append(p)
    for group, title in GROUPS.items():
        if group not in by_group:
            continue
        lines += [f"## {title}", "", "| promise | where | what | cases |", "|---|---|---|---|"]
        for p in by_group[group]:
            cases = "<br>".join([f"`{c}`" for c in p["cases"]]
                                + [f"test: `{t}`" for t in p.get("tests", ())])
            lines.append(f"| `{p['id']}` | {_cell(p['where'])} | {_cell(p['promise'])} | {cases} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/promises.md is stale")
    args = ap.parse_args(argv)
    text = render(load())
    old = open(DOCS).read() if os.path.exists(DOCS) else None
    if old == text:
        print("up to date")
        return 0
    if args.check:
        print("stale generated file (run device_api/tools/gen_promises.py): docs/promises.md")
        return 1
    with open(DOCS, "w") as f:
        f.write(text)
    print("updated: docs/promises.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
