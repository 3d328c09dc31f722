/* An object calling a libc function outside the object host's allow-list: loading it must
 * fail and name the symbol. */
#include "pyface.h"

void _catalyst_pyface_peek(void *results, void *args) {
  desc0 *out = results;
  out->allocated = getenv("HOME");
  out->aligned = out->allocated;
  out->offset = 0;
}
COURIER_SIGNATURE(peek, 0, 1, 0, 1)
