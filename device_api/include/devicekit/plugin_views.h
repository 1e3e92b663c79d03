/* DeviceKit plugin helpers: dtype sizes and names, and tensor-view helpers
 * (element counts, density, offsets, odometer iteration, contiguity).
 *
 * A part of <devicekit/plugin_helpers.h>, which includes it (inside its
 * extern "C" block, after the versioning notes and DKH_PRINTF); never include
 * it alone. Same rules as the whole: header-only C99, every function
 * `static inline`, nothing crosses the plugin boundary, every function
 * thread-safe. */
#ifndef DEVICEKIT_PLUGIN_VIEWS_H_
#define DEVICEKIT_PLUGIN_VIEWS_H_

#ifndef DEVICEKIT_PLUGIN_HELPERS_H_
#error "include <devicekit/plugin_helpers.h>; plugin_views.h is a part of it"
#endif

/* ========================================================================== */
/*  Data types                                                                */
/* ========================================================================== */

/* Bytes per element of a DK_DType; 0 for a value this header does not know. */
static inline size_t dkh_dtype_size(int32_t dtype) {
  switch (dtype) {
    case DK_DTYPE_FLOAT32:
    case DK_DTYPE_INT32: return 4;
    case DK_DTYPE_FLOAT16:
    case DK_DTYPE_BFLOAT16: return 2;
    case DK_DTYPE_FLOAT64:
    case DK_DTYPE_INT64: return 8;
    case DK_DTYPE_INT8:
    case DK_DTYPE_UINT8:
    case DK_DTYPE_BOOL: return 1;
    default: return 0;
  }
}

/* "float32", ...; "unknown" for a value this header does not know. */
static inline const char* dkh_dtype_name(int32_t dtype) {
  switch (dtype) {
    case DK_DTYPE_FLOAT32: return "float32";
    case DK_DTYPE_FLOAT16: return "float16";
    case DK_DTYPE_BFLOAT16: return "bfloat16";
    case DK_DTYPE_FLOAT64: return "float64";
    case DK_DTYPE_INT8: return "int8";
    case DK_DTYPE_INT32: return "int32";
    case DK_DTYPE_INT64: return "int64";
    case DK_DTYPE_UINT8: return "uint8";
    case DK_DTYPE_BOOL: return "bool";
    default: return "unknown";
  }
}

/* ========================================================================== */
/*  Tensor views                                                              */
/* ========================================================================== */

/* Number of elements (1 for rank 0). */
static inline int64_t dkh_numel(const DK_TensorView* v) {
  int64_t n = 1;
  for (int32_t d = 0; d < v->rank; ++d) n *= v->shape[d];
  return n;
}

/* 1 when the view is dense row-major (strides in elements; a size-1 dim may
 * have any stride), else 0. Stricter than the header for views with zero
 * elements (see dkh_is_contiguous, which follows DK_TensorView's rule). */
static inline int dkh_is_dense(const DK_TensorView* v) {
  int64_t expected = 1;
  for (int32_t d = v->rank - 1; d >= 0; --d) {
    if (v->shape[d] != 1 && v->strides[d] != expected) return 0;
    expected *= v->shape[d];
  }
  return 1;
}

static inline int dkh_same_shape(const DK_TensorView* a, const DK_TensorView* b) {
  if (a->rank != b->rank) return 0;
  for (int32_t d = 0; d < a->rank; ++d)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

/* Checks one view of a kernel call against the header's rules and what the
 * kernel declared: struct_size, a dtype in `dtype_mask` (DK_DTYPE_BIT bits),
 * rank and arrays, and, unless the op declared DK_KERNEL_CAP_STRIDED, dense
 * layout. `what` names it in the message ("input 0", "out"). */
static inline DK_Error* dkh_check_view(const char* call, const char* what, const DK_TensorView* v,
                                       uint64_t dtype_mask, uint32_t caps) {
  if (v == NULL || v->struct_size < DK_TensorView_STRUCT_SIZE)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s is NULL or its struct_size is %zu; "
                     "expected at least %zu",
                     call, what, v ? v->struct_size : (size_t)0, (size_t)DK_TensorView_STRUCT_SIZE);
  if (v->dtype < 0 || v->dtype >= 64 || !(dtype_mask & DK_DTYPE_BIT(v->dtype)))
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s has dtype %s (%d); this kernel "
                     "declared the dtype mask 0x%llx. Hint: the SDK only sends declared "
                     "dtypes, so this is an SDK bug or a stale kernel table.",
                     call, what, dkh_dtype_name(v->dtype), (int)v->dtype,
                     (unsigned long long)dtype_mask);
  if (v->rank < 0 || v->rank > DK_MAX_RANK || (v->rank > 0 && (!v->shape || !v->strides)))
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s has rank %d (shape %p, strides %p); "
                     "expected rank 0..%d with both arrays set when rank > 0",
                     call, what, (int)v->rank, (const void*)v->shape, (const void*)v->strides,
                     DK_MAX_RANK);
  if (!(caps & DK_KERNEL_CAP_STRIDED) && !dkh_is_dense(v))
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s is not dense row-major; this kernel "
                     "declared no DK_KERNEL_CAP_STRIDED, so the SDK must materialise it "
                     "first",
                     call, what);
  return NULL;
}

/* Element offset (in elements, not bytes) of multi-index `index` [rank]. */
static inline int64_t dkh_offset(const DK_TensorView* v, const int64_t* index) {
  int64_t off = 0;
  for (int32_t d = 0; d < v->rank; ++d) off += index[d] * v->strides[d];
  return off;
}

/* Steps a row-major multi-index over `shape` [rank]; returns 0 after the
 * last element. Walk a strided view with:
 *   int64_t idx[DK_MAX_RANK] = {0};
 *   if (dkh_numel(v) > 0) do { ... p[dkh_offset(v, idx)] ... }
 *   while (dkh_next_index(idx, v->shape, v->rank)); */
static inline int dkh_next_index(int64_t* index, const int64_t* shape, int32_t rank) {
  for (int32_t d = rank - 1; d >= 0; --d) {
    if (++index[d] < shape[d]) return 1;
    index[d] = 0;
  }
  return 0;
}

/* 1 when dims `shape` / `strides` [rank] are contiguous by DK_TensorView's
 * rule, else 0: a view with zero elements is contiguous whatever its strides
 * (no element is addressed); otherwise dense row-major, size-1 dims with any
 * stride. Takes the arrays rather than a view so a plugin can ask it of the
 * copy of a view it keeps past the call. (Appended within 1.2.) */
#define DKH_HAS_IS_CONTIGUOUS 1
static inline int dkh_is_contiguous(int32_t rank, const int64_t* shape, const int64_t* strides) {
  for (int32_t d = 0; d < rank; ++d)
    if (shape[d] == 0) return 1;
  int64_t expected = 1;
  for (int32_t d = rank - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expected) return 0;
    expected *= shape[d];
  }
  return 1;
}

#endif /* DEVICEKIT_PLUGIN_VIEWS_H_ */
