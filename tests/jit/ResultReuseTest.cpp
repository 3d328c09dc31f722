// In-process calls without per-call waste: results in reused buffers that become the
// returned tensors' bytes, and outputs the caller passes written in place.
#include "jit/Engine.h"

#include "executor/ResultBlocks.h"
#include "tests/jit/TestSupport.h"

#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <string>
#include <vector>

using namespace courier;
using namespace courier::testing;

namespace {

/// A program adding two f32 tensors of `type` in a kernel run by the in-process executor.
std::string addProgram(const std::string &type) {
  std::string t = "tensor<" + type + "xf32>";
  return "module @app {\n"
         "  func.func public @main(%a: " +
         t + ", %b: " + t + ") -> " + t +
         " {\n"
         "    %r = catalyst.launch_kernel @dev::@add(%a, %b) : (" +
         t + ", " + t + ") -> " + t + "\n    return %r : " + t +
         "\n  }\n"
         "  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "
         "\"local\"}} {\n"
         "    func.func public @add(%a: " +
         t + ", %b: " + t + ") -> " + t +
         " {\n"
         "      %r = arith.addf %a, %b : " +
         t +
         "\n"
         "      return %r : " +
         t + "\n    }\n  }\n}\n";
}

constexpr int64_t kCount = 1 << 20; // 4 MiB of f32: well above the size blocks are kept from.

std::vector<float> iota(int64_t count, float start) {
  std::vector<float> values(count);
  for (int64_t i = 0; i < count; ++i)
    values[i] = start + static_cast<float>(i % 1000);
  return values;
}

bool isSum(const Tensor &t, const std::vector<float> &a, const std::vector<float> &b) {
  llvm::ArrayRef<float> got = t.view<float>();
  if (got.size() != a.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (got[i] != a[i] + b[i])
      return false;
  return true;
}

long minorFaults() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

} // namespace

TEST_CASE("repeated calls of a large in-process kernel reuse their result buffers", "[reuse]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(addProgram(std::to_string(kCount)), "add");
  REQUIRE(ok(module));
  std::vector<float> a = iota(kCount, 1), b = iota(kCount, 0.5f);
  std::vector<TensorRef> inputs = {TensorRef::of<float>({kCount}, a),
                                   TensorRef::of<float>({kCount}, b)};
  {
    auto first = (*module)->invoke("main", llvm::ArrayRef<TensorRef>(inputs));
    REQUIRE(ok(first));
    CHECK(isSum((*first)[0], a, b));
  }
  executor::BlockCounts before = executor::blockCounts();
  long faultsBefore = minorFaults();
  constexpr int kCalls = 20;
  for (int call = 0; call < kCalls; ++call) {
    auto out = (*module)->invoke("main", llvm::ArrayRef<TensorRef>(inputs));
    REQUIRE(ok(out));
    REQUIRE(isSum((*out)[0], a, b));
  }
  long faults = minorFaults() - faultsBefore;
  executor::BlockCounts after = executor::blockCounts();
  // Each call's result came from the block the last one gave back...
  CHECK(after.missed == before.missed);
  CHECK(after.reused - before.reused >= kCalls);
  // ...so no call faulted its result in: a fresh 4 MiB result is 1024 faults a call.
  long pagesPerResult = kCount * long(sizeof(float)) / 4096;
  CHECK(faults < kCalls * pagesPerResult / 10);
}

TEST_CASE("a result the caller still holds is never overwritten by the next call", "[reuse]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(addProgram(std::to_string(kCount)), "add");
  REQUIRE(ok(module));
  std::vector<float> a = iota(kCount, 1), b = iota(kCount, 2), c = iota(kCount, 7);
  auto first = (*module)->invoke(
      "main", {TensorRef::of<float>({kCount}, a), TensorRef::of<float>({kCount}, b)});
  REQUIRE(ok(first));
  auto second = (*module)->invoke(
      "main", {TensorRef::of<float>({kCount}, a), TensorRef::of<float>({kCount}, c)});
  REQUIRE(ok(second));
  CHECK((*first)[0].bytes.data() != (*second)[0].bytes.data());
  CHECK(isSum((*first)[0], a, b));
  CHECK(isSum((*second)[0], a, c));
  // A copy of a result is a tensor of its own.
  Tensor copy = (*first)[0];
  first->clear();
  CHECK(isSum(copy, a, b));
}

TEST_CASE("results are written into the outputs the caller passes, in place", "[reuse][outputs]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(addProgram(std::to_string(kCount)), "add");
  REQUIRE(ok(module));
  std::vector<float> a = iota(kCount, 1), b = iota(kCount, 3), out(kCount, -1.0f);
  InvokeOptions options;
  options.outputs = {OutputRef::of<float>({kCount}, llvm::MutableArrayRef<float>(out))};
  for (int call = 0; call < 3; ++call) {
    auto results = (*module)->invoke(
        "main", {TensorRef::of<float>({kCount}, a), TensorRef::of<float>({kCount}, b)}, options);
    REQUIRE(ok(results));
    REQUIRE(results->size() == 1);
    // The result is in `out`; what comes back says only its dtype and shape.
    CHECK((*results)[0].bytes.empty());
    CHECK((*results)[0].shape == std::vector<int64_t>{kCount});
    CHECK((*results)[0].dtype == DType::F32);
    auto *bytes = reinterpret_cast<const uint8_t *>(out.data());
    Tensor written{DType::F32, {kCount}, TensorBytes(bytes, bytes + kCount * sizeof(float))};
    CHECK(isSum(written, a, b));
  }
  // An output may be one of the inputs: it is written after the kernel has read them.
  options.outputs = {OutputRef::of<float>({kCount}, llvm::MutableArrayRef<float>(a))};
  std::vector<float> expected = a;
  for (int64_t i = 0; i < kCount; ++i)
    expected[i] += b[i];
  auto inPlace = (*module)->invoke(
      "main", {TensorRef::of<float>({kCount}, a), TensorRef::of<float>({kCount}, b)}, options);
  REQUIRE(ok(inPlace));
  CHECK(a == expected);
}

TEST_CASE("an output of another shape, dtype or count is refused, naming it", "[reuse][outputs]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto fixed = engine.compile(addProgram("4"), "add4");
  REQUIRE(ok(fixed));
  std::vector<float> a = {1, 2, 3, 4}, b = {10, 20, 30, 40};
  std::vector<TensorRef> inputs = {TensorRef::of<float>({4}, a), TensorRef::of<float>({4}, b)};
  auto refused = [&](const std::shared_ptr<Module> &module, std::vector<OutputRef> outputs,
                     std::vector<TensorRef> given) {
    InvokeOptions options;
    options.outputs = std::move(outputs);
    auto results = module->invoke("main", llvm::ArrayRef<TensorRef>(given), options);
    REQUIRE(!results);
    std::string text;
    llvm::handleAllErrors(results.takeError(), [&](const EngineError &e) {
      CHECK(e.kind == ErrorCode::InvalidInput);
      text = e.message;
    });
    return text;
  };
  std::vector<float> five(5, -1.0f);
  std::vector<double> doubles(4, -1.0);
  CHECK_THAT(
      refused(*fixed, {OutputRef::of<float>({5}, llvm::MutableArrayRef<float>(five))}, inputs),
      Catch::Contains("output 0 of 'main' must have shape tensor<4xf32>, got [5]"));
  CHECK_THAT(
      refused(*fixed, {OutputRef::of<double>({4}, llvm::MutableArrayRef<double>(doubles))}, inputs),
      Catch::Contains("output 0 of 'main' must be f32, got f64"));
  CHECK_THAT(refused(*fixed, {OutputRef{}, OutputRef{}}, inputs),
             Catch::Contains("entry 'main' has 1 results, got 2 outputs"));
  // A dynamic shape is known only from the result: nothing is written then either.
  auto dynamic = engine.compile(addProgram("?"), "addn");
  REQUIRE(ok(dynamic));
  CHECK_THAT(
      refused(*dynamic, {OutputRef::of<float>({5}, llvm::MutableArrayRef<float>(five))}, inputs),
      Catch::Contains("output 0 of 'main' has shape [5], the result has shape [4]"));
  CHECK(five == std::vector<float>(5, -1.0f));
}

TEST_CASE("tensor bytes behave as the vector they replaced", "[reuse]") {
  Tensor t = Tensor::of<float>({2}, {1.5f, 2.5f});
  std::vector<uint8_t> copied = t.bytes;
  CHECK(copied.size() == 8);
  CHECK(t.bytes == copied);
  t.bytes.resize(12);
  CHECK(t.bytes[8] == 0);
  Tensor fromVector{DType::UI8, {3}, std::vector<uint8_t>{1, 2, 3}};
  CHECK(fromVector.bytes == std::vector<uint8_t>{1, 2, 3});
  Tensor moved = std::move(fromVector);
  CHECK(moved.bytes.size() == 3);
  CHECK(fromVector.bytes.empty());
}
