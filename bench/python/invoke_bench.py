"""A call from Python against the same call from C++, in one process and one run.

    PYTHONPATH=build/python /usr/bin/python3 bench/python/invoke_bench.py [--quick]

For a 4-element entry and for a 16 MiB array in and out, each round times `module.main(x)`
from Python and then Module::invoke from C++ (courier._courier._time_invoke: the same
inputs read once, the GIL released, the same entry), interleaved, and prints the medians
over rounds: the microseconds Python adds per call, and the ratio of the two times for
16 MiB. Both go through the engine's in-process path (host-only programs), so what differs
is the Python side alone: argument reading, the GIL, and the arrays made of the results.
"""

import functools
import statistics
import sys
import time

import numpy as np

import courier
from courier import _courier

SMALL = """module @small {
  func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = arith.addf %x, %x : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}"""

ELEMENTS_16MIB = 16 * 1024 * 1024 // 4
LARGE = f"""module @large {{
  func.func public @main(%x: tensor<{ELEMENTS_16MIB}xf32>) -> tensor<{ELEMENTS_16MIB}xf32> {{
    %y = arith.addf %x, %x : tensor<{ELEMENTS_16MIB}xf32>
    return %y : tensor<{ELEMENTS_16MIB}xf32>
  }}
}}"""


def time_python(call, x, iterations):
    start = time.perf_counter()
    for _ in range(iterations):
        call(x)
    return time.perf_counter() - start


def compare(label, call, x, rounds, iterations, entry=None):
    """Median seconds per call from Python (`call(x)`) and from C++ (the Entry `entry`, by
    default `call` itself), over interleaved rounds."""
    entry = entry or call
    python, cpp = [], []
    call(x)  # warm: first-call costs are neither side's
    for _ in range(rounds):
        python.append(time_python(call, x, iterations) / iterations)
        cpp.append(_courier._time_invoke(entry, (x,), iterations) / iterations)
    p, c = statistics.median(python), statistics.median(cpp)
    print(f"{label}: python {p * 1e6:.2f} us/call, c++ {c * 1e6:.2f} us/call "
          f"(medians of {rounds} rounds of {iterations})")
    return p, c


def main():
    quick = "--quick" in sys.argv[1:]
    engine = courier.Engine(disk_cache=False)
    small = engine.compile(SMALL, "small")
    large = engine.compile(LARGE, "large")

    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(small.main(x), x + x)
    rounds, iterations = (5, 2000) if quick else (21, 20000)
    p, c = compare("4 x f32, module.main(x)", small.main, x, rounds, iterations)
    print(f"python adds {(p - c) * 1e6:.2f} us per call (target <= 2 us)")
    by_name = functools.partial(small.invoke, "main")
    p, c = compare("4 x f32, module.invoke(\"main\", x)", by_name, x, rounds, iterations,
                   small.main)
    print(f"python adds {(p - c) * 1e6:.2f} us per call by name (target <= 2 us)")

    big = np.random.default_rng(0).uniform(-1, 1, ELEMENTS_16MIB).astype(np.float32)
    y = large.main(big)
    np.testing.assert_array_equal(y, big + big)
    assert y.base is not None and not y.flags.owndata, "the result was copied"
    p, c = compare("16 MiB f32 in and out", large.main, big, 3 if quick else 15, 3 if quick else 10)
    print(f"ratio python/c++ 16MiB {p / c:.3f}x (target <= 1.10x)")


if __name__ == "__main__":
    main()
