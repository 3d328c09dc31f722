// A public @spin(%n: i64) -> i64 that never returns: for deadlines and ended workers. Shared by
// the C++ tests (tests/support/SharedPrograms.h.in) and the Python tests (python/programs.py).
func.func public @spin(%n: i64) -> i64 {
  %r = scf.while (%i = %n) : (i64) -> i64 {
    %true = arith.constant true
    scf.condition(%true) %i : i64
  } do {
  ^bb0(%i: i64):
    %one = arith.constant 1 : i64
    %j = arith.addi %i, %one : i64
    scf.yield %j : i64
  }
  return %r : i64
}
