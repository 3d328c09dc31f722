// The content address of an object, a module's source or a cache entry: the lowercase hex
// SHA-256 of its bytes. Every layer names things by it (the workspace's `<sha>.o`, the
// executor's object store, the wire's `object` field, courier-serve's module versions), so
// there is exactly one implementation: two that disagreed would make a stored object
// unreachable. LLVM Support only, which every layer links.
#ifndef COURIER_ABI_CONTENTHASH_H
#define COURIER_ABI_CONTENTHASH_H

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace courier {

/// Lowercase hex SHA-256 of `bytes` (64 characters).
inline std::string sha256Hex(llvm::StringRef bytes) {
  return llvm::toHex(llvm::SHA256::hash(llvm::arrayRefFromStringRef(bytes)), /*LowerCase=*/true);
}

/// A stream whose bytes go into a SHA-256 and are not kept: what a fingerprint of printed IR
/// is taken with, the IR never held as text. hex() is sha256Hex of everything written.
class Sha256Stream : public llvm::raw_ostream {
public:
  Sha256Stream() { SetUnbuffered(); }
  std::string hex() {
    flush();
    return llvm::toHex(hash.final(), /*LowerCase=*/true);
  }

private:
  void write_impl(const char *bytes, size_t size) override {
    hash.update(llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(bytes), size));
    written += size;
  }
  uint64_t current_pos() const override { return written; }
  llvm::SHA256 hash;
  uint64_t written = 0;
};

/// The SHA-256 an object's name claims for its bytes: `<hash>` for a name whose last
/// component (after the last '/' or ':') is `<64 lowercase hex>.o`, as the cache, the
/// workspace and in-memory objects (`memory:<hash>.o`) are named; empty for any other name.
/// A reader compares it with sha256Hex of what it read, so that a replaced or damaged file
/// is refused rather than run.
inline llvm::StringRef claimedContentHash(llvm::StringRef path) {
  llvm::StringRef name = path.substr(path.find_last_of("/:") + 1);
  if (!name.consume_back(".o") || name.size() != 64 ||
      !llvm::all_of(name, [](char c) { return llvm::isDigit(c) || (c >= 'a' && c <= 'f'); }))
    return {};
  return name;
}

} // namespace courier

#endif // COURIER_ABI_CONTENTHASH_H
