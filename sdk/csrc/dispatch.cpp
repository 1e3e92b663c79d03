#include "ops.h"

#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace dk {

namespace {
const OpSpec kOpSpecs[] = {
#include "base_ops_table.inc"
};
static_assert(sizeof(kOpSpecs) / sizeof(kOpSpecs[0]) == kNumOps, "regenerate base_ops_table.inc");

struct AtomicCounts {
  std::atomic<uint64_t> kernel{0}, cast_inserted{0};
};
AtomicCounts g_counts[kNumOps];
}  // namespace

const OpSpec& op_spec(DK_OpId op) { return kOpSpecs[op]; }

const char* op_name(DK_OpId op) {
  return (op >= 0 && op < kNumOps) ? kOpSpecs[op].name : "unknown-op";
}

DK_OpId op_from_name(const std::string& name) {
  for (const OpSpec& s : kOpSpecs) {
    if (name == s.name) return s.op;
  }
  invalid_argument("unknown base op '" + name + "'");
}

DispatchCounts dispatch_counts(DK_OpId op) {
  return {g_counts[op].kernel.load(), g_counts[op].cast_inserted.load()};
}

void reset_dispatch_counts() {
  for (auto& c : g_counts) {
    c.kernel = 0;
    c.cast_inserted = 0;
  }
}

void count_cast_inserted(DK_OpId op) { g_counts[op].cast_inserted.fetch_add(1, std::memory_order_relaxed); }

namespace {

std::string operands(std::initializer_list<const TensorImpl*> in,
                     std::initializer_list<const TensorImpl*> out) {
  std::string s = "(";
  for (auto* t : in) s += (s.size() > 1 ? ", " : "") + t->describe();
  s += ") -> (";
  bool first = true;
  for (auto* t : out) {
    s += (first ? "" : ", ") + t->describe();
    first = false;
  }
  return s + ")";
}

constexpr int kMaxOperands = 8;

}  // namespace

void launch(DK_OpId op, std::initializer_list<const TensorImpl*> in,
            std::initializer_list<const TensorImpl*> out, const void* attrs) {
  const TensorImpl* first = out.size() ? *out.begin() : *in.begin();
  Device& dev = first->device();
  Plugin* plugin = dev.plugin();
  DK_KernelFn* fn = plugin->kernel(op);
  // Error text is built only when it is needed: this runs on every op call.
  auto who = [&] { return "plugin '" + plugin->info().name + "'"; };
  if (fn == nullptr) {
    throw Error(ErrorKind::NotImplemented,
                std::string("op '") + op_name(op) + "' is not implemented by " + who() +
                    " (its kernel table has no entry) for " + operands(in, out));
  }
  // Cast declares its input dtypes, where its value operands', every other op
  // its first operand's (or, with no inputs, its output's).
  const DK_DType dt = op == DK_OP_WHERE ? (*(in.begin() + 1))->dtype()
                      : in.size()       ? (*in.begin())->dtype()
                                        : first->dtype();
  const uint64_t declared = plugin->kernel_dtypes(op);
  if (!(declared & DK_DTYPE_BIT(dt))) {
    throw Error(ErrorKind::NotImplemented,
                std::string("op '") + op_name(op) + "' on " + who() + " does not support " +
                    dtype_name(dt) + " (it declares: " + dtype_mask_names(declared) + ") for " +
                    operands(in, out));
  }
  std::array<DK_TensorView, kMaxOperands> views;
  std::array<const DK_TensorView*, kMaxOperands> ptrs;
  int n = 0;
  const bool failures = dev.has_failures();
  for (auto* t : in) {
    if (&t->device() != &dev) {
      invalid_argument(std::string("op '") + op_name(op) + "': operands are on different devices " +
                       operands(in, out) + "; move them with .to(device) first");
    }
    // An input a failed kernel left behind fails this op with that error.
    if (failures) dev.check_not_failed(t->storage()->written_epoch.load(std::memory_order_relaxed), t->describe());
    views[n] = t->as_view();
    ptrs[n] = &views[n];
    ++n;
  }
  for (auto* t : out) {
    views[n] = t->as_view();
    ptrs[n] = &views[n];
    ++n;
  }
  DK_Kernel_Args a{};
  a.struct_size = DK_Kernel_Args_STRUCT_SIZE;
  a.device = dev.index();
  a.stream = dev.default_stream();
  a.op = op;
  a.num_inputs = int32_t(in.size());
  a.inputs = ptrs.data();
  a.num_outputs = int32_t(out.size());
  a.outputs = ptrs.data() + in.size();
  a.attrs = attrs;
  g_counts[op].kernel.fetch_add(1, std::memory_order_relaxed);
  const uint64_t epoch = dev.epoch();
  for (auto* t : out) t->storage()->written_epoch.store(epoch, std::memory_order_relaxed);
  DK_Error* err = fn(&a);
  if (err) plugin->check(err, dev.ctx((std::string("kernel '") + op_name(op) + "' " + operands(in, out)).c_str()));
}

DK_DType promote_types(DK_DType a, DK_DType b) {
  if (a == b) return a;
  if (a == DK_DTYPE_BOOL) return b;
  if (b == DK_DTYPE_BOOL) return a;
  const auto& ia = dtype_info(a);
  const auto& ib = dtype_info(b);
  if (ia.is_float != ib.is_float) return ia.is_float ? a : b;
  // Rank within a kind; float16 and bfloat16 tie and meet in float32, as do
  // int8 and uint8 in int32 (the smallest set member holding both; DeviceKit
  // has no int16).
  auto rank = [](DK_DType d) {
    switch (d) {
      case DK_DTYPE_UINT8: case DK_DTYPE_INT8: return 1;
      case DK_DTYPE_INT32: return 2;
      case DK_DTYPE_INT64: return 3;
      case DK_DTYPE_FLOAT16: case DK_DTYPE_BFLOAT16: return 4;
      case DK_DTYPE_FLOAT32: return 5;
      case DK_DTYPE_FLOAT64: return 6;
      default: return 0;
    }
  };
  const int ra = rank(a), rb = rank(b);
  if (ra == rb) return ia.is_float ? DK_DTYPE_FLOAT32 : DK_DTYPE_INT32;
  return ra > rb ? a : b;
}

Dims broadcast_shapes(const Dims& a, const Dims& b) {
  const size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) {
      invalid_argument("shapes " + dims_str(a) + " and " + dims_str(b) +
                       " cannot be broadcast together (dimension " + std::to_string(i) +
                       ": " + std::to_string(da) + " vs " + std::to_string(db) + ")");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor expand(const Tensor& t, const Dims& shape) {
  const int r = int(shape.size()), tr = t->rank();
  if (tr > r) {
    invalid_argument("cannot expand " + t->describe() + " to fewer dimensions " + dims_str(shape));
  }
  Dims strides(r, 0);
  for (int i = 0; i < tr; ++i) {
    const int o = r - tr + i;
    const int64_t have = t->shape_data()[i];
    if (have == shape[o]) {
      strides[o] = t->strides_data()[i];
    } else if (have != 1) {
      invalid_argument("cannot expand " + t->describe() + " to " + dims_str(shape) +
                       ": dimension " + std::to_string(i) + " is " + std::to_string(have) +
                       ", not 1");
    }
  }
  return t->view(shape, strides, t->offset());
}

Tensor contiguous(const Tensor& t) {
  if (t->is_contiguous()) return t;
  Tensor out = TensorImpl::empty(t->device_ptr(), t->dtype(), t->rank(), t->shape_data());
  if (out->numel() > 0) launch(DK_OP_COPY, {t.get()}, {out.get()});
  return out;
}

Tensor prepare_input(const Tensor& t, const Dims& shape, uint32_t caps) {
  Tensor v = t;
  const bool same_shape = t->rank() == int(shape.size()) &&
                          std::equal(shape.begin(), shape.end(), t->shape_data());
  if (!same_shape && !(caps & DK_KERNEL_CAP_BROADCAST)) v = expand(t, shape);
  if (!(caps & DK_KERNEL_CAP_STRIDED)) v = contiguous(v);
  return v;
}

Tensor cast(const Tensor& t, DK_DType dt) {
  if (t->dtype() == dt) return t;
  Tensor src = contiguous(t);
  Tensor out = TensorImpl::empty(t->device_ptr(), dt, t->rank(), t->shape_data());
  if (out->numel() > 0) launch(DK_OP_CAST, {src.get()}, {out.get()});
  return out;
}

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

namespace {

bool int_fits(int64_t v, DK_DType dt) {
  switch (dt) {
    case DK_DTYPE_INT8: return v >= -128 && v <= 127;
    case DK_DTYPE_UINT8: return v >= 0 && v <= 255;
    case DK_DTYPE_INT32: return v >= INT32_MIN && v <= INT32_MAX;
    default: return true;  // int64 (to_scalar refused anything wider), floats
  }
}

bool is_comparison(DK_OpId op) {
  return op == DK_OP_EQ || op == DK_OP_NE || op == DK_OP_LT || op == DK_OP_LE;
}

}  // namespace

Tensor scalar_like(const Tensor& a, const DK_Scalar& s, DK_OpId op) {
  const bool s_float = s.dtype == DK_DTYPE_FLOAT64;
  const DK_DType adt = a->dtype();
  const bool a_float = dtype_info(adt).is_float;
  DK_DType dt = adt;
  if (s_float && !a_float) {
    dt = DK_DTYPE_FLOAT32;  // int tensor + 2.5
  } else if (s.dtype == DK_DTYPE_INT64 && adt == DK_DTYPE_BOOL) {
    dt = DK_DTYPE_INT64;
  } else if (s.dtype == DK_DTYPE_INT64 && !a_float) {
    // An int that the tensor's integer dtype cannot hold is never wrapped
    // into it. An op that computes in floating point (true division, pow)
    // takes the scalar as float32, which is what it computes in anyway
    // (uint8 [4, 254] / -2 -> [-2, -127], as in numpy and PyTorch); a
    // comparison compares exactly in int64; any other op is refused, as in
    // numpy 2 ("Python integer 300 out of bounds for uint8").
    const uint64_t float_ops = DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) |
                               DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64);
    if (op != DK_OP_COUNT_1_1 && (op_spec(op).dtypes & ~float_ops) == 0) {
      dt = DK_DTYPE_FLOAT32;
    } else if (!int_fits(s.value.i, adt)) {
      if (op != DK_OP_COUNT_1_1 && is_comparison(op)) {
        dt = DK_DTYPE_INT64;
      } else {
        throw Error(ErrorKind::Overflow,
                    std::string(op != DK_OP_COUNT_1_1 ? op_name(op) : "scalar operand") +
                        ": Python int " + std::to_string(s.value.i) + " is out of range for " +
                        dtype_name(adt) + ", the dtype of the tensor operand " + a->describe() +
                        "; convert the tensor first (e.g. x.to(devicekit.int64))");
      }
    }
  }
  return constant(a->device_ptr(), dt, s);
}

namespace {

// The constants scalar_like made, per (device, dtype, scalar): a model's
// Python scalars (0.5, 1e-5, an optimizer's betas) recur on every step, and
// each would otherwise cost an allocation and a `fill` launch. The tensors
// are never handed to Python and no op writes its inputs, so a cached one
// keeps its value; holding it keeps its block out of the allocator's reach.
// Bounded: the oldest entry goes first (an optimizer's bias corrections
// change every step).
struct ConstantKey {
  const Device* device;
  int32_t dtype, scalar_dtype;
  uint64_t bits;
  bool operator==(const ConstantKey& o) const {
    return device == o.device && dtype == o.dtype && scalar_dtype == o.scalar_dtype && bits == o.bits;
  }
};

struct ConstantKeyHash {
  size_t operator()(const ConstantKey& k) const {
    size_t h = std::hash<const void*>()(k.device);
    for (uint64_t v : {uint64_t(k.dtype), uint64_t(k.scalar_dtype), k.bits})
      h ^= std::hash<uint64_t>()(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
  }
};

constexpr size_t kMaxConstants = 256;

struct ConstantCache {
  std::mutex mu;
  std::unordered_map<ConstantKey, Tensor, ConstantKeyHash> map;
  std::deque<ConstantKey> order;  // insertion order, for eviction
};

// Never destroyed: the tensors must not outlive their plugin at exit.
ConstantCache& constant_cache() {
  static ConstantCache* cache = new ConstantCache();
  return *cache;
}

}  // namespace

Tensor constant(const std::shared_ptr<Device>& dev, DK_DType dt, const DK_Scalar& s) {
  uint64_t bits = 0;
  static_assert(sizeof(s.value) == sizeof(bits), "DK_Scalar's value is 8 bytes");
  std::memcpy(&bits, &s.value, sizeof(bits));
  const ConstantKey key{dev.get(), int32_t(dt), s.dtype, bits};
  ConstantCache& c = constant_cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.map.find(key);
    if (it != c.map.end()) {
      const Tensor t = it->second;
      if (!dev->has_failures()) return t;
      // A fill in an epoch that later failed left undefined contents: make a new one.
      try {
        dev->check_not_failed(t->storage()->written_epoch.load(std::memory_order_relaxed), "");
        return t;
      } catch (const Error&) {
        c.map.erase(it);
      }
    }
  }
  Tensor t = full(dev, {}, dt, s);  // outside the lock: it launches
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.map.emplace(key, t).second) {
    c.order.push_back(key);
    while (c.order.size() > kMaxConstants) {
      c.map.erase(c.order.front());
      c.order.pop_front();
    }
  }
  return t;
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

void drop_constants(const Device* dev) {
  ConstantCache& c = constant_cache();
  std::vector<Tensor> dropped;  // released after the lock
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto it = c.map.begin(); it != c.map.end();) {
    if (it->first.device == dev) {
      dropped.push_back(std::move(it->second));
      it = c.map.erase(it);
    } else {
      ++it;
    }
  }
  std::deque<ConstantKey> kept;
  for (const ConstantKey& k : c.order)
    if (c.map.count(k)) kept.push_back(k);
  c.order.swap(kept);
}

namespace {

void memcpy_sync(Device& dev, DK_CopyKind kind, void* dst, const void* src, size_t n) {
  if (n == 0) return;
  // Enqueued on the default stream so it is ordered after the kernels that
  // produced (or last used) the device memory; then waited for, because the
  // host buffer belongs to the caller.
  dev.memcpy(kind, dst, src, n, dev.default_stream());
  dev.synchronize(dev.default_stream());
}

}  // namespace

Tensor from_host(const std::shared_ptr<Device>& dev, DK_DType dt, const Dims& shape,
                 const void* host) {
  Tensor t = TensorImpl::empty(dev, dt, shape);
  memcpy_sync(*dev, DK_COPY_HOST_TO_DEVICE, t->data(), host,
              size_t(t->numel()) * dtype_info(dt).itemsize);
  return t;
}

void to_host(const Tensor& t, void* host, size_t nbytes) {
  Device& dev = t->device();
  if (dev.has_failures()) dev.check_not_failed(t->storage()->written_epoch.load(), t->describe());
  Tensor c = contiguous(t);
  const size_t need = size_t(c->numel()) * dtype_info(c->dtype()).itemsize;
  if (nbytes != need) {
    invalid_argument("to_host: host buffer has " + std::to_string(nbytes) + " bytes, " +
                     t->describe() + " needs " + std::to_string(need));
  }
  memcpy_sync(c->device(), DK_COPY_DEVICE_TO_HOST, host, c->data(), need);
}

Tensor to_device(const Tensor& t, const std::shared_ptr<Device>& dev) {
  if (&t->device() == dev.get()) return t;
  // Across plugins there is no shared address space: stage through the host.
  std::vector<char> staging(size_t(t->numel()) * dtype_info(t->dtype()).itemsize);
  to_host(t, staging.data(), staging.size());
  return from_host(dev, t->dtype(), t->shape(), staging.data());
}

}  // namespace dk
