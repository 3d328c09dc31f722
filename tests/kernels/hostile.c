/* Kernels that attack the executor's main process through their worker's channel (fd 3,
 * executor/WorkerProtocol.h): each writes forged replies there with raw system calls the
 * sandbox allows (sendmsg, write, close, memfd_create, ftruncate), then returns, spins or
 * closes the channel. The main process must fail only the request that ran the kernel and
 * keep serving everyone else (tests/executor/HostileTest.cpp).
 *
 * x86-64 Linux only: the message layouts are written by hand from WorkerProtocol.{h,cpp}. */
#include "pyface.h"

#define SIGNATURE(fn, ...) const i64 _catalyst_signature_##fn[] = {1, __VA_ARGS__};

enum {
  SYS_write = 1,
  SYS_close = 3,
  SYS_dup2 = 33,
  SYS_nanosleep = 35,
  SYS_sendmsg = 46,
  SYS_ftruncate = 77,
  SYS_memfd_create = 319,
  CHANNEL = 3,
  KIND_READY = 64,
  KIND_DONE = 65,
  KIND_FAILED = 66,
  KIND_CRASHED = 67,
};

static long raw_syscall(long number, long a, long b, long c, long d) {
  long result;
  register long r10 __asm__("r10") = d;
  __asm__ volatile("syscall"
                   : "=a"(result)
                   : "a"(number), "D"(a), "S"(b), "d"(c), "r"(r10)
                   : "rcx", "r11", "memory");
  return result;
}

struct iovec_ {
  void *base;
  u64 len;
};
struct msghdr_ {
  void *name;
  i32 namelen;
  i32 pad;
  struct iovec_ *iov;
  u64 iovlen;
  void *control;
  u64 controllen;
  i32 flags;
  i32 pad2;
};

/* A message under construction: kind byte, then little-endian u64 fields. */
static char message[256 * 1024];
static u64 length;

static void begin(int kind) {
  message[0] = (char)kind;
  length = 1;
}
static void u64_(u64 value) {
  for (int i = 0; i < 8; ++i)
    message[length++] = (char)(value >> (8 * i));
}

/* Sends the message with up to 4 descriptors (SCM_RIGHTS). */
static long send_fds(const int *fds, int n) {
  struct iovec_ iov = {message, length};
  u64 control[6]; /* cmsghdr (16 bytes) + 4 ints, 8-aligned */
  struct msghdr_ msg = {0};
  msg.iov = &iov;
  msg.iovlen = 1;
  if (n > 0) {
    control[0] = 16 + 4 * (u64)n; /* cmsg_len */
    ((i32 *)control)[2] = 1;      /* SOL_SOCKET */
    ((i32 *)control)[3] = 1;      /* SCM_RIGHTS */
    memcpy((char *)control + 16, fds, 4 * (u64)n);
    msg.control = control;
    msg.controllen = (16 + 4 * (u64)n + 7) & ~(u64)7;
  }
  return raw_syscall(SYS_sendmsg, CHANNEL, (long)&msg, 0, 0);
}
static long send_plain(void) { return send_fds(0, 0); }

static long new_memfd(u64 size) {
  static const char name[] = "hostile";
  long fd = raw_syscall(SYS_memfd_create, (long)name, 0, 0, 0);
  if (fd >= 0)
    raw_syscall(SYS_ftruncate, fd, (long)size, 0, 0);
  return fd;
}

static void sleep_ms(i64 ms) {
  i64 ts[2] = {ms / 1000, (ms % 1000) * 1000000};
  raw_syscall(SYS_nanosleep, (long)ts, 0, 0, 0);
}

static void spin(void) {
  volatile u64 counter = 0;
  for (;;)
    counter = counter + 1;
}

/* The header of a Done for one rank-1 result of `n` f64 elements at `offset`, `total`
 * payload bytes, `inlined` or not. */
static void done_rank1(u64 n, u64 offset, u64 total, u64 inlined) {
  begin(KIND_DONE);
  u64_(1); /* count */
  u64_(8); /* elemSize */
  u64_(1); /* rank */
  u64_(n);
  u64_(offset);
  u64_(total);
  u64_(inlined);
}

static i64 input_i64(void *args, int i) {
  desc0 *in = ARG(desc0, args, i);
  return ((const i64 *)in->aligned)[in->offset];
}

static void return_f64s(void *results, double value, i64 n) {
  desc1 *out = results;
  double *dst = allocate(n * (i64)sizeof(double));
  for (i64 i = 0; i < n; ++i)
    dst[i] = value;
  out->allocated = dst;
  out->aligned = dst;
  out->offset = 0;
  out->sizes[0] = n;
  out->strides[0] = 1;
}

/* Input 0: what to forge; input 1: what to do after (0 return [7.0], 1 spin, 2 close the
 * channel and spin). Result: one rank-1 f64. */
void _catalyst_pyface_forge(void *results, void *args) {
  i64 what = input_i64(args, 0), after = input_i64(args, 1);
  switch (what) {
  case 0: /* Done with a count of 2^62 results */
    begin(KIND_DONE);
    u64_((u64)1 << 62);
    send_plain();
    break;
  case 1: /* a result whose byte count overflows 64 bits */
    done_rank1((u64)1 << 61, 0, 0, 1);
    u64_(0);
    send_plain();
    break;
  case 2: /* 8 TiB of results in a memfd that holds nothing */
    done_rank1((u64)1 << 40, 0, (u64)1 << 43, 0);
    {
      int fd = (int)new_memfd(0);
      send_fds(&fd, 1);
    }
    break;
  case 3: /* a memfd smaller than the results it claims to hold */
    done_rank1(1024, 0, 8192, 0);
    {
      int fd = (int)new_memfd(4096);
      send_fds(&fd, 1);
    }
    break;
  case 4: /* the channel itself passed as the result buffer */
    done_rank1(4, 0, 32, 0);
    {
      int fd = CHANNEL;
      send_fds(&fd, 1);
    }
    break;
  case 5: /* a result outside the reply */
    done_rank1(4, (u64)1 << 63, 32, 1);
    u64_(32);
    for (int i = 0; i < 32; ++i)
      message[length++] = 0;
    send_plain();
    break;
  case 6: /* a crash report, while the kernel goes on */
    begin(KIND_CRASHED);
    {
      i32 report[6] = {11, 1, 0xdead, 0, -1, 0}; /* CrashReport: signal, code, address, syscall */
      memcpy(message + 1, report, 24);
      length = 25;
    }
    send_plain();
    break;
  case 7: /* a zero-length message, which reads as the channel closing */
    raw_syscall(SYS_write, CHANNEL, (long)message, 0, 0);
    break;
  case 8: /* a Done with four descriptors and a truncated body */
  {
    int fds[4] = {(int)new_memfd(4096), (int)new_memfd(4096), CHANNEL, 0};
    begin(KIND_DONE);
    u64_(1);
    send_fds(fds, 4);
  } break;
  case 9: /* a Ready message in place of a reply */
    begin(KIND_READY);
    send_plain();
    break;
  case 10: /* a well-formed Done: one result [42.0], inline */
    done_rank1(1, 0, 8, 1);
    u64_(8);
    {
      double v = 42.0;
      memcpy(message + length, &v, 8);
      length += 8;
    }
    send_plain();
    break;
  case 11: /* an oversized message */
    begin(KIND_DONE);
    for (int i = 0; i < 200 * 1024; ++i)
      message[length++] = 'x';
    send_plain();
    break;
  case 12: /* a Failed reply with an unknown code and a message of 150 KiB claimed */
    begin(KIND_FAILED);
    u64_(8);
    memcpy(message + length, "internal", 8);
    length += 8;
    u64_(150 * 1024);
    send_plain();
    break;
  case 13: /* dup2 over the channel (not on the allow-list: SIGSYS) */
    raw_syscall(SYS_dup2, new_memfd(16), CHANNEL, 0, 0);
    break;
  case 14: /* 64 well-formed Done messages, to queue up behind the real reply */
    for (int i = 0; i < 64; ++i) {
      done_rank1(1, 0, 8, 1);
      u64_(8);
      double v = 1000.0 + i;
      memcpy(message + length, &v, 8);
      length += 8;
      send_plain();
    }
    break;
  }
  if (after == 1)
    spin();
  if (after == 2) {
    raw_syscall(SYS_close, CHANNEL, 0, 0, 0);
    spin();
  }
  return_f64s(results, 7.0, 1);
}
SIGNATURE(forge, 2, 1, 0, 8, 0, 8, 1, 8)

/* Forges a Done whose one result is `input 0` MiB of f64 in a memfd, waits `input 1` ms
 * (while the executor streams the reply), then truncates the memfd to nothing and returns
 * [7.0]. A main process touching its mapping past the new end would get SIGBUS. */
void _catalyst_pyface_forge_then_truncate(void *results, void *args) {
  u64 bytes = (u64)input_i64(args, 0) << 20;
  i64 wait = input_i64(args, 1);
  int fd = (int)new_memfd(bytes);
  done_rank1(bytes / 8, 0, bytes, 0);
  send_fds(&fd, 1);
  sleep_ms(wait);
  raw_syscall(SYS_ftruncate, fd, 0, 0, 0);
  raw_syscall(SYS_close, fd, 0, 0, 0);
  return_f64s(results, 7.0, 1);
}
SIGNATURE(forge_then_truncate, 2, 1, 0, 8, 0, 8, 1, 8)

/* Sleeps input 0 ms and returns [input 0]. */
void _catalyst_pyface_nap(void *results, void *args) {
  i64 ms = input_i64(args, 0);
  sleep_ms(ms);
  return_f64s(results, (double)ms, 1);
}
SIGNATURE(nap, 1, 1, 0, 8, 1, 8)

/* Writes to stdout and stderr as a chatty kernel would: a plain line, a line with quotes, a
 * backslash and a tab, bytes that are not UTF-8, 10000 bytes with no newline until their end,
 * and last a line with no newline at all. Returns one f64 one. */
static char chatter[10001];
static long say(int fd, const char *text) {
  u64 n = 0;
  while (text[n])
    ++n;
  return raw_syscall(SYS_write, fd, (long)text, (long)n, 0);
}
void _catalyst_pyface_shout(void *results, void *args) {
  say(1, "kernel says hello\n");
  say(2, "he said \"hi\" \\ and\tleft\n");
  say(2, "not utf-8: \xff\xfe end\n");
  for (int i = 0; i < 10000; ++i)
    chatter[i] = 'x';
  chatter[10000] = '\n';
  raw_syscall(SYS_write, 1, (long)chatter, 10001, 0);
  say(1, "no newline at the end");
  return_f64s(results, 1.0, 1);
}
SIGNATURE(shout, 0, 1, 1, 8)

/* Writes to stderr what would forge lines of a text log if written as it is: a line shaped
 * like a request line of the executor's, a terminal's clear-screen, a carriage return, an OSC
 * title, DEL and the C1 CSI. Returns one f64 one. */
void _catalyst_pyface_forge_log_line(void *results, void *args) {
  say(2, "\n2026-12-01T07:10:03.123Z info GET /v1/health 200 in=0 out=0 0.100ms "
         "request=forged\n");
  say(2, "\x1b[2J");
  say(2, "\rcleared \x1b]0;title\x07 \x7f \xc2\x9b"
         "2J end of forgery\n");
  return_f64s(results, 1.0, 1);
}
SIGNATURE(forge_log_line, 0, 1, 1, 8)

/* No arguments, no results (so it may be launched async): sleeps 1 s. */
void _catalyst_pyface_nap_second(void *results, void *args) { sleep_ms(1000); }
SIGNATURE(nap_second, 0, 0)

/* No arguments, no results: never returns. */
void _catalyst_pyface_spin_async(void *results, void *args) { spin(); }
SIGNATURE(spin_async, 0, 0)

/* Returns n f64 ones, n = input 0: large results travel in a memfd. */
void _catalyst_pyface_ones(void *results, void *args) {
  return_f64s(results, 1.0, input_i64(args, 0));
}
SIGNATURE(ones, 1, 1, 0, 8, 1, 8)

/* Sums a rank-1 f64 input into a rank-0 f64. */
void _catalyst_pyface_sum(void *results, void *args) {
  desc1 *in = ARG(desc1, args, 0);
  desc0 *out = results;
  double s = 0;
  const double *src = (const double *)in->aligned + in->offset;
  for (i64 i = 0; i < in->sizes[0]; ++i)
    s += src[i * in->strides[0]];
  double *dst = allocate(sizeof(double));
  *dst = s;
  out->allocated = dst;
  out->aligned = dst;
  out->offset = 0;
}
SIGNATURE(sum, 1, 1, 1, 8, 0, 8)

/* `call` symbol: forges a Done for a call whose `out_size` bytes are in a memfd, then
 * toggles the memfd's size between nothing and `out_size` while the executor copies it. */
int courier_hostile_truncating_call(const void *in, u64 in_size, void *out, u64 out_size) {
  int fd = (int)new_memfd(out_size);
  begin(KIND_DONE);
  u64_(out_size);
  u64_(0);
  send_fds(&fd, 1);
  for (int i = 0; i < 200000; ++i) {
    raw_syscall(SYS_ftruncate, fd, 0, 0, 0);
    raw_syscall(SYS_ftruncate, fd, (long)out_size, 0, 0);
  }
  return 0;
}
