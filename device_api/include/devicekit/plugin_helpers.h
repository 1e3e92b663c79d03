/*
 * DeviceKit plugin helpers — optional, header-only C for plugin authors.
 *
 * The glue every plugin restates: the error object behind the opaque DK_Error
 * (with printf-formatted messages and the three Error_* table entries),
 * argument checks that produce the messages device_api.h asks for ("the call,
 * the expected, the found, a hint"), dense / strided view helpers and dtype
 * sizes. Include it in a plugin's own sources after <devicekit/device_api.h>.
 *
 * It is NOT part of the device API's ABI: every function is `static inline`
 * and nothing in it crosses the plugin boundary, so using it (or not) changes
 * nothing the SDK can see, and device_api.h never includes it. The SDK does
 * not include it either: only plugins do.
 *
 * What including it means for a plugin:
 * - It defines `struct DK_Error` (the type device_api.h leaves opaque) as
 *   { int32_t code; char message[]; }. A plugin that uses it does not define
 *   its own, and uses dkh_Error_Destroy / _Message / _GetCode in its DK_Api.
 * - Every identifier it defines starts with `dkh_` / `DKH_`.
 * - C99 or later; it needs only the C standard library. (C++ compilers take
 *   it too, with the flexible array member in DK_Error as an extension.)
 *
 * Thread-safety: every function is thread-safe (no shared state except the
 * constant out-of-memory error object).
 */
#ifndef DEVICEKIT_PLUGIN_HELPERS_H_
#define DEVICEKIT_PLUGIN_HELPERS_H_

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ========================================================================== */
/*  Versioning                                                                */
/* ========================================================================== */
/*
 * The helpers follow the device API's rules (device_api.h, "Versioning"),
 * applied to source rather than ABI, and are versioned with it: this file
 * ships next to device_api.h and carries the same DK_API_MAJOR.DK_API_MINOR.
 * 1. Within a major, helpers are only added (at the end of their section):
 *    no helper is removed, renamed, re-typed, and no message or behaviour
 *    changes meaning, so a plugin that compiles against the helpers of 1.m
 *    compiles, unchanged and with the same behaviour, against those of 1.n>m.
 * 2. DKH_HELPERS_SINCE_<major>_<minor> marks what a minor added; a plugin
 *    targeting an older minor may test it with #ifdef.
 * 3. Every change gets a line in CHANGELOG.md under "Plugin helpers".
 */
#define DKH_HELPERS_SINCE_1_2 1 /* first version of this file */
/* Appended within 1.2 (source-compatible additions, each with its CHANGELOG
 * line): dkh_is_contiguous. Test for it with #ifdef DKH_HAS_IS_CONTIGUOUS. */

/* printf-format checking where the compiler supports it. */
#if defined(__GNUC__) || defined(__clang__)
#define DKH_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define DKH_PRINTF(fmt_index, first_arg)
#endif

/* ========================================================================== */
/*  Errors                                                                    */
/* ========================================================================== */

/* The object behind the opaque DK_Error*. Created by dkh_error, owned by
 * whoever received it, freed exactly once with Error_Destroy. */
struct DK_Error {
  int32_t code;           /* a DK_ErrorCode */
  int32_t static_storage; /* 1: the shared out-of-memory error, never freed */
  char message[];         /* NUL-terminated */
};

/* Handed out when even the error object cannot be allocated. Recognised by
 * its static_storage flag, not its address: every translation unit including
 * this header has its own copy. Never written after initialisation. */
static inline DK_Error* dkh_out_of_memory_error(void) {
  static struct {
    int32_t code, static_storage;
    char message[40];
  } oom = {DK_ERROR_OUT_OF_MEMORY, 1, "out of host memory creating an error"};
  return (DK_Error*)(void*)&oom;
}

/* A new error with a printf-formatted message. Never returns NULL. Write the
 * message as the header asks: "acme.Memcpy: size is 12; expected a multiple
 * of 4. Hint: ..." (the call, the expected, the found, what to do). */
static inline DK_Error* dkh_verror(int32_t code, const char* fmt, va_list ap) {
  va_list again;
  va_copy(again, ap);
  const int n = vsnprintf(NULL, 0, fmt, ap);
  const size_t len = n > 0 ? (size_t)n : 0;
  DK_Error* e = (DK_Error*)malloc(sizeof(DK_Error) + len + 1);
  if (e == NULL) {
    va_end(again);
    return dkh_out_of_memory_error();
  }
  e->code = code;
  e->static_storage = 0;
  vsnprintf(e->message, len + 1, fmt, again);
  va_end(again);
  return e;
}

static inline DK_Error* dkh_error(int32_t code, const char* fmt, ...) DKH_PRINTF(2, 3);
static inline DK_Error* dkh_error(int32_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  DK_Error* e = dkh_verror(code, fmt, ap);
  va_end(ap);
  return e;
}

/* Ready-made DK_Api entries for the three Error_* calls. */
static inline void dkh_Error_Destroy(DK_Error_Destroy_Args* args) {
  if (args == NULL || args->struct_size < DK_Error_Destroy_Args_STRUCT_SIZE) return;
  if (args->error != NULL && !args->error->static_storage) free(args->error);
}

static inline void dkh_Error_Message(DK_Error_Message_Args* args) {
  if (args == NULL || args->struct_size < DK_Error_Message_Args_STRUCT_SIZE || args->error == NULL)
    return;
  args->message = args->error->message;
  args->message_size = strlen(args->error->message);
}

static inline void dkh_Error_GetCode(DK_Error_GetCode_Args* args) {
  if (args == NULL || args->struct_size < DK_Error_GetCode_Args_STRUCT_SIZE || args->error == NULL)
    return;
  args->code = args->error->code;
}

/* ========================================================================== */
/*  Argument checks                                                           */
/* ========================================================================== */

/* args not NULL and struct_size at least what this plugin's header defines.
 * A larger struct_size is a newer SDK and fine: the plugin reads only its
 * own fields (device_api.h, conventions). */
static inline DK_Error* dkh_check_struct(const char* call, const void* args, size_t given,
                                         size_t needed, const char* type) {
  if (args == NULL)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: args is NULL; expected a %s*", call, type);
  if (given < needed)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s.struct_size is %zu, expected at least %zu. Hint: set it with "
                     "%s_STRUCT_SIZE.",
                     call, type, given, needed, type);
  return NULL;
}

/* Returns the error from the enclosing function when `args` (a pointer to a
 * `Type`) is NULL or too small. */
#define DKH_CHECK_STRUCT(call, args, Type)                                              \
  do {                                                                                  \
    const Type* dkh_a_ = (args); /* a variable: no "&x is never NULL" warning */        \
    DK_Error* dkh_e_ = dkh_check_struct(call, dkh_a_, dkh_a_ ? dkh_a_->struct_size : 0, \
                                        Type##_STRUCT_SIZE, #Type);                     \
    if (dkh_e_ != NULL) return dkh_e_;                                                  \
  } while (0)

/* A device ordinal in [0, count): DK_ERROR_OUT_OF_RANGE otherwise. `plugin`
 * is the device type ("acme") used to name the valid devices. */
static inline DK_Error* dkh_check_device(const char* call, const char* plugin, int32_t device,
                                         int32_t count) {
  if (device < 0 || device >= count)
    return dkh_error(DK_ERROR_OUT_OF_RANGE,
                     "%s: device ordinal %d is out of range; this plugin has %d device(s), "
                     "%s:0..%s:%d",
                     call, (int)device, (int)count, plugin, plugin, (int)count - 1);
  return NULL;
}

/* The shape of a kernel call: op, input/output counts, arrays not NULL. */
static inline DK_Error* dkh_check_kernel_call(const char* call, const DK_Kernel_Args* args,
                                              int32_t op, int32_t num_inputs, int32_t num_outputs) {
  if (args->op != op)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: args->op is %d; expected %d. Hint: the "
                     "kernel table is indexed by DK_OpId.",
                     call, (int)args->op, (int)op);
  if (args->num_inputs != num_inputs || args->num_outputs != num_outputs)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: got %d input(s) and %d output(s); "
                     "expected %d and %d",
                     call, (int)args->num_inputs, (int)args->num_outputs, (int)num_inputs,
                     (int)num_outputs);
  if ((num_inputs > 0 && args->inputs == NULL) || (num_outputs > 0 && args->outputs == NULL))
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: args->%s is NULL; expected an array of "
                     "views",
                     call, args->outputs == NULL ? "outputs" : "inputs");
  return NULL;
}

/* ========================================================================== */
/*  Data types                                                                */
/* ========================================================================== */

/* Bytes per element of a DK_DType; 0 for a value this header does not know. */
static inline size_t dkh_dtype_size(int32_t dtype) {
  switch (dtype) {
    case DK_DTYPE_FLOAT32:
    case DK_DTYPE_INT32: return 4;
    case DK_DTYPE_FLOAT16:
    case DK_DTYPE_BFLOAT16: return 2;
    case DK_DTYPE_FLOAT64:
    case DK_DTYPE_INT64: return 8;
    case DK_DTYPE_INT8:
    case DK_DTYPE_UINT8:
    case DK_DTYPE_BOOL: return 1;
    default: return 0;
  }
}

/* "float32", ...; "unknown" for a value this header does not know. */
static inline const char* dkh_dtype_name(int32_t dtype) {
  switch (dtype) {
    case DK_DTYPE_FLOAT32: return "float32";
    case DK_DTYPE_FLOAT16: return "float16";
    case DK_DTYPE_BFLOAT16: return "bfloat16";
    case DK_DTYPE_FLOAT64: return "float64";
    case DK_DTYPE_INT8: return "int8";
    case DK_DTYPE_INT32: return "int32";
    case DK_DTYPE_INT64: return "int64";
    case DK_DTYPE_UINT8: return "uint8";
    case DK_DTYPE_BOOL: return "bool";
    default: return "unknown";
  }
}

/* ========================================================================== */
/*  Tensor views                                                              */
/* ========================================================================== */

/* Number of elements (1 for rank 0). */
static inline int64_t dkh_numel(const DK_TensorView* v) {
  int64_t n = 1;
  for (int32_t d = 0; d < v->rank; ++d) n *= v->shape[d];
  return n;
}

/* 1 when the view is dense row-major (strides in elements; a size-1 dim may
 * have any stride), else 0. Stricter than the header for views with zero
 * elements (see dkh_is_contiguous, which follows DK_TensorView's rule). */
static inline int dkh_is_dense(const DK_TensorView* v) {
  int64_t expected = 1;
  for (int32_t d = v->rank - 1; d >= 0; --d) {
    if (v->shape[d] != 1 && v->strides[d] != expected) return 0;
    expected *= v->shape[d];
  }
  return 1;
}

static inline int dkh_same_shape(const DK_TensorView* a, const DK_TensorView* b) {
  if (a->rank != b->rank) return 0;
  for (int32_t d = 0; d < a->rank; ++d)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

/* Checks one view of a kernel call against the header's rules and what the
 * kernel declared: struct_size, a dtype in `dtype_mask` (DK_DTYPE_BIT bits),
 * rank and arrays, and, unless the op declared DK_KERNEL_CAP_STRIDED, dense
 * layout. `what` names it in the message ("input 0", "out"). */
static inline DK_Error* dkh_check_view(const char* call, const char* what, const DK_TensorView* v,
                                       uint64_t dtype_mask, uint32_t caps) {
  if (v == NULL || v->struct_size < DK_TensorView_STRUCT_SIZE)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s is NULL or its struct_size is %zu; "
                     "expected at least %zu",
                     call, what, v ? v->struct_size : (size_t)0, (size_t)DK_TensorView_STRUCT_SIZE);
  if (v->dtype < 0 || v->dtype >= 64 || !(dtype_mask & DK_DTYPE_BIT(v->dtype)))
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s has dtype %s (%d); this kernel "
                     "declared the dtype mask 0x%llx. Hint: the SDK only sends declared "
                     "dtypes, so this is an SDK bug or a stale kernel table.",
                     call, what, dkh_dtype_name(v->dtype), (int)v->dtype,
                     (unsigned long long)dtype_mask);
  if (v->rank < 0 || v->rank > DK_MAX_RANK || (v->rank > 0 && (!v->shape || !v->strides)))
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s has rank %d (shape %p, strides %p); "
                     "expected rank 0..%d with both arrays set when rank > 0",
                     call, what, (int)v->rank, (const void*)v->shape, (const void*)v->strides,
                     DK_MAX_RANK);
  if (!(caps & DK_KERNEL_CAP_STRIDED) && !dkh_is_dense(v))
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s is not dense row-major; this kernel "
                     "declared no DK_KERNEL_CAP_STRIDED, so the SDK must materialise it "
                     "first",
                     call, what);
  return NULL;
}

/* Element offset (in elements, not bytes) of multi-index `index` [rank]. */
static inline int64_t dkh_offset(const DK_TensorView* v, const int64_t* index) {
  int64_t off = 0;
  for (int32_t d = 0; d < v->rank; ++d) off += index[d] * v->strides[d];
  return off;
}

/* Steps a row-major multi-index over `shape` [rank]; returns 0 after the
 * last element. Walk a strided view with:
 *   int64_t idx[DK_MAX_RANK] = {0};
 *   if (dkh_numel(v) > 0) do { ... p[dkh_offset(v, idx)] ... }
 *   while (dkh_next_index(idx, v->shape, v->rank)); */
static inline int dkh_next_index(int64_t* index, const int64_t* shape, int32_t rank) {
  for (int32_t d = rank - 1; d >= 0; --d) {
    if (++index[d] < shape[d]) return 1;
    index[d] = 0;
  }
  return 0;
}

/* 1 when dims `shape` / `strides` [rank] are contiguous by DK_TensorView's
 * rule, else 0: a view with zero elements is contiguous whatever its strides
 * (no element is addressed); otherwise dense row-major, size-1 dims with any
 * stride. Takes the arrays rather than a view so a plugin can ask it of the
 * copy of a view it keeps past the call. (Appended within 1.2.) */
#define DKH_HAS_IS_CONTIGUOUS 1
static inline int dkh_is_contiguous(int32_t rank, const int64_t* shape, const int64_t* strides) {
  for (int32_t d = 0; d < rank; ++d)
    if (shape[d] == 0) return 1;
  int64_t expected = 1;
  for (int32_t d = rank - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expected) return 0;
    expected *= shape[d];
  }
  return 1;
}

#ifdef __cplusplus
}
#endif

#endif /* DEVICEKIT_PLUGIN_HELPERS_H_ */
