/* A deliberately faulty plugin, to prove the conformance suite catches bugs.
 *
 * It dlopens the reference CPU plugin (path: -DREAL_PLUGIN="..."), copies its
 * DK_Api and kernel table, renames itself "faulty", and overrides exactly one
 * entry, chosen by -DFAULT=<n>:
 *   1 ADD_REL      add (float32) results off by a relative 1e-3
 *   2 SUM_DROP     reduce_sum ignores the last element of the last reduced axis
 *   3 MATMUL_ODD_K matmul drops the last term when K is odd
 *   4 EXP_NEG_INF  exp(-inf) is 42 instead of 0 (float32)
 *   5 SEGV         neg on float64 dereferences NULL
 *   6 LEAK         Memory_Free frees nothing (device memory leaks)
 *   7 NO_WAIT      Stream_WaitEvent returns success without waiting
 *   8 FUSED_RMS    the fused rms_norm kernel's float32 results are off by a
 *                  relative 1e-3 (its supports() is the real one; API 1.2)
 *   9 ERF_SEGV     erf on float32 dereferences NULL, and so does the fused
 *                  gelu (API 1.4), which computes GELU(erf) without erf
 *                  (model regression: crash)
 *  10 NO_SCATTER   no scatter_add kernel (NULL entry; model regression:
 *                  backward of gather-based layers is not implemented)
 *  11 SLOW         add and cast with a float32 output (float16 when
 *                  FAULTY_SLOW_DTYPE=float16: the models' mixed-precision runs
 *                  cast to it) sleep FAULTY_SLOW_MS (default 300) milliseconds
 *                  before the real kernel: right results, slowly (a run that
 *                  is still going when a test stops it)
 *  12 SLOW_ADD     add sleeps 2 ms before the real kernel: exact results, a
 *                  performance regression (gate check's alternate timing)
 *  13 MAX_NAN      reduce_max (float32) drops NaNs: an output that should be
 *                  NaN is 0 (a NaN-unaware max; no NaN among plain inputs)
 *  14 WHERE_BCAST  where (float32) is off by a relative 1e-3 when its
 *                  condition broadcasts along the last dim (dense calls right)
 *  17 MATMUL_PACKED_K matmul (float32) is off by a relative 1e-3 when K is
 *                  past 256 and a is not unit-stride along K (a GEMM that
 *                  packs a, wrong past its first K block; dense a right)
 *  18 FREE_NULL    Memory_Free(NULL) fails (the real plugin is asked to
 *                  free NULL on device ordinal -1, and that error returned)
 *  19 ORDINAL_CLAMP Device_GetProperties answers an ordinal past the last
 *                  device (or negative) with the last device's properties
 *  20 GRAPH_NEST   Graph_Capture accepts a begin on a capturing stream (the
 *                  real plugin's DK_ERROR_FAILED_PRECONDITION is dropped)
 *  21 GROUP_FLAT   Coll_Group does not nest: an inner group's end issues the
 *                  calls grouped so far, the outer end does nothing
 * Test-only shortcuts: DK_GetApi does the dlopen (a real plugin must do no
 * work there), and outputs are patched on the host after a stream
 * synchronize, which works because the CPU plugin's memory is host memory.
 * View and dtype helpers are <devicekit/plugin_helpers.h>'s; every error this
 * plugin returns is the real plugin's (it never makes one of its own). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if FAULT == 11 || FAULT == 12
#include <time.h>
#endif

#include <devicekit/device_api.h>
#include <devicekit/plugin_helpers.h>

#ifndef FAULT
#error "compile with -DFAULT=<n>"
#endif
#ifndef REAL_PLUGIN
#error "compile with -DREAL_PLUGIN=\"/path/to/libdevicekit_cpu.so\""
#endif

static const DK_Api* real;
static DK_Api api;
static DK_KernelTable table;
static DK_KernelFn* kernels[DK_OP_COUNT_1_1];

/* Multiplies every element of a float32 view by f (any strides). */
__attribute__((unused)) static void scale_f32(const DK_TensorView* o, float f) {
  int64_t idx[DK_MAX_RANK] = {0};
  if (dkh_numel(o) > 0) do {
      ((float*)o->data)[dkh_offset(o, idx)] *= f;
    } while (dkh_next_index(idx, o->shape, o->rank));
}

__attribute__((unused)) static DK_Error* sync(const DK_Kernel_Args* a) {
  DK_Stream_Synchronize_Args s = {DK_Stream_Synchronize_Args_STRUCT_SIZE, a->stream};
  return real->Stream_Synchronize(&s);
}

static DK_Error* faulty_get_info(DK_Plugin_GetInfo_Args* a) {
  DK_Error* e = real->Plugin_GetInfo(a);
  if (e == NULL) {
    a->name = "faulty";
    a->vendor = "DeviceKit tests (deliberately broken)";
  }
  return e;
}

#if FAULT == 1
static DK_Error* fault_add(const DK_Kernel_Args* a) {
  DK_Error* e = real->kernels->kernels[DK_OP_ADD](a);
  if (e || (e = sync(a))) return e;
  if (a->outputs[0]->dtype == DK_DTYPE_FLOAT32) scale_f32(a->outputs[0], 1.001f);
  return NULL;
}
#elif FAULT == 2 || FAULT == 3
/* Runs the real kernel on a patched host copy of input 0 (contiguous: these
 * kernels declare no STRIDED capability, so the SDK passes dense inputs). */
static DK_Error* with_patched_input(const DK_Kernel_Args* a, int op,
                                    void (*patch)(const DK_TensorView*, char*, size_t)) {
  DK_Error* e = sync(a); /* the input's producer has finished */
  if (e) return e;
  const DK_TensorView* x = a->inputs[0];
  size_t item = dkh_dtype_size(x->dtype);
  size_t bytes = (size_t)dkh_numel(x) * item;
  /* Device memory from the real plugin (it rejects pointers it did not
   * allocate); it is host memory, so memcpy can fill it. */
  DK_Memory_Allocate_Args m = {DK_Memory_Allocate_Args_STRUCT_SIZE, a->device, bytes, NULL};
  if ((e = real->Memory_Allocate(&m))) return e;
  char* tmp = m.ptr;
  if (bytes) memcpy(tmp, x->data, bytes);
  patch(x, tmp, item);
  DK_TensorView v = *x;
  v.data = tmp;
  const DK_TensorView* ins[4] = {&v, a->num_inputs > 1 ? a->inputs[1] : NULL};
  DK_Kernel_Args b = *a;
  b.inputs = ins;
  e = real->kernels->kernels[op](&b);
  if (!e) e = sync(a);
  DK_Memory_Free_Args f = {DK_Memory_Free_Args_STRUCT_SIZE, a->device, tmp};
  DK_Error* fe = real->Memory_Free(&f);
  return e ? e : fe;
}
#endif
#if FAULT == 2
static void drop_last(const DK_TensorView* x, char* tmp, size_t item) {
  int64_t n = dkh_numel(x);
  if (n > 0) memset(tmp + (size_t)(n - 1) * item, 0, item); /* zero bytes: 0 in every dtype */
}
static DK_Error* fault_sum(const DK_Kernel_Args* a) {
  return with_patched_input(a, DK_OP_REDUCE_SUM, drop_last);
}
#elif FAULT == 3
static void drop_last_column(const DK_TensorView* x, char* tmp, size_t item) {
  int64_t k = x->shape[x->rank - 1], rows = k ? dkh_numel(x) / k : 0;
  for (int64_t r = 0; r < rows; ++r) memset(tmp + (size_t)(r * k + k - 1) * item, 0, item);
}
static DK_Error* fault_matmul(const DK_Kernel_Args* a) {
  const DK_TensorView* x = a->inputs[0];
  if (x->shape[x->rank - 1] % 2 == 0) return real->kernels->kernels[DK_OP_MATMUL](a);
  return with_patched_input(a, DK_OP_MATMUL, drop_last_column);
}
#elif FAULT == 4
static DK_Error* fault_exp(const DK_Kernel_Args* a) {
  DK_Error* e = real->kernels->kernels[DK_OP_EXP](a);
  if (e || (e = sync(a))) return e;
  const DK_TensorView *x = a->inputs[0], *o = a->outputs[0];
  int64_t idx[DK_MAX_RANK] = {0}; /* x and o have the same shape */
  if (o->dtype == DK_DTYPE_FLOAT32 && dkh_numel(o) > 0) do {
      const float v = ((float*)x->data)[dkh_offset(x, idx)];
      if (isinf(v) && v < 0) ((float*)o->data)[dkh_offset(o, idx)] = 42.0f;
    } while (dkh_next_index(idx, o->shape, o->rank));
  return NULL;
}
#elif FAULT == 5
static DK_Error* fault_neg(const DK_Kernel_Args* a) {
  if (a->inputs[0]->dtype == DK_DTYPE_FLOAT64) *(volatile int*)NULL = 1;
  return real->kernels->kernels[DK_OP_NEG](a);
}
#elif FAULT == 6
static DK_Error* fault_free(DK_Memory_Free_Args* a) {
  (void)a;
  return NULL;
}
#elif FAULT == 7
static DK_Error* fault_wait(DK_Stream_WaitEvent_Args* a) {
  (void)a;
  return NULL;
}
#elif FAULT == 18
static DK_Error* fault_free_null(DK_Memory_Free_Args* a) {
  if (a->ptr != NULL) return real->Memory_Free(a);
  DK_Memory_Free_Args b = *a;
  b.device = -1; /* the real plugin's error for a bad ordinal */
  return real->Memory_Free(&b);
}
#elif FAULT == 19
static DK_Error* fault_properties(DK_Device_GetProperties_Args* a) {
  DK_Device_Count_Args c = {DK_Device_Count_Args_STRUCT_SIZE, 0};
  DK_Error* e = real->Device_Count(&c);
  if (e) return e;
  if (a->device < 0 || a->device >= c.count) a->device = c.count - 1;
  return real->Device_GetProperties(a);
}
#elif FAULT == 20 || FAULT == 21
/* The optional parts' tables, copied so one entry can be replaced. */
static DK_Collectives coll;
static DK_Graphs graphs;
static const DK_Extension_Base* copy_chain(const DK_Extension_Base* e) {
  if (e == NULL) return NULL;
  const DK_Extension_Base* next = copy_chain(e->next);
  if (e->type == DK_EXTENSION_COLLECTIVES) {
    coll = *(const DK_Collectives*)e;
    coll.base.next = next;
    return &coll.base;
  }
  if (e->type == DK_EXTENSION_GRAPHS) {
    graphs = *(const DK_Graphs*)e;
    graphs.base.next = next;
    return &graphs.base;
  }
  return e; /* (and everything after it, unchanged) */
}
#endif
#if FAULT == 20
static DK_Graph_Capture* real_capture;
static DK_Error* fault_capture(DK_Graph_Capture_Args* a) {
  DK_Error* e = real_capture(a);
  DK_Error_GetCode_Args c = {DK_Error_GetCode_Args_STRUCT_SIZE, e, 0};
  if (e && a->end == 0) {
    real->Error_GetCode(&c);
    if (c.code == DK_ERROR_FAILED_PRECONDITION) {
      DK_Error_Destroy_Args d = {DK_Error_Destroy_Args_STRUCT_SIZE, e};
      real->Error_Destroy(&d);
      return NULL;
    }
  }
  return e;
}
#elif FAULT == 21
static DK_Coll_Group* real_group;
static __thread int group_open;
static DK_Error* fault_group(DK_Coll_Group_Args* a) {
  if (a->end == 0) {
    if (group_open) return NULL; /* the bug: a flag, not a count */
    group_open = 1;
    return real_group(a);
  }
  if (!group_open) return NULL;
  group_open = 0;
  return real_group(a);
}
#elif FAULT == 13
static DK_Error* fault_max(const DK_Kernel_Args* a) {
  DK_Error* e = real->kernels->kernels[DK_OP_REDUCE_MAX](a);
  if (e || (e = sync(a))) return e;
  const DK_TensorView* o = a->outputs[0];
  int64_t idx[DK_MAX_RANK] = {0};
  if (o->dtype == DK_DTYPE_FLOAT32 && dkh_numel(o) > 0) do {
      float* v = (float*)o->data + dkh_offset(o, idx);
      if (isnan(*v)) *v = 0.0f;
    } while (dkh_next_index(idx, o->shape, o->rank));
  return NULL;
}
#elif FAULT == 14
static DK_Error* fault_where(const DK_Kernel_Args* a) {
  DK_Error* e = real->kernels->kernels[DK_OP_WHERE](a);
  if (e || (e = sync(a))) return e;
  const DK_TensorView *c = a->inputs[0], *o = a->outputs[0];
  if (o->dtype == DK_DTYPE_FLOAT32 && c->rank > 0 && c->shape[c->rank - 1] == 1 &&
      o->shape[o->rank - 1] > 1)
    scale_f32(o, 1.001f);
  return NULL;
}
#elif FAULT == 17
static DK_Error* fault_matmul_packed(const DK_Kernel_Args* a) {
  DK_Error* e = real->kernels->kernels[DK_OP_MATMUL](a);
  if (e || (e = sync(a))) return e;
  const DK_TensorView *x = a->inputs[0], *o = a->outputs[0];
  if (o->dtype == DK_DTYPE_FLOAT32 && x->rank >= 2 && x->shape[x->rank - 1] > 256 &&
      x->strides[x->rank - 1] != 1)
    scale_f32(o, 1.001f);
  return NULL;
}
#elif FAULT == 11
static long slow_ms = 300;
static int32_t slow_dtype = DK_DTYPE_FLOAT32;
static void slow_down(const DK_Kernel_Args* a) {
  if (a->outputs[0]->dtype == slow_dtype) {
    struct timespec t = {slow_ms / 1000, (slow_ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
  }
}
static DK_Error* fault_slow_add(const DK_Kernel_Args* a) {
  slow_down(a);
  return real->kernels->kernels[DK_OP_ADD](a);
}
static DK_Error* fault_slow_cast(const DK_Kernel_Args* a) {
  slow_down(a);
  return real->kernels->kernels[DK_OP_CAST](a);
}
#elif FAULT == 12
static DK_Error* fault_slow_add(const DK_Kernel_Args* a) {
  struct timespec nap = {0, 2000000};
  nanosleep(&nap, NULL);
  return real->kernels->kernels[DK_OP_ADD](a);
}
#endif

#if FAULT == 8 || FAULT == 9
/* The fused table is copied (its array of pointers, then the one entry)
 * so that only the launch of that one kernel is replaced. */
static DK_FusedKernelTable fused_table;
static const DK_FusedKernel* fused_entries[64];
static DK_FusedKernel fused_wrapped;
static DK_KernelFn* real_fused_launch;
static void wrap_fused(int32_t op, DK_KernelFn* fault) {
  if (real->struct_size < DK_Api_STRUCT_SIZE_1_2 || real->fused_kernels == NULL) return;
  fused_table = *real->fused_kernels;
  if (fused_table.num_kernels > 64) abort();
  for (int i = 0; i < fused_table.num_kernels; ++i) {
    fused_entries[i] = real->fused_kernels->kernels[i];
    if (fused_entries[i]->op == op && real_fused_launch == NULL) {
      fused_wrapped = *fused_entries[i];
      real_fused_launch = fused_wrapped.launch;
      fused_wrapped.launch = fault;
      fused_entries[i] = &fused_wrapped;
    }
  }
  fused_table.kernels = fused_entries;
  api.fused_kernels = &fused_table;
}
#endif

#if FAULT == 8
static DK_Error* fault_fused_rms(const DK_Kernel_Args* a) {
  DK_Error* e = real_fused_launch(a);
  if (e || (e = sync(a))) return e;
  if (a->outputs[0]->dtype == DK_DTYPE_FLOAT32) scale_f32(a->outputs[0], 1.001f);
  return NULL;
}
#elif FAULT == 9
static DK_Error* fault_erf(const DK_Kernel_Args* a) {
  if (a->inputs[0]->dtype == DK_DTYPE_FLOAT32) *(volatile int*)NULL = 1;
  return real->kernels->kernels[DK_OP_ERF](a);
}
/* The fused gelu (API 1.4) computes GELU(erf) without the erf kernel: it
 * crashes too, so GELU(erf) reaches the fault fused or decomposed. */
static DK_Error* fault_fused_gelu(const DK_Kernel_Args* a) {
  if (a->inputs[0]->dtype == DK_DTYPE_FLOAT32) *(volatile int*)NULL = 1;
  return real_fused_launch(a);
}
#endif

DK_EXPORT const DK_Api* DK_GetApi(void) {
  if (real) return &api;
  void* lib = dlopen(REAL_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "faulty plugin: %s\n", dlerror());
    abort();
  }
  real = ((DK_GetApi_Fn*)dlsym(lib, DK_ENTRY_SYMBOL))();
  api = *real;
  table = *real->kernels;
  memcpy(kernels, real->kernels->kernels, sizeof(DK_KernelFn*) * (size_t)table.num_ops);
  table.kernels = kernels;
  api.kernels = &table;
  api.Plugin_GetInfo = faulty_get_info;
#if FAULT == 1
  kernels[DK_OP_ADD] = fault_add;
#elif FAULT == 2
  kernels[DK_OP_REDUCE_SUM] = fault_sum;
#elif FAULT == 3
  kernels[DK_OP_MATMUL] = fault_matmul;
#elif FAULT == 4
  kernels[DK_OP_EXP] = fault_exp;
#elif FAULT == 5
  kernels[DK_OP_NEG] = fault_neg;
#elif FAULT == 6
  api.Memory_Free = fault_free;
#elif FAULT == 7
  api.Stream_WaitEvent = fault_wait;
#elif FAULT == 8
  wrap_fused(DK_FUSED_RMS_NORM, fault_fused_rms);
#elif FAULT == 9
  kernels[DK_OP_ERF] = fault_erf;
  wrap_fused(DK_FUSED_GELU, fault_fused_gelu);
#elif FAULT == 10
  kernels[DK_OP_SCATTER_ADD] = NULL;
#elif FAULT == 11
  if (getenv("FAULTY_SLOW_MS")) slow_ms = atol(getenv("FAULTY_SLOW_MS"));
  const char* slow = getenv("FAULTY_SLOW_DTYPE");
  if (slow && strcmp(slow, "float16") == 0) slow_dtype = DK_DTYPE_FLOAT16;
  kernels[DK_OP_ADD] = fault_slow_add;
  kernels[DK_OP_CAST] = fault_slow_cast;
#elif FAULT == 12
  kernels[DK_OP_ADD] = fault_slow_add;
#elif FAULT == 13
  kernels[DK_OP_REDUCE_MAX] = fault_max;
#elif FAULT == 14
  kernels[DK_OP_WHERE] = fault_where;
#elif FAULT == 17
  kernels[DK_OP_MATMUL] = fault_matmul_packed;
#elif FAULT == 18
  api.Memory_Free = fault_free_null;
#elif FAULT == 19
  api.Device_GetProperties = fault_properties;
#elif FAULT == 20
  api.extension_start = copy_chain(real->extension_start);
  real_capture = graphs.Graph_Capture;
  graphs.Graph_Capture = fault_capture;
#elif FAULT == 21
  api.extension_start = copy_chain(real->extension_start);
  real_group = coll.Coll_Group;
  coll.Coll_Group = fault_group;
#endif
  return &api;
}
