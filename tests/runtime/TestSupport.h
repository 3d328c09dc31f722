// Helpers shared by the runtime and object host tests: reading kernels, building views.
#ifndef COURIER_TESTS_RUNTIME_TESTSUPPORT_H
#define COURIER_TESTS_RUNTIME_TESTSUPPORT_H

#include "transport/Backend.h"

#include "tests/kernels/KernelPaths.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace courier::test {

inline std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

inline transport::ObjectBlob kernel(const std::string &path) {
  return transport::ObjectBlob::fromBytes(readFile(path));
}

template <typename T>
transport::TensorView view(const std::vector<T> &data, std::vector<int64_t> sizes,
                           std::vector<int64_t> strides) {
  return transport::TensorView{data.data(), int64_t(sizeof(T)), std::move(sizes),
                               std::move(strides)};
}

template <typename T> std::vector<T> elements(const transport::OwnedTensor &tensor) {
  REQUIRE(tensor.elemSize == int64_t(sizeof(T)));
  int64_t count = 1;
  for (int64_t size : tensor.sizes)
    count *= size;
  std::vector<T> out;
  std::vector<int64_t> index(tensor.sizes.size(), 0);
  for (int64_t n = 0; n < count; ++n) {
    int64_t offset = 0;
    for (size_t d = 0; d < index.size(); ++d)
      offset += index[d] * tensor.strides[d];
    out.push_back(static_cast<const T *>(tensor.data)[offset]);
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < tensor.sizes[d])
        break;
      index[d] = 0;
    }
  }
  return out;
}

/// The message of `error`, or "" for success, so a check shows the message on failure.
inline std::string messageOf(llvm::Error error) {
  return error ? llvm::toString(std::move(error)) : std::string();
}

#define REQUIRE_OK(expr) REQUIRE(::courier::test::messageOf(expr) == "")

/// The message of an error that must have happened.
template <typename T> std::string failure(llvm::Expected<T> value) {
  REQUIRE_FALSE(bool(value));
  return llvm::toString(value.takeError());
}

inline std::string failure(llvm::Error error) {
  std::string message = messageOf(std::move(error));
  REQUIRE(message != "");
  return message;
}

} // namespace courier::test

#endif // COURIER_TESTS_RUNTIME_TESTSUPPORT_H
