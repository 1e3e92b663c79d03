// The device layer: everything the plugin asks of a GPU runtime, in one small
// interface with two implementations, so the DK-ABI logic (plugin.cpp,
// runtime.cpp, stream.cpp) is written once for both builds:
//  * gpu_cuda.cpp: the CUDA runtime API (statically linked cudart, device
//    memory from cudaMalloc only, never managed memory);
//  * gpu_sim.cpp: the emulated build: host memory, each stream a worker
//    thread running its jobs in order (kernel launches arrive through
//    dk::sim::enqueue), events with timestamps.
// Nothing here checks DK arguments; the callers did. Every call returns a
// Status carrying the runtime's own text (CUDA's error string and name),
// which the caller prefixes with the DK call that failed.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string>

namespace dkcuda {

struct KernelErrors;  // kernel.h: the per-stream error word kernels report into

namespace gpu {

struct Status {
  int32_t code = 0;     // 0, or the DK_ErrorCode that fits (OUT_OF_MEMORY, UNAVAILABLE, ...)
  std::string
      message;  // the runtime's text, e.g. "cudaMalloc: out of memory (cudaErrorMemoryAllocation)"
  bool ok() const { return code == 0; }
};

// ---- Plugin and devices ------------------------------------------------------

// First call of all, once per process (Plugin_Initialize). Finds the runtime
// and the devices; *count > 0 on success. The CUDA build first dlopens
// libcuda.so.1 and fails with DK_ERROR_UNAVAILABLE and "no NVIDIA driver
// (libcuda.so.1 not found): <dlerror>" when there is none, before the static
// runtime can say cudaErrorInsufficientDriver, which misleads.
Status init(int32_t* count);

// "key=value" lines for Plugin_GetInfo's attributes (runtime and driver
// versions, each device's compute capability).
std::string attributes();

struct Properties {
  std::string name;  // e.g. "NVIDIA H100 80GB HBM3 (sm_90)"
  uint64_t total_memory;  // bytes
  size_t alignment;  // of malloc results (cudaMalloc: 256)
  bool async_copy;  // copies overlap kernels (DK_DEVICE_CAP_ASYNC_COPY)
};
Status properties(int32_t device, Properties* out);

// Makes `device` the calling thread's current device (kernel launches go to
// the current device).
Status set_device(int32_t device);

// Blocks until all work on `device` has finished.
Status device_synchronize(int32_t device);

// ---- Memory -------------------------------------------------------------------

// Device memory; the caller keeps the statistics. bytes > 0.
Status malloc(int32_t device, size_t bytes, void** ptr);
Status free(int32_t device, void* ptr, size_t bytes);  // bytes: as allocated

enum CopyKind { kHostToDevice = 0, kDeviceToHost = 1, kDeviceToDevice = 2 };  // = DK_CopyKind

struct Stream;  // one per DK_Stream

// stream == NULL: synchronous, not ordered with any stream. Otherwise
// enqueued on the stream, in order with its other work. Host memory is
// pageable (the SDK's buffers): see gpu_cuda.cpp for what CUDA does then.
Status memcpy(int32_t device, void* dst, const void* src, size_t bytes, CopyKind kind,
              Stream* stream);

// ---- Streams ------------------------------------------------------------------

Status stream_create(int32_t device, Stream** out);
// Waits for the stream's work, then frees it (the caller synchronized first).
Status stream_destroy(Stream* s);
// What DK_LAUNCH takes as its stream (cudaStream_t; the emulator's Stream*).
void* stream_handle(Stream* s);
// The stream's kernel error word (launch.h): device memory, zeroed at
// creation, that the stream's kernels report data errors into.
KernelErrors* stream_errors(Stream* s);
// After stream_synchronize: copies the error word into *out and, when a
// kernel reported something, zeroes it again (in stream order).
Status take_kernel_errors(Stream* s, KernelErrors* out);
// Blocks until the stream's work has finished; returns the first
// asynchronous error that work raised (the emulator: a kernel's failed check;
// CUDA: a fault, sticky for the whole context).
Status stream_synchronize(Stream* s);
// idle: all enqueued work finished. An asynchronous error pending on the
// stream is returned too (and stays pending for stream_synchronize).
Status stream_query(Stream* s, bool* idle);

// ---- Events ---------------------------------------------------------------------

struct Event;

Status event_create(int32_t device, Event** out);
Status event_destroy(Event* e);
// Captures the point after the work enqueued on `s` so far.
Status event_record(Event* e, Stream* s);
// reached: the recorded point has passed (the caller handles never-recorded events).
Status event_query(Event* e, bool* reached);
Status event_synchronize(Event* e);
// Both recorded and reached (the caller checked).
Status event_elapsed_ms(Event* start, Event* end, double* ms);
// Work enqueued on `s` from now on waits for e's recorded point.
Status stream_wait_event(Stream* s, Event* e);

// ---- Graphs (the header's optional graphs part) ----------------------------------
//
// Between capture_begin and capture_end, the stream's copies, kernel
// launches, event records and waits are recorded into a graph, not run:
//  * CUDA: cudaStreamBeginCapture in cudaStreamCaptureModeThreadLocal (the
//    capturing thread's host synchronisation is refused by CUDA too); event
//    records and waits become external event nodes
//    (cudaEventRecordExternal, cudaEventWaitExternal), so every launch
//    records and waits again; capture_end instantiates the graph.
//  * the emulator: the stream's jobs go into a list instead of its queue.
// Kernels launched during a capture report data errors into the graph's own
// error word (stream_errors returns it meanwhile), never into the capturing
// stream's, which may be gone when the graph runs; graph_launch moves what
// they reported into the launch stream's word after the graph's work.
struct Graph;

Status capture_begin(Stream* s);
bool capturing(Stream* s);
// Ends the capture; *out is the graph (keep = false: dropped, *out NULL).
Status capture_end(Stream* s, bool keep, Graph** out);
// Enqueues the whole graph on `s` (the graph's device), then the error-word
// move; reads the buffers' contents when it runs.
Status graph_launch(Graph* g, Stream* s);
// Frees the graph; launches still queued run to the end first.
Status graph_destroy(Graph* g);

}  // namespace gpu
}  // namespace dkcuda
