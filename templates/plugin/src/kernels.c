/* The kernels. One worked example, add on float32, shows the whole pattern:
 *
 * 1. Validate synchronously and return an error naming the call, what was
 *    expected and what was found. Nothing is enqueued on bad input.
 * 2. Rely on what ops.def declared: with capability bits 0 the SDK hands over
 *    only dense row-major views, already broadcast to out's shape, no aliasing;
 *    with dtype mask float32 it never calls with another dtype. (Checked here
 *    anyway: the check is cheap and turns an SDK bug into a clear error.)
 * 3. Enqueue the work on args->stream. This template's streams are synchronous
 *    (stream.c), so the loop simply runs now; on a device, launch it here.
 *
 * The next kernel: copy one row of ops.def from NULL to your function, write
 * it here (or in a new file listed in CMakeLists.txt), then run
 *   devicekit conformance --device NAME:0 -k OPNAME
 */
#include <stddef.h>

#include "plugin.h"

/* Elements of a view, or -1 if it is not dense row-major (strides in elements). */
static int64_t dense_numel(const DK_TensorView* v) {
  int64_t n = 1;
  for (int32_t d = v->rank - 1; d >= 0; --d) {
    if (v->shape[d] != 1 && v->strides[d] != n) return -1;
    n *= v->shape[d];
  }
  return n;
}

static int same_shape(const DK_TensorView* a, const DK_TensorView* b) {
  if (a->rank != b->rank) return 0;
  for (int32_t d = 0; d < a->rank; ++d)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

DK_Error* plugin_kernel_add(const DK_Kernel_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".add";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Kernel_Args);
  DK_Error* e = plugin_check_device(kCall, args->device);
  if (e == NULL) e = plugin_check_stream(kCall, args->stream, args->device);
  if (e != NULL) return e;
  if (args->num_inputs != 2 || args->num_outputs != 1)
    return plugin_error(DK_ERROR_INVALID_ARGUMENT, "%s: got %d inputs and %d outputs; "
                        "expected 2 and 1", kCall, args->num_inputs, args->num_outputs);
  const DK_TensorView *a = args->inputs[0], *b = args->inputs[1], *out = args->outputs[0];
  const DK_TensorView* views[3] = {a, b, out};
  const char* names[3] = {"a", "b", "out"};
  for (int i = 0; i < 3; ++i) {
    if (views[i]->dtype != DK_DTYPE_FLOAT32)
      return plugin_error(DK_ERROR_INVALID_ARGUMENT, "%s: %s has dtype %d; this kernel "
                          "declared only float32 (%d)", kCall, names[i], (int)views[i]->dtype,
                          (int)DK_DTYPE_FLOAT32);
    if (!same_shape(views[i], out) || dense_numel(views[i]) < 0)
      return plugin_error(DK_ERROR_INVALID_ARGUMENT, "%s: %s is not a dense view of out's "
                          "shape; this kernel declared no capability bits (ops.def), so the "
                          "SDK must materialise it first", kCall, names[i]);
  }

  const float* x = a->data;
  const float* y = b->data;
  float* z = out->data;
  const int64_t n = dense_numel(out);
  for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
  return NULL;
}
