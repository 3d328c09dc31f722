"""What the Python tests share besides fixtures: MLIR programs the C++ tests share too (from
tests/programs/) and a thread that shows whether a call let go of the GIL."""

import threading
from pathlib import Path

_PROGRAMS = Path(__file__).resolve().parent.parent / "programs"

#: A public @spin(%n: i64) -> i64 that never returns: for deadlines and ended workers.
SPIN_FUNCTION = (_PROGRAMS / "spin.mlir").read_text()

#: @main launches a 256 x 256 f32 matmul, past the size whose outer loop runs parallel.
MATMUL_256 = (_PROGRAMS / "matmul-256.mlir").read_text()


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
