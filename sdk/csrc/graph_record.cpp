// SDK-side graph recording and replay: see graph_record.h.
#include "graph_record.h"

#include <cstring>

#include "device.h"
#include "errors.h"

namespace dk {

namespace {
// An attribute struct begins with its struct_size; anything larger than this
// is not one the SDK builds (they are a few dozen bytes).
constexpr size_t kMaxAttrsBytes = 4096;
}  // namespace

void Recording::add_kernel(DK_KernelFn* fn, const DK_Kernel_Args& a, const char* name, bool fused,
                           bool random) {
  auto c = std::make_unique<Call>();
  c->fn = fn;
  c->name = name;
  c->fused = fused;
  c->random = random;
  c->args = a;
  const int32_t n = a.num_inputs + a.num_outputs;
  c->views.resize(size_t(n));
  c->ptrs.assign(size_t(n), nullptr);
  size_t ndims = 0;
  auto view_at = [&](int32_t i) {
    return i < a.num_inputs ? a.inputs[i] : a.outputs[i - a.num_inputs];
  };
  for (int32_t i = 0; i < n; ++i) {
    if (const DK_TensorView* v = view_at(i)) ndims += 2 * size_t(v->rank);
  }
  c->dims.resize(ndims);  // sized once: the views point into it
  size_t at = 0;
  for (int32_t i = 0; i < n; ++i) {
    const DK_TensorView* v = view_at(i);
    if (v == nullptr) continue;
    DK_TensorView& w = c->views[size_t(i)];
    w = *v;
    if (v->rank > 0) {
      std::memcpy(&c->dims[at], v->shape, sizeof(int64_t) * size_t(v->rank));
      w.shape = &c->dims[at];
      at += size_t(v->rank);
      std::memcpy(&c->dims[at], v->strides, sizeof(int64_t) * size_t(v->rank));
      w.strides = &c->dims[at];
      at += size_t(v->rank);
    }
    c->ptrs[size_t(i)] = &w;
  }
  c->args.inputs = c->ptrs.data();
  c->args.outputs = c->ptrs.data() + a.num_inputs;
  if (a.attrs != nullptr) {
    size_t bytes = 0;
    std::memcpy(&bytes, a.attrs, sizeof bytes);  // every attribute struct begins with it
    if (bytes < sizeof(size_t) || bytes > kMaxAttrsBytes) {
      invalid_argument(std::string("devicekit.graphs.capture: cannot record '") + name +
                       "': its attribute struct says struct_size=" + std::to_string(bytes));
    }
    c->attrs.assign((bytes + 7) / 8, 0);
    std::memcpy(c->attrs.data(), a.attrs, bytes);
    c->args.attrs = c->attrs.data();
  }
  if (random && (a.attrs == nullptr || c->attrs.size() * 8 < sizeof(DK_RandomAttrs))) {
    invalid_argument(std::string("devicekit.graphs.capture: cannot record random op '") + name +
                     "': its attributes are not a DK_RandomAttrs");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (random) ++random_calls_;
  calls_.push_back(std::move(c));
}

void Recording::add_copy(void* dst, const void* src, size_t n) {
  auto c = std::make_unique<Call>();
  c->copy = true;
  c->name = "Memcpy(d2d)";
  c->dst = dst;
  c->src = src;
  c->bytes = n;
  std::lock_guard<std::mutex> lock(mu_);
  calls_.push_back(std::move(c));
}

void Recording::add_event(DK_Event* event, bool wait) {
  auto c = std::make_unique<Call>();
  c->event = wait ? 2 : 1;
  c->name = wait ? "Stream_WaitEvent" : "Event_Record";
  c->ev = event;
  std::lock_guard<std::mutex> lock(mu_);
  calls_.push_back(std::move(c));
  ++event_calls_;
}

size_t Recording::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_.size() - event_calls_;
}

size_t Recording::random_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return random_calls_;
}

void Recording::shadow_kernel(DK_KernelFn* fn, const DK_Kernel_Args& a, const char* name,
                              bool fused, bool random) noexcept {
  try {
    add_kernel(fn, a, name, fused, random);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (random) ++random_calls_;
    if (!incomplete_.empty()) return;
    try {
      incomplete_ = std::string("a launch of '") + name + "' the recording could not copy";
    } catch (...) {
      incomplete_ = "a launch";  // (fits the small-string buffer: no allocation)
    }
  }
}

void Recording::mark_incomplete(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (incomplete_.empty()) incomplete_ = what;
}

std::string Recording::incomplete() const {
  std::lock_guard<std::mutex> lock(mu_);
  return incomplete_;
}

void Recording::replay(Device& dev, DK_Stream* stream, const Philox* philox) const {
  std::lock_guard<std::mutex> lock(mu_);
  const DK_Api* api = dev.api();
  for (const auto& c : calls_) {
    if (c->event == 1) {
      auto r = DK_ARGS(DK_Event_Record_Args);
      r.event = c->ev;
      r.stream = stream;
      dev.check(api->Event_Record(&r), "Event_Record(replayed by devicekit.graphs)");
      continue;
    }
    if (c->event == 2) {
      auto w = DK_ARGS(DK_Stream_WaitEvent_Args);
      w.stream = stream;
      w.event = c->ev;
      dev.check(api->Stream_WaitEvent(&w), "Stream_WaitEvent(replayed by devicekit.graphs)");
      continue;
    }
    if (c->copy) {
      auto m = DK_ARGS(DK_Memcpy_Args);
      m.device = dev.index();
      m.kind = DK_COPY_DEVICE_TO_DEVICE;
      m.dst = c->dst;
      m.src = c->src;
      m.size = c->bytes;
      m.stream = stream;
      dev.check(api->Memcpy(&m), "Memcpy(d2d, replayed by devicekit.graphs)");
      continue;
    }
    DK_Kernel_Args a = c->args;
    a.stream = stream;
    DK_RandomAttrs patched;  // read by the plugin during the call, as an eager launch's
    if (c->random && philox != nullptr) {
      std::memcpy(&patched, c->attrs.data(), sizeof patched);
      patched.offset += philox->offset_shift;  // unsigned: wraps mod 2**64
      if (philox->set_seed) patched.seed = philox->seed;
      a.attrs = &patched;
    }
    if (DK_Error* err = c->fn(&a)) {
      dev.plugin()->check(err, dev.ctx((std::string(c->fused ? "fused kernel '" : "kernel '") +
                                        c->name + "' replayed by devicekit.graphs")
                                           .c_str()));
    }
  }
}

}  // namespace dk
