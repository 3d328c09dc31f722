/* Integer kernels: an elementwise i32 add entry and a `call`-ABI symbol defined in an
 * object rather than a plugin. */
#include "pyface.h"

void _catalyst_pyface_add(void *results, void *args) {
  desc1 *a = ARG(desc1, args, 0);
  desc1 *b = ARG(desc1, args, 1);
  desc1 *out = results;
  i64 n = a->sizes[0];
  const i32 *x = (const i32 *)a->aligned + a->offset;
  const i32 *y = (const i32 *)b->aligned + b->offset;
  i32 *dst = allocate(n * (i64)sizeof(i32));
  for (i64 i = 0; i < n; ++i)
    dst[i] = x[i * a->strides[0]] + y[i * b->strides[0]];
  out->allocated = dst;
  out->aligned = dst;
  out->offset = 0;
  out->sizes[0] = n;
  out->strides[0] = 1;
}
COURIER_SIGNATURE(add, 2, 1, 1, 4, 1, 4, 1, 4)

/* Negates packed i32 values; the reply must be exactly as large as the input. */
i32 courier_object_negate(const void *in, u64 in_size, void *out, u64 out_size) {
  if (in_size != out_size || in_size % sizeof(i32) != 0)
    return 22;
  const i32 *src = in;
  i32 *dst = out;
  for (u64 i = 0; i < in_size / sizeof(i32); ++i)
    dst[i] = -src[i];
  return 0;
}
