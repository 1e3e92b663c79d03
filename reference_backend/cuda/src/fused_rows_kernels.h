// The row-wise fused kernels: rms_norm / layer_norm over the last dim,
// softmax over any axis, and gelu, forward and backward, each a template
// over the storage type T (float, dk_f16, dk_bf16) with everything else a
// runtime parameter, so a build compiles one variant per kernel and dtype.
// Launched by kernels_fused_rows.cu.
//
// Norms and softmax take one block per row (a grid-stride loop over rows,
// the block's size a multiple of 32); every thread strides over the row, and
// block_reduce (fused_device.h) combines the partials. No thread leaves the
// row loop early: the loop bound is the same for the whole block, so every
// barrier inside is reached by all threads.
#pragma once

#include "fused_device.h"

namespace dkcuda {
namespace fused {

template <class T> struct NormArgs {
  const T* x;
  const T* weight;  // NULL: 1
  const T* bias;    // NULL: 0 (layer_norm only)
  T* out;
  int64_t rows, d;
  float eps;
  int centered;  // layer_norm subtracts the mean; rms_norm does not
};

// One row's mean (0 for rms_norm) and 1 / sqrt(variance + eps), the variance
// in two passes (the header prescribes two passes or Welford for layer_norm).
template <class T, class S> DK_DEV void norm_row_stats(const T* x, int64_t d, float eps,
                                                       int centered, S& red, float* mean,
                                                       float* rstd) {
  const int t = dk_thread_x(), nt = dk_block_dim_x();
  float m = 0.0f;
  if (centered) {
    float s = 0.0f;
    for (int64_t i = t; i < d; i += nt) s += load(x[i]);
    m = block_sum(s, red) / float(d);
  }
  float q = 0.0f;
  for (int64_t i = t; i < d; i += nt) {
    const float c = load(x[i]) - m;
    q += c * c;
  }
  *mean = m;
  *rstd = 1.0f / sqrtf(block_sum(q, red) / float(d) + eps);
}

template <class T> DK_KERNEL norm_forward(NormArgs<T> a) {
  DK_SHARED(float, red, 32);
  const int t = dk_thread_x(), nt = dk_block_dim_x();
  for (int64_t r = dk_block_x(); r < a.rows; r += dk_grid_dim_x()) {
    const T* x = a.x + r * a.d;
    T* y = a.out + r * a.d;
    float mean, rstd;
    norm_row_stats(x, a.d, a.eps, a.centered, red, &mean, &rstd);
    for (int64_t i = t; i < a.d; i += nt) {
      float v = (load(x[i]) - mean) * rstd;
      if (a.weight) v *= load(a.weight[i]);
      if (a.bias) v += load(a.bias[i]);
      y[i] = store<T>(v);
    }
  }
}

template <class T> struct NormBackwardArgs {
  const T* dout;
  const T* x;
  const T* weight;  // NULL: 1
  T* dx;
  T* dweight;    // NULL: not wanted
  T* dbias;      // NULL: not wanted (layer_norm only)
  float* stats;  // [rows][2] mean, rstd: written by the row kernel for the column
                 // kernel when dweight or dbias is wanted; else NULL
  int64_t rows, d;
  float eps;
  int centered;
};

// dx, a block per row: with g = dout * weight, xhat = (x - mean) * rstd,
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) (rms_norm: no mean(g)).
template <class T> DK_KERNEL norm_backward_rows(NormBackwardArgs<T> a) {
  DK_SHARED(float, red, 32);
  const int t = dk_thread_x(), nt = dk_block_dim_x();
  for (int64_t r = dk_block_x(); r < a.rows; r += dk_grid_dim_x()) {
    const T* x = a.x + r * a.d;
    const T* g = a.dout + r * a.d;
    float mean, rstd;
    norm_row_stats(x, a.d, a.eps, a.centered, red, &mean, &rstd);
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t i = t; i < a.d; i += nt) {
      const float wg = a.weight ? load(g[i]) * load(a.weight[i]) : load(g[i]);
      sg += wg;
      sgx += wg * ((load(x[i]) - mean) * rstd);
    }
    const float mean_g = a.centered ? block_sum(sg, red) / float(a.d) : 0.0f;
    const float mean_gx = block_sum(sgx, red) / float(a.d);
    T* dx = a.dx + r * a.d;
    for (int64_t i = t; i < a.d; i += nt) {
      const float wg = a.weight ? load(g[i]) * load(a.weight[i]) : load(g[i]);
      const float xhat = (load(x[i]) - mean) * rstd;
      dx[i] = store<T>(rstd * (wg - mean_g - xhat * mean_gx));
    }
    if (a.stats && t == 0) {
      a.stats[2 * r] = mean;
      a.stats[2 * r + 1] = rstd;
    }
  }
}

// dweight = sum over rows of dout * xhat, dbias = sum over rows of dout.
// A block of 8 warps takes a tile of 32 columns (grid-stride over tiles):
// lane l owns column tile + l, warp w the rows w, w + 8, w + 16, ... (so a
// warp reads 32 adjacent elements of a row at once), summed compensated in
// row order; the 8 partials of a column are then added (compensated) in
// warp order. The assignment depends on the sizes only, so the result has
// the same bits whatever the scheduling. Launched with kColumnWarps * 32
// threads.
constexpr int kColumnWarps = 8;
template <class T> DK_KERNEL norm_backward_columns(NormBackwardArgs<T> a) {
  DK_SHARED(float, part_w, kColumnWarps * 32);
  DK_SHARED(float, part_b, kColumnWarps * 32);
  const int lane = dk_thread_x() & 31, w = dk_thread_x() >> 5;
  const int64_t tiles = (a.d + 31) / 32;
  for (int64_t tile = dk_block_x(); tile < tiles; tile += dk_grid_dim_x()) {
    const int64_t c = tile * 32 + lane;
    CompensatedSum dw, db;
    if (c < a.d) {
      for (int64_t r = w; r < a.rows; r += kColumnWarps) {
        const float g = load(a.dout[r * a.d + c]);
        dw.add(g * ((load(a.x[r * a.d + c]) - a.stats[2 * r]) * a.stats[2 * r + 1]));
        db.add(g);
      }
    }
    part_w[w * 32 + lane] = dw.value();
    part_b[w * 32 + lane] = db.value();
    dk_barrier();
    if (w == 0 && c < a.d) {
      CompensatedSum sw, sb;
      for (int k = 0; k < kColumnWarps; ++k) {
        const float pw = part_w[k * 32 + lane], pb = part_b[k * 32 + lane];
        sw.add(pw);
        sb.add(pb);
      }
      if (a.dweight) a.dweight[c] = store<T>(sw.value());
      if (a.dbias) a.dbias[c] = store<T>(sb.value());
    }
    dk_barrier();  // the partials are read before the next tile writes them
  }
}

template <class T> struct SoftmaxArgs {
  const T* x;     // forward: x; backward: out (the forward's)
  const T* dout;  // NULL: the forward
  T* out;         // forward: out; backward: dx
  int64_t rows, d;
  int64_t inner;  // the axis' stride in the dense tensors: the product of the
                  // dims after it (1 for the last axis)
};

// A row is one position of every dim but the axis: row r starts at
// (r / inner) * d * inner + r % inner and steps by inner.
// Forward: out = exp(x - max) / sum(exp(x - max)), max-subtracted; a NaN max
// (or -inf - -inf) makes the row NaN, as the decomposition does.
// Backward: dx = out * (dout - sum(dout * out)).
template <class T> DK_KERNEL softmax_rows(SoftmaxArgs<T> a) {
  DK_SHARED(float, red, 32);
  const int t = dk_thread_x(), nt = dk_block_dim_x();
  const int64_t st = a.inner;
  for (int64_t r = dk_block_x(); r < a.rows; r += dk_grid_dim_x()) {
    const int64_t base = (r / st) * a.d * st + r % st;
    const T* x = a.x + base;
    T* y = a.out + base;
    if (a.dout) {
      const T* g = a.dout + base;
      float s = 0.0f;
      for (int64_t i = t; i < a.d; i += nt) s += load(g[i * st]) * load(x[i * st]);
      const float dot = block_sum(s, red);
      for (int64_t i = t; i < a.d; i += nt)
        y[i * st] = store<T>(load(x[i * st]) * (load(g[i * st]) - dot));
    } else {
      float m = -INFINITY;
      for (int64_t i = t; i < a.d; i += nt) m = max_nan(m, load(x[i * st]));
      m = block_max(m, red);
      float s = 0.0f;
      for (int64_t i = t; i < a.d; i += nt) s += expf(load(x[i * st]) - m);
      const float inv = 1.0f / block_sum(s, red);
      for (int64_t i = t; i < a.d; i += nt) y[i * st] = store<T>(expf(load(x[i * st]) - m) * inv);
    }
  }
}

template <class T> struct GeluArgs {
  const T* x;
  const T* dout;  // NULL: the forward
  T* out;         // forward: gelu(x); backward: dout * gelu'(x)
  int64_t n;
  int tanh_form;
};

template <class T> DK_KERNEL gelu_elementwise(GeluArgs<T> a) {
  const int64_t step = dk_grid_dim_x() * dk_block_dim_x();
  for (int64_t i = dk_block_x() * dk_block_dim_x() + dk_thread_x(); i < a.n; i += step) {
    const double x = load(a.x[i]);
    const double y = a.dout ? double(load(a.dout[i])) * gelu_grad_elem(x, a.tanh_form != 0)
                            : gelu_elem(x, a.tanh_form != 0);
    a.out[i] = store<T>(float(y));
  }
}

}  // namespace fused
}  // namespace dkcuda
