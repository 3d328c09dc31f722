// Leaves a session, its objects and an unawaited async launch open and returns from main:
// the runtime must close everything at exit without hanging or crashing. The executor
// address is the first argument, "local" by default.
#include "runtime/Runtime.h"

#include "tests/kernels/KernelPaths.h"

#include <cstdio>
#include <cstdlib>

int main(int argc, char **argv) {
  int64_t session = __catalyst__executor__open(argc > 1 ? argv[1] : "local");
  if (session == 0 || __catalyst__executor__send_binary(session, COURIER_KERNEL_SCALE, 0) != 0)
    return 1;
  double x[2] = {1, 2};
  struct {
    void *allocated, *aligned;
    int64_t offset, size, stride;
  } in{x, x, 0, 2, 1}, out{nullptr, nullptr, 0, 2, 0};
  void *ins[] = {&in}, *outs[] = {&out};
  size_t ranks[] = {1}, sizes[] = {8};
  __catalyst__executor__launch(session, "_catalyst_pyface_scale", COURIER_KERNEL_SCALE, 1, ins,
                               ranks, sizes, 1, outs, ranks, sizes);
  if (llvm::Error error = courier::runtime::takeError()) {
    llvm::consumeError(std::move(error));
    return 1;
  }
  std::free(out.allocated);
  if (__catalyst__executor__launch_async(session, "_catalyst_pyface_noop", COURIER_KERNEL_SHAPES) ==
      0)
    return 1;
  std::puts("leaving with the session open");
  return 0;
}
