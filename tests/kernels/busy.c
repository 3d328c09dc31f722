/* _catalyst_pyface_busy: busy for a while (a second or so), then returns: an async launch
 * that outlives a short deadline without running forever, so a host that cannot end a
 * kernel still sees it finish. */
#include "pyface.h"

void _catalyst_pyface_busy(void *results, void *args) {
  volatile i64 count = 0;
  while (count < 1000000000)
    count = count + 1;
}
COURIER_SIGNATURE(busy, 0, 0)
