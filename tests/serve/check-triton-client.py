#!/usr/bin/env python3
"""Runs Triton's own Python clients (tritonclient.http, and tritonclient.http.aio when
aiohttp is there) against a real courier-serve: health, server and model metadata, binary and
JSON tensors of several datatypes, a dynamic shape, requested outputs and request ids,
compression asked for, errors read as the client reads them, async infers, statistics, the
model repository and system shared memory.

tritonclient is not a Debian package: where `import tritonclient.http` fails (pip install
tritonclient[http], or its source tree on PYTHONPATH, with Debian's python3-gevent,
python3-geventhttpclient and python3-rapidjson) this exits 77, which ctest reports as
skipped.

usage: check-triton-client.py BIN_DIR
"""
import asyncio
import json
import subprocess
import sys
import urllib.request
from multiprocessing import shared_memory
try:
    import numpy as np
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException
except ImportError as e:
    print(f"skipped: Triton's client cannot be imported here ({e})")
    sys.exit(77)
try:
    import tritonclient.http.aio as aioclient
except ImportError:
    aioclient = None
BIN = sys.argv[1]
serve = subprocess.Popen([BIN + "/courier-serve", "--listen", "127.0.0.1:0", "--allow-shared-memory", "--quiet"],
                         stdout=subprocess.PIPE)
address = serve.stdout.readline().decode().split()[-1]
base = "http://" + address
MLIR = r'''
module @m {
  func.func public @main(%x: tensor<4xf64> {courier.name = "x"}) -> (tensor<4xf64> {courier.name = "y"}) {
    %two = arith.constant dense<2.0> : tensor<4xf64>
    %one = arith.constant dense<1.0> : tensor<4xf64>
    %d = arith.mulf %x, %two : tensor<4xf64>
    %r = arith.addf %d, %one : tensor<4xf64>
    return %r : tensor<4xf64>
  }
  func.func public @mm(%a: tensor<?x3xf32>, %b: tensor<3x2xf32>) -> tensor<?x2xf32> {
    %c0 = arith.constant 0 : index
    %n = tensor.dim %a, %c0 : tensor<?x3xf32>
    %z = arith.constant 0.0 : f32
    %e = tensor.empty(%n) : tensor<?x2xf32>
    %f = linalg.fill ins(%z : f32) outs(%e : tensor<?x2xf32>) -> tensor<?x2xf32>
    %r = linalg.matmul ins(%a, %b : tensor<?x3xf32>, tensor<3x2xf32>) outs(%f : tensor<?x2xf32>) -> tensor<?x2xf32>
    return %r : tensor<?x2xf32>
  }
  func.func public @ints(%a: tensor<3xi8>, %b: tensor<3xi1>, %c: tensor<2xui16>, %d: tensor<2xf16>) -> (tensor<3xi8>, tensor<3xi1>, tensor<2xui16>, tensor<2xf16>) {
    return %a, %b, %c, %d : tensor<3xi8>, tensor<3xi1>, tensor<2xui16>, tensor<2xf16>
  }
}
'''


def create_module():
    urllib.request.urlopen(urllib.request.Request(
        base + "/v1/modules", data=json.dumps({"name": "scale", "mlir": MLIR}).encode(),
        method="POST"))


create_module()

failures = []
def check(what, cond):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)

try:
    c = httpclient.InferenceServerClient(url=address, concurrency=4)
    check("is_server_live", c.is_server_live())
    check("is_server_ready", c.is_server_ready())
    md = c.get_server_metadata()
    check("server metadata names the extensions", {"binary_tensor_data", "model_repository", "statistics", "system_shared_memory"} <= set(md["extensions"]))
    check("is_model_ready scale", c.is_model_ready("scale"))
    check("is_model_ready scale version 1", c.is_model_ready("scale", "1"))
    check("is_model_ready scale.mm", c.is_model_ready("scale.mm"))
    mmd = c.get_model_metadata("scale")
    check("metadata input name x", mmd["inputs"][0]["name"] == "x" and mmd["outputs"][0]["name"] == "y")
    mm = c.get_model_metadata("scale.mm")
    check("a dynamic dimension is -1", mm["inputs"][0]["shape"] == [-1, 3] and mm["outputs"][0]["shape"] == [-1, 2])
    # Binary in, binary out.
    x = httpclient.InferInput("x", [4], "FP64")
    x.set_data_from_numpy(np.array([1, 2, 3, 4], dtype=np.float64), binary_data=True)
    r = c.infer("scale", inputs=[x], outputs=[httpclient.InferRequestedOutput("y", binary_data=True)], request_id="r1")
    check("binary infer", np.array_equal(r.as_numpy("y"), [3, 5, 7, 9]))
    check("request id echoed", r.get_response().get("id") == "r1")
    # JSON in, JSON out.
    x.set_data_from_numpy(np.array([1, 2, 3, 4], dtype=np.float64), binary_data=False)
    r = c.infer("scale", inputs=[x], outputs=[httpclient.InferRequestedOutput("y", binary_data=False)])
    check("JSON infer", np.array_equal(r.as_numpy("y"), [3, 5, 7, 9]))
    # Default outputs (none requested).
    r = c.infer("scale", inputs=[x])
    check("infer with no outputs requested", np.array_equal(r.as_numpy("y"), [3, 5, 7, 9]))
    # Compressed request and response.
    r = c.infer("scale", inputs=[x], response_compression_algorithm="gzip")
    check("response compression asked: plain reply read", np.array_equal(r.as_numpy("y"), [3, 5, 7, 9]))
    for algo in ("gzip", "deflate"):
        try:
            c.infer("scale", inputs=[x], request_compression_algorithm=algo, response_compression_algorithm="gzip")
            check(algo + " request refused", False)
        except InferenceServerException as e:
            print("  ", algo, "->", e.status(), e.message())
            check(algo + " request refused readably", e.status() == "415" and "not accepted" in e.message())
    # Dynamic shape, second entry.
    a = np.arange(15, dtype=np.float32).reshape(5, 3); b = np.arange(6, dtype=np.float32).reshape(3, 2)
    ia = httpclient.InferInput("input0", list(a.shape), "FP32"); ia.set_data_from_numpy(a)
    ib = httpclient.InferInput("input1", list(b.shape), "FP32"); ib.set_data_from_numpy(b, binary_data=False)
    r = c.infer("scale.mm", inputs=[ia, ib])
    check("dynamic matmul", np.array_equal(r.as_numpy("output0"), a @ b))
    # Datatypes.
    vals = [np.array([-1, 2, 127], np.int8), np.array([True, False, True]), np.array([1, 65535], np.uint16),
            np.array([0.5, -2], np.float16)]
    for binary in (True, False):
        ins = []
        for i, (v, dt) in enumerate(zip(vals, ["INT8", "BOOL", "UINT16", "FP16"])):
            t = httpclient.InferInput(f"input{i}", list(v.shape), dt)
            t.set_data_from_numpy(v, binary_data=binary or dt == "FP16")
            ins.append(t)
        outs = [httpclient.InferRequestedOutput(f"output{i}", binary_data=binary) for i in range(4)]
        r = c.infer("scale.ints", inputs=ins, outputs=outs)
        for i, v in enumerate(vals):
            got = r.as_numpy(f"output{i}")
            check(f"datatype {v.dtype} binary={binary}", got is not None and got.dtype == v.dtype and np.array_equal(got, v))
    # Errors read by the client.
    for what, status, words, call in [
        ("unknown model", "404", "no model 'nope'", lambda: c.infer("nope", inputs=[x])),
        ("wrong input name", "400", "no input 'z'", lambda: c.infer("scale", inputs=[httpclient.InferInput("z", [4], "FP64").set_data_from_numpy(np.zeros(4))])),
        ("wrong datatype", "400", "FP32", lambda: c.infer("scale", inputs=[httpclient.InferInput("x", [4], "FP32").set_data_from_numpy(np.zeros(4, np.float32))])),
        ("wrong shape", "400", "[5]", lambda: c.infer("scale", inputs=[httpclient.InferInput("x", [5], "FP64").set_data_from_numpy(np.zeros(5))])),
        ("a version the server does not hold", "404", "no version '7'", lambda: c.infer("scale", inputs=[x], model_version="7")),
        ("metadata of an unknown model", "404", "no model 'nope'", lambda: c.get_model_metadata("nope")),
    ]:
        try:
            call()
            check(what + ": an error", False)
        except InferenceServerException as e:
            print("  ", what, "->", e.status(), e.message())
            check(what + ": the client reads the error", e.status() == status and words in e.message())
    # Async infers in a gevent pool.
    reqs = [c.async_infer("scale", inputs=[x]) for _ in range(16)]
    check("16 async infers", all(np.array_equal(q.get_result().as_numpy("y"), [3, 5, 7, 9]) for q in reqs))
    # Statistics.
    st = c.get_inference_statistics("scale")
    check("statistics count the 20 infers and 3 failures",
          st["model_stats"][0]["inference_stats"]["success"]["count"] == 20
          and st["model_stats"][0]["inference_stats"]["fail"]["count"] == 3)
    check("statistics of every model", len(c.get_inference_statistics()["model_stats"]) == 3)
    # Repository.
    check("repository index", [m["name"] for m in c.get_model_repository_index()] == ["scale", "scale.mm", "scale.ints"])
    c.unload_model("scale")
    check("unloaded", not c.is_model_ready("scale") and c.get_model_repository_index() == [])
    try:
        c.load_model("scale"); check("load of an API module after unload is an error", False)
    except InferenceServerException as e:
        check("load of an API module after unload: 404", e.status() == "404")
    create_module()
    # System shared memory.
    shm = shared_memory.SharedMemory(create=True, size=64)
    try:
        np.ndarray((4,), np.float64, buffer=shm.buf)[:] = [1, 2, 3, 4]
        c.register_system_shared_memory("in", "/" + shm.name, 32)
        c.register_system_shared_memory("out", "/" + shm.name, 32, offset=32)
        check("regions listed", [r["name"] for r in c.get_system_shared_memory_status()] == ["in", "out"])
        xi = httpclient.InferInput("x", [4], "FP64"); xi.set_shared_memory("in", 32)
        yo = httpclient.InferRequestedOutput("y"); yo.set_shared_memory("out", 32)
        r = c.infer("scale", inputs=[xi], outputs=[yo])
        check("shared-memory infer", np.array_equal(np.ndarray((4,), np.float64, buffer=shm.buf, offset=32), [3, 5, 7, 9]))
        c.unregister_system_shared_memory()
        check("unregistered", c.get_system_shared_memory_status() == [])
    finally:
        shm.close(); shm.unlink()
    c.close()

    async def aio():
        ac = aioclient.InferenceServerClient(url=address)
        ok = await ac.is_server_ready()
        xa = aioclient.InferInput("x", [4], "FP64"); xa.set_data_from_numpy(np.array([1, 2, 3, 4], dtype=np.float64))
        rs = await asyncio.gather(*[ac.infer("scale", inputs=[xa]) for _ in range(8)])
        await ac.close()
        return ok and all(np.array_equal(q.as_numpy("y"), [3, 5, 7, 9]) for q in rs)
    if aioclient:
        check("aio client: 8 infers at once", asyncio.run(aio()))
    else:
        print("skipped the asyncio client: aiohttp cannot be imported here")
finally:
    serve.terminate(); serve.wait(timeout=20)
print("FAILURES:", failures)
sys.exit(1 if failures else 0)
