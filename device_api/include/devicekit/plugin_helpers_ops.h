/* Generated from spec/base_ops.json by tools/gen_ops.py; do not edit.
 *
 * The op part of plugin_helpers.h: every base op's call signature as data,
 * which dkh_check_call checks a kernel call against. Part of plugin_helpers.h,
 * which includes it; never include it alone. Not part of the device API's ABI
 * (everything here is static or a macro, like plugin_helpers.h itself). */
#ifndef DEVICEKIT_PLUGIN_HELPERS_OPS_H_
#define DEVICEKIT_PLUGIN_HELPERS_OPS_H_

#ifndef DEVICEKIT_PLUGIN_HELPERS_H_
#error "include <devicekit/plugin_helpers.h>; plugin_helpers_ops.h is a part of it"
#endif

/* How an op's output shape follows from its inputs (spec out_shape). */
enum {
  DKH_SHAPE_SAME = 0, /* every input has out's shape (or broadcasts to it with DK_KERNEL_CAP_BROADCAST) */
  DKH_SHAPE_REDUCE_AXES = 1, /* out has x's rank, the dimensions in attrs.axes of size 1 */
  DKH_SHAPE_REDUCE_AXIS = 2, /* out has x's rank, dimension attrs.axis of size 1 */
  DKH_SHAPE_GATHER = 3, /* index has x's rank, no larger but along axis; out has index's shape */
  DKH_SHAPE_SCATTER = 4, /* index as gather's, src has index's shape, out has x's */
  DKH_SHAPE_MATMUL = 5, /* a [B..., M, K], b [B..., K, N], out [B..., M, N] */
  DKH_SHAPE_ANY = 6 /* no inputs: out may have any shape */
};

/* The output's dtype (spec output_dtype): the op's declared dtype, bool, int64,
 * or any dtype the header defines (cast). */
enum { DKH_OUT_SAME = 0, DKH_OUT_BOOL = 1, DKH_OUT_INT64 = 2, DKH_OUT_ANY = 3 };

/* The most inputs a base op has. */
#define DKH_MAX_OP_INPUTS 3

typedef struct dkh_OpSignature {
  const char* name;  /* the op's name, for messages */
  int32_t num_inputs, num_outputs;
  int32_t out_shape; /* DKH_SHAPE_* */
  int32_t out_dtype; /* DKH_OUT_* */
  /* Per input: -1, the op's declared dtype (one dtype shared by every such
   * input); else the DK_DType the input always has (spec input_dtypes). */
  int32_t input_dtype[DKH_MAX_OP_INPUTS];
  size_t attrs_size;  /* DK_<Name>Attrs_STRUCT_SIZE; 0: the op has no attributes */
  /* Offsets in the attribute struct, -1 where it has none: an int32_t axis
   * (0 <= axis < rank of input 0, or of out without inputs), a uint32_t axes
   * mask (not 0, bits below input 0's rank), DK_Scalar values. */
  int32_t axis_offset, axes_offset, scalar_offset[2];
} dkh_OpSignature;

/* The signature of base op `op` (a DK_OpId), or NULL for an id this header
 * does not know. */
static inline const dkh_OpSignature* dkh_op_signature(int32_t op) {
  static const dkh_OpSignature kSignatures[] = {
      {"copy", 1, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"fill", 0, 1, DKH_SHAPE_ANY, DKH_OUT_SAME, {-1, -1, -1}, DK_FillAttrs_STRUCT_SIZE, -1, -1, {(int32_t)offsetof(DK_FillAttrs, value), -1}},
      {"cast", 1, 1, DKH_SHAPE_SAME, DKH_OUT_ANY, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"add", 2, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"neg", 1, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"abs", 1, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"exp", 1, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"log", 1, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"sqrt", 1, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"rsqrt", 1, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"reciprocal", 1, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"sin", 1, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"cos", 1, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"tanh", 1, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"erf", 1, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"floor", 1, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"sign", 1, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"sub", 2, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"mul", 2, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"div", 2, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"pow", 2, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"maximum", 2, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"minimum", 2, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"eq", 2, 1, DKH_SHAPE_SAME, DKH_OUT_BOOL, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"ne", 2, 1, DKH_SHAPE_SAME, DKH_OUT_BOOL, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"lt", 2, 1, DKH_SHAPE_SAME, DKH_OUT_BOOL, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"le", 2, 1, DKH_SHAPE_SAME, DKH_OUT_BOOL, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"logical_and", 2, 1, DKH_SHAPE_SAME, DKH_OUT_BOOL, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"logical_or", 2, 1, DKH_SHAPE_SAME, DKH_OUT_BOOL, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"logical_xor", 2, 1, DKH_SHAPE_SAME, DKH_OUT_BOOL, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"logical_not", 1, 1, DKH_SHAPE_SAME, DKH_OUT_BOOL, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"where", 3, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {DK_DTYPE_BOOL, -1, -1}, 0, -1, -1, {-1, -1}},
      {"reduce_sum", 1, 1, DKH_SHAPE_REDUCE_AXES, DKH_OUT_SAME, {-1, -1, -1}, DK_ReduceAttrs_STRUCT_SIZE, -1, (int32_t)offsetof(DK_ReduceAttrs, axes), {-1, -1}},
      {"reduce_max", 1, 1, DKH_SHAPE_REDUCE_AXES, DKH_OUT_SAME, {-1, -1, -1}, DK_ReduceAttrs_STRUCT_SIZE, -1, (int32_t)offsetof(DK_ReduceAttrs, axes), {-1, -1}},
      {"reduce_min", 1, 1, DKH_SHAPE_REDUCE_AXES, DKH_OUT_SAME, {-1, -1, -1}, DK_ReduceAttrs_STRUCT_SIZE, -1, (int32_t)offsetof(DK_ReduceAttrs, axes), {-1, -1}},
      {"argmax", 1, 1, DKH_SHAPE_REDUCE_AXIS, DKH_OUT_INT64, {-1, -1, -1}, DK_AxisAttrs_STRUCT_SIZE, (int32_t)offsetof(DK_AxisAttrs, axis), -1, {-1, -1}},
      {"cumsum", 1, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, DK_AxisAttrs_STRUCT_SIZE, (int32_t)offsetof(DK_AxisAttrs, axis), -1, {-1, -1}},
      {"iota", 0, 1, DKH_SHAPE_ANY, DKH_OUT_SAME, {-1, -1, -1}, DK_IotaAttrs_STRUCT_SIZE, (int32_t)offsetof(DK_IotaAttrs, axis), -1, {(int32_t)offsetof(DK_IotaAttrs, start), (int32_t)offsetof(DK_IotaAttrs, step)}},
      {"gather", 2, 1, DKH_SHAPE_GATHER, DKH_OUT_SAME, {-1, DK_DTYPE_INT64, -1}, DK_AxisAttrs_STRUCT_SIZE, (int32_t)offsetof(DK_AxisAttrs, axis), -1, {-1, -1}},
      {"scatter_add", 3, 1, DKH_SHAPE_SCATTER, DKH_OUT_SAME, {-1, DK_DTYPE_INT64, -1}, DK_AxisAttrs_STRUCT_SIZE, (int32_t)offsetof(DK_AxisAttrs, axis), -1, {-1, -1}},
      {"matmul", 2, 1, DKH_SHAPE_MATMUL, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},
      {"random_bits", 0, 1, DKH_SHAPE_ANY, DKH_OUT_SAME, {-1, -1, -1}, DK_RandomAttrs_STRUCT_SIZE, -1, -1, {-1, -1}},
      {"random_uniform", 0, 1, DKH_SHAPE_ANY, DKH_OUT_SAME, {-1, -1, -1}, DK_RandomAttrs_STRUCT_SIZE, -1, -1, {-1, -1}},
  };
  if (op < 0 || op >= (int32_t)(sizeof kSignatures / sizeof kSignatures[0])) return NULL;
  return &kSignatures[op];
}

#endif /* DEVICEKIT_PLUGIN_HELPERS_OPS_H_ */
