"""The op part of plugin_helpers.h, generated from spec/base_ops.json (gen_ops.py
writes it; this module only renders it).

include/devicekit/plugin_helpers_ops.h holds every base op's call signature as
data: inputs and outputs, the shape rule (spec out_shape), the output dtype
(spec output_dtype), fixed input dtypes (spec input_dtypes) and where its
attribute struct keeps an axis, an axes mask or DK_Scalar values. The
hand-written dkh_check_call in plugin_helpers.h checks a kernel call against it
and the kernel table's declared dtypes and capability bits: the rules of
spec/arg_rules.json marked "helper", for every op, with no per-op code in a
plugin.
"""

SHAPES = ("same", "reduce_axes", "reduce_axis", "gather", "scatter", "matmul", "any")
OUT_DTYPES = {"same": "DKH_OUT_SAME", "bool": "DKH_OUT_BOOL", "int64": "DKH_OUT_INT64",
              "attr:out": "DKH_OUT_ANY"}


def check_signatures(spec):
    """Refuses an op whose signature facts the helpers cannot express."""
    names = spec["dtype_groups"]["all"]
    for o in spec["ops"]:
        where = f"spec/base_ops.json: op {o['name']}"
        if o.get("out_shape") not in SHAPES:
            raise SystemExit(f"{where}: out_shape is {o.get('out_shape')!r}; expected one of "
                             f"{', '.join(SHAPES)}")
        if o["output_dtype"] not in OUT_DTYPES:
            raise SystemExit(f"{where}: output_dtype {o['output_dtype']!r} is not one of "
                             f"{', '.join(OUT_DTYPES)}")
        for name, dt in o.get("input_dtypes", {}).items():
            if name not in o["inputs"] or dt not in names:
                raise SystemExit(f"{where}: input_dtypes names {name!r}: {dt!r}; expected one of "
                                 f"its inputs and a dtype")
        if (o["out_shape"] == "any") != (not o["inputs"]):
            raise SystemExit(f"{where}: out_shape 'any' is for ops without inputs, and only them")


def _offset(spec, struct, pred):
    if not struct:
        return "-1"
    for f in spec["attr_structs"][struct]["fields"]:
        if pred(f):
            return f"(int32_t)offsetof({struct}, {f['name']})"
    return "-1"


def _scalars(spec, struct):
    fields = spec["attr_structs"][struct]["fields"] if struct else []
    names = [f["name"] for f in fields if f["type"] == "DK_Scalar"]
    if len(names) > 2:
        raise SystemExit(f"spec/base_ops.json: {struct} has more than 2 DK_Scalar fields; "
                         f"widen dkh_OpSignature.scalar_offset")
    offs = [f"(int32_t)offsetof({struct}, {n})" for n in names] + ["-1"] * (2 - len(names))
    return "{" + ", ".join(offs) + "}"


def helpers_ops_header(spec):
    check_signatures(spec)
    ops = spec["ops"]
    max_in = max(len(o["inputs"]) for o in ops)
    out = ["/* Generated from spec/base_ops.json by tools/gen_ops.py; do not edit.",
           " *",
           " * The op part of plugin_helpers.h: every base op's call signature as data,",
           " * which dkh_check_call checks a kernel call against. Part of plugin_helpers.h,",
           " * which includes it; never include it alone. Not part of the device API's ABI",
           " * (everything here is static or a macro, like plugin_helpers.h itself). */",
           "#ifndef DEVICEKIT_PLUGIN_HELPERS_OPS_H_",
           "#define DEVICEKIT_PLUGIN_HELPERS_OPS_H_",
           "",
           "#ifndef DEVICEKIT_PLUGIN_HELPERS_H_",
           "#error \"include <devicekit/plugin_helpers.h>; plugin_helpers_ops.h is a part of it\"",
           "#endif",
           "",
           "/* How an op's output shape follows from its inputs (spec out_shape). */",
           "enum {"]
    docs = {
        "same": "every input has out's shape (or broadcasts to it with DK_KERNEL_CAP_BROADCAST)",
        "reduce_axes": "out has x's rank, the dimensions in attrs.axes of size 1",
        "reduce_axis": "out has x's rank, dimension attrs.axis of size 1",
        "gather": "index has x's rank, no larger but along axis; out has index's shape",
        "scatter": "index as gather's, src has index's shape, out has x's",
        "matmul": "a [B..., M, K], b [B..., K, N], out [B..., M, N]",
        "any": "no inputs: out may have any shape"}
    out += [f"  DKH_SHAPE_{s.upper()} = {i}, /* {docs[s]} */" for i, s in enumerate(SHAPES)]
    out[-1] = out[-1].replace(",", "", 1)
    out += ["};", "",
            "/* The output's dtype (spec output_dtype): the op's declared dtype, bool, int64,",
            " * or any dtype the header defines (cast). */",
            "enum { DKH_OUT_SAME = 0, DKH_OUT_BOOL = 1, DKH_OUT_INT64 = 2, DKH_OUT_ANY = 3 };", "",
            "/* The most inputs a base op has. */",
            f"#define DKH_MAX_OP_INPUTS {max_in}", "",
            "typedef struct dkh_OpSignature {",
            "  const char* name;  /* the op's name, for messages */",
            "  int32_t num_inputs, num_outputs;",
            "  int32_t out_shape; /* DKH_SHAPE_* */",
            "  int32_t out_dtype; /* DKH_OUT_* */",
            "  /* Per input: -1, the op's declared dtype (one dtype shared by every such",
            "   * input); else the DK_DType the input always has (spec input_dtypes). */",
            "  int32_t input_dtype[DKH_MAX_OP_INPUTS];",
            "  size_t attrs_size;  /* DK_<Name>Attrs_STRUCT_SIZE; 0: the op has no attributes */",
            "  /* Offsets in the attribute struct, -1 where it has none: an int32_t axis",
            "   * (0 <= axis < rank of input 0, or of out without inputs), a uint32_t axes",
            "   * mask (not 0, bits below input 0's rank), DK_Scalar values. */",
            "  int32_t axis_offset, axes_offset, scalar_offset[2];",
            "} dkh_OpSignature;", "",
            "/* The signature of base op `op` (a DK_OpId), or NULL for an id this header",
            " * does not know. */",
            "static inline const dkh_OpSignature* dkh_op_signature(int32_t op) {",
            "  static const dkh_OpSignature kSignatures[] = {"]
    for o in ops:
        fixed = o.get("input_dtypes", {})
        dts = [f"DK_DTYPE_{fixed[i].upper()}" if i in fixed else "-1" for i in o["inputs"]]
        dts += ["-1"] * (max_in - len(dts))
        st = o["attrs"]
        size = f"{st}_STRUCT_SIZE" if st else "0"
        axis = _offset(spec, st, lambda f: f["name"] == "axis" and f["type"] == "int32_t")
        axes = _offset(spec, st, lambda f: f["name"] == "axes" and f["type"] == "uint32_t")
        out.append(f"      {{\"{o['name']}\", {len(o['inputs'])}, {len(o['outputs'])}, "
                   f"DKH_SHAPE_{o['out_shape'].upper()}, {OUT_DTYPES[o['output_dtype']]}, "
                   f"{{{', '.join(dts)}}}, {size}, {axis}, {axes}, {_scalars(spec, st)}}},")
    out += ["  };",
            "  if (op < 0 || op >= (int32_t)(sizeof kSignatures / sizeof kSignatures[0])) "
            "return NULL;",
            "  return &kSignatures[op];",
            "}", "",
            "#endif /* DEVICEKIT_PLUGIN_HELPERS_OPS_H_ */"]
    return "\n".join(out) + "\n"
