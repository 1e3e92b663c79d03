#include "fused.h"

#include <array>

#include "ops.h"

namespace dk {
namespace {

const FusedOpSpec kFusedSpecs[] = {
#include "fused_ops_table.inc"
};
static_assert(sizeof(kFusedSpecs) / sizeof(kFusedSpecs[0]) == kNumFusedOps,
              "regenerate fused_ops_table.inc");

constexpr int kMaxInputs = 4;

// A call the operands fit: the output's shape and dtype, and the inputs as
// the kernel sees them (the SDPA mask expanded to [B,Hq,Lq,Lk]).
struct Call {
  std::array<Tensor, kMaxInputs> in;
  Dims out_shape;
  DK_DType out_dtype = DK_DTYPE_FLOAT32;
};

bool last_dim_vector(const Tensor& t, int64_t n) {
  return !t || (t->rank() == 1 && t->shape_data()[0] == n);
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
  c->out_shape = x->shape();
  c->out_dtype = x->dtype();
  switch (op) {
    case DK_FUSED_RMS_NORM:
    case DK_FUSED_LAYER_NORM: {
      if (x->rank() < 1) return false;
      const int64_t d = x->shape_data()[x->rank() - 1];
      for (int i = 1; i < spec.num_inputs; ++i) {
        if (!last_dim_vector(inputs[i], d)) return false;
      }
      return true;
    }
    case DK_FUSED_SOFTMAX:
      return x->rank() >= 1 && attrs->softmax.axis >= 0 && attrs->softmax.axis < x->rank();
    case DK_FUSED_SCALED_DOT_PRODUCT_ATTENTION: {
      const Tensor &q = inputs[0], &k = inputs[1], &v = inputs[2], &mask = inputs[3];
      if (q->rank() != 4 || k->rank() != 4 || v->rank() != 4) return false;
      const int64_t* qs = q->shape_data();
      const int64_t* ks = k->shape_data();
      const int64_t* vs = v->shape_data();
      if (ks[0] != qs[0] || vs[0] != qs[0] || vs[1] != ks[1] || vs[2] != ks[2] || ks[3] != qs[3] ||
          ks[1] < 1 || qs[1] % ks[1] != 0) {
        return false;
      }
      c->out_shape = {qs[0], qs[1], qs[2], vs[3]};
      attrs->sdpa.mask_kind = DK_SDPA_MASK_NONE;
      if (mask) {
        const Dims scores = {qs[0], qs[1], qs[2], ks[2]};
        if (!broadcasts_to(mask, scores)) return false;
        if (mask->dtype() == DK_DTYPE_BOOL) attrs->sdpa.mask_kind = DK_SDPA_MASK_BOOL;
        else if (dtype_info(mask->dtype()).is_float) attrs->sdpa.mask_kind = DK_SDPA_MASK_ADDITIVE;
        else return false;
        c->in[3] = expand(mask, scores);  // a view: broadcast dims get stride 0
      }
      return true;
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

std::string operands(const Call& c, int n, const Tensor& out) {
  std::array<const TensorImpl*, kMaxInputs> in{};
  for (int i = 0; i < n; ++i) in[i] = c.in[i].get();
  return "(" + describe_tensors(in.data(), size_t(n)) + ") -> (" + out->describe() + ")";
}

}  // namespace

const FusedOpSpec& fused_op_spec(int op) { return kFusedSpecs[op]; }

int fused_op_from_name(const std::string& name) {
  for (const FusedOpSpec& s : kFusedSpecs) {
    if (name == s.name) return s.op;
  }
  return -1;
}

bool try_fused(int op, const std::vector<Tensor>& inputs, FusedAttrs attrs, FusedHit* hit) {
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
  Call c;
  if (!fit(op, inputs, &attrs, &c)) {
    hit->declined = "the operands do not fit the op's signature";
    return false;
  }
  const int n = kFusedSpecs[op].num_inputs;

  // Views of the inputs (NULL entries for absent ones) and of the output-to-be:
  // its shape and dtype, dense strides, data NULL until a kernel accepts.
  std::array<DK_TensorView, kMaxInputs + 1> views{};
  std::array<const DK_TensorView*, kMaxInputs> in_ptrs{};
  for (int i = 0; i < n; ++i) {
    if (!c.in[i]) continue;
    views[i] = c.in[i]->as_view();
    in_ptrs[i] = &views[i];
  }
  const Dims out_strides = contiguous_strides(c.out_shape);
  DK_TensorView& ov = views[kMaxInputs];
  ov.struct_size = DK_TensorView_STRUCT_SIZE;
  ov.data = nullptr;
  ov.dtype = c.out_dtype;
  ov.rank = int32_t(c.out_shape.size());
  ov.shape = ov.rank ? c.out_shape.data() : nullptr;
  ov.strides = ov.rank ? out_strides.data() : nullptr;
  const DK_TensorView* out_ptr = &ov;

  const DK_Kernel_Args a =
      kernel_args(dev, op, in_ptrs.data(), n, &out_ptr, 1, attrs_of(op, attrs));

  for (const DK_FusedKernel* k : kernels) {
    if (k->supports(&a) != 1) continue;
    Tensor out = TensorImpl::empty(inputs[0]->device_ptr(), c.out_dtype, c.out_shape);
    ov = out->as_view();
    if (DK_Error* err = k->launch(&a)) {
      dev.plugin()->check(err, dev.ctx(("fused kernel '" + std::string(k->name) + "' for op '" +
                                        kFusedSpecs[op].name + "' " + operands(c, n, out))
                                           .c_str()));
    }
    hit->out = std::move(out);
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
