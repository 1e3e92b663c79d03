/* Generated from spec/base_ops.json by tools/gen_ops.py; do not edit.
 *
 * The op part of the device API: base operators, fused operators, their
 * counts, dtype masks and attribute structs. Part of device_api.h, which
 * includes it where the kernels section needs it; never include it alone. */
#ifndef DEVICEKIT_DEVICE_API_OPS_H_
#define DEVICEKIT_DEVICE_API_OPS_H_

#ifndef DEVICEKIT_DEVICE_API_H_
#error "include <devicekit/device_api.h>; device_api_ops.h is a part of it"
#endif

/* The newest minor the op spec names. device_api.h refuses a DK_API_MINOR
 * older than it: ops of a minor ship with the version that has them. */
#define DK_OPS_API_MINOR 5

/* The base operators. Append-only: a new op takes the next value, in a new
 * minor, and adds a DK_OP_COUNT_<major>_<minor>. Per op: inputs -> outputs,
 * the attribute struct (NULL when none), dtypes a kernel may declare, and
 * the semantics every backend must reproduce. */
typedef enum DK_OpId {
  /* copy(x) -> out; no attrs; since 1.0. out = x elementwise, same shape and
   * dtype. The SDK's materialiser: accepts strided and broadcast (stride 0)
   * inputs and strided outputs that write no element twice, whatever its
   * capability bits. */
  DK_OP_COPY = 0,
  /* fill() -> out; attrs DK_FillAttrs; since 1.0. every element of out =
   * value, converted to out's dtype by the rules of cast. */
  DK_OP_FILL = 1,
  /* cast(x) -> out; no attrs; since 1.0. out = x converted to out's dtype.
   * Float to float rounds to nearest even, NaN stays NaN, overflow gives Inf;
   * float to integer truncates toward zero (NaN and out-of-range values are
   * unspecified); anything to bool is x != 0. Declared dtypes are the input's;
   * any output dtype the device stores is accepted. */
  DK_OP_CAST = 2,
  /* add(a, b) -> out; no attrs; since 1.0. out = a + b. Integer overflow
   * wraps; bool add is logical or. */
  DK_OP_ADD = 3,
  /* neg(x) -> out; no attrs; since 1.1. out = -x; integers wrap (-INT_MIN =
   * INT_MIN). */
  DK_OP_NEG = 4,
  /* abs(x) -> out; no attrs; since 1.1. out = |x|; abs(-0.0) = +0.0; integers
   * wrap (abs(INT_MIN) = INT_MIN). */
  DK_OP_ABS = 5,
  /* exp(x) -> out; no attrs; since 1.1. out = e^x; exp(-inf) = +0, exp(+inf) =
   * +inf. */
  DK_OP_EXP = 6,
  /* log(x) -> out; no attrs; since 1.1. out = ln x; log(0) = -inf, log(x<0) =
   * NaN. */
  DK_OP_LOG = 7,
  /* sqrt(x) -> out; no attrs; since 1.1. out = sqrt(x); sqrt(-0.0) = -0.0,
   * sqrt(x<0) = NaN. */
  DK_OP_SQRT = 8,
  /* rsqrt(x) -> out; no attrs; since 1.1. out = 1/sqrt(x); rsqrt(+0) = +inf,
   * rsqrt(x<0) = NaN. */
  DK_OP_RSQRT = 9,
  /* reciprocal(x) -> out; no attrs; since 1.1. out = 1/x; reciprocal(+-0) =
   * +-inf. */
  DK_OP_RECIPROCAL = 10,
  /* sin(x) -> out; no attrs; since 1.1. out = sin(x). */
  DK_OP_SIN = 11,
  /* cos(x) -> out; no attrs; since 1.1. out = cos(x). */
  DK_OP_COS = 12,
  /* tanh(x) -> out; no attrs; since 1.1. out = tanh(x); saturates to +-1
   * without NaN for large |x|. */
  DK_OP_TANH = 13,
  /* erf(x) -> out; no attrs; since 1.1. out = erf(x). */
  DK_OP_ERF = 14,
  /* floor(x) -> out; no attrs; since 1.1. out = largest integer value <= x
   * (floating); integers unchanged. */
  DK_OP_FLOOR = 15,
  /* sign(x) -> out; no attrs; since 1.1. out = -1, 0 or +1 (as x's dtype);
   * sign(NaN) = NaN; sign(+-0.0) = +0.0. */
  DK_OP_SIGN = 16,
  /* sub(a, b) -> out; no attrs; since 1.1. out = a - b; integers wrap. */
  DK_OP_SUB = 17,
  /* mul(a, b) -> out; no attrs; since 1.1. out = a * b; integers wrap; bool
   * mul is logical and. */
  DK_OP_MUL = 18,
  /* div(a, b) -> out; no attrs; since 1.1. out = a / b (true division,
   * floating only; x/0 = +-inf, 0/0 = NaN). */
  DK_OP_DIV = 19,
  /* pow(a, b) -> out; no attrs; since 1.1. out = a ** b (C pow semantics:
   * pow(x, 0) = 1 even for NaN x). */
  DK_OP_POW = 20,
  /* maximum(a, b) -> out; no attrs; since 1.1. out = max(a, b); NaN if either
   * is NaN; -0.0 < +0.0 (IEEE 754-2019 maximum). */
  DK_OP_MAXIMUM = 21,
  /* minimum(a, b) -> out; no attrs; since 1.1. out = min(a, b); NaN if either
   * is NaN; -0.0 < +0.0 (IEEE 754-2019 minimum). */
  DK_OP_MINIMUM = 22,
  /* eq(a, b) -> out; no attrs; since 1.1. out = a == b (NaN != NaN; -0.0 ==
   * +0.0); out is bool, inputs share a dtype. */
  DK_OP_EQ = 23,
  /* ne(a, b) -> out; no attrs; since 1.1. out = a != b; out is bool, inputs
   * share a dtype. */
  DK_OP_NE = 24,
  /* lt(a, b) -> out; no attrs; since 1.1. out = a < b; out is bool, inputs
   * share a dtype. */
  DK_OP_LT = 25,
  /* le(a, b) -> out; no attrs; since 1.1. out = a <= b; out is bool, inputs
   * share a dtype. */
  DK_OP_LE = 26,
  /* logical_and(a, b) -> out; no attrs; since 1.1. out = a && b on bool
   * inputs; out is bool. */
  DK_OP_LOGICAL_AND = 27,
  /* logical_or(a, b) -> out; no attrs; since 1.1. out = a || b on bool inputs;
   * out is bool. */
  DK_OP_LOGICAL_OR = 28,
  /* logical_xor(a, b) -> out; no attrs; since 1.1. out = a != b on bool
   * inputs; out is bool. */
  DK_OP_LOGICAL_XOR = 29,
  /* logical_not(x) -> out; no attrs; since 1.1. out = !x on bool input; out is
   * bool. */
  DK_OP_LOGICAL_NOT = 30,
  /* where(cond, a, b) -> out; no attrs; since 1.1. out = cond ? a : b; cond is
   * bool, a/b/out share a dtype (the declared one). */
  DK_OP_WHERE = 31,
  /* reduce_sum(x) -> out; attrs DK_ReduceAttrs; since 1.1. out = sum of x over
   * the dimensions in axes; out has x's rank with those dimensions of size 1.
   * float16/bfloat16 accumulate in float32; integers wrap; bool sums are not
   * allowed. An empty reduction gives 0. */
  DK_OP_REDUCE_SUM = 32,
  /* reduce_max(x) -> out; attrs DK_ReduceAttrs; since 1.1. out = maximum over
   * axes (NaN if any element is NaN); shape as reduce_sum. Empty reductions
   * are rejected by the SDK. */
  DK_OP_REDUCE_MAX = 33,
  /* reduce_min(x) -> out; attrs DK_ReduceAttrs; since 1.1. out = minimum over
   * axes (NaN if any element is NaN); shape as reduce_sum. Empty reductions
   * are rejected by the SDK. */
  DK_OP_REDUCE_MIN = 34,
  /* argmax(x) -> out; attrs DK_AxisAttrs; since 1.1. out (int64) = index along
   * axis of the maximum; the first index on ties; a NaN counts as the maximum
   * (first NaN wins). out has x's rank with axis of size 1. An empty axis is
   * rejected by the SDK. */
  DK_OP_ARGMAX = 35,
  /* cumsum(x) -> out; attrs DK_AxisAttrs; since 1.1. out[..., i, ...] = sum of
   * x[..., 0..i, ...] along axis (float16/bfloat16 accumulate in float32). */
  DK_OP_CUMSUM = 36,
  /* iota() -> out; attrs DK_IotaAttrs; since 1.1. out[i0, ..., ik] = start +
   * i_axis * step, converted to out's dtype by the rules of cast. */
  DK_OP_IOTA = 37,
  /* gather(x, index) -> out; attrs DK_AxisAttrs; since 1.1. out[i][j][k] =
   * x[index[i][j][k]][j][k] for axis 0 (torch.gather). index is int64 with
   * out's shape; every index in [0, x.shape[axis]) (the SDK checks nothing on
   * device: an out-of-range index is an error the kernel reports). */
  DK_OP_GATHER = 38,
  /* scatter_add(x, index, src) -> out; attrs DK_AxisAttrs; since 1.1. out = x,
   * then out[index[i][j][k]][j][k] += src[i][j][k] for axis 0
   * (torch.scatter_add); index is int64 with src's shape. Floating results may
   * depend on summation order within the tolerance. */
  DK_OP_SCATTER_ADD = 39,
  /* matmul(a, b) -> out; no attrs; since 1.1. batched matrix product: a [B...,
   * M, K] @ b [B..., K, N] -> out [B..., M, N] with equal batch dims;
   * accumulates in float32 for float16/bfloat16 (float64 for float64);
   * integers wrap. */
  DK_OP_MATMUL = 40,
  /* random_bits() -> out; attrs DK_RandomAttrs; since 1.1. Philox4x32-10.
   * Element n (row-major index in out) is word n % 4 of Philox(counter =
   * {lo32(c), hi32(c), 0, 0}, key = {lo32(seed), hi32(seed)}) with c = offset
   * + n / 4, reinterpreted as int32. Every backend yields identical bits. */
  DK_OP_RANDOM_BITS = 41,
  /* random_uniform() -> out; attrs DK_RandomAttrs; since 1.1. u = (w >> (32 -
   * p)) * 2^-p with w the uint32 word random_bits gives element n and p the
   * significand width of out's dtype (24 for float32 and float64, 11 for
   * float16, 8 for bfloat16): exact, and always in [0, 1). */
  DK_OP_RANDOM_UNIFORM = 42,
  DK_OP_COUNT_1_0 = 4, /* number of ops in device API 1.0 */
  DK_OP_COUNT_1_1 = 43 /* number of ops in device API 1.1 */
} DK_OpId;

/* X-macro over every base op, in DK_OpId order: X(ID_SUFFIX, name). */
#define DK_BASE_OPS(X) \
  X(COPY, copy) \
  X(FILL, fill) \
  X(CAST, cast) \
  X(ADD, add) \
  X(NEG, neg) \
  X(ABS, abs) \
  X(EXP, exp) \
  X(LOG, log) \
  X(SQRT, sqrt) \
  X(RSQRT, rsqrt) \
  X(RECIPROCAL, reciprocal) \
  X(SIN, sin) \
  X(COS, cos) \
  X(TANH, tanh) \
  X(ERF, erf) \
  X(FLOOR, floor) \
  X(SIGN, sign) \
  X(SUB, sub) \
  X(MUL, mul) \
  X(DIV, div) \
  X(POW, pow) \
  X(MAXIMUM, maximum) \
  X(MINIMUM, minimum) \
  X(EQ, eq) \
  X(NE, ne) \
  X(LT, lt) \
  X(LE, le) \
  X(LOGICAL_AND, logical_and) \
  X(LOGICAL_OR, logical_or) \
  X(LOGICAL_XOR, logical_xor) \
  X(LOGICAL_NOT, logical_not) \
  X(WHERE, where) \
  X(REDUCE_SUM, reduce_sum) \
  X(REDUCE_MAX, reduce_max) \
  X(REDUCE_MIN, reduce_min) \
  X(ARGMAX, argmax) \
  X(CUMSUM, cumsum) \
  X(IOTA, iota) \
  X(GATHER, gather) \
  X(SCATTER_ADD, scatter_add) \
  X(MATMUL, matmul) \
  X(RANDOM_BITS, random_bits) \
  X(RANDOM_UNIFORM, random_uniform)

/* The number of base ops this header knows: the count of the newest minor
 * that added any (1.1). Code that means "every op" uses this, never a
 * per-minor count spelled out by hand. */
#define DK_OP_COUNT DK_OP_COUNT_1_1

/* The dtypes the spec allows each base op's kernel to declare
 * (DK_KernelTable.dtypes; of input 0, or of the output for ops without inputs).
 * A plugin declares these, or a subset where it deliberately supports less. */
#define DK_OP_DTYPES_COPY (DK_DTYPE_MASK_ALL_1_0)
#define DK_OP_DTYPES_FILL (DK_DTYPE_MASK_ALL_1_0)
#define DK_OP_DTYPES_CAST (DK_DTYPE_MASK_ALL_1_0)
#define DK_OP_DTYPES_ADD (DK_DTYPE_MASK_ALL_1_0)
#define DK_OP_DTYPES_NEG (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64) | DK_DTYPE_BIT(DK_DTYPE_INT8) | DK_DTYPE_BIT(DK_DTYPE_INT32) | DK_DTYPE_BIT(DK_DTYPE_INT64) | DK_DTYPE_BIT(DK_DTYPE_UINT8))
#define DK_OP_DTYPES_ABS (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64) | DK_DTYPE_BIT(DK_DTYPE_INT8) | DK_DTYPE_BIT(DK_DTYPE_INT32) | DK_DTYPE_BIT(DK_DTYPE_INT64) | DK_DTYPE_BIT(DK_DTYPE_UINT8))
#define DK_OP_DTYPES_EXP (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64))
#define DK_OP_DTYPES_LOG (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64))
#define DK_OP_DTYPES_SQRT (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64))
#define DK_OP_DTYPES_RSQRT (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64))
#define DK_OP_DTYPES_RECIPROCAL (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64))
#define DK_OP_DTYPES_SIN (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64))
#define DK_OP_DTYPES_COS (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64))
#define DK_OP_DTYPES_TANH (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64))
#define DK_OP_DTYPES_ERF (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64))
#define DK_OP_DTYPES_FLOOR (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64) | DK_DTYPE_BIT(DK_DTYPE_INT8) | DK_DTYPE_BIT(DK_DTYPE_INT32) | DK_DTYPE_BIT(DK_DTYPE_INT64) | DK_DTYPE_BIT(DK_DTYPE_UINT8))
#define DK_OP_DTYPES_SIGN (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64) | DK_DTYPE_BIT(DK_DTYPE_INT8) | DK_DTYPE_BIT(DK_DTYPE_INT32) | DK_DTYPE_BIT(DK_DTYPE_INT64) | DK_DTYPE_BIT(DK_DTYPE_UINT8))
#define DK_OP_DTYPES_SUB (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64) | DK_DTYPE_BIT(DK_DTYPE_INT8) | DK_DTYPE_BIT(DK_DTYPE_INT32) | DK_DTYPE_BIT(DK_DTYPE_INT64) | DK_DTYPE_BIT(DK_DTYPE_UINT8))
#define DK_OP_DTYPES_MUL (DK_DTYPE_MASK_ALL_1_0)
#define DK_OP_DTYPES_DIV (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64))
#define DK_OP_DTYPES_POW (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64))
#define DK_OP_DTYPES_MAXIMUM (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64) | DK_DTYPE_BIT(DK_DTYPE_INT8) | DK_DTYPE_BIT(DK_DTYPE_INT32) | DK_DTYPE_BIT(DK_DTYPE_INT64) | DK_DTYPE_BIT(DK_DTYPE_UINT8))
#define DK_OP_DTYPES_MINIMUM (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64) | DK_DTYPE_BIT(DK_DTYPE_INT8) | DK_DTYPE_BIT(DK_DTYPE_INT32) | DK_DTYPE_BIT(DK_DTYPE_INT64) | DK_DTYPE_BIT(DK_DTYPE_UINT8))
#define DK_OP_DTYPES_EQ (DK_DTYPE_MASK_ALL_1_0)
#define DK_OP_DTYPES_NE (DK_DTYPE_MASK_ALL_1_0)
#define DK_OP_DTYPES_LT (DK_DTYPE_MASK_ALL_1_0)
#define DK_OP_DTYPES_LE (DK_DTYPE_MASK_ALL_1_0)
#define DK_OP_DTYPES_LOGICAL_AND (DK_DTYPE_BIT(DK_DTYPE_BOOL))
#define DK_OP_DTYPES_LOGICAL_OR (DK_DTYPE_BIT(DK_DTYPE_BOOL))
#define DK_OP_DTYPES_LOGICAL_XOR (DK_DTYPE_BIT(DK_DTYPE_BOOL))
#define DK_OP_DTYPES_LOGICAL_NOT (DK_DTYPE_BIT(DK_DTYPE_BOOL))
#define DK_OP_DTYPES_WHERE (DK_DTYPE_MASK_ALL_1_0)
#define DK_OP_DTYPES_REDUCE_SUM (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64) | DK_DTYPE_BIT(DK_DTYPE_INT8) | DK_DTYPE_BIT(DK_DTYPE_INT32) | DK_DTYPE_BIT(DK_DTYPE_INT64) | DK_DTYPE_BIT(DK_DTYPE_UINT8))
#define DK_OP_DTYPES_REDUCE_MAX (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64) | DK_DTYPE_BIT(DK_DTYPE_INT8) | DK_DTYPE_BIT(DK_DTYPE_INT32) | DK_DTYPE_BIT(DK_DTYPE_INT64) | DK_DTYPE_BIT(DK_DTYPE_UINT8))
#define DK_OP_DTYPES_REDUCE_MIN (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64) | DK_DTYPE_BIT(DK_DTYPE_INT8) | DK_DTYPE_BIT(DK_DTYPE_INT32) | DK_DTYPE_BIT(DK_DTYPE_INT64) | DK_DTYPE_BIT(DK_DTYPE_UINT8))
#define DK_OP_DTYPES_ARGMAX (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64) | DK_DTYPE_BIT(DK_DTYPE_INT8) | DK_DTYPE_BIT(DK_DTYPE_INT32) | DK_DTYPE_BIT(DK_DTYPE_INT64) | DK_DTYPE_BIT(DK_DTYPE_UINT8))
#define DK_OP_DTYPES_CUMSUM (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64) | DK_DTYPE_BIT(DK_DTYPE_INT8) | DK_DTYPE_BIT(DK_DTYPE_INT32) | DK_DTYPE_BIT(DK_DTYPE_INT64) | DK_DTYPE_BIT(DK_DTYPE_UINT8))
#define DK_OP_DTYPES_IOTA (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64) | DK_DTYPE_BIT(DK_DTYPE_INT8) | DK_DTYPE_BIT(DK_DTYPE_INT32) | DK_DTYPE_BIT(DK_DTYPE_INT64) | DK_DTYPE_BIT(DK_DTYPE_UINT8))
#define DK_OP_DTYPES_GATHER (DK_DTYPE_MASK_ALL_1_0)
#define DK_OP_DTYPES_SCATTER_ADD (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64) | DK_DTYPE_BIT(DK_DTYPE_INT8) | DK_DTYPE_BIT(DK_DTYPE_INT32) | DK_DTYPE_BIT(DK_DTYPE_INT64) | DK_DTYPE_BIT(DK_DTYPE_UINT8))
#define DK_OP_DTYPES_MATMUL (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64) | DK_DTYPE_BIT(DK_DTYPE_INT8) | DK_DTYPE_BIT(DK_DTYPE_INT32) | DK_DTYPE_BIT(DK_DTYPE_INT64) | DK_DTYPE_BIT(DK_DTYPE_UINT8))
#define DK_OP_DTYPES_RANDOM_BITS (DK_DTYPE_BIT(DK_DTYPE_INT32))
#define DK_OP_DTYPES_RANDOM_UNIFORM (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) | DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64))

/* The composite ops a plugin may register fused kernels for (DK_FusedKernel.op;
 * see "Fused kernels" below). Append-only, like DK_OpId. Per op: inputs
 * (a trailing ? marks an optional input: when absent, its entry in
 * DK_Kernel_Args.inputs is NULL) -> outputs, the attribute struct, and the
 * semantics a fused kernel must reproduce: the SDK's decomposition into base
 * ops is the definition, and conformance checks the kernel against it. */
typedef enum DK_FusedOpId {
  /* rms_norm(x, weight?) -> out; attrs DK_NormAttrs; since 1.2. out = x *
   * rsqrt(mean(x^2 over the last dim) + eps) * weight. weight, when present,
   * has shape [x.shape[-1]]. out has x's shape and dtype; accumulate in
   * float32 or wider. */
  DK_FUSED_RMS_NORM = 0,
  /* layer_norm(x, weight?, bias?) -> out; attrs DK_NormAttrs; since 1.2. out =
   * (x - mean) * rsqrt(var + eps) * weight + bias over the last dim, var the
   * biased variance computed in two passes (or Welford). weight and bias, when
   * present, have shape [x.shape[-1]]. out has x's shape and dtype; accumulate
   * in float32 or wider. */
  DK_FUSED_LAYER_NORM = 1,
  /* softmax(x) -> out; attrs DK_SoftmaxAttrs; since 1.2. out = exp(x - max) /
   * sum(exp(x - max)) along axis (max-subtracted). out has x's shape and
   * dtype. */
  DK_FUSED_SOFTMAX = 2,
  /* scaled_dot_product_attention(q, k, v, mask?) -> out; attrs DK_SdpaAttrs;
   * since 1.2. q [B,Hq,Lq,D], k [B,Hkv,Lk,D], v [B,Hkv,Lk,Dv] -> out
   * [B,Hq,Lq,Dv] in q's dtype; Hq is a multiple of Hkv and query head h reads
   * kv head h / (Hq/Hkv). s = (q*scale) k^T; a bool mask (true = attend)
   * excludes keys, an additive float mask is added to s; the SDK always passes
   * the mask as a [B,Hq,Lq,Lk] view, broadcast dims with stride 0. is_causal
   * excludes key j from query i when j > i. out = softmax(s) v over the
   * visible keys, max-subtracted, accumulated in float32 or wider. A query row
   * with no visible key gives 0 (not NaN). Masked-out keys get weight 0: a
   * kernel need not read keys that are masked for every query it computes
   * together (e.g. tiles in the causal future), but a kernel that multiplies a
   * weight of 0 by v may let a NaN or inf in v at a masked-out key reach the
   * output, as the decomposition (p @ v) does. */
  DK_FUSED_SCALED_DOT_PRODUCT_ATTENTION = 3,
  /* rms_norm_backward(dout, x, weight?) -> dx, dweight?; attrs DK_NormAttrs;
   * since 1.3. The gradients of rms_norm(x, weight, eps) given dout (out's
   * shape and dtype). With r = rsqrt(mean(x^2) + eps) per row (over the last
   * dim) and g = dout * weight (dout when weight is absent): dx = r * (g - x *
   * r^2 * mean(g * x)) in x's shape and dtype; dweight = the sum over all rows
   * of dout * x * r, shape [x.shape[-1]], in weight's dtype. Accumulate in
   * float32 or wider. Outputs marked ? are optional: the SDK passes NULL for a
   * gradient it does not want (the forward input is absent or needs no
   * gradient), and the kernel must not write it. dout is dense; every output
   * is dense, allocated by the SDK, never aliasing an input. */
  DK_FUSED_RMS_NORM_BACKWARD = 4,
  /* layer_norm_backward(dout, x, weight?) -> dx, dweight?, dbias?; attrs
   * DK_NormAttrs; since 1.3. The gradients of layer_norm(x, weight, bias, eps)
   * given dout (out's shape and dtype); bias does not enter them. With xhat =
   * (x - mean) * rsqrt(var + eps) per row (over the last dim, var biased, as
   * the forward), rstd = rsqrt(var + eps) and g = dout * weight (dout when
   * weight is absent): dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) in
   * x's shape and dtype; dweight = the sum over all rows of dout * xhat, shape
   * [x.shape[-1]], in weight's dtype; dbias = the sum over all rows of dout,
   * shape [x.shape[-1]], in dout's dtype. Accumulate in float32 or wider.
   * Outputs marked ? are optional: the SDK passes NULL for a gradient it does
   * not want (the forward input is absent or needs no gradient), and the
   * kernel must not write it. dout is dense; every output is dense, allocated
   * by the SDK, never aliasing an input. */
  DK_FUSED_LAYER_NORM_BACKWARD = 5,
  /* softmax_backward(dout, out) -> dx; attrs DK_SoftmaxAttrs; since 1.3. The
   * gradient of softmax(x, axis) given dout and the forward's out (same shape
   * and dtype): dx = out * (dout - sum(dout * out along axis)), in out's shape
   * and dtype. Accumulate in float32 or wider. dout and out are dense; dx is
   * dense, allocated by the SDK, never aliasing an input. */
  DK_FUSED_SOFTMAX_BACKWARD = 6,
  /* scaled_dot_product_attention_backward(dout, q, k, v, out, mask?) -> dq,
   * dk, dv; attrs DK_SdpaAttrs; since 1.3. The gradients of
   * scaled_dot_product_attention(q, k, v, mask, scale, is_causal) given dout
   * and the forward's out (both [B,Hq,Lq,Dv], q's dtype); shapes and the mask
   * (as the forward: a [B,Hq,Lq,Lk] view, never differentiated) as the
   * forward. With p = the forward's softmax weights per query row (visible
   * keys only, recomputed from q, k and the mask) and D_i = dout_i . out_i:
   * dv_j = sum over the query rows i (of every query head reading that kv
   * head) of p_ij dout_i; ds_ij = p_ij (dout_i . v_j - D_i); dq_i = scale *
   * sum_j ds_ij k_j; dk_j = scale * sum_i ds_ij q_i. dq, dk, dv have q's, k's
   * and v's shapes, in q's dtype; a query row with no visible key contributes
   * nothing. Accumulate in float32 or wider. dq, dk and dv are dense,
   * allocated by the SDK, never aliasing an input. */
  DK_FUSED_SCALED_DOT_PRODUCT_ATTENTION_BACKWARD = 7,
  /* gelu(x) -> out; attrs DK_GeluAttrs; since 1.4. out = x * Phi(x): with
   * approximate 0, Phi(x) = 0.5 * (1 + erf(x / sqrt(2))); with approximate 1,
   * out = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))). out has x's
   * shape and dtype. */
  DK_FUSED_GELU = 8,
  /* gelu_backward(dout, x) -> dx; attrs DK_GeluAttrs; since 1.4. The gradient
   * of gelu(x, approximate) given dout (x's shape and dtype): dx = dout *
   * gelu'(x), with gelu'(x) = Phi(x) + x * exp(-x^2 / 2) / sqrt(2 pi) for
   * approximate 0, and, for approximate 1, with u = sqrt(2/pi) * (x + 0.044715
   * * x^3) and t = tanh(u), gelu'(x) = 0.5 * (1 + t) + 0.5 * x * (1 - t^2) *
   * sqrt(2/pi) * (1 + 3 * 0.044715 * x^2). dx is in x's shape and dtype. dout
   * and x are dense; dx is dense, allocated by the SDK, never aliasing an
   * input. */
  DK_FUSED_GELU_BACKWARD = 9,
  DK_FUSED_OP_COUNT_1_2 = 4, /* number of fused ops in device API 1.2 */
  DK_FUSED_OP_COUNT_1_3 = 8, /* number of fused ops in device API 1.3 */
  DK_FUSED_OP_COUNT_1_4 = 10 /* number of fused ops in device API 1.4 */
} DK_FusedOpId;

/* X-macro over every fused op, in DK_FusedOpId order: X(ID_SUFFIX, name). */
#define DK_FUSED_OPS(X) \
  X(RMS_NORM, rms_norm) \
  X(LAYER_NORM, layer_norm) \
  X(SOFTMAX, softmax) \
  X(SCALED_DOT_PRODUCT_ATTENTION, scaled_dot_product_attention) \
  X(RMS_NORM_BACKWARD, rms_norm_backward) \
  X(LAYER_NORM_BACKWARD, layer_norm_backward) \
  X(SOFTMAX_BACKWARD, softmax_backward) \
  X(SCALED_DOT_PRODUCT_ATTENTION_BACKWARD, scaled_dot_product_attention_backward) \
  X(GELU, gelu) \
  X(GELU_BACKWARD, gelu_backward)

/* The number of fused ops this header knows: the count of the newest minor
 * that added any (1.4). Code that means "every op" uses this, never a
 * per-minor count spelled out by hand. */
#define DK_FUSED_OP_COUNT DK_FUSED_OP_COUNT_1_4

/* The collectives of the collectives part (DK_Coll_Run_Args.collective; bit i
 * of DK_Collectives.collectives). Append-only, like DK_OpId. Per collective:
 * the send and recv buffer lengths in elements (in terms of the call's count
 * and the communicator's nranks; - : not used), whether it takes a reduce op,
 * a root or a peer, and its semantics. spec/collectives.json is the source. */
typedef enum DK_CollectiveId {
  /* all_reduce: send count, recv count; takes reduce; since 1.5. recv[i] = op
   * over ranks r = 0 .. nranks-1 (in that order) of send_r[i], on every rank. */
  DK_COLL_ALL_REDUCE = 0,
  /* broadcast: send count, recv count; takes root; since 1.5. recv[i] =
   * send_root[i] on every rank; send is read on the root only (other ranks may
   * pass NULL). */
  DK_COLL_BROADCAST = 1,
  /* reduce: send count, recv count; takes reduce, root; since 1.5. recv[i] =
   * op over ranks r = 0 .. nranks-1 of send_r[i], written on the root only;
   * recv is not touched (and may be NULL) on other ranks. */
  DK_COLL_REDUCE = 2,
  /* all_gather: send count, recv nranks*count; since 1.5. recv[r * count + i]
   * = send_r[i] on every rank. In place when send == recv + rank * count. */
  DK_COLL_ALL_GATHER = 3,
  /* reduce_scatter: send nranks*count, recv count; takes reduce; since 1.5.
   * recv[i] on rank k = op over ranks r = 0 .. nranks-1 of send_r[k * count +
   * i]. In place when recv == send + rank * count. */
  DK_COLL_REDUCE_SCATTER = 4,
  /* all_to_all: send nranks*count, recv nranks*count; since 1.5. recv[r *
   * count + i] on rank k = send_r[k * count + i]. In place (send == recv) is
   * allowed. */
  DK_COLL_ALL_TO_ALL = 5,
  /* send: send count, recv -; takes peer; since 1.5. Sends count elements of
   * send to rank peer, which posts a matching recv of the same count and
   * dtype. Matched in call order per (sender, receiver) pair; inside a group a
   * send and its recv may be posted in either order on the two ranks. */
  DK_COLL_SEND = 6,
  /* recv: send -, recv count; takes peer; since 1.5. Receives count elements
   * from rank peer into recv (see send). */
  DK_COLL_RECV = 7,
  DK_COLLECTIVE_COUNT_1_5 = 8 /* number of collectives in device API 1.5 */
} DK_CollectiveId;

/* Reduce ops (DK_Coll_Run_Args.op; bit i of DK_Collectives.reduce_ops). */
typedef enum DK_CollReduceOp {
  DK_COLL_OP_SUM = 0, /* since 1.5 */
  DK_COLL_OP_PROD = 1, /* since 1.5 */
  DK_COLL_OP_MAX = 2, /* since 1.5 */
  DK_COLL_OP_MIN = 3, /* since 1.5 */
  DK_COLL_OP_AVG = 4, /* since 1.5 */
  DK_COLL_OP_COUNT_1_5 = 5 /* number of reduce ops in device API 1.5 */
} DK_CollReduceOp;

/* X-macro over every collective, in DK_CollectiveId order: X(ID_SUFFIX, name). */
#define DK_COLLECTIVES(X) \
  X(ALL_REDUCE, all_reduce) \
  X(BROADCAST, broadcast) \
  X(REDUCE, reduce) \
  X(ALL_GATHER, all_gather) \
  X(REDUCE_SCATTER, reduce_scatter) \
  X(ALL_TO_ALL, all_to_all) \
  X(SEND, send) \
  X(RECV, recv)

/* The size DK_Api had at each minor of this major (rule 4 of "Versioning" in
 * device_api.h), named by the last field of that minor so the value never
 * moves when fields are appended. Macros, expanded where they are used, after
 * device_api.h has declared DK_Api. */
#define DK_Api_STRUCT_SIZE_1_0 DK_STRUCT_SIZE(DK_Api, kernels)
#define DK_Api_STRUCT_SIZE_1_1 DK_STRUCT_SIZE(DK_Api, kernels)
#define DK_Api_STRUCT_SIZE_1_2 DK_STRUCT_SIZE(DK_Api, fused_kernels)
#define DK_Api_STRUCT_SIZE_1_3 DK_STRUCT_SIZE(DK_Api, fused_kernels)
#define DK_Api_STRUCT_SIZE_1_4 DK_STRUCT_SIZE(DK_Api, fused_kernels)
#define DK_Api_STRUCT_SIZE_1_5 DK_STRUCT_SIZE(DK_Api, fused_kernels)
/* The newest of them: device_api.h checks it is DK_Api's whole size, so a
 * field appended to DK_Api needs the version entry that ends at it. */
#define DK_Api_STRUCT_SIZE_LATEST DK_Api_STRUCT_SIZE_1_5

/* Attributes of fill (since 1.0). */
typedef struct DK_FillAttrs {
  size_t struct_size;
  DK_Scalar value; /* the value to store */
} DK_FillAttrs;
DK_DEFINE_STRUCT_SIZE(DK_FillAttrs, value);

/* Attributes of reduce_sum, reduce_max, reduce_min (since 1.1). */
typedef struct DK_ReduceAttrs {
  size_t struct_size;
  uint32_t axes; /* bit d set: dimension d is reduced (kept with size 1 in out); never 0 */
} DK_ReduceAttrs;
DK_DEFINE_STRUCT_SIZE(DK_ReduceAttrs, axes);

/* Attributes of argmax, cumsum, gather, scatter_add (since 1.1). */
typedef struct DK_AxisAttrs {
  size_t struct_size;
  int32_t axis; /* dimension, 0 <= axis < rank */
} DK_AxisAttrs;
DK_DEFINE_STRUCT_SIZE(DK_AxisAttrs, axis);

/* Attributes of iota (since 1.1). */
typedef struct DK_IotaAttrs {
  size_t struct_size;
  int32_t axis; /* dimension, 0 <= axis < rank */
  DK_Scalar start; /* first value */
  DK_Scalar step; /* increment */
} DK_IotaAttrs;
DK_DEFINE_STRUCT_SIZE(DK_IotaAttrs, step);

/* Attributes of random_bits, random_uniform (since 1.1). */
typedef struct DK_RandomAttrs {
  size_t struct_size;
  uint64_t seed; /* Philox key: k0 = low 32 bits, k1 = high 32 bits */
  uint64_t offset; /* counter of element 0, in 4-word blocks */
} DK_RandomAttrs;
DK_DEFINE_STRUCT_SIZE(DK_RandomAttrs, offset);

/* Attributes of rms_norm, layer_norm, rms_norm_backward, layer_norm_backward (since 1.2). */
typedef struct DK_NormAttrs {
  size_t struct_size;
  double eps; /* added to the variance (mean square for rms_norm) before the reciprocal square root */
} DK_NormAttrs;
DK_DEFINE_STRUCT_SIZE(DK_NormAttrs, eps);

/* Attributes of softmax, softmax_backward (since 1.2). */
typedef struct DK_SoftmaxAttrs {
  size_t struct_size;
  int32_t axis; /* dimension, 0 <= axis < rank */
} DK_SoftmaxAttrs;
DK_DEFINE_STRUCT_SIZE(DK_SoftmaxAttrs, axis);

/* Attributes of scaled_dot_product_attention, scaled_dot_product_attention_backward (since 1.2). */
typedef struct DK_SdpaAttrs {
  size_t struct_size;
  double scale; /* multiplies q before QK^T */
  int32_t is_causal; /* 1: key j is visible to query i only when j <= i (top-left aligned); else 0 */
  int32_t mask_kind; /* a DK_SdpaMaskKind saying what the mask input is (input 3 of scaled_dot_product_attention, input 5 of its backward); DK_SDPA_MASK_NONE exactly when it is absent */
} DK_SdpaAttrs;
DK_DEFINE_STRUCT_SIZE(DK_SdpaAttrs, mask_kind);

/* Attributes of gelu, gelu_backward (since 1.4). */
typedef struct DK_GeluAttrs {
  size_t struct_size;
  int32_t approximate; /* 1: the tanh approximation; 0: the exact form with erf */
} DK_GeluAttrs;
DK_DEFINE_STRUCT_SIZE(DK_GeluAttrs, approximate);

#endif /* DEVICEKIT_DEVICE_API_OPS_H_ */
