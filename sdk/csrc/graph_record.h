// SDK-side graph recording, for plugins without the device API's graphs part
// (and for any plugin when a caller asks for it): while a device captures in
// this mode, launch() (dispatch.cpp), a fused kernel's launch (fused.cpp) and
// a device-to-device copy on the default stream (Device::memcpy) append a
// deep copy of their call here instead of issuing it, and replay() issues the
// recorded calls again from C++, in order, on the stream asked for. The
// views' data pointers are those of the graph's pinned pool and of the
// caller's static tensors, exactly as the eager call had them. An
// Event_Record or Stream_WaitEvent on the default stream is recorded too
// (runtime_py.cpp) and issued on the replay stream in its place: each replay
// records the event again, or waits for its latest record at that time.
//
// Random launches (random_bits, random_uniform: the Philox ops, whose seed and
// offset are host attributes) are marked: a replay may give them another seed
// and shift every one's offset by the same amount (Philox), so that each replay
// draws fresh numbers, exactly those eager execution would draw from the
// shifted counters. The patch is made in C++ on a copy of the attribute struct
// per launch: no Python per op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "devicekit/device_api.h"

namespace dk {

class Device;

// What a replay changes in the random launches: every one's offset becomes
// (captured offset + offset_shift) mod 2**64, and its seed `seed` when set_seed.
struct Philox {
  bool set_seed = false;
  uint64_t seed = 0;
  uint64_t offset_shift = 0;
};

class Recording {
 public:
  // A kernel or fused kernel: `fn` is its entry (DK_KernelFn shape), `name`
  // a static string or the plugin's kernel name for error messages.
  // `random`: a Philox launch (its attrs are a DK_RandomAttrs) that a replay may patch.
  void add_kernel(DK_KernelFn* fn, const DK_Kernel_Args& a, const char* name, bool fused,
                  bool random = false);
  void add_copy(void* dst, const void* src, size_t n);
  // Event_Record (wait = false) or Stream_WaitEvent (wait = true) of `event`,
  // which the caller keeps alive as long as the recording.
  void add_event(DK_Event* event, bool wait);
  size_t size() const;  // kernels, fused kernels and copies (not event calls)
  size_t random_calls() const;  // the random launches among them
  // add_kernel for a shadow recording (Device::begin_capture): the call is
  // issued into the plugin's capture anyway, so a copy that fails must not
  // fail it; the recording is marked incomplete instead (and a random launch
  // still counted, so that the capture's end sees it).
  void shadow_kernel(DK_KernelFn* fn, const DK_Kernel_Args& a, const char* name, bool fused,
                     bool random = false) noexcept;
  // A shadow recording that missed a call the plugin's capture took (`what`,
  // e.g. a collective): it cannot stand in for the graph.
  void mark_incomplete(const std::string& what);
  std::string incomplete() const;  // "" when complete, else what it missed
  // Issues every recorded call on `stream` of `dev`, in order, the random
  // launches patched by `philox` when given (else as captured). Stops at the
  // first call the plugin refuses and throws its error naming the call.
  void replay(Device& dev, DK_Stream* stream, const Philox* philox = nullptr) const;

 private:
  struct Call {
    bool copy = false;
    bool fused = false;
    bool random = false;  // attrs hold a DK_RandomAttrs
    int event = 0;  // 1: Event_Record, 2: Stream_WaitEvent of `ev`
    DK_Event* ev = nullptr;
    DK_KernelFn* fn = nullptr;
    const char* name = "";
    DK_Kernel_Args args{};
    std::vector<DK_TensorView> views;          // inputs then outputs
    std::vector<const DK_TensorView*> ptrs;    // NULL entries kept NULL
    std::vector<int64_t> dims;                 // shapes and strides of the views
    std::vector<uint64_t> attrs;               // the attribute struct, 8-byte aligned
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
  };
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Call>> calls_;
  size_t event_calls_ = 0;
  size_t random_calls_ = 0;
  std::string incomplete_;
};

}  // namespace dk
