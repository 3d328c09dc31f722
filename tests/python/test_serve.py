"""courier.serve.Client against real courier-serve processes (fixtures in conftest.py)."""

import contextlib
import shutil
import signal
import ssl
import tempfile
import threading
import time

import numpy as np
import pytest

from courier.serve import DTYPES, Client, ServeError
from programs import SPIN_FUNCTION

# Every dtype an entry can take, with the NumPy dtype its values are given as.
IDENTITY_DTYPES = [name for name in DTYPES if name != "bf16"]

IDENTITY_MLIR = "\n".join(
    "func.func public @same_{0}(%x: tensor<2x3x{0}>) -> tensor<2x3x{0}> {{\n"
    "  return %x : tensor<2x3x{0}>\n}}".format(name) for name in DTYPES)

ARITH_MLIR = """
func.func public @muladd_i32(%x: tensor<2x3xi32>, %y: tensor<2x3xi32>) -> tensor<2x3xi32> {
  %s = arith.addi %x, %y : tensor<2x3xi32>
  %p = arith.muli %s, %x : tensor<2x3xi32>
  return %p : tensor<2x3xi32>
}
func.func public @xor_i1(%x: tensor<5xi1>, %y: tensor<5xi1>) -> tensor<5xi1> {
  %r = arith.xori %x, %y : tensor<5xi1>
  return %r : tensor<5xi1>
}
func.func public @add_f16(%x: tensor<4xf16>, %y: tensor<4xf16>) -> tensor<4xf16> {
  %r = arith.addf %x, %y : tensor<4xf16>
  return %r : tensor<4xf16>
}
func.func public @square_f64(%x: f64) -> f64 {
  %r = arith.mulf %x, %x : f64
  return %r : f64
}
func.func public @twice_f32(%x: f32) -> f32 {
  %r = arith.addf %x, %x : f32
  return %r : f32
}
func.func public @square_i64(%x: tensor<i64>) -> tensor<i64> {
  %r = arith.muli %x, %x : tensor<i64>
  return %r : tensor<i64>
}
func.func public @mix(%a: tensor<3xi8>, %b: tensor<2x2xf64>) -> (tensor<3xi8>, tensor<2x2xf64>) {
  %a2 = arith.addi %a, %a : tensor<3xi8>
  %b2 = arith.mulf %b, %b : tensor<2x2xf64>
  return %a2, %b2 : tensor<3xi8>, tensor<2x2xf64>
}
func.func public @scale_rows(%m: tensor<3x4xf64>) -> tensor<3x4xf64> {
  %two = arith.constant dense<2.0> : tensor<3x4xf64>
  %r = arith.mulf %m, %two : tensor<3x4xf64>
  return %r : tensor<3x4xf64>
}
"""

BROKEN_MLIR = "module {\n  func.func @f() -> f32 {\n    return %y : f32\n  }\n}\n"


def sample(samples_dir, name):
    return (samples_dir / name / "app.mlir").read_text()


def scale(x):
    """What samples/02-local-kernel computes: 2x + 1."""
    return 2.0 * np.asarray(x, dtype=np.float64) + 1.0


@pytest.fixture
def client(serve):
    with Client(serve.url) as c:
        yield c


@pytest.fixture
def scale_module(client, samples_dir):
    client.submit("scale", sample(samples_dir, "02-local-kernel"))
    return "scale"


@pytest.fixture
def arith_module(client):
    client.submit("arith", ARITH_MLIR)
    return "arith"


@contextlib.contextmanager
def short_socket_dir():
    """A directory short enough for a unix socket's path (at most 107 bytes)."""
    path = tempfile.mkdtemp(prefix="courier-py-", dir="/tmp")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_fresh_server_is_healthy_ready_and_holds_no_module(client):
    assert client.health()["status"] == "ok"
    assert client.ready()["status"] == "ready"
    assert client.list() == []


def test_a_submitted_sample_is_listed_and_described_with_its_signature(client, samples_dir):
    created = client.submit("scale", sample(samples_dir, "02-local-kernel"), opt_level=1)
    assert created["name"] == "scale" and created["version"] == 1
    assert [m["name"] for m in client.list()] == ["scale"]
    described = client.describe("scale")
    assert described["options"]["optLevel"] == 1
    (main,) = described["entries"]
    assert main["name"] == "main"
    assert main["inputs"] == [{"dtype": "f64", "shape": [4], "type": "tensor<4xf64>"}]
    assert main["outputs"] == main["inputs"]


def test_invoke_by_frame_and_by_json_computes_the_kernel(client, scale_module):
    x = np.array([1.5, -2.0, 0.25, 1e300])
    (by_frame,) = client.invoke(scale_module, "main", x)
    assert by_frame.dtype == np.float64 and by_frame.shape == (4,)
    np.testing.assert_array_equal(by_frame, scale(x))
    assert by_frame.flags.writeable and by_frame.flags.owndata
    (by_json,) = client.invoke_json(scale_module, "main", x.tolist())
    np.testing.assert_array_equal(by_json, scale(x))
    (from_array,) = client.invoke_json(scale_module, "main", x)
    np.testing.assert_array_equal(from_array, scale(x))
    assert client.describe(scale_module)["calls"] == 3


def test_non_finite_floats_travel_both_ways(client, scale_module):
    x = np.array([np.nan, np.inf, -np.inf, -0.0])
    for invoke in (client.invoke, client.invoke_json):
        (y,) = invoke(scale_module, "main", x)
        np.testing.assert_array_equal(y, scale(x))
    (y,) = client.invoke_json(scale_module, "main", [float("nan"), 1.0, float("inf"), 2.0])
    np.testing.assert_array_equal(y, scale([np.nan, 1.0, np.inf, 2.0]))


def test_every_dtype_comes_back_bit_for_bit(client):
    client.submit("same", IDENTITY_MLIR)
    rng = np.random.default_rng(7)
    for name in IDENTITY_DTYPES:
        dtype = DTYPES[name]
        if dtype.kind == "b":
            x = rng.integers(0, 2, (2, 3)).astype(bool)
        elif dtype.kind == "f":
            x = rng.standard_normal((2, 3)).astype(dtype)
            x[0, 0] = np.finfo(dtype).max
        else:
            info = np.iinfo(dtype)
            x = rng.integers(info.min, info.max, (2, 3), dtype=dtype, endpoint=True)
            x[0, 0], x[0, 1] = info.min, info.max
        (y,) = client.invoke("same", "same_" + name, x)
        assert y.dtype == dtype and y.shape == (2, 3), name
        np.testing.assert_array_equal(y, x, err_msg=name)
        (z,) = client.invoke_json("same", "same_" + name, x)
        assert z.dtype == dtype, name
        np.testing.assert_array_equal(z, x, err_msg=name)


def test_arithmetic_of_several_dtypes_matches_numpy(client, arith_module):
    rng = np.random.default_rng(11)
    x = rng.integers(-1000, 1000, (2, 3), dtype=np.int32)
    y = rng.integers(-1000, 1000, (2, 3), dtype=np.int32)
    (r,) = client.invoke(arith_module, "muladd_i32", x, y)
    np.testing.assert_array_equal(r, (x + y) * x)

    p = np.array([True, False, True, False, True])
    q = np.array([True, True, False, False, True])
    (r,) = client.invoke(arith_module, "xor_i1", p, q)
    assert r.dtype == np.bool_
    np.testing.assert_array_equal(r, p ^ q)

    h = np.array([0.5, 1024.0, -3.25, 65000.0], dtype=np.float16)
    k = np.array([0.25, 1.0, 3.25, 1000.0], dtype=np.float16)
    (r,) = client.invoke(arith_module, "add_f16", h, k)
    assert r.dtype == np.float16
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(r, h + k)


def test_several_outputs_of_mixed_dtypes_each_get_an_aligned_array(client, arith_module):
    a = np.array([1, -2, 60], dtype=np.int8)
    b = np.array([[1.5, -2.0], [3.0, 0.5]])
    a2, b2 = client.invoke(arith_module, "mix", a, b)
    np.testing.assert_array_equal(a2, a + a)
    np.testing.assert_array_equal(b2, b * b)
    # The f64 output follows 3 bytes in the reply, and still has memory of its own.
    assert b2.flags.aligned and b2.flags.owndata
    c2, d2 = client.invoke_json(arith_module, "mix", a, b)
    np.testing.assert_array_equal(c2, a2)
    np.testing.assert_array_equal(d2, b2)


def test_strided_and_big_endian_inputs_are_packed_before_sending(client, scale_module,
                                                                arith_module):
    base = np.arange(8.0)
    (y,) = client.invoke(scale_module, "main", base[::2])
    np.testing.assert_array_equal(y, scale(base[::2]))
    (y,) = client.invoke(scale_module, "main", base[::-2])
    np.testing.assert_array_equal(y, scale(base[::-2]))
    big = np.array([1.0, 2.0, 3.0, 4.0], dtype=">f8")
    (y,) = client.invoke(scale_module, "main", big)
    np.testing.assert_array_equal(y, scale(big))
    m = np.arange(12.0).reshape(4, 3).T  # Fortran order: 3x4 with strides of its transpose
    assert not m.flags.c_contiguous
    (r,) = client.invoke(arith_module, "scale_rows", m)
    np.testing.assert_array_equal(r, 2 * m)


def test_rank_zero_inputs_take_python_and_numpy_scalars(client, arith_module):
    (r,) = client.invoke(arith_module, "square_f64", 1.5)
    assert r.shape == () and r == 2.25
    (r,) = client.invoke(arith_module, "square_f64", np.float64(-3.0))
    assert r == 9.0
    (r,) = client.invoke(arith_module, "twice_f32", 2.5, dtypes=["f32"])
    assert r.dtype == np.float32 and r == np.float32(5.0)
    (r,) = client.invoke(arith_module, "square_i64", 3037000499)
    assert r.dtype == np.int64 and r == 3037000499 ** 2
    (r,) = client.invoke_json(arith_module, "twice_f32", 0.75)
    assert r.dtype == np.float32 and r == np.float32(1.5)
    # A NumPy scalar keeps its dtype: never cast behind the caller's back.
    with pytest.raises(ServeError) as refused:
        client.invoke(arith_module, "twice_f32", np.float64(2.5))
    assert refused.value.code == "invalid_input" and refused.value.status == 400
    for invoke in (client.invoke, client.invoke_json):
        with pytest.raises(ServeError) as short:
            invoke(arith_module, "twice_f32", 2.5, 1.0, dtypes=["f32"])
        assert short.value.code == "invalid_input" and short.value.status is None
        assert "dtypes names 1 inputs, the call has 2" in short.value.message


def test_python_numbers_and_lists_take_the_entry_dtype_as_in_the_engine(client, serve,
                                                                         arith_module):
    # No dtypes=: the client types numbers and lists by the entry's signature.
    (r,) = client.invoke(arith_module, "twice_f32", 2.5)
    assert r.dtype == np.float32 and r == np.float32(5.0)
    (r,) = client.invoke(arith_module, "add_f16", [1.5, 2.0, 3.0, 4.0], [0.25, 0.5, 1, 2])
    assert r.dtype == np.float16
    np.testing.assert_array_equal(r, np.array([1.75, 2.5, 4.0, 6.0], dtype=np.float16))
    (r,) = client.invoke(arith_module, "muladd_i32", [[1, 2, 3], [4, 5, 6]], np.ones(
        (2, 3), dtype=np.int32))
    assert r.dtype == np.int32 and r.tolist() == [[2, 6, 12], [20, 30, 42]]
    # A number an integer input cannot hold is refused before sending, as the engine does.
    with pytest.raises(ServeError) as refused:
        client.invoke(arith_module, "muladd_i32", [[1.5, 2, 3], [4, 5, 6]], [[1] * 3] * 2)
    assert refused.value.code == "invalid_input"
    # Another client replaces the module with other dtypes: this one reads them again.
    with Client(serve.url) as other:
        other.replace(arith_module, ARITH_MLIR.replace(
            "@twice_f32(%x: f32) -> f32 {\n  %r = arith.addf %x, %x : f32\n  return %r : f32",
            "@twice_f32(%x: f64) -> f64 {\n  %r = arith.addf %x, %x : f64\n  return %r : f64"))
    (r,) = client.invoke(arith_module, "twice_f32", 2.5)
    assert r.dtype == np.float64 and r == 5.0


def test_bf16_goes_as_bit_patterns_as_in_the_engine(client):
    client.submit("halves", IDENTITY_MLIR)
    values = np.array([[1.0, 2.01, -3.5], [np.inf, 1e-3, 65504.0]], dtype=np.float32)
    # The server rounds JSON numbers to bf16: what it answers is the reference.
    (expected,) = client.invoke_json("halves", "same_bf16", values.tolist(), bf16_bits=False)
    assert expected.dtype == np.float32
    (json_bits,) = client.invoke_json("halves", "same_bf16", values.tolist())
    assert json_bits.dtype == np.uint16
    # uint16 bit patterns both ways by default, as the engine takes and returns them.
    (bits,) = client.invoke("halves", "same_bf16", values, dtypes=["bf16"])
    assert bits.dtype == np.uint16
    np.testing.assert_array_equal(bits, json_bits)
    np.testing.assert_array_equal((bits.astype(np.uint32) << 16).view(np.float32), expected)
    (again,) = client.invoke("halves", "same_bf16", bits)
    np.testing.assert_array_equal(again, bits)
    # Floats for a bf16 input round to it, typed by the entry's signature; float32 on asking.
    (rounded,) = client.invoke("halves", "same_bf16", values.tolist(), bf16_bits=False)
    np.testing.assert_array_equal(rounded, expected)
    with pytest.raises(ServeError) as refused:
        client.invoke("halves", "same_bf16", np.zeros((2, 3), dtype=np.int32),
                      dtypes=["bf16"])
    assert refused.value.code == "invalid_input" and refused.value.status is None


def test_an_input_courier_has_no_type_for_is_refused_before_sending(client, scale_module):
    with pytest.raises(ServeError) as refused:
        client.invoke(scale_module, "main", np.zeros(4, dtype=np.complex128))
    assert refused.value.code == "invalid_input" and refused.value.status is None
    with pytest.raises(ServeError) as refused:
        client.invoke(scale_module, "main", np.zeros(4), dtypes=["f32"])
    assert refused.value.code == "invalid_input" and refused.value.status is None
    assert client.describe(scale_module)["calls"] == 0


def test_replace_raises_the_version_and_serves_the_new_source(client, samples_dir,
                                                              scale_module):
    x = np.array([1.0, 2.0, 3.0, 4.0])
    thrice = sample(samples_dir, "02-local-kernel").replace("dense<2.0>", "dense<3.0>")
    replaced = client.replace(scale_module, thrice)
    assert replaced["version"] == 2 and replaced["reloads"] == 1
    (y,) = client.invoke(scale_module, "main", x)
    np.testing.assert_array_equal(y, 3.0 * x + 1.0)
    assert client.describe(scale_module)["version"] == 2


def test_a_replacement_that_does_not_compile_names_line_and_column(client, scale_module):
    with pytest.raises(ServeError) as failed:
        client.replace(scale_module, BROKEN_MLIR)
    error = failed.value
    assert error.code == "compile_failed" and error.status == 422
    assert str(error) == error.message
    (diagnostic,) = error.diagnostics
    line = BROKEN_MLIR.splitlines().index("    return %y : f32") + 1
    assert diagnostic["line"] == line
    assert diagnostic["column"] == BROKEN_MLIR.splitlines()[line - 1].index("%y") + 1
    assert diagnostic["severity"] == "error" and diagnostic["message"]
    # The old version keeps serving.
    described = client.describe(scale_module)
    assert described["version"] == 1 and described["failedReloads"] == 1
    (y,) = client.invoke(scale_module, "main", np.ones(4))
    np.testing.assert_array_equal(y, scale(np.ones(4)))


def test_wrong_inputs_unknown_names_and_taken_names_have_their_codes(client, samples_dir,
                                                                     scale_module):
    cases = [
        (lambda: client.invoke(scale_module, "main", np.ones(4, dtype=np.float32)),
         "invalid_input", 400),
        (lambda: client.invoke(scale_module, "main", np.ones(3)), "invalid_input", 400),
        (lambda: client.invoke(scale_module, "main", np.ones((2, 2))), "invalid_input", 400),
        (lambda: client.invoke(scale_module, "main"), "invalid_input", 400),
        (lambda: client.invoke_json(scale_module, "main", [1, 2, 3]), "invalid_input", 400),
        (lambda: client.invoke("nope", "main", np.ones(4)), "unknown_module", 404),
        (lambda: client.describe("nope"), "unknown_module", 404),
        (lambda: client.invoke(scale_module, "nope", np.ones(4)), "unknown_entry", 404),
        (lambda: client.submit(scale_module, sample(samples_dir, "02-local-kernel")),
         "module_exists", 409),
        (lambda: client.submit("bad name!", "module {}"), "bad_request", 400),
    ]
    for call, code, status in cases:
        with pytest.raises(ServeError) as failed:
            call()
        assert (failed.value.code, failed.value.status) == (code, status), failed.value
        assert failed.value.diagnostics == []
    # Every refusal left the module serving, on the connection the client kept.
    (y,) = client.invoke(scale_module, "main", np.zeros(4))
    np.testing.assert_array_equal(y, scale(np.zeros(4)))


def test_a_deleted_module_is_gone(client, scale_module):
    client.delete(scale_module)
    assert client.list() == []
    with pytest.raises(ServeError) as gone:
        client.describe(scale_module)
    assert gone.value.code == "unknown_module"
    with pytest.raises(ServeError) as gone:
        client.delete(scale_module)
    assert gone.value.code == "unknown_module"


def test_a_token_protected_server_serves_only_clients_with_the_token(start_serve, tmp_path,
                                                                     samples_dir):
    token = "py-" + "7" * 40
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    server = start_serve("--token-file", token_file)
    for wrong in (None, "not-" + token):
        with Client(server.url, token=wrong) as stranger:
            for call in (stranger.health, stranger.list):
                with pytest.raises(ServeError) as refused:
                    call()
                assert (refused.value.code, refused.value.status) == ("unauthorized", 401)
    with Client(server.url, token=token) as owner:
        owner.submit("scale", sample(samples_dir, "02-local-kernel"))
        (y,) = owner.invoke("scale", "main", np.arange(4.0))
        np.testing.assert_array_equal(y, scale(np.arange(4.0)))


def test_a_unix_socket_server_serves_the_client(start_serve, samples_dir):
    with short_socket_dir() as directory:
        server = start_serve(listen="unix:" + directory + "/serve.sock")
        assert server.url == "unix:" + directory + "/serve.sock"
        with Client(server.url) as client:
            client.submit("scale", sample(samples_dir, "02-local-kernel"))
            x = np.linspace(-1.0, 1.0, 4)
            (y,) = client.invoke("scale", "main", x)
            np.testing.assert_array_equal(y, scale(x))
            (y,) = client.invoke_json("scale", "main", x)
            np.testing.assert_array_equal(y, scale(x))


def test_a_module_runs_its_kernel_on_a_named_executor(client, executor, samples_dir):
    described = client.submit("remote", sample(samples_dir, "02-local-kernel"),
                              executor=executor.address)
    assert described["options"]["executor"] == executor.address
    x = np.array([4.0, 3.0, 2.0, 1.0])
    (y,) = client.invoke("remote", "main", x)
    np.testing.assert_array_equal(y, scale(x))


def test_threads_sharing_one_client_each_get_their_own_results(client, arith_module):
    threads_count, calls = 8, 25
    failures = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for i in range(calls):
                x = rng.integers(-100, 100, (2, 3), dtype=np.int32)
                y = rng.integers(-100, 100, (2, 3), dtype=np.int32)
                if i % 5 == 4:
                    (r,) = client.invoke_json(arith_module, "muladd_i32", x, y)
                else:
                    (r,) = client.invoke(arith_module, "muladd_i32", x, y)
                if not np.array_equal(r, (x + y) * x):
                    failures.append("thread {} call {}: {} for {}, {}".format(
                        seed, i, r.tolist(), x.tolist(), y.tolist()))
        except Exception as e:  # reported below, with the thread that saw it
            failures.append("thread {}: {!r}".format(seed, e))

    workers = [threading.Thread(target=work, args=(seed,)) for seed in range(threads_count)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert not any(worker.is_alive() for worker in workers), "a thread did not finish"
    assert failures == []
    assert client.describe(arith_module)["calls"] == threads_count * calls


def _restart_keeps_the_client_working(start_serve, listen, samples_dir):
    first = start_serve(listen=listen)
    with Client(first.url) as client:
        client.submit("scale", sample(samples_dir, "02-local-kernel"))
        assert client.describe("scale")["version"] == 1
        # The server closes the client's kept-alive connection as it exits.
        assert first.stop() == 0
        with pytest.raises(ServeError) as down:
            client.health()
        assert down.value.code == "unavailable" and down.value.status is None
        second = start_serve(listen=first.listen)
        assert client.health()["modules"] == 0
        idle = list(client._idle)
        assert second.stop() == 0
        third = start_serve(listen=first.listen)
        # A POST, which is never sent twice, on the connection the second server closed.
        client.submit("scale", sample(samples_dir, "02-local-kernel"))
        assert idle and all(conn.sock is None for conn in idle)
        (y,) = client.invoke("scale", "main", np.arange(4.0))
        np.testing.assert_array_equal(y, scale(np.arange(4.0)))
        return third


def test_the_client_reconnects_to_a_server_restarted_on_its_unix_socket(start_serve,
                                                                        samples_dir):
    with short_socket_dir() as directory:
        _restart_keeps_the_client_working(start_serve, "unix:" + directory + "/serve.sock",
                                          samples_dir)


def test_the_client_reconnects_to_a_server_restarted_on_its_port(start_serve, samples_dir):
    _restart_keeps_the_client_working(start_serve, "127.0.0.1:0", samples_dir)


def test_bad_addresses_are_refused_when_the_client_is_made():
    for url in ("127.0.0.1:8080", "ftp://h:1", "unix:relative.sock", "http://"):
        with pytest.raises(ValueError):
            Client(url)


def test_the_readme_example_runs_as_written(serve, run_readme_example, monkeypatch):
    monkeypatch.setenv("COURIER_SERVE_URL", serve.url)
    run_readme_example("Talking to courier-serve: `courier.serve`")
    with Client(serve.url) as client:
        assert client.list() == []




def test_an_https_server_serves_a_client_trusting_its_ca(start_serve, certificates,
                                                         samples_dir):
    server = start_serve("--tls-cert", certificates.server_cert,
                         "--tls-key", certificates.server_key)
    assert server.url.startswith("https://127.0.0.1:")
    trusting = ssl.create_default_context(cafile=str(certificates.ca_cert))
    with Client(server.url, context=trusting) as client:
        client.submit("scale", sample(samples_dir, "02-local-kernel"))
        x = np.array([0.5, 1.5, 2.5, 3.5])
        (y,) = client.invoke("scale", "main", x)
        np.testing.assert_array_equal(y, scale(x))
    with Client(server.url) as stranger:  # the system's CAs do not know the test CA
        with pytest.raises(ServeError) as refused:
            stranger.health()
        assert refused.value.code == "tls_failed" and refused.value.status is None
    plain = "http://" + server.url[len("https://"):]
    with Client(plain) as confused:
        with pytest.raises(ServeError) as lost:
            confused.health()
        assert lost.value.code == "executor_lost" and "https://" in lost.value.message


def test_no_reply_within_the_timeout_is_deadline_exceeded(start_serve):
    server = start_serve("--invoke-timeout-ms", "3000")
    with Client(server.url) as client:
        client.submit("spin", SPIN_FUNCTION)
    with Client(server.url, timeout=0.3) as impatient:
        with pytest.raises(ServeError) as late:
            impatient.invoke("spin", "spin", 1)
        assert late.value.code == "deadline_exceeded" and late.value.status is None
        # The stalled connection was dropped: the next request gets a fresh one.
        assert impatient.health()["status"] == "ok"


def test_a_post_whose_connection_dies_before_the_reply_is_not_sent_again(start_serve):
    # The server dies while the call spins: the request was sent whole, and no reply came.
    server = start_serve("--invoke-timeout-ms", "0")
    outcome = []
    with Client(server.url) as client:
        client.submit("spin", SPIN_FUNCTION)

        def call():
            try:
                outcome.append(client.invoke("spin", "spin", 1))
            except ServeError as e:
                outcome.append(e)

        caller = threading.Thread(target=call)
        caller.start()
        deadline = time.monotonic() + 30
        while "\ncourier_serve_requests_in_flight 1" not in client.metrics():
            assert time.monotonic() < deadline, "the invoke never started"
            time.sleep(0.01)
        assert server.kill() == -signal.SIGKILL
        caller.join(30)
        assert not caller.is_alive()
    (error,) = outcome
    assert isinstance(error, ServeError), error
    assert error.code == "executor_lost" and error.status is None
    assert "https://" not in error.message  # it answered plaintext on that connection
