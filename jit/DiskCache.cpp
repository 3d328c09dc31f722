// The engine's disk cache: a private directory of content-checked objects, bounded by
// least-recently-used eviction. POSIX descriptors throughout, so that every file is reached
// through directories already checked rather than by a path that could be re-pointed.
#include "jit/DiskCache.h"

#include "abi/ContentHash.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>

namespace courier {

namespace {

constexpr llvm::StringLiteral kHostDir = "host";
constexpr llvm::StringLiteral kObjectsDir = "objects";
constexpr llvm::StringLiteral kTargetsDir = "targets";
/// Files being written are named with this prefix until they are renamed into place.
constexpr llvm::StringLiteral kTempPrefix = ".tmp.";
/// A temporary file this old was left by a writer that died; younger ones may be in use.
constexpr time_t kStaleTempSeconds = 3600;

std::string errnoText() { return std::strerror(errno); }

bool isHex(llvm::StringRef text, size_t length) {
  return text.size() == length &&
         llvm::all_of(text, [](char c) { return llvm::isDigit(c) || (c >= 'a' && c <= 'f'); });
}

/// What a target object's name is made of (targetObjectName): nothing a manifest line
/// splits on.
bool isNameCharacter(char c) {
  return llvm::isAlnum(c) || c == '_' || c == '.' || c == '-' || c == ':';
}

/// Opens directory `name` under `parentFd` (AT_FDCWD for a path), creating it 0700 if it is
/// missing, and checks that only this user can write there. The last component is never
/// followed if it is a symbolic link.
llvm::Expected<int> openPrivateDirectory(int parentFd, const std::string &name,
                                         const std::string &shown) {
  if (::mkdirat(parentFd, name.c_str(), 0700) != 0 && errno != EEXIST)
    return llvm::createStringError("cannot create cache directory '%s': %s", shown.c_str(),
                                   errnoText().c_str());
  int fd = ::openat(parentFd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    struct stat st;
    if ((errno == ELOOP || errno == ENOTDIR) &&
        ::fstatat(parentFd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
      return llvm::createStringError("refusing cache directory '%s': it is %s", shown.c_str(),
                                     S_ISLNK(st.st_mode) ? "a symbolic link, not a directory"
                                                         : "not a directory");
    return llvm::createStringError("cannot open cache directory '%s': %s", shown.c_str(),
                                   errnoText().c_str());
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    std::string reason = errnoText();
    ::close(fd);
    return llvm::createStringError("cannot inspect cache directory '%s': %s", shown.c_str(),
                                   reason.c_str());
  }
  std::string refusal;
  if (st.st_uid != ::geteuid())
    refusal =
        llvm::formatv("it is owned by uid {0}, not by this user (uid {1})", st.st_uid, ::geteuid())
            .str();
  else if (st.st_mode & (S_IWGRP | S_IWOTH))
    refusal = llvm::formatv("it is writable by group or others (mode {0}); make it private "
                            "(chmod 700)",
                            llvm::format("%04o", st.st_mode & 07777))
                  .str();
  if (!refusal.empty()) {
    ::close(fd);
    // Whoever can write to the cache chooses the code that runs from it.
    return llvm::createStringError("refusing cache directory '%s': %s", shown.c_str(),
                                   refusal.c_str());
  }
  return fd;
}

/// The regular file `name` under `dirFd`, or nullopt if it is missing or unreadable (a
/// concurrent eviction included). Marks it used now, for eviction's order.
std::optional<std::string> readFile(int dirFd, const std::string &name) {
  int fd = ::openat(dirFd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return std::nullopt;
  std::optional<std::string> bytes;
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    std::string buffer(static_cast<size_t>(st.st_size), '\0');
    size_t done = 0;
    while (done < buffer.size()) {
      ssize_t n = ::read(fd, buffer.data() + done, buffer.size() - done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      done += static_cast<size_t>(n);
    }
    // A file that shrank while being read is as good as damaged: the hash check refuses it.
    buffer.resize(done);
    bytes = std::move(buffer);
    ::futimens(fd, nullptr);
  }
  ::close(fd);
  return bytes;
}

/// Writes `bytes` to `name` under `dirFd` through a private temporary file renamed into
/// place, so concurrent readers and writers never see a torn file.
bool writeFile(int dirFd, const std::string &name, llvm::StringRef bytes) {
  static std::atomic<uint64_t> counter{0};
  std::string temp =
      llvm::formatv("{0}{1}.{2}.{3}", kTempPrefix, ::getpid(), counter++, name).str();
  int fd =
      ::openat(dirFd, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return false;
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    done += static_cast<size_t>(n);
  }
  bool ok = ::close(fd) == 0 && done == bytes.size() &&
            ::renameat(dirFd, temp.c_str(), dirFd, name.c_str()) == 0;
  if (!ok)
    ::unlinkat(dirFd, temp.c_str(), 0);
  return ok;
}

void removeFile(int dirFd, const std::string &name) { ::unlinkat(dirFd, name.c_str(), 0); }

std::string objectFileName(llvm::StringRef sha256) { return (sha256 + ".o").str(); }

/// Writes object `bytes` as `objects/<sha256>.o` unless a file of that size is there already:
/// most compiles store objects an earlier one stored. The file is not trusted for it: every
/// load re-hashes it (loadObject), and a damaged one is a miss and written anew.
bool storeObject(int objectsFd, llvm::StringRef sha256, llvm::StringRef bytes) {
  std::string name = objectFileName(sha256);
  struct stat st;
  if (::fstatat(objectsFd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
      static_cast<uint64_t>(st.st_size) == bytes.size())
    return true;
  return writeFile(objectsFd, name, bytes);
}

} // namespace

std::string defaultCacheDir() {
  llvm::SmallString<256> dir;
  if (std::optional<std::string> xdg = llvm::sys::Process::GetEnv("XDG_CACHE_HOME");
      xdg && !xdg->empty())
    dir = *xdg;
  else if (std::optional<std::string> home = llvm::sys::Process::GetEnv("HOME");
           home && !home->empty())
    llvm::sys::path::append(dir, *home, ".cache");
  else
    return "";
  llvm::sys::path::append(dir, "courier");
  return std::string(dir);
}

std::string targetObjectName(unsigned index, llvm::StringRef symbol) {
  std::string name = "target:" + std::to_string(index);
  if (!symbol.empty())
    name += "-";
  for (char c : symbol)
    name += llvm::isAlnum(c) || c == '_' || c == '.' || c == '-' ? c : '_';
  return name;
}

DiskCache::DiskCache(std::string dir, uint64_t maxBytes, int rootFd, int hostFd, int objectsFd,
                     int targetsFd)
    : dir(std::move(dir)), maxBytes(maxBytes), rootFd(rootFd), hostFd(hostFd), objectsFd(objectsFd),
      targetsFd(targetsFd) {}

DiskCache::~DiskCache() {
  ::close(targetsFd);
  ::close(objectsFd);
  ::close(hostFd);
  ::close(rootFd);
}

llvm::Expected<std::unique_ptr<DiskCache>> DiskCache::open(llvm::StringRef dir, uint64_t maxBytes) {
  if (dir.empty())
    return llvm::createStringError("no cache directory given");
  // The parents are the user's own business (~/.cache, say); only the cache is checked.
  llvm::SmallString<256> path(dir);
  llvm::sys::path::remove_dots(path, /*remove_dot_dot=*/false);
  // A trailing separator would make the kernel follow a symbolic link in the last place.
  while (path.size() > 1 && path.back() == '/')
    path.pop_back();
  if (llvm::StringRef parent = llvm::sys::path::parent_path(path); !parent.empty())
    if (std::error_code ec = llvm::sys::fs::create_directories(parent))
      return llvm::createStringError("cannot create '%s' for the cache: %s", parent.str().c_str(),
                                     ec.message().c_str());
  std::string shown(path);
  llvm::Expected<int> root = openPrivateDirectory(AT_FDCWD, shown, shown);
  if (!root)
    return root.takeError();
  llvm::Expected<int> host =
      openPrivateDirectory(*root, kHostDir.str(), (shown + "/" + kHostDir).str());
  if (!host) {
    ::close(*root);
    return host.takeError();
  }
  llvm::Expected<int> objects =
      openPrivateDirectory(*root, kObjectsDir.str(), (shown + "/" + kObjectsDir).str());
  if (!objects) {
    ::close(*host);
    ::close(*root);
    return objects.takeError();
  }
  llvm::Expected<int> targets =
      openPrivateDirectory(*root, kTargetsDir.str(), (shown + "/" + kTargetsDir).str());
  if (!targets) {
    ::close(*objects);
    ::close(*host);
    ::close(*root);
    return targets.takeError();
  }
  return std::unique_ptr<DiskCache>(
      new DiskCache(shown, maxBytes, *root, *host, *objects, *targets));
}

std::string DiskCache::objectPath(llvm::StringRef sha256) const {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, kObjectsDir, objectFileName(sha256));
  return std::string(path);
}

std::optional<std::string> DiskCache::loadObject(llvm::StringRef sha256) {
  if (!isHex(sha256, 64))
    return std::nullopt;
  std::string name = objectFileName(sha256);
  std::optional<std::string> bytes = readFile(objectsFd, name);
  if (!bytes)
    return std::nullopt;
  if (sha256Hex(*bytes) != sha256) {
    // Not the object its name promises: never used, and gone so that it is rebuilt.
    removeFile(objectsFd, name);
    return std::nullopt;
  }
  return bytes;
}

std::optional<DiskCache::HostEntry> DiskCache::loadHost(llvm::StringRef key) {
  if (!isHex(key, 64))
    return std::nullopt;
  std::string manifestName = (key + ".manifest").str(), objectName = (key + ".o").str();
  std::optional<std::string> manifest = readFile(hostFd, manifestName);
  if (!manifest)
    return std::nullopt;
  auto discard = [&] {
    removeFile(hostFd, manifestName);
    removeFile(hostFd, objectName);
    return std::nullopt;
  };
  // "sha256 <hex>" for the host object, then "object <sha256>[ <name>]" per target object.
  std::string expected;
  std::vector<std::pair<std::string, std::string>> targets;
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(*manifest).split(lines, '\n', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef line : lines) {
    auto [kind, rest] = line.split(' ');
    auto [value, name] = rest.split(' ');
    if (kind == "sha256" && isHex(value, 64) && name.empty() && expected.empty())
      expected = value.str();
    else if (kind == "object" && isHex(value, 64) && llvm::all_of(name, isNameCharacter))
      targets.emplace_back(value.str(), name.str());
    else
      return discard();
  }
  if (expected.empty())
    return discard();
  std::optional<std::string> object = readFile(hostFd, objectName);
  if (!object)
    return std::nullopt; // Evicted, or not written yet by a concurrent store.
  if (sha256Hex(*object) != expected)
    return discard();
  HostEntry entry{std::move(*object), {}};
  for (auto &[sha, name] : targets) {
    // A missing or damaged target object is rebuilt by compiling again, which stores it.
    std::optional<std::string> bytes = loadObject(sha);
    if (!bytes)
      return std::nullopt;
    entry.targets.push_back({std::move(sha), std::move(*bytes), std::move(name)});
  }
  return entry;
}

void DiskCache::storeHost(llvm::StringRef key, llvm::StringRef object,
                          llvm::ArrayRef<CachedObject> targets) {
  if (!isHex(key, 64))
    return;
  std::string manifest = "sha256 " + sha256Hex(object) + "\n";
  uint64_t size = object.size();
  for (const CachedObject &target : targets) {
    if (!llvm::all_of(target.name, isNameCharacter))
      return;
    manifest += "object " + target.sha256 + (target.name.empty() ? "" : " ") + target.name + "\n";
    size += target.bytes.size();
  }
  size += manifest.size();
  // An entry that cannot fit would only evict everything else and then itself.
  if (maxBytes && size > maxBytes)
    return;
  for (const CachedObject &target : targets)
    if (!isHex(target.sha256, 64) || !storeObject(objectsFd, target.sha256, target.bytes))
      return;
  if (!writeFile(hostFd, (key + ".o").str(), object) ||
      !writeFile(hostFd, (key + ".manifest").str(), manifest))
    return;
  evict();
}

std::optional<CachedObject> DiskCache::loadTarget(llvm::StringRef fingerprint) {
  if (!isHex(fingerprint, 64))
    return std::nullopt;
  std::optional<std::string> record = readFile(targetsFd, fingerprint.str());
  if (!record)
    return std::nullopt;
  // "sha256 <hex>": the object compiled from the module with this fingerprint.
  auto [kind, sha] = llvm::StringRef(*record).trim().split(' ');
  if (kind != "sha256" || !isHex(sha, 64)) {
    removeFile(targetsFd, fingerprint.str());
    return std::nullopt;
  }
  std::optional<std::string> bytes = loadObject(sha);
  if (!bytes)
    return std::nullopt;
  return CachedObject{sha.str(), std::move(*bytes)};
}

void DiskCache::storeTarget(llvm::StringRef fingerprint, const CachedObject &object) {
  if (!isHex(fingerprint, 64) || !isHex(object.sha256, 64))
    return;
  if (maxBytes && object.bytes.size() > maxBytes)
    return;
  if (!storeObject(objectsFd, object.sha256, object.bytes) ||
      !writeFile(targetsFd, fingerprint.str(), "sha256 " + object.sha256 + "\n"))
    return;
}

namespace {

struct CacheFile {
  int dirFd;
  std::string name;
  uint64_t size;
  struct timespec used;
};

/// The cached files under `dirFd`. Stale temporary files are deleted on the way; fresh ones
/// (a write under way) count towards the total but are not candidates for eviction.
void listFiles(int dirFd, std::vector<CacheFile> &files, uint64_t &total) {
  // A description of its own: a duplicate would share the read position with other users.
  int fd = ::openat(dirFd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return;
  DIR *listing = ::fdopendir(fd);
  if (!listing) {
    ::close(fd);
    return;
  }
  time_t now = ::time(nullptr);
  while (struct dirent *entry = ::readdir(listing)) {
    llvm::StringRef name(entry->d_name);
    if (name == "." || name == "..")
      continue;
    struct stat st;
    // Gone since the listing (another process evicted it): nothing to count.
    if (::fstatat(dirFd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (name.starts_with(kTempPrefix)) {
      if (now - st.st_mtim.tv_sec > kStaleTempSeconds)
        ::unlinkat(dirFd, entry->d_name, 0);
      else
        total += static_cast<uint64_t>(st.st_size);
      continue;
    }
    total += static_cast<uint64_t>(st.st_size);
    files.push_back({dirFd, name.str(), static_cast<uint64_t>(st.st_size), st.st_mtim});
  }
  ::closedir(listing);
}

} // namespace

void DiskCache::evict() {
  if (!maxBytes)
    return;
  std::vector<CacheFile> files;
  uint64_t total = 0;
  listFiles(hostFd, files, total);
  listFiles(objectsFd, files, total);
  listFiles(targetsFd, files, total);
  if (total <= maxBytes)
    return;
  std::sort(files.begin(), files.end(), [](const CacheFile &a, const CacheFile &b) {
    return std::tie(a.used.tv_sec, a.used.tv_nsec) < std::tie(b.used.tv_sec, b.used.tv_nsec);
  });
  for (const CacheFile &file : files) {
    if (total <= maxBytes)
      break;
    // Another process may have removed it first; either way it no longer counts. A reader
    // that already opened it keeps reading the old bytes.
    ::unlinkat(file.dirFd, file.name.c_str(), 0);
    total -= file.size;
  }
}

uint64_t DiskCache::totalBytes() {
  std::vector<CacheFile> files;
  uint64_t total = 0;
  listFiles(hostFd, files, total);
  listFiles(objectsFd, files, total);
  listFiles(targetsFd, files, total);
  return total;
}

} // namespace courier
