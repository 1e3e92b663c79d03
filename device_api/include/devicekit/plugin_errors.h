/* DeviceKit plugin helpers: the error object (struct DK_Error, dkh_error, the
 * three Error_* table entries) and the argument checks every call makes
 * (struct_size, device ordinal, the shape of a kernel call).
 *
 * A part of <devicekit/plugin_helpers.h>, which includes it (inside its
 * extern "C" block, after the versioning notes and DKH_PRINTF); never include
 * it alone. Same rules as the whole: header-only C99, every function
 * `static inline`, nothing crosses the plugin boundary, every function
 * thread-safe. */
#ifndef DEVICEKIT_PLUGIN_ERRORS_H_
#define DEVICEKIT_PLUGIN_ERRORS_H_

#ifndef DEVICEKIT_PLUGIN_HELPERS_H_
#error "include <devicekit/plugin_helpers.h>; plugin_errors.h is a part of it"
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

#endif /* DEVICEKIT_PLUGIN_ERRORS_H_ */
