// gpu.h on the CUDA runtime API (linked statically: the plugin needs only
// libc, libstdc++, libm and, at run time, the driver's libcuda.so.1).
//
// Memory: cudaMalloc only, never managed memory: device pointers are device
// memory, and a host access to one crashes instead of silently migrating.
//
// Pageable host memory (every host buffer the SDK passes is ordinary,
// pageable memory), in the header's terms:
//  * Memcpy with stream == NULL (cudaMemcpy, then a synchronize of the
//    legacy default stream: cudaMemcpy itself may return before a device to
//    device copy, or a staged host to device one, has landed): synchronous,
//    as the header asks. It runs on the legacy default stream, which does not
//    wait for our streams because they are created cudaStreamNonBlocking:
//    "not ordered with any stream", as the header says.
//  * Memcpy on a stream (cudaMemcpyAsync), host to device: CUDA first copies
//    the pageable source into a pinned staging buffer and returns once it has
//    (so the host buffer is free sooner than the header promises the SDK);
//    the transfer itself runs in stream order.
//  * device to host: CUDA waits for the stream to reach the copy and for the
//    copy to finish before returning, so the call blocks: it is ordered as the
//    header asks, only not asynchronous. Hence no DK_DEVICE_CAP_ASYNC_COPY:
//    copies from pageable memory do not overlap kernels.
//
// Graphs (gpu.h): cudaStreamBeginCapture in cudaStreamCaptureModeThreadLocal,
// so CUDA itself refuses host synchronisation from the capturing thread; the
// host calls the header allows during a capture (Memory_Allocate,
// Memory_Free, a synchronous Memcpy, which is on no stream) switch the thread
// to relaxed mode for their duration (RelaxedCapture). Event records and
// waits on a capturing stream become external event nodes, so each launch
// records and waits again. capture_end instantiates the graph
// (cudaGraphInstantiate) and drops the template; graph_launch is
// cudaGraphLaunch, then move_kernel_errors (kernels_graphs.cu) on the same
// stream. graph_destroy: cudaGraphExecDestroy, which CUDA documents as safe
// for a graph with launches in flight (it is freed once they complete), then
// cudaFree of the graph's error word, which waits for the device's work, so
// queued launches have run before the word goes.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <memory>

#include "gpu.h"
#include "launch.h"

namespace dkcuda {
namespace gpu {

struct Stream {
  int32_t device;
  cudaStream_t stream;
  KernelErrors* errors;  // device memory: kernels report into it, the host copies it after sync
  KernelErrors* capture_errors = nullptr;  // the open capture's graph word; NULL: not capturing
};

struct Graph {
  int32_t device;
  cudaGraphExec_t exec;
  KernelErrors* errors;  // device memory: the graph's kernels report into it
};

struct Event {
  int32_t device;
  cudaEvent_t event;
};

namespace {

Status from_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status{};
  int32_t code = DK_ERROR_INTERNAL;
  switch (e) {
    case cudaErrorMemoryAllocation: code = DK_ERROR_OUT_OF_MEMORY; break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInitializationError:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice: code = DK_ERROR_UNAVAILABLE; break;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer: code = DK_ERROR_INVALID_ARGUMENT; break;
    default: break;
  }
  return Status{
      code, std::string(what) + ": " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")"};
}

#define DKCUDA_TRY(call)                                              \
  do {                                                                \
    const cudaError_t dkcuda_e_ = (call);                             \
    if (dkcuda_e_ != cudaSuccess) return from_cuda(dkcuda_e_, #call); \
  } while (0)

std::string g_attributes;

// The calling thread in cudaStreamCaptureModeRelaxed for one host call the
// header allows during a capture (CUDA's thread-local mode would refuse it
// and invalidate the capture).
struct RelaxedCapture {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode); }
  ~RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode); }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;
};

}  // namespace

Status init(int32_t* count) {
  *count = 0;
  // The driver first: without it the static runtime reports
  // cudaErrorInsufficientDriver ("CUDA driver version is insufficient"),
  // which sends people to upgrade a driver they do not have. The handle is
  // kept: the runtime dlopens the same library next.
  if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* why = dlerror();
    return Status{DK_ERROR_UNAVAILABLE, std::string("no NVIDIA driver (libcuda.so.1 not found): ") +
                                            (why != nullptr ? why : "dlopen failed")};
  }
  int n = 0;
  DKCUDA_TRY(cudaGetDeviceCount(&n));
  if (n <= 0) {
    return Status{DK_ERROR_UNAVAILABLE, "no CUDA device visible (check CUDA_VISIBLE_DEVICES)"};
  }
  int runtime = 0, driver = 0;
  DKCUDA_TRY(cudaRuntimeGetVersion(&runtime));
  DKCUDA_TRY(cudaDriverGetVersion(&driver));
  char line[160];
  snprintf(line, sizeof line, "runtime=%d.%d\ndriver=%d.%d\ndevices=%d", runtime / 1000,
           runtime % 1000 / 10, driver / 1000, driver % 1000 / 10, n);
  g_attributes = line;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    DKCUDA_TRY(cudaGetDeviceProperties(&p, i));
    snprintf(line, sizeof line, "\ndevice%d.compute_capability=%d.%d\ndevice%d.sms=%d", i, p.major,
             p.minor, i, p.multiProcessorCount);
    g_attributes += line;
  }
  *count = n;
  return Status{};
}

std::string attributes() { return g_attributes; }

Status properties(int32_t device, Properties* out) {
  cudaDeviceProp p{};
  DKCUDA_TRY(cudaGetDeviceProperties(&p, device));
  char name[320];
  snprintf(name, sizeof name, "%s (sm_%d%d)", p.name, p.major, p.minor);
  out->name = name;
  out->total_memory = p.totalGlobalMem;
  out->alignment = 256;  // cudaMalloc's guarantee
  out->async_copy = false;  // pageable host memory: see the top of this file
  return Status{};
}

Status set_device(int32_t device) {
  DKCUDA_TRY(cudaSetDevice(device));
  return Status{};
}

Status device_synchronize(int32_t device) {
  DKCUDA_TRY(cudaSetDevice(device));
  DKCUDA_TRY(cudaDeviceSynchronize());
  return Status{};
}

Status malloc(int32_t device, size_t bytes, void** ptr) {
  const RelaxedCapture relaxed;
  DKCUDA_TRY(cudaSetDevice(device));
  const cudaError_t e = cudaMalloc(ptr, bytes);
  if (e != cudaSuccess) {
    *ptr = nullptr;
    (void)cudaGetLastError();  // out of memory is not sticky: clear it
    return from_cuda(e, "cudaMalloc");
  }
  return Status{};
}

Status free(int32_t device, void* ptr, size_t) {
  const RelaxedCapture relaxed;
  DKCUDA_TRY(cudaSetDevice(device));
  DKCUDA_TRY(cudaFree(ptr));
  return Status{};
}

Status memcpy(int32_t device, void* dst, const void* src, size_t bytes, CopyKind kind,
              Stream* stream) {
  static const cudaMemcpyKind kKinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                          cudaMemcpyDeviceToDevice};
  DKCUDA_TRY(cudaSetDevice(device));
  if (stream == nullptr) {
    const RelaxedCapture relaxed;  // on no stream: allowed while another one captures
    DKCUDA_TRY(cudaMemcpy(dst, src, bytes, kKinds[kind]));
    // cudaMemcpy may return before the copy is done (device to device, and
    // host to device from pageable memory once it is staged); the header's
    // synchronous copy has finished when the call returns.
    DKCUDA_TRY(cudaStreamSynchronize(cudaStreamLegacy));
  } else {
    DKCUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kKinds[kind], stream->stream));
  }
  return Status{};
}

Status stream_create(int32_t device, Stream** out) {
  DKCUDA_TRY(cudaSetDevice(device));
  std::unique_ptr<Stream> s(new Stream{device, nullptr, nullptr});
  DKCUDA_TRY(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
  // The error word in device memory, not mapped host memory: atomics on
  // mapped memory are not guaranteed over every PCIe link. Reading it costs
  // one small copy per synchronize.
  void* word = nullptr;
  cudaError_t e = cudaMalloc(&word, sizeof(KernelErrors));
  if (e == cudaSuccess) e = cudaMemsetAsync(word, 0, sizeof(KernelErrors), s->stream);
  if (e != cudaSuccess) {
    if (word != nullptr) cudaFree(word);
    cudaStreamDestroy(s->stream);
    return from_cuda(e, "cudaMalloc(kernel error word)");
  }
  s->errors = static_cast<KernelErrors*>(word);
  *out = s.release();
  return Status{};
}

Status stream_destroy(Stream* s) {
  std::unique_ptr<Stream> owned(s);
  DKCUDA_TRY(cudaSetDevice(s->device));
  DKCUDA_TRY(cudaStreamDestroy(s->stream));
  DKCUDA_TRY(cudaFree(s->errors));
  return Status{};
}

void* stream_handle(Stream* s) { return s->stream; }

KernelErrors* stream_errors(Stream* s) {
  return s->capture_errors != nullptr ? s->capture_errors : s->errors;
}

Status take_kernel_errors(Stream* s, KernelErrors* out) {
  DKCUDA_TRY(cudaSetDevice(s->device));
  // Into pageable memory: CUDA returns once the copy is done.
  DKCUDA_TRY(cudaMemcpyAsync(out, s->errors, sizeof *out, cudaMemcpyDeviceToHost, s->stream));
  DKCUDA_TRY(cudaStreamSynchronize(s->stream));
  if (out->count != 0) DKCUDA_TRY(cudaMemsetAsync(s->errors, 0, sizeof *out, s->stream));
  return Status{};
}

Status stream_synchronize(Stream* s) {
  DKCUDA_TRY(cudaStreamSynchronize(s->stream));
  return Status{};
}

Status stream_query(Stream* s, bool* idle) {
  const cudaError_t e = cudaStreamQuery(s->stream);
  *idle = e == cudaSuccess;
  if (e == cudaSuccess || e == cudaErrorNotReady) return Status{};
  return from_cuda(e, "cudaStreamQuery");
}

Status event_create(int32_t device, Event** out) {
  DKCUDA_TRY(cudaSetDevice(device));
  std::unique_ptr<Event> ev(new Event{device, nullptr});
  DKCUDA_TRY(cudaEventCreate(&ev->event));  // timing on: Event_ElapsedTime works
  *out = ev.release();
  return Status{};
}

Status event_destroy(Event* e) {
  std::unique_ptr<Event> owned(e);
  // A recorded event destroyed before it completes: CUDA releases it once
  // the point is reached, so waiting streams still wait for it.
  DKCUDA_TRY(cudaEventDestroy(e->event));
  return Status{};
}

Status event_record(Event* e, Stream* s) {
  DKCUDA_TRY(cudaSetDevice(s->device));
  if (s->capture_errors != nullptr) {  // a node: every launch records again
    DKCUDA_TRY(cudaEventRecordWithFlags(e->event, s->stream, cudaEventRecordExternal));
    return Status{};
  }
  DKCUDA_TRY(cudaEventRecord(e->event, s->stream));
  return Status{};
}

Status event_query(Event* e, bool* reached) {
  const cudaError_t r = cudaEventQuery(e->event);
  *reached = r == cudaSuccess;
  if (r == cudaSuccess || r == cudaErrorNotReady) return Status{};
  return from_cuda(r, "cudaEventQuery");
}

Status event_synchronize(Event* e) {
  DKCUDA_TRY(cudaEventSynchronize(e->event));
  return Status{};
}

Status event_elapsed_ms(Event* start, Event* end, double* ms) {
  float f = 0;
  DKCUDA_TRY(cudaEventElapsedTime(&f, start->event, end->event));
  *ms = f;
  return Status{};
}

Status stream_wait_event(Stream* s, Event* e) {
  DKCUDA_TRY(cudaSetDevice(s->device));
  // In a capture, a node waiting on the event's latest record when it runs.
  DKCUDA_TRY(cudaStreamWaitEvent(s->stream, e->event,
                                 s->capture_errors != nullptr ? cudaEventWaitExternal : 0));
  return Status{};
}

Status capture_begin(Stream* s) {
  DKCUDA_TRY(cudaSetDevice(s->device));
  if (s->capture_errors != nullptr) {
    return Status{DK_ERROR_FAILED_PRECONDITION, "the stream is already capturing"};
  }
  // The graph's error word first: cudaMalloc and a memset, finished (on the
  // legacy stream) before the capture begins.
  void* word = nullptr;
  {
    const RelaxedCapture relaxed;  // another stream of this thread may capture
    DKCUDA_TRY(cudaMalloc(&word, sizeof(KernelErrors)));
    cudaError_t e = cudaMemset(word, 0, sizeof(KernelErrors));
    if (e == cudaSuccess) e = cudaStreamSynchronize(cudaStreamLegacy);
    if (e != cudaSuccess) {
      cudaFree(word);
      return from_cuda(e, "cudaMemset(graph error word)");
    }
  }
  const cudaError_t e = cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    const RelaxedCapture relaxed;
    cudaFree(word);
    return from_cuda(e, "cudaStreamBeginCapture");
  }
  s->capture_errors = static_cast<KernelErrors*>(word);
  return Status{};
}

bool capturing(Stream* s) { return s->capture_errors != nullptr; }

Status capture_end(Stream* s, bool keep, Graph** out) {
  *out = nullptr;
  if (s->capture_errors == nullptr) {
    return Status{DK_ERROR_FAILED_PRECONDITION, "the stream is not capturing"};
  }
  KernelErrors* word = s->capture_errors;
  s->capture_errors = nullptr;
  DKCUDA_TRY(cudaSetDevice(s->device));
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(s->stream, &graph);
  cudaGraphExec_t exec = nullptr;
  if (e == cudaSuccess && keep) e = cudaGraphInstantiate(&exec, graph, 0);
  if (graph != nullptr) cudaGraphDestroy(graph);  // the executable graph is all we keep
  if (e != cudaSuccess || !keep) {
    const RelaxedCapture relaxed;
    cudaFree(word);
    return e != cudaSuccess ? from_cuda(e, "cudaStreamEndCapture / cudaGraphInstantiate")
                            : Status{};
  }
  *out = new Graph{s->device, exec, word};
  return Status{};
}

Status graph_launch(Graph* g, Stream* s) {
  DKCUDA_TRY(cudaSetDevice(s->device));
  DKCUDA_TRY(cudaGraphLaunch(g->exec, s->stream));
  const std::string moved = move_kernel_errors(s->stream, g->errors, s->errors);
  if (!moved.empty()) return Status{DK_ERROR_INTERNAL, moved};
  return Status{};
}

Status graph_destroy(Graph* g) {
  std::unique_ptr<Graph> owned(g);
  const RelaxedCapture relaxed;
  DKCUDA_TRY(cudaSetDevice(g->device));
  DKCUDA_TRY(cudaGraphExecDestroy(g->exec));  // freed once its launches in flight complete
  DKCUDA_TRY(cudaFree(g->errors));            // waits for the device's work first
  return Status{};
}

}  // namespace gpu
}  // namespace dkcuda
