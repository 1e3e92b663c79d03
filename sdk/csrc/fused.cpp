#include "fused.h"

#include <array>

#include "ops.h"
#include "trace.h"

namespace dk {
namespace {

const FusedOpSpec kFusedSpecs[] = {
#include "fused_ops_table.inc"
};
static_assert(sizeof(kFusedSpecs) / sizeof(kFusedSpecs[0]) == kNumFusedOps,
              "regenerate fused_ops_table.inc");

constexpr int kMaxInputs = 6;   // scaled_dot_product_attention_backward
constexpr int kMaxOutputs = 3;  // layer_norm_backward, scaled_dot_product_attention_backward

// A call the operands fit: each output's shape and dtype, and the inputs as
// the kernel sees them (the SDPA mask expanded to [B,Hq,Lq,Lk]).
struct Call {
  std::array<Tensor, kMaxInputs> in;
  std::array<Dims, kMaxOutputs> out_shape;
  std::array<DK_DType, kMaxOutputs> out_dtype{};
};

bool last_dim_vector(const Tensor& t, int64_t n) {
  return !t || (t->rank() == 1 && t->shape_data()[0] == n);
}

bool same_shape(const Tensor& a, const Tensor& b) { return a->shape() == b->shape(); }

void give(Call* c, int i, const Dims& shape, DK_DType dtype) {
  c->out_shape[i] = shape;
  c->out_dtype[i] = dtype;
}

// q, k, v (and the mask, at index `mask_at` of c->in) of attention or its
// backward: the shape rules of DK_FUSED_SCALED_DOT_PRODUCT_ATTENTION. Fills
// mask_kind and expands the mask to the scores' shape.
bool fit_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                   int mask_at, FusedAttrs* attrs, Call* c) {
  if (q->rank() != 4 || k->rank() != 4 || v->rank() != 4) return false;
  const int64_t* qs = q->shape_data();
  const int64_t* ks = k->shape_data();
  const int64_t* vs = v->shape_data();
  if (ks[0] != qs[0] || vs[0] != qs[0] || vs[1] != ks[1] || vs[2] != ks[2] || ks[3] != qs[3] ||
      ks[1] < 1 || qs[1] % ks[1] != 0) {
    return false;
  }
  attrs->sdpa.mask_kind = DK_SDPA_MASK_NONE;
  if (mask) {
    const Dims scores = {qs[0], qs[1], qs[2], ks[2]};
    if (!broadcasts_to(mask, scores)) return false;
    if (mask->dtype() == DK_DTYPE_BOOL) attrs->sdpa.mask_kind = DK_SDPA_MASK_BOOL;
    else if (dtype_info(mask->dtype()).is_float) attrs->sdpa.mask_kind = DK_SDPA_MASK_ADDITIVE;
    else return false;
    c->in[mask_at] = expand(mask, scores);  // a view: broadcast dims get stride 0
  }
  return true;
}

// The signatures of DK_FusedOpId. A call that does not fit is never offered to
// a kernel, so kernels can trust shapes; the decomposition then reports (or
// broadcasts) as it always does.
bool fit(int op, const std::vector<Tensor>& inputs, FusedAttrs* attrs, Call* c) {
  const FusedOpSpec& spec = kFusedSpecs[op];
  if (int(inputs.size()) != spec.num_inputs) return false;
  for (int i = 0; i < spec.num_inputs; ++i) {
    if (!inputs[i] && i < spec.num_required_inputs) return false;
    if (inputs[i] && &inputs[i]->device() != &inputs[0]->device()) return false;
    c->in[i] = inputs[i];
  }
  const Tensor& x = inputs[0];
  switch (op) {
    case DK_FUSED_RMS_NORM:
    case DK_FUSED_LAYER_NORM: {
      if (x->rank() < 1) return false;
      const int64_t d = x->shape_data()[x->rank() - 1];
      for (int i = 1; i < spec.num_inputs; ++i) {
        if (!last_dim_vector(inputs[i], d)) return false;
      }
      give(c, 0, x->shape(), x->dtype());
      return true;
    }
    case DK_FUSED_RMS_NORM_BACKWARD:
    case DK_FUSED_LAYER_NORM_BACKWARD: {  // dout, x, weight?
      const Tensor &dout = inputs[0], &xx = inputs[1], &w = inputs[2];
      if (xx->rank() < 1 || !same_shape(dout, xx)) return false;
      const int64_t d = xx->shape_data()[xx->rank() - 1];
      if (!last_dim_vector(w, d)) return false;
      give(c, 0, xx->shape(), xx->dtype());
      give(c, 1, {d}, w ? w->dtype() : xx->dtype());
      if (op == DK_FUSED_LAYER_NORM_BACKWARD) give(c, 2, {d}, dout->dtype());
      return true;
    }
    case DK_FUSED_SOFTMAX:
      give(c, 0, x->shape(), x->dtype());
      return x->rank() >= 1 && attrs->softmax.axis >= 0 && attrs->softmax.axis < x->rank();
    case DK_FUSED_SOFTMAX_BACKWARD: {  // dout, out
      const Tensor& out = inputs[1];
      give(c, 0, out->shape(), out->dtype());
      return same_shape(x, out) && out->rank() >= 1 && attrs->softmax.axis >= 0 &&
             attrs->softmax.axis < out->rank();
    }
    case DK_FUSED_SCALED_DOT_PRODUCT_ATTENTION: {
      const Tensor &q = inputs[0], &k = inputs[1], &v = inputs[2];
      if (!fit_attention(q, k, v, inputs[3], 3, attrs, c)) return false;
      give(c, 0, {q->shape_data()[0], q->shape_data()[1], q->shape_data()[2], v->shape_data()[3]},
           q->dtype());
      return true;
    }
    case DK_FUSED_SCALED_DOT_PRODUCT_ATTENTION_BACKWARD: {  // dout, q, k, v, out, mask?
      const Tensor &dout = inputs[0], &q = inputs[1], &k = inputs[2], &v = inputs[3];
      const Tensor& out = inputs[4];
      if (!fit_attention(q, k, v, inputs[5], 5, attrs, c)) return false;
      const Dims o = {q->shape_data()[0], q->shape_data()[1], q->shape_data()[2],
                      v->shape_data()[3]};
      if (out->shape() != o || dout->shape() != o) return false;
      give(c, 0, q->shape(), q->dtype());
      give(c, 1, k->shape(), q->dtype());
      give(c, 2, v->shape(), q->dtype());
      return true;
    }
    case DK_FUSED_GELU: give(c, 0, x->shape(), x->dtype()); return true;
    case DK_FUSED_GELU_BACKWARD: {  // dout, x
      const Tensor& xx = inputs[1];
      give(c, 0, xx->shape(), xx->dtype());
      return same_shape(x, xx);
    }
  }
  return false;
}

const void* attrs_of(int op, const FusedAttrs& a) {
  switch (op) {
#define DK_X(OP, member) \
  case DK_FUSED_##OP: return &a.member;
    DK_SDK_FUSED_OP_ATTRS(DK_X)
#undef DK_X
  }
  return nullptr;  // not reached: try_fused checked op
}

std::string operands(const Call& c, int n, const std::vector<Tensor>& outs) {
  std::array<const TensorImpl*, kMaxInputs> in{};
  for (int i = 0; i < n; ++i) in[i] = c.in[i].get();
  std::string o;
  for (const Tensor& t : outs) {
    if (!t) continue;
    o += (o.empty() ? "" : ", ") + t->describe();
  }
  return "(" + describe_tensors(in.data(), size_t(n)) + ") -> (" + o + ")";
}

}  // namespace

const FusedOpSpec& fused_op_spec(int op) { return kFusedSpecs[op]; }

int fused_op_from_name(const std::string& name) {
  for (const FusedOpSpec& s : kFusedSpecs) {
    if (name == s.name) return s.op;
  }
  return -1;
}

bool has_fused_kernel(int op, const Tensor& t) {
  return op >= 0 && op < kNumFusedOps && t && !t->device().plugin()->fused_kernels(op).empty();
}

bool try_fused(int op, const std::vector<Tensor>& inputs, FusedAttrs attrs,
               const std::vector<bool>& want, FusedHit* hit) {
  if (op < 0 || op >= kNumFusedOps || inputs.empty() || !inputs[0]) {
    hit->declined = "no tensor in the first operand";
    return false;
  }
  Device& dev = inputs[0]->device();
  const auto& kernels = dev.plugin()->fused_kernels(op);
  if (kernels.empty()) {
    hit->declined = "plugin '" + dev.plugin()->info().name + "' registers no fused kernel for it";
    return false;
  }
  const FusedOpSpec& spec = kFusedSpecs[op];
  Call c;
  if (!fit(op, inputs, &attrs, &c)) {
    hit->declined = "the operands do not fit the op's signature";
    return false;
  }
  const int n = spec.num_inputs, m = spec.num_outputs;
  if (!want.empty() && int(want.size()) != m) {
    invalid_argument(std::string("fused op '") + spec.name + "': " + std::to_string(want.size()) +
                     " output flags for " + std::to_string(m) + " outputs");
  }
  // Required outputs are always computed; an optional one only when wanted.
  std::array<bool, kMaxOutputs> wanted{};
  for (int i = 0; i < m; ++i) wanted[i] = i < spec.num_required_outputs || want.empty() || want[i];

  // Views of the inputs (NULL entries for absent ones) and of the outputs-to-be:
  // shape and dtype, dense strides, data NULL until a kernel accepts (NULL
  // views for unwanted outputs).
  std::array<DK_TensorView, kMaxInputs> in_views{};
  std::array<const DK_TensorView*, kMaxInputs> in_ptrs{};
  for (int i = 0; i < n; ++i) {
    if (!c.in[i]) continue;
    in_views[i] = c.in[i]->as_view();
    in_ptrs[i] = &in_views[i];
  }
  std::array<Dims, kMaxOutputs> out_strides;
  std::array<DK_TensorView, kMaxOutputs> out_views{};
  std::array<const DK_TensorView*, kMaxOutputs> out_ptrs{};
  for (int i = 0; i < m; ++i) {
    if (!wanted[i]) continue;
    out_strides[i] = contiguous_strides(c.out_shape[i]);
    DK_TensorView& ov = out_views[i];
    ov.struct_size = DK_TensorView_STRUCT_SIZE;
    ov.data = nullptr;
    ov.dtype = c.out_dtype[i];
    ov.rank = int32_t(c.out_shape[i].size());
    ov.shape = ov.rank ? c.out_shape[i].data() : nullptr;
    ov.strides = ov.rank ? out_strides[i].data() : nullptr;
    out_ptrs[i] = &ov;
  }

  const DK_Kernel_Args a =
      kernel_args(dev, op, in_ptrs.data(), n, out_ptrs.data(), m, attrs_of(op, attrs));

  for (const DK_FusedKernel* k : kernels) {
    if (k->supports(&a) != 1) continue;
    std::vector<Tensor> outs(static_cast<size_t>(m));
    for (int i = 0; i < m; ++i) {
      if (!wanted[i]) continue;
      outs[i] = TensorImpl::empty(inputs[0]->device_ptr(), c.out_dtype[i], c.out_shape[i]);
      out_views[i] = outs[i]->as_view();
    }
    DK_Error* err = nullptr;
    if (Recording* r = dev.recording()) {  // a capture the SDK records: not issued now
      r->add_kernel(k->launch, a, k->name, true);
    } else {
      if (dev.capturing()) {
        dev.count_captured_call();
        if (Recording* sh = dev.shadow()) sh->shadow_kernel(k->launch, a, k->name, true);
      }
      if (trace::on()) {
        trace::Span span(trace::kFused, dev, a.stream, k->name);  // the plugin owns k->name
        err = k->launch(&a);
      } else {
        err = k->launch(&a);
      }
    }
    if (err) {
      dev.plugin()->check(err, dev.ctx(("fused kernel '" + std::string(k->name) + "' for op '" +
                                        spec.name + "' " + operands(c, n, outs))
                                           .c_str()));
    }
    hit->outs = std::move(outs);
    hit->kernel = k->name;
    return true;
  }
  // Named by kernels and by the operands' dtype and layout (not their
  // shapes, so that one reason collects every call it applies to): a
  // permuted q/k/v view shows as "strided".
  std::string why;
  for (const DK_FusedKernel* k : kernels) why += (why.empty() ? "" : ", ") + std::string(k->name);
  why += " declined (operands:";
  for (int i = 0; i < n; ++i) {
    why += i ? ", " : " ";
    why += c.in[i] ? std::string(dtype_name(c.in[i]->dtype())) +
                         (c.in[i]->is_contiguous() ? " dense" : " strided")
                   : "none";
  }
  hit->declined = why + ")";
  return false;
}

}  // namespace dk
