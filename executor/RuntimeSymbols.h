// The functions compiled code may call outside itself, with the addresses Courier gives them:
// the C allocator and memory routines, the libm functions the default lowering calls, and
// the compiler-runtime helpers LLVM's code generator calls (half-precision and bfloat16
// conversions on x86-64). The
// helpers are linked into Courier from the compiler's own runtime library, so kernels and
// host code find the same ones in every process: courier-run, a Python interpreter, an
// embedding application, a worker or an executor.
#ifndef COURIER_EXECUTOR_RUNTIMESYMBOLS_H
#define COURIER_EXECUTOR_RUNTIMESYMBOLS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/// What a symbol is, for documentation and for the test that keeps this table and the
/// default lowering in agreement.
enum CourierRuntimeSymbolKind {
  COURIER_SYMBOL_MEMORY,  ///< the C allocator, memory routines, abort, stack protection
  COURIER_SYMBOL_LIBM,    ///< a C math library function
  COURIER_SYMBOL_HELPER,  ///< a compiler-runtime helper (compiler-rt builtins or libgcc)
  COURIER_SYMBOL_PRINTING ///< MLIR's runner utilities (vector.print, printMemref*)
};

struct CourierRuntimeSymbol {
  const char *name;
  /// Its address in this process; null for a symbol this platform's C library does not
  /// define (e.g. __stack_chk_guard on x86-64, where the guard lives in thread-local storage).
  const void *address;
  enum CourierRuntimeSymbolKind kind;
};

/// Every symbol a kernel object may import (the object host's allow-list), terminated by an
/// entry whose name is null.
extern const struct CourierRuntimeSymbol courierRuntimeSymbols[];

#ifdef __cplusplus
} // extern "C"
#endif

#endif // COURIER_EXECUTOR_RUNTIMESYMBOLS_H
