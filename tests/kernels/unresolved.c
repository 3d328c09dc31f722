/* An object calling a function nobody defines: loading it must fail and name the symbol. */
#include "pyface.h"

void courier_missing_function(void);

void _catalyst_pyface_broken(void *results, void *args) { courier_missing_function(); }
COURIER_SIGNATURE(broken, 0, 0)
