"""The courier extension module against the real engine: NumPy arrays in and out of host-only
and target-module programs, errors as exceptions, threads, hot reload, isolated modules and
a real courier-executor."""

import gc
import os
import pickle
import signal
import socket
import threading
import time

import numpy as np
import pytest

import courier
from programs import SPIN_FUNCTION, Ticker

# The element types the tests sweep, as MLIR spells them, with their NumPy dtypes.
DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "i1": np.bool_}
SHAPES = [(), (3,), (2, 3), (2, 3, 2)]


def tensor_type(dtype, shape):
    dims = "".join(f"{d}x" for d in shape)
    return f"tensor<{dims}{dtype}>"


def twice_op(dtype):
    """The op doubling a value: x + x, or for i1 x xor true (negation)."""
    return {"f32": "arith.addf", "f64": "arith.addf"}.get(dtype, "arith.addi")


def expected_twice(dtype, x):
    return np.logical_not(x) if dtype == "i1" else x + x


def program_for(dtype, shape, on_target):
    """A program whose @twice doubles (or for i1 negates) a tensor, whose @pair returns the
    double and the product of two tensors, and whose @scalar doubles a scalar; with
    `on_target` @twice runs as a kernel of a target module on the in-process executor."""
    t = tensor_type(dtype, shape)
    if dtype == "i1":
        body = f"""%true = arith.constant dense<true> : {t}
    %y = arith.xori %x, %true : {t}"""
        pair = f"""%s = arith.xori %x, %x2 : {t}
    %p = arith.andi %x, %x2 : {t}"""
        scalar = "%one = arith.constant true\n    %r = arith.xori %v, %one : i1"
    else:
        body = f"%y = {twice_op(dtype)} %x, %x : {t}"
        mul = "arith.mulf" if dtype.startswith("f") else "arith.muli"
        pair = f"""%s = {twice_op(dtype)} %x, %x : {t}
    %p = {mul} %x, %x2 : {t}"""
        scalar = f"%r = {twice_op(dtype)} %v, %v : {dtype}"
    if on_target:
        twice = f"""func.func public @twice(%x: {t}) -> {t} {{
    %y = catalyst.launch_kernel @dev::@twice(%x) : ({t}) -> {t}
    return %y : {t}
  }}
  module @dev attributes {{catalyst.target = {{}}, catalyst.dispatch = {{address = "local"}}}} {{
    func.func public @twice(%x: {t}) -> {t} {{
    {body}
    return %y : {t}
    }}
  }}"""
    else:
        twice = f"""func.func public @twice(%x: {t}) -> {t} {{
    {body}
    return %y : {t}
  }}"""
    return f"""module @m {{
  {twice}
  func.func public @pair(%x: {t}, %x2: {t}) -> ({t}, {t}) {{
    {pair}
    return %s, %p : {t}, {t}
  }}
  func.func public @scalar(%v: {dtype}) -> {dtype} {{
    {scalar}
    return %r : {dtype}
  }}
}}"""


def sample_values(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    if dtype == "i1":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.startswith("f"):
        return rng.uniform(-100, 100, size=shape).astype(DTYPES[dtype])
    return rng.integers(-1000, 1000, size=shape).astype(DTYPES[dtype])


@pytest.fixture
def free_port():
    """A loopback port bound for the test's length that nothing listens on: connecting to it
    is refused."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


@pytest.fixture(scope="module")
def engine():
    return courier.Engine(disk_cache=False)


@pytest.mark.parametrize("on_target", [False, True], ids=["host", "target"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"rank{len(s)}")
def test_arrays_in_and_out(engine, dtype, shape, on_target):
    module = engine.compile(program_for(dtype, shape, on_target), f"m_{dtype}")
    x = sample_values(dtype, shape, 1)
    y = module.twice(x)
    assert isinstance(y, np.ndarray)
    assert y.dtype == DTYPES[dtype] and y.shape == shape
    np.testing.assert_array_equal(y, expected_twice(dtype, x))

    x2 = sample_values(dtype, shape, 2)
    s, p = module.pair(x, x2)
    if dtype == "i1":
        np.testing.assert_array_equal(s, np.logical_xor(x, x2))
        np.testing.assert_array_equal(p, np.logical_and(x, x2))
    else:
        np.testing.assert_array_equal(s, x + x)
        np.testing.assert_array_equal(p, x * x2)

    v = sample_values(dtype, (), 3)
    r = module.scalar(v)
    assert r.shape == () and r.dtype == DTYPES[dtype]
    assert r == expected_twice(dtype, v)


def test_strided_and_foreign_order_inputs(engine):
    module = engine.compile(program_for("f64", (2, 3), False), "strided")
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    views = {
        "rows and columns skipped": base[::2, ::2],
        "transposed": np.arange(6.0).reshape(3, 2).T,
        "big-endian": np.arange(6.0).reshape(2, 3).astype(">f8"),
        "unaligned": np.frombuffer(b"\0" + np.arange(6.0).tobytes(), dtype=np.float64,
                                   offset=1).reshape(2, 3),
    }
    for what, view in views.items():
        assert not (view.flags.c_contiguous and view.flags.aligned
                    and view.dtype.isnative), what
        np.testing.assert_array_equal(module.twice(view), view * 2, err_msg=what)
    # The caller's arrays are read, never written.
    np.testing.assert_array_equal(base, np.arange(24, dtype=np.float64).reshape(4, 6))


def test_python_numbers_and_lists(engine):
    module = engine.compile(program_for("i32", (3,), False), "numbers")
    np.testing.assert_array_equal(module.twice([1, 2, 3]), np.array([2, 4, 6], np.int32))
    assert module.scalar(21) == 42
    with pytest.raises(courier.InvokeError) as caught:
        module.scalar(1.5)
    assert caught.value.kind == "invalid_input"
    assert "input 0 of 'scalar' must be i32" in str(caught.value)
    with pytest.raises(courier.InvokeError) as caught:
        module.twice([1, 2, 2**40])
    assert caught.value.kind == "invalid_input"


def test_results_own_their_bytes(engine):
    module = engine.compile(program_for("f32", (1024,), False), "owned")
    x = np.ones(1024, np.float32)
    y = module.twice(x)
    assert not y.flags.owndata and y.base is not None  # the tensor's buffer, not a copy
    y += 1  # writable, the caller's to change
    del module
    gc.collect()
    np.testing.assert_array_equal(y, np.full(1024, 3, np.float32))


LARGE_ADD = """module @app {
  func.func public @main(%a: tensor<1048576xf32>, %b: tensor<1048576xf32>) -> tensor<1048576xf32> {
    %r = catalyst.launch_kernel @dev::@add(%a, %b)
        : (tensor<1048576xf32>, tensor<1048576xf32>) -> tensor<1048576xf32>
    return %r : tensor<1048576xf32>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @add(%a: tensor<1048576xf32>, %b: tensor<1048576xf32>) -> tensor<1048576xf32> {
      %r = arith.addf %a, %b : tensor<1048576xf32>
      return %r : tensor<1048576xf32>
    }
  }
}"""


def test_results_are_written_into_out_in_place(engine):
    module = engine.compile(LARGE_ADD, "large_add")
    a = np.arange(1 << 20, dtype=np.float32)
    b = np.full(1 << 20, 0.5, np.float32)
    out = np.empty(1 << 20, np.float32)
    address = out.ctypes.data
    assert module.main(a, b, out=out) is out
    assert out.ctypes.data == address
    np.testing.assert_array_equal(out, a + b)
    assert module.invoke("main", a, b, out=(out,)) is out
    np.testing.assert_array_equal(out, a + b)
    # An input may be the output: the kernel has read it before its result is written.
    module.main(a, b, out=a)
    np.testing.assert_array_equal(a, np.arange(1 << 20, dtype=np.float32) + 0.5)


def test_results_of_two_calls_never_alias(engine):
    module = engine.compile(LARGE_ADD, "large_add")
    a = np.arange(1 << 20, dtype=np.float32)
    first = module.main(a, a)
    second = module.main(a, np.ones(1 << 20, np.float32))
    assert first.ctypes.data != second.ctypes.data
    np.testing.assert_array_equal(first, a + a)
    np.testing.assert_array_equal(second, a + 1)
    # Results dropped at once give their buffers to the next call, which still computes.
    for _ in range(5):
        np.testing.assert_array_equal(module.main(a, a), a + a)


@pytest.mark.parametrize(
    "out, says",
    [
        (np.empty(1 << 20, np.float64), "output 0 of 'main' must be an array of float32"),
        (np.empty(5, np.float32), "output 0 of 'main' must have shape tensor<1048576xf32>"),
        (np.empty(2 << 20, np.float32)[::2], "output 0 of 'main' must be C-contiguous"),
        ([0.0], "output 0 of 'main' must be a NumPy array, got float"),
        ((None, None), "out= of 'main' has 2 arrays, the entry has 1 results"),
    ],
    ids=["dtype", "shape", "strided", "list", "count"],
)
def test_unfit_out_is_refused_naming_it(engine, out, says):
    module = engine.compile(LARGE_ADD, "large_add")
    a = np.zeros(1 << 20, np.float32)
    with pytest.raises(courier.InvokeError) as caught:
        module.main(a, a, out=out)
    assert caught.value.kind == "invalid_input"
    assert says in str(caught.value)


def test_read_only_out_is_refused(engine):
    module = engine.compile(LARGE_ADD, "large_add")
    a = np.zeros(1 << 20, np.float32)
    out = np.empty(1 << 20, np.float32)
    out.flags.writeable = False
    with pytest.raises(courier.InvokeError, match="output 0 of 'main' is read-only"):
        module.invoke("main", a, a, out=out)


def test_entries_and_signatures(engine):
    module = engine.compile(program_for("f64", (2, 3), True), "sig")
    assert module.name == "sig"
    names = [e.name for e in module.entries]
    assert names == ["twice", "pair", "scalar"]
    twice = module.entries[0]
    assert [str(s) for s in twice.inputs] == ["tensor<2x3xf64>"]
    assert twice.inputs[0].dtype == "f64" and twice.inputs[0].shape == (2, 3)
    assert twice.inputs[0].numpy_dtype == np.float64 and not twice.inputs[0].is_scalar
    assert module.entries[2].inputs[0].is_scalar
    assert repr(module.entries[1]) == (
        "<courier.Entry pair(tensor<2x3xf64>, tensor<2x3xf64>) -> "
        "(tensor<2x3xf64>, tensor<2x3xf64>)>")
    assert module.compile_times["targets_compiled"] == 1
    assert module.worker is None
    np.testing.assert_array_equal(module.invoke("twice", np.ones((2, 3))), np.full((2, 3), 2.0))


def test_compile_error_carries_diagnostics(engine):
    text = "module {\n  func.func @f() -> f32 {\n    return %y : f32\n  }\n}"
    with pytest.raises(courier.CompileError) as caught:
        engine.compile(text, "broken")
    error = caught.value
    assert isinstance(error, courier.Error)
    assert len(error.diagnostics) == 1
    d = error.diagnostics[0]
    assert (d.file, d.line, d.column, d.severity) == ("broken", 3, 12, "error")
    assert d.message == "use of undeclared SSA value name"
    assert d.source_line == "    return %y : f32"
    assert str(error).startswith("broken:3:12: error: use of undeclared SSA value name")


def test_compile_file(engine, samples_dir, tmp_path):
    module = engine.compile_file(str(samples_dir / "02-local-kernel" / "app.mlir"))
    assert module.name == "app"
    x = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(module.main(x), 2 * x + 1)
    bad = tmp_path / "bad.mlir"
    bad.write_text("module {\n  arith.bogus\n}\n")
    with pytest.raises(courier.CompileError) as caught:
        engine.compile_file(str(bad))
    assert caught.value.diagnostics[0].file == str(bad)
    assert caught.value.diagnostics[0].line == 2
    with pytest.raises(courier.CompileError, match="nothing-here.mlir"):
        engine.compile_file(str(tmp_path / "nothing-here.mlir"))


def test_bad_arguments_raise_the_engines_message(engine):
    module = engine.compile(program_for("f64", (4,), True), "args")
    cases = [
        ((np.ones(4, np.float32),), "input 0 of 'twice' must be f64, got f32"),
        ((np.ones(3),), "input 0 of 'twice' must have shape tensor<4xf64>, got dimension 0 "
                        "of size 3"),
        ((np.ones((2, 2)),), "input 0 of 'twice' must have rank 1, got rank 2"),
        ((), "'twice' takes 1 input"),
        ((np.ones(4, np.complex128),), "input 0 of 'twice' must be tensor<4xf64>, got a NumPy "
                                       "array of complex128"),
    ]
    for args, message in cases:
        with pytest.raises(courier.InvokeError) as caught:
            module.twice(*args)
        assert caught.value.kind == "invalid_input", args
        assert message in str(caught.value)
        assert caught.value.message == str(caught.value)
    with pytest.raises(courier.InvokeError) as caught:
        module.invoke("nope", np.ones(4))
    assert caught.value.kind == "unknown_entry"
    assert "has no entry 'nope' (entries: twice, pair, scalar)" in str(caught.value)
    with pytest.raises(AttributeError):
        module.nope  # noqa: B018 (the attribute lookup is the test)
    with pytest.raises(ValueError, match="opt_level must be 0 to 3"):
        courier.Engine(opt_level=7)
    with pytest.raises(ValueError, match="isolation must be"):
        courier.Engine(isolation="container")


def twice_from_threads(module, threads, calls, size):
    """`calls` calls of module.twice from each of `threads` threads at once, each result
    checked; the failures, with the seed of the thread that saw each."""
    failures = []

    def work(seed):
        try:
            for i in range(calls):
                x = np.arange(size, dtype=np.int64) * (seed * 1000 + i)
                np.testing.assert_array_equal(module.twice(x), 2 * x)
        except Exception as e:  # returned, with the thread's seed
            failures.append((seed, e))

    started = [threading.Thread(target=work, args=(s,)) for s in range(threads)]
    for t in started:
        t.start()
    for t in started:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in started)
    return failures


def test_threads_invoke_one_module_at_once(engine):
    module = engine.compile(program_for("i64", (64,), True), "threads")
    assert twice_from_threads(module, threads=8, calls=200, size=64) == []


def test_hot_reload(engine, tmp_path):
    reloadable = courier.ReloadableModule(engine, "hot")
    assert reloadable.version == 0 and reloadable.current is None
    with pytest.raises(courier.InvokeError) as caught:
        reloadable.invoke("twice", np.ones(4))
    assert caught.value.kind == "unknown_module"
    assert reloadable.reload(program_for("f64", (4,), True)) == 1
    x = np.array([1.0, -2.0, 3.5, 0.0])
    np.testing.assert_array_equal(reloadable.twice(x), 2 * x)
    held = reloadable.current  # a version a caller still holds keeps serving

    tripled = program_for("f64", (4,), True).replace(
        "%y = arith.addf %x, %x : tensor<4xf64>",
        "%x2 = arith.addf %x, %x : tensor<4xf64>\n    %y = arith.addf %x2, %x : tensor<4xf64>")
    path = tmp_path / "hot.mlir"
    path.write_text(tripled)
    assert reloadable.reload_file(str(path)) == 2
    np.testing.assert_array_equal(reloadable.invoke("twice", x), 3 * x)
    np.testing.assert_array_equal(held.twice(x), 2 * x)

    with pytest.raises(courier.CompileError) as caught:
        reloadable.reload("module {\n  arith.bogus\n}", source_name="edit.mlir")
    assert caught.value.diagnostics[0].file == "edit.mlir"
    assert reloadable.version == 2
    np.testing.assert_array_equal(reloadable.twice(x), 3 * x)


CRASH_AND_SPIN = """module @hostile {
  func.func public @crash() -> i32 {
    %p = llvm.mlir.zero : !llvm.ptr
    %v = llvm.load volatile %p : !llvm.ptr -> i32
    return %v : i32
  }
  """ + SPIN_FUNCTION + """
  func.func public @twice(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = arith.addf %x, %x : tensor<4xf64>
    return %y : tensor<4xf64>
  }
}"""


def test_isolated_module_contains_crashes_and_spins():
    engine = courier.Engine(disk_cache=False, isolation="process")
    assert engine.isolation == "process"
    module = engine.compile(CRASH_AND_SPIN, "hostile")
    assert module.worker["pid"] > 0
    with pytest.raises(courier.InvokeError) as caught:
        module.crash()
    assert caught.value.kind == "kernel_crashed"
    assert "SIGSEGV" in str(caught.value)
    x = np.arange(4.0)
    np.testing.assert_array_equal(module.twice(x), 2 * x)  # a fresh worker
    assert module.worker["crashes"] == 1

    # A spinning call ends at its timeout; the GIL is free meanwhile.
    with Ticker() as ticker:
        before = ticker.ticks
        with pytest.raises(courier.InvokeError) as caught:
            module.invoke("spin", 1, timeout=1.0)
        during = ticker.ticks - before
    assert caught.value.kind == "deadline_exceeded"
    assert during > 5
    # A timeout under a millisecond is one, not none.
    with pytest.raises(courier.InvokeError) as caught:
        module.invoke("spin", 1, timeout=0.0001)
    assert caught.value.kind == "deadline_exceeded"
    np.testing.assert_array_equal(module.twice(x), 2 * x)

    module.terminate()
    with pytest.raises(courier.InvokeError) as caught:
        module.twice(x)
    assert caught.value.kind == "unknown_module"


def test_module_on_a_real_executor(executor):
    engine = courier.Engine(disk_cache=False, executor=executor.address)
    module = engine.compile(program_for("f32", (2, 3), True), "remote")
    x = sample_values("f32", (2, 3), 7)
    np.testing.assert_array_equal(module.twice(x), x + x)


def shm_launches(executor):
    """Launches the executor ran over same-host channels, from its /metrics."""
    import urllib.request
    with urllib.request.urlopen(f"http://{executor.address}/metrics", timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith("courier_shm_launches_total "):
                return float(line.split()[1])
    raise AssertionError("no courier_shm_launches_total in the executor's metrics")


def test_shared_memory_on_a_loopback_executor(executor):
    """On a loopback TCP address the channel is taken by default ("auto") and when asked for
    ("on"); "off" keeps HTTP, and the results are the same every way."""
    x = sample_values("f32", (2, 3), 5)
    before = shm_launches(executor)
    engine = courier.Engine(disk_cache=False, executor=executor.address, shared_memory="off")
    np.testing.assert_array_equal(engine.compile(program_for("f32", (2, 3), True)).twice(x), x + x)
    assert shm_launches(executor) == before
    for taken, mode in enumerate(("auto", "on"), start=1):
        engine = courier.Engine(disk_cache=False, executor=executor.address, shared_memory=mode)
        np.testing.assert_array_equal(engine.compile(program_for("f32", (2, 3), True)).twice(x),
                                      x + x)
        assert shm_launches(executor) == before + taken
    with pytest.raises(ValueError, match="shared_memory must be 'auto', 'on' or 'off', got 'yes'"):
        courier.Engine(shared_memory="yes")


def test_unreachable_executor_is_an_engine_error(free_port):
    engine = courier.Engine(disk_cache=False, executor=f"127.0.0.1:{free_port}",
                            connect_timeout=2.0)
    with pytest.raises(courier.EngineError) as caught:
        engine.compile(program_for("f32", (3,), True), "unreachable")
    assert caught.value.kind == "executor_unavailable"
    assert caught.value.cause == "unavailable"  # the executor client's own code
    assert not isinstance(caught.value, courier.InvokeError)


def test_readme_engine_example(run_readme_example):
    """python/README.md's example of the engine runs and prints what its comments say."""
    run_readme_example("The engine")


IDENTITIES = {name: f"func.func public @same_{name}(%x: tensor<3x{name}>) -> tensor<3x{name}> "
                    f"{{ return %x : tensor<3x{name}> }}"
              for name in ("f16", "bf16", "i8", "i16", "ui8", "ui16", "ui32", "ui64")}


def test_every_other_element_type(engine):
    module = engine.compile("module {\n" + "\n".join(IDENTITIES.values()) + "\n}", "types")
    numpy_types = {"f16": np.float16, "i8": np.int8, "i16": np.int16, "ui8": np.uint8,
                   "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64}
    for name, numpy_type in numpy_types.items():
        info = np.finfo(numpy_type) if name == "f16" else np.iinfo(numpy_type)
        x = np.array([info.min, 0, info.max], numpy_type)
        y = getattr(module, "same_" + name)(x)
        assert y.dtype == numpy_type, name
        np.testing.assert_array_equal(y, x, err_msg=name)
        assert module.entries[list(IDENTITIES).index(name)].inputs[0].numpy_dtype == numpy_type
    # bf16 travels as uint16 bit patterns; Python numbers round to the nearest bf16, ties to
    # even: 1 + 2^-8 lies halfway between 1 (0x3f80) and 1 + 2^-7 (0x3f81) and goes to the
    # even 0x3f80; 1 + 3 * 2^-8 halfway between 0x3f81 and 0x3f82 goes to 0x3f82.
    bits = np.array([0x3F80, 0x4000, 0xFFC0], np.uint16)
    np.testing.assert_array_equal(module.same_bf16(bits), bits)
    rounded = module.same_bf16([1.0, 1 + 2**-8, 1 + 3 * 2**-8])
    assert rounded.dtype == np.uint16
    assert [hex(b) for b in rounded] == ["0x3f80", "0x3f80", "0x3f82"]
    with pytest.raises(courier.InvokeError, match="input 0 of 'same_ui8' must be ui8"):
        module.same_ui8([1, 2, 256])


def test_inputs_the_engine_must_refuse_are_not_copied_first(engine):
    module = engine.compile(program_for("f64", (4,), False), "refusals")
    # Eight TiB if it were copied: refused by its rank before anything is allocated.
    huge = np.broadcast_to(np.float64(1), (1 << 20, 1 << 20))
    with pytest.raises(courier.InvokeError, match="must have rank 1, got rank 2"):
        module.twice(huge)
    # A surplus argument is refused by the count alone, whatever it is.
    with pytest.raises(courier.InvokeError, match="'twice' takes 1 input"):
        module.twice(np.ones(4), [[1], [2, 3]])


def test_bools_are_zeros_and_ones(engine):
    module = engine.compile(program_for("i1", (4,), True), "bools")
    raw = np.array([0, 1, 2, 255], np.uint8).view(np.bool_)
    np.testing.assert_array_equal(module.twice(raw), [True, False, False, False])
    same = engine.compile("func.func public @same(%x: tensor<4xi1>) -> tensor<4xi1> "
                          "{ return %x : tensor<4xi1> }", "same_bools")
    assert same.same(raw).view(np.uint8).tolist() == [0, 1, 1, 1]


def test_python_conveniences(engine, samples_dir):
    module = engine.compile_file(samples_dir / "02-local-kernel" / "app.mlir")  # a Path
    x = np.arange(4.0)
    np.testing.assert_array_equal(module.invoke("main", x, timeout=30), 2 * x + 1)
    with pytest.raises(TypeError, match="timeout must be a number of seconds"):
        module.invoke("main", x, timeout="soon")
    with pytest.raises(TypeError):
        module.main(x, timeout=1)  # an entry takes its inputs alone
    assert callable(module.main) and hasattr(module.main, "__call__")
    np.testing.assert_array_equal(module.main.__call__(x), 2 * x + 1)
    orphan = courier.Entry.__new__(courier.Entry)
    with pytest.raises(TypeError, match="belongs to no module"):
        orphan(x)
    with pytest.raises(TypeError):
        type("Sub", (courier.Entry,), {})


def test_compile_errors_cross_processes(engine):
    with pytest.raises(courier.CompileError) as caught:
        engine.compile("module {\n  arith.bogus\n}", "pickled")
    again = pickle.loads(pickle.dumps(caught.value))
    assert type(again) is courier.CompileError and str(again) == str(caught.value)
    assert [(d.file, d.line, d.column) for d in again.diagnostics] == [("pickled", 2, 3)]


def test_dropping_a_module_lets_other_threads_run(start_executor):
    """Unloading a module closes its sessions with the executor: without the GIL, so a
    stalled executor stalls only the thread that let the module go."""
    executor = start_executor()
    engine = courier.Engine(disk_cache=False, executor=executor.address, request_timeout=2.0)
    module = engine.compile(program_for("f32", (3,), True), "dropped")
    np.testing.assert_array_equal(module.twice(np.ones(3, np.float32)), np.full(3, 2.0))
    os.kill(executor.pid, signal.SIGSTOP)
    try:
        with Ticker() as ticker:
            started = time.monotonic()
            del module
            gc.collect()
            waited = time.monotonic() - started
            during = ticker.ticks
    finally:
        os.kill(executor.pid, signal.SIGCONT)
    # The teardown waited for the stopped executor (its request timeout), and the ticker ran
    # all the while.
    assert waited > 1.0
    assert during > 20


def many_kernels(count):
    """A program whose main chains `count` kernels, each in a target module of its own: a
    compile that takes a while (each module is compiled at O2)."""
    t = "tensor<16xf64>"
    lines = ["module @many {", f"  func.func public @main(%x: {t}) -> {t} {{"]
    previous = "%x"
    for i in range(count):
        lines.append(f"    %y{i} = catalyst.launch_kernel @k{i}::@f({previous}) : ({t}) -> {t}")
        previous = f"%y{i}"
    lines += [f"    return {previous} : {t}", "  }"]
    for i in range(count):
        lines += [f"  module @k{i} attributes {{catalyst.target = {{}}, "
                  "catalyst.dispatch = {address = \"local\"}} {",
                  f"    func.func public @f(%x: {t}) -> {t} {{",
                  f"      %c = arith.constant dense<{i}.0> : {t}",
                  f"      %r = arith.addf %x, %c : {t}",
                  f"      return %r : {t}", "    }", "  }"]
    return "\n".join(lines + ["}"])




def pool_workers(marker):
    """This process's courier-module-worker children whose command line holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                arguments = cmdline.read().split(b"\0")
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and marker in arguments:
            found.append(int(entry))
    return found


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def test_the_pool_refills_once_a_load_is_done_not_during_it():
    # A pool of its own (engines share a pool by worker settings): its workers are told
    # apart by their --memory-mib.
    engine = courier.Engine(disk_cache=False, isolation="process", warm_workers=1,
                            worker_memory_mib=4099)
    marker = b"4099"
    deadline = time.monotonic() + 60
    # Warm: started, and done with its warm-up (its CPU time no longer moves).
    while len(pool_workers(marker)) != 1 or cpu_ticks(pool_workers(marker)[0]) != (
            time.sleep(0.3) or cpu_ticks(pool_workers(marker)[0])):
        assert time.monotonic() < deadline, "the pool never had its warm worker"
    warm = pool_workers(marker)[0]  # The worker the load takes.
    loaded = []
    slow = many_kernels(24)
    loader = threading.Thread(target=lambda: loaded.append(engine.compile(slow, "slow")))
    loader.start()
    # The warm worker's CPU time when a second worker was first seen. The refill may come
    # before the loader thread ends: the load is done a moment before compile() returns.
    seen_at = None
    while loader.is_alive():
        if seen_at is None and len(pool_workers(marker)) > 1:
            seen_at = cpu_ticks(warm)
        time.sleep(0.005)
    loader.join()
    assert loaded, "the 24-module program did not load"
    # While the warm worker compiled and set up the module, no other started beside it: one
    # seen at all found the compile's CPU time spent (but for a tick's rounding).
    assert seen_at is None or seen_at >= cpu_ticks(warm) - 1
    while len(pool_workers(marker)) != 2:
        assert time.monotonic() < deadline, "the pool did not refill after the load"
        time.sleep(0.01)
    np.testing.assert_array_equal(loaded[0].main(np.zeros(16)), np.full(16, sum(range(24))))


OLD_WORKER = """#!/usr/bin/python3
# Says it is ready as a worker of another Courier would ({version}), then waits to be ended.
import os, time
ready = bytes([64]) + (1).to_bytes(8, "little")
version = {version!r}
if version is not None:
    ready += len(version).to_bytes(8, "little") + version
os.write(3, ready)
time.sleep(60)
"""


@pytest.mark.parametrize("version, says", [(None, "an older Courier"),
                                           (b"9.9.9", "Courier 9.9.9")])
def test_a_worker_of_another_build_is_refused(tmp_path, version, says):
    fake = tmp_path / "courier-module-worker"
    fake.write_text(OLD_WORKER.format(version=version))
    fake.chmod(0o755)
    engine = courier.Engine(disk_cache=False, isolation="process", worker_program=fake,
                            warm_workers=0)
    with pytest.raises(courier.EngineError) as caught:
        engine.compile(program_for("f64", (4,), False), "old")
    assert caught.value.kind == "worker_unavailable"
    assert f"{fake} is a worker of {says}, not of this Courier ({courier.__version__})" \
        in str(caught.value)


def test_a_module_in_two_workers_runs_two_calls_at_once():
    # A pool of its own, told apart by --memory-mib (see the refill test).
    engine = courier.Engine(disk_cache=False, isolation="process", workers_per_module=2,
                            worker_memory_mib=4101)
    module = engine.compile(CRASH_AND_SPIN, "pair")
    marker = b"4101"
    outcomes = []
    # Quiet first: the warm worker the pool starts after the load has done its warm-up.
    deadline = time.monotonic() + 30
    while True:
        start = {pid: cpu_ticks(pid) for pid in pool_workers(marker)}
        time.sleep(0.3)
        if all(cpu_ticks(pid) == ticks for pid, ticks in start.items()):
            break
        assert time.monotonic() < deadline, "the pool's workers never went idle"

    def spin():
        try:
            module.invoke("spin", 1, timeout=20)
        except courier.InvokeError as e:
            outcomes.append(e.kind)

    callers = [threading.Thread(target=spin) for _ in range(2)]
    for caller in callers:
        caller.start()
    # Both calls run at once: two of the pool's workers burn CPU together (with one worker
    # per module the second call would wait for the first, which spins for 20 s).
    deadline = time.monotonic() + 15
    while True:
        workers = pool_workers(marker)
        start = {pid: cpu_ticks(pid) for pid in workers}
        time.sleep(0.3)
        burning = [pid for pid in workers if cpu_ticks(pid) > start[pid]]
        if len(burning) >= 2:
            break
        assert time.monotonic() < deadline, f"only {burning} of {workers} ran"
    module.terminate()
    for caller in callers:
        caller.join(30)
    assert outcomes == ["unknown_module", "unknown_module"]
    with pytest.raises(ValueError, match="workers_per_module must be 1 to 64"):
        courier.Engine(workers_per_module=0)


def test_calls_spread_over_a_module_s_workers_are_all_right():
    engine = courier.Engine(disk_cache=False, isolation="process", workers_per_module=3)
    module = engine.compile(program_for("i64", (16,), True), "spread")
    assert twice_from_threads(module, threads=6, calls=100, size=16) == []
    assert module.worker["crashes"] == 0 and module.worker["pid"] > 0


def test_a_module_s_own_empty_setup_runs_in_its_worker():
    """An empty setup() compiles at O2 to a lone return at the start of its code: calling it
    must not read before it (the sanitized build's function-type check once did)."""
    text = """module @own {
  func.func public @setup() {
    return
  }
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = arith.addf %x, %x : tensor<4xf64>
    return %y : tensor<4xf64>
  }
}"""
    for isolation in ("process", "in_process"):
        for attempt in range(2):
            engine = courier.Engine(disk_cache=False, isolation=isolation)
            module = engine.compile(text, f"own_{isolation}_{attempt}")
            np.testing.assert_array_equal(module.main(np.ones(4)), np.full(4, 2.0))
