// RUN: courier-run %s --arg 0.5 --plugin %courier_libs/libsample_describe_plugin.so --no-disk-cache | FileCheck %s
// Without the plugin the in-process executor cannot find the symbol, and says so.
// RUN: not courier-run %s --arg 0.5 --no-disk-cache 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not courier-run %s --arg 0.5 --plugin %t.nonexistent.so --no-disk-cache 2>&1 | FileCheck %s --check-prefix=BAD-PLUGIN

// A dispatched library call on the in-process executor, with a string and an out buffer
// (the plugin is samples/04-two-executors/plugin.c).
// CHECK: {"data":[3.5],"dtype":"f64","shape":[]}
// CHECK-NEXT: {"data":[0.5,1,1.5,2],"dtype":"f32","shape":[4]}
// MISSING: courier-run: error: invoking 'main' {{.*}}: call 'describe' on 'local': {{.*}}unknown symbol 'describe'
// BAD-PLUGIN: courier-run: error: setup() {{.*}} loading plugin '{{.*}}nonexistent.so'
module @app {
  func.func public @main(%scale: f64) -> (f64, tensor<4xf32>) {
    %n, %o = catalyst.runtime_call fn("describe") (%scale)
        {c_params = ["f64", "str"], c_result = "f64", c_strings = ["courier"], dispatch = ""}
        : (f64) -> (f64) outs(tensor<4xf32>)
    return %n, %o : f64, tensor<4xf32>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @unused(%x: tensor<1xf32>) -> tensor<1xf32> { return %x : tensor<1xf32> }
  }
}
