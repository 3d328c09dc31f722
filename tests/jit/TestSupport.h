// Helpers for tests of llvm::Expected-returning APIs.
#ifndef COURIER_TESTS_JIT_TESTSUPPORT_H
#define COURIER_TESTS_JIT_TESTSUPPORT_H

#include "llvm/Support/Error.h"

#include <catch2/catch.hpp>

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

} // namespace courier::testing

#endif // COURIER_TESTS_JIT_TESTSUPPORT_H
