// A host module whose 2 MiB constant, unoptimised (-O0), lands whole in its object.
func.func public @main() -> tensor<524288xf32> {
  %c = arith.constant dense<1.5> : tensor<524288xf32>
  return %c : tensor<524288xf32>
}
