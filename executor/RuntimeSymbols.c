// The table executor/RuntimeSymbols.h declares. Written in C so that each libm function is
// named once, without C++'s overloads, and each helper can be declared without a prototype
// of its own (its real argument types are _Float16 and the like; only its address is taken).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE // sincos, roundeven
#endif
#include "executor/RuntimeSymbols.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void __stack_chk_fail(void);
// Defined by the dynamic loader where the guard is a global (aarch64), absent elsewhere.
extern uintptr_t __stack_chk_guard __attribute__((weak));

// Compiler-runtime helpers, from the library CMake links in (COURIER_BUILTINS_LIBRARY). Only
// x86-64 needs any: CPUs without F16C or AVX512-BF16 convert half precision and bfloat16 in
// software; AArch64 has instructions. (Complex arithmetic and powi are expanded by the
// lowering, so __mulsc3, __divsc3 and __powisf2 are never called.)
#if defined(__x86_64__)
void __extendhfsf2(void);
void __truncsfhf2(void);
void __truncdfhf2(void);
void __truncsfbf2(void);
void __truncdfbf2(void);
#endif

#if defined(COURIER_HAVE_RUNNER_UTILS)
// MLIR's runner utilities (libmlir_c_runner_utils, libmlir_runner_utils): what vector.print
// lowers to, and the printMemref* functions programs written for mlir-runner call.
#define RUNNER_UTILS(X)                                                                          \
  X(printI64) X(printU64) X(printF32) X(printF64) X(printString) X(printOpen) X(printClose)     \
  X(printComma) X(printNewline) X(printFlops) X(rtclock) X(printMemrefI32) X(printMemrefI64)    \
  X(printMemrefF32) X(printMemrefF64) X(printMemrefInd) X(printMemrefC32) X(printMemrefC64)    \
  X(_mlir_ciface_printMemrefI8) X(_mlir_ciface_printMemrefI16) X(_mlir_ciface_printMemrefI32)  \
  X(_mlir_ciface_printMemrefI64) X(_mlir_ciface_printMemrefF16)                                \
  X(_mlir_ciface_printMemrefBF16) X(_mlir_ciface_printMemrefF32)                               \
  X(_mlir_ciface_printMemrefF64) X(_mlir_ciface_printMemrefInd) X(_mlir_ciface_printMemrefC32) \
  X(_mlir_ciface_printMemrefC64) X(_mlir_ciface_printMemrefShapeI8)                            \
  X(_mlir_ciface_printMemrefShapeI32) X(_mlir_ciface_printMemrefShapeI64)                      \
  X(_mlir_ciface_printMemrefShapeF32) X(_mlir_ciface_printMemrefShapeF64)                      \
  X(_mlir_ciface_printMemrefShapeInd) X(_mlir_ciface_printMemrefShapeC32)                      \
  X(_mlir_ciface_printMemrefShapeC64) X(_mlir_ciface_printMemref0dF32)                         \
  X(_mlir_ciface_printMemref1dF32) X(_mlir_ciface_printMemref1dF64)                            \
  X(_mlir_ciface_printMemref1dI8) X(_mlir_ciface_printMemref1dI32)                             \
  X(_mlir_ciface_printMemref1dI64) X(_mlir_ciface_printMemref1dInd)                            \
  X(_mlir_ciface_printMemref1dC32) X(_mlir_ciface_printMemref1dC64)                            \
  X(_mlir_ciface_printMemref2dF32) X(_mlir_ciface_printMemref3dF32)                            \
  X(_mlir_ciface_printMemref4dF32) X(_mlir_ciface_printMemrefVector4x4xf32)                    \
  X(_mlir_ciface_nanoTime)
#define DECLARE(name) void name(void);
RUNNER_UTILS(DECLARE)
#undef DECLARE
#define PRINTING(name) {#name, (const void *)&name, COURIER_SYMBOL_PRINTING},
#endif

#define MEMORY(name) {#name, (const void *)&name, COURIER_SYMBOL_MEMORY},
#define HELPER(name) {#name, (const void *)&name, COURIER_SYMBOL_HELPER},
#define LIBM(name) {#name, (const void *)&name, COURIER_SYMBOL_LIBM},

const struct CourierRuntimeSymbol courierRuntimeSymbols[] = {
    // clang-format off
    MEMORY(malloc) MEMORY(free) MEMORY(calloc) MEMORY(realloc) MEMORY(aligned_alloc)
    MEMORY(posix_memalign) MEMORY(memcpy) MEMORY(memmove) MEMORY(memset) MEMORY(memcmp)
    MEMORY(abort) MEMORY(__stack_chk_fail)
    {"__stack_chk_guard", (const void *)&__stack_chk_guard, COURIER_SYMBOL_MEMORY},

#if defined(__x86_64__)
    HELPER(__extendhfsf2) HELPER(__truncsfhf2) HELPER(__truncdfhf2) HELPER(__truncsfbf2)
    HELPER(__truncdfbf2)
#endif

    // Exactly the functions the default lowering calls (tests/jit/RuntimeSymbolsTest.cpp
    // lowers every math and complex op and checks): the f32 functions courier-approximate-math
    // computes inline (expf, logf, tanhf, ...) and those LLVM has instructions for (sqrt,
    // fabs, copysign, ...) are not among them.
    LIBM(sin) LIBM(sinf) LIBM(cos) LIBM(cosf) LIBM(tan) LIBM(tanf) LIBM(asin) LIBM(asinf)
    LIBM(acos) LIBM(acosf) LIBM(atan) LIBM(atanf) LIBM(atan2) LIBM(atan2f) LIBM(sinh)
    LIBM(sinhf) LIBM(cosh) LIBM(coshf) LIBM(tanh) LIBM(asinh) LIBM(asinhf) LIBM(acosh)
    LIBM(acoshf) LIBM(atanh) LIBM(atanhf) LIBM(exp) LIBM(exp2) LIBM(exp2f) LIBM(expm1)
    LIBM(log) LIBM(log2) LIBM(log10) LIBM(log10f) LIBM(log1p) LIBM(pow) LIBM(powf) LIBM(cbrt)
    LIBM(cbrtf) LIBM(floor) LIBM(floorf) LIBM(ceil) LIBM(ceilf) LIBM(round) LIBM(roundf)
    LIBM(roundeven) LIBM(roundevenf) LIBM(trunc) LIBM(truncf) LIBM(fmod) LIBM(fmodf) LIBM(fma)
    LIBM(fmaf) LIBM(erf) LIBM(erfc) LIBM(erfcf) LIBM(sincos) LIBM(sincosf)
#if defined(COURIER_HAVE_RUNNER_UTILS)
    RUNNER_UTILS(PRINTING)
#endif
    // clang-format on
    {NULL, NULL, COURIER_SYMBOL_MEMORY}};
