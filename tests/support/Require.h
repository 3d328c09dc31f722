// Catch2 helpers for llvm::Expected and llvm::Error: the value, or the test fails with the
// error's text.
#ifndef COURIER_TESTS_SUPPORT_REQUIRE_H
#define COURIER_TESTS_SUPPORT_REQUIRE_H

#include "llvm/Support/Error.h"

#include <catch2/catch.hpp>

namespace courier::testing {

template <typename T> T require(llvm::Expected<T> value) {
  if (!value)
    FAIL(llvm::toString(value.takeError()));
  return std::move(*value);
}

inline void requireOk(llvm::Error error) {
  if (error)
    FAIL(llvm::toString(std::move(error)));
}

} // namespace courier::testing

#endif // COURIER_TESTS_SUPPORT_REQUIRE_H
