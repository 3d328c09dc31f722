"""Every op of the math and complex dialects compiles to code that loads and computes what
NumPy (or Python's math module) computes, in host code and in a kernel on the in-process
executor, on f32 and f64 (f16 and bf16 are computed in f32 and rounded back), at a size
vectors do not divide."""

import math

import numpy as np
import pytest

import courier

N = 37
RNG = np.random.default_rng(7)


def spread(low, high):
    return RNG.uniform(low, high, N)


def nasty():
    """Finite values of every magnitude, both signs, zeros, infinities, NaN, subnormals."""
    values = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-310, -1e-310, 1e-40, 1.0, -2.5,
                       3e38, -3e38, 1e300, 65504.0, 7.0])
    return np.resize(values, N)


def ulps_rtol(dtype, ulps):
    return ulps * np.finfo(dtype).eps


# name: (arguments' generators, reference on float64, ulps of f32 allowed).
UNARY = {
    "absf": (lambda: spread(-9, 9), np.abs, 0),
    "acos": (lambda: spread(-1, 1), np.arccos, 2),
    "acosh": (lambda: spread(1, 50), np.arccosh, 2),
    "asin": (lambda: spread(-1, 1), np.arcsin, 2),
    "asinh": (lambda: spread(-50, 50), np.arcsinh, 2),
    "atan": (lambda: spread(-50, 50), np.arctan, 2),
    "atanh": (lambda: spread(-0.99, 0.99), np.arctanh, 2),
    "cbrt": (lambda: spread(-1000, 1000), np.cbrt, 2),
    "ceil": (lambda: spread(-9, 9), np.ceil, 0),
    "cos": (lambda: spread(-9, 9), np.cos, 2),
    "cosh": (lambda: spread(-9, 9), np.cosh, 2),
    "erf": (lambda: spread(-3, 3), np.vectorize(math.erf), 4),
    "erfc": (lambda: spread(-3, 3), np.vectorize(math.erfc), 4),
    "exp": (lambda: spread(-20, 20), np.exp, 3),
    "exp2": (lambda: spread(-20, 20), np.exp2, 2),
    "expm1": (lambda: spread(-2, 2), np.expm1, 3),
    "floor": (lambda: spread(-9, 9), np.floor, 0),
    "log": (lambda: spread(0.01, 100), np.log, 3),
    "log10": (lambda: spread(0.01, 100), np.log10, 2),
    "log1p": (lambda: spread(-0.9, 100), np.log1p, 3),
    "log2": (lambda: spread(0.01, 100), np.log2, 3),
    "round": (lambda: np.resize([0.5, 1.5, 2.5, -0.5, -2.5, 0.49, 7.7], N),
              lambda x: np.trunc(x + np.copysign(0.5, x)), 0),
    "roundeven": (lambda: np.resize([0.5, 1.5, 2.5, -0.5, -2.5, 0.49, 7.7], N), np.rint, 0),
    "rsqrt": (lambda: spread(0.01, 100), lambda x: 1 / np.sqrt(x), 2),
    "sin": (lambda: spread(-9, 9), np.sin, 2),
    "sinh": (lambda: spread(-9, 9), np.sinh, 2),
    "sqrt": (lambda: spread(0, 100), np.sqrt, 1),
    "tan": (lambda: spread(-1.5, 1.5), np.tan, 2),
    "tanh": (lambda: spread(-5, 5), np.tanh, 4),
    "trunc": (lambda: spread(-9, 9), np.trunc, 0),
}
BINARY = {
    "atan2": (lambda: spread(-9, 9), lambda: spread(-9, 9), np.arctan2, 3),
    "copysign": (lambda: spread(-9, 9), lambda: spread(-9, 9), np.copysign, 0),
    "powf": (lambda: spread(0.1, 10), lambda: spread(-4, 4), np.power, 3),
}
PREDICATES = {
    "isfinite": np.isfinite,
    "isinf": np.isinf,
    "isnan": np.isnan,
}


def isnormal(x):
    return np.isfinite(x) & (np.abs(x) >= np.finfo(x.dtype).tiny)


PREDICATES["isnormal"] = isnormal

INT_UNARY = {
    "absi": np.abs,
    "ctlz": lambda x: np.array([32 - int(v).bit_length() if v >= 0 else 0 for v in x], np.int32),
    "cttz": lambda x: np.array([32 if v == 0 else ((int(v) & -int(v)).bit_length() - 1)
                                for v in x], np.int32),
    "ctpop": lambda x: np.array([bin(int(v) & 0xFFFFFFFF).count("1") for v in x], np.int32),
}


def functions(ft):
    """The body of a module with one function per op on tensor<Nx`ft`>."""
    t = f"tensor<{N}x{ft}>"
    i = f"tensor<{N}xi32>"
    b = f"tensor<{N}xi1>"
    out = []
    for name in UNARY:
        out.append(f"func.func public @{name}_op(%x: {t}) -> {t} {{\n"
                   f"  %r = math.{name} %x : {t}\n  return %r : {t}\n}}")
    for name in BINARY:
        out.append(f"func.func public @{name}_op(%x: {t}, %y: {t}) -> {t} {{\n"
                   f"  %r = math.{name} %x, %y : {t}\n  return %r : {t}\n}}")
    for name in PREDICATES:
        out.append(f"func.func public @{name}_op(%x: {t}) -> {b} {{\n"
                   f"  %r = math.{name} %x : {t}\n  return %r : {b}\n}}")
    out.append(f"func.func public @fma_op(%x: {t}, %y: {t}, %z: {t}) -> {t} {{\n"
               f"  %r = math.fma %x, %y, %z : {t}\n  return %r : {t}\n}}")
    out.append(f"func.func public @clampf_op(%x: {t}, %lo: {t}, %hi: {t}) -> {t} {{\n"
               f"  %r = math.clampf %x to [%lo, %hi] : {t}\n  return %r : {t}\n}}")
    out.append(f"func.func public @fpowi_op(%x: {t}, %n: {i}) -> {t} {{\n"
               f"  %r = math.fpowi %x, %n : {t}, {i}\n  return %r : {t}\n}}")
    out.append(f"func.func public @sincos_op(%x: {t}) -> ({t}, {t}) {{\n"
               f"  %s, %c = math.sincos %x : {t}\n  return %s, %c : {t}, {t}\n}}")
    out.append(f"func.func public @ipowi_op(%x: {i}, %n: {i}) -> {i} {{\n"
               f"  %r = math.ipowi %x, %n : {i}\n  return %r : {i}\n}}")
    for name in INT_UNARY:
        out.append(f"func.func public @{name}_op(%x: {i}) -> {i} {{\n"
                   f"  %r = math.{name} %x : {i}\n  return %r : {i}\n}}")
    return out


def signature(function):
    header = function.split("{")[0]
    name = header.split("@")[1].split("(")[0]
    params = header.split("(", 1)[1].split(") ->")[0]
    results = header.split("->")[1].strip()
    return name, params, results


def program(ft, on_target, funcs=None):
    funcs = funcs or functions(ft)
    if not on_target:
        return "module @math_host {\n" + "\n".join(funcs) + "\n}"
    launches = []
    for function in funcs:
        name, params, results = signature(function)
        names = ", ".join(p.split(":")[0].strip() for p in params.split(", "))
        types = ", ".join(p.split(":")[1].strip() for p in params.split(", "))
        launches.append(
            f"func.func public @{name}({params}) -> {results} {{\n"
            f"  %r:{results.count('tensor')} = catalyst.launch_kernel @dev::@{name}({names})"
            f" : ({types}) -> {results}\n"
            f"  return %r#0{', %r#1' if results.count('tensor') == 2 else ''}"
            f" : {results.strip('()')}\n}}")
    return ("module @math_kernels {\n" + "\n".join(launches) +
            "\nmodule @dev attributes {catalyst.target = {}, "
            "catalyst.dispatch = {address = \"local\"}} {\n" + "\n".join(funcs) + "\n}\n}")


@pytest.fixture(scope="module")
def engine():
    return courier.Engine(disk_cache=False)


MODES = [False, True]
MODE_IDS = ["host", "kernel"]


@pytest.mark.parametrize("on_target", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("ft", ["f32", "f64"])
def test_every_math_op_computes_what_numpy_does(engine, ft, on_target):
    dtype = {"f32": np.float32, "f64": np.float64}[ft]
    module = engine.compile(program(ft, on_target), f"math_{ft}")

    def check(name, got, want, ulps):
        # libm's f64 functions are within an ulp or two of the exact result, as NumPy's are.
        rtol = ulps_rtol(dtype, ulps if dtype == np.float32 else max(ulps, 2)) or 0
        np.testing.assert_allclose(got, want, rtol=rtol, atol=np.finfo(dtype).tiny,
                                   err_msg=f"math.{name} on {ft}")

    for name, (make, reference, ulps) in UNARY.items():
        x = make().astype(dtype)
        check(name, getattr(module, name + "_op")(x), reference(x.astype(np.float64)), ulps)
    for name, (make_x, make_y, reference, ulps) in BINARY.items():
        x, y = make_x().astype(dtype), make_y().astype(dtype)
        check(name, getattr(module, name + "_op")(x, y),
              reference(x.astype(np.float64), y.astype(np.float64)), ulps)
    for name, reference in PREDICATES.items():
        with np.errstate(over="ignore"):
            x = nasty().astype(dtype)
        np.testing.assert_array_equal(getattr(module, name + "_op")(x), reference(x),
                                      err_msg=f"math.{name} on {ft}")
    x, y, z = (spread(-9, 9).astype(dtype) for _ in range(3))
    check("fma", module.fma_op(x, y, z), x.astype(np.float64) * y + z, 1)
    lo, hi = np.full(N, -2, dtype), np.full(N, 3, dtype)
    # As math.clampf's documentation defines it: maxf(minf(value, min), max).
    np.testing.assert_array_equal(module.clampf_op(x, lo, hi), np.maximum(np.minimum(x, lo), hi))
    n = RNG.integers(-6, 7, N).astype(np.int32)
    base = spread(0.5, 2).astype(dtype) * np.where(RNG.random(N) < 0.5, -1, 1).astype(dtype)
    check("fpowi", module.fpowi_op(base, n), base.astype(np.float64) ** n.astype(np.float64), 8)
    x = spread(-9, 9).astype(dtype)
    s, c = module.sincos_op(x)
    check("sincos", s, np.sin(x.astype(np.float64)), 2)
    check("sincos", c, np.cos(x.astype(np.float64)), 2)

    x = RNG.integers(-12, 13, N).astype(np.int32)
    n = RNG.integers(0, 9, N).astype(np.int32)
    np.testing.assert_array_equal(module.ipowi_op(x, n), (x.astype(np.int64) ** n).astype(np.int32))
    x = np.resize(np.array([0, 1, -1, 2, 12, 1 << 30, -(1 << 31), 0x7FFFFFFF, 96], np.int32), N)
    for name, reference in INT_UNARY.items():
        np.testing.assert_array_equal(getattr(module, name + "_op")(x), reference(x),
                                      err_msg=f"math.{name}")


@pytest.mark.parametrize("on_target", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("ft", ["f16", "bf16"])
def test_every_math_function_compiles_and_loads_on_narrow_floats(engine, ft, on_target):
    """f16 and bf16 math goes through f32: each function computes what NumPy does on the
    widened values, to the narrow type's precision."""
    funcs = [f for f in functions(ft) if "xi32>" not in f.split("{")[0]]
    module = engine.compile(program(ft, on_target, funcs), f"math_{ft}")
    if ft == "bf16":
        return  # bf16 crosses the API as bit patterns: compiling and loading is the point
    for name, (make, reference, ulps) in UNARY.items():
        x = make().astype(np.float16)
        # The exact result rounded to f16, within an f16 ulp (overflow to inf included).
        with np.errstate(over="ignore"):
            want = reference(x.astype(np.float64)).astype(np.float16).astype(np.float64)
        np.testing.assert_allclose(getattr(module, name + "_op")(x).astype(np.float64), want,
                                   rtol=2 ** -10, atol=2 ** -24, err_msg=f"math.{name} on f16")


# Complex ops, on complex<f32> built from two f32 tensors inside a linalg.generic (complex
# ops take scalars only): name -> (NumPy reference on complex128, or None where NumPy has
# none and only compiling and running is checked).
COMPLEX_UNARY = {"conj": np.conj, "cos": np.cos, "exp": np.exp, "expm1": np.expm1,
                 "log": np.log, "log1p": np.log1p, "neg": np.negative,
                 "rsqrt": lambda z: 1 / np.sqrt(z), "sign": lambda z: z / np.abs(z),
                 "sin": np.sin, "sqrt": np.sqrt, "tan": np.tan, "tanh": np.tanh}
COMPLEX_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
                  "pow": np.power, "atan2": None}
COMPLEX_REAL = {"abs": np.abs, "angle": np.angle}
COMPLEX_PREDICATES = {"eq": np.equal, "neq": np.not_equal}


def complex_functions():
    t = f"tensor<{N}xf32>"
    b = f"tensor<{N}xi1>"
    c = "complex<f32>"
    maps = ", ".join(["affine_map<(i) -> (i)>"] * 6)
    out = []

    def generic(name, body, results):
        outs = ", ".join(f"%o{k}" for k in range(len(results)))
        out_types = ", ".join(results)
        empties = "\n".join(f"  %o{k} = tensor.empty() : {r}" for k, r in enumerate(results))
        block_outs = ", ".join(f"%y{k}: {r.split('x')[1].rstrip('>')}"
                               for k, r in enumerate(results))
        n_maps = ", ".join(["affine_map<(i) -> (i)>"] * (4 + len(results)))
        out.append(
            f"func.func public @c_{name}(%a: {t}, %b: {t}, %c: {t}, %d: {t}) -> ({out_types}) {{\n"
            f"{empties}\n"
            f"  %r:{len(results)} = linalg.generic {{indexing_maps = [{n_maps}], "
            f"iterator_types = [\"parallel\"]}} ins(%a, %b, %c, %d : {t}, {t}, {t}, {t}) "
            f"outs({outs} : {out_types}) {{\n"
            f"  ^bb0(%x0: f32, %x1: f32, %x2: f32, %x3: f32, {block_outs}):\n"
            f"    %z = complex.create %x0, %x1 : {c}\n"
            f"    %w = complex.create %x2, %x3 : {c}\n"
            f"{body}"
            f"  }} -> ({out_types})\n"
            f"  return {', '.join(f'%r#{k}' for k in range(len(results)))} : {out_types}\n}}")

    parts = (f"    %re = complex.re %v : {c}\n    %im = complex.im %v : {c}\n"
             f"    linalg.yield %re, %im : f32, f32\n")
    for name in COMPLEX_UNARY:
        generic(name, f"    %v = complex.{name} %z : {c}\n" + parts, [t, t])
    for name in COMPLEX_BINARY:
        generic(name, f"    %v = complex.{name} %z, %w : {c}\n" + parts, [t, t])
    generic("powi", f"    %three = arith.constant 3 : i32\n"
                    f"    %v = complex.powi %z, %three : {c}, i32\n" + parts, [t, t])
    for name in COMPLEX_REAL:
        generic(name, f"    %v = complex.{name} %z : {c}\n    linalg.yield %v : f32\n", [t])
    for name in COMPLEX_PREDICATES:
        generic(name, f"    %v = complex.{name} %z, %w : {c}\n    linalg.yield %v : i1\n", [b])
    del maps
    return out


@pytest.mark.parametrize("on_target", MODES, ids=MODE_IDS)
def test_every_complex_op_computes_what_numpy_does(engine, on_target):
    module = engine.compile(program("f32", on_target, complex_functions()), "complex_ops")
    a, b, c, d = (spread(-2, 2).astype(np.float32) for _ in range(4))
    c[:3], d[:3] = a[:3], b[:3]  # a few equal pairs for eq and neq
    z = a.astype(np.float64) + 1j * b.astype(np.float64)
    w = c.astype(np.float64) + 1j * d.astype(np.float64)

    def check(name, got, want):
        got = np.asarray(got[0], np.float64) + 1j * np.asarray(got[1], np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"complex.{name}")

    for name, reference in COMPLEX_UNARY.items():
        check(name, getattr(module, "c_" + name)(a, b, c, d), reference(z))
    for name, reference in COMPLEX_BINARY.items():
        got = getattr(module, "c_" + name)(a, b, c, d)
        if reference is None:
            assert np.isfinite(got[0]).all() and np.isfinite(got[1]).all(), name
        else:
            check(name, got, reference(z, w))
    check("powi", module.c_powi(a, b, c, d), z ** 3)
    for name, reference in COMPLEX_REAL.items():
        np.testing.assert_allclose(getattr(module, "c_" + name)(a, b, c, d), reference(z),
                                   rtol=1e-6, atol=1e-6, err_msg=f"complex.{name}")
    for name, reference in COMPLEX_PREDICATES.items():
        np.testing.assert_array_equal(getattr(module, "c_" + name)(a, b, c, d), reference(z, w),
                                      err_msg=f"complex.{name}")
