"""Single-bug variants of the reference CUDA plugin's kernels
(reference_backend/cuda/src; files named relative to it), killed by the
conformance suite run on their emulated build:

    python benchmarks/mutation_run.py --target cuda_sim

The same (name, file, old text, new text, kind) rows as benchmarks/mutants.py:
``old`` must occur exactly once in the file, or the run stops loudly. Each is
a bug a GPU kernel engineer writes: a barrier left out (the emulator's race
and unwritten-slot checks find it; on a GPU it is a rare wrong answer), a
shuffle tree one step short, a tile's bound off by one, a rounding or NaN rule
dropped, an index check missing, a Philox constant mistyped.
"""

MUTANTS = [
    # ---- synchronisation: the emulator's checks ----
    ("matmul_no_barrier_before_restage", "kernels_matmul.cu",
     "      dk_barrier();  // before the next stage overwrites the slices\n", "", "sync"),
    ("matmul_no_barrier_after_stage", "kernels_matmul.cu",
     "      }\n      dk_barrier();\n      for (int kk = 0; kk < kStep; ++kk) {",
     "      }\n      for (int kk = 0; kk < kStep; ++kk) {", "sync"),
    ("block_reduce_no_barrier_before_reuse", "fused_device.h",
     "    t = is_max ? max_nan(t, x) : t + x;\n  }\n  dk_barrier();\n  return t;",
     "    t = is_max ? max_nan(t, x) : t + x;\n  }\n  return t;", "sync"),
    ("attention_tile_overwritten_while_read", "fused_attention_kernels.h",
     "    dk_barrier();  // the previous tile is no longer read\n", "", "sync"),
    ("reduce_warp_results_unsynced", "kernels_reduce.cu",
     "      if (R::kArg) s_idx[ty] = vi;\n    }\n    dk_barrier();",
     "      if (R::kArg) s_idx[ty] = vi;\n    }", "sync"),
    # ---- shuffles and tiles ----
    ("warp_sum_one_step_short", "fused_device.h",
     "  for (int o = 16; o > 0; o >>= 1) v += dk_shfl_xor(v, o);",
     "  for (int o = 8; o > 0; o >>= 1) v += dk_shfl_xor(v, o);", "shuffle"),
    ("reduce_shuffle_from_16_only", "kernels_reduce.cu",
     "    for (int d = 16; d > 0; d /= 2) {\n      const A b = dk_shfl_down(v, d);",
     "    for (int d = 16; d > 1; d /= 2) {\n      const A b = dk_shfl_down(v, d);", "shuffle"),
    ("matmul_k_tail_read_past_end", "kernels_matmul.cu",
     "c < p.n && kg < p.k ? mat_load(b[kg * p.sb_row + c * p.sb_col]) : A(0);",
     "c < p.n && kg <= p.k ? mat_load(b[kg * p.sb_row + c * p.sb_col]) : A(0);", "bounds"),
    ("attention_causal_tile_cut_one_short", "fused_attention_kernels.h",
     "  const int64_t keys = a.causal ? (i_last + 1 < a.lk ? i_last + 1 : a.lk) : a.lk;\n"
     "  for (int64_t j0 = 0; j0 < keys; j0 += kTile) {\n    dk_barrier();  // the previous tile",
     "  const int64_t keys = a.causal ? (i_last < a.lk ? i_last : a.lk) : a.lk;\n"
     "  for (int64_t j0 = 0; j0 < keys; j0 += kTile) {\n    dk_barrier();  // the previous tile",
     "attention"),
    # ---- numerics ----
    ("norm_eps_outside_sqrt", "fused_rows_kernels.h",
     "  *rstd = 1.0f / sqrtf(block_sum(q, red) / float(d) + eps);",
     "  *rstd = 1.0f / (sqrtf(block_sum(q, red) / float(d)) + eps);", "numerics"),
    ("softmax_max_not_subtracted", "fused_rows_kernels.h",
     "      for (int64_t i = t; i < a.d; i += nt) s += expf(load(x[i * st]) - m);",
     "      for (int64_t i = t; i < a.d; i += nt) s += expf(load(x[i * st]));", "numerics"),
    ("fused_max_keeps_first_on_nan", "fused_device.h",
     "DK_HD float max_nan(float a, float b) { return (b > a || b != b) ? b : a; }",
     "DK_HD float max_nan(float a, float b) { return b > a ? b : a; }", "numerics"),
    # ---- casts (the conversions are the shared devicekit/plugin_half.h's) ----
    ("bf16_round_half_up", "devicekit/plugin_half.h",
     "  const uint32_t rne = (x + 0x7fffu + lsb) >> 16;",
     "  const uint32_t rne = (x + 0x8000u) >> 16;", "casts"),
    ("half_round_half_up", "devicekit/plugin_half.h",
     "  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;", "  if (rem >= 0x1000u) ++h;",
     "casts"),
    ("bf16_nan_not_quieted", "devicekit/plugin_half.h",
     "const uint32_t nan = (x >> 16) | 0x0040u;",
     "const uint32_t nan = x >> 16;", "casts"),
    # ---- index checks and random ----
    ("gather_negative_index_accepted", "kernels_index.cu",
     "    if (idx < 0 || idx >= size) {\n      report_error(p.errors, DK_OP_GATHER,",
     "    if (idx >= size) {\n      report_error(p.errors, DK_OP_GATHER,", "index"),
    ("philox_round_key_typo", "devicekit/plugin_philox.h", "      k1 += 0xBB67AE85u;",
     "      k1 += 0xBB67AE84u;", "random"),
]

#: Case-id patterns of the ops whose kernels run each mutant's code, for the
#: narrowed kernel check (mutants.SEES says how they are chosen and used).
_ROWS = ("rms_norm", "layer_norm", "softmax")  # the block-per-row kernels of fused_device.h
_SDPA = ("sdpa", "scaled_dot_product_attention")
_REDUCE = ("/reduce_sum/", "/reduce_max/", "/reduce_min/", "/argmax/", "/mean/", "/var/")
SEES = {
    "matmul_no_barrier_before_restage": ("/matmul/", "/linear/"),
    "matmul_no_barrier_after_stage": ("/matmul/", "/linear/"),
    "matmul_k_tail_read_past_end": ("/matmul/", "/linear/"),
    "block_reduce_no_barrier_before_reuse": _ROWS, "warp_sum_one_step_short": _ROWS,
    "fused_max_keeps_first_on_nan": _ROWS + _SDPA,
    "attention_tile_overwritten_while_read": _SDPA, "attention_causal_tile_cut_one_short": _SDPA,
    "reduce_warp_results_unsynced": _REDUCE, "reduce_shuffle_from_16_only": _REDUCE,
    "norm_eps_outside_sqrt": ("rms_norm", "layer_norm"), "softmax_max_not_subtracted": ("softmax",),
    "bf16_round_half_up": ("/cast/",), "half_round_half_up": ("/cast/",),
    "bf16_nan_not_quieted": ("/cast/",),
    "gather_negative_index_accepted": ("/gather/", "/scatter_add/", "/embedding/",
                                       "/cross_entropy/"),
    "philox_round_key_typo": ("rng/", "/random_", "/dropout/"),
}

#: Kernel mutants the kernel check (mutation_run.py --kernel) leaves out, each
#: with the reason it prints.
KERNEL_CHECK_LEFT_OUT = {
    "fused_max_keeps_first_on_nan": (
        "not killed by the suite (2026-11-29: its ops' cases, then every section but torch, "
        "collectives, graphs and huge_2g: 865 s emulated) and believed equivalent: the row max "
        "only shifts the exponentials of softmax and attention, "
        "and one NaN in a row makes exp() and the row sum NaN whichever max is kept (softmax of "
        "[nan, 1, 2, 3], and causal attention whose first key holds a NaN, give NaN rows on the "
        "unpatched and the patched build)"),
}
