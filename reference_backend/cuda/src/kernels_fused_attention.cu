// The registry entries of scaled_dot_product_attention and its backward in
// float32, float16 and bfloat16 (one supports/launch pair per fused.def
// row). The kernels are fused_attention_kernels.h's.
//
// Taken: q, k, v (and dout, out) rank 4 of the entry's dtype with any
// non-negative strides (the permuted views of x.reshape(B, L, H, D)
// .transpose(1, 2) are read in place, and so is a k transposed in memory);
// D and Dv up to kMaxHead; no mask, a bool mask, or an additive mask of
// float32 or the entry's dtype, rank 4 with any non-negative strides (the
// SDK broadcasts with stride 0); is_causal 0 or 1; grouped-query heads;
// Lq != Lk; empty dims. Outputs dense. Everything else is declined.
#include "fused_attention_kernels.h"
#include "fused_host.h"

namespace dkcuda {
namespace fused {
namespace {

template <class T> constexpr int32_t dtype_of();
template <> constexpr int32_t dtype_of<float>() { return DK_DTYPE_FLOAT32; }
template <> constexpr int32_t dtype_of<dk_f16>() { return DK_DTYPE_FLOAT16; }
template <> constexpr int32_t dtype_of<dk_bf16>() { return DK_DTYPE_BFLOAT16; }

// What the mask input is, for a kernel of dtype T; -1 when not taken.
template <class T> int mask_kind_of(const DK_SdpaAttrs* attrs, const DK_TensorView* m) {
  switch (attrs->mask_kind) {
    case DK_SDPA_MASK_NONE: return m == nullptr ? kMaskNone : -1;
    case DK_SDPA_MASK_BOOL: return strided_as(m, DK_DTYPE_BOOL, 4) ? kMaskBool : -1;
    case DK_SDPA_MASK_ADDITIVE:
      if (strided_as(m, DK_DTYPE_FLOAT32, 4)) return kMaskF32;
      if (dtype_of<T>() != DK_DTYPE_FLOAT32 && strided_as(m, dtype_of<T>(), 4)) return kMaskT;
      return -1;
    default: return -1;
  }
}

// The forward takes q, k, v, mask -> out; the backward dout, q, k, v, out,
// mask -> dq, dk, dv (q at input `first`).
template <class T> int32_t sdpa_supports_op(const DK_Kernel_Args* a, bool backward) {
  const int32_t op = backward ? DK_FUSED_SCALED_DOT_PRODUCT_ATTENTION_BACKWARD
                              : DK_FUSED_SCALED_DOT_PRODUCT_ATTENTION;
  const int32_t nin = backward ? 6 : 4, nout = backward ? 3 : 1, first = backward ? 1 : 0;
  const DK_SdpaAttrs* attrs = frame<DK_SdpaAttrs>(a, op, nin, DK_SdpaAttrs_STRUCT_SIZE, nout);
  if (!attrs || (attrs->is_causal != 0 && attrs->is_causal != 1)) return 0;
  const int32_t t = dtype_of<T>();
  for (int32_t i = 0; i < nin - 1; ++i)
    if (!strided_as(a->inputs[i], t, 4)) return 0;
  for (int32_t o = 0; o < nout; ++o)
    if (!a->outputs[o] || !dense_as(a->outputs[o], t) || a->outputs[o]->rank != 4) return 0;
  const int64_t d = a->inputs[first]->shape[3], dv = a->inputs[first + 2]->shape[3];
  if (d > kMaxHead || dv > kMaxHead) return 0;
  return mask_kind_of<T>(attrs, a->inputs[nin - 1]) >= 0;
}
template <class T> int32_t sdpa_supports(const DK_Kernel_Args* a) {
  return sdpa_supports_op<T>(a, false);
}
template <class T> int32_t sdpa_backward_supports(const DK_Kernel_Args* a) {
  return sdpa_supports_op<T>(a, true);
}

bool dims_are(const DK_TensorView* v, int64_t a, int64_t b, int64_t c, int64_t d) {
  return v->shape[0] == a && v->shape[1] == b && v->shape[2] == c && v->shape[3] == d;
}

// Strides of a view the kernels index (0 for an empty one, never read).
void strides_of(const DK_TensorView* v, int64_t* s) {
  const bool empty = numel(v) == 0;
  for (int d = 0; d < 4; ++d) s[d] = empty ? 0 : v->strides[d];
}

template <class T> DK_Error* launch_sdpa(const char* call, const DK_Kernel_Args* a, bool backward,
                                         DK_FusedSupportsFn* supports) {
  return guarded(call, [&]() -> DK_Error* {
    const int32_t op = backward ? DK_FUSED_SCALED_DOT_PRODUCT_ATTENTION_BACKWARD
                                : DK_FUSED_SCALED_DOT_PRODUCT_ATTENTION;
    const int32_t nin = backward ? 6 : 4, nout = backward ? 3 : 1, first = backward ? 1 : 0;
    Launch l;
    if (DK_Error* e = begin(call, a, op, nin, nout, supports, &l)) return e;
    const DK_TensorView *q = a->inputs[first], *k = a->inputs[first + 1], *v = a->inputs[first + 2],
                        *mask = a->inputs[nin - 1];
    const int64_t B = q->shape[0], Hq = q->shape[1], Lq = q->shape[2], D = q->shape[3];
    const int64_t Hkv = k->shape[1], Lk = k->shape[2], Dv = v->shape[3];
    bool fits = Hkv >= 1 && Hq % Hkv == 0 && dims_are(k, B, Hkv, Lk, D) &&
                dims_are(v, B, Hkv, Lk, Dv) && (!mask || dims_are(mask, B, Hq, Lq, Lk));
    if (backward)
      fits = fits && dims_are(a->inputs[0], B, Hq, Lq, Dv) &&
             dims_are(a->inputs[4], B, Hq, Lq, Dv) && dims_are(a->outputs[0], B, Hq, Lq, D) &&
             dims_are(a->outputs[1], B, Hkv, Lk, D) && dims_are(a->outputs[2], B, Hkv, Lk, Dv);
    else fits = fits && dims_are(a->outputs[0], B, Hq, Lq, Dv);
    if (!fits) {
      char sq[96], sk[96], sv[96], sm[96], so[96];
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: shapes q %s, k %s, v %s, mask %s, output 0 %s do not fit q "
                       "[B,Hq,Lq,D], k [B,Hkv,Lk,D], v [B,Hkv,Lk,Dv], mask [B,Hq,Lq,Lk], out, "
                       "dout [B,Hq,Lq,Dv] (dq, dk, dv: q's, k's, v's) with Hq a multiple of Hkv",
                       call, dkh_dims(q, sq, sizeof sq), dkh_dims(k, sk, sizeof sk),
                       dkh_dims(v, sv, sizeof sv), mask ? dkh_dims(mask, sm, sizeof sm) : "none",
                       dkh_dims(a->outputs[0], so, sizeof so));
    }
    const DK_SdpaAttrs* attrs = static_cast<const DK_SdpaAttrs*>(a->attrs);
    SdpaArgs<T> s{};
    s.q = static_cast<const T*>(q->data);
    s.k = static_cast<const T*>(k->data);
    s.v = static_cast<const T*>(v->data);
    s.mask = mask ? mask->data : nullptr;
    s.mask_kind = mask_kind_of<T>(attrs, mask);
    s.causal = attrs->is_causal;
    s.scale = float(attrs->scale);
    strides_of(q, s.qs);
    strides_of(k, s.ks);
    strides_of(v, s.vs);
    if (mask) strides_of(mask, s.ms);
    s.b = B;
    s.hq = Hq;
    s.hkv = Hkv;
    s.lq = Lq;
    s.lk = Lk;
    s.d = D;
    s.dv_dim = Dv;
    const dk_dim3 block(kWarps * 32);
    const int64_t row_items = B * Hq * ((Lq + kWarps - 1) / kWarps);
    if (!backward) {
      s.out = static_cast<T*>(a->outputs[0]->data);
      if (row_items == 0 || Dv == 0) return nullptr;
      return launched(call, DK_LAUNCH(sdpa_forward<T>, dk_dim3(dk_grid_stride_blocks(row_items, 1)),
                                      block, l.stream, s));
    }
    s.dout = static_cast<const T*>(a->inputs[0]->data);
    strides_of(a->inputs[0], s.ds);
    s.out = static_cast<T*>(a->outputs[0]->data);
    s.dk = static_cast<T*>(a->outputs[1]->data);
    s.dv = static_cast<T*>(a->outputs[2]->data);
    const int64_t key_items = B * Hkv * ((Lk + kWarps - 1) / kWarps);
    Scratch stats;
    if (row_items > 0) {
      const std::string e = stats.allocate(l.stream, size_t(B * Hq * Lq) * 3 * sizeof(float));
      if (!e.empty())
        return dkh_error(DK_ERROR_OUT_OF_MEMORY, "%s: scratch for %lld query rows' statistics: %s",
                         call, (long long)(B * Hq * Lq), e.c_str());
      s.stats = stats.floats();
      if (DK_Error* e = launched(
              call, DK_LAUNCH(sdpa_backward_rows<T>, dk_dim3(dk_grid_stride_blocks(row_items, 1)),
                              block, l.stream, s)))
        return e;
    }
    if (key_items == 0) return nullptr;
    return launched(
        call, DK_LAUNCH(sdpa_backward_keys<T>, dk_dim3(dk_grid_stride_blocks(key_items, 1)), block,
                        l.stream, s));
  });
}

}  // namespace
}  // namespace fused
}  // namespace dkcuda

using namespace dkcuda::fused;

#define DKCUDA_SDPA_KERNELS(sfx, T)                                                                \
  extern "C" int32_t dk_cuda_fused_sdpa_##sfx##_supports(const DK_Kernel_Args* a) {                \
    return sdpa_supports<T>(a);                                                                    \
  }                                                                                                \
  extern "C" DK_Error* dk_cuda_fused_sdpa_##sfx(const DK_Kernel_Args* a) {                         \
    return launch_sdpa<T>("cuda.Fused(scaled_dot_product_attention)", a, false, sdpa_supports<T>); \
  }                                                                                                \
  extern "C" int32_t dk_cuda_fused_sdpa_backward_##sfx##_supports(const DK_Kernel_Args* a) {       \
    return sdpa_backward_supports<T>(a);                                                           \
  }                                                                                                \
  extern "C" DK_Error* dk_cuda_fused_sdpa_backward_##sfx(const DK_Kernel_Args* a) {                \
    return launch_sdpa<T>("cuda.Fused(scaled_dot_product_attention_backward)", a, true,            \
                          sdpa_backward_supports<T>);                                              \
  }
DKCUDA_SDPA_KERNELS(f32, float)
DKCUDA_SDPA_KERNELS(f16, dk_f16)
DKCUDA_SDPA_KERNELS(bf16, dk_bf16)
#undef DKCUDA_SDPA_KERNELS
