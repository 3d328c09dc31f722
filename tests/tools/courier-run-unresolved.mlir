// A kernel calling a function nobody defines cannot be loaded: courier-run names the object
// once (by its SHA-256) with the missing symbol, and no cache path; in a worker process and
// on a real executor alike.
// RUN: rm -rf %t
// RUN: not courier-run %s --arg '[1, 2, 3, 4]' --cache-dir %t 2>&1 | FileCheck %s --check-prefix=LOCAL
// RUN: not courier-run %s --arg '[1, 2, 3, 4]' --cache-dir %t --isolate 2>&1 | FileCheck %s --check-prefix=LOCAL
// RUN: python3 %S/with-executor.py courier-executor -- \
// RUN:   courier-run %s --executor {executor} --arg '[1, 2, 3, 4]' --cache-dir %t \
// RUN:   | FileCheck %s --check-prefix=REMOTE

// LOCAL: courier-run: error: setup() of '{{.*}}courier-run-unresolved.mlir' failed: send_binary to 'local': local: shipping an object to session 'local-{{[0-9]+}}': loading object [[SHA:[0-9a-f]+]]: Symbols not found: [ courier_missing_function ] [invalid_object]{{$}}
// LOCAL-NOT: {{.}}

// REMOTE: courier-run: error: setup() of '{{.*}}courier-run-unresolved.mlir' failed: send_binary to '[[ADDRESS:[^']+]]': shipping an object on [[ADDRESS]]: loading object {{[0-9a-f]+}}: Symbols not found: [ courier_missing_function ] [invalid_object]{{$}}
// REMOTE-NEXT: exit status 1
// REMOTE-NEXT: the executor is still serving
module @app {
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @dev::@broken(%x) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func private @courier_missing_function()
    func.func public @broken(%x: tensor<4xf64>) -> tensor<4xf64> {
      func.call @courier_missing_function() : () -> ()
      return %x : tensor<4xf64>
    }
  }
}
