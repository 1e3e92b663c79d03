/* The kernels. Two worked examples: copy, the SDK's materialiser (every
 * dtype, any strides: the strided view helpers), and add on float32, the
 * pattern every other kernel follows:
 *
 * 1. Validate synchronously with plugin_check_kernel (below): one call checks
 *    every argument rule the header states (operand counts, dtypes, shapes,
 *    strides, NULL data, aliasing, attributes: dkh_check_call in
 *    plugin_helpers.h, from the rules the conformance suite checks too) against
 *    the dtypes and capability bits the op's ops.def row declares, so what a
 *    kernel accepts can never drift from what it declares. It returns an error
 *    naming the call, what was expected and what was found; nothing is
 *    enqueued on bad input.
 * 2. Rely on what ops.def declared: with capability bits 0 the SDK hands over
 *    only dense row-major views, already broadcast to out's shape, no aliasing.
 * 3. Enqueue the work on args->stream. This template's streams are synchronous
 *    (stream.c), so the loop simply runs now; on a device, launch it here.
 *
 * The next kernel is two edits: write its function here (or in a new file
 * listed in CMakeLists.txt), and in ops.def turn its PLUGIN_NO_KERNEL(OP) row
 * into PLUGIN_OP(OP, your_function, dtype mask, caps). No prototype: plugin.h
 * declares every function named in ops.def. Then:
 *   devicekit dev --run conformance --op OPNAME
 */
#include <math.h> /* expf, sqrtf, ...: CMakeLists.txt links the maths library */
#include <stddef.h>
#include <string.h>

#include "plugin.h"

DK_Error* plugin_check_kernel(const char* call, const DK_Kernel_Args* args, DK_OpId op) {
  PLUGIN_CHECK_ARGS(call, args, DK_Kernel_Args);
  DK_Error* e = plugin_check_device(call, args->device);
  if (e == NULL) e = plugin_check_stream(call, args->stream, args->device);
  if (e == NULL) e = dkh_check_call(call, args, op, &plugin_kernel_table);
  return e;
}

/* add(a, b) -> out, float32, dense views of out's shape (ops.def: caps 0):
 * plugin_check_kernel has made sure of all of it. */
DK_Error* plugin_kernel_add(const DK_Kernel_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".add";
  DK_Error* e = plugin_check_kernel(kCall, args, DK_OP_ADD);
  if (e != NULL) return e;
  const DK_TensorView *a = args->inputs[0], *b = args->inputs[1], *out = args->outputs[0];
  const float* x = a->data;
  const float* y = b->data;
  float* z = out->data;
  const int64_t n = dkh_numel(out);
  for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
  return NULL;
}

/* copy(x) -> out: how the SDK materialises views (broadcasts, transposes,
 * slices) for kernels that declared no capability bits. The header asks it
 * to take any strides on both sides (stride 0: broadcast) and every dtype the
 * device stores, so its row declares DK_KERNEL_CAP_STRIDED and all dtypes,
 * and it walks both views element by element with the strided helpers. */
DK_Error* plugin_kernel_copy(const DK_Kernel_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".copy";
  DK_Error* e = plugin_check_kernel(kCall, args, DK_OP_COPY);
  if (e != NULL) return e;
  const DK_TensorView *x = args->inputs[0], *out = args->outputs[0];
  const int64_t n = dkh_numel(out);
  const size_t size = dkh_dtype_size(out->dtype);
  if (n == 0) return NULL;
  const unsigned char* src = x->data;
  unsigned char* dst = out->data;
  if (dkh_is_dense(x) && dkh_is_dense(out)) {
    memcpy(dst, src, (size_t)n * size);
    return NULL;
  }
  int64_t index[DK_MAX_RANK] = {0};
  do {
    memcpy(dst + dkh_offset(out, index) * (int64_t)size, src + dkh_offset(x, index) * (int64_t)size,
           size);
  } while (dkh_next_index(index, out->shape, out->rank));
  return NULL;
}
