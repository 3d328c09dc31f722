/* The library sample 4 calls on its second executor (loaded with --plugin).
 * describe(scale: f64, name: str) returns scale * strlen(name) and fills a 4 x f32 out
 * buffer with scale * (i + 1). Wire layout: in = f64 + 256-byte string, out = f64 + 4 x f32. */
#include <stdint.h>
#include <string.h>

int32_t describe(const void *in, uint64_t in_size, void *out, uint64_t out_size) {
  if (in_size != sizeof(double) + 256 || out_size != sizeof(double) + 4 * sizeof(float))
    return 22; /* EINVAL: not the layout this function takes */
  double scale;
  memcpy(&scale, in, sizeof scale);
  const char *name = (const char *)in + sizeof scale;
  double result = scale * (double)strnlen(name, 256);
  memcpy(out, &result, sizeof result);
  for (int i = 0; i < 4; ++i) {
    float value = (float)(scale * (i + 1));
    memcpy((char *)out + sizeof result + i * sizeof value, &value, sizeof value);
  }
  return 0;
}
