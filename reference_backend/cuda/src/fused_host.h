// The host side the fused kernels' registry entries share
// (kernels_fused_rows.cu, kernels_fused_attention.cu): the cheap view tests
// their supports() predicates make, the checks a launch makes before it
// enqueues anything, and stream-ordered scratch memory for what a backward
// passes from one kernel to the next.
//
// supports() must be pure, fast and allocation-free: it reads the raw views
// and never builds an error. A launch first runs its own supports() (it
// never computes what its predicate declines), then begin_fused (kernel.h:
// plugin, device, stream, views inside live allocations), then the op's
// shape rules and that no output overlaps an input or another output.
#pragma once

#include <devicekit/device_api.h>
#include <devicekit/plugin_helpers.h>

#include <stdint.h>
#include <stdlib.h>

#include <string>

#include "kernel.h"

namespace dkcuda {
namespace fused {

// ---- For supports(): no allocation, no error objects -------------------------

inline bool is_view(const DK_TensorView* v) {
  if (v == nullptr || v->struct_size < DK_TensorView_STRUCT_SIZE || v->rank < 0 ||
      v->rank > DK_MAX_RANK || (v->rank > 0 && (!v->shape || !v->strides)))
    return false;
  for (int32_t d = 0; d < v->rank; ++d)
    if (v->shape[d] < 0) return false;
  return true;
}

inline int64_t numel(const DK_TensorView* v) { return dkh_numel(v); }

// A dense (row-major contiguous) view of dtype t.
inline bool dense_as(const DK_TensorView* v, int32_t t) {
  return is_view(v) && v->dtype == t && dkh_is_contiguous(v->rank, v->shape, v->strides);
}

// A rank-`rank` view of dtype t with any non-negative strides (kernels index
// it through its strides); an empty one is never read, whatever its strides.
inline bool strided_as(const DK_TensorView* v, int32_t t, int32_t rank) {
  if (!is_view(v) || v->dtype != t || v->rank != rank) return false;
  if (numel(v) == 0) return true;
  for (int32_t d = 0; d < rank; ++d)
    if (v->strides[d] < 0) return false;
  return true;
}

// The args' frame: the right op, arity and attribute struct, output 0
// present (a backward op's later outputs may be NULL: not wanted). NULL when not.
template <class Attrs> inline const Attrs* frame(const DK_Kernel_Args* a, int32_t op,
                                                 int32_t num_inputs, size_t attrs_size,
                                                 int32_t num_outputs = 1) {
  if (a == nullptr || a->struct_size < DK_Kernel_Args_STRUCT_SIZE || a->op != op ||
      a->num_inputs != num_inputs || a->num_outputs != num_outputs || !a->inputs || !a->outputs ||
      !a->outputs[0])
    return nullptr;
  const Attrs* attrs = static_cast<const Attrs*>(a->attrs);
  return attrs && attrs->struct_size >= attrs_size ? attrs : nullptr;
}

// ---- For launch(): the checks, with messages -----------------------------------

inline bool overlaps(const DK_TensorView* x, const DK_TensorView* y) {
  uintptr_t xb, xe, yb, ye;
  dkh_span(x, &xb, &xe);
  dkh_span(y, &yb, &ye);
  return xb != xe && yb != ye && xb < ye && yb < xe;
}

// Everything a fused launch checks before its own shape rules: the args
// struct, op and arity, its supports() (a launch never computes what its
// predicate declines), begin_fused (plugin, device, stream, views in live
// allocations; fills *l), and that outputs overlap no input and no other
// output (fused kernels never run in place).
inline DK_Error* begin(const char* call, const DK_Kernel_Args* a, int32_t op, int32_t num_inputs,
                       int32_t num_outputs, DK_FusedSupportsFn* supports, Launch* l) {
  DKH_CHECK_STRUCT(call, a, DK_Kernel_Args);
  if (a->op != op || a->num_inputs != num_inputs || a->num_outputs != num_outputs)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: args has op %d with %d input(s) and %d output(s); expected "
                     "DK_FusedOpId %d with %d and %d",
                     call, int(a->op), int(a->num_inputs), int(a->num_outputs), int(op),
                     int(num_inputs), int(num_outputs));
  if (!supports(a))
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: called with arguments its supports() declines (dtype, layout, rank, "
                     "attrs or sizes). Hint: the SDK must launch a fused kernel only after its "
                     "supports() returned 1.",
                     call);
  // begin_fused skips an absent optional input or an unwanted gradient (NULL).
  if (DK_Error* e = begin_fused(call, a, l)) return e;
  for (int32_t o = 0; o < num_outputs; ++o) {
    const DK_TensorView* out = a->outputs[o];
    if (out == nullptr) continue;
    for (int32_t i = 0; i < num_inputs; ++i)
      if (a->inputs[i] && overlaps(out, a->inputs[i]))
        return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                         "%s: output %d overlaps input %d in memory; expected disjoint views "
                         "(fused kernels never run in place)",
                         call, int(o), int(i));
    for (int32_t p = 0; p < o; ++p)
      if (a->outputs[p] && overlaps(out, a->outputs[p]))
        return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                         "%s: outputs %d and %d overlap in memory; expected disjoint views", call,
                         int(p), int(o));
  }
  return nullptr;
}

// ---- Scratch memory ------------------------------------------------------------
//
// A backward's first kernel leaves per-row statistics for its second (the
// norms' mean and rstd; attention's softmax shift, 1/l and dout . out). The
// buffer is allocated on the launch's stream and freed on it after the
// kernels, so it lives exactly as long as the work that uses it. The one
// target-specific piece of the fused kernels: CUDA's stream-ordered
// allocator; in the emulator, host memory freed by a job on the stream.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  // Frees on the stream (after the work enqueued so far).
  ~Scratch() { release(); }

  // "" or the allocator's error.
  std::string allocate(void* stream, size_t bytes) {
    stream_ = stream;
#if DK_SIMT_EMULATED
    p_ = ::malloc(bytes ? bytes : 1);
    return p_ ? std::string() : std::string("out of host memory for the emulator's scratch");
#else
    const cudaError_t e =
        cudaMallocAsync(&p_, bytes ? bytes : 1, static_cast<cudaStream_t>(stream));
    if (e == cudaSuccess) return std::string();
    p_ = nullptr;
    return std::string("cudaMallocAsync: ") + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) +
           ")";
#endif
  }
  float* floats() const { return static_cast<float*>(p_); }

 private:
  void release() {
    if (!p_) return;
#if DK_SIMT_EMULATED
    void* p = p_;
    (void)::dk::sim::enqueue(stream_, "fused_scratch_free", [p]() -> std::string {
      ::free(p);
      return std::string();
    });
#else
    (void)cudaFreeAsync(p_, static_cast<cudaStream_t>(stream_));
#endif
    p_ = nullptr;
  }
  void* stream_ = nullptr;
  void* p_ = nullptr;
};

}  // namespace fused
}  // namespace dkcuda
