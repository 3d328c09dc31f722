/* A `call` plugin: int32_t sym(const void *in, uint64_t in_size, void *out, uint64_t
 * out_size), 0 on success. */
#include <stdint.h>
#include <string.h>

/* Sums packed f64 values into one f64; 22 (EINVAL) when a size is not what it expects. */
int32_t courier_test_sum(const void *in, uint64_t in_size, void *out, uint64_t out_size) {
  if (in_size % sizeof(double) != 0 || out_size != sizeof(double))
    return 22;
  double total = 0;
  for (uint64_t i = 0; i < in_size / sizeof(double); ++i) {
    double value;
    memcpy(&value, (const char *)in + i * sizeof(double), sizeof(double));
    total += value;
  }
  memcpy(out, &total, sizeof(double));
  return 0;
}

/* Always fails, to test how a callee's error code is reported. */
int32_t courier_test_fail(const void *in, uint64_t in_size, void *out, uint64_t out_size) {
  return 7;
}

/* Takes nothing and returns nothing: a call whose reply is empty. */
int32_t courier_test_nothing(const void *in, uint64_t in_size, void *out, uint64_t out_size) {
  return in_size == 0 && out_size == 0 ? 0 : 22;
}
