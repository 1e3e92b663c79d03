// The op table, the dispatch counters and launch(): see dispatch.h.
#include "dispatch.h"

#include <array>
#include <atomic>

#include "ops.h"  // kNumOps
#include "trace.h"

namespace dk {

extern const DK_OpId kNoOp = DK_OpId(kNumOps);

namespace {
const OpSpec kOpSpecs[] = {
#include "base_ops_table.inc"
};
static_assert(sizeof(kOpSpecs) / sizeof(kOpSpecs[0]) == kNumOps, "regenerate base_ops_table.inc");

struct AtomicCounts { std::atomic<uint64_t> kernel{0}, cast_inserted{0}; };
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

bool float_only(DK_OpId op) {
  const uint64_t floats = DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | DK_DTYPE_BIT(DK_DTYPE_FLOAT16) |
                          DK_DTYPE_BIT(DK_DTYPE_BFLOAT16) | DK_DTYPE_BIT(DK_DTYPE_FLOAT64);
  return (op_spec(op).dtypes & ~floats) == 0;
}

void count_cast_inserted(DK_OpId op) {
  g_counts[op].cast_inserted.fetch_add(1, std::memory_order_relaxed);
}

DK_Kernel_Args kernel_args(Device& dev, int32_t op, const DK_TensorView* const* inputs,
                           int32_t num_inputs, const DK_TensorView* const* outputs,
                           int32_t num_outputs, const void* attrs) {
  DK_Kernel_Args a{};
  a.struct_size = DK_Kernel_Args_STRUCT_SIZE;
  a.device = dev.index();
  a.stream = dev.default_stream();
  a.op = op;
  a.num_inputs = num_inputs;
  a.inputs = inputs;
  a.num_outputs = num_outputs;
  a.outputs = outputs;
  a.attrs = attrs;
  return a;
}

std::string describe_tensors(const TensorImpl* const* ts, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + (ts[i] ? ts[i]->describe() : "None");
  return s;
}

std::string describe_call(std::initializer_list<const TensorImpl*> in,
                          std::initializer_list<const TensorImpl*> out) {
  return "(" + describe_tensors(in.begin(), in.size()) + ") -> (" +
         describe_tensors(out.begin(), out.size()) + ")";
}

void check_same_device(const char* what, const TensorImpl* const* ts, size_t n) {
  for (size_t i = 1; i < n; ++i) {
    if (&ts[i]->device() != &ts[0]->device()) {
      invalid_argument(std::string(what) + ": operands are on different devices (" +
                       describe_tensors(ts, n) + "); move them with .to(device) first");
    }
  }
}

namespace {
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
                    " (its kernel table has no entry) for " + describe_call(in, out));
  }
  // Cast declares its input dtypes, where its value operands', every other op
  // its first operand's (or, with no inputs, its output's).
  const DK_DType dt = op == DK_OP_WHERE ? (*(in.begin() + 1))->dtype()
                      : in.size()       ? (*in.begin())->dtype()
                                        : first->dtype();
  const uint64_t declared = plugin->kernel_dtypes(op);
  if (!(declared & DK_DTYPE_BIT(dt))) {
    throw Error(ErrorKind::NotImplemented, std::string("op '") + op_name(op) + "' on " + who() +
                                               " does not support " + dtype_name(dt) +
                                               " (it declares: " + dtype_mask_names(declared) +
                                               ") for " + describe_call(in, out));
  }
  std::array<DK_TensorView, kMaxOperands> views;
  std::array<const DK_TensorView*, kMaxOperands> ptrs;
  int n = 0;
  const bool failures = dev.has_failures();
  for (auto* t : in) {
    // Front-ends have checked already (before any cast); this guard costs a
    // compare and keeps another device's memory from ever reaching a kernel.
    if (&t->device() != &dev) {
      std::array<const TensorImpl*, kMaxOperands> all;
      size_t count = 0;
      for (auto* u : in) all[count++] = u;
      for (auto* u : out) all[count++] = u;
      check_same_device(op_name(op), all.data(), count);  // throws
    }
    // An input a failed kernel left behind fails this op with that error.
    if (failures)
      dev.check_not_failed(t->storage()->written_epoch.load(std::memory_order_relaxed),
                           t->describe());
    views[n] = t->as_view();
    ptrs[n] = &views[n];
    ++n;
  }
  for (auto* t : out) {
    views[n] = t->as_view();
    ptrs[n] = &views[n];
    ++n;
  }
  const DK_Kernel_Args a = kernel_args(dev, op, ptrs.data(), int32_t(in.size()),
                                       ptrs.data() + in.size(), int32_t(out.size()), attrs);
  g_counts[op].kernel.fetch_add(1, std::memory_order_relaxed);
  const uint64_t epoch = dev.epoch();
  for (auto* t : out) t->storage()->written_epoch.store(epoch, std::memory_order_relaxed);
  const bool random = op == DK_OP_RANDOM_BITS || op == DK_OP_RANDOM_UNIFORM;
  if (Recording* r = dev.recording()) {  // a capture the SDK records: not issued now
    r->add_kernel(fn, a, op_name(op), false, random);
    return;
  }
  // (a native capture replays a random launch's seed and offset as captured:
  // what an explicit seed asks for; mode "auto" keeps a shadow recording
  // beside it, which becomes the graph when it holds random launches)
  if (dev.capturing()) {
    dev.count_captured_call();
    if (Recording* sh = dev.shadow()) sh->shadow_kernel(fn, a, op_name(op), false, random);
  }
  DK_Error* err;
  if (trace::on()) {
    trace::Span span(trace::kLaunch, dev, a.stream, op_name(op));
    err = fn(&a);
  } else {
    err = fn(&a);
  }
  if (err)
    plugin->check(
        err,
        dev.ctx((std::string("kernel '") + op_name(op) + "' " + describe_call(in, out)).c_str()));
}

}  // namespace dk
