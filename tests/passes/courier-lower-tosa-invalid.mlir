// RUN: courier-opt %s -courier-lower-tosa -verify-diagnostics

// An op no TOSA lowering knows fails to legalize, at the op.
func.func @custom(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{failed to legalize operation 'tosa.custom'}}
  %c = tosa.custom %a {operator_name = "frobnicate", domain_name = "acme", implementation_attrs = ""} : (tensor<4xf32>) -> tensor<4xf32>
  return %c : tensor<4xf32>
}
