/* Kernels that end or abuse the process running them: a null load, abort(), raw system
 * calls (file creation, sockets, exec, fork, signals, exit_group), a loop and a recursion
 * without end, a malloc bomb; beside them a kernel that prints with the raw write call, a
 * well-behaved one, for checking that a worker survives or comes back, and a slow one. An
 * executor must contain each one to its own session (tests/executor/ContainmentTest.cpp).
 *
 * Built twice: with signature tables (crashers.o) and, with -DCOURIER_NO_SIGNATURES,
 * without them (crashers-unsigned.o), the object an executor refuses by default. */
#include "pyface.h"

void abort(void);

#ifdef COURIER_NO_SIGNATURES
#define SIGNATURE(fn, ...)
#else
/* {version 1, inputs, results, then (rank, element bytes) per input and per result}. */
#define SIGNATURE(fn, ...) const i64 _catalyst_signature_##fn[] = {1, __VA_ARGS__};
#endif

/* x86-64 Linux system call numbers and the few constants the calls below need. */
enum {
  SYS_write = 1,
  SYS_open = 2,
  SYS_mmap = 9,
  SYS_munmap = 11,
  SYS_nanosleep = 35,
  SYS_socket = 41,
  SYS_clone = 56,
  SYS_fork = 57,
  SYS_execve = 59,
  SYS_kill = 62,
  SYS_creat = 85,
  SYS_ftruncate = 77,
  SYS_exit_group = 231,
  SYS_openat = 257,
  SYS_newfstatat = 262,
  SYS_memfd_create = 319,
  AT_FDCWD = -100,
  AT_EMPTY_PATH = 0x1000,
  PROT_READ_WRITE = 3,
  MAP_SHARED = 1,
  O_WRONLY_CREAT = 01 | 0100,
  AF_INET = 2,
  SOCK_STREAM = 1,
  SIGCHLD = 17,
};

/* A system call made directly, as a kernel bypassing the symbol allow-list would. */
static long raw_syscall(long number, long a, long b, long c, long d) {
  long result;
  register long r10 __asm__("r10") = d;
  __asm__ volatile("syscall"
                   : "=a"(result)
                   : "a"(number), "D"(a), "S"(b), "d"(c), "r"(r10)
                   : "rcx", "r11", "memory");
  return result;
}

/* Stores `value` as the kernel's one rank-0 i64 result. */
static void return_i64(void *results, i64 value) {
  desc0 *out = results;
  i64 *dst = allocate(sizeof(i64));
  *dst = value;
  out->allocated = dst;
  out->aligned = dst;
  out->offset = 0;
}

/* The first byte of a rank-1 i8 input (a NUL-terminated string the caller passes). */
static const char *string_arg(void *args, int i) {
  desc1 *in = ARG(desc1, args, i);
  return (const char *)in->aligned + in->offset;
}

/* Loads from address 0: SIGSEGV with fault address 0x0. */
void _catalyst_pyface_null_load(void *results, void *args) {
  volatile int *volatile nowhere = 0;
  (void)*nowhere;
}
SIGNATURE(null_load, 0, 0)

/* A parallel region on the kernel-thread team, as compiled parallel loops start one (the
 * OpenMP runtime's entry, on the allow-list); *global is 0 on the launching thread. */
typedef struct {
  int reserved1, flags, reserved2, reserved3;
  const char *source;
} ident;
static const ident kRegion = {0, 2, 0, 0, ";crashers.c;region;0;0;;"};
void __kmpc_fork_call(const ident *loc, int argc, void (*body)(int *, int *, ...), ...);

static void null_load_on_helpers(int *global, int *bound, ...) {
  if (*global != 0) {
    volatile int *volatile nowhere = 0;
    (void)*nowhere;
  }
}

/* Loads from address 0 on every team thread but the launching one. */
void _catalyst_pyface_null_load_on_thread(void *results, void *args) {
  __kmpc_fork_call(&kRegion, 0, null_load_on_helpers);
}
SIGNATURE(null_load_on_thread, 0, 0)

static void spin_everywhere(int *global, int *bound, ...) {
  volatile u64 counter = 0;
  for (;;)
    counter = counter + 1;
}

/* Spins on every thread of the team. */
void _catalyst_pyface_spin_on_threads(void *results, void *args) {
  __kmpc_fork_call(&kRegion, 0, spin_everywhere);
}
SIGNATURE(spin_on_threads, 0, 0)

/* abort() is on the object host's allow-list: SIGABRT. */
void _catalyst_pyface_call_abort(void *results, void *args) { abort(); }
SIGNATURE(call_abort, 0, 0)

/* openat(AT_FDCWD, path, O_WRONLY | O_CREAT, 0644) on the path in input 0; returns the
 * call's result if the process survives it. */
void _catalyst_pyface_openat_path(void *results, void *args) {
  return_i64(results,
             raw_syscall(SYS_openat, AT_FDCWD, (long)string_arg(args, 0), O_WRONLY_CREAT, 0644));
}
SIGNATURE(openat_path, 1, 1, 1, 1, 0, 8)

/* open(path, O_WRONLY | O_CREAT, 0644) on the path in input 0. */
void _catalyst_pyface_open_path(void *results, void *args) {
  return_i64(results, raw_syscall(SYS_open, (long)string_arg(args, 0), O_WRONLY_CREAT, 0644, 0));
}
SIGNATURE(open_path, 1, 1, 1, 1, 0, 8)

/* creat(path, 0644) on the path in input 0. */
void _catalyst_pyface_creat_path(void *results, void *args) {
  return_i64(results, raw_syscall(SYS_creat, (long)string_arg(args, 0), 0644, 0, 0));
}
SIGNATURE(creat_path, 1, 1, 1, 1, 0, 8)

/* socket(AF_INET, SOCK_STREAM, 0). */
void _catalyst_pyface_open_socket(void *results, void *args) {
  return_i64(results, raw_syscall(SYS_socket, AF_INET, SOCK_STREAM, 0, 0));
}
SIGNATURE(open_socket, 0, 1, 0, 8)

/* execve of a path that does not exist: harmless even where nothing blocks it. */
void _catalyst_pyface_exec_missing(void *results, void *args) {
  static const char path[] = "/nonexistent/courier-crashers-exec";
  return_i64(results, raw_syscall(SYS_execve, (long)path, 0, 0, 0));
}
SIGNATURE(exec_missing, 0, 1, 0, 8)

/* fork(); a child that comes into being exits at once. */
void _catalyst_pyface_fork_child(void *results, void *args) {
  long pid = raw_syscall(SYS_fork, 0, 0, 0, 0);
  if (pid == 0)
    raw_syscall(SYS_exit_group, 0, 0, 0, 0);
  return_i64(results, pid);
}
SIGNATURE(fork_child, 0, 1, 0, 8)

/* clone(SIGCHLD): a new process as fork makes it, asked for through clone; a child that
 * comes into being exits at once. */
void _catalyst_pyface_clone_child(void *results, void *args) {
  long pid = raw_syscall(SYS_clone, SIGCHLD, 0, 0, 0);
  if (pid == 0)
    raw_syscall(SYS_exit_group, 0, 0, 0, 0);
  return_i64(results, pid);
}
SIGNATURE(clone_child, 0, 1, 0, 8)

/* kill(-1, 0): signal 0 only probes, so it is harmless even where nothing blocks it. */
void _catalyst_pyface_kill_probe(void *results, void *args) {
  return_i64(results, raw_syscall(SYS_kill, -1, 0, 0, 0));
}
SIGNATURE(kill_probe, 0, 1, 0, 8)

/* exit_group(3): the process ends without a signal. */
void _catalyst_pyface_exit_group(void *results, void *args) {
  raw_syscall(SYS_exit_group, 3, 0, 0, 0);
}
SIGNATURE(exit_group, 0, 0)

/* Never returns. */
void _catalyst_pyface_loop_forever(void *results, void *args) {
  volatile u64 counter = 0;
  for (;;)
    counter = counter + 1;
}
SIGNATURE(loop_forever, 0, 0)

/* Read by recurse() on every call, so neither the recursion nor its frames can be
 * optimised away, and the compiler cannot prove it endless. */
static volatile int keep_recursing = 1;

/* Each frame holds a 1 KiB buffer it reads after the inner call returns, so the call is not
 * a tail call and the stack grows until it overflows. */
static __attribute__((noinline)) i64 recurse(i64 depth) {
  volatile char frame[1024];
  frame[depth % 1024] = (char)depth;
  i64 inner = keep_recursing ? recurse(depth + 1) : 0;
  return inner + frame[depth % 1024];
}

void _catalyst_pyface_recurse_forever(void *results, void *args) {
  return_i64(results, recurse(0));
}
SIGNATURE(recurse_forever, 0, 1, 0, 8)

/* Mallocs 64 MiB blocks and touches every page of each until malloc returns NULL, then
 * writes through the NULL. Input 0 (rank-0 i64) caps the total in MiB so that a missing
 * memory limit cannot take the whole machine: past the cap the kernel returns the MiB it
 * holds (its blocks leak, as a bomb's would). */
void _catalyst_pyface_malloc_bomb(void *results, void *args) {
  desc0 *cap = ARG(desc0, args, 0);
  i64 capMiB = ((const i64 *)cap->aligned)[cap->offset];
  const i64 block = (i64)64 << 20;
  i64 heldMiB = 0;
  while (heldMiB < capMiB) {
    volatile char *p = malloc((size_t)block);
    if (!p) {
      /* Through a volatile copy, so the compiler cannot turn the store into a trap. */
      volatile char *volatile null = p;
      *null = 1;
      break;
    }
    for (i64 at = 0; at < block; at += 4096)
      p[at] = 1;
    heldMiB += 64;
  }
  return_i64(results, heldMiB);
}
SIGNATURE(malloc_bomb, 1, 1, 0, 8, 0, 8)

/* newfstatat(AT_FDCWD, path, ...) on the path in input 0: a kernel learning a file's size,
 * owner and mode (or whether it exists) outside its worker. Returns the call's result. */
void _catalyst_pyface_stat_path(void *results, void *args) {
  char status[256];
  return_i64(results,
             raw_syscall(SYS_newfstatat, AT_FDCWD, (long)string_arg(args, 0), (long)status, 0));
}
SIGNATURE(stat_path, 1, 1, 1, 1, 0, 8)

/* fstat of its standard input, as the C library asks it (newfstatat with an empty path):
 * what a worker's own code needs. Returns the call's result. */
void _catalyst_pyface_stat_stdin(void *results, void *args) {
  char status[256];
  return_i64(results, raw_syscall(SYS_newfstatat, 0, (long)"", (long)status, AT_EMPTY_PATH));
}
SIGNATURE(stat_stdin, 0, 1, 0, 8)

/* Holds input 0 MiB in memfds of 32 MiB (each within a file size limit of 64 MiB): creates
 * one, touches every page through a mapping, unmaps it and keeps the descriptor, so that
 * RLIMIT_AS no longer counts it. Returns the MiB held, or the failing call's negative
 * result. */
void _catalyst_pyface_memfd_hoard(void *results, void *args) {
  desc0 *in = ARG(desc0, args, 0);
  i64 total = ((const i64 *)in->aligned)[in->offset];
  const long bytes = 32l << 20;
  i64 held = 0;
  for (; held < total; held += 32) {
    long fd = raw_syscall(SYS_memfd_create, (long)"hoard", 0, 0, 0);
    long grown = fd < 0 ? fd : raw_syscall(SYS_ftruncate, fd, bytes, 0, 0);
    if (grown < 0) {
      return_i64(results, grown);
      return;
    }
    /* mmap takes six arguments; the last two (descriptor, offset) go in r8 and r9. */
    long mapped;
    register long r10 __asm__("r10") = MAP_SHARED;
    register long r8 __asm__("r8") = fd;
    register long r9 __asm__("r9") = 0;
    __asm__ volatile("syscall"
                     : "=a"(mapped)
                     : "a"(SYS_mmap), "D"(0), "S"(bytes), "d"(PROT_READ_WRITE), "r"(r10), "r"(r8),
                       "r"(r9)
                     : "rcx", "r11", "memory");
    if (mapped < 0 && mapped > -4096) {
      return_i64(results, mapped);
      return;
    }
    for (long at = 0; at < bytes; at += 4096)
      ((volatile char *)mapped)[at] = 1;
    raw_syscall(SYS_munmap, mapped, bytes, 0, 0);
  }
  return_i64(results, held);
}
SIGNATURE(memfd_hoard, 1, 1, 0, 8, 0, 8)

/* Writes its rank-1 i8 input (a line) to fd 1 with the raw write call and returns the
 * call's result: the bytes written. */
void _catalyst_pyface_print_line(void *results, void *args) {
  desc1 *in = ARG(desc1, args, 0);
  const char *line = (const char *)in->aligned + in->offset;
  return_i64(results, raw_syscall(SYS_write, 1, (long)line, (long)in->sizes[0], 0));
}
SIGNATURE(print_line, 1, 1, 1, 1, 0, 8)

/* The well-behaved kernel: x + 1 over a 1-D f64 tensor, honouring its stride. */
void _catalyst_pyface_plus_one(void *results, void *args) {
  desc1 *in = ARG(desc1, args, 0);
  desc1 *out = results;
  i64 n = in->sizes[0];
  const double *src = (const double *)in->aligned + in->offset;
  double *dst = allocate(n * (i64)sizeof(double));
  for (i64 i = 0; i < n; ++i)
    dst[i] = src[i * in->strides[0]] + 1.0;
  out->allocated = dst;
  out->aligned = dst;
  out->offset = 0;
  out->sizes[0] = n;
  out->strides[0] = 1;
}
SIGNATURE(plus_one, 1, 1, 1, 8, 1, 8)

/* plus_one after sleeping x[0] milliseconds: a launch that stays in flight long enough for
 * its executor to be killed under it (tests/transport/FailoverTest.cpp). */
void _catalyst_pyface_slow_plus_one(void *results, void *args) {
  desc1 *in = ARG(desc1, args, 0);
  i64 ms = in->sizes[0] > 0 ? (i64)((const double *)in->aligned)[in->offset] : 0;
  struct {
    i64 seconds, nanoseconds;
  } pause = {ms / 1000, (ms % 1000) * 1000000};
  raw_syscall(SYS_nanosleep, (long)&pause, 0, 0, 0);
  _catalyst_pyface_plus_one(results, args);
}
SIGNATURE(slow_plus_one, 1, 1, 1, 8, 1, 8)

/* Takes an argument and returns a result, so launching it async (no arguments, no
 * results) must be refused; a host that ran it anyway would read through a bad args. */
void _catalyst_pyface_first_element(void *results, void *args) {
  desc1 *in = ARG(desc1, args, 0);
  desc0 *out = results;
  double *dst = allocate(sizeof(double));
  *dst = ((const double *)in->aligned)[in->offset];
  out->allocated = dst;
  out->aligned = dst;
  out->offset = 0;
}
SIGNATURE(first_element, 1, 1, 1, 8, 0, 8)

/* `call` symbols (int32_t sym(in, in_size, out, out_size)): one that loads from address 0
 * and one that never returns. */
int courier_crashers_null_call(const void *in, u64 in_size, void *out, u64 out_size) {
  volatile int *volatile nowhere = 0;
  return *nowhere;
}

int courier_crashers_spin_call(const void *in, u64 in_size, void *out, u64 out_size) {
  volatile u64 counter = 0;
  for (;;)
    counter = counter + 1;
  return 0;
}
