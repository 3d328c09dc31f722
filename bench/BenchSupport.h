// What every benchmark program needs to fail loudly: a benchmark that cannot do what it
// measures stops with the reason rather than printing figures of something else.
#ifndef COURIER_BENCH_BENCHSUPPORT_H
#define COURIER_BENCH_BENCHSUPPORT_H

#include "transport/Backend.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace courier::bench {

/// Prints "<program>: <message>" and exits 1.
[[noreturn]] inline void die(const std::string &message) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, message.c_str());
  std::exit(1);
}

template <typename T> T check(llvm::Expected<T> value, const char *what) {
  if (!value)
    die(std::string(what) + ": " + llvm::toString(value.takeError()));
  return std::move(*value);
}

inline void check(llvm::Error error, const char *what) {
  if (error)
    die(std::string(what) + ": " + llvm::toString(std::move(error)));
}

/// The object file at `path` as a content-addressed blob.
inline transport::ObjectBlob loadObject(const char *path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    die(std::string("reading ") + path);
  return transport::ObjectBlob::fromBytes((*buffer)->getBuffer().str());
}

} // namespace courier::bench

#endif // COURIER_BENCH_BENCHSUPPORT_H
