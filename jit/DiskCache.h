// The engine's disk cache: compiled host objects, the target objects they ship and which
// object each target module's fingerprint compiled to, each object checked against the
// SHA-256 it is recorded under before it is used, in a directory only its owner can write,
// bounded in size by evicting the least recently used files.
#ifndef COURIER_JIT_DISKCACHE_H
#define COURIER_JIT_DISKCACHE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace courier {

/// A target object: its content address (lowercase hex SHA-256) and its bytes.
struct CachedObject {
  std::string sha256;
  std::string bytes;
  /// The name host code ships it by, where a host entry records one (see targetObjectName).
  std::string name = {};
};

/// One cache directory, holding `host/<key>.o` with `host/<key>.manifest`,
/// `objects/<sha256>.o` and `targets/<fingerprint>`, which names the object of the target
/// module with that fingerprint. The directories are opened once, without following symbolic links,
/// and every file is read and written relative to them, so a directory swapped for a link
/// afterwards is never entered. Several processes may share one directory: files are
/// replaced by rename, and a file another process evicts is a miss, never an error.
class DiskCache {
public:
  /// Opens `dir` and its subdirectories, creating missing ones with mode 0700. Refuses (with
  /// an error naming the directory and the reason) one that is a symbolic link or not a
  /// directory, is owned by another user, or is writable by group or others: whoever can
  /// write there chooses the code this process runs. `maxBytes` bounds the files' total
  /// size (0: unbounded).
  static llvm::Expected<std::unique_ptr<DiskCache>> open(llvm::StringRef dir, uint64_t maxBytes);
  ~DiskCache();
  DiskCache(const DiskCache &) = delete;
  DiskCache &operator=(const DiskCache &) = delete;

  const std::string &directory() const { return dir; }

  /// `<dir>/objects/<sha256>.o`: the name host code ships a cached target object by.
  std::string objectPath(llvm::StringRef sha256) const;

  /// The bytes of target object `sha256` if they are stored and still hash to it. A file
  /// whose bytes do not (replaced, truncated) is deleted and is a miss.
  std::optional<std::string> loadObject(llvm::StringRef sha256);

  struct HostEntry {
    std::string object;                ///< The compiled host code.
    std::vector<CachedObject> targets; ///< The target objects it ships, checked.
  };

  /// The entry stored under `key` (lowercase hex), if its host object hashes to what its
  /// manifest records and every target object the manifest names is present and intact;
  /// otherwise a miss. A damaged entry is deleted. Files used are marked used now.
  std::optional<HostEntry> loadHost(llvm::StringRef key);

  /// Stores `object` under `key` with the target objects it ships (objects first, the
  /// manifest last, so a manifest never names a file not yet complete), then evicts. An
  /// entry larger than the bound is not stored. Best effort: the cache is an optimisation,
  /// and a failed write only costs a later compile.
  void storeHost(llvm::StringRef key, llvm::StringRef object, llvm::ArrayRef<CachedObject> targets);

  /// The object of the target module whose fingerprint is `fingerprint` (lowercase hex), if
  /// it is recorded and its object is stored and intact (as loadObject checks it).
  std::optional<CachedObject> loadTarget(llvm::StringRef fingerprint);

  /// Records `object` as that of the target module with `fingerprint`: the object first,
  /// then the record naming it. Best effort, as storeHost. Does not evict: a compile stores
  /// many, then evicts once (storeHost, or evict()).
  void storeTarget(llvm::StringRef fingerprint, const CachedObject &object);

  /// Deletes least recently used files until the total is at most the bound.
  void evict();

  /// The total size of the cached files, in bytes.
  uint64_t totalBytes();

private:
  DiskCache(std::string dir, uint64_t maxBytes, int rootFd, int hostFd, int objectsFd,
            int targetsFd);

  std::string dir;
  uint64_t maxBytes;
  int rootFd, hostFd, objectsFd, targetsFd;
};

/// The cache directory used when EngineOptions::cacheDir is empty: $XDG_CACHE_HOME/courier,
/// else $HOME/.cache/courier; empty when neither variable is set, and then there is no disk
/// cache (a shared temporary directory would let other users choose what runs).
std::string defaultCacheDir();

/// The name host code ships the object of target module `index` (its place among the
/// program's target modules) by: `target:<index>-<symbol>`, the symbol's characters other
/// than letters, digits, '_', '.' and '-' as '_'. The runtime takes the bytes from the
/// module's scope, and the name does not change with them: an edit of a kernel leaves the
/// host code, and so its compiled object, as it was.
std::string targetObjectName(unsigned index, llvm::StringRef symbol);

} // namespace courier

#endif // COURIER_JIT_DISKCACHE_H
