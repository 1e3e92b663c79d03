#!/usr/bin/env python3
"""Generate the base-operator parts of the device API from spec/base_ops.json.

Writes, between the GENERATED markers of include/devicekit/device_api.h, the
DK_OpId list (in spec order: the order *is* the ABI and only appends), the
DK_BASE_OPS X-macro, the op-count per minor, the DK_FusedOpId list of the
composite ops a plugin may register fused kernels for (same append-only
rules) and the attribute structs; and writes docs/base_ops.md and the SDK's
per-op tables sdk/csrc/base_ops_table.inc and sdk/csrc/fused_ops_table.inc.
With --check it changes nothing and exits 1 when a
generated file is stale (the test suite runs that, so spec, header and docs
cannot drift).
"""

import argparse
import json
import os
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
API_DIR = os.path.dirname(HERE)
REPO = os.path.dirname(API_DIR)
SPEC = os.path.join(API_DIR, "spec", "base_ops.json")
HEADER = os.path.join(API_DIR, "include", "devicekit", "device_api.h")
DOCS = os.path.join(REPO, "docs", "base_ops.md")
SDK_TABLE = os.path.join(REPO, "sdk", "csrc", "base_ops_table.inc")
SDK_FUSED_TABLE = os.path.join(REPO, "sdk", "csrc", "fused_ops_table.inc")
BEGIN = "/* ---- BEGIN GENERATED from spec/base_ops.json by tools/gen_ops.py; do not edit ---- */"
END = "/* ---- END GENERATED ---- */"


def load_spec(path=SPEC):
    with open(path) as f:
        return json.load(f)


def dtype_list(spec, dtypes):
    """A spec dtype field as a list: a group name ("all"), one dtype ("float32") or a list."""
    if isinstance(dtypes, str):
        return spec["dtype_groups"].get(dtypes, [dtypes])
    return dtypes


def bound_text(b):
    """The error bound of an op (spec field error_bound) as one table cell."""
    if b is None:
        return "—"
    if b["kind"] == "exact":
        return "exact"
    ulps = ", ".join(f"{d} {k}" for d, k in b["ulps"].items())
    if b["kind"] == "ulp":
        floor = f"; or {b['abs_floor_ulps_of_one']} ulp of 1.0" if b.get("abs_floor_ulps_of_one") else ""
        return f"ulps: {ulps}{floor}"
    return f"ulps(out): {ulps} + {b['lambda']}·√n·u·Σ\|terms\|"


def _minor(version):
    return int(version.split(".")[1])


def _comment(text, indent):
    lines = textwrap.wrap(text, 76 - indent)
    pad = " " * indent
    if len(lines) == 1:
        return f"{pad}/* {lines[0]} */"
    body = "\n".join(f"{pad} * {l}" for l in lines[1:])
    return f"{pad}/* {lines[0]}\n{body} */"


def header_block(spec):
    ops = spec["ops"]
    out = [BEGIN, "", "/* The base operators. Append-only: a new op takes the next value, in a new",
           " * minor, and adds a DK_OP_COUNT_<major>_<minor>. Per op: inputs -> outputs,",
           " * the attribute struct (NULL when none), dtypes a kernel may declare, and",
           " * the semantics every backend must reproduce. */", "typedef enum DK_OpId {"]
    for i, o in enumerate(ops):
        sig = f"{o['name']}({', '.join(o['inputs'])}) -> {', '.join(o['outputs'])}"
        attrs = f"attrs {o['attrs']}" if o["attrs"] else "no attrs"
        out.append(_comment(f"{sig}; {attrs}; since {o['since']}. {o['semantics']}", 2))
        out.append(f"  DK_OP_{o['name'].upper()} = {i},")
    out += _counts(ops, "DK_OP_COUNT", "ops")
    out[-1] = out[-1].replace(",", "", 1)
    out += ["} DK_OpId;", "",
            "/* X-macro over every base op, in DK_OpId order: X(ID_SUFFIX, name). */",
            "#define DK_BASE_OPS(X) \\"]
    out += [f"  X({o['name'].upper()}, {o['name']}) \\" for o in ops]
    out[-1] = out[-1][:-2]
    out.append("")
    out += fused_block(spec["fused_ops"])
    for name, st in spec["attr_structs"].items():
        users = ", ".join(o["name"] for o in ops + spec["fused_ops"] if o["attrs"] == name)
        out.append(f"/* Attributes of {users} (since {st['since']}). */")
        out.append(f"typedef struct {name} {{")
        out.append("  size_t struct_size;")
        for fld in st["fields"]:
            out.append(f"  {fld['type']} {fld['name']}; /* {fld['doc']} */")
        out.append(f"}} {name};")
        out.append(f"DK_DEFINE_STRUCT_SIZE({name}, {st['fields'][-1]['name']});")
        out.append("")
    out.append(END)
    return "\n".join(out)


def _counts(ops, prefix, what):
    counts = {}
    for i, o in enumerate(ops):
        counts[o["since"]] = i + 1
    return [f"  {prefix}_{v.replace('.', '_')} = {counts[v]}, /* number of {what} in device API {v} */"
            for v in sorted(counts, key=_minor)]


def fused_block(fused):
    out = ["/* The composite ops a plugin may register fused kernels for (DK_FusedKernel.op;",
           " * see \"Fused kernels\" below). Append-only, like DK_OpId. Per op: inputs",
           " * (a trailing ? marks an optional input: when absent, its entry in",
           " * DK_Kernel_Args.inputs is NULL) -> outputs, the attribute struct, and the",
           " * semantics a fused kernel must reproduce: the SDK's decomposition into base",
           " * ops is the definition, and conformance checks the kernel against it. */",
           "typedef enum DK_FusedOpId {"]
    for i, o in enumerate(fused):
        sig = f"{o['name']}({', '.join(o['inputs'])}) -> {', '.join(o['outputs'])}"
        out.append(_comment(f"{sig}; attrs {o['attrs']}; since {o['since']}. {o['semantics']}", 2))
        out.append(f"  DK_FUSED_{o['name'].upper()} = {i},")
    out += _counts(fused, "DK_FUSED_OP_COUNT", "fused ops")
    out[-1] = out[-1].replace(",", "", 1)
    out += ["} DK_FusedOpId;", "",
            "/* X-macro over every fused op, in DK_FusedOpId order: X(ID_SUFFIX, name). */",
            "#define DK_FUSED_OPS(X) \\"]
    out += [f"  X({o['name'].upper()}, {o['name']}) \\" for o in fused]
    out[-1] = out[-1][:-2]
    out.append("")
    return out


def docs_table(spec):
    lines = ["# Base operators", "",
             "Generated from `device_api/spec/base_ops.json` by `device_api/tools/gen_ops.py`;",
             "do not edit. The id is the `DK_OpId` value and the kernel-table index.", "",
             "| id | op | since | inputs → outputs | attributes | dtypes (required) | semantics "
             "| error bound |",
             "|---|---|---|---|---|---|---|---|"]
    for i, o in enumerate(spec["ops"]):
        dts = dtype_list(spec, o["dtypes"])
        req = dtype_list(spec, o["required_dtypes"])
        dt_text = ", ".join(f"**{d}**" if d in req else d for d in dts)
        io = f"{', '.join(o['inputs']) or '—'} → {', '.join(o['outputs'])}"
        lines.append(f"| {i} | `{o['name']}` | {o['since']} | {io} | {o['attrs'] or '—'} | "
                     f"{dt_text} | {o['semantics']} | {bound_text(o.get('error_bound'))} |")
    lines += ["", "**Bold** dtypes are mandatory for a kernel that exists; others are declared",
              "per op by the plugin, and the SDK converts where a dtype is missing.", "",
              "**Error bounds** (what `devicekit conformance` enforces against its float64",
              "oracle, `devicekit.testing.bounds`): " + spec.get("about_error_bound", ""), "",
              "# Fused operators", "",
              "Composite ops a plugin may register fused kernels for (`DK_FusedKernelTable`,",
              "since 1.2). The id is the `DK_FusedOpId` value. `?` marks an optional input",
              "(a NULL entry in `DK_Kernel_Args.inputs` when absent). A kernel's `supports`",
              "predicate decides which dtypes and layouts it takes; the SDK runs the",
              "decomposition for every call no kernel accepts.", "",
              "| id | op | since | inputs → outputs | attributes | semantics |",
              "|---|---|---|---|---|---|"]
    for i, o in enumerate(spec["fused_ops"]):
        io = f"{', '.join(o['inputs'])} → {', '.join(o['outputs'])}"
        lines.append(f"| {i} | `{o['name']}` | {o['since']} | {io} | {o['attrs']} | {o['semantics']} |")
    lines.append("")
    return "\n".join(lines)


def sdk_table(spec):
    """One row per op for the SDK core: what the SDK itself must know of an
    op (arity, the dtypes the spec allows) without reading JSON at run time."""
    all_dtypes = spec["dtype_groups"]["all"]
    rows = ["// Generated from device_api/spec/base_ops.json by device_api/tools/gen_ops.py;",
            "// do not edit. Row: {op, name, num_inputs, spec dtype mask, output dtype rule}."]
    for o in spec["ops"]:
        mask = " | ".join(f"DK_DTYPE_BIT(DK_DTYPE_{d.upper()})" for d in dtype_list(spec, o["dtypes"]))
        if set(dtype_list(spec, o["dtypes"])) == set(all_dtypes):
            mask = "DK_DTYPE_MASK_ALL_1_0"
        rule = {"same": "OutDType::Same", "bool": "OutDType::Bool", "int64": "OutDType::Int64",
                "attr:out": "OutDType::Given"}[o["output_dtype"]]
        rows.append(f"{{DK_OP_{o['name'].upper()}, \"{o['name']}\", {len(o['inputs'])}, {mask}, {rule}}},")
    return "\n".join(rows) + "\n"


def sdk_fused_table(spec):
    """One row per fused op: {id, name, num_inputs, num_required_inputs}."""
    rows = ["// Generated from device_api/spec/base_ops.json by device_api/tools/gen_ops.py;",
            "// do not edit. Row: {fused op, name, num_inputs, num_required_inputs}."]
    for o in spec["fused_ops"]:
        required = sum(1 for i in o["inputs"] if not i.endswith("?"))
        rows.append(f"{{DK_FUSED_{o['name'].upper()}, \"{o['name']}\", {len(o['inputs'])}, {required}}},")
    return "\n".join(rows) + "\n"


def render(spec):
    with open(HEADER) as f:
        header = f.read()
    a, b = header.index(BEGIN), header.index(END) + len(END)
    return {HEADER: header[:a] + header_block(spec) + header[b:], DOCS: docs_table(spec),
            SDK_TABLE: sdk_table(spec), SDK_FUSED_TABLE: sdk_fused_table(spec)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a generated file is stale")
    args = ap.parse_args(argv)
    stale = []
    for path, text in render(load_spec()).items():
        old = open(path).read() if os.path.exists(path) else None
        if old != text:
            stale.append(os.path.relpath(path, REPO))
            if not args.check:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
    if args.check and stale:
        print("stale generated files (run device_api/tools/gen_ops.py): " + ", ".join(stale))
        return 1
    print(("updated: " + ", ".join(stale)) if stale else "up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
