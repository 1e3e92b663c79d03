// Streams, events and device synchronisation as the ABI sees them, over
// gpu.h's streams and events (CUDA streams and events, or the emulator's
// worker threads and timestamped points).
//
// What this layer adds to the runtime's own: the header's argument rules,
// the never-recorded event (CUDA calls it reached; the header wants
// FAILED_PRECONDITION from Event_ElapsedTime), the live-stream list for
// Device_Synchronize, and the kernel error word: data-dependent errors a
// kernel reported (kernel.h, report_error) become a DK_Error naming the op
// at the stream's next synchronize.
#include <chrono>

#include "api.h"
#include "internal.h"
#include "launch.h"

namespace dkcuda {
namespace {

DK_Error* check_event(const char* call, const char* what, const DK_Event* e) {
  return dkh::check_event(call, what, e);
}

// The error kernels reported on this stream since the last look, as a
// DK_Error (and cleared), or NULL. Call only after the stream's work finished.
DK_Error* take_kernel_error(const char* call, DK_Stream* s) {
  KernelErrors k{};
  const gpu::Status st = gpu::take_kernel_errors(s->gpu, &k);
  if (!st.ok()) return error_from_status(call, st);
  if (k.count == 0) return nullptr;
  const dkh_OpSignature* sig = dkh_op_signature(k.op);
  const char* op = sig != nullptr ? sig->name : "?";
  switch (k.kind) {
    case kIndexOutOfRange:
      return dkh_error(DK_ERROR_OUT_OF_RANGE,
                       "%s.Kernel(%s): input %d holds index %lld, out of range for a dimension "
                       "of size %lld (%d element(s) reported; their outputs were not written). "
                       "Hint: indices must lie in [0, size).",
                       DKCUDA_NAME, op, (int)k.input, (long long)k.value, (long long)k.bound,
                       (int)k.count);
    default:
      return dkh_error(DK_ERROR_INTERNAL, "%s.Kernel(%s): the kernel reported error kind %d",
                       DKCUDA_NAME, op, (int)k.kind);
  }
}

// Waits for the stream; returns its first asynchronous error: the runtime's
// (a fault, a failed emulator check) before a kernel's data error.
DK_Error* synchronize(const char* call, DK_Stream* s) {
  const gpu::Status st = gpu::stream_synchronize(s->gpu);
  if (st.ok()) return take_kernel_error(call, s);
  DK_Error* kernel_error = take_kernel_error(call, s);
  dkh::destroy_error(kernel_error);  // the header reports the first error only
  return error_from_status(call, st);
}

}  // namespace
}  // namespace dkcuda

using namespace dkcuda;

extern "C" {

DK_Error* dk_cuda_Stream_Create(DK_Stream_Create_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Stream_Create";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Stream_Create_Args);
  args->stream = nullptr;
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    gpu::Stream* g = nullptr;
    const gpu::Status st = gpu::stream_create(args->device, &g);
    if (!st.ok()) return error_from_status(kCall, st);
    std::shared_ptr<DK_Stream> s;
    try {
      s = std::make_shared<DK_Stream>(args->device, g);
      dkh::add_stream(plugin().devices[args->device], s);
    } catch (...) {
      gpu::stream_destroy(g);
      throw;
    }
    args->stream = s.get();
    return nullptr;
  });
}

DK_Error* dk_cuda_Stream_Destroy(DK_Stream_Destroy_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Stream_Destroy";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Stream_Destroy_Args);
  if (DK_Error* e = check_stream(kCall, args->stream, -1)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    DK_Stream* s = args->stream;
    const std::shared_ptr<DK_Stream> keep = dkh::remove_stream(plugin().devices[s->device], s);
    s->magic.store(dkh::kDead);
    capture_abandon(s);  // an open capture ends with its stream, recording nothing
    // The stream is gone either way; an error its last work raised is still
    // reported (nothing silent), so the caller must not destroy it again.
    DK_Error* err = synchronize(kCall, s);
    const gpu::Status st = gpu::stream_destroy(s->gpu);
    if (err == nullptr && !st.ok()) err = error_from_status(kCall, st);
    return err;
  });
}

DK_Error* dk_cuda_Stream_Synchronize(DK_Stream_Synchronize_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Stream_Synchronize";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Stream_Synchronize_Args);
  if (DK_Error* e = check_stream(kCall, args->stream, -1)) return e;
  if (DK_Error* e = capture_forbidden(kCall, args->stream)) return e;
  return guarded(kCall, [&] { return synchronize(kCall, args->stream); });
}

DK_Error* dk_cuda_Stream_Query(DK_Stream_Query_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Stream_Query";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Stream_Query_Args);
  if (DK_Error* e = check_stream(kCall, args->stream, -1)) return e;
  if (DK_Error* e = capture_forbidden(kCall, args->stream)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    bool idle = false;
    const gpu::Status st = gpu::stream_query(args->stream->gpu, &idle);
    if (!st.ok()) return error_from_status(kCall, st);  // still pending for Synchronize
    args->idle = idle ? 1 : 0;
    return nullptr;
  });
}

DK_Error* dk_cuda_Device_Synchronize(DK_Device_Synchronize_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Device_Synchronize";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Device_Synchronize_Args);
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    const auto streams = dkh::live_streams(plugin().devices[args->device]);
    for (auto& s : streams) {
      if (DK_Error* e = capture_forbidden(kCall, s.get())) return e;
    }
    const gpu::Status st = gpu::device_synchronize(args->device);
    if (!st.ok()) return error_from_status(kCall, st);
    // The earliest-created stream's error is returned (and cleared); the
    // others keep theirs for their own next synchronize.
    for (auto& s : streams) {
      if (DK_Error* err = synchronize(kCall, s.get())) return err;
    }
    return nullptr;
  });
}

DK_Error* dk_cuda_Event_Create(DK_Event_Create_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Event_Create";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Event_Create_Args);
  args->event = nullptr;
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    gpu::Event* g = nullptr;
    const gpu::Status st = gpu::event_create(args->device, &g);
    if (!st.ok()) return error_from_status(kCall, st);
    try {
      args->event = new DK_Event(args->device, g);
    } catch (...) {
      gpu::event_destroy(g);
      throw;
    }
    return nullptr;
  });
}

DK_Error* dk_cuda_Event_Destroy(DK_Event_Destroy_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Event_Destroy";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Event_Destroy_Args);
  if (DK_Error* e = check_event(kCall, "event", args->event)) return e;
  args->event->magic.store(dkh::kDead);
  // Streams waiting on it still wait for the recorded point (CUDA keeps the
  // event's resources until then; the emulator shares the point).
  const gpu::Status st = gpu::event_destroy(args->event->gpu);
  delete args->event;
  return st.ok() ? nullptr : error_from_status(kCall, st);
}

DK_Error* dk_cuda_Event_Record(DK_Event_Record_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Event_Record";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Event_Record_Args);
  if (DK_Error* e = check_event(kCall, "event", args->event)) return e;
  if (DK_Error* e = check_stream(kCall, args->stream, args->event->device)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    DK_Stream* s = args->stream;
    const bool captured = s->capturing.load();
    const gpu::Status st = gpu::event_record(args->event->gpu, s->gpu);
    if (!st.ok()) return error_from_status(kCall, st);
    if (captured) {  // recorded by each Graph_Launch, not now (graphs.cpp)
      capture_note_event(s, args->event, false);
      return nullptr;
    }
    args->event->captured_on.store(nullptr);
    args->event->recorded.store(true);
    return nullptr;
  });
}

DK_Error* dk_cuda_Stream_WaitEvent(DK_Stream_WaitEvent_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Stream_WaitEvent";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Stream_WaitEvent_Args);
  if (DK_Error* e = check_stream(kCall, args->stream, -1)) return e;
  if (DK_Error* e = check_event(kCall, "event", args->event)) return e;
  // In a capture, a node even for a never-recorded event: each Graph_Launch
  // waits for the event's latest record at that time (graphs.cpp).
  const bool captured = args->stream->capturing.load();
  if (!captured && !args->event->recorded.load()) return nullptr;  // never recorded: a no-op
  return guarded(kCall, [&]() -> DK_Error* {
    const gpu::Status st = gpu::stream_wait_event(args->stream->gpu, args->event->gpu);
    if (!st.ok()) return error_from_status(kCall, st);
    if (captured) capture_note_event(args->stream, args->event, true);
    return nullptr;
  });
}

DK_Error* dk_cuda_Event_Query(DK_Event_Query_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Event_Query";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Event_Query_Args);
  if (DK_Error* e = check_event(kCall, "event", args->event)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    bool reached = true;
    if (args->event->recorded.load()) {
      const gpu::Status st = gpu::event_query(args->event->gpu, &reached);
      if (!st.ok()) return error_from_status(kCall, st);
    }
    args->reached = reached ? 1 : 0;
    return nullptr;
  });
}

DK_Error* dk_cuda_Event_Synchronize(DK_Event_Synchronize_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Event_Synchronize";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Event_Synchronize_Args);
  if (DK_Error* e = check_event(kCall, "event", args->event)) return e;
  // Recorded in an open capture: waiting for it is host work in the capture.
  if (DK_Stream* s = args->event->captured_on.load()) {
    if (DK_Error* e = capture_forbidden(kCall, s)) return e;
  }
  if (!args->event->recorded.load()) return nullptr;
  return guarded(kCall, [&]() -> DK_Error* {
    const gpu::Status st = gpu::event_synchronize(args->event->gpu);
    return st.ok() ? nullptr : error_from_status(kCall, st);
  });
}

DK_Error* dk_cuda_Event_ElapsedTime(DK_Event_ElapsedTime_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Event_ElapsedTime";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Event_ElapsedTime_Args);
  if (DK_Error* e = check_event(kCall, "start", args->start)) return e;
  if (DK_Error* e = check_event(kCall, "end", args->end)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    for (DK_Event* ev : {args->start, args->end}) {
      bool reached = false;
      if (ev->recorded.load()) {
        const gpu::Status st = gpu::event_query(ev->gpu, &reached);
        if (!st.ok()) return error_from_status(kCall, st);
      }
      if (!reached) {
        return dkh::event_not_reached(kCall, ev == args->start ? "start" : "end",
                                      ev->recorded.load());
      }
    }
    double ms = 0;
    const gpu::Status st = gpu::event_elapsed_ms(args->start->gpu, args->end->gpu, &ms);
    if (!st.ok()) return error_from_status(kCall, st);
    args->milliseconds = ms;
    return nullptr;
  });
}

}  // extern "C"
