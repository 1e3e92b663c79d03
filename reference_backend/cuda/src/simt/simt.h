// The portable SIMT dialect every kernel of the CUDA plugin is written in.
//
// One kernel source, two builds:
//  * under nvcc (__CUDACC__) each name below is plain CUDA: a kernel is a
//    __global__ function, DK_SHARED a __shared__ array, dk_barrier()
//    __syncthreads(), a shuffle __shfl_*_sync over the full warp;
//  * under the host compiler it is the CPU SIMT emulator (simt_sim.cpp):
//    every GPU thread is a fiber, barriers and shuffles are its switch
//    points, blocks run in a shuffled order, and shared memory is a checked
//    array that reports out-of-bounds indices, reads of slots nobody wrote,
//    races between two barriers, and barriers or shuffles reached by only
//    part of a block or warp. The first such finding fails the launch with
//    the kernel, block, thread and source line named.
//
// The dialect, and the rules a kernel keeps so that both builds mean the same:
//   DK_KERNEL name(args)          a kernel; args are plain values and pointers
//   DK_DEV / DK_HD                device function / host-and-device function
//   dk_thread_x() .. _z()         threadIdx;  dk_block_x() .. _z()  blockIdx
//   dk_block_dim_x() .. _z()      blockDim;   dk_grid_dim_x() .. _z() gridDim
//   dk_lane()                     lane in the warp (linear thread id % 32)
//   DK_SHARED(T, name, n)         a static shared array of n T (n a constant).
//                                 Read it into a typed local (`float v = s[i];`),
//                                 never `auto v = s[i]` (the emulator's element
//                                 is a checked proxy) nor `&s[i]`.
//   dk_barrier()                  __syncthreads(): every thread of the block
//                                 reaches the same one, or none does
//   dk_shfl_xor / _down / _idx    a full-warp shuffle (all 32 lanes take part:
//                                 use block sizes that are multiples of 32)
//   dk_atomic_add(p, v)           atomicAdd on global memory (not shared)
//   dk_dim3(x, y, z)              launch dimensions
//   DK_LAUNCH(k, grid, block, stream, args...)
//                                 enqueue k on the stream; evaluates to a
//                                 std::string, empty on success, else the
//                                 launch error (bad configuration, ...)
//   dk_grid_stride_blocks(n, b)   blocks for a grid-stride loop over n items:
//                                 the emulator caps it low so every such
//                                 loop really strides
// A kernel holds no resource with a destructor: the emulator abandons the
// fibers of a block that failed a check.
#pragma once

#include <stdint.h>

#include <string>

#define DK_WARP_SIZE 32
#define DK_MAX_THREADS_PER_BLOCK 1024
#define DK_MAX_STATIC_SHARED_BYTES (48 * 1024)

#if defined(__CUDACC__)
// ---------------------------------------------------------------- real CUDA
#include <cuda_runtime.h>

#define DK_SIMT_EMULATED 0
#define DK_KERNEL __global__ void
#define DK_DEV __device__ __forceinline__
#define DK_HD __host__ __device__ __forceinline__

#define dk_thread_x() (int(threadIdx.x))
#define dk_thread_y() (int(threadIdx.y))
#define dk_thread_z() (int(threadIdx.z))
#define dk_block_x() (int64_t(blockIdx.x))
#define dk_block_y() (int64_t(blockIdx.y))
#define dk_block_z() (int64_t(blockIdx.z))
#define dk_block_dim_x() (int(blockDim.x))
#define dk_block_dim_y() (int(blockDim.y))
#define dk_block_dim_z() (int(blockDim.z))
#define dk_grid_dim_x() (int64_t(gridDim.x))
#define dk_grid_dim_y() (int64_t(gridDim.y))
#define dk_grid_dim_z() (int64_t(gridDim.z))
#define dk_lane() (int((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31))

#define DK_SHARED(T, name, n) __shared__ T name[n]
#define dk_barrier() __syncthreads()

template <class T> __device__ __forceinline__ T dk_shfl_xor(T v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}
template <class T> __device__ __forceinline__ T dk_shfl_down(T v, int delta) {
  return __shfl_down_sync(0xffffffffu, v, delta);
}
template <class T> __device__ __forceinline__ T dk_shfl_idx(T v, int src_lane) {
  return __shfl_sync(0xffffffffu, v, src_lane);
}
template <class T> __device__ __forceinline__ T dk_atomic_add(T* p, T v) { return atomicAdd(p, v); }

typedef dim3 dk_dim3;

inline std::string dk_simt_launch_status(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return std::string();
  return std::string("launch of ") + kernel + " failed: " + cudaGetErrorString(e) + " (" +
         cudaGetErrorName(e) + ")";
}

// clang-format would split <<< into "< < <" inside this macro.
// clang-format off
#define DK_LAUNCH(k, grid, block, stream, ...) \
  ((k)<<<(grid), (block), 0, static_cast<cudaStream_t>(stream)>>>(__VA_ARGS__), \
   dk_simt_launch_status(#k))
// clang-format on

inline unsigned dk_grid_stride_blocks(int64_t n, int block) {
  const int64_t b = (n + block - 1) / block;
  return unsigned(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

#else
// ------------------------------------------------------------ the emulator
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>

#define DK_SIMT_EMULATED 1
#define DK_KERNEL void
#define DK_DEV inline
#define DK_HD inline

namespace dk {
namespace sim {

struct Dim3 {
  unsigned x, y, z;
  Dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct Block;

// The fiber running now: its indices, and its block.
struct Thread {
  Dim3 tid, bid, bdim, gdim;
  int linear;  // linear thread id in the block
  Block* block;
};
extern thread_local Thread* current;

// Where a thread stands in a shared array slot's history (simt_sim.cpp).
struct SharedArrayState;
SharedArrayState* shared_array(const void* tag, size_t elem_size, int64_t n, const char* name,
                               const char* file, int line, void** data);
void shared_read(SharedArrayState* s, int64_t i);
void shared_write(SharedArrayState* s, int64_t i);

void barrier(const char* file, int line);
uint64_t shuffle(uint64_t bits, int kind, int arg, const char* file, int line);
[[noreturn]] void fail(const std::string& what);

template <class T> class SharedElem {
 public:
  SharedElem(T* p, SharedArrayState* s, int64_t i) : p_(p), s_(s), i_(i) {}
  operator T() const {
    shared_read(s_, i_);
    return p_[i_];
  }
  SharedElem& operator=(T v) {
    shared_write(s_, i_);
    p_[i_] = v;
    return *this;
  }
  SharedElem& operator=(const SharedElem& o) { return *this = T(o); }
  SharedElem& operator+=(T v) { return *this = T(*this) + v; }
  SharedElem& operator-=(T v) { return *this = T(*this) - v; }
  SharedElem& operator*=(T v) { return *this = T(*this) * v; }
  SharedElem& operator/=(T v) { return *this = T(*this) / v; }

 private:
  T* p_;
  SharedArrayState* s_;
  int64_t i_;
};

template <class T> class SharedArray {
  static_assert(std::is_trivially_copyable<T>::value, "shared arrays hold plain values");

 public:
  SharedArray(const void* tag, int64_t n, const char* name, const char* file, int line) {
    void* data = nullptr;
    s_ = shared_array(tag, sizeof(T), n, name, file, line, &data);
    p_ = static_cast<T*>(data);
  }
  SharedElem<T> operator[](int64_t i) const { return SharedElem<T>(p_, s_, i); }

 private:
  T* p_;
  SharedArrayState* s_;
};

template <class T> T shuffle_as(T v, int kind, int arg, const char* file, int line) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle a scalar");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  bits = shuffle(bits, kind, arg, file, line);
  T r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}
enum { SHFL_XOR = 0, SHFL_DOWN = 1, SHFL_IDX = 2 };

template <class T> T atomic_add(T* p, T v) {
  if constexpr (std::is_integral<T>::value) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
  } else {
    T old = *p;  // compare-and-swap on the bits, as GPUs do for float adds
    for (;;) {
      T want = old + v;
      if (__atomic_compare_exchange(p, &old, &want, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return old;
    }
  }
}

// Runs one launch: every block of `grid` (in a shuffled order) as `block`
// fibers calling `body`. Returns "" or what went wrong, naming `kernel`.
std::string run_grid(const char* kernel, Dim3 grid, Dim3 block, const std::function<void()>& body);

// Enqueues a launch on a stream. Defined by the device layer that owns the
// streams (the emulated plugin's runtime, or a test): `job` runs on the
// stream in order and returns "" or the kernel's error.
std::string enqueue(void* stream, const char* kernel, std::function<std::string()> job);

// Validates a launch configuration as the CUDA runtime does.
std::string check_config(const char* kernel, Dim3 grid, Dim3 block);

// DK_LAUNCH: the arguments become the kernel's parameter types at the launch,
// as with <<<>>> (so a pointer, never the container it came from, is what the
// queued launch keeps), and the launch runs later, on the stream.
template <class... P, class... A> std::string launch(const char* kernel, Dim3 grid, Dim3 block,
                                                     void* stream, void (*k)(P...), A&&... args) {
  std::string e = check_config(kernel, grid, block);
  if (!e.empty()) return e;
  const std::tuple<typename std::decay<P>::type...> params(std::forward<A>(args)...);
  return enqueue(stream, kernel, [=]() -> std::string {
    return run_grid(kernel, grid, block, [&]() { std::apply(k, params); });
  });
}

}  // namespace sim
}  // namespace dk

#define dk_thread_x() (int(::dk::sim::current->tid.x))
#define dk_thread_y() (int(::dk::sim::current->tid.y))
#define dk_thread_z() (int(::dk::sim::current->tid.z))
#define dk_block_x() (int64_t(::dk::sim::current->bid.x))
#define dk_block_y() (int64_t(::dk::sim::current->bid.y))
#define dk_block_z() (int64_t(::dk::sim::current->bid.z))
#define dk_block_dim_x() (int(::dk::sim::current->bdim.x))
#define dk_block_dim_y() (int(::dk::sim::current->bdim.y))
#define dk_block_dim_z() (int(::dk::sim::current->bdim.z))
#define dk_grid_dim_x() (int64_t(::dk::sim::current->gdim.x))
#define dk_grid_dim_y() (int64_t(::dk::sim::current->gdim.y))
#define dk_grid_dim_z() (int64_t(::dk::sim::current->gdim.z))
#define dk_lane() (::dk::sim::current->linear & 31)

#define DK_SHARED(T, name, n)          \
  static const char name##_dk_tag = 0; \
  const ::dk::sim::SharedArray<T> name(&name##_dk_tag, (n), #name, __FILE__, __LINE__)
#define dk_barrier() ::dk::sim::barrier(__FILE__, __LINE__)
#define dk_shfl_xor(v, m) ::dk::sim::shuffle_as((v), ::dk::sim::SHFL_XOR, (m), __FILE__, __LINE__)
#define dk_shfl_down(v, d) ::dk::sim::shuffle_as((v), ::dk::sim::SHFL_DOWN, (d), __FILE__, __LINE__)
#define dk_shfl_idx(v, s) ::dk::sim::shuffle_as((v), ::dk::sim::SHFL_IDX, (s), __FILE__, __LINE__)
#define dk_atomic_add(p, v) ::dk::sim::atomic_add((p), (v))

typedef ::dk::sim::Dim3 dk_dim3;

#define DK_LAUNCH(k, grid, block, stream, ...) \
  ::dk::sim::launch(#k, (grid), (block), (stream), k, __VA_ARGS__)

inline unsigned dk_grid_stride_blocks(int64_t n, int block) {
  const int64_t b = (n + block - 1) / block;
  return unsigned(b < 1 ? 1 : b > 3 ? 3 : b);  // few blocks: every loop strides
}

#endif
