/* Kernels over ranks 0-3, several results, strided inputs and results, and results the
 * kernel does not own (an aliased input, a constant global). */
#include "pyface.h"

/* Rank 0: x * x. */
void _catalyst_pyface_square0(void *results, void *args) {
  desc0 *in = ARG(desc0, args, 0);
  desc0 *out = results;
  double *dst = allocate(sizeof(double));
  double x = ((const double *)in->aligned)[in->offset];
  *dst = x * x;
  out->allocated = dst;
  out->aligned = dst;
  out->offset = 0;
}
COURIER_SIGNATURE(square0, 1, 1, 0, 8, 0, 8)

/* Rank 2: transposes an f32 [m, n] tensor of any strides into a contiguous [n, m] one. */
void _catalyst_pyface_transpose2(void *results, void *args) {
  desc2 *in = ARG(desc2, args, 0);
  desc2 *out = results;
  i64 m = in->sizes[0], n = in->sizes[1];
  const float *src = (const float *)in->aligned + in->offset;
  float *dst = allocate(m * n * (i64)sizeof(float));
  for (i64 i = 0; i < m; ++i)
    for (i64 j = 0; j < n; ++j)
      dst[j * m + i] = src[i * in->strides[0] + j * in->strides[1]];
  out->allocated = dst;
  out->aligned = dst;
  out->offset = 0;
  out->sizes[0] = n;
  out->sizes[1] = m;
  out->strides[0] = m;
  out->strides[1] = 1;
}
COURIER_SIGNATURE(transpose2, 1, 1, 2, 4, 2, 4)

/* Rank 3: negates an i64 tensor of any strides. */
void _catalyst_pyface_negate3(void *results, void *args) {
  desc3 *in = ARG(desc3, args, 0);
  desc3 *out = results;
  i64 a = in->sizes[0], b = in->sizes[1], c = in->sizes[2];
  const i64 *src = (const i64 *)in->aligned + in->offset;
  i64 *dst = allocate(a * b * c * (i64)sizeof(i64));
  for (i64 i = 0; i < a; ++i)
    for (i64 j = 0; j < b; ++j)
      for (i64 k = 0; k < c; ++k)
        dst[(i * b + j) * c + k] =
            -src[i * in->strides[0] + j * in->strides[1] + k * in->strides[2]];
  out->allocated = dst;
  out->aligned = dst;
  out->offset = 0;
  out->sizes[0] = a;
  out->sizes[1] = b;
  out->sizes[2] = c;
  out->strides[0] = b * c;
  out->strides[1] = c;
  out->strides[2] = 1;
}
COURIER_SIGNATURE(negate3, 1, 1, 3, 8, 3, 8)

/* Two results of different ranks: the sum (rank 0) and the prefix sums (rank 1). */
void _catalyst_pyface_stats(void *results, void *args) {
  desc1 *in = ARG(desc1, args, 0);
  struct {
    desc0 sum;
    desc1 prefix;
  } *out = results;
  i64 n = in->sizes[0];
  const double *src = (const double *)in->aligned + in->offset;
  double *sum = allocate(sizeof(double));
  double *prefix = allocate(n * (i64)sizeof(double));
  double total = 0;
  for (i64 i = 0; i < n; ++i) {
    total += src[i * in->strides[0]];
    prefix[i] = total;
  }
  *sum = total;
  out->sum.allocated = sum;
  out->sum.aligned = sum;
  out->sum.offset = 0;
  out->prefix.allocated = prefix;
  out->prefix.aligned = prefix;
  out->prefix.offset = 0;
  out->prefix.sizes[0] = n;
  out->prefix.strides[0] = 1;
}
COURIER_SIGNATURE(stats, 1, 2, 1, 8, 0, 8, 1, 8)

/* Returns its input unchanged, as bufferized code may: the host must copy it. */
void _catalyst_pyface_identity(void *results, void *args) {
  desc1 *in = ARG(desc1, args, 0);
  *(desc1 *)results = *in;
}
COURIER_SIGNATURE(identity, 1, 1, 1, 8, 1, 8)

static const i32 constant_values[4] = {7, 11, 13, 17};

/* Returns a constant global the way memref.get_global lowers: allocated is 0xdeadbeef. */
void _catalyst_pyface_constant(void *results, void *args) {
  desc1 *out = results;
  out->allocated = (void *)0xdeadbeef;
  out->aligned = (void *)constant_values;
  out->offset = 0;
  out->sizes[0] = 4;
  out->strides[0] = 1;
}
COURIER_SIGNATURE(constant, 0, 1, 1, 4)

/* Returns a [2, 3] f64 result laid out column-major (strides [1, 2]): element (i, j) is
 * 10 * i + j. */
void _catalyst_pyface_column_major(void *results, void *args) {
  desc2 *out = results;
  double *dst = allocate(6 * (i64)sizeof(double));
  for (i64 i = 0; i < 2; ++i)
    for (i64 j = 0; j < 3; ++j)
      dst[i + 2 * j] = 10.0 * (double)i + (double)j;
  out->allocated = dst;
  out->aligned = dst;
  out->offset = 0;
  out->sizes[0] = 2;
  out->sizes[1] = 3;
  out->strides[0] = 1;
  out->strides[1] = 2;
}
COURIER_SIGNATURE(column_major, 0, 1, 2, 8)

/* Calls into libm, which the object host must resolve. */
void _catalyst_pyface_exp(void *results, void *args) {
  desc1 *in = ARG(desc1, args, 0);
  desc1 *out = results;
  i64 n = in->sizes[0];
  const double *src = (const double *)in->aligned + in->offset;
  double *dst = allocate(n * (i64)sizeof(double));
  for (i64 i = 0; i < n; ++i)
    dst[i] = exp(src[i * in->strides[0]]);
  out->allocated = dst;
  out->aligned = dst;
  out->offset = 0;
  out->sizes[0] = n;
  out->strides[0] = 1;
}
COURIER_SIGNATURE(exp, 1, 1, 1, 8, 1, 8)

/* No arguments, no results: the shape of an async launch. */
void _catalyst_pyface_noop(void *results, void *args) {}
COURIER_SIGNATURE(noop, 0, 0)

/* Never returns: a hung kernel, which must not hold up the rest of the executor. */
void _catalyst_pyface_spin(void *results, void *args) {
  volatile int forever = 1;
  while (forever) {
  }
}
COURIER_SIGNATURE(spin, 0, 0)

/* Returns one buffer as both of its results; the host must not free it twice. */
void _catalyst_pyface_twice(void *results, void *args) {
  struct {
    desc1 a;
    desc1 b;
  } *out = results;
  double *dst = allocate(2 * (i64)sizeof(double));
  dst[0] = 1;
  dst[1] = 2;
  out->a.allocated = dst;
  out->a.aligned = dst;
  out->a.offset = 0;
  out->a.sizes[0] = 2;
  out->a.strides[0] = 1;
  out->b = out->a;
}
COURIER_SIGNATURE(twice, 0, 2, 1, 8, 1, 8)

/* Returns a descriptor with a negative size, which the host must reject. */
void _catalyst_pyface_negative(void *results, void *args) {
  desc1 *out = results;
  double *dst = allocate(sizeof(double));
  out->allocated = dst;
  out->aligned = dst;
  out->offset = 0;
  out->sizes[0] = -3;
  out->strides[0] = 1;
}
COURIER_SIGNATURE(negative, 0, 1, 1, 8)

/* Pads a contiguous 1-D f64 tensor with a zero on each side through a scratch buffer,
 * using memset, memcpy and free as lowered code does. */
void _catalyst_pyface_pad(void *results, void *args) {
  desc1 *in = ARG(desc1, args, 0);
  desc1 *out = results;
  i64 n = in->sizes[0];
  double *scratch = allocate(n * (i64)sizeof(double));
  memcpy(scratch, (const double *)in->aligned + in->offset, (size_t)n * sizeof(double));
  double *dst = allocate((n + 2) * (i64)sizeof(double));
  memset(dst, 0, (size_t)(n + 2) * sizeof(double));
  memcpy(dst + 1, scratch, (size_t)n * sizeof(double));
  free(scratch);
  out->allocated = dst;
  out->aligned = dst;
  out->offset = 0;
  out->sizes[0] = n + 2;
  out->strides[0] = 1;
}
COURIER_SIGNATURE(pad, 1, 1, 1, 8, 1, 8)

/* Exercises the allocator as a launch with a result arena sees it, on an f64 input of n
 * elements: a scratch buffer freed before the result is taken (x * 3), a calloc'd buffer
 * with its first element set, a buffer grown by realloc (0, 1, ..., n - 1), and every
 * other element of a [n, 2] matrix (x), a strided view the host must copy. */
void _catalyst_pyface_allocations(void *results, void *args) {
  desc1 *in = ARG(desc1, args, 0);
  desc1 *out = results;
  i64 n = in->sizes[0];
  const double *x = (const double *)in->aligned + in->offset;
  double *scratch = allocate(n * (i64)sizeof(double));
  for (i64 i = 0; i < n; ++i)
    scratch[i] = 3 * x[i * in->strides[0]];
  double sum = 0;
  for (i64 i = 0; i < n; ++i)
    sum += scratch[i];
  free(scratch);
  double *tripled = allocate(n * (i64)sizeof(double));
  for (i64 i = 0; i < n; ++i)
    tripled[i] = 3 * x[i * in->strides[0]] + 0 * sum;
  double *zeros = calloc(n > 0 ? (size_t)n : 1, sizeof(double));
  if (n > 0)
    zeros[0] = 1;
  double *grown = allocate(n / 2 * (i64)sizeof(double));
  for (i64 i = 0; i < n / 2; ++i)
    grown[i] = (double)i;
  grown = realloc(grown, (size_t)(n > 0 ? n : 1) * sizeof(double));
  for (i64 i = n / 2; i < n; ++i)
    grown[i] = (double)i;
  double *matrix = allocate(2 * n * (i64)sizeof(double));
  for (i64 i = 0; i < n; ++i) {
    matrix[2 * i] = x[i * in->strides[0]];
    matrix[2 * i + 1] = -1;
  }
  double *buffers[4] = {tripled, zeros, grown, matrix};
  for (int r = 0; r < 4; ++r) {
    out[r].allocated = buffers[r];
    out[r].aligned = buffers[r];
    out[r].offset = 0;
    out[r].sizes[0] = n;
    out[r].strides[0] = r == 3 ? 2 : 1;
  }
}
COURIER_SIGNATURE(allocations, 1, 4, 1, 8, 1, 8, 1, 8, 1, 8, 1, 8)
