// The registry entries (supports + launch, one pair per row of fused.def)
// of the row-wise fused ops: rms_norm and layer_norm over the last dim,
// softmax over any axis, gelu (erf and tanh forms), and their backwards, in
// float32, float16 and bfloat16. The kernels are fused_rows_kernels.h's.
//
// Every entry takes dense operands of one dtype (mixed dtypes, strided views
// and other ranks are declined, and the SDK decomposes them); a 16-bit
// kernel loads, computes in float32 and rounds each result once.
#include "fused_host.h"
#include "fused_rows_kernels.h"

namespace dkcuda {
namespace fused {
namespace {

template <class T> constexpr int32_t dtype_of();
template <> constexpr int32_t dtype_of<float>() { return DK_DTYPE_FLOAT32; }
template <> constexpr int32_t dtype_of<dk_f16>() { return DK_DTYPE_FLOAT16; }
template <> constexpr int32_t dtype_of<dk_bf16>() { return DK_DTYPE_BFLOAT16; }

template <class P> const P* in(const DK_Kernel_Args* a, int i) {
  return a->inputs[i] ? static_cast<const P*>(a->inputs[i]->data) : nullptr;
}
template <class P> P* out(const DK_Kernel_Args* a, int o) {
  return a->outputs[o] ? static_cast<P*>(a->outputs[o]->data) : nullptr;
}

// Threads for a block per row of d elements: about 8 elements a thread, a
// multiple of 32, at most 256.
int row_block(int64_t d) {
  const int64_t t = ((d + 7) / 8 + 31) / 32 * 32;
  return int(t < 32 ? 32 : t > 256 ? 256 : t);
}

bool absent_or_dense(const DK_TensorView* v, int32_t t) { return v == nullptr || dense_as(v, t); }

// ---- rms_norm / layer_norm ---------------------------------------------------------

// x dense of dtype T, rank >= 1; weight (and bias) absent or dense of dtype
// T; out dense of dtype T.
template <class T> int32_t norm_supports(const DK_Kernel_Args* a, int32_t op, int32_t nin) {
  if (!frame<DK_NormAttrs>(a, op, nin, DK_NormAttrs_STRUCT_SIZE)) return 0;
  const int32_t t = dtype_of<T>();
  if (!dense_as(a->inputs[0], t) || a->inputs[0]->rank < 1 || !dense_as(a->outputs[0], t)) return 0;
  for (int32_t i = 1; i < nin; ++i)
    if (!absent_or_dense(a->inputs[i], t)) return 0;
  return 1;
}
template <class T> int32_t rms_norm_supports(const DK_Kernel_Args* a) {
  return norm_supports<T>(a, DK_FUSED_RMS_NORM, 2);
}
template <class T> int32_t layer_norm_supports(const DK_Kernel_Args* a) {
  return norm_supports<T>(a, DK_FUSED_LAYER_NORM, 3);
}

// Each present vector (weight, bias, dweight, dbias) has shape [d].
DK_Error* check_vectors(const char* call, const DK_TensorView* const* v, int n, const char* what,
                        int64_t d) {
  for (int i = 0; i < n; ++i) {
    if (v[i] == nullptr) continue;
    if (DK_Error* e = dkh_check_shape(call, what, v[i], 1, &d, "the last dim of x")) return e;
  }
  return nullptr;
}

template <class T> DK_Error* launch_norm(const char* call, const DK_Kernel_Args* a, int32_t op,
                                         int32_t nin, DK_FusedSupportsFn* supports) {
  return guarded(call, [&]() -> DK_Error* {
    Launch l;
    if (DK_Error* e = begin(call, a, op, nin, 1, supports, &l)) return e;
    const DK_TensorView* x = a->inputs[0];
    if (DK_Error* e = dkh_check_shape(call, "output 0", a->outputs[0], x->rank, x->shape,
                                      "out has x's shape"))
      return e;
    const int64_t d = x->shape[x->rank - 1];
    if (DK_Error* e = check_vectors(call, a->inputs + 1, nin - 1, "weight / bias", d)) return e;
    const int64_t n = numel(x);
    if (n == 0) return nullptr;
    NormArgs<T> args{in<T>(a, 0),
                     in<T>(a, 1),
                     nin > 2 ? in<T>(a, 2) : nullptr,
                     out<T>(a, 0),
                     n / d,
                     d,
                     float(static_cast<const DK_NormAttrs*>(a->attrs)->eps),
                     op == DK_FUSED_LAYER_NORM};
    return launched(call, DK_LAUNCH(norm_forward<T>, dk_dim3(dk_grid_stride_blocks(n / d, 1)),
                                    dk_dim3(row_block(d)), l.stream, args));
  });
}

// dout and x dense of dtype T (rank >= 1), weight absent or dense of dtype
// T; dx dense, dweight only with a weight; every present output dense of
// dtype T.
template <class T>
int32_t norm_backward_supports(const DK_Kernel_Args* a, int32_t op, int32_t nout) {
  if (!frame<DK_NormAttrs>(a, op, 3, DK_NormAttrs_STRUCT_SIZE, nout)) return 0;
  const int32_t t = dtype_of<T>();
  if (!dense_as(a->inputs[0], t) || !dense_as(a->inputs[1], t) || a->inputs[1]->rank < 1 ||
      !absent_or_dense(a->inputs[2], t) || !dense_as(a->outputs[0], t))
    return 0;
  if (a->outputs[1] && !a->inputs[2]) return 0;  // dweight without a weight
  for (int32_t o = 1; o < nout; ++o)
    if (!absent_or_dense(a->outputs[o], t)) return 0;
  return 1;
}
template <class T> int32_t rms_norm_backward_supports(const DK_Kernel_Args* a) {
  return norm_backward_supports<T>(a, DK_FUSED_RMS_NORM_BACKWARD, 2);
}
template <class T> int32_t layer_norm_backward_supports(const DK_Kernel_Args* a) {
  return norm_backward_supports<T>(a, DK_FUSED_LAYER_NORM_BACKWARD, 3);
}

// dx by norm_backward_rows (a block per row); when dweight or dbias is
// wanted, the rows' mean and rstd go to scratch and norm_backward_columns
// sums the columns.
template <class T> DK_Error* launch_norm_backward(const char* call, const DK_Kernel_Args* a,
                                                  int32_t op, int32_t nout,
                                                  DK_FusedSupportsFn* supports) {
  return guarded(call, [&]() -> DK_Error* {
    Launch l;
    if (DK_Error* e = begin(call, a, op, 3, nout, supports, &l)) return e;
    const DK_TensorView* x = a->inputs[1];
    if (DK_Error* e = dkh_check_shape(call, "input 0 (dout)", a->inputs[0], x->rank, x->shape,
                                      "dout has x's shape"))
      return e;
    if (DK_Error* e = dkh_check_shape(call, "output 0 (dx)", a->outputs[0], x->rank, x->shape,
                                      "dx has x's shape"))
      return e;
    const int64_t d = x->shape[x->rank - 1];
    if (DK_Error* e = check_vectors(call, a->inputs + 2, 1, "weight", d)) return e;
    if (DK_Error* e = check_vectors(call, a->outputs + 1, nout - 1, "dweight / dbias", d)) return e;
    const int64_t n = numel(x), rows = d ? n / d : 0;
    if (d == 0) return nullptr;  // no element anywhere: dx, dweight and dbias are empty
    const bool columns = a->outputs[1] || (nout > 2 && a->outputs[2]);
    Scratch stats;
    if (columns && rows > 0) {
      const std::string e = stats.allocate(l.stream, size_t(rows) * 2 * sizeof(float));
      if (!e.empty())
        return dkh_error(DK_ERROR_OUT_OF_MEMORY, "%s: scratch for %lld rows' statistics: %s", call,
                         (long long)rows, e.c_str());
    }
    NormBackwardArgs<T> args{in<T>(a, 0),
                             in<T>(a, 1),
                             in<T>(a, 2),
                             out<T>(a, 0),
                             out<T>(a, 1),
                             nout > 2 ? out<T>(a, 2) : nullptr,
                             stats.floats(),
                             rows,
                             d,
                             float(static_cast<const DK_NormAttrs*>(a->attrs)->eps),
                             op == DK_FUSED_LAYER_NORM_BACKWARD};
    if (rows > 0) {
      if (DK_Error* e = launched(
              call, DK_LAUNCH(norm_backward_rows<T>, dk_dim3(dk_grid_stride_blocks(rows, 1)),
                              dk_dim3(row_block(d)), l.stream, args)))
        return e;
    }
    if (!columns) return nullptr;
    // rows == 0 leaves dweight and dbias sums of nothing: 0.
    return launched(
        call, DK_LAUNCH(norm_backward_columns<T>, dk_dim3(dk_grid_stride_blocks((d + 31) / 32, 1)),
                        dk_dim3(kColumnWarps * 32), l.stream, args));
  });
}

// ---- softmax ---------------------------------------------------------------------------

// Forward: x and out dense of dtype T, any axis. Backward: dout, out and dx
// dense of dtype T; any axis in float32, the last axis in float16 / bfloat16.
// Why: the backward gets the forward's out rounded to 16 bits, and that
// rounding enters dout - sum(dout * out), which can cancel: on a short row
// along axis 0 (5 elements) conformance found dx off by twice its bound
// where the decomposition, differentiating its own unrounded exp and sum, is
// right. The last axis is what the CPU plugin's 16-bit kernel takes too.
template <class T> int32_t softmax_supports_op(const DK_Kernel_Args* a, int32_t op, int32_t nin) {
  const DK_SoftmaxAttrs* attrs = frame<DK_SoftmaxAttrs>(a, op, nin, DK_SoftmaxAttrs_STRUCT_SIZE);
  if (!attrs) return 0;
  const int32_t t = dtype_of<T>();
  for (int32_t i = 0; i < nin; ++i)
    if (!dense_as(a->inputs[i], t)) return 0;
  const int32_t rank = a->inputs[nin - 1]->rank;
  if (!dense_as(a->outputs[0], t) || rank < 1 || attrs->axis < 0 || attrs->axis >= rank) return 0;
  return op == DK_FUSED_SOFTMAX || t == DK_DTYPE_FLOAT32 || attrs->axis == rank - 1;
}
template <class T> int32_t softmax_supports(const DK_Kernel_Args* a) {
  return softmax_supports_op<T>(a, DK_FUSED_SOFTMAX, 1);
}
template <class T> int32_t softmax_backward_supports(const DK_Kernel_Args* a) {
  return softmax_supports_op<T>(a, DK_FUSED_SOFTMAX_BACKWARD, 2);
}

template <class T> DK_Error* launch_softmax(const char* call, const DK_Kernel_Args* a, int32_t op,
                                            int32_t nin, DK_FusedSupportsFn* supports) {
  return guarded(call, [&]() -> DK_Error* {
    Launch l;
    if (DK_Error* e = begin(call, a, op, nin, 1, supports, &l)) return e;
    const DK_TensorView* x = a->inputs[nin - 1];  // softmax: x; backward: out
    for (int32_t i = 0; i < nin - 1; ++i)
      if (DK_Error* e = dkh_check_shape(call, "input 0 (dout)", a->inputs[i], x->rank, x->shape,
                                        "dout has out's shape"))
        return e;
    if (DK_Error* e = dkh_check_shape(call, "output 0", a->outputs[0], x->rank, x->shape,
                                      "the output has the input's shape"))
      return e;
    const int64_t n = numel(x);
    if (n == 0) return nullptr;
    const int32_t axis = static_cast<const DK_SoftmaxAttrs*>(a->attrs)->axis;
    int64_t inner = 1;
    for (int32_t d = axis + 1; d < x->rank; ++d) inner *= x->shape[d];
    const int64_t d = x->shape[axis];
    SoftmaxArgs<T> args{
        in<T>(a, nin - 1), nin > 1 ? in<T>(a, 0) : nullptr, out<T>(a, 0), n / d, d, inner};
    return launched(call, DK_LAUNCH(softmax_rows<T>, dk_dim3(dk_grid_stride_blocks(n / d, 1)),
                                    dk_dim3(row_block(d)), l.stream, args));
  });
}

// ---- gelu ------------------------------------------------------------------------------

// x (and dout) and out dense of dtype T, any rank; approximate 0 or 1.
template <class T> int32_t gelu_supports_op(const DK_Kernel_Args* a, int32_t op, int32_t nin) {
  const DK_GeluAttrs* attrs = frame<DK_GeluAttrs>(a, op, nin, DK_GeluAttrs_STRUCT_SIZE);
  if (!attrs || (attrs->approximate != 0 && attrs->approximate != 1)) return 0;
  const int32_t t = dtype_of<T>();
  for (int32_t i = 0; i < nin; ++i)
    if (!dense_as(a->inputs[i], t)) return 0;
  return dense_as(a->outputs[0], t);
}
template <class T> int32_t gelu_supports(const DK_Kernel_Args* a) {
  return gelu_supports_op<T>(a, DK_FUSED_GELU, 1);
}
template <class T> int32_t gelu_backward_supports(const DK_Kernel_Args* a) {
  return gelu_supports_op<T>(a, DK_FUSED_GELU_BACKWARD, 2);
}

template <class T> DK_Error* launch_gelu(const char* call, const DK_Kernel_Args* a, int32_t op,
                                         int32_t nin, DK_FusedSupportsFn* supports) {
  return guarded(call, [&]() -> DK_Error* {
    Launch l;
    if (DK_Error* e = begin(call, a, op, nin, 1, supports, &l)) return e;
    const DK_TensorView* x = a->inputs[nin - 1];  // gelu: x; backward: dout, x
    if (nin == 2) {
      if (DK_Error* e = dkh_check_shape(call, "input 0 (dout)", a->inputs[0], x->rank, x->shape,
                                        "dout has x's shape"))
        return e;
    }
    if (DK_Error* e = dkh_check_shape(call, "output 0", a->outputs[0], x->rank, x->shape,
                                      "the output has x's shape"))
      return e;
    const int64_t n = numel(x);
    if (n == 0) return nullptr;
    GeluArgs<T> args{in<T>(a, nin - 1), nin == 2 ? in<T>(a, 0) : nullptr, out<T>(a, 0), n,
                     static_cast<const DK_GeluAttrs*>(a->attrs)->approximate};
    return launched(call, DK_LAUNCH(gelu_elementwise<T>, dk_dim3(grid_for(n)), dk_dim3(kBlock),
                                    l.stream, args));
  });
}

}  // namespace
}  // namespace fused
}  // namespace dkcuda

using namespace dkcuda::fused;

// One supports/launch pair per fused.def row: _f32, _f16, _bf16.
#define DKCUDA_ROW_KERNELS(sfx, T)                                                                 \
  extern "C" int32_t dk_cuda_fused_rms_norm_##sfx##_supports(const DK_Kernel_Args* a) {            \
    return rms_norm_supports<T>(a);                                                                \
  }                                                                                                \
  extern "C" DK_Error* dk_cuda_fused_rms_norm_##sfx(const DK_Kernel_Args* a) {                     \
    return launch_norm<T>("cuda.Fused(rms_norm)", a, DK_FUSED_RMS_NORM, 2, rms_norm_supports<T>);  \
  }                                                                                                \
  extern "C" int32_t dk_cuda_fused_layer_norm_##sfx##_supports(const DK_Kernel_Args* a) {          \
    return layer_norm_supports<T>(a);                                                              \
  }                                                                                                \
  extern "C" DK_Error* dk_cuda_fused_layer_norm_##sfx(const DK_Kernel_Args* a) {                   \
    return launch_norm<T>("cuda.Fused(layer_norm)", a, DK_FUSED_LAYER_NORM, 3,                     \
                          layer_norm_supports<T>);                                                 \
  }                                                                                                \
  extern "C" int32_t dk_cuda_fused_rms_norm_backward_##sfx##_supports(const DK_Kernel_Args* a) {   \
    return rms_norm_backward_supports<T>(a);                                                       \
  }                                                                                                \
  extern "C" DK_Error* dk_cuda_fused_rms_norm_backward_##sfx(const DK_Kernel_Args* a) {            \
    return launch_norm_backward<T>("cuda.Fused(rms_norm_backward)", a, DK_FUSED_RMS_NORM_BACKWARD, \
                                   2, rms_norm_backward_supports<T>);                              \
  }                                                                                                \
  extern "C" int32_t dk_cuda_fused_layer_norm_backward_##sfx##_supports(const DK_Kernel_Args* a) { \
    return layer_norm_backward_supports<T>(a);                                                     \
  }                                                                                                \
  extern "C" DK_Error* dk_cuda_fused_layer_norm_backward_##sfx(const DK_Kernel_Args* a) {          \
    return launch_norm_backward<T>("cuda.Fused(layer_norm_backward)", a,                           \
                                   DK_FUSED_LAYER_NORM_BACKWARD, 3,                                \
                                   layer_norm_backward_supports<T>);                               \
  }                                                                                                \
  extern "C" int32_t dk_cuda_fused_softmax_##sfx##_supports(const DK_Kernel_Args* a) {             \
    return softmax_supports<T>(a);                                                                 \
  }                                                                                                \
  extern "C" DK_Error* dk_cuda_fused_softmax_##sfx(const DK_Kernel_Args* a) {                      \
    return launch_softmax<T>("cuda.Fused(softmax)", a, DK_FUSED_SOFTMAX, 1, softmax_supports<T>);  \
  }                                                                                                \
  extern "C" int32_t dk_cuda_fused_softmax_backward_##sfx##_supports(const DK_Kernel_Args* a) {    \
    return softmax_backward_supports<T>(a);                                                        \
  }                                                                                                \
  extern "C" DK_Error* dk_cuda_fused_softmax_backward_##sfx(const DK_Kernel_Args* a) {             \
    return launch_softmax<T>("cuda.Fused(softmax_backward)", a, DK_FUSED_SOFTMAX_BACKWARD, 2,      \
                             softmax_backward_supports<T>);                                        \
  }                                                                                                \
  extern "C" int32_t dk_cuda_fused_gelu_##sfx##_supports(const DK_Kernel_Args* a) {                \
    return gelu_supports<T>(a);                                                                    \
  }                                                                                                \
  extern "C" DK_Error* dk_cuda_fused_gelu_##sfx(const DK_Kernel_Args* a) {                         \
    return launch_gelu<T>("cuda.Fused(gelu)", a, DK_FUSED_GELU, 1, gelu_supports<T>);              \
  }                                                                                                \
  extern "C" int32_t dk_cuda_fused_gelu_backward_##sfx##_supports(const DK_Kernel_Args* a) {       \
    return gelu_backward_supports<T>(a);                                                           \
  }                                                                                                \
  extern "C" DK_Error* dk_cuda_fused_gelu_backward_##sfx(const DK_Kernel_Args* a) {                \
    return launch_gelu<T>("cuda.Fused(gelu_backward)", a, DK_FUSED_GELU_BACKWARD, 2,               \
                          gelu_backward_supports<T>);                                              \
  }
DKCUDA_ROW_KERNELS(f32, float)
DKCUDA_ROW_KERNELS(f16, dk_f16)
DKCUDA_ROW_KERNELS(bf16, dk_bf16)
#undef DKCUDA_ROW_KERNELS
