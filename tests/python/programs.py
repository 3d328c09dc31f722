"""What the Python tests share besides fixtures: a spinning function's MLIR and a thread that
shows whether a call let go of the GIL."""

import threading

#: A public @spin(%n: i64) -> i64 that never returns: for deadlines and ended workers.
SPIN_FUNCTION = """func.func public @spin(%n: i64) -> i64 {
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
  }"""


class Ticker:
    """A thread that counts a tick every 10 ms while the `with` block runs: ticks counted
    while a call ran show the call let go of the GIL."""

    def __init__(self):
        self.ticks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self):
        while not self._stop.is_set():
            self.ticks += 1
            self._stop.wait(0.01)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exception):
        self._stop.set()
        self._thread.join()
        return False
