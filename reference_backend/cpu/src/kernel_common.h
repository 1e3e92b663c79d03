// Validation shared by every kernel file: a kernel checks its call against
// the op's contract and against the dtype mask and capability bits it
// declared in the kernel table (so the SDK hands it nothing it did not
// promise to take), and copies what it needs out of the views, which die
// with the call, before enqueueing.
#pragma once

#include <cstdio>
#include <cstring>
#include <string>

#include "api.h"
#include "dtype.h"
#include "internal.h"

namespace dkcpu {

// A view as the worker needs it, shape and strides copied in.
struct View {
  char* data;
  DK_DType dtype;
  int32_t rank;
  int64_t shape[DK_MAX_RANK];
  int64_t strides[DK_MAX_RANK];  // in elements
  uint64_t span_begin, span_end;  // addresses of the bytes it may touch
};

// "[5,7,3]": a view's sizes or strides for a message, in a buffer that fits
// every rank and value (21 characters per dim), so a message allocates
// nothing and cannot throw.
struct DimsText {
  char text[DK_MAX_RANK * 21 + 3];
  const char* c_str() const { return text; }
};

inline DimsText list_text(const int64_t* values, int32_t rank) {
  DimsText s;
  int used = snprintf(s.text, sizeof s.text, "[");
  for (int32_t d = 0; d < rank; ++d)
    used += snprintf(s.text + used, sizeof s.text - size_t(used), "%s%lld", d ? "," : "",
                     (long long)values[d]);
  snprintf(s.text + used, sizeof s.text - size_t(used), "]");
  return s;
}

inline DimsText dims(const View& v) { return list_text(v.shape, v.rank); }

// The header's rule (DK_TensorView): a view with zero elements is contiguous
// whatever its strides; otherwise size-1 dims may have any stride.
inline bool is_contiguous(const View& v) { return dkh_is_contiguous(v.rank, v.shape, v.strides); }

inline uint32_t declared_caps(DK_OpId op) { return dk_cpu_kernel_table.caps[op]; }

inline DK_Error* check_call(const char* call, const DK_Kernel_Args* a, DK_OpId op,
                            int32_t num_inputs, int32_t num_outputs) {
  DKCPU_CHECK_ARGS(call, a, DK_Kernel_Args);
  // op, input / output counts, arrays not NULL (every op has an output)
  if (DK_Error* e = dkh_check_kernel_call(call, a, op, num_inputs, num_outputs)) return e;
  if (DK_Error* e = check_device(call, a->device)) return e;
  return check_stream(call, a->stream, a->device);
}

// Checks one view against the header's rules and copies it into `out`.
inline DK_Error* load_view(const char* call, const char* what, const DK_Kernel_Args* a,
                           const DK_TensorView* v, View* out, int64_t* numel) {
  // struct_size, a DK_DType this header defines, rank and arrays. Layout and
  // the op's own dtype mask are checked per kernel (check_layout,
  // check_dtype_declared): not every view of a call follows the op's mask.
  if (DK_Error* e = dkh_check_view(call, what, v, DK_DTYPE_MASK_ALL_1_0, DK_KERNEL_CAP_STRIDED)) {
    return e;
  }
  out->data = static_cast<char*>(v->data);
  out->dtype = DK_DType(v->dtype);  // range-checked above
  out->rank = v->rank;
  int64_t n = 1, last = 0;  // `last`: offset of the last element, in elements
  for (int32_t d = 0; d < v->rank; ++d) {
    if (v->shape[d] < 0 || v->strides[d] < 0) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: %s has shape %lld and stride %lld in "
                       "dim %d; expected both >= 0",
                       call, what, (long long)v->shape[d], (long long)v->strides[d], d);
    }
    out->shape[d] = v->shape[d];
    out->strides[d] = v->strides[d];
    int64_t reach = 0;
    if (__builtin_mul_overflow(n, v->shape[d], &n) ||
        (v->shape[d] > 0 && (__builtin_mul_overflow(v->shape[d] - 1, v->strides[d], &reach) ||
                             __builtin_add_overflow(last, reach, &last)))) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: %s has a shape or strides whose extent "
                       "overflows 64 bits at dim %d",
                       call, what, d);
    }
  }
  *numel = n;
  uint64_t bytes = 0;
  if (n > 0 &&
      __builtin_mul_overflow(uint64_t(last) + 1, dkh_dtype_size(DK_DType(v->dtype)), &bytes)) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: %s spans more than 2^64 bytes", call, what);
  }
  out->span_begin = uintptr_t(v->data);
  out->span_end = uintptr_t(v->data) + bytes;
  if (n == 0) return nullptr;  // data may be NULL and is never touched
  return check_device_memory(call, what, a->device, v->data, bytes);
}

inline DK_Error* check_dtype_declared(const char* call, const char* what, DK_OpId op,
                                      const View& v) {
  if ((dk_cpu_kernel_table.dtypes[op] >> v.dtype) & 1) return nullptr;
  return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                   "%s: %s is %s, which this kernel did not declare "
                   "in its dtype mask. Hint: the SDK should cast first.",
                   call, what, dkh_dtype_name(v.dtype));
}

inline DK_Error* check_same_dtype(const char* call, const char* what, const View& v,
                                  const View& ref, const char* ref_what) {
  if (v.dtype == ref.dtype) return nullptr;
  return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: %s is %s; expected %s like %s", call, what,
                   dkh_dtype_name(v.dtype), dkh_dtype_name(ref.dtype), ref_what);
}

inline DK_Error* check_same_shape(const char* call, const char* what, const View& v,
                                  const View& ref, const char* ref_what) {
  bool same = v.rank == ref.rank;
  for (int32_t d = 0; same && d < v.rank; ++d) same = v.shape[d] == ref.shape[d];
  if (same) return nullptr;
  return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: %s has shape %s; expected %s like %s", call,
                   what, dims(v).c_str(), dims(ref).c_str(), ref_what);
}

inline DimsText strides_of(const View& v) { return list_text(v.strides, v.rank); }

// Without DK_KERNEL_CAP_STRIDED every input must be dense row-major.
inline DK_Error* check_layout(const char* call, const char* what, DK_OpId op, const View& v) {
  if ((declared_caps(op) & DK_KERNEL_CAP_STRIDED) || is_contiguous(v)) return nullptr;
  return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                   "%s: %s has shape %s and strides %s; expected "
                   "contiguous row-major, since the kernel did not declare "
                   "DK_KERNEL_CAP_STRIDED. Hint: the SDK must materialise it with copy.",
                   call, what, dims(v).c_str(), strides_of(v).c_str());
}

// Outputs are dense row-major whatever the capability bits: DK_KERNEL_CAP_STRIDED
// covers inputs only (copy alone writes strided outputs, and checks its own).
inline DK_Error* check_output_layout(const char* call, const View& out) {
  if (is_contiguous(out)) return nullptr;
  return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                   "%s: output 0 has shape %s and strides %s; expected a dense row-major "
                   "output (DK_KERNEL_CAP_STRIDED covers inputs only). Hint: the SDK always "
                   "allocates outputs densely.",
                   call, dims(out).c_str(), strides_of(out).c_str());
}

// Without DK_KERNEL_CAP_INPLACE no output may share memory with an input;
// with it, output 0 may be input 0 exactly (same address, shape and strides:
// `input0` says `in` is input 0) and overlap nothing else. Checked on byte
// spans, which is conservative for interleaved views. A size-1 dim's stride
// names no other element (broadcast_to sets an input's to 0), so it is not
// compared.
inline bool same_view(const View& a, const View& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.rank != b.rank) return false;
  for (int32_t d = 0; d < a.rank; ++d) {
    if (a.shape[d] != b.shape[d] || (a.shape[d] != 1 && a.strides[d] != b.strides[d])) {
      return false;
    }
  }
  return true;
}

inline DK_Error* check_no_alias(const char* call, DK_OpId op, const View& out, const View& in,
                                const char* in_what, bool input0 = false) {
  if (out.span_begin >= in.span_end || in.span_begin >= out.span_end) return nullptr;
  const bool inplace = declared_caps(op) & DK_KERNEL_CAP_INPLACE;
  if (inplace && input0 && same_view(out, in)) return nullptr;
  return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                   "%s: output 0 overlaps %s in memory; expected %s. "
                   "Hint: the SDK must write to a fresh buffer.",
                   call, in_what,
                   inplace ? "disjoint views, or output 0 being input 0 exactly "
                             "(DK_KERNEL_CAP_INPLACE)"
                           : "disjoint views, since the kernel did not declare "
                             "DK_KERNEL_CAP_INPLACE");
}

// DK_KERNEL_CAP_BROADCAST: right-aligns in's dims with out's; a missing or
// size-1 dim is read again and again (stride 0). False when they do not fit.
inline bool broadcast_to(View* in, const View& out) {
  const int32_t shift = out.rank - in->rank;
  if (shift < 0) return false;
  View b = *in;
  b.rank = out.rank;
  for (int32_t d = 0; d < out.rank; ++d) {
    const int64_t size = d >= shift ? in->shape[d - shift] : 1;
    if (size != out.shape[d] && size != 1) return false;
    b.shape[d] = out.shape[d];
    b.strides[d] = size == 1 ? 0 : in->strides[d - shift];
  }
  *in = b;
  return true;
}

// An op's attribute struct: present and at least as large as this plugin needs.
template <class Attrs> inline DK_Error* load_attrs(const char* call, const DK_Kernel_Args* a,
                                                   size_t needed, const char* type,
                                                   const Attrs** out) {
  *out = static_cast<const Attrs*>(a->attrs);
  if (*out != nullptr && (*out)->struct_size >= needed) return nullptr;
  return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                   "%s: attrs is NULL or its struct_size is %zu; "
                   "expected a %s of at least %zu bytes",
                   call, *out ? (*out)->struct_size : size_t(0), type, needed);
}

// A DK_Scalar attribute (attrs-><name>): float64 in value.f, or int64 or
// bool (0 or 1) in value.i.
inline DK_Error* check_scalar(const char* call, const char* name, const DK_Scalar& s) {
  const int dt = int(s.dtype);
  if ((dt == DK_DTYPE_FLOAT64 || dt == DK_DTYPE_INT64 || dt == DK_DTYPE_BOOL) &&
      (dt != DK_DTYPE_BOOL || s.value.i == 0 || s.value.i == 1)) {
    return nullptr;
  }
  return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                   "%s: attrs->%s has dtype %d (%s) and value.i %lld; "
                   "expected float64 (value.f), int64 (value.i) or bool (value.i 0 or 1)",
                   call, name, dt, dkh_dtype_name(dt), (long long)s.value.i);
}

// attrs->axis names a dimension of v.
inline DK_Error* check_axis(const char* call, int32_t axis, const View& v, const char* what) {
  if (axis >= 0 && axis < v.rank) return nullptr;
  return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                   "%s: attrs->axis is %d; expected 0 <= axis < %d "
                   "(the rank of %s %s)",
                   call, axis, v.rank, what, dims(v).c_str());
}

// ---- The fast paths (src/fast/) ------------------------------------------------

// DKCPU_FAST 1 (the default; CMake option DEVICEKIT_CPU_FAST) hands float
// matmul, the norms and attention to src/fast/ (fast/fast.h); 0 builds the
// plain core alone, whose loops then run. Every `#if DKCPU_FAST` is at a call
// site, next to the plain loop it replaces.
#ifndef DKCPU_FAST
#define DKCPU_FAST 1
#endif

// Force-inlined, so that src/fast/ can compile a core loop inside a function
// with a target("avx2,...") attribute and get that ISA's code for it.
#define DKCPU_INLINE inline __attribute__((always_inline))

}  // namespace dkcpu
