// An entry's inputs as the fuzzers that read tensors declare them in their input's first
// line: "f32[4,?] i64 ui8[]" (a dtype alone is a scalar, [] a tensor of rank 0, ? a dynamic
// dimension; at most four inputs of rank four, dimensions up to 64).
#ifndef COURIER_TESTS_FUZZ_ENTRYSPECS_H
#define COURIER_TESTS_FUZZ_ENTRYSPECS_H

#include "jit/Engine.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <optional>

namespace courier::fuzz {

/// "f32[4,?]", "i64", "ui8[]"; nothing for a word that is none of these.
inline std::optional<TensorSpec> specOf(llvm::StringRef word) {
  auto [name, dims] = word.split('[');
  std::optional<DType> dtype = parseDType(name);
  if (!dtype)
    return std::nullopt;
  TensorSpec spec{*dtype, {}, !word.contains('[')};
  if (spec.isScalar)
    return spec;
  if (!dims.consume_back("]"))
    return std::nullopt;
  llvm::SmallVector<llvm::StringRef, 4> sizes;
  dims.split(sizes, ',', -1, /*KeepEmpty=*/false);
  if (sizes.size() > 4)
    return std::nullopt;
  for (llvm::StringRef size : sizes) {
    int64_t d = -1;
    if (size != "?" && (size.getAsInteger(10, d) || d < 0 || d > 64))
      return std::nullopt;
    spec.shape.push_back(d);
  }
  return spec;
}

/// An entry "f" taking the inputs `words` declare, or nothing if one is not a declaration.
inline std::optional<EntrySignature> entryOf(llvm::ArrayRef<llvm::StringRef> words) {
  if (words.size() > 4)
    return std::nullopt;
  EntrySignature entry{"f", {}, {}, {}, {}, {}};
  for (llvm::StringRef word : words) {
    std::optional<TensorSpec> spec = specOf(word);
    if (!spec)
      return std::nullopt;
    entry.inputs.push_back(*spec);
  }
  return entry;
}

} // namespace courier::fuzz

#endif // COURIER_TESTS_FUZZ_ENTRYSPECS_H
