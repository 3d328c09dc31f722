"""Courier's kernels from Python against NumPy on the same inputs, in one process and one run.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 \\
        PYTHONPATH=build/python /usr/bin/python3 bench/python/kernel_bench.py [--quick] [--cpu-time]
        [--kernel-threads N] [--only NAME[,NAME...]]

The programs are those of courier-kernel-bench (bench/inputs/kernels/*.mlir), compiled with the
disk cache off and called as `module.main(...)`; NumPy computes the same thing the way a NumPy
user writes it (`a @ b`, `a + b`, `x.sum(axis=1)`, softmax from `np.exp` and row maxima and
sums). Each round times a sample of NumPy calls and then one of Courier calls (interleaved, so
load from elsewhere falls on both); the figures are the median and best over rounds. OpenBLAS
must run on one thread for the comparison to be single-threaded: OPENBLAS_NUM_THREADS=1, with
--kernel-threads 1 for Courier's kernels (courier.Engine(kernel_threads=1); by default they use
every CPU the process may run on). For a comparison on every core, OPENBLAS_NUM_THREADS=N with
--kernel-threads N. --only runs the named kernels alone (matmul-1024,conv2d...).

--cpu-time times each side by the calling thread's CPU time (time.thread_time) instead of the
wall clock: on a machine other work keeps busy, the time this thread was not running is not
counted for either side. Only for single-threaded comparisons: work a kernel hands to other
threads is not counted.
"""

import ctypes
import ctypes.util
import os
import pathlib
import statistics
import sys
import time

import numpy as np

import courier

KERNELS = pathlib.Path(__file__).resolve().parent.parent / "inputs" / "kernels"


def openblas_core():
    """The OpenBLAS kernel NumPy's BLAS uses, by threadpoolctl where it is installed, else
    asked of the BLAS library NumPy loaded."""
    try:
        import threadpoolctl
    except ImportError:
        threadpoolctl = None
    if threadpoolctl is not None:
        info = threadpoolctl.threadpool_info()
        return "threadpoolctl: " + "; ".join(
            f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')} "
            f"{i.get('num_threads')} thread(s)" for i in info)
    for name in ("libblas.so.3", ctypes.util.find_library("openblas") or "libopenblas.so.0"):
        try:
            blas = ctypes.CDLL(name)
            blas.openblas_get_corename.restype = ctypes.c_char_p
            blas.openblas_get_num_threads.restype = ctypes.c_int
        except (OSError, AttributeError):
            continue
        return (f"threadpoolctl is not installed; {name} says core "
                f"{blas.openblas_get_corename().decode()}, "
                f"{blas.openblas_get_num_threads()} thread(s)")
    return "threadpoolctl is not installed, and no OpenBLAS answered"


CLOCK = time.thread_time if "--cpu-time" in sys.argv[1:] else time.perf_counter


def option(name):
    """The value after `name` on the command line, or None."""
    args = sys.argv[1:]
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None


def sample(call, args, calls):
    start = CLOCK()
    for _ in range(calls):
        call(*args)
    return (CLOCK() - start) / calls


def compare(sides, args, rounds, sample_s):
    """Seconds per call of each side, per round, the sides taking turns within a round."""
    calls = []
    for call in sides:
        call(*args)
        once = sample(call, args, 1)
        calls.append(max(1, int(sample_s / once + 0.999)))
    times = [[] for _ in sides]
    for _ in range(rounds):
        for i, call in enumerate(sides):
            times[i].append(sample(call, args, calls[i]))
    return times


def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main():
    quick = "--quick" in sys.argv[1:]
    rounds, sample_s = (1, 0.0) if quick else (9, 0.03)
    for variable in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if variable in os.environ:
            print(f"note: {variable}={os.environ[variable]} is set and chooses OpenBLAS's kernel")
    print(f"NumPy {np.__version__}; OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}; "
          f"{openblas_core()}")
    print(f"each figure: the median and best of {rounds} interleaved rounds, each round at least "
          f"{sample_s * 1e3:.0f} ms of calls per side, by "
          f"{'this thread CPU time' if CLOCK is time.thread_time else 'the wall clock'}")
    threads = option("--kernel-threads")
    only = option("--only")
    print(f"Courier kernel threads: {threads or 'every CPU this process may run on'} "
          f"(of {len(os.sched_getaffinity(0))})")
    engine = (courier.Engine(disk_cache=False, kernel_threads=int(threads)) if threads
              else courier.Engine(disk_cache=False))
    rng = np.random.default_rng(1)

    def uniform(*shape):
        return rng.uniform(-1, 1, size=shape).astype(np.float32)

    rows, cols, n = 4096, 1024, 4 << 20
    x = uniform(rows, cols)
    cases = []
    for name, (m, nn, k) in (("matmul-256", (256, 256, 256)), ("matmul-512", (512, 512, 512)),
                             ("matmul-1024", (1024, 1024, 1024)),
                             ("matmul-301x257x129", (301, 257, 129)),
                             ("matmul-dynamic", (512, 512, 512))):
        cases.append((name, f"{m}x{nn}x{k}", np.matmul, (uniform(m, k), uniform(k, nn)),
                      "GFLOP/s", 2.0 * m * nn * k, 2e-6 * k))
    # i8 x i8 -> i32 against OpenBLAS's sgemm of the same values as f32 (converted before the
    # clock starts): every sum of 1024 products of bytes is an integer below 2^24, exact in f32.
    ints = [rng.integers(-128, 128, size=(1024, 1024), dtype=np.int8) for _ in range(2)]
    floats = [x.astype(np.float32) for x in ints]
    cases.append(("matmul-i8-1024", "1024x1024x1024", lambda a, b: np.matmul(*floats),
                  tuple(ints), "GOP/s", 2.0 * 1024**3, 0))
    cases.append(("add", "4M", np.add, (uniform(n), uniform(n)), "GB/s", 12.0 * n, 0))
    cases.append(("rowsum", f"{rows}x{cols}", lambda a: a.sum(axis=1), (x,), "GB/s",
                  4.0 * rows * cols + 4.0 * rows, 1e-4))
    cases.append(("softmax", f"{rows}x{cols}", softmax, (x,), "GB/s", 8.0 * rows * cols, 1e-5))

    if only:
        cases = [case for case in cases if case[0] in only.split(",")]
    for name, size, reference, args, unit, amount, tolerance in cases:
        start = time.perf_counter()
        module = engine.compile_file(str(KERNELS / f"{name}.mlir"), name)
        compile_ms = (time.perf_counter() - start) * 1e3
        want, got = reference(*args), module.main(*args)
        if not np.allclose(got, want, rtol=tolerance, atol=tolerance):
            sys.exit(f"kernel_bench: {name}: Courier's result differs from NumPy's "
                     f"(largest difference {np.max(np.abs(got - want))})")
        numpy_s, courier_s = compare([reference, module.main], args, rounds, sample_s)
        nm, cm = statistics.median(numpy_s), statistics.median(courier_s)
        scale = 1e9
        print(f"{name:20s} {size:12s} courier {cm * 1e3:8.3f} ms ({amount / cm / scale:6.1f} {unit};"
              f" best {amount / min(courier_s) / scale:6.1f})  numpy {nm * 1e3:8.3f} ms "
              f"({amount / nm / scale:6.1f}; best {amount / min(numpy_s) / scale:6.1f})  "
              f"courier/numpy {nm / cm:.2f}x  (compile {compile_ms:.0f} ms)")


if __name__ == "__main__":
    main()
