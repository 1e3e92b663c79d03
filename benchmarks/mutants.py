"""Single-bug variants of the reference CPU plugin (reference_backend/cpu/src;
files named relative to it, e.g. "fast/gemm.cpp"; "devicekit/plugin_half.h" is
the shared plugin runtime header in device_api/include), in its default build (the
fast paths included), for the mutation run (benchmarks/mutation_run.py) and its CI subset
(tests/test_conformance_catches.py).

Each mutant is (name, file, old text, new text, kind): ``old`` must occur
exactly once in the file, or the run fails loudly (the plugin changed and the
mutant no longer applies). Every one is a bug a kernel engineer could write:
a wrong rounding, a chunk or block boundary off by one, accumulation in the
storage precision, a dropped NaN or zero sign, a missing argument check, a
runtime call that lies.
"""

ERF_CHEAP = ("C(([](double v) { const double t = 1.0 / (1.0 + 0.3275911 * std::fabs(v)); "
             "return std::copysign(1.0 - ((((1.061405429 * t - 1.453152027) * t + 1.421413741) "
             "* t - 0.284496736) * t + 0.254829592) * t * std::exp(-v * v), v); })(double(x)))")

MUTANTS = [
    # ---- casts and rounding (devicekit/plugin_half.h, dtype.h, kernels.cpp) ----
    ("half_round_half_up", "devicekit/plugin_half.h",
     "if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;",
     "if (rem >= 0x1000u) ++h;", "casts"),
    ("bf16_round_half_up", "devicekit/plugin_half.h",
     "const uint32_t rne = (x + 0x7fffu + lsb) >> 16;",
     "const uint32_t rne = (x + 0x8000u) >> 16;", "casts"),
    # the float32 -> bfloat16 rounding's NaN select (the cast kernel's too)
    ("bf16_nan_truncated", "devicekit/plugin_half.h", "const uint32_t nan = (x >> 16) | 0x0040u;",
     "const uint32_t nan = x >> 16;", "casts"),
    ("half_overflow_saturates", "devicekit/plugin_half.h",
     "if (ax >= 0x47800000u) return (uint16_t)(sign | 0x7c00u);",
     "if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u);\n"
     "  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7bffu);", "casts"),
    ("half_subnormal_flush", "devicekit/plugin_half.h", "if (ax <= 0x33000000u) return sign;",
     "if (ax < 0x33c00000u) return sign;", "casts"),
    ("double_to_half_twice_rounded", "devicekit/plugin_half.h",
     "return dkh_float_to_half(dkh_double_to_float_round_odd(d));",
     "return dkh_float_to_half((float)d);", "casts"),
    ("float_to_int_rounds", "dtype.h", "  v = std::trunc(v);\n", "  v = std::nearbyint(v);\n",
     "casts"),
    ("int_to_float32_via_double_float", "dtype.h",
     "else if constexpr (std::is_floating_point<D>::value) return D(i);  // one rounding",
     "else if constexpr (std::is_floating_point<D>::value) return D(float(double(i) + 0.25));",
     "casts"),
    ("fill_through_float32", "kernels.cpp",
     "const T x = is_int ? convert<T>(v.value.i) : convert<T>(v.value.f);",
     "const T x = is_int ? convert<T>(v.value.i) : convert<T>(double(float(v.value.f)));",
     "casts"),
    ("fill_int_through_double", "kernels.cpp",
     "const T x = is_int ? convert<T>(v.value.i) : convert<T>(v.value.f);",
     "const T x = is_int ? convert<T>(double(v.value.i)) : convert<T>(v.value.f);", "casts"),
    # ---- elementwise numerics ----
    ("half_store_drops_lsb", "kernels_elementwise.cpp",
     "if constexpr (std::is_same<T, f16>::value) return f16{dkh_float_to_half(x)};",
     "if constexpr (std::is_same<T, f16>::value) return f16{uint16_t(dkh_float_to_half(x) & ~1u)};",
     "numerics"),
    ("abs_keeps_neg_zero", "kernels_elementwise.cpp", "else return std::fabs(x);  // abs(-0.0) = +0.0",
     "else return x < 0 ? -x : x;", "numerics"),
    ("erf_cheap_approximation", "kernels_elementwise.cpp", 'DKCPU_MATH(ERF, "erf", std::erf(x))',
     f'DKCPU_MATH(ERF, "erf", {ERF_CHEAP})', "numerics"),
    ("rsqrt_in_float", "kernels_elementwise.cpp", 'DKCPU_MATH(RSQRT, "rsqrt", C(1) / std::sqrt(x))',
     'DKCPU_MATH(RSQRT, "rsqrt", C(1.0f / std::sqrt(float(x))))', "numerics"),
    ("exp_float64_in_float32", "kernels_elementwise.cpp", "    else return std::exp(x);",
     "    else return C(std::exp(float(x)));", "numerics"),
    ("tanh_early_saturation", "kernels_elementwise.cpp", "    else return std::tanh(x);",
     "    else return x > C(7) ? C(1) : x < C(-7) ? C(-1) : std::tanh(x);", "numerics"),
    ("sign_keeps_neg_zero", "kernels_elementwise.cpp",
     "else return x > 0 ? C(1) : x < 0 ? C(-1) : x == x ? C(0) : x;",
     "else return x > 0 ? C(1) : x < 0 ? C(-1) : x;", "numerics"),
    ("maximum_ignores_zero_sign", "kernels_elementwise.cpp",
     "C r = beyond || (a == b && std::signbit(a) != kMax) ? a : b;", "C r = beyond ? a : b;",
     "numerics"),
    ("maximum_drops_nan_a", "kernels_elementwise.cpp", "      return a != a ? a : r;\n",
     "      return r;\n", "numerics"),
    ("le_as_not_gt", "kernels_elementwise.cpp", 'DKCPU_PREDICATE(LE, Compare, "le", a <= b)',
     'DKCPU_PREDICATE(LE, Compare, "le", !(a > b))', "numerics"),
    ("bool_true_is_0xff", "kernels_elementwise.cpp",
     "return boolean{uint8_t(x ? 1 : 0)};", "return boolean{uint8_t(x ? 0xff : 0)};", "numerics"),
    ("div_by_reciprocal", "kernels_elementwise.cpp",
     "template <class C> C operator()(C a, C b) const { return a / b; }",
     "template <class C> C operator()(C a, C b) const { return a * (C(1) / b); }", "numerics"),
    ("pow_via_exp_log", "kernels_elementwise.cpp",
     "template <class C> C operator()(C a, C b) const { return std::pow(a, b); }",
     "template <class C> C operator()(C a, C b) const { return C(std::exp(double(b) * "
     "std::log(double(a)))); }", "numerics"),
    # ---- strides, broadcasting, parallel chunks ----
    ("odometer_carry_ignores_inner", "kernels_elementwise.cpp",
     "off[k] += p.strides[k][d - 1] - p.shape[d] * p.strides[k][d];",
     "off[k] += p.strides[k][d - 1];", "strides"),
    ("elementwise_chunk_drops_last", "kernels_elementwise.cpp",
     "for_each_row(p, begin, end, [&]", "for_each_row(p, begin, end - (begin > 0), [&]",
     "strides"),
    ("elementwise_chunk_capped", "kernels_elementwise.cpp",
     "for_each_row(p, begin, end, [&]", "for_each_row(p, begin, std::min(end, begin + 65536), [&]",
     "strides"),
    ("copy_odometer_rewind", "kernels.cpp",
     "src -= in.strides[d] * out.shape[d] * int64_t(kBytes);",
     "src -= in.strides[d] * (out.shape[d] - (d > 0)) * int64_t(kBytes);", "strides"),
    # ---- reductions and scans ----
    ("sum_pairwise_drops_one", "kernels_reduce.cpp",
     "return R::combine(reduce_run<R>(p, half), reduce_run<R>(p + half, n - half));",
     "return R::combine(reduce_run<R>(p, half), reduce_run<R>(p + half, n - half - (n > 60000)));",
     "reductions"),
    ("reduce_tail_skips_last", "kernels_reduce.cpp",
     "  for (; i < n; ++i) {\n    const A v = R::load(p[i]);",
     "  for (; i + 1 < n; ++i) {\n    const A v = R::load(p[i]);", "reductions"),
    ("max_nan_lost_in_vector_loop", "kernels_reduce.cpp",
     "      part[j] = R::step(part[j], v);\n      if constexpr (R::kCountNans) nans[j] += v != v;",
     "      part[j] = R::step(part[j], v);", "reductions"),
    ("reduce_ragged_tail_unwritten", "kernels_reduce.cpp",
     "for (int64_t w = 0; col + w < width; ++w) {", "for (int64_t w = 0; col + w + 1 < width; ++w) {",
     "reductions"),
    ("int_max_identity_zero", "kernels_reduce.cpp",
     "else return kKind == kMax ? L::lowest() : L::max();",
     "else return kKind == kMax ? A(0) : L::max();", "reductions"),
    ("argmax_last_tie", "kernels_reduce.cpp", "if (b == b && (v != v || v > b))",
     "if (b == b && (v != v || v >= b))", "reductions"),
    ("argmax_ignores_nan", "kernels_reduce.cpp", "if (b == b && (v != v || v > b))",
     "if (v > b)", "reductions"),
    ("cumsum_half_accumulates_in_half", "kernels_reduce.cpp",
     "if constexpr (kIsFloat<T>) a += A(widen(x[row + c])), out[row + c] = convert<T>(a);",
     "if constexpr (kIsFloat<T>) out[row + c] = convert<T>(a + A(widen(x[row + c]))), "
     "a = A(widen(out[row + c]));", "reductions"),
    ("reduce_axes_beyond_rank_accepted", "kernels_reduce.cpp",
     "if (attrs->axes == 0 || (attrs->axes & ~valid) != 0) {", "if (attrs->axes == 0) {",
     "arguments"),
    # ---- index ops ----
    ("iota_float_in_float32", "kernels_index.cpp",
     ": convert<T>(l.start_f + double(i) * l.step_f);",
     ": convert<T>(float(l.start_f) + float(i) * float(l.step_f));", "index"),
    ("gather_index_equal_size_accepted", "kernels_index.cpp",
     "    if (i < 0 || i >= size) return j;", "    if (i < 0 || i > size) return j;", "index"),
    ("scatter_add_ignores_x", "kernels_index.cpp",
     "[&](int64_t e, int64_t off) { acc[e] = A(widen_exact(x[off])); });",
     "[&](int64_t e, int64_t off) { acc[e] = A(0 * off); });", "index"),
    ("gather_row_ignores_index_stride", "kernels_index.cpp",
     "const int64_t xo = s.x + idx[j * is] * xa", "const int64_t xo = s.x + idx[j] * xa", "index"),
    ("scatter_add_row_ignores_src_stride", "kernels_index.cpp",
     "a[j] += A(widen_exact(sr[j * ss]));", "a[j] += A(widen_exact(sr[j]));", "index"),
    # ---- GEMM blocking (fast/gemm.cpp) and the plain integer matmul ----
    ("gemm_second_k_block_overwrites", "fast/gemm.cpp",
     "mk.fn(mc, nc, kc, pa, g.a + i0 * g.a_row + k0, g.a_row, pb, c, g.n, k0 > 0);",
     "mk.fn(mc, nc, kc, pa, g.a + i0 * g.a_row + k0, g.a_row, pb, c, g.n, k0 > kKC);", "gemm"),
    ("gemm_direct_a_rows_kc_apart", "fast/gemm.cpp",
     "const T ai = kDirect ? pa[i * lda + p] : pa[p * MR + i];",
     "const T ai = kDirect ? pa[i * kc + p] : pa[p * MR + i];", "gemm"),
    ("gemm_pack_transposed_a_first_strip", "fast/gemm.cpp",
     "const T* src = g.a + (i0 + i) + k0 * g.a_col;",
     "const T* src = g.a + i0 + k0 * g.a_col;", "gemm"),
    ("gemm_k_block_drops_one", "fast/gemm.cpp",
     "const int64_t kc = std::min(kKC, g.k - k0);",
     "const int64_t kc = std::min(kKC, g.k - k0 - (k0 > 0));", "gemm"),
    ("gemm_cols_skips_row_block_edge", "fast/gemm.cpp",
     "  for (int64_t i = 0; i < g.m; i += kMC) {\n    const int64_t mc = std::min(kMC, g.m - i);",
     "  for (int64_t i = 0; i < g.m; i += kMC) {\n    const int64_t mc = std::min(kMC - (i > 0), g.m - i);",
     "gemm"),
    ("gemm_int32_wraps_at_16_bits", "kernels_matmul.cpp",
     "using U = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;",
     "using U = std::conditional_t<sizeof(T) == 8, uint64_t, uint16_t>;", "gemm"),
    ("matmul_batch_capped", "kernels_matmul.cpp",
     "for (int64_t bi = 0; bi < l.batch; ++bi) {", "for (int64_t bi = 0; bi < l.batch && bi < 2; ++bi) {",
     "gemm"),
    # ---- RNG ----
    ("philox_nine_rounds", "devicekit/plugin_philox.h", "for (int round = 0; round < 10; ++round) {",
     "for (int round = 0; round < 9; ++round) {", "rng"),
    ("uniform_half_wrong_bits", "kernels_random.cpp", "float(w >> 21) * 0x1p-11f",
     "float(w >> 22) * 0x1p-10f", "rng"),
    ("random_counter_32_bits", "kernels_random.cpp",
     "dkh_philox_block(l.seed, l.offset + uint64_t(b))",
     "dkh_philox_block(l.seed, uint64_t(uint32_t(l.offset + uint64_t(b))))", "rng"),
    # ---- fused kernels ----
    # the default build's attention backward is fast/attention.cpp's blocked one
    ("sdpa_backward_dots_drop_last_dim", "fast/attention.cpp",
     "block_mm<MR, NR, VB>(nkp, nqp, d, kp, d, qst, nqp, st, nqp, false);",
     "block_mm<MR, NR, VB>(nkp, nqp, d - 1, kp, d, qst, nqp, st, nqp, false);", "fused"),
    ("sdpa_backward_causal_sees_one_more", "fast/attention.cpp",
     "for (int64_t i = 0; i < std::min(j - i0, nq); ++i) st[j * nqp + i] = -INFINITY;",
     "for (int64_t i = 0; i < std::min(j - i0 - 1, nq); ++i) st[j * nqp + i] = -INFINITY;",
     "fused"),
    ("gelu_grad_drops_cubic_factor", "gelu.h", "(1.0 + 3.0 * kGeluA * x * x)",
     "(1.0 + kGeluA * x * x)", "fused"),
    ("gelu_erf_grad_sign", "gelu.h", "+ x * kInvSqrt2Pi * exp_neg", "- x * kInvSqrt2Pi * exp_neg",
     "fused"),
    ("gelu_chunks_read_the_first", "kernels_fused_gelu.cpp", "fast::gelu_f32(dout, l.x + b,",
     "fast::gelu_f32(dout, l.x,", "fused"),
    ("norm_eps_outside_sqrt", "fused_common.h",
     "const float rstd = 1.0f / std::sqrt(var + l.eps);",
     "const float rstd = 1.0f / (std::sqrt(var) + l.eps);", "fused"),
    ("layer_norm_unbiased_variance", "fused_common.h",
     "const float var = sum_sq_centered(x, l.d, mean) / float(l.d);",
     "const float var = sum_sq_centered(x, l.d, mean) / float(l.d - 1);", "fused"),
    ("softmax_max_from_first_lanes", "kernels_fused.cpp",
     "for (int k = 0; i < l.d; ++i, ++k) acc[k] = max_nan(acc[k], x[i]);",
     "for (int k = 0; i < l.d; ++i, ++k) acc[k] = acc[k];", "fused"),
    ("attention_no_online_rescale", "fast/attention.cpp", "l = l * alpha + sum[0];",
     "l = l + sum[0];", "fused"),
    ("attention_causal_strict", "fast/attention.cpp",
     "std::min(nk, std::max<int64_t>(0, qi + 1 - j0))", "std::min(nk, std::max<int64_t>(0, qi - j0))",
     "fused"),
    ("attention_causal_kend_short", "fast/attention.cpp",
     "const int64_t kend = L.causal ? std::min(L.lk, i0 + nq) : L.lk;",
     "const int64_t kend = L.causal ? std::min(L.lk, i0 + std::min<int64_t>(nq, 32)) : L.lk;",
     "fused"),
    # q, k, v rows read as if dense: right for contiguous q/k/v, wrong for the
    # permuted views (x.reshape(B, L, H, D).transpose(1, 2)) the kernel accepts
    ("attention_q_rows_dense", "fast/attention.cpp", "q[i * qs + c] * L.scale",
     "q[i * d + c] * L.scale", "fused"),
    ("attention_k_rows_dense", "fast/attention.cpp", "k[(j0 + jj) * ks + c];",
     "k[(j0 + jj) * d + c];", "fused"),
    ("attention_v_rows_dense", "fast/attention.cpp", "int64_t ldv = vs;", "int64_t ldv = dv;",
     "fused"),
    # supports() accepting a q/k/v whose last dim is strided (k transposed in memory)
    ("attention_accepts_strided_rows", "fused_common.h",
     "return v->strides[3] == 1 || v->shape[3] == 1;", "return true;", "fused"),
]

MUTANTS += [
    # ---- argument checking ----
    ("same_dtype_checks_size_only", "kernel_common.h", "  if (v.dtype == ref.dtype) return nullptr;",
     "  if (dkh_dtype_size(v.dtype) == dkh_dtype_size(ref.dtype)) return nullptr;",
     "arguments"),
    ("axis_negative_accepted", "kernel_common.h",
     "inline DK_Error* check_axis(const char* call, int32_t axis, const View& v, const char* what) {\n",
     "inline DK_Error* check_axis(const char* call, int32_t axis, const View& v, const char* what) {\n"
     "  if (axis < 0) return nullptr;\n", "arguments"),
    # an input of higher rank than the output taken as broadcasting (input_rank_above_output)
    ("broadcast_drops_leading_dims", "kernel_common.h", "  if (shift < 0) return false;\n",
     "", "arguments"),
    # in place over a broadcast input 0 (output_aliases_broadcast_input): strides not compared
    ("inplace_ignores_strides", "kernel_common.h",
     "(a.shape[d] != 1 && a.strides[d] != b.strides[d])", "false", "arguments"),
    # the argument rules (device_api/spec/arg_rules.json) that no case checked before
    ("matmul_out_batch_dims_unchecked", "kernels_matmul.cpp",
     "ok = ok && b.shape[d] == a.shape[d] && out.shape[d] == a.shape[d];",
     "ok = ok && b.shape[d] == a.shape[d];", "arguments"),
    ("index_int32_accepted", "kernels_index.cpp", "if (index.dtype != DK_DTYPE_INT64) {",
     "if (index.dtype != DK_DTYPE_INT64 && index.dtype != DK_DTYPE_INT32) {", "arguments"),
    ("scatter_src_shape_unchecked", "kernels_index.cpp",
     'if (DK_Error* e = check_same_shape(call, "input 2 (src)", src, index, "input 1 (index)"))\n'
     "        return e;", "if (false) return nullptr;", "arguments"),
    ("view_bounds_ignore_offset", "devicekit/plugin_runtime.hpp", "if (bytes > size - offset) {",
     "if (bytes > size) {", "arguments"),
    ("gather_negative_index_accepted", "kernels_index.cpp", "    if (i < 0 || i >= size) return j;",
     "    if (i >= size) return j;", "index"),
    # ---- the runtime contract ----
    ("memory_stats_rounded_blocks", "devicekit/plugin_runtime.hpp",
     "  d.bytes_in_use += size;",
     "  d.bytes_in_use += (size + 255) / 256 * 256;", "runtime"),
    ("event_query_always_reached", "stream.cpp",
     "args->reached = point == nullptr || point->reached.load();", "args->reached = 1;", "runtime"),
    ("stream_sync_keeps_error", "stream.cpp",
     "    drain(args->stream);\n    return take_error(args->stream);",
     "    drain(args->stream);\n    return nullptr;", "runtime"),
]

MUTANTS += [
    # Kinds of bug that hand-picked cases tend to miss: a combination of optional
    # parts nobody made, sizes past a fast path's thresholds with ragged tails, a
    # degenerate size the header allows, a strided operand where no case strides
    # one, 32-bit index arithmetic, which of two asynchronous errors is reported.
    ("layer_norm_bias_needs_weight", "fused_common.h",
     "  else if (b)\n    for (int64_t i = i0; i < i1; ++i) y[i] = (x[i] - mean) * rstd + b[i];\n",
     "", "optional"),
    ("norm_backward_dbias_needs_dweight", "kernels_fused_backward.cpp",
     "  if (!l.dweight && !l.dbias) return nullptr;", "  if (!l.dweight) return nullptr;",
     "optional"),
    ("norm_streaming_tail_unwritten", "fast/norm.cpp",
     "    stream_store(y + i, r);\n  }\n  norm_span(x, w, b, y, i, n, mean, rstd);\n",
     "    stream_store(y + i, r);\n  }\n", "thresholds"),
    ("attention_additive_mask_first_key_tile", "fast/attention.cpp",
     "for (int64_t jj = 0; jj < visible; ++jj) s[jj] += f[(j0 + jj) * L.mask_strides[3]];",
     "for (int64_t jj = 0; jj < visible; ++jj) s[jj] += f[jj * L.mask_strides[3]];", "thresholds"),
    ("gemm_empty_early_return", "fast/gemm.cpp",
     "  if (g.k == 0) {  // an empty sum: zeros (the block loop below would not run)\n"
     "    std::fill(g.c, g.c + g.m * g.n, T(0));\n    return;\n  }",
     "  if (g.m == 0 || g.n == 0 || g.k == 0) return;  // nothing to do", "degenerate"),
    ("gather_row_copy_ignores_table_stride", "kernels_index.cpp",
     "const bool row_copy = l.axis != last && is == 0 && xs == 1 && os == 1;",
     "const bool row_copy = l.axis != last && is == 0 && os == 1;", "strides"),
    ("gather_index_read_as_int32", "kernels_index.cpp",
     "    const int64_t i = idx[j * step];\n    if (i < 0 || i >= size) return j;",
     "    const int i = idx[j * step];\n    if (i < 0 || i >= size) return j;", "overflow"),
    ("iota_row_offset_int", "kernels_index.cpp",
     "        std::fill(out + r * l.inner, out + (r + 1) * l.inner, v);",
     "        const int at = r * l.inner;\n        std::fill(out + at, out + at + l.inner, v);",
     "overflow"),
    ("stream_keeps_last_error", "stream.cpp",
     "      if (s->first_error == nullptr) {\n        s->first_error = err;\n      } else {"
     "  // a later error is dropped: the header reports the first one\n"
     "        DK_Error_Destroy_Args destroy = {DK_Error_Destroy_Args_STRUCT_SIZE, err};",
     "      {  // the latest error is the one to report\n"
     "        DK_Error_Destroy_Args destroy = {DK_Error_Destroy_Args_STRUCT_SIZE, s->first_error};\n"
     "        s->first_error = err;", "runtime"),
]

MUTANTS += [
    # ---- collectives (collectives.cpp: the shared-memory communicators) ----
    # Bugs of a collective engine: a chunk left unreduced, the wrong root, a
    # reduction order that depends on the rank (different bits on different
    # ranks, float addition being commutative but not associative: visible
    # from 3 ranks), a barrier left out (a race), a deadline that never comes,
    # a segment left in /dev/shm, 16-bit accumulation, avg divided too early,
    # an all_gather block at the chunk's offset instead of the count's.
    ("coll_reduce_drops_last_chunk", "collectives.cpp",
     "reduce_any(k.dtype, k.op, mybuf + lo * es, srcs.data(), n, hi - lo);",
     "if (ci + 1 < nchunks || nchunks == 1)\n"
     "        reduce_any(k.dtype, k.op, mybuf + lo * es, srcs.data(), n, hi - lo);", "collectives"),
    ("coll_broadcast_from_rank0", "collectives.cpp",
     "copy(recv + off * es, me == k.root ? send + off * es : c->coll_buf(k.root, b), len * es);",
     "copy(recv + off * es, me == k.root ? send + off * es : c->coll_buf(0, b), len * es);",
     "collectives"),
    ("coll_reduce_to_root_plus_one", "collectives.cpp",
     "      if (k.collective == DK_COLL_ALL_REDUCE || me == k.root) {\n"
     "        for (int r = 0; r < n; ++r) srcs[r] = c->coll_buf(r, b);",
     "      if (k.collective == DK_COLL_ALL_REDUCE || me == (k.root + 1) % n) {\n"
     "        for (int r = 0; r < n; ++r) srcs[r] = c->coll_buf(r, b);", "collectives"),
    ("coll_reduce_order_starts_at_self", "collectives.cpp",
     "for (int r = 0; r < n; ++r) srcs[r] = c->coll_buf(r, b);",
     "for (int r = 0; r < n; ++r) srcs[r] = c->coll_buf((me + r) % n, b);", "collectives"),
    ("coll_no_barrier_after_reduce", "collectives.cpp",
     "      reduce_any(k.dtype, k.op, mybuf + lo * es, srcs.data(), n, hi - lo);\n"
     "      if (DK_Error* e = barrier(x)) return e;\n",
     "      reduce_any(k.dtype, k.op, mybuf + lo * es, srcs.data(), n, hi - lo);\n",
     "collectives"),
    # the deadline recomputed at every check: the timeout never fires (a rank
    # that stays alive but never calls blocks its peers for ever)
    ("coll_wait_deadline_moves", "collectives.cpp",
     "std::string why = check_wait(x, deadline, missing(), pids);",
     "std::string why = check_wait(\n"
     "          x, Clock::now() + std::chrono::milliseconds(x.c->timeout_ms), missing(), pids);",
     "collectives"),
    ("coll_segment_never_unlinked", "collectives.cpp",
     "    shm_unlink(name.c_str());\n    if (e != nullptr) {", "    if (e != nullptr) {",
     "collectives"),
    ("coll_half_sum_in_storage_precision", "collectives.cpp",
     "      reduce_span<S, A>(d, s, n, len, ld, [](A a, A b) { return wrap_add(a, b); }, st);",
     "      reduce_span<S, A>(d, s, n, len, ld, [&](A a, A b) {\n"
     "        if constexpr (sizeof(S) == 2) return A(ld(st(a + b)));\n"
     "        else return wrap_add(a, b);\n"
     "      }, st);", "collectives"),
    ("coll_avg_int_divides_first", "collectives.cpp",
     "[&](S v) { return int64_t(ld(v)); },\n"
     "            [](int64_t a, int64_t b) { return wrap_add(a, b); },\n"
     "            [&](int64_t a) { return st(A(a / nn)); });",
     "[&](S v) { return int64_t(ld(v)) / nn; },\n"
     "            [](int64_t a, int64_t b) { return wrap_add(a, b); },\n"
     "            [&](int64_t a) { return st(A(a)); });", "collectives"),
    ("coll_avg_float_divides_first", "collectives.cpp",
     "d, s, n, len, ld, [](A a, A b) { return a + b; }, [&](A a) { return st(a / nn); });",
     "d, s, n, len, [&](S v) { return ld(v) / nn; }, [](A a, A b) { return a + b; }, st);",
     "collectives"),
    ("coll_all_gather_block_at_chunk_offset", "collectives.cpp",
     "copy(recv + (size_t(j) * count + off) * es, c->coll_buf(j, b), len * es);",
     "copy(recv + (size_t(j) * len + off) * es, c->coll_buf(j, b), len * es);", "collectives"),
    # ---- graphs (graphs.cpp): what a plugin's capture and replay can get wrong ----
    # a stale argument block: every launch of a kernel replays with the
    # arguments its first captured launch had (views, scalars)
    ("graph_replays_first_args_per_kernel", "graphs.cpp",
     "  n.fn = fn;\n  std::memcpy(n.payload, payload, bytes);",
     "  n.fn = fn;\n"
     "  const GraphNode* first = nullptr;\n"
     "  for (const GraphNode& m : c->nodes) {\n"
     "    if (m.fn == fn && &m != &n) {\n"
     "      first = &m;\n"
     "      break;\n"
     "    }\n"
     "  }\n"
     "  std::memcpy(n.payload, first != nullptr ? first->payload : payload, bytes);", "graphs"),
    # the arguments kept by reference: one argument block per kernel that each
    # capture of it overwrites, so every launch replays with its last arguments
    ("graph_args_by_reference", "graphs.cpp",
     "  n.fn = fn;\n  std::memcpy(n.payload, payload, bytes);",
     "  n.fn = fn;\n"
     "  for (GraphNode& m : c->nodes) {\n"
     "    if (m.fn == fn) std::memcpy(m.payload, payload, bytes);\n"
     "  }", "graphs"),
    # the graph freed too early: a launch takes no share, so the first launch's
    # worker frees the graph (its recorded calls) under the caller
    ("graph_launch_takes_no_share", "graphs.cpp",
     "    g->refs.fetch_add(1);\n    const LaunchPayload p{g, points.release()};",
     "    const LaunchPayload p{g, points.release()};", "graphs"),
    # the last recorded call is dropped at end-capture
    ("graph_end_drops_last_call", "graphs.cpp",
     "    g->nodes = std::move(owned->nodes);\n",
     "    g->nodes = std::move(owned->nodes);\n    if (g->nodes.size() > 1) g->nodes.pop_back();\n",
     "graphs"),
    # ---- numerically careless kernels: right on random data, wrong on the hostile section's ----
    # an 8-lane running sum with no pairwise tree: a large first term swallows every small one
    ("sum_lanes_not_pairwise", "kernels_reduce.cpp",
     "  if (n > 128) {\n    const int64_t half = n / 2 / 8 * 8;",
     "  if (n > (int64_t(1) << 40)) {\n    const int64_t half = n / 2 / 8 * 8;", "hostile"),
    # the kept-inner-dim path's running sums over 128 rows (the plugin's code before the
    # hostile section found it: past the header's bound for a large first row)
    ("reduce_columns_long_running_sums", "kernels_reduce.cpp", "constexpr int64_t kLeaf = 16;",
     "constexpr int64_t kLeaf = 128;", "hostile"),
    # one-pass variance E[x^2] - E[x]^2 (rms_norm's mean is 0: unchanged)
    ("layer_norm_one_pass_variance", "fused_common.h",
     "const float var = sum_sq_centered(x, l.d, mean) / float(l.d);",
     "const float var = sum_sq_centered(x, l.d, 0.0f) / float(l.d) - mean * mean;", "hostile"),
    # softmax as exp(x) / sum(exp(x)): exact enough on normal data, inf / inf past x = 88
    ("softmax_without_max_subtraction", "kernels_fused.cpp",
     "for (int64_t j = 0; j < l.d; ++j) y[j] = exp_nonpositive(x[j] - m);",
     "for (int64_t j = 0; j < l.d; ++j) y[j] = std::exp(x[j]);", "hostile"),
    # the online softmax without its running max: p = exp(s), O and l never rescaled
    ("attention_without_max_subtraction", "fast/attention.cpp",
     "  for (int64_t jj = 0; jj < bk; ++jj) s[jj] = exp_nonpositive(s[jj] - shift);\n"
     "  float sum[kLanes] = {};  // independent partial sums, so the sum vectorises\n"
     "  for (int64_t jj = 0; jj < bk; jj += kLanes)\n"
     "    for (int t = 0; t < kLanes; ++t) sum[t] += s[jj + t];\n"
     "  for (int w = kLanes / 2; w > 0; w /= 2)\n"
     "    for (int t = 0; t < w; ++t) sum[t] += sum[t + w];\n"
     "  const float alpha = exp_nonpositive(m - shift);",
     "  for (int64_t jj = 0; jj < bk; ++jj) s[jj] = std::exp(s[jj]);\n"
     "  float sum[kLanes] = {};  // independent partial sums, so the sum vectorises\n"
     "  for (int64_t jj = 0; jj < bk; jj += kLanes)\n"
     "    for (int t = 0; t < kLanes; ++t) sum[t] += s[jj + t];\n"
     "  for (int w = kLanes / 2; w > 0; w /= 2)\n"
     "    for (int t = 0; t < w; ++t) sum[t] += sum[t + w];\n"
     "  const float alpha = 1.0f;", "hostile"),
    # float16 / bfloat16 GEMM that keeps its running sum in the storage dtype
    ("gemm_half_accumulates_in_half", "fast/gemm.cpp",
     "  gemm(Gemm<float>{fa, fb, fc, m, k, n, k, 1, n, 1});",
     "  for (int64_t i = 0; i < m; ++i)\n"
     "    for (int64_t j = 0; j < n; ++j) {\n"
     "      float s = 0.0f;\n"
     "      for (int64_t p = 0; p < k; ++p)\n"
     "        s = float(widen(convert<T>(s + fa[i * k + p] * fb[p * n + j])));\n"
     "      fc[i * n + j] = s;\n"
     "    }", "hostile"),
]

# ---- what each kernel mutant's code serves: the narrowed kernel check ----
#: Case-id patterns (mutation_run.py -k) of the ops whose kernels run the
#: patched code, for the kernel check (mutation_run.py --kernel --narrow, run
#: by tests/test_conformance_catches.py): "/erf/" selects ops/erf/,
#: kernels/erf/, fuzz/erf/, autograd/erf/ alike. Each names the op or kernel the patch is in (read off
#: the patched function), never a case known to kill; a mutant the narrowed
#: run does not kill is rerun on every kernel section before it counts as
#: survived, so a pattern too narrow costs time, never a verdict.
_ELEMENTWISE = tuple(f"/{op}/" for op in (
    "neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh", "erf",
    "floor", "sign", "add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt",
    "le", "logical_and", "logical_or", "logical_xor", "logical_not", "where"))
_PREDICATES = ("/eq/", "/ne/", "/lt/", "/le/", "/logical_and/", "/logical_or/", "/logical_xor/",
               "/logical_not/")
_REDUCE = ("/reduce_sum/", "/reduce_max/", "/reduce_min/", "/argmax/", "/mean/", "/var/")
_SDPA = ("sdpa", "scaled_dot_product_attention")
_NORMS = ("rms_norm", "layer_norm")
_INVALID = ("/invalid/", "errors/")
SEES = {
    **{m: ("/cast/",) for m in (
        "half_round_half_up", "bf16_round_half_up", "bf16_nan_truncated",
        "half_overflow_saturates", "half_subnormal_flush", "double_to_half_twice_rounded",
        "float_to_int_rounds", "int_to_float32_via_double_float")},
    "fill_through_float32": ("/fill/",), "fill_int_through_double": ("/fill/",),
    "half_store_drops_lsb": _ELEMENTWISE, "abs_keeps_neg_zero": ("/abs/",),
    "erf_cheap_approximation": ("/erf/",), "rsqrt_in_float": ("/rsqrt/",),
    "exp_float64_in_float32": ("/exp/",), "tanh_early_saturation": ("/tanh/",),
    "sign_keeps_neg_zero": ("/sign/",), "maximum_ignores_zero_sign": ("/maximum/", "/minimum/"),
    "maximum_drops_nan_a": ("/maximum/", "/minimum/"), "le_as_not_gt": ("/le/",),
    "bool_true_is_0xff": _PREDICATES, "div_by_reciprocal": ("/div/",), "pow_via_exp_log": ("/pow/",),
    "odometer_carry_ignores_inner": _ELEMENTWISE, "elementwise_chunk_drops_last": _ELEMENTWISE,
    "elementwise_chunk_capped": _ELEMENTWISE, "copy_odometer_rewind": ("/copy/", "/cast/"),
    **{m: _REDUCE for m in (
        "sum_pairwise_drops_one", "reduce_tail_skips_last", "max_nan_lost_in_vector_loop",
        "reduce_ragged_tail_unwritten", "int_max_identity_zero", "reduce_axes_beyond_rank_accepted",
        "sum_lanes_not_pairwise", "reduce_columns_long_running_sums")},
    "argmax_last_tie": ("/argmax/",), "argmax_ignores_nan": ("/argmax/",),
    "cumsum_half_accumulates_in_half": ("/cumsum/",),
    "iota_float_in_float32": ("/iota/",), "iota_row_offset_int": ("/iota/",),
    **{m: ("/gather/", "/scatter_add/", "/embedding/", "/cross_entropy/") for m in (
        "gather_index_equal_size_accepted", "scatter_add_ignores_x",
        "gather_row_ignores_index_stride", "scatter_add_row_ignores_src_stride",
        "index_int32_accepted", "scatter_src_shape_unchecked", "gather_negative_index_accepted",
        "gather_row_copy_ignores_table_stride", "gather_index_read_as_int32")},
    **{m: ("/matmul/", "/linear/") for m in (
        "gemm_second_k_block_overwrites", "gemm_direct_a_rows_kc_apart",
        "gemm_pack_transposed_a_first_strip", "gemm_k_block_drops_one",
        "gemm_cols_skips_row_block_edge", "gemm_int32_wraps_at_16_bits", "matmul_batch_capped",
        "matmul_out_batch_dims_unchecked", "gemm_empty_early_return",
        "gemm_half_accumulates_in_half")},
    **{m: ("rng/", "/random_", "/dropout/") for m in (
        "philox_nine_rounds", "uniform_half_wrong_bits", "random_counter_32_bits")},
    **{m: _SDPA for m in (
        "sdpa_backward_dots_drop_last_dim", "sdpa_backward_causal_sees_one_more",
        "attention_no_online_rescale", "attention_causal_strict", "attention_causal_kend_short",
        "attention_q_rows_dense", "attention_k_rows_dense", "attention_v_rows_dense",
        "attention_accepts_strided_rows", "attention_additive_mask_first_key_tile",
        "attention_without_max_subtraction")},
    "gelu_grad_drops_cubic_factor": ("gelu",), "gelu_erf_grad_sign": ("gelu",),
    "gelu_chunks_read_the_first": ("gelu",),
    "norm_eps_outside_sqrt": _NORMS, "layer_norm_unbiased_variance": ("layer_norm",),
    "layer_norm_bias_needs_weight": ("layer_norm",), "layer_norm_one_pass_variance": ("layer_norm",),
    "norm_backward_dbias_needs_dweight": ("layer_norm_backward", "/layer_norm/"),
    "norm_streaming_tail_unwritten": _NORMS,
    "softmax_max_from_first_lanes": ("softmax",), "softmax_without_max_subtraction": ("softmax",),
    # argument rules shared by every kernel (kernel_common.h) and the views'
    # bounds check every kernel call makes (plugin_runtime.hpp)
    "same_dtype_checks_size_only": _INVALID, "axis_negative_accepted": _INVALID,
    "broadcast_drops_leading_dims": _INVALID, "inplace_ignores_strides": _INVALID,
    "view_bounds_ignore_offset": _INVALID,
}
#: Kernel mutants the kernel check (--kernel) leaves out, and why: the full
#: mutation run keeps them.
KERNEL_CHECK_LEFT_OUT = {
    m: "killed only by the huge_2g cases (2**31 elements: GiBs of memory, minutes of CPU), "
       "which the kernel check does not run"
    for m in ("gather_index_read_as_int32", "iota_row_offset_int")
}
