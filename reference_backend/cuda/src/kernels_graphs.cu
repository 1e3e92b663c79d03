// The one kernel of the graphs part: after a graph's launch, the data errors
// its kernels reported into the graph's own error word move to the launch
// stream's word (gpu.h, Graphs), in stream order.
#include "kernel.h"

namespace dkcuda {
namespace {

DK_KERNEL move_errors_kernel(KernelErrors* from, KernelErrors* into) {
  if (global_index() != 0 || from->count == 0) return;
  if (into->count == 0) {
    *into = *from;
  } else {
    into->count += from->count;  // the stream's first report stays
  }
  *from = KernelErrors{};
}

}  // namespace

std::string move_kernel_errors(void* stream, KernelErrors* from, KernelErrors* into) {
  return DK_LAUNCH(move_errors_kernel, 1, 1, stream, from, into);
}

}  // namespace dkcuda
