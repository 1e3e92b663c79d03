// Scalar operands and the constants cache: see scalars.h.
#include "scalars.h"

#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ops.h"  // full

namespace dk {

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
    if (op != kNoOp && float_only(op)) {
      dt = DK_DTYPE_FLOAT32;
    } else if (!int_fits(s.value.i, adt)) {
      if (op != kNoOp && is_comparison(op)) {
        dt = DK_DTYPE_INT64;
      } else {
        throw Error(ErrorKind::Overflow,
                    std::string(op != kNoOp ? op_name(op) : "scalar operand") + ": Python int " +
                        std::to_string(s.value.i) + " is out of range for " + dtype_name(adt) +
                        ", the dtype of the tensor operand " + a->describe() +
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
    return device == o.device && dtype == o.dtype && scalar_dtype == o.scalar_dtype &&
           bits == o.bits;
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
      // A graph being captured reads it on every replay: eviction must not free it.
      if (dev->capturing()) dev->keep_for_capture(t);
      if (!dev->has_failures()) return t;
      // A fill in an epoch that later failed left undefined contents: make a new one.
      try {
        dev->check_not_failed(t->storage()->written_epoch.load(std::memory_order_relaxed), "");
        return t;
      } catch (const Error&) { c.map.erase(it); }
    }
  }
  Tensor t = full(dev, {}, dt, s);  // outside the lock: it launches
  // Made inside a capture, its fill is recorded, not run: it holds its value
  // only once the graph replays, so it stays the graph's and never enters the cache.
  if (dev->capturing()) {
    dev->keep_for_capture(t);
    return t;
  }
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

}  // namespace dk
