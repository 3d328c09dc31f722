/* Memref descriptors and the few libc declarations the test kernels need. No system
 * headers, so the kernels also cross-compile for targets without a sysroot. */
#ifndef COURIER_TESTS_KERNELS_PYFACE_H
#define COURIER_TESTS_KERNELS_PYFACE_H

typedef __INT64_TYPE__ i64;
typedef __INT32_TYPE__ i32;
typedef __UINT64_TYPE__ u64;
typedef __SIZE_TYPE__ size_t;

void *malloc(size_t size);
void *calloc(size_t count, size_t size);
void *realloc(void *ptr, size_t size);
void free(void *ptr);
double exp(double x);
void *memcpy(void *dst, const void *src, size_t n);
void *memset(void *dst, int c, size_t n);
char *getenv(const char *name);

#define DESCRIPTOR(rank)                                                                           \
  struct {                                                                                         \
    void *allocated;                                                                               \
    void *aligned;                                                                                 \
    i64 offset;                                                                                    \
    i64 sizes[rank];                                                                               \
    i64 strides[rank];                                                                             \
  }

typedef struct {
  void *allocated;
  void *aligned;
  i64 offset;
} desc0;
typedef DESCRIPTOR(1) desc1;
typedef DESCRIPTOR(2) desc2;
typedef DESCRIPTOR(3) desc3;

/* Kernels allocate at least one byte so an empty result is still a real allocation. */
static inline void *allocate(i64 bytes) { return malloc(bytes > 0 ? (size_t)bytes : 1); }

#define ARG(type, args, i) (((type **)(args))[i])

/* The signature table of entry `_catalyst_pyface_<fn>` (abi/KernelABI.h): version 1, the
 * number of inputs and of results, then a (rank, element bytes) pair per input and per
 * result. Built with -DCOURIER_NO_SIGNATURES, an object has none: executors refuse such an
 * object unless told to allow unsigned ones. */
#ifdef COURIER_NO_SIGNATURES
#define COURIER_SIGNATURE(fn, n_in, n_out, ...)
#else
#define COURIER_SIGNATURE(fn, n_in, n_out, ...)                                                    \
  __attribute__((visibility("default")))                                                           \
  const i64 _catalyst_signature_##fn[] = {1, n_in, n_out, ##__VA_ARGS__};
#endif

#endif
