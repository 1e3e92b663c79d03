#!/usr/bin/env python3
"""Generate every op fact of the device API and the SDK from spec/base_ops.json.

The spec is the only place an op fact is written by hand. From it this writes:
- include/devicekit/device_api_ops.h, which the hand-written device_api.h
  includes: the DK_OpId list (in spec order: the order *is* the ABI and only
  appends), the DK_BASE_OPS X-macro, the op count per minor and the latest
  one (DK_OP_COUNT), the DK_FusedOpId list of the composite ops a plugin may
  register fused kernels for (same append-only rules, DK_FUSED_OP_COUNT),
  each op's spec dtype mask (DK_OP_DTYPES_<OP>) and the attribute structs;
- docs/base_ops.md;
- the SDK core's tables: sdk/csrc/base_ops_table.inc, fused_ops_table.inc,
  fused_attrs.inc (the fused ops' attribute structs, as X-macros the Python
  binding marshals with) and op_counts_by_minor.inc;
- sdk/devicekit/_op_facts.py: arity, kind and differentiability per op;
- include/devicekit/plugin_helpers_ops.h, which plugin_helpers.h includes:
  every op's call signature (out_shape, output_dtype, input_dtypes, where its
  attributes keep an axis, axes or scalars) for dkh_check_call (gen_helpers.py);
and from the spec's "versions" list (one entry per minor) the version facts:
- the "#define DK_API_MINOR" line of include/devicekit/device_api.h (the one
  line of that hand-written file this rewrites; DK_API_MAJOR is checked);
- DK_Api_STRUCT_SIZE_<major>_<minor> in device_api_ops.h (macros, so they may
  name DK_Api's fields before device_api.h declares the struct);
- sdk/csrc/api_size_by_minor.inc (the loader's kApiSizeByMinor rows);
- FIRST_DEVICEKIT in sdk/devicekit/_op_facts.py (devicekit.api_target).

A minor bump is: edit the spec (its ops with the new "since" and its
"versions" entry), run this, add the CHANGELOG line (the steps are listed
under "Versioning" in include/devicekit/device_api.h).
With --check it changes nothing and exits 1 when a generated file is stale
(the test suite runs that, so spec, header, tables and docs cannot drift).
"""

import argparse
import json
import os
import re
import sys
import textwrap

from gen_helpers import helpers_ops_header

HERE = os.path.dirname(os.path.abspath(__file__))
API_DIR = os.path.dirname(HERE)
REPO = os.path.dirname(API_DIR)
SPEC = os.path.join(API_DIR, "spec", "base_ops.json")
COLL_SPEC = os.path.join(API_DIR, "spec", "collectives.json")
COLL_DOCS = os.path.join(REPO, "docs", "collectives.md")
HEADER = os.path.join(API_DIR, "include", "devicekit", "device_api_ops.h")
DOCS = os.path.join(REPO, "docs", "base_ops.md")
SDK_TABLE = os.path.join(REPO, "sdk", "csrc", "base_ops_table.inc")
SDK_FUSED_TABLE = os.path.join(REPO, "sdk", "csrc", "fused_ops_table.inc")
SDK_FUSED_ATTRS = os.path.join(REPO, "sdk", "csrc", "fused_attrs.inc")
SDK_COUNTS = os.path.join(REPO, "sdk", "csrc", "op_counts_by_minor.inc")
SDK_API_SIZES = os.path.join(REPO, "sdk", "csrc", "api_size_by_minor.inc")
API_HEADER = os.path.join(API_DIR, "include", "devicekit", "device_api.h")
PY_FACTS = os.path.join(REPO, "sdk", "devicekit", "_op_facts.py")
HELPERS_OPS = os.path.join(API_DIR, "include", "devicekit", "plugin_helpers_ops.h")


def load_spec(path=SPEC, coll_path=COLL_SPEC):
    """base_ops.json, with the collectives part (collectives.json) under
    "collectives_part" (its own file: it is a separate optional part)."""
    with open(path) as f:
        spec = json.load(f)
    with open(coll_path) as f:
        spec["collectives_part"] = json.load(f)
    return spec


def _coll_items(spec):
    part = spec.get("collectives_part") or {}
    return part.get("collectives", []) + part.get("reduce_ops", [])


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
    return f"ulps(out): {ulps} + {b['lambda']}·√n·u·Σ\\|terms\\|"


def _minor(version):
    return int(version.split(".")[1])


def _major(spec):
    """The one major the spec describes (every since is <major>.<minor>)."""
    majors = {o["since"].split(".")[0] for o in spec["ops"] + spec["fused_ops"]}
    if len(majors) != 1:
        raise SystemExit(f"spec/base_ops.json: ops of several majors {sorted(majors)}; "
                         f"a major bump starts a new spec")
    return int(majors.pop())


def latest_minor(spec):
    """The newest minor the spec names (an op's, a fused op's or a collective's since)."""
    return max(_minor(o["since"]) for o in spec["ops"] + spec["fused_ops"] + _coll_items(spec))


def versions(spec):
    """The spec's versions list, checked: <major>.0, <major>.1, ... in order,
    each with the DK_Api field it ended at and a first DeviceKit release, and
    every op's since naming one of them (an op of a minor with no entry would
    ship in a header that does not claim that minor)."""
    major = _major(spec)
    vs = spec.get("versions") or []
    for m, v in enumerate(vs):
        if v.get("version") != f"{major}.{m}":
            raise SystemExit(f"spec/base_ops.json: versions[{m}] is {v.get('version')!r}, "
                             f"expected '{major}.{m}' (one entry per minor, in order)")
        for key in ("api_struct_ends_at", "first_devicekit"):
            if not isinstance(v.get(key), str):
                raise SystemExit(f"spec/base_ops.json: version {v['version']}: {key} is missing")
        if not re.fullmatch(r"\d+\.\d+", v["first_devicekit"]):
            raise SystemExit(f"spec/base_ops.json: version {v['version']}: first_devicekit "
                             f"{v['first_devicekit']!r} is not MAJOR.MINOR")
    for o in spec["ops"] + spec["fused_ops"] + _coll_items(spec):
        if _minor(o["since"]) >= len(vs):
            raise SystemExit(f"spec/base_ops.json: op {o['name']} is since {o['since']}, which has "
                             f"no entry in versions: add it (version, api_struct_ends_at, "
                             f"first_devicekit)")
    return vs


def api_header(spec, old):
    """device_api.h with its DK_API_MINOR line set from the spec: the one line
    of the hand-written header the generator owns."""
    vs = versions(spec)
    m = re.search(r"^#define DK_API_MAJOR (\d+)$", old, re.M)
    if not m or int(m[1]) != _major(spec):
        raise SystemExit(f"device_api.h: DK_API_MAJOR is not {_major(spec)}, the spec's major "
                         f"(a major bump starts a new spec and header)")
    new, n = re.subn(r"^#define DK_API_MINOR \d+$", f"#define DK_API_MINOR {len(vs) - 1}", old,
                     flags=re.M)
    if n != 1:
        raise SystemExit("device_api.h: expected exactly one '#define DK_API_MINOR <n>' line")
    return new


def struct_sizes(spec):
    """DK_Api_STRUCT_SIZE_<major>_<minor>, one per version (rule 4)."""
    major = _major(spec)
    out = ["/* The size DK_Api had at each minor of this major (rule 4 of \"Versioning\" in",
           " * device_api.h), named by the last field of that minor so the value never",
           " * moves when fields are appended. Macros, expanded where they are used, after",
           " * device_api.h has declared DK_Api. */"]
    for v in versions(spec):
        out.append(f"#define DK_Api_STRUCT_SIZE_{major}_{_minor(v['version'])} "
                   f"DK_STRUCT_SIZE(DK_Api, {v['api_struct_ends_at']})")
    out += ["/* The newest of them: device_api.h checks it is DK_Api's whole size, so a",
            " * field appended to DK_Api needs the version entry that ends at it. */",
            f"#define DK_Api_STRUCT_SIZE_LATEST "
            f"DK_Api_STRUCT_SIZE_{major}_{len(versions(spec)) - 1}",
            ""]
    return out


def sdk_api_sizes(spec):
    """Row m: DK_Api's size at device API <major>.m (the loader's kApiSizeByMinor)."""
    major = _major(spec)
    rows = ["// Generated from device_api/spec/base_ops.json by device_api/tools/gen_ops.py;",
            f"// do not edit. Row m (0 .. DK_API_MINOR): DK_Api's size at device API {major}.m."]
    rows += [f"DK_Api_STRUCT_SIZE_{major}_{m}," for m in range(len(versions(spec)))]
    return "\n".join(rows) + "\n"


def _comment(text, indent):
    lines = textwrap.wrap(text, 76 - indent)
    pad = " " * indent
    if len(lines) == 1:
        return f"{pad}/* {lines[0]} */"
    body = "\n".join(f"{pad} * {line}" for line in lines[1:])
    return f"{pad}/* {lines[0]}\n{body} */"


def ops_header(spec):
    ops = spec["ops"]
    out = ["/* Generated from spec/base_ops.json by tools/gen_ops.py; do not edit.",
           " *",
           " * The op part of the device API: base operators, fused operators, their",
           " * counts, dtype masks and attribute structs. Part of device_api.h, which",
           " * includes it where the kernels section needs it; never include it alone. */",
           "#ifndef DEVICEKIT_DEVICE_API_OPS_H_",
           "#define DEVICEKIT_DEVICE_API_OPS_H_",
           "",
           "#ifndef DEVICEKIT_DEVICE_API_H_",
           "#error \"include <devicekit/device_api.h>; device_api_ops.h is a part of it\"",
           "#endif",
           "",
           "/* The newest minor the op spec names. device_api.h refuses a DK_API_MINOR",
           " * older than it: ops of a minor ship with the version that has them. */",
           f"#define DK_OPS_API_MINOR {latest_minor(spec)}",
           "", "/* The base operators. Append-only: a new op takes the next value, in a new",
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
    out += _latest_alias(ops, "DK_OP_COUNT", "base ops")
    out += dtype_masks(spec)
    out += fused_block(spec["fused_ops"])
    out += _latest_alias(spec["fused_ops"], "DK_FUSED_OP_COUNT", "fused ops")
    out += coll_block(spec["collectives_part"])
    out += struct_sizes(spec)
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
    out.append("#endif /* DEVICEKIT_DEVICE_API_OPS_H_ */")
    return "\n".join(out) + "\n"


def _latest_alias(ops, prefix, what):
    """DK_OP_COUNT / DK_FUSED_OP_COUNT: the count of the newest minor that
    added any, for code that means "every op this header knows"."""
    latest = max((o["since"] for o in ops), key=_minor)
    return [f"/* The number of {what} this header knows: the count of the newest minor",
            f" * that added any ({latest}). Code that means \"every op\" uses this, never a",
            " * per-minor count spelled out by hand. */",
            f"#define {prefix} {prefix}_{latest.replace('.', '_')}", ""]


def _dtype_mask(spec, dtypes):
    """A spec dtype field as a C mask expression."""
    names = dtype_list(spec, dtypes)
    if set(names) == set(spec["dtype_groups"]["all"]):
        return "DK_DTYPE_MASK_ALL_1_0"
    return " | ".join(f"DK_DTYPE_BIT(DK_DTYPE_{d.upper()})" for d in names)


def dtype_masks(spec):
    out = ["/* The dtypes the spec allows each base op's kernel to declare", " * (DK_KernelTable.dtypes"
           "; of input 0, or of the output for ops without inputs).",
           " * A plugin declares these, or a subset where it deliberately supports less. */"]
    for o in spec["ops"]:
        out.append(f"#define DK_OP_DTYPES_{o['name'].upper()} ({_dtype_mask(spec, o['dtypes'])})")
    out.append("")
    return out


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


_COUNT_RULES = {"count", "nranks*count", "-"}


def coll_block(part):
    """DK_CollectiveId and DK_CollReduceOp (the collectives part, since 1.5)."""
    for c in part["collectives"]:
        for key in ("send_count", "recv_count"):
            if c[key] not in _COUNT_RULES:
                raise SystemExit(f"spec/collectives.json: {c['name']}: {key} {c[key]!r} is not one "
                                 f"of {sorted(_COUNT_RULES)}")
    out = ["/* The collectives of the collectives part (DK_Coll_Run_Args.collective; bit i",
           " * of DK_Collectives.collectives). Append-only, like DK_OpId. Per collective:",
           " * the send and recv buffer lengths in elements (in terms of the call's count",
           " * and the communicator's nranks; - : not used), whether it takes a reduce op,",
           " * a root or a peer, and its semantics. spec/collectives.json is the source. */",
           "typedef enum DK_CollectiveId {"]
    for i, c in enumerate(part["collectives"]):
        uses = [k for k in ("reduce", "root", "peer") if c[k]]
        text = (f"{c['name']}: send {c['send_count']}, recv {c['recv_count']}"
                f"{'; takes ' + ', '.join(uses) if uses else ''}; since {c['since']}. "
                f"{c['semantics']}")
        out.append(_comment(text, 2))
        out.append(f"  DK_COLL_{c['name'].upper()} = {i},")
    out += _counts(part["collectives"], "DK_COLLECTIVE_COUNT", "collectives")
    out[-1] = out[-1].replace(",", "", 1)
    out += ["} DK_CollectiveId;", "",
            "/* Reduce ops (DK_Coll_Run_Args.op; bit i of DK_Collectives.reduce_ops). */",
            "typedef enum DK_CollReduceOp {"]
    for i, r in enumerate(part["reduce_ops"]):
        out.append(f"  DK_COLL_OP_{r['name'].upper()} = {i}, /* since {r['since']} */")
    out += _counts(part["reduce_ops"], "DK_COLL_OP_COUNT", "reduce ops")
    out[-1] = out[-1].replace(",", "", 1)
    out += ["} DK_CollReduceOp;", "",
            "/* X-macro over every collective, in DK_CollectiveId order: X(ID_SUFFIX, name). */",
            "#define DK_COLLECTIVES(X) \\"]
    out += [f"  X({c['name'].upper()}, {c['name']}) \\" for c in part["collectives"]]
    out[-1] = out[-1][:-2]
    out.append("")
    return out


def coll_docs(spec):
    part = spec["collectives_part"]
    lines = ["# Collectives", "",
             "Generated from `device_api/spec/collectives.json` by `device_api/tools/gen_ops.py`;",
             "do not edit. The optional collectives part of the device API (since 1.5): the",
             "calls are in `device_api/include/devicekit/device_api.h` (\"Collectives\"). The id",
             "is the `DK_CollectiveId` value. Buffer lengths are in elements of the call's",
             "dtype, in terms of its `count` and the communicator's `nranks`.", "",
             "## Numeric contract", ""]
    lines += [f"- {t}" for t in part["numeric_contract"]]
    lines += ["", "## Collectives", "",
              "| id | collective | since | send | recv | takes | semantics |",
              "|---|---|---|---|---|---|---|"]
    for i, c in enumerate(part["collectives"]):
        uses = ", ".join(k for k in ("reduce", "root", "peer") if c[k]) or "—"
        lines.append(f"| {i} | `{c['name']}` | {c['since']} | {c['send_count']} | "
                     f"{c['recv_count']} | {uses} | {c['semantics']} |")
    lines += ["", "## Reduce ops", "", "| id | op | since |", "|---|---|---|"]
    lines += [f"| {i} | `{r['name']}` | {r['since']} |" for i, r in enumerate(part["reduce_ops"])]
    return "\n".join(lines) + "\n"


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
              "(a NULL entry in `DK_Kernel_Args.inputs` when absent) or, on a backward op",
              "(since 1.3), an optional output (NULL in `DK_Kernel_Args.outputs` when the SDK",
              "does not want that gradient). A kernel's `supports`",
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
    rows = ["// Generated from device_api/spec/base_ops.json by device_api/tools/gen_ops.py;",
            "// do not edit. Row: {op, name, num_inputs, spec dtype mask, output dtype rule}."]
    for o in spec["ops"]:
        mask = f"DK_OP_DTYPES_{o['name'].upper()}"
        rule = {"same": "OutDType::Same", "bool": "OutDType::Bool", "int64": "OutDType::Int64",
                "attr:out": "OutDType::Given"}[o["output_dtype"]]
        rows.append(f"{{DK_OP_{o['name'].upper()}, \"{o['name']}\", {len(o['inputs'])}, {mask}, {rule}}},")
    return "\n".join(rows) + "\n"


def backward_of(spec):
    """Fused op -> the fused op it is the backward of (spec field backward_of),
    checked: it names an earlier fused op, one backward per op, and every
    output is dNAME for an input NAME of that op."""
    fused = spec["fused_ops"]
    seen = {}
    for i, o in enumerate(fused):
        fwd = o.get("backward_of")
        if fwd is None:
            continue
        earlier = {f["name"]: f for f in fused[:i]}
        if fwd not in earlier or fwd in seen.values():
            raise SystemExit(f"spec/base_ops.json: fused op {o['name']}: backward_of {fwd!r} must "
                             f"name an earlier fused op that has no backward yet")
        names = {n.rstrip("?") for n in earlier[fwd]["inputs"]}
        for out in o["outputs"]:
            if not (out.startswith("d") and out.rstrip("?")[1:] in names):
                raise SystemExit(f"spec/base_ops.json: fused op {o['name']}: output {out!r} is not "
                                 f"d<an input of {fwd}>")
        seen[o["name"]] = fwd
    return seen


def sdk_fused_table(spec):
    """One row per fused op: {id, name, num_inputs, num_required_inputs,
    num_outputs, num_required_outputs, forward op (-1 unless a backward)}."""
    rows = ["// Generated from device_api/spec/base_ops.json by device_api/tools/gen_ops.py;",
            "// do not edit. Row: {fused op, name, num_inputs, num_required_inputs, num_outputs,",
            "// num_required_outputs, the op it is the backward of (-1: none)}."]
    bw = backward_of(spec)
    for o in spec["fused_ops"]:
        required = sum(1 for i in o["inputs"] if not i.endswith("?"))
        required_out = sum(1 for i in o["outputs"] if not i.endswith("?"))
        fwd = f"DK_FUSED_{bw[o['name']].upper()}" if o["name"] in bw else "-1"
        rows.append(f"{{DK_FUSED_{o['name'].upper()}, \"{o['name']}\", {len(o['inputs'])}, {required}, "
                    f"{len(o['outputs'])}, {required_out}, {fwd}}},")
    return "\n".join(rows) + "\n"


def _member(struct):
    """The FusedAttrs member holding an attribute struct: DK_SdpaAttrs -> sdpa."""
    return struct[len("DK_"):-len("Attrs")].lower()


_READ_AS = {"double": "double", "int32_t": "int32_t", "float": "float", "int64_t": "int64_t",
            "uint32_t": "uint32_t", "uint64_t": "uint64_t"}


def sdk_fused_attrs(spec):
    """X-macros over the fused ops' attribute structs, from which the SDK
    builds FusedAttrs (fused.h), picks an op's struct (fused.cpp) and fills it
    from a Python attribute dict (fused_py.cpp): no attribute is named by hand."""
    fused = spec["fused_ops"]
    structs = list(dict.fromkeys(o["attrs"] for o in fused))
    out = ["// Generated from device_api/spec/base_ops.json by device_api/tools/gen_ops.py;",
           "// do not edit. The attribute structs of the fused ops.", "",
           "// X(struct type, FusedAttrs member), once per struct.",
           "#define DK_SDK_FUSED_ATTR_STRUCTS(X) \\"]
    out += [f"  X({s}, {_member(s)}) \\" for s in structs]
    out[-1] = out[-1][:-2]
    out += ["", "// X(OP_SUFFIX, FusedAttrs member), once per fused op.",
            "#define DK_SDK_FUSED_OP_ATTRS(X) \\"]
    out += [f"  X({o['name'].upper()}, {_member(o['attrs'])}) \\" for o in fused]
    out[-1] = out[-1][:-2]
    out += ["", "// X(OP_SUFFIX, member, field, type read from Python), once per field a",
            "// caller gives, in struct order (fields the SDK sets itself are left out).",
            "#define DK_SDK_FUSED_ATTR_FIELDS(X) \\"]
    for o in fused:
        for f in spec["attr_structs"][o["attrs"]]["fields"]:
            how = f.get("marshal")
            if how == "sdk":
                continue
            if how not in (None, "bool"):
                raise SystemExit(f"spec/base_ops.json: {o['attrs']}.{f['name']}: unknown marshal "
                                 f"{how!r} (expected bool or sdk)")
            read = "bool" if how == "bool" else _READ_AS.get(f["type"])
            if read is None:
                raise SystemExit(f"spec/base_ops.json: {o['attrs']}.{f['name']}: no Python "
                                 f"marshalling for C type {f['type']!r}; add it to gen_ops._READ_AS")
            out.append(f"  X({o['name'].upper()}, {_member(o['attrs'])}, {f['name']}, {read}) \\")
    out[-1] = out[-1][:-2]
    return "\n".join(out) + "\n"


def _count_at(ops, prefix, major, minor):
    """The count macro of the newest minor <= ``minor`` that added any op, or 0."""
    minors = [_minor(o["since"]) for o in ops if _minor(o["since"]) <= minor]
    return f"{prefix}_{major}_{max(minors)}" if minors else "0"


def sdk_counts(spec):
    """Row m: what a plugin claiming device API <major>.m may have."""
    major = _major(spec)
    rows = ["// Generated from device_api/spec/base_ops.json by device_api/tools/gen_ops.py;",
            f"// do not edit. Row m (0 .. DK_OPS_API_MINOR): the ops of device API {major}.m,",
            "// {base ops, fused ops}."]
    for m in range(latest_minor(spec) + 1):
        rows.append(f"{{{_count_at(spec['ops'], 'DK_OP_COUNT', major, m)}, "
                    f"{_count_at(spec['fused_ops'], 'DK_FUSED_OP_COUNT', major, m)}}},  // {major}.{m}")
    return "\n".join(rows) + "\n"


def _py_tuple(name, items):
    body = textwrap.fill(", ".join(repr(i) for i in items) + ",", 96, initial_indent="    ",
                         subsequent_indent="    ")
    return f"{name} = (\n{body}\n)\n"


def _py_entry(k, v):
    """One dict entry, a dict value wrapped over lines (ruff's line length)."""
    line = f"    {k!r}: {v!r},\n"
    if len(line) <= 100 or not isinstance(v, dict):
        return line
    return f"    {k!r}: {{\n" + "".join(f"        {a!r}: {b!r},\n" for a, b in v.items()) + "    },\n"


def py_facts(spec):
    """The op facts the Python layer needs, as literals (no JSON at import)."""
    def table(name, items, doc):
        body = "".join(_py_entry(k, v) for k, v in items)
        return f"# {doc}\n{name} = {{\n{body}}}\n"

    ops = spec["ops"]
    return (
        '"""Op facts from device_api/spec/base_ops.json, written by\n'
        'device_api/tools/gen_ops.py; do not edit. The spec is their only source."""\n\n'
        f"API_MAJOR = {_major(spec)}\n"
        f"LATEST_MINOR = {latest_minor(spec)}  # the newest minor the spec names (DK_OPS_API_MINOR)\n"
        "# Base ops in DK_OpId order, and fused ops in DK_FusedOpId order.\n"
        + _py_tuple("OPS", [o["name"] for o in ops])
        + _py_tuple("FUSED_OPS", [o["name"] for o in spec["fused_ops"]])
        + table("FUSED_BACKWARD", [(f, b) for b, f in backward_of(spec).items()],
                "Fused op -> the fused op that computes its gradients (spec backward_of).")
        + table("FUSED_OUTPUTS", [(o["name"], tuple(o["outputs"])) for o in spec["fused_ops"]],
                "Fused op -> its outputs in order (a trailing ? marks an optional one).")
        + table("NUM_INPUTS", [(o["name"], len(o["inputs"])) for o in ops],
                "Base op -> number of inputs.")
        + table("KIND", [(o["name"], o["kind"]) for o in ops],
                "Base op -> kind (memory, unary, binary, compare, logical, reduction, ...).")
        + table("SINCE", [(o["name"], o["since"]) for o in ops + spec["fused_ops"]],
                "Op -> the device API version that added it.")
        + _py_tuple("COLL_REDUCE_OPS", [r["name"] for r in spec["collectives_part"]["reduce_ops"]])
        + table("COLLECTIVES", [(c["name"], {k: c[k] for k in ("send_count", "recv_count", "reduce",
                                                              "root", "peer", "since")})
                                for c in spec["collectives_part"]["collectives"]],
                "Collective -> its buffer rules and arguments, in DK_CollectiveId order "
                "(spec/collectives.json).")
        + "# Base ops autograd tracks (spec field differentiable).\n"
        + "DIFFERENTIABLE = frozenset({\n"
        + "".join(f"    {o['name']!r},\n" for o in ops if o["differentiable"])
        + "})\n"
        + "# Device API (major, minor) -> the first DeviceKit release (major, minor) whose\n"
        + "# loader accepts plugins of that version (spec versions[].first_devicekit).\n"
        + "FIRST_DEVICEKIT = {\n"
        + "".join(f"    ({_major(spec)}, {_minor(v['version'])}): "
                  f"({', '.join(v['first_devicekit'].split('.'))}),"
                  + (f"  # {v['note']}" if v.get("note") else "") + "\n"
                  for v in versions(spec))
        + "}\n")


def render(spec):
    with open(API_HEADER) as f:
        api_h = f.read()
    return {API_HEADER: api_header(spec, api_h), SDK_API_SIZES: sdk_api_sizes(spec),
            HEADER: ops_header(spec), DOCS: docs_table(spec), SDK_TABLE: sdk_table(spec),
            SDK_FUSED_TABLE: sdk_fused_table(spec), SDK_FUSED_ATTRS: sdk_fused_attrs(spec),
            SDK_COUNTS: sdk_counts(spec), PY_FACTS: py_facts(spec),
            HELPERS_OPS: helpers_ops_header(spec), COLL_DOCS: coll_docs(spec)}


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
