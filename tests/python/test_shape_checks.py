"""Dynamic dimensions an entry's code needs equal (a matmul's K, an elementwise op's sizes)
are checked before any code runs: inputs that disagree are refused with invalid_input,
naming the op and both sizes, in process, in a module's worker process, in a kernel a
target module runs, and through courier-serve's REST API; the caller goes on working."""

import numpy as np
import pytest

import courier
from courier.serve import Client, ServeError

DYNAMIC = """module @shapes {
  func.func public @mm(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> tensor<?x?xf32> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %m = tensor.dim %a, %c0 : tensor<?x?xf32>
    %n = tensor.dim %b, %c1 : tensor<?x?xf32>
    %e = tensor.empty(%m, %n) : tensor<?x?xf32>
    %z = arith.constant 0.0 : f32
    %f = linalg.fill ins(%z : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
    %r = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>)
        outs(%f : tensor<?x?xf32>) -> tensor<?x?xf32>
    return %r : tensor<?x?xf32>
  }
  func.func public @add(%a: tensor<?xf32>, %b: tensor<?xf32>) -> tensor<?xf32> {
    %r = arith.addf %a, %b : tensor<?xf32>
    return %r : tensor<?xf32>
  }
  func.func public @kernel_add(%a: tensor<?xf32>, %b: tensor<?xf32>) -> tensor<?xf32> {
    %r = catalyst.launch_kernel @dev::@add(%a, %b)
        : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
    return %r : tensor<?xf32>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @add(%a: tensor<?xf32>, %b: tensor<?xf32>) -> tensor<?xf32> {
      %r = arith.addf %a, %b : tensor<?xf32>
      return %r : tensor<?xf32>
    }
  }
}"""

A = np.arange(6, dtype=np.float32).reshape(2, 3)


def refusals():
    """(entry, inputs, words the message must hold) for each mismatch, small and large."""
    return [
        ("mm", (A, np.ones((2, 1), np.float32)),
         ["'linalg.matmul'", "dimension 1 of input 0 (size 3)", "dimension 0 of input 1 (size 2)"]),
        ("mm", (np.ones((4, 1000), np.float32), np.ones((100000, 4), np.float32)),
         ["'linalg.matmul'", "(size 1000)", "(size 100000)"]),
        ("add", (np.ones(3, np.float32), np.ones(5, np.float32)),
         ["'arith.addf'", "(size 3)", "(size 5)"]),
        ("kernel_add", (np.ones(3, np.float32), np.ones(1 << 20, np.float32)),
         ["'arith.addf'", "(size 3)", "(size 1048576)"]),
    ]


@pytest.mark.parametrize("isolation", ["in_process", "process"])
def test_disagreeing_dynamic_dimensions_are_refused_before_code_runs(isolation):
    engine = courier.Engine(disk_cache=False, isolation=isolation)
    module = engine.compile(DYNAMIC, "shapes")
    for entry, inputs, words in refusals():
        with pytest.raises(courier.InvokeError) as refused:
            getattr(module, entry)(*inputs)
        assert refused.value.kind == "invalid_input", entry
        for word in words:
            assert word in str(refused.value), (entry, str(refused.value))
    # Inputs that agree still run, and the module is unharmed.
    np.testing.assert_array_equal(module.mm(A, np.ones((3, 1), np.float32)), A @ np.ones((3, 1)))
    np.testing.assert_array_equal(module.kernel_add(np.ones(4, np.float32), np.ones(4, np.float32)),
                                  np.full(4, 2, np.float32))


def test_disagreeing_dynamic_dimensions_are_refused_over_rest(serve):
    client = Client(serve.url)
    client.submit("shapes", DYNAMIC)
    for entry, inputs, words in refusals()[:1] + refusals()[2:3]:
        with pytest.raises(ServeError) as refused:
            client.invoke("shapes", entry, *inputs)
        assert refused.value.code == "invalid_input" and refused.value.status == 400
        for word in words:
            assert word in refused.value.message, refused.value.message
    (r,) = client.invoke("shapes", "mm", A, np.ones((3, 1), np.float32))
    np.testing.assert_array_equal(r, A @ np.ones((3, 1), np.float32))
