"""courier.Engine(kernel_threads=...): a parallel matmul gives the same bits on one thread as
on two, and a team size out of range is refused."""

import numpy as np
import pytest

import courier
from programs import MATMUL_256


def run_with(threads, a, b, tmp_path):
    engine = courier.Engine(kernel_threads=threads, cache_dir=str(tmp_path / str(threads)))
    out = engine.compile(MATMUL_256).main(a, b)
    return np.asarray(out[0] if isinstance(out, (list, tuple)) else out)


def test_a_parallel_matmul_gives_the_bits_of_one_thread(tmp_path):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((256, 256), dtype=np.float32)
    b = rng.standard_normal((256, 256), dtype=np.float32)
    serial = run_with(1, a, b, tmp_path)
    parallel = run_with(2, a, b, tmp_path)
    np.testing.assert_allclose(serial, a @ b, rtol=1e-4, atol=1e-3)
    assert serial.tobytes() == parallel.tobytes()


def test_a_team_size_out_of_range_is_refused():
    with pytest.raises(ValueError, match="kernel_threads"):
        courier.Engine(kernel_threads=5000)
