// Helpers for the engine's tests: llvm::Expected checks, scratch directories, files.
#ifndef COURIER_TESTS_JIT_TESTSUPPORT_H
#define COURIER_TESTS_JIT_TESTSUPPORT_H

#include "jit/Engine.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <catch2/catch.hpp>

#include <vector>

namespace courier::testing {

/// True if `value` holds a value; otherwise logs its error with the test's output. The
/// error stays in `value` for the test to inspect.
template <typename T> bool ok(llvm::Expected<T> &value) {
  if (value)
    return true;
  std::string error = llvm::toString(value.takeError());
  UNSCOPED_INFO(error);
  value = llvm::createStringError(error);
  return false;
}
template <typename T> bool ok(llvm::Expected<T> &&value) { return ok(value); }

/// True if `value` holds an error, which stays in it, untouched, for the test to inspect.
template <typename T> bool failed(llvm::Expected<T> &value) { return !value; }

/// A fresh directory per test, removed afterwards.
struct TempDir {
  explicit TempDir(const char *prefix = "courier-jit-test") {
    llvm::SmallString<128> dir;
    REQUIRE(!llvm::sys::fs::createUniqueDirectory(prefix, dir));
    path = std::string(dir);
  }
  ~TempDir() { llvm::sys::fs::remove_directories(path); }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  std::string sub(llvm::StringRef name) const { return path + "/" + name.str(); }
  std::string path;
};

/// Engine options whose cache lives in `dir`.
inline EngineOptions optionsIn(const std::string &dir) {
  EngineOptions options;
  options.cacheDir = dir;
  return options;
}
inline EngineOptions optionsIn(const TempDir &dir) { return optionsIn(dir.path); }

/// A tensor's elements as doubles, in order.
inline std::vector<double> values(const Tensor &t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numElements(); ++i)
    v.push_back(t.at(i));
  return v;
}

/// Compiles `text` (named `file` in diagnostics), runs its @main on `inputs` and returns its
/// one result.
inline Tensor runMain(Engine &engine, const std::string &text, std::vector<Tensor> inputs,
                      const std::string &file = "kernel.mlir") {
  auto module = engine.compile(text, file);
  REQUIRE(ok(module));
  auto out = (*module)->invoke("main", std::move(inputs));
  REQUIRE(ok(out));
  REQUIRE(out->size() == 1);
  return std::move((*out)[0]);
}

inline std::string readFile(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  REQUIRE(buffer);
  return (*buffer)->getBuffer().str();
}

/// A program whose entry @main(tensor<4xf64>) launches @dev::@scale on the executor at
/// `address`. The kernel's `body` computes %r from %x (by default, doubling it); `target` is
/// what its module's `catalyst.target` attribute holds.
inline std::string scaleProgram(const std::string &address,
                                const std::string &body = "%r = arith.addf %x, %x : tensor<4xf64>",
                                const std::string &target = "") {
  return R"mlir(
module @app {
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @dev::@scale(%x) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {)mlir" +
         target + "}, catalyst.dispatch = {address = \"" + address + R"mlir("}} {
    func.func public @scale(%x: tensor<4xf64>) -> tensor<4xf64> {
      )mlir" +
         body + R"mlir(
      return %r : tensor<4xf64>
    }
  }
}
)mlir";
}

} // namespace courier::testing

#endif // COURIER_TESTS_JIT_TESTSUPPORT_H
