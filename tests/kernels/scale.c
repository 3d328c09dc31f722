/* _catalyst_pyface_scale: doubles a 1-D f64 tensor, honouring the input's stride. */
#include "pyface.h"

#ifndef FACTOR
#define FACTOR 2.0
#endif

void _catalyst_pyface_scale(void *results, void *args) {
  desc1 *in = ARG(desc1, args, 0);
  desc1 *out = results;
  i64 n = in->sizes[0];
  const double *src = (const double *)in->aligned + in->offset;
  double *dst = allocate(n * (i64)sizeof(double));
  for (i64 i = 0; i < n; ++i)
    dst[i] = FACTOR * src[i * in->strides[0]];
  out->allocated = dst;
  out->aligned = dst;
  out->offset = 0;
  out->sizes[0] = n;
  out->strides[0] = 1;
}
COURIER_SIGNATURE(scale, 1, 1, 1, 8, 1, 8)
