// The table executor/RuntimeSymbols.h declares. Written in C so that each libm function is
// named once, without C++'s overloads, and each helper can be declared without a prototype
// of its own (its real argument types are _Float16 and the like; only its address is taken).
#define _GNU_SOURCE // sincos, roundeven
#include "executor/RuntimeSymbols.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void __stack_chk_fail(void);
// Defined by the dynamic loader where the guard is a global (aarch64), absent elsewhere.
extern uintptr_t __stack_chk_guard __attribute__((weak));

// Compiler-runtime helpers, from the library CMake links in (COURIER_BUILTINS_LIBRARY).
void __powisf2(void);
void __powidf2(void);
void __mulsc3(void);
void __muldc3(void);
void __divsc3(void);
void __divdc3(void);
#if defined(__x86_64__)
// x86-64 CPUs without F16C convert half precision in software; AArch64 has instructions.
void __extendhfsf2(void);
void __truncsfhf2(void);
void __truncdfhf2(void);
void __truncsfbf2(void);
void __truncdfbf2(void);
#endif

#define MEMORY(name) {#name, (const void *)&name, COURIER_SYMBOL_MEMORY},
#define HELPER(name) {#name, (const void *)&name, COURIER_SYMBOL_HELPER},
#define LIBM(name)                                                                               \
  {#name, (const void *)&name, COURIER_SYMBOL_LIBM},                                             \
      {#name "f", (const void *)&name##f, COURIER_SYMBOL_LIBM},

const struct CourierRuntimeSymbol courierRuntimeSymbols[] = {
    // clang-format off
    MEMORY(malloc) MEMORY(free) MEMORY(calloc) MEMORY(realloc) MEMORY(aligned_alloc)
    MEMORY(posix_memalign) MEMORY(memcpy) MEMORY(memmove) MEMORY(memset) MEMORY(memcmp)
    MEMORY(abort) MEMORY(__stack_chk_fail)
    {"__stack_chk_guard", (const void *)&__stack_chk_guard, COURIER_SYMBOL_MEMORY},

    HELPER(__powisf2) HELPER(__powidf2) HELPER(__mulsc3) HELPER(__muldc3) HELPER(__divsc3)
    HELPER(__divdc3)
#if defined(__x86_64__)
    HELPER(__extendhfsf2) HELPER(__truncsfhf2) HELPER(__truncdfhf2) HELPER(__truncsfbf2)
    HELPER(__truncdfbf2)
#endif

    LIBM(sin) LIBM(cos) LIBM(tan) LIBM(asin) LIBM(acos) LIBM(atan) LIBM(atan2) LIBM(sinh)
    LIBM(cosh) LIBM(tanh) LIBM(asinh) LIBM(acosh) LIBM(atanh) LIBM(exp) LIBM(exp2) LIBM(expm1)
    LIBM(log) LIBM(log2) LIBM(log10) LIBM(log1p) LIBM(pow) LIBM(sqrt) LIBM(cbrt) LIBM(fabs)
    LIBM(floor) LIBM(ceil) LIBM(round) LIBM(roundeven) LIBM(trunc) LIBM(rint) LIBM(nearbyint)
    LIBM(fmod) LIBM(remainder) LIBM(copysign) LIBM(fmin) LIBM(fmax) LIBM(fma) LIBM(hypot)
    LIBM(erf) LIBM(erfc) LIBM(tgamma) LIBM(lgamma) LIBM(ldexp) LIBM(frexp) LIBM(modf)
    LIBM(sincos)
    // clang-format on
    {NULL, NULL, COURIER_SYMBOL_MEMORY}};
