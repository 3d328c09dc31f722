// What the fuzz targets of tests/fuzz share: a broken promise ends the run as a crash would,
// naming what was promised, so libFuzzer keeps the input that broke it.
#ifndef COURIER_TESTS_FUZZ_FUZZSUPPORT_H
#define COURIER_TESTS_FUZZ_FUZZSUPPORT_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdlib>

namespace courier::fuzz {

/// Aborts: a decoder accepted or produced something its contract rules out.
[[noreturn]] inline void broken(const llvm::Twine &what) {
  llvm::errs() << "broken promise: " << what << "\n";
  llvm::errs().flush();
  std::abort();
}

/// The input as text.
inline llvm::StringRef bytesOf(const uint8_t *data, size_t size) {
  return llvm::StringRef(reinterpret_cast<const char *>(data), size);
}

/// Splits off the first line of `rest` (without its newline).
inline llvm::StringRef takeLine(llvm::StringRef &rest) {
  auto [line, tail] = rest.split('\n');
  rest = tail;
  return line;
}

/// Splits off the first line of `rest` as its words, separated by spaces.
inline llvm::SmallVector<llvm::StringRef, 6> takeWords(llvm::StringRef &rest) {
  llvm::SmallVector<llvm::StringRef, 6> words;
  takeLine(rest).split(words, ' ', -1, /*KeepEmpty=*/false);
  return words;
}

/// Consumes an error the input was meant to provoke; a refusal is an answer, not a failure.
inline void refused(llvm::Error error) { llvm::consumeError(std::move(error)); }

} // namespace courier::fuzz

#endif // COURIER_TESTS_FUZZ_FUZZSUPPORT_H
