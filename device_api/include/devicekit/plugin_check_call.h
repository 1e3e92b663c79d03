/* DeviceKit plugin helpers: dkh_check_call, every argument rule of a kernel
 * call at once, over the generated op signatures of plugin_helpers_ops.h.
 *
 * A part of <devicekit/plugin_helpers.h>, which includes it (inside its
 * extern "C" block, after the versioning notes and DKH_PRINTF); never include
 * it alone. Same rules as the whole: header-only C99, every function
 * `static inline`, nothing crosses the plugin boundary, every function
 * thread-safe. */
#ifndef DEVICEKIT_PLUGIN_CHECK_CALL_H_
#define DEVICEKIT_PLUGIN_CHECK_CALL_H_

#ifndef DEVICEKIT_PLUGIN_HELPERS_H_
#error "include <devicekit/plugin_helpers.h>; plugin_check_call.h is a part of it"
#endif

/* ========================================================================== */
/*  Kernel calls: every argument rule at once (appended within 1.4)           */
/* ========================================================================== */
/*
 * dkh_check_call checks one kernel call against everything the header says
 * about it (spec/arg_rules.json lists those rules; the ones marked "helper"
 * are checked here) and against what the kernel table declares for the op:
 *   - DK_Kernel_Args: struct_size, op, the op's number of inputs and outputs;
 *   - every view: struct_size, a dtype the header defines, rank 0..DK_MAX_RANK
 *     with its arrays, sizes and strides >= 0, data not NULL unless empty;
 *     dense row-major unless the op declared DK_KERNEL_CAP_STRIDED (inputs
 *     only; copy takes and writes any strides but never writes an element
 *     twice);
 *   - dtypes: the declared dtypes shared by the inputs that carry them, fixed
 *     ones (where's cond is bool, an index is int64), the output's;
 *   - shapes: the op's shape rule (plugin_helpers_ops.h), broadcasting only
 *     with DK_KERNEL_CAP_BROADCAST (copy's broadcast inputs are stride-0 views);
 *   - memory: no output overlaps an input, except out[0] aliasing in[0]
 *     exactly with DK_KERNEL_CAP_INPLACE;
 *   - attributes: present, struct_size, axis and axes in range, DK_Scalar
 *     values well formed.
 * Not here, because a view does not carry them: whether the views lie inside
 * the plugin's allocations, and index values (out of range is an error the
 * kernel reports while it runs). A plugin's device and stream checks are its
 * own. Returns NULL or DK_ERROR_INVALID_ARGUMENT naming the call, the
 * operand, the expected and the found. */
#define DKH_HAS_CHECK_CALL 1

#include "plugin_helpers_ops.h"

/* "[5,7,3]" into buf (cut to n bytes). */
static inline const char* dkh_dims(const DK_TensorView* v, char* buf, size_t n) {
  size_t used = (size_t)snprintf(buf, n, "[");
  for (int32_t d = 0; d < v->rank && used < n; ++d)
    used += (size_t)snprintf(buf + used, n - used, "%s%lld", d ? "," : "", (long long)v->shape[d]);
  if (used < n) snprintf(buf + used, n - used, "]");
  return buf;
}

/* The byte range [*begin, *end) a checked view's elements occupy (empty: none). */
static inline void dkh_span(const DK_TensorView* v, uintptr_t* begin, uintptr_t* end) {
  uint64_t last = 0;
  *begin = *end = (uintptr_t)v->data;
  for (int32_t d = 0; d < v->rank; ++d) {
    if (v->shape[d] == 0) return;
    last += (uint64_t)(v->shape[d] - 1) * (uint64_t)v->strides[d];
  }
  *end = *begin + (uintptr_t)((last + 1) * dkh_dtype_size(v->dtype));
}

/* 1 when `in` broadcasts to `out` (dims right-aligned, each equal or 1). */
static inline int dkh_broadcasts(const DK_TensorView* in, const DK_TensorView* out) {
  if (in->rank > out->rank) return 0;
  for (int32_t d = 1; d <= in->rank; ++d) {
    const int64_t i = in->shape[in->rank - d], o = out->shape[out->rank - d];
    if (i != o && i != 1) return 0;
  }
  return 1;
}

/* One view: struct_size, a known dtype, rank and arrays, sizes and strides
 * >= 0, data unless empty, and dense row-major unless `dense` is NULL (else
 * it says why the view must be dense). */
static inline DK_Error* dkh_check_operand(const char* call, const char* what,
                                          const DK_TensorView* v, const char* dense) {
  if (v == NULL || v->struct_size < DK_TensorView_STRUCT_SIZE)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s is NULL or its struct_size is %zu; expected a DK_TensorView of at "
                     "least %zu bytes",
                     call, what, v ? v->struct_size : (size_t)0, (size_t)DK_TensorView_STRUCT_SIZE);
  if (dkh_dtype_size(v->dtype) == 0)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: %s has dtype %d, which is no DK_DType", call,
                     what, (int)v->dtype);
  if (v->rank < 0 || v->rank > DK_MAX_RANK || (v->rank > 0 && (!v->shape || !v->strides)))
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s has rank %d (shape %p, strides %p); expected rank 0..%d with both "
                     "arrays set when rank > 0",
                     call, what, (int)v->rank, (const void*)v->shape, (const void*)v->strides,
                     DK_MAX_RANK);
  int64_t numel = 1;
  for (int32_t d = 0; d < v->rank; ++d) {
    if (v->shape[d] < 0 || v->strides[d] < 0)
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: %s has size %lld and stride %lld in dim %d; expected both >= 0", call,
                       what, (long long)v->shape[d], (long long)v->strides[d], (int)d);
    numel *= v->shape[d];
  }
  if (numel > 0 && v->data == NULL)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s has %lld elements and data NULL; NULL is for empty views only", call,
                     what, (long long)numel);
  if (dense && !dkh_is_contiguous(v->rank, v->shape, v->strides))
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s is not dense row-major; expected it dense: %s. Hint: the SDK "
                     "materialises what a kernel did not declare.",
                     call, what, dense);
  return NULL;
}

/* `got` must have dtype `want`; `why` says where the rule comes from. */
static inline DK_Error* dkh_check_dtype(const char* call, const char* what,
                                        const DK_TensorView* got, int32_t want, const char* why) {
  if (got->dtype == want) return NULL;
  return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: %s is %s; expected %s (%s)", call, what,
                   dkh_dtype_name(got->dtype), dkh_dtype_name(want), why);
}

/* `v`'s shape must be `want` [rank]; `why` names the rule. */
static inline DK_Error* dkh_check_shape(const char* call, const char* what, const DK_TensorView* v,
                                        int32_t rank, const int64_t* want, const char* why) {
  int same = v->rank == rank;
  for (int32_t d = 0; same && d < rank; ++d) same = v->shape[d] == want[d];
  if (same) return NULL;
  char got[160], expected[160];
  DK_TensorView w = *v;
  w.rank = rank;
  w.shape = want;
  return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: %s has shape %s; expected %s (%s)", call, what,
                   dkh_dims(v, got, sizeof got), dkh_dims(&w, expected, sizeof expected), why);
}

/* The op's shape rule (plugin_helpers_ops.h), for checked views. */
static inline DK_Error* dkh_check_shapes(const char* call, const DK_Kernel_Args* a,
                                         const dkh_OpSignature* sig, const void* attrs,
                                         uint32_t caps) {
  const DK_TensorView* out = a->outputs[0];
  const DK_TensorView* x = sig->num_inputs > 0 ? a->inputs[0] : NULL;
  int64_t want[DK_MAX_RANK];
  char what[32];
  switch (sig->out_shape) {
    case DKH_SHAPE_SAME:
      for (int32_t i = 0; i < sig->num_inputs; ++i) {
        const DK_TensorView* in = a->inputs[i];
        const int may = (caps & DK_KERNEL_CAP_BROADCAST) != 0;
        snprintf(what, sizeof what, "input %d", (int)i);
        if (may ? !dkh_broadcasts(in, out) : !dkh_same_shape(in, out))
          return dkh_check_shape(call, what, in, out->rank, out->shape,
                                 may ? "or broadcast to out's shape"
                                     : "out's shape: the kernel "
                                       "did not declare DK_KERNEL_CAP_BROADCAST");
      }
      return NULL;
    case DKH_SHAPE_REDUCE_AXES:
    case DKH_SHAPE_REDUCE_AXIS: {
      uint32_t mask = 0; /* the reduced dims: attrs->axes, or 1 << attrs->axis */
      if (sig->out_shape == DKH_SHAPE_REDUCE_AXES) {
        memcpy(&mask, (const char*)attrs + sig->axes_offset, sizeof mask);
      } else {
        int32_t axis;
        memcpy(&axis, (const char*)attrs + sig->axis_offset, sizeof axis);
        mask = (uint32_t)1 << axis;
      }
      for (int32_t d = 0; d < x->rank; ++d) want[d] = (mask >> d) & 1 ? 1 : x->shape[d];
      return dkh_check_shape(call, "output 0", out, x->rank, want,
                             "x's, with the reduced dimensions of size 1");
    }
    case DKH_SHAPE_GATHER:
    case DKH_SHAPE_SCATTER: {
      const DK_TensorView* index = a->inputs[1];
      int32_t axis;
      memcpy(&axis, (const char*)attrs + sig->axis_offset, sizeof axis);
      int ok = index->rank == x->rank;
      for (int32_t d = 0; ok && d < x->rank; ++d) ok = d == axis || index->shape[d] <= x->shape[d];
      if (!ok) {
        char got[160], xs[160];
        return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                         "%s: input 1 (index) has shape %s; expected x's rank and no larger than "
                         "x %s in any dimension but axis %d",
                         call, dkh_dims(index, got, sizeof got), dkh_dims(x, xs, sizeof xs),
                         (int)axis);
      }
      if (sig->out_shape == DKH_SHAPE_GATHER)
        return dkh_check_shape(call, "output 0", out, index->rank, index->shape, "index's shape");
      DK_Error* e = dkh_check_shape(call, "input 2 (src)", a->inputs[2], index->rank, index->shape,
                                    "index's shape");
      return e ? e : dkh_check_shape(call, "output 0", out, x->rank, x->shape, "x's shape");
    }
    case DKH_SHAPE_MATMUL: {
      const DK_TensorView* b = a->inputs[1];
      const int32_t r = x->rank;
      if (r < 2 || b->rank != r)
        return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                         "%s: a and b have ranks %d and %d; expected one rank >= 2 (a [B..., M, "
                         "K], b [B..., K, N] with equal batch dims)",
                         call, (int)x->rank, (int)b->rank);
      for (int32_t d = 0; d < r - 2; ++d) want[d] = x->shape[d];
      want[r - 2] = x->shape[r - 1];
      want[r - 1] = b->shape[r - 1];
      DK_Error* e = dkh_check_shape(call, "input 1 (b)", b, r, want, "[B..., K, N], a's B and K");
      want[r - 2] = x->shape[r - 2];
      return e ? e : dkh_check_shape(call, "output 0", out, r, want, "[B..., M, N]");
    }
    default: return NULL; /* DKH_SHAPE_ANY */
  }
}

/* The attribute struct: present, large enough, axis / axes / scalars valid. */
static inline DK_Error* dkh_check_attrs(const char* call, const DK_Kernel_Args* a,
                                        const dkh_OpSignature* sig) {
  if (sig->attrs_size == 0) return NULL;
  const size_t given = a->attrs ? *(const size_t*)a->attrs : 0;
  if (a->attrs == NULL || given < sig->attrs_size)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: attrs is %s with struct_size %zu; expected %s's attribute struct of at "
                     "least %zu bytes",
                     call, a->attrs ? "set" : "NULL", given, sig->name, sig->attrs_size);
  const char* attrs = (const char*)a->attrs;
  const int32_t rank = sig->num_inputs > 0 ? a->inputs[0]->rank : a->outputs[0]->rank;
  if (sig->axis_offset >= 0) {
    int32_t axis;
    memcpy(&axis, attrs + sig->axis_offset, sizeof axis);
    if (axis < 0 || axis >= rank)
      return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: attrs->axis is %d; expected 0 <= axis < %d",
                       call, (int)axis, (int)rank);
  }
  if (sig->axes_offset >= 0) {
    uint32_t axes;
    memcpy(&axes, attrs + sig->axes_offset, sizeof axes);
    if (axes == 0 || (rank < 32 && (axes >> rank) != 0))
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: attrs->axes is 0x%x; expected a non-zero mask of dimensions below the "
                       "rank %d",
                       call, (unsigned)axes, (int)rank);
  }
  for (int k = 0; k < 2 && sig->scalar_offset[k] >= 0; ++k) {
    DK_Scalar s;
    memcpy(&s, attrs + sig->scalar_offset[k], sizeof s);
    if (s.dtype != DK_DTYPE_FLOAT64 && s.dtype != DK_DTYPE_INT64 &&
        !(s.dtype == DK_DTYPE_BOOL && (s.value.i == 0 || s.value.i == 1)))
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: an attribute DK_Scalar has dtype %d and value.i %lld; expected "
                       "float64, int64, or bool holding 0 or 1",
                       call, (int)s.dtype, (long long)s.value.i);
  }
  return NULL;
}

/* Every argument rule of a call to base op `op`'s kernel, against what
 * `table` (the plugin's own kernel table) declares for it. */
static inline DK_Error* dkh_check_call(const char* call, const DK_Kernel_Args* a, int32_t op,
                                       const DK_KernelTable* table) {
  DK_Error* e = dkh_check_struct(call, a, a ? a->struct_size : 0, DK_Kernel_Args_STRUCT_SIZE,
                                 "DK_Kernel_Args");
  const dkh_OpSignature* sig = dkh_op_signature(op);
  if (e != NULL) return e;
  if (sig == NULL || op >= table->num_ops)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: op %d is not a base op these helpers know",
                     call, (int)op);
  if ((e = dkh_check_kernel_call(call, a, op, sig->num_inputs, sig->num_outputs))) return e;
  const uint64_t declared = table->dtypes[op];
  const uint32_t caps = table->caps ? table->caps[op] : 0;
  const int is_copy = op == DK_OP_COPY;
  char what[32];
  const int strided = is_copy || (caps & DK_KERNEL_CAP_STRIDED);
  for (int32_t i = 0; i < sig->num_inputs; ++i) {
    snprintf(what, sizeof what, "input %d", (int)i);
    if ((e = dkh_check_operand(
             call, what, a->inputs[i],
             strided ? NULL : "the kernel did not declare DK_KERNEL_CAP_STRIDED")))
      return e;
  }
  const DK_TensorView* out = a->outputs[0];
  if ((e = dkh_check_operand(call, "output 0", out,
                             is_copy ? NULL : "DK_KERNEL_CAP_STRIDED covers inputs only")))
    return e;
  /* dtypes: the declared one (of input 0's kind, or the output's without inputs) */
  const DK_TensorView* typed = out;
  for (int32_t i = sig->num_inputs - 1; i >= 0; --i)
    if (sig->input_dtype[i] < 0) typed = a->inputs[i];
  if (!((declared >> typed->dtype) & 1))
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s is %s, which this kernel did not declare (dtype mask 0x%llx). Hint: "
                     "the SDK casts first; a stale kernel table or an SDK bug sends it anyway.",
                     call, typed == out ? "output 0" : "an input", dkh_dtype_name(typed->dtype),
                     (unsigned long long)declared);
  for (int32_t i = 0; i < sig->num_inputs; ++i) {
    snprintf(what, sizeof what, "input %d", (int)i);
    const int32_t want = sig->input_dtype[i] >= 0 ? sig->input_dtype[i] : typed->dtype;
    if ((e = dkh_check_dtype(
             call, what, a->inputs[i], want,
             sig->input_dtype[i] >= 0 ? "fixed by the op" : "the inputs share one")))
      return e;
  }
  if (sig->out_dtype != DKH_OUT_ANY) {
    const int32_t want = sig->out_dtype == DKH_OUT_BOOL    ? DK_DTYPE_BOOL
                         : sig->out_dtype == DKH_OUT_INT64 ? DK_DTYPE_INT64
                                                           : typed->dtype;
    if ((e = dkh_check_dtype(call, "output 0", out, want, "the op's output dtype"))) return e;
  }
  if ((e = dkh_check_attrs(call, a, sig))) return e;
  if ((e = dkh_check_shapes(call, a, sig, a->attrs, caps))) return e;
  /* copy's strided output writes no element twice: no stride 0 on a dim > 1
   * (an output without elements writes none, whatever its strides) */
  for (int32_t d = 0; is_copy && dkh_numel(out) > 0 && d < out->rank; ++d)
    if (out->shape[d] > 1 && out->strides[d] == 0)
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: output 0 has stride 0 in dim %d of size %lld; expected an output "
                       "that writes no element twice",
                       call, (int)d, (long long)out->shape[d]);
  /* memory: out[0] overlaps an input only by aliasing in[0] exactly, with INPLACE */
  uintptr_t ob, oe, ib, ie;
  dkh_span(out, &ob, &oe);
  for (int32_t i = 0; i < sig->num_inputs && ob != oe; ++i) {
    const DK_TensorView* in = a->inputs[i];
    dkh_span(in, &ib, &ie);
    if (ib == ie || ob >= ie || ib >= oe) continue;
    const int exact = in->data == out->data && in->dtype == out->dtype && dkh_same_shape(in, out) &&
                      !memcmp(in->strides, out->strides, sizeof(int64_t) * (size_t)in->rank);
    if (i == 0 && exact && (caps & DK_KERNEL_CAP_INPLACE)) continue;
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: output 0 overlaps input %d in memory; expected disjoint views%s", call,
                     (int)i,
                     (caps & DK_KERNEL_CAP_INPLACE) ? " or output 0 aliasing input 0 exactly"
                                                    : " (the kernel did not declare "
                                                      "DK_KERNEL_CAP_INPLACE)");
  }
  return NULL;
}

#endif /* DEVICEKIT_PLUGIN_CHECK_CALL_H_ */
