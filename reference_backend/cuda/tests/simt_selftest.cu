// The SIMT dialect's self-test: correct kernels that must run, and kernels
// with one planted bug each that the emulator must report. The same file
// compiles with nvcc (the dialect is plain CUDA there) and with the host
// compiler (the emulator). tests/test_cuda_simt.py builds it with the host
// compiler and runs every case; `simt_selftest CASE` runs one and prints
// "ok" or the finding (exit 0) or "WRONG RESULT ..." (exit 1).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../src/simt/simt.h"

namespace {

constexpr int kBlock = 128;

// ---------------------------------------------------------------- kernels
DK_KERNEL add_strided(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = dk_block_x() * dk_block_dim_x() + dk_thread_x(); i < n;
       i += dk_block_dim_x() * dk_grid_dim_x())
    out[i] = a[i] + b[i];
}

// Bug: the grid stride forgets the grid size, so blocks overlap (and `+=`
// counts elements more than once).
DK_KERNEL accumulate_no_grid_stride(const float* a, float* out, int64_t n) {
  for (int64_t i = dk_block_x() * dk_block_dim_x() + dk_thread_x(); i < n; i += dk_block_dim_x())
    out[i] += a[i];
}

// One block per row: a strided partial sum per thread, then shared memory
// down to a warp, then shuffles.
template <int kVariant> DK_KERNEL row_sum(const float* x, float* out, int64_t cols) {
  DK_SHARED(float, partial, (kVariant == 3 ? kBlock / 2 : kBlock));
  const int t = dk_thread_x();
  const float* row = x + dk_block_x() * cols;
  float acc = 0;
  for (int64_t c = t; c < cols; c += dk_block_dim_x()) acc += row[c];
  partial[t] = acc;  // variant 3: the array is half the size it must be
  if (kVariant != 1) dk_barrier();  // variant 1: the barrier is missing
  for (int stride = kBlock / 2; stride >= 32; stride /= 2) {
    if (kVariant == 2) {
      // variant 2: the barrier moved into the branch
      if (t < stride) {
        partial[t] = float(partial[t]) + float(partial[t + stride]);
        dk_barrier();
      }
    } else {
      if (t < stride) partial[t] = float(partial[t]) + float(partial[t + stride]);
      dk_barrier();
    }
  }
  if (t < 32) {
    float v = partial[t];
    for (int off = 16; off > 0; off /= 2) v += dk_shfl_down(v, off);
    if (t == 0) out[dk_block_x()] = v;
  }
}

// Bug: an early return for threads past the end, before a barrier.
DK_KERNEL scale_early_return(const float* x, float* out, int64_t n) {
  DK_SHARED(float, tile, kBlock);
  const int64_t i = dk_block_x() * dk_block_dim_x() + dk_thread_x();
  if (i >= n) return;
  tile[dk_thread_x()] = x[i];
  dk_barrier();
  out[i] = 2 * float(tile[(dk_thread_x() + 1) % dk_block_dim_x()]);
}

// Bug: reads a neighbour's slot the neighbour never writes (i <= n).
DK_KERNEL shift_unwritten(const float* x, float* out, int64_t n) {
  DK_SHARED(float, tile, kBlock + 1);
  const int t = dk_thread_x();
  tile[t] = t < n ? x[t] : 0.f;
  dk_barrier();
  if (t <= n - 1) out[t] = tile[t + 1];  // slot kBlock is never written
}

// Bug: a scan step reads a neighbour's slot and overwrites its own with no
// barrier between the read and the write (write-after-read race).
DK_KERNEL scan_war(const float* x, float* out) {
  DK_SHARED(float, s, kBlock);
  const int t = dk_thread_x();
  s[t] = x[t];
  dk_barrier();
  for (int d = 1; d < kBlock; d *= 2) {
    float v = s[t];
    if (t >= d) v += float(s[t - d]);
    s[t] = v;  // needs a barrier before it, and one after it
  }
  out[t] = s[t];
}

// Bug: rotates a tile in place: each thread reads its right neighbour's slot
// and overwrites its own, with no barrier between (write-after-read race).
DK_KERNEL rotate_in_place(const float* x, float* out) {
  DK_SHARED(float, s, kBlock);
  const int t = dk_thread_x();
  s[t] = x[t];
  dk_barrier();
  const float v = s[(t + 1) % kBlock];
  s[t] = v;  // needs a barrier before it
  dk_barrier();
  out[t] = s[t];
}

// Bug: every thread stores its value in one slot (write-write race).
DK_KERNEL last_writer_wins(const float* x, float* out) {
  DK_SHARED(float, s, 1);
  s[0] = x[dk_thread_x()];
  dk_barrier();
  out[dk_thread_x()] = s[0];
}

// Bug: a shuffle inside a branch only half the warp takes.
DK_KERNEL divergent_shuffle(const float* x, float* out) {
  const int t = dk_thread_x();
  float v = x[t];
  if (dk_lane() < 16) v += dk_shfl_xor(v, 1);
  out[t] = v;
}

#if DK_SIMT_EMULATED  // nvcc refuses it at compile time (ptxas: "uses too much shared data")
// Bug: more static shared memory than a block may have.
DK_KERNEL too_much_shared(float* out) {
  DK_SHARED(float, big, 16 * 1024);  // 64 KiB
  big[dk_thread_x()] = 1.f;
  dk_barrier();
  out[dk_thread_x()] = big[dk_thread_x()];
}
#endif

// A shuffle-only warp reduction (no shared memory) with xor butterflies.
DK_KERNEL warp_allreduce(const float* x, float* out) {
  const int t = dk_thread_x();
  float v = x[t];
  for (int m = 16; m > 0; m /= 2) v += dk_shfl_xor(v, m);
  out[t] = v;
}

// ---------------------------------------------------------------- driver
#if DK_SIMT_EMULATED
std::vector<float> to_host(const float* p, size_t n) { return std::vector<float>(p, p + n); }
float* device(const std::vector<float>& h) {
  float* p = new float[h.size() ? h.size() : 1];
  std::memcpy(p, h.data(), h.size() * sizeof(float));
  return p;
}
void release(float* p) { delete[] p; }
void* const kStream = nullptr;
#else
std::vector<float> to_host(const float* p, size_t n) {
  std::vector<float> h(n);
  cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost);
  return h;
}
float* device(const std::vector<float>& h) {
  float* p = nullptr;
  cudaMalloc(&p, (h.size() ? h.size() : 1) * sizeof(float));
  cudaMemcpy(p, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice);
  return p;
}
void release(float* p) { cudaFree(p); }
void* const kStream = nullptr;
#endif

std::string sync_status() {
#if DK_SIMT_EMULATED
  return std::string();
#else
  const cudaError_t e = cudaDeviceSynchronize();
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorString(e));
#endif
}

std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(i % 7) - 3.f;
  return v;
}

int report(const std::string& launch, const std::string& wrong) {
  const std::string sync = launch.empty() ? sync_status() : std::string();
  if (!launch.empty() || !sync.empty()) {
    std::printf("%s\n", (launch + sync).c_str());
    return 0;
  }
  if (!wrong.empty()) {
    std::printf("WRONG RESULT %s\n", wrong.c_str());
    return 1;
  }
  std::printf("ok\n");
  return 0;
}

std::string compare(const std::vector<float>& got, const std::vector<float>& want) {
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i])
      return "at " + std::to_string(i) + ": " + std::to_string(got[i]) +
             " != " + std::to_string(want[i]);
  return std::string();
}

template <int kVariant> int run_row_sum() {
  const int64_t rows = 5, cols = 300;
  std::vector<float> h = ramp(size_t(rows * cols)), want(size_t(rows), 0.f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) want[size_t(r)] += h[size_t(r * cols + c)];
  float *x = device(h), *out = device(std::vector<float>(size_t(rows), 0.f));
  const std::string e =
      DK_LAUNCH(row_sum<kVariant>, dk_dim3(unsigned(rows)), dk_dim3(kBlock), kStream, x, out, cols);
  const int rc = report(e, e.empty() ? compare(to_host(out, size_t(rows)), want) : "");
  release(x);
  release(out);
  return rc;
}

int run(const std::string& name) {
  const int64_t n = 1000;
  if (name == "add_strided" || name == "accumulate_no_grid_stride") {
    std::vector<float> a = ramp(size_t(n)), b(size_t(n), 1.f), want(a.size());
    for (int64_t i = 0; i < n; ++i) want[size_t(i)] = a[size_t(i)] + 1.f;
    float *da = device(a), *db = device(b), *out = device(b);
    const dk_dim3 grid(dk_grid_stride_blocks(n, kBlock));
    const std::string e =
        name == "add_strided"
            ? DK_LAUNCH(add_strided, grid, dk_dim3(kBlock), kStream, da, db, out, n)
            : DK_LAUNCH(accumulate_no_grid_stride, grid, dk_dim3(kBlock), kStream, da, out, n);
    const int rc = report(e, e.empty() ? compare(to_host(out, size_t(n)), want) : "");
    release(da);
    release(db);
    release(out);
    return rc;
  }
  if (name == "row_sum") return run_row_sum<0>();
  if (name == "row_sum_missing_barrier") return run_row_sum<1>();
  if (name == "row_sum_barrier_in_branch") return run_row_sum<2>();
  if (name == "row_sum_shared_too_small") return run_row_sum<3>();
  std::vector<float> h = ramp(kBlock);
  float *x = device(h), *out = device(std::vector<float>(kBlock, 0.f));
  std::string e, wrong;
  if (name == "scale_early_return") {
    e = DK_LAUNCH(scale_early_return, dk_dim3(1), dk_dim3(kBlock), kStream, x, out, int64_t(100));
  } else if (name == "shift_unwritten") {
    e = DK_LAUNCH(shift_unwritten, dk_dim3(1), dk_dim3(kBlock), kStream, x, out, int64_t(kBlock));
  } else if (name == "scan_war") {
    e = DK_LAUNCH(scan_war, dk_dim3(1), dk_dim3(kBlock), kStream, x, out);
  } else if (name == "rotate_in_place") {
    e = DK_LAUNCH(rotate_in_place, dk_dim3(1), dk_dim3(kBlock), kStream, x, out);
  } else if (name == "last_writer_wins") {
    e = DK_LAUNCH(last_writer_wins, dk_dim3(1), dk_dim3(kBlock), kStream, x, out);
  } else if (name == "divergent_shuffle") {
    e = DK_LAUNCH(divergent_shuffle, dk_dim3(1), dk_dim3(kBlock), kStream, x, out);
#if DK_SIMT_EMULATED
  } else if (name == "too_much_shared") {
    e = DK_LAUNCH(too_much_shared, dk_dim3(1), dk_dim3(kBlock), kStream, out);
#endif
  } else if (name == "block_too_large") {
    e = DK_LAUNCH(warp_allreduce, dk_dim3(1), dk_dim3(2048), kStream, x, out);
  } else if (name == "warp_allreduce") {
    e = DK_LAUNCH(warp_allreduce, dk_dim3(1), dk_dim3(kBlock), kStream, x, out);
    if (e.empty()) {
      std::vector<float> want(kBlock, 0.f);
      for (int w = 0; w < kBlock; w += 32)
        for (int l = 0; l < 32; ++l) want[size_t(w)] += h[size_t(w + l)];
      for (int i = 0; i < kBlock; ++i) want[size_t(i)] = want[size_t(i / 32 * 32)];
      wrong = compare(to_host(out, kBlock), want);
    }
  } else {
    std::printf("unknown case %s\n", name.c_str());
    return 2;
  }
  const int rc = report(e, wrong);
  release(x);
  release(out);
  return rc;
}

}  // namespace

#if DK_SIMT_EMULATED
namespace dk {
namespace sim {
// The self-test has no streams: a launch runs at once.
std::string enqueue(void*, const char*, std::function<std::string()> job) { return job(); }
}  // namespace sim
}  // namespace dk
#endif

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: simt_selftest CASE\n");
    return 2;
  }
  return run(argv[1]);
}
