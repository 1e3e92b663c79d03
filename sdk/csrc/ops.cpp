// The base-op front-ends: everything a plugin is spared. Each promotes and
// broadcasts its operands (promotion.h), and when a kernel lacks a dtype, the
// op runs in a dtype the kernel has, between two casts, and that is counted
// (dispatch_counts) rather than hidden.
#include "ops.h"

#include <algorithm>

namespace dk {
namespace {

bool is_float(DK_DType d) { return dtype_info(d).is_float; }

// The dtype `op` actually runs in on this plugin for operands of dtype `want`.
DK_DType compute_dtype(Plugin* p, DK_OpId op, DK_DType want) {
  const uint64_t have = p->kernel_dtypes(op);
  if (p->kernel(op) == nullptr || (have & DK_DTYPE_BIT(want))) return want;
  // Wider types of the same kind first, so no value is lost.
  static const DK_DType kFloat[] = {DK_DTYPE_FLOAT32, DK_DTYPE_FLOAT64};
  static const DK_DType kInt[] = {DK_DTYPE_INT64, DK_DTYPE_INT32, DK_DTYPE_FLOAT64};
  static const DK_DType kBool[] = {DK_DTYPE_UINT8, DK_DTYPE_INT32, DK_DTYPE_INT64,
                                   DK_DTYPE_FLOAT32};
  const DK_DType* c = is_float(want) ? kFloat : want == DK_DTYPE_BOOL ? kBool : kInt;
  const int n = is_float(want) ? 2 : want == DK_DTYPE_BOOL ? 4 : 3;
  for (int i = 0; i < n; ++i) {
    if (have & DK_DTYPE_BIT(c[i])) return c[i];
  }
  return want;  // launch() reports what the kernel declares
}

DK_DType out_dtype(DK_OpId op, DK_DType in) {
  switch (op_spec(op).out) {
    case OutDType::Bool: return DK_DTYPE_BOOL;
    case OutDType::Int64: return DK_DTYPE_INT64;
    default: return in;
  }
}

// Elementwise launch over broadcast inputs already in the compute dtype.
Tensor elementwise(DK_OpId op, std::vector<Tensor> in, DK_DType result) {
  Dims shape = in[0]->shape();
  for (size_t i = 1; i < in.size(); ++i) shape = broadcast_shapes(shape, in[i]->shape());
  const std::shared_ptr<Device>& dev = in[0]->device_ptr();
  const uint32_t caps = dev->plugin()->kernel_caps(op);
  for (Tensor& t : in) t = prepare_input(t, shape, caps);
  Tensor out = TensorImpl::empty(dev, result, shape);
  if (out->numel() == 0) return out;
  switch (in.size()) {
    case 1: launch(op, {in[0].get()}, {out.get()}); break;
    case 2: launch(op, {in[0].get(), in[1].get()}, {out.get()}); break;
    default: launch(op, {in[0].get(), in[1].get(), in[2].get()}, {out.get()}); break;
  }
  return out;
}

// Runs `body(compute dtype)` on operands of dtype `dt`; when the plugin lacks
// dt for `op`, the operands are cast to what it has and the result back.
template <class Body>
Tensor with_dtype_fallback(DK_OpId op, const Device& dev, DK_DType dt, DK_DType result, Body body) {
  const DK_DType c = compute_dtype(dev.plugin(), op, dt);
  if (c == dt) return body(dt);
  count_cast_inserted(op);
  return cast(body(c), result);
}

}  // namespace

Tensor full(const std::shared_ptr<Device>& dev, const Dims& shape, DK_DType dt,
            const DK_Scalar& value) {
  Tensor out = TensorImpl::empty(dev, dt, shape);
  if (out->numel() > 0) {
    DK_FillAttrs attrs{};
    attrs.struct_size = DK_FillAttrs_STRUCT_SIZE;
    attrs.value = value;
    launch(DK_OP_FILL, {}, {out.get()}, &attrs);
  }
  return out;
}

Tensor add(const Tensor& a, const Tensor& b) {
  // Fast path for the common case in models: same device, dtype and shape, a
  // dtype the kernel declares. Everything else (promotion, broadcasting, dtype
  // fallback) goes through the generic path that every binary op shares.
  Plugin* p = a->device().plugin();
  const bool fast = &a->device() == &b->device() && a->dtype() == b->dtype() &&
                    a->rank() == b->rank() &&
                    std::equal(a->shape_data(), a->shape_data() + a->rank(), b->shape_data()) &&
                    (p->kernel_dtypes(DK_OP_ADD) & DK_DTYPE_BIT(a->dtype()));
  if (!fast) return binary(DK_OP_ADD, a, b);
  const bool strided_ok = p->kernel_caps(DK_OP_ADD) & DK_KERNEL_CAP_STRIDED;
  const Tensor x = strided_ok ? a : contiguous(a), y = strided_ok ? b : contiguous(b);
  Tensor out = TensorImpl::empty(a->device_ptr(), a->dtype(), a->rank(), a->shape_data());
  if (out->numel() > 0) launch(DK_OP_ADD, {x.get(), y.get()}, {out.get()});
  return out;
}

Tensor pack(const std::vector<Tensor>& ts) {
  if (ts.empty()) invalid_argument("pack: got no tensors");
  const Tensor& first = ts.front();
  int64_t total = 0;
  for (const Tensor& t : ts) {
    if (&t->device() != &first->device() || t->dtype() != first->dtype()) {
      invalid_argument("pack: every tensor must have the device and dtype of tensor 0 (" +
                       first->describe() + "), got " + t->describe());
    }
    total += t->numel();
  }
  Tensor out = TensorImpl::empty(first->device_ptr(), first->dtype(), Dims{total});
  int64_t offset = 0;
  for (const Tensor& t : ts) {
    if (t->numel() > 0) {
      // The piece of `out` that `t` fills, in t's shape: one copy launch,
      // written before `out` is handed to anybody.
      const Dims shape = t->shape();
      const Tensor piece = out->view(shape, contiguous_strides(shape), out->offset() + offset);
      launch(DK_OP_COPY, {t.get()}, {piece.get()});
    }
    offset += t->numel();
  }
  return out;
}

namespace {

// The view of `out` covering [start, start + size) along `dim`.
Tensor slice_of(const Tensor& out, int dim, int64_t start, int64_t size) {
  Dims shape = out->shape();
  shape[dim] = size;
  const int64_t offset = out->offset() + (size ? start * out->strides_data()[dim] : 0);
  return out->view(shape, out->strides(), offset);
}

void check_dim(const char* call, const Tensor& t, int dim) {
  if (dim < 0 || dim >= t->rank()) {
    invalid_argument(std::string(call) + ": dim " + std::to_string(dim) + " is out of range for " +
                     t->describe());
  }
}

}  // namespace

Tensor cat(const std::vector<Tensor>& ts, int dim) {
  if (ts.empty()) invalid_argument("cat: got no tensors");
  const Tensor& first = ts.front();
  check_dim("cat", first, dim);
  Dims shape = first->shape();
  int64_t total = 0;
  for (const Tensor& t : ts) {
    bool same = &t->device() == &first->device() && t->dtype() == first->dtype() &&
                t->rank() == first->rank();
    for (int d = 0; same && d < t->rank(); ++d) same = d == dim || t->shape()[d] == shape[d];
    if (!same) {
      invalid_argument("cat: " + t->describe() + " does not match " + first->describe() +
                       " (same device, dtype and every dim but " + std::to_string(dim) + ")");
    }
    total += t->shape()[dim];
  }
  shape[dim] = total;
  Tensor out = TensorImpl::empty(first->device_ptr(), first->dtype(), shape);
  int64_t start = 0;
  for (const Tensor& t : ts) {
    const int64_t n = t->shape()[dim];
    if (t->numel() > 0) {  // written before `out` is handed to anybody
      const Tensor piece = slice_of(out, dim, start, n);
      launch(DK_OP_COPY, {t.get()}, {piece.get()});
    }
    start += n;
  }
  return out;
}

Tensor narrow_into(const Tensor& g, const Dims& shape, int dim, int64_t start,
                   const DK_Scalar& fill) {
  check_dim("narrow_into", g, dim);
  bool fits = int(shape.size()) == g->rank() && start >= 0 && start + g->shape()[dim] <= shape[dim];
  for (int d = 0; fits && d < g->rank(); ++d) fits = d == dim || g->shape()[d] == shape[d];
  if (!fits) {
    invalid_argument("narrow_into: " + g->describe() + " at " + std::to_string(start) +
                     " along dim " + std::to_string(dim) + " does not fit " + dims_str(shape));
  }
  Tensor out = full(g->device_ptr(), shape, g->dtype(), fill);
  if (g->numel() > 0) {
    const Tensor piece = slice_of(out, dim, start, g->shape()[dim]);
    launch(DK_OP_COPY, {g.get()}, {piece.get()});
  }
  return out;
}

void copy_into(const Tensor& dst, const Tensor& src) {
  check_same_device("copy_into", {dst.get(), src.get()});
  if (dst->numel() == 0) return;
  Tensor v = expand(cast(src, dst->dtype()), dst->shape());
  if (v->storage() == dst->storage()) {
    // A source aliasing the destination (x.copy_(x.t())) would be read while
    // it is written: take it out to a fresh buffer first.
    Tensor fresh = TensorImpl::empty(v->device_ptr(), v->dtype(), v->rank(), v->shape_data());
    launch(DK_OP_COPY, {v.get()}, {fresh.get()});
    v = fresh;
  }
  launch(DK_OP_COPY, {v.get()}, {dst.get()});
}

namespace {

// Whether t's elements lie in dst's storage, where dst also lies.
bool shares_storage(const Tensor& t, const Tensor& dst) { return t->storage() == dst->storage(); }

bool same_view(const Tensor& x, const Tensor& y) {
  return x->storage() == y->storage() && x->offset() == y->offset() && x->shape() == y->shape() &&
         x->strides() == y->strides();
}

}  // namespace

void binary_into(DK_OpId op, const Tensor& dst, const Tensor& a, const Tensor& b) {
  check_same_device(op_name(op), {dst.get(), a.get(), b.get()});
  const DK_DType dt = dst->dtype();
  Plugin* p = dst->device().plugin();
  const uint32_t caps = p->kernel_caps(op);
  bool direct = (op == DK_OP_ADD || op == DK_OP_SUB || op == DK_OP_MUL || op == DK_OP_DIV) &&
                a->dtype() == dt && b->dtype() == dt && is_float(dt) &&
                (p->kernel_dtypes(op) & DK_DTYPE_BIT(dt)) && dst->is_contiguous() &&
                broadcast_shapes(a->shape(), b->shape()) == dst->shape();
  Tensor x, y;
  if (direct) {
    // The inputs as the kernel takes them: a materialised input is a fresh
    // buffer, so only an input passed through as it is can alias dst.
    x = prepare_input(a, dst->shape(), caps);
    y = prepare_input(b, dst->shape(), caps);
    const bool x_ok =
        !shares_storage(x, dst) || (same_view(x, dst) && (caps & DK_KERNEL_CAP_INPLACE));
    direct = x_ok && !shares_storage(y, dst);
  }
  if (!direct) return copy_into(dst, binary(op, a, b));
  if (dst->numel() > 0) launch(op, {x.get(), y.get()}, {dst.get()});
}

Tensor unary(DK_OpId op, const Tensor& x) {
  // Float-only ops take integers and bools as float32, like PyTorch.
  DK_DType dt = x->dtype();
  if (float_only(op) && !is_float(dt)) dt = DK_DTYPE_FLOAT32;
  if (op == DK_OP_LOGICAL_NOT) dt = DK_DTYPE_BOOL;
  const Tensor src = cast(x, dt);
  const DK_DType result = out_dtype(op, dt);
  return with_dtype_fallback(op, x->device(), dt, result, [&](DK_DType c) {
    return elementwise(op, {cast(src, c)}, out_dtype(op, c));
  });
}

Tensor binary(DK_OpId op, const Tensor& a, const Tensor& b) {
  check_same_device(op_name(op), {a.get(), b.get()});
  DK_DType dt = promote_types(a->dtype(), b->dtype());
  if (op == DK_OP_SUB && dt == DK_DTYPE_BOOL) {
    // As in numpy and PyTorch: bool - bool has no boolean meaning.
    throw Error(ErrorKind::DTypeMismatch,
                "sub: subtracting bool tensors is not supported (" + a->describe() + " - " +
                    b->describe() +
                    "); use logical_xor, or convert an operand to an integer dtype");
  }
  if (float_only(op) && !is_float(dt)) dt = DK_DTYPE_FLOAT32;  // true division, pow
  if (op_spec(op).dtypes == DK_DTYPE_BIT(DK_DTYPE_BOOL)) dt = DK_DTYPE_BOOL;  // logical ops
  const Tensor x = cast(a, dt), y = cast(b, dt);
  const DK_DType result = out_dtype(op, dt);
  return with_dtype_fallback(op, a->device(), dt, result, [&](DK_DType c) {
    return elementwise(op, {cast(x, c), cast(y, c)}, out_dtype(op, c));
  });
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_same_device("where", {cond.get(), a.get(), b.get()});
  const DK_DType dt = promote_types(a->dtype(), b->dtype());
  const Tensor c = cast(cond, DK_DTYPE_BOOL), x = cast(a, dt), y = cast(b, dt);
  return with_dtype_fallback(DK_OP_WHERE, a->device(), dt, dt, [&](DK_DType k) {
    return elementwise(DK_OP_WHERE, {c, cast(x, k), cast(y, k)}, k);
  });
}

namespace {

// Launch an op with one input, one output of `out_shape`, and attributes.
Tensor single(DK_OpId op, const Tensor& x, const Dims& out_shape, DK_DType out_dt,
              const void* attrs) {
  const Tensor src = contiguous(x);  // none of these ops takes strided input from the SDK
  Tensor out = TensorImpl::empty(x->device_ptr(), out_dt, out_shape);
  if (out->numel() > 0) launch(op, {src.get()}, {out.get()}, attrs);
  return out;
}

}  // namespace

Tensor reduce(DK_OpId op, const Tensor& x, uint32_t axes) {
  const int r = x->rank();
  Dims shape = x->shape();
  bool empty_reduction = false;
  for (int d = 0; d < r; ++d) {
    if (axes & (1u << d)) {
      empty_reduction |= shape[d] == 0;
      shape[d] = 1;
    }
  }
  if (empty_reduction && op != DK_OP_REDUCE_SUM) {
    invalid_argument(std::string(op_name(op)) + " of " + x->describe() +
                     " reduces over an empty dimension, which has no identity");
  }
  // Sums of integers and bools are int64 (as in PyTorch), so they do not wrap early.
  DK_DType dt = x->dtype();
  if (op == DK_OP_REDUCE_SUM && !is_float(dt)) dt = DK_DTYPE_INT64;
  const Tensor src = cast(x, dt);
  if (r == 0 || axes == 0) return contiguous(src);  // nothing to reduce
  DK_ReduceAttrs attrs{};
  attrs.struct_size = DK_ReduceAttrs_STRUCT_SIZE;
  attrs.axes = axes;
  return with_dtype_fallback(op, x->device(), dt, dt, [&](DK_DType c) {
    return single(op, cast(src, c), shape, c, &attrs);
  });
}

Tensor argmax(const Tensor& x, int axis) {
  const uint32_t a = normalise_axis(axis, x->rank(), "argmax");
  if (x->rank() == 0)
    return full(x->device_ptr(), {}, DK_DTYPE_INT64, DK_Scalar{DK_DTYPE_INT64, {0}});
  Dims shape = x->shape();
  if (shape[a] == 0) invalid_argument("argmax of " + x->describe() + " along an empty axis");
  shape[a] = 1;
  DK_AxisAttrs attrs{};
  attrs.struct_size = DK_AxisAttrs_STRUCT_SIZE;
  attrs.axis = int32_t(a);
  const DK_DType c = compute_dtype(x->device().plugin(), DK_OP_ARGMAX, x->dtype());
  if (c != x->dtype()) count_cast_inserted(DK_OP_ARGMAX);
  return single(DK_OP_ARGMAX, cast(x, c), shape, DK_DTYPE_INT64, &attrs);
}

Tensor cumsum(const Tensor& x, int axis) {
  const uint32_t a = normalise_axis(axis, x->rank(), "cumsum");
  DK_DType dt = is_float(x->dtype()) ? x->dtype() : DK_DTYPE_INT64;
  if (x->rank() == 0) return cast(x, dt);
  const Tensor src = cast(x, dt);
  DK_AxisAttrs attrs{};
  attrs.struct_size = DK_AxisAttrs_STRUCT_SIZE;
  attrs.axis = int32_t(a);
  return with_dtype_fallback(DK_OP_CUMSUM, x->device(), dt, dt, [&](DK_DType c) {
    return single(DK_OP_CUMSUM, cast(src, c), src->shape(), c, &attrs);
  });
}

Tensor iota(const std::shared_ptr<Device>& dev, const Dims& shape, DK_DType dt, int axis,
            const DK_Scalar& start, const DK_Scalar& step) {
  const uint32_t a = normalise_axis(axis, int(shape.size()), "iota");
  DK_IotaAttrs attrs{};
  attrs.struct_size = DK_IotaAttrs_STRUCT_SIZE;
  attrs.axis = int32_t(a);
  attrs.start = start;
  attrs.step = step;
  return with_dtype_fallback(DK_OP_IOTA, *dev, dt, dt, [&](DK_DType c) {
    Tensor out = TensorImpl::empty(dev, c, shape);
    if (out->numel() > 0) launch(DK_OP_IOTA, {}, {out.get()}, &attrs);
    return out;
  });
}

// `t` as op's kernel takes it: as it is when the kernel declared
// DK_KERNEL_CAP_STRIDED (a transposed weight, an expanded index), else dense.
static Tensor laid_out(DK_OpId op, const Tensor& t) {
  const bool strided_ok = t->device().plugin()->kernel_caps(op) & DK_KERNEL_CAP_STRIDED;
  return strided_ok ? t : contiguous(t);
}

Tensor gather(const Tensor& x, int axis, const Tensor& index) {
  check_same_device("gather", {x.get(), index.get()});
  const uint32_t a = normalise_axis(axis, x->rank(), "gather");
  if (index->dtype() != DK_DTYPE_INT64 || index->rank() != x->rank()) {
    invalid_argument("gather: index must be int64 with the rank of x; got x " + x->describe() +
                     ", index " + index->describe());
  }
  DK_AxisAttrs attrs{};
  attrs.struct_size = DK_AxisAttrs_STRUCT_SIZE;
  attrs.axis = int32_t(a);
  const Tensor idx = laid_out(DK_OP_GATHER, index);
  return with_dtype_fallback(DK_OP_GATHER, x->device(), x->dtype(), x->dtype(), [&](DK_DType c) {
    const Tensor src = laid_out(DK_OP_GATHER, cast(x, c));
    Tensor out = TensorImpl::empty(x->device_ptr(), c, index->shape());
    if (out->numel() > 0) launch(DK_OP_GATHER, {src.get(), idx.get()}, {out.get()}, &attrs);
    return out;
  });
}

Tensor scatter_add(const Tensor& x, int axis, const Tensor& index, const Tensor& src) {
  check_same_device("scatter_add", {x.get(), index.get(), src.get()});
  const uint32_t a = normalise_axis(axis, x->rank(), "scatter_add");
  if (index->dtype() != DK_DTYPE_INT64 || index->shape() != src->shape() ||
      index->rank() != x->rank()) {
    invalid_argument("scatter_add: index must be int64 with src's shape and x's rank; got x " +
                     x->describe() + ", index " + index->describe() + ", src " + src->describe());
  }
  DK_AxisAttrs attrs{};
  attrs.struct_size = DK_AxisAttrs_STRUCT_SIZE;
  attrs.axis = int32_t(a);
  if (x->numel() == 0 && index->numel() > 0) {
    // No kernel runs for an empty output, so nothing would check the indices:
    // with x empty, every one of them is out of range.
    throw Error(ErrorKind::IndexOutOfRange,
                "scatter_add: x " + x->describe() + " is empty, so all " +
                    std::to_string(index->numel()) + " indices in " + index->describe() +
                    " are out of range for axis " + std::to_string(a));
  }
  const Tensor idx = laid_out(DK_OP_SCATTER_ADD, index);
  const DK_DType dt = x->dtype();
  return with_dtype_fallback(DK_OP_SCATTER_ADD, x->device(), dt, dt, [&](DK_DType c) {
    const Tensor base = laid_out(DK_OP_SCATTER_ADD, cast(x, c));
    const Tensor vals = laid_out(DK_OP_SCATTER_ADD, cast(src, c));
    Tensor out = TensorImpl::empty(x->device_ptr(), c, x->shape());
    if (out->numel() > 0)
      launch(DK_OP_SCATTER_ADD, {base.get(), idx.get(), vals.get()}, {out.get()}, &attrs);
    return out;
  });
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_same_device("matmul", {a.get(), b.get()});
  const int r = a->rank();
  const Dims as = a->shape(), bs = b->shape();
  if (r < 2 || b->rank() != r || !std::equal(as.begin(), as.end() - 2, bs.begin()) ||
      as[r - 1] != bs[r - 2]) {
    invalid_argument("matmul: expected [B..., M, K] @ [B..., K, N] with equal batch dims, got " +
                     a->describe() + " @ " + b->describe());
  }
  const DK_DType dt = promote_types(a->dtype(), b->dtype());
  Dims shape = as;
  shape[r - 1] = bs[r - 1];
  const Tensor x = cast(a, dt), y = cast(b, dt);
  return with_dtype_fallback(DK_OP_MATMUL, a->device(), dt, dt, [&](DK_DType c) {
    const Tensor p = laid_out(DK_OP_MATMUL, cast(x, c)), q = laid_out(DK_OP_MATMUL, cast(y, c));
    Tensor out = TensorImpl::empty(a->device_ptr(), c, shape);
    if (out->numel() == 0) return out;
    if (as[r - 1] == 0) return full(a->device_ptr(), shape, c, DK_Scalar{DK_DTYPE_INT64, {0}});
    launch(DK_OP_MATMUL, {p.get(), q.get()}, {out.get()});
    return out;
  });
}

Tensor random(DK_OpId op, const std::shared_ptr<Device>& dev, const Dims& shape, DK_DType dt,
              uint64_t seed, uint64_t offset) {
  DK_RandomAttrs attrs{};
  attrs.struct_size = DK_RandomAttrs_STRUCT_SIZE;
  attrs.seed = seed;
  attrs.offset = offset;
  // No dtype fallback: the bits are specified per output dtype, so computing
  // in another dtype and casting would give other numbers. A missing dtype is
  // reported by launch().
  Tensor out = TensorImpl::empty(dev, dt, shape);
  if (out->numel() > 0) launch(op, {}, {out.get()}, &attrs);
  return out;
}

}  // namespace dk
