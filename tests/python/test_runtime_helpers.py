"""Half-precision and bfloat16 arithmetic needs compiler-runtime helpers (__extendhfsf2,
__truncsfhf2, __truncsfbf2 on x86-64 CPUs without F16C or AVX512-BF16). Courier links its
own, so kernels and host code find them in this interpreter too, which has no libgcc_s in
its global scope (NumPy's BLAS loads one privately, GCC 12's lacks the bf16 conversions)."""

import numpy as np
import pytest

import courier

# A CPU with neither F16C nor AVX512-BF16: LLVM calls the helpers for every conversion.
GENERIC = '{cpu = "x86-64"}'


def kernels(cpu):
    return f"""module @app {{
  func.func public @add_f16(%x: tensor<4xf16>, %y: tensor<4xf16>) -> tensor<4xf16> {{
    %r = catalyst.launch_kernel @dev::@add_f16(%x, %y)
        : (tensor<4xf16>, tensor<4xf16>) -> tensor<4xf16>
    return %r : tensor<4xf16>
  }}
  func.func public @mul_bf16(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {{
    %r = catalyst.launch_kernel @dev::@mul_bf16(%x, %y)
        : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    return %r : tensor<4xf32>
  }}
  module @dev attributes {{catalyst.target = {cpu}, catalyst.dispatch = {{address = "local"}}}} {{
    func.func public @add_f16(%x: tensor<4xf16>, %y: tensor<4xf16>) -> tensor<4xf16> {{
      %r = arith.addf %x, %y : tensor<4xf16>
      return %r : tensor<4xf16>
    }}
    func.func public @mul_bf16(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {{
      %a = arith.truncf %x : tensor<4xf32> to tensor<4xbf16>
      %b = arith.truncf %y : tensor<4xf32> to tensor<4xbf16>
      %p = arith.mulf %a, %b : tensor<4xbf16>
      %r = arith.extf %p : tensor<4xbf16> to tensor<4xf32>
      return %r : tensor<4xf32>
    }}
  }}
}}"""


HOST_CODE = """module @host {
  func.func public @add_f16(%x: tensor<4xf16>, %y: tensor<4xf16>) -> tensor<4xf16> {
    %r = arith.addf %x, %y : tensor<4xf16>
    return %r : tensor<4xf16>
  }
  func.func public @to_f16(%x: tensor<4xf64>) -> tensor<4xf16> {
    %r = arith.truncf %x : tensor<4xf64> to tensor<4xf16>
    return %r : tensor<4xf16>
  }
}"""

@pytest.fixture(scope="module")
def engine():
    return courier.Engine(disk_cache=False)


X16 = np.array([1.5, -2.25, 1000.0, 0.0009765625], np.float16)
Y16 = np.array([0.25, 4.0, 24.0, 0.0009765625], np.float16)
# Products of bf16 values, exact in bf16: 3 * 1.5, -2 * 0.25, 256 * 0.5, 1.25 * 1.25 = 1.5625.
XB = np.array([3.0, -2.0, 256.0, 1.25], np.float32)
YB = np.array([1.5, 0.25, 0.5, 1.25], np.float32)


def test_f16_and_bf16_kernels_run_in_process_from_python(engine):
    for cpu in (GENERIC, "{}"):
        module = engine.compile(kernels(cpu), "halves")
        y = module.add_f16(X16, Y16)
        assert y.dtype == np.float16
        np.testing.assert_array_equal(y, X16 + Y16)
        np.testing.assert_array_equal(module.mul_bf16(XB, YB), XB * YB)
        # Rounding to bf16 happens in the kernel: 1 + 2^-9 becomes 1, then 1 * 3 = 3.
        np.testing.assert_array_equal(
            module.mul_bf16(np.full(4, 1 + 2**-9, np.float32), np.full(4, 3, np.float32)),
            np.full(4, 3, np.float32))


def test_f16_host_code_runs_in_process_from_python(engine):
    module = engine.compile(HOST_CODE, "host_halves")
    np.testing.assert_array_equal(module.add_f16(X16, Y16), X16 + Y16)
    x = np.array([1 / 3, 65504.0, 1e-8, -7.0], np.float64)
    np.testing.assert_array_equal(module.to_f16(x), x.astype(np.float16))
