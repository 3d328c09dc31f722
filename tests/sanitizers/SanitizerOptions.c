/* The sanitizer runtime's defaults, linked into every executable of a sanitized build, so
 * each of them, and each process it starts whatever environment that process gets, runs
 * with what the suite needs; ASAN_OPTIONS, UBSAN_OPTIONS and LSAN_OPTIONS still override
 * them. Why each option is here: docs/reliability.md, "The sanitizer configuration". */

#define COURIER_SANITIZER_HOOK __attribute__((visibility("default"), used))

COURIER_SANITIZER_HOOK const char *__asan_default_options(void) {
  /* LLVM gives each thread an alternate signal stack of its own; ASan's would replace it
     and then fail to free it at thread exit (error code 22 from UnsetAlternateSignalStack). */
  return "use_sigaltstack=0"
         /* A malloc that fails returns null as in production (a kernel's malloc bomb, a
            buffer the executor cannot have), rather than ending the process with a report;
            operator new cannot return null and still reports (the [oom] tests). */
         ":allocator_may_return_null=1"
         ":external_symbolizer_path=" COURIER_LLVM_SYMBOLIZER;
}

COURIER_SANITIZER_HOOK const char *__ubsan_default_options(void) {
  /* Undefined behaviour fails the process, as an ASan report does, so no test passes over it. */
  return "halt_on_error=1:print_stacktrace=1";
}

COURIER_SANITIZER_HOOK const char *__lsan_default_options(void) {
  return "suppressions=" COURIER_LSAN_SUPPRESSIONS
         /* LeakSanitizer's own suppressions (glibc's dlerror buffer, still held by a thread
            that looked a symbol up when the process exits) match no Courier allocation, but
            it would list them at exit, and any output at all is a report file that fails
            the suite. A leak that is not suppressed is still reported. */
         ":print_suppressions=0";
}
