// The content address of an object, a module's source or a cache entry: the lowercase hex
// SHA-256 of its bytes. Every layer names things by it (the workspace's `<sha>.o`, the
// executor's object store, the wire's `object` field, courier-serve's module versions), so
// there is exactly one implementation: two that disagreed would make a stored object
// unreachable. LLVM Support only, which every layer links.
#ifndef COURIER_ABI_CONTENTHASH_H
#define COURIER_ABI_CONTENTHASH_H

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SHA256.h"

#include <string>

namespace courier {

/// Lowercase hex SHA-256 of `bytes` (64 characters).
inline std::string sha256Hex(llvm::StringRef bytes) {
  return llvm::toHex(llvm::SHA256::hash(llvm::arrayRefFromStringRef(bytes)), /*LowerCase=*/true);
}

} // namespace courier

#endif // COURIER_ABI_CONTENTHASH_H
