// The C runtime behind runtime/ExecutorABI.h: the session table, object tracking per
// session, descriptor marshalling, per-thread errors and module scopes.
#include "runtime/Runtime.h"

#include "abi/ContentHash.h"
#include "abi/KernelABI.h"
#include "abi/MemRef.h"
#include "transport/ErrorCode.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>

#include <sys/mman.h>

using namespace llvm;
using courier::transport::Backend;
using courier::transport::ObjectBlob;
using courier::transport::OwnedTensor;
using courier::transport::ResultSpec;
using courier::transport::TensorView;

namespace courier::runtime {

struct ModuleScope::State {
  ScopeOptions options;
  /// Names the scope in the object holds of sessions; never reused.
  uint64_t id = 0;
  /// Handles this scope opened; guarded by the registry's mutex.
  std::vector<int64_t> sessions;
  /// Guards `objects`; taken after a session's `objectsMutex` when both are held.
  std::mutex objectsMutex;
  /// (session handle, SHA-256) of every object this scope holds.
  std::vector<std::pair<int64_t, std::string>> objects;
  /// options.objects, hashed once.
  StringMap<std::shared_ptr<const ObjectBlob>> inMemory;
};

namespace {

constexpr llvm::StringLiteral kEntryPrefix = COURIER_ENTRY_PREFIX;

/// A failure recorded for the calling thread: its message, and its code when the failure
/// came with one (an executor's or the transport's), so the engine can tell kinds apart.
struct RecordedError {
  std::optional<transport::ErrorCode> code;
  std::string message;
};
thread_local std::optional<RecordedError> firstError;
thread_local ModuleScope *activeScope = nullptr;
thread_local ModuleScope::State *activeState = nullptr;

void recordError(std::string message) {
  if (!firstError)
    firstError = RecordedError{std::nullopt, std::move(message)};
}

/// Records `error` with its code, if it has one.
void recordError(Error error) {
  std::optional<transport::ErrorCode> code;
  std::string message;
  handleAllErrors(
      std::move(error),
      [&](const transport::CodedError &e) {
        if (!code)
          code = e.kind;
        message += (message.empty() ? "" : "\n") + e.message;
      },
      [&](const ErrorInfoBase &e) { message += (message.empty() ? "" : "\n") + e.message(); });
  if (!firstError)
    firstError = RecordedError{code, std::move(message)};
}

/// Records `error` after "`context`: ", keeping its code.
void recordError(const Twine &context, Error error) {
  recordError(transport::withContext(context, std::move(error)));
}

/// Runs an ABI entry point: whatever escapes it (an llvm::Error turned into a message, or
/// any C++ exception) becomes the thread's recorded error and `failed` is returned.
template <typename T, typename Body> T guarded(T failed, const char *operation, Body &&body) {
  try {
    return body();
  } catch (const std::exception &e) {
    recordError(formatv("{0}: {1}", operation, e.what()).str());
  } catch (...) {
    recordError(formatv("{0}: unknown exception", operation).str());
  }
  return failed;
}

/// Who keeps an object loaded in a session: scopes that shipped (or launched) it, or
/// nobody in particular when it was shipped with no scope active, in which case it stays
/// until the session closes.
struct ObjectHolds {
  bool pinned = false;
  SmallVector<uint64_t, 2> scopes;
};

struct Session {
  int64_t handle = 0;
  std::string address;
  std::unique_ptr<Backend> backend;
  std::string id;

  /// Guards `byPath` and `holds`.
  std::shared_mutex objectsMutex;
  StringMap<std::shared_ptr<const ObjectBlob>> byPath;
  /// Objects the session holds on the executor, by SHA-256.
  StringMap<ObjectHolds> holds;
  /// Serializes shipping an object not yet held with releasing one, so a release never
  /// overtakes a ship of the same object on its way to the executor.
  std::mutex shipMutex;

  /// Ownership, guarded by the registry's mutex: opened outside any scope (lives until
  /// close or exit), and how many live scopes opened it.
  bool pinned = false;
  int scopes = 0;
};

struct PendingLaunch {
  std::shared_ptr<Session> session;
  uint64_t launchId = 0;
  /// The launch's entry symbol and object, for messages in the user's terms.
  std::string entry, object;
};

class Registry {
public:
  /// Never destroyed: an atexit handler closes the sessions instead, so ABI calls from
  /// threads still running during exit find a valid (empty) table.
  static Registry &get() {
    static Registry *registry = new Registry();
    return *registry;
  }

  std::shared_ptr<Session> find(int64_t handle) {
    std::shared_lock<std::shared_mutex> lock(mutex);
    auto found = byHandle.find(handle);
    return found == byHandle.end() ? nullptr : found->second;
  }

  Expected<int64_t> open(StringRef requested) {
    ModuleScope::State *scope = activeState;
    std::string address = scope && !scope->options.addressOverride.empty()
                              ? scope->options.addressOverride
                              : requested.str();
    // Opens are serialized so two threads opening one address share one session; the
    // table lock is not held while connecting, so launches elsewhere go on meanwhile.
    std::lock_guard<std::mutex> opening(openMutex);
    {
      std::unique_lock<std::shared_mutex> lock(mutex);
      auto found = byAddress.find(address);
      if (found != byAddress.end()) {
        attribute(*found->second, scope);
        return found->second->handle;
      }
    }
    auto backend = transport::createBackend(address, scope ? scope->options.backend
                                                           : transport::BackendOptions());
    if (!backend)
      return backend.takeError();
    auto id = (*backend)->openSession();
    if (!id)
      return id.takeError();
    auto session = std::make_shared<Session>();
    session->address = address;
    session->backend = std::move(*backend);
    session->id = std::move(*id);
    {
      std::unique_lock<std::shared_mutex> lock(mutex);
      session->handle = nextHandle++;
      byAddress[address] = session;
      byHandle[session->handle] = session;
      attribute(*session, scope);
    }
    // Registered after the first backend exists, so the handler runs before the static
    // destructors of whatever that backend's libraries set up.
    static bool exitHandler = (std::atexit(closeAllAtExit), true);
    (void)exitHandler;
    return session->handle;
  }

  /// Removes `handle` from the table; the session closes once in-flight calls end.
  std::shared_ptr<Session> remove(int64_t handle) {
    std::unique_lock<std::shared_mutex> lock(mutex);
    auto found = byHandle.find(handle);
    if (found == byHandle.end())
      return nullptr;
    std::shared_ptr<Session> session = std::move(found->second);
    byHandle.erase(found);
    byAddress.erase(session->address);
    return session;
  }

  void releaseScope(ModuleScope::State &scope) {
    releaseObjects(scope);
    std::vector<std::shared_ptr<Session>> closing;
    {
      std::unique_lock<std::shared_mutex> lock(mutex);
      for (int64_t handle : scope.sessions) {
        auto found = byHandle.find(handle);
        if (found == byHandle.end())
          continue;
        std::shared_ptr<Session> session = found->second;
        if (--session->scopes > 0 || session->pinned)
          continue;
        byHandle.erase(found);
        byAddress.erase(session->address);
        closing.push_back(std::move(session));
      }
      scope.sessions.clear();
    }
    for (auto &session : closing)
      shutDown(*session);
  }

  /// Ends the scope's holds; objects no other scope holds (and not pinned) are released on
  /// the executor. Runs before the scope's sessions close, so each release is explicit.
  void releaseObjects(ModuleScope::State &scope) {
    std::vector<std::pair<int64_t, std::string>> objects;
    {
      std::lock_guard<std::mutex> lock(scope.objectsMutex);
      objects.swap(scope.objects);
    }
    for (const auto &[handle, sha] : objects) {
      std::shared_ptr<Session> session = find(handle);
      if (!session)
        continue; // Closed already; the executor dropped everything it held.
      std::lock_guard<std::mutex> shipping(session->shipMutex);
      {
        std::unique_lock<std::shared_mutex> lock(session->objectsMutex);
        auto held = session->holds.find(sha);
        if (held == session->holds.end())
          continue;
        llvm::erase(held->second.scopes, scope.id);
        if (!held->second.scopes.empty() || held->second.pinned)
          continue;
        session->holds.erase(held);
        // A later launch naming one of these paths reads and ships the file again.
        for (auto path = session->byPath.begin(); path != session->byPath.end();) {
          auto current = path++;
          if (current->second->sha256 == sha)
            session->byPath.erase(current);
        }
      }
      try {
        consumeError(session->backend->releaseObject(session->id, sha));
      } catch (...) {
        // As for closing: nobody is left to report to, and the session's close frees it.
      }
    }
  }

  int64_t addToken(std::shared_ptr<Session> session, uint64_t launchId, std::string entry,
                   std::string object) {
    std::unique_lock<std::shared_mutex> lock(mutex);
    int64_t token = nextToken++;
    tokens[token] =
        PendingLaunch{std::move(session), launchId, std::move(entry), std::move(object)};
    return token;
  }

  std::optional<PendingLaunch> takeToken(int64_t token) {
    std::unique_lock<std::shared_mutex> lock(mutex);
    auto found = tokens.find(token);
    if (found == tokens.end())
      return std::nullopt;
    PendingLaunch launch = std::move(found->second);
    tokens.erase(found);
    return launch;
  }

  /// Tells the executor the session is over. Nobody is left to report a failure to (a
  /// scope being destroyed, process exit), and an executor drops sessions on restart anyway.
  static void shutDown(Session &session) {
    try {
      consumeError(session.backend->closeSession(session.id));
    } catch (...) {
    }
  }

private:
  Registry() = default;

  /// Called with `mutex` held.
  static void attribute(Session &session, ModuleScope::State *scope) {
    if (!scope) {
      session.pinned = true;
      return;
    }
    if (std::find(scope->sessions.begin(), scope->sessions.end(), session.handle) !=
        scope->sessions.end())
      return;
    scope->sessions.push_back(session.handle);
    ++session.scopes;
  }

  static void closeAllAtExit() {
    Registry &registry = get();
    std::vector<std::shared_ptr<Session>> closing;
    {
      std::unique_lock<std::shared_mutex> lock(registry.mutex);
      for (auto &entry : registry.byHandle)
        closing.push_back(entry.second);
      registry.byHandle.clear();
      registry.byAddress.clear();
      registry.tokens.clear();
    }
    for (auto &session : closing)
      shutDown(*session);
  }

  std::mutex openMutex;
  std::shared_mutex mutex;
  std::map<std::string, std::shared_ptr<Session>> byAddress;
  std::unordered_map<int64_t, std::shared_ptr<Session>> byHandle;
  std::unordered_map<int64_t, PendingLaunch> tokens;
  int64_t nextHandle = 1;
  int64_t nextToken = 1;
};

std::string unknownSession(int64_t handle) {
  return formatv("unknown session handle {0}", handle).str();
}

/// Why `format` cannot be shipped, or empty when it can.
std::string unsupportedFormat(uint32_t format) {
  if (format == COURIER_BINARY_FORMAT_OBJECT)
    return "";
  if (format == 1)
    return "format 1 (a data asset) is not supported; executors load relocatable ELF "
           "objects (format 0)";
  return formatv("unknown binary format {0}; executors load relocatable ELF objects (format 0)",
                 format)
      .str();
}

/// Whether a result descriptor was filled in by Courier's lowering with the expected shape.
bool carriesExpectedShape(abi::MemRefView descriptor) {
  return !descriptor.allocated() && reinterpret_cast<uintptr_t>(descriptor.aligned()) ==
                                        static_cast<uintptr_t>(COURIER_EXPECTED_SHAPE_MARKER);
}

bool isHolder(const ObjectHolds &holds, const ModuleScope::State *scope) {
  return scope ? llvm::is_contained(holds.scopes, scope->id) : holds.pinned;
}

/// Records that the active scope (or, with none, the session itself) holds `sha`. Called
/// with the session's `objectsMutex` held exclusively.
void addHolder(Session &session, ObjectHolds &holds, StringRef sha, ModuleScope::State *scope) {
  if (isHolder(holds, scope))
    return;
  if (!scope) {
    holds.pinned = true;
    return;
  }
  holds.scopes.push_back(scope->id);
  std::lock_guard<std::mutex> lock(scope->objectsMutex);
  scope->objects.emplace_back(session.handle, sha.str());
}

/// Reads and ships the object at `path` unless the session already holds those bytes,
/// counts the active scope among its holders, and remembers the path so launches can name
/// the object by it.
/// The object named `path`: the active scope's copy if it holds one, else the file's bytes,
/// refused if the file's name claims a hash they do not have.
Expected<std::shared_ptr<const ObjectBlob>> readObject(StringRef path) {
  if (activeState)
    if (auto held = activeState->inMemory.find(path); held != activeState->inMemory.end())
      return held->second;
  auto buffer = MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!buffer)
    return createStringError(buffer.getError(),
                             "reading '" + path + "': " + buffer.getError().message());
  auto blob =
      std::make_shared<const ObjectBlob>(ObjectBlob::fromBytes((*buffer)->getBuffer().str()));
  if (StringRef claimed = claimedContentHash(path); !claimed.empty() && claimed != blob->sha256)
    return createStringError(
        formatv("'{0}' is named by the SHA-256 of an object, but its bytes hash to {1}: "
                "refusing a replaced or damaged object",
                path, blob->sha256)
            .str());
  return blob;
}

/// The object the active scope holds under `path`, or null. Such a name means the scope's
/// own copy, whatever it means to another scope (two versions of one module name their
/// kernels alike while both are loaded), so it is found by the copy's hash, never by name.
std::shared_ptr<const ObjectBlob> scopeObject(StringRef path) {
  if (!activeState)
    return nullptr;
  auto held = activeState->inMemory.find(path);
  return held == activeState->inMemory.end() ? nullptr : held->second;
}

Expected<std::shared_ptr<const ObjectBlob>> sendObject(Session &session, StringRef path) {
  Expected<std::shared_ptr<const ObjectBlob>> read = readObject(path);
  if (!read)
    return read.takeError();
  std::shared_ptr<const ObjectBlob> blob = std::move(*read);
  ModuleScope::State *scope = activeState;
  // Launches find a scope's own objects through the scope; `byPath` is for files.
  bool remember = !scopeObject(path);
  // Held already: one more holder needs no shipping, and a release cannot be under way,
  // since a release first removes the entry under this lock.
  auto addIfHeld = [&] {
    std::unique_lock<std::shared_mutex> lock(session.objectsMutex);
    auto held = session.holds.find(blob->sha256);
    if (held == session.holds.end())
      return false;
    addHolder(session, held->second, blob->sha256, scope);
    if (remember)
      session.byPath[path] = blob;
    return true;
  };
  if (addIfHeld())
    return blob;
  // Shipping holds only the ship lock: a slow upload must not stall launches.
  std::lock_guard<std::mutex> shipping(session.shipMutex);
  if (addIfHeld())
    return blob;
  if (Error error = session.backend->shipObject(session.id, *blob))
    return std::move(error);
  std::unique_lock<std::shared_mutex> lock(session.objectsMutex);
  addHolder(session, session.holds[blob->sha256], blob->sha256, scope);
  if (remember)
    session.byPath[path] = blob;
  return blob;
}

/// What a launch or a ship of a scope's own object does: a lookup when the session holds it
/// for the scope already, else what sendObject does (a holder more, or the bytes shipped).
Expected<std::shared_ptr<const ObjectBlob>> useScopeObject(Session &session, StringRef path,
                                                           std::shared_ptr<const ObjectBlob> blob) {
  {
    std::shared_lock<std::shared_mutex> lock(session.objectsMutex);
    auto held = session.holds.find(blob->sha256);
    if (held != session.holds.end() && isHolder(held->second, activeState))
      return blob;
  }
  return sendObject(session, path);
}

/// The object a launch names by `path`: the one last sent from there, shipped first if it
/// never was (or was released since). A launch from a scope that does not hold the object
/// yet makes it a holder, so the object stays while that scope's module may launch it.
Expected<std::shared_ptr<const ObjectBlob>> objectFor(Session &session, StringRef path) {
  if (std::shared_ptr<const ObjectBlob> own = scopeObject(path))
    return useScopeObject(session, path, std::move(own));
  ModuleScope::State *scope = activeState;
  {
    std::shared_lock<std::shared_mutex> lock(session.objectsMutex);
    auto found = session.byPath.find(path);
    if (found != session.byPath.end()) {
      auto held = session.holds.find(found->second->sha256);
      // With no scope active the launch only borrows the object, whoever holds it.
      if (held != session.holds.end() && (!scope || isHolder(held->second, scope)))
        return found->second;
    }
  }
  {
    std::unique_lock<std::shared_mutex> lock(session.objectsMutex);
    auto found = session.byPath.find(path);
    if (found != session.byPath.end()) {
      auto held = session.holds.find(found->second->sha256);
      if (held != session.holds.end()) {
        if (scope)
          addHolder(session, held->second, found->second->sha256, scope);
        return found->second;
      }
    }
  }
  return sendObject(session, path);
}

/// What send_binary does: ships the object at `path` and makes the active scope (or, with
/// none, the session) a holder. A scope's in-memory object, or a path named by its SHA-256,
/// already sent over the session is a lookup, since its bytes cannot have changed: lowered
/// code ships at the top of every launching function. Any other path is read again, so a
/// rebuilt object at a fixed path is shipped anew.
Expected<std::shared_ptr<const ObjectBlob>> shipOrFind(Session &session, StringRef path) {
  if (std::shared_ptr<const ObjectBlob> own = scopeObject(path))
    return useScopeObject(session, path, std::move(own));
  ModuleScope::State *scope = activeState;
  if (claimedContentHash(path).empty())
    return sendObject(session, path);
  auto heldFrom = [&](StringMap<std::shared_ptr<const ObjectBlob>>::iterator found) {
    return found == session.byPath.end() ? session.holds.end()
                                         : session.holds.find(found->second->sha256);
  };
  {
    std::shared_lock<std::shared_mutex> lock(session.objectsMutex);
    auto found = session.byPath.find(path);
    auto held = heldFrom(found);
    if (held != session.holds.end() && isHolder(held->second, scope))
      return found->second;
  }
  {
    std::unique_lock<std::shared_mutex> lock(session.objectsMutex);
    auto found = session.byPath.find(path);
    auto held = heldFrom(found);
    if (held != session.holds.end()) {
      addHolder(session, held->second, found->second->sha256, scope);
      return found->second;
    }
  }
  return sendObject(session, path);
}

std::string entryName(StringRef entry) {
  // A bare function name is never a pyface entry; calling it with the pyface convention
  // would pass the wrong arguments, so it is taken to mean its entry.
  return entry.starts_with(kEntryPrefix) ? entry.str() : (kEntryPrefix + entry).str();
}

/// Bounds on what a launch's argument arrays may describe: beyond them the arrays are not
/// what lowered host code passes.
constexpr size_t kMaxLaunchTensors = 1 << 16;
constexpr size_t kMaxRank = 1 << 10;
constexpr size_t kMaxElementBytes = 1 << 10;

/// Host code compiled for an identity layout ignores result strides, so a strided result
/// is made contiguous here.
Error makeRowMajor(OwnedTensor &tensor) {
  if (abi::isRowMajor(tensor.sizes, tensor.strides))
    return Error::success();
  int64_t count = abi::elementCount(tensor.sizes);
  char *copy = static_cast<char *>(std::malloc(std::max<int64_t>(1, count * tensor.elemSize)));
  if (!copy)
    return createStringError(inconvertibleErrorCode(), "out of memory making a result contiguous");
  abi::copyRowMajor(tensor.data, tensor.elemSize, tensor.sizes, tensor.strides, copy);
  std::vector<int64_t> strides(tensor.sizes.size());
  abi::rowMajorStrides(tensor.sizes, strides);
  tensor = OwnedTensor(copy, copy, tensor.elemSize, tensor.sizes, std::move(strides));
  return Error::success();
}

std::string shape(ArrayRef<int64_t> sizes) {
  std::string text = "[";
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (d)
      text += ", ";
    text += sizes[d] < 0 ? std::string("?") : std::to_string(sizes[d]);
  }
  return text + "]";
}

/// A read-only gigabyte of zeros, reserved once and never freed, that results point into when
/// their size is unknown (host code that did not say) or their buffer could not be
/// allocated: reads see zeros, and a write faults instead of corrupting memory. Null if it
/// could not be reserved.
constexpr size_t kZeroRegionBytes = size_t(1) << 30;
char *zeroRegion() {
  static char *region = [] {
    void *mapped = mmap(nullptr, kZeroRegionBytes, PROT_READ,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return mapped == MAP_FAILED ? nullptr : static_cast<char *>(mapped);
  }();
  return region;
}

bool inZeroRegion(const void *pointer) {
  const char *region = zeroRegion(), *at = static_cast<const char *>(pointer);
  return region && at >= region && at < region + kZeroRegionBytes;
}

/// The bytes of `count` elements of `elemSize` bytes, or nothing on overflow.
std::optional<int64_t> byteCount(ArrayRef<int64_t> sizes, int64_t elemSize) {
  int64_t bytes = elemSize;
  for (int64_t size : sizes)
    if (size < 0 || llvm::MulOverflow(bytes, size, bytes))
      return std::nullopt;
  return bytes;
}

/// Gives every result a zero-filled buffer of its static shape (dynamic dimensions 0), so
/// host code reading results after a failure sees zeros rather than garbage.
void fillZeroResults(size_t count, void *const *descriptors, const size_t *ranks,
                     const size_t *elemSizes) {
  if (count == 0 || count > kMaxLaunchTensors || !descriptors || !ranks || !elemSizes)
    return;
  for (size_t i = 0; i < count; ++i) {
    if (!descriptors[i] || ranks[i] > kMaxRank)
      continue;
    abi::MutableMemRefView d(descriptors[i], ranks[i]);
    // Without the marker the sizes are whatever the caller's stack held: unknown.
    bool known = carriesExpectedShape(abi::MemRefView(descriptors[i], ranks[i]));
    SmallVector<int64_t, 4> sizes;
    for (int64_t size : d.sizes())
      sizes.push_back(known ? std::max<int64_t>(0, size) : 0);
    std::optional<int64_t> bytes =
        byteCount(sizes, std::max<int64_t>(1, static_cast<int64_t>(elemSizes[i])));
    void *buffer = known && bytes ? std::calloc(std::max<int64_t>(1, *bytes), 1) : nullptr;
    d.fill(buffer, buffer ? buffer : zeroRegion(), 0, sizes, abi::rowMajorStrides(sizes));
  }
}

Error failure(const Twine &message) { return createStringError(inconvertibleErrorCode(), message); }

/// `cause` after "`context`: ", keeping its code.
Error failure(const Twine &context, Error cause) {
  return transport::withContext(context, std::move(cause));
}

/// `cause` of a launch of `entry` in `object`, told in the user's terms: the backends and
/// executors below name the kernel by the entry symbol this runtime gave them
/// ('_catalyst_pyface_boom'), where the user wrote @dev::@boom. Each quoted mention of that
/// symbol becomes the kernel's name (kernelName); the code, and every other word, stay.
Error inUserTerms(Error cause, StringRef entry, StringRef object) {
  std::string quoted = ("'" + entry + "'").str();
  std::string name = kernelName(entry, object);
  auto rename = [&](std::string text) {
    for (size_t at = text.find(quoted); at != std::string::npos;
         at = text.find(quoted, at + name.size())) {
      text.replace(at, quoted.size(), name);
    }
    return text;
  };
  return handleErrors(
      std::move(cause),
      [&](std::unique_ptr<transport::CodedError> e) -> Error {
        return transport::makeCodedError(e->kind, rename(e->message));
      },
      [&](std::unique_ptr<ErrorInfoBase> e) -> Error { return failure(rename(e->message())); });
}

/// A launch in progress, for crash reports (kernelInFlight): the pointers are the launch's
/// arguments, valid while it runs.
struct LaunchInFlight {
  const char *entry;
  const char *object;
};
thread_local const LaunchInFlight *threadLaunch = nullptr;
std::atomic<const LaunchInFlight *> latestLaunch{nullptr};

/// Records a launch while it runs: two stores and two loads, next to a kernel call.
class LaunchRecord {
public:
  LaunchRecord(const char *entry, const char *object) : launch{entry, object} {
    previous = threadLaunch;
    threadLaunch = &launch;
    latestLaunch.store(&launch, std::memory_order_release);
  }
  ~LaunchRecord() {
    threadLaunch = previous;
    const LaunchInFlight *self = &launch;
    latestLaunch.compare_exchange_strong(self, previous, std::memory_order_acq_rel);
  }
  LaunchRecord(const LaunchRecord &) = delete;
  LaunchRecord &operator=(const LaunchRecord &) = delete;

private:
  LaunchInFlight launch;
  const LaunchInFlight *previous;
};

/// kernelName's text for `entry` and `object` into `out` (at most `size` bytes with the NUL),
/// with no allocation: it runs in signal handlers too.
void writeKernelName(const char *entry, const char *object, char *out, size_t size) {
  size_t n = 0;
  auto put = [&](const char *begin, const char *end) {
    for (const char *c = begin; c != end && n + 1 < size; ++c)
      out[n++] = *c;
  };
  auto end = [](const char *text) { return text + std::strlen(text); };
  auto say = [&](const char *text) { put(text, end(text)); };
  static constexpr char kTarget[] = "target:";
  if (std::strncmp(object, kTarget, sizeof(kTarget) - 1) == 0)
    if (const char *dash = std::strchr(object, '-')) {
      say("@");
      say(dash + 1);
      say("::");
    }
  say("@");
  size_t prefix = std::strlen(COURIER_ENTRY_PREFIX);
  put(std::strncmp(entry, COURIER_ENTRY_PREFIX, prefix) == 0 ? entry + prefix : entry, end(entry));
  if (size)
    out[n] = 0;
}

/// Views of the launch's `n` input descriptors in `views`, or what is wrong with one.
std::string readInputViews(size_t n, void *const *descs, const size_t *ranks,
                           const size_t *elemSizes, std::vector<TensorView> &views) {
  views.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (!descs[i] || ranks[i] > kMaxRank || elemSizes[i] == 0 || elemSizes[i] > kMaxElementBytes)
      return formatv("input {0} has no descriptor, rank {1} or element size {2}", i, ranks[i],
                     elemSizes[i]);
    abi::MemRefView d(descs[i], ranks[i]);
    auto elemSize = static_cast<int64_t>(elemSizes[i]);
    TensorView &view = views[i];
    view.data = d.data(elemSize);
    view.elemSize = elemSize;
    view.sizes.assign(d.sizes().begin(), d.sizes().end());
    view.strides.assign(d.strides().begin(), d.strides().end());
    if (!byteCount(view.sizes, elemSize))
      return formatv("input {0} has shape {1}: a negative size, or more bytes than 64 bits count",
                     i, shape(view.sizes));
  }
  return "";
}

/// What is wrong with result `i` for the caller's descriptor `desc` of `rank` and
/// `elemSize` (and the shape it expects, when it carries one), or nothing.
std::string resultMismatch(size_t i, const OwnedTensor &tensor, void *desc, size_t rank,
                           size_t elemSize) {
  abi::MemRefView descriptor(desc, rank);
  // Host code lowered without the marker says nothing about the shape but its rank.
  SmallVector<int64_t, 4> expected(rank, -1);
  if (carriesExpectedShape(descriptor))
    expected.assign(descriptor.sizes().begin(), descriptor.sizes().end());
  bool matches = tensor.sizes.size() == rank && tensor.strides.size() == tensor.sizes.size() &&
                 tensor.elemSize == static_cast<int64_t>(elemSize);
  for (size_t d = 0; matches && d < expected.size(); ++d)
    matches = expected[d] < 0 || expected[d] == tensor.sizes[d];
  if (matches)
    return "";
  return formatv("result {0} has shape {1} of {2}-byte elements, expected {3} of {4}-byte "
                 "elements",
                 i, shape(tensor.sizes), tensor.elemSize, shape(expected), elemSize);
}

/// The body of __catalyst__executor__launch; on success every result descriptor is filled,
/// on failure none is touched.
Error launchImpl(int64_t handle, const char *entryArg, const char *object, size_t nIn,
                 void *const *inDescs, const size_t *inRanks, const size_t *inElemSizes,
                 size_t nOut, void *const *outDescs, const size_t *outRanks,
                 const size_t *outElemSizes) {
  if (!entryArg || !object)
    return failure("launch: null entry or object path");
  std::string prefixed;
  StringRef entry = entryArg;
  if (!entry.starts_with(kEntryPrefix)) {
    prefixed = entryName(entry);
    entry = prefixed;
  }
  // The context of an error message is only formatted when there is an error: launches are
  // meant to cost little more than the kernel call.
  std::shared_ptr<Session> session;
  auto where = [&] {
    std::string text = "launch of " + kernelName(entry, object);
    if (session)
      text += " on '" + session->address + "'";
    return text;
  };
  if (nIn > kMaxLaunchTensors || nOut > kMaxLaunchTensors ||
      (nIn > 0 && (!inDescs || !inRanks || !inElemSizes)) ||
      (nOut > 0 && (!outDescs || !outRanks || !outElemSizes)))
    return failure(where() + ": malformed argument arrays");

  // Views are reused per thread so a steady stream of launches allocates nothing here.
  thread_local std::vector<TensorView> views;
  if (std::string wrong = readInputViews(nIn, inDescs, inRanks, inElemSizes, views); !wrong.empty())
    return failure(where() + ": " + wrong);
  SmallVector<ResultSpec, 4> specs;
  for (size_t i = 0; i < nOut; ++i) {
    if (!outDescs[i] || outRanks[i] > kMaxRank || outElemSizes[i] == 0 ||
        outElemSizes[i] > kMaxElementBytes)
      return failure(formatv("{0}: result {1} has no descriptor, rank {2} or element size {3}",
                             where(), i, outRanks[i], outElemSizes[i]));
    specs.push_back(
        ResultSpec{static_cast<int64_t>(outRanks[i]), static_cast<int64_t>(outElemSizes[i])});
  }

  session = Registry::get().find(handle);
  if (!session)
    return failure(where() + ": " + unknownSession(handle));
  auto blob = objectFor(*session, object);
  if (!blob)
    return failure(where(), blob.takeError());
  auto results = [&] {
    LaunchRecord record(entryArg, object);
    return session->backend->launch(session->id, **blob, entry, views, specs);
  }();
  if (!results)
    return failure(where(), inUserTerms(results.takeError(), entry, object));

  if (results->size() != nOut)
    return failure(formatv("{0}: the executor returned {1} results, expected {2}", where(),
                           results->size(), nOut));
  for (size_t i = 0; i < nOut; ++i) {
    OwnedTensor &tensor = (*results)[i];
    if (std::string wrong = resultMismatch(i, tensor, outDescs[i], outRanks[i], outElemSizes[i]);
        !wrong.empty())
      return failure(where() + ": " + wrong);
    if (Error error = makeRowMajor(tensor))
      return failure(where(), std::move(error));
  }
  for (size_t i = 0; i < nOut; ++i) {
    OwnedTensor &tensor = (*results)[i];
    void *data = tensor.data;
    abi::MutableMemRefView(outDescs[i], outRanks[i])
        .fill(tensor.release(), data, 0, tensor.sizes, tensor.strides);
  }
  return Error::success();
}

Expected<std::string> callImpl(int64_t handle, const char *sym, const void *args, int64_t argsSize,
                               int64_t outSize) {
  if (!sym)
    return failure("call: null symbol");
  std::string where = formatv("call '{0}'", sym).str();
  if (argsSize < 0 || (argsSize > 0 && !args) || outSize < 0)
    return failure(
        formatv("{0}: bad sizes (input {1} bytes, reply {2} bytes)", where, argsSize, outSize));
  std::shared_ptr<Session> session = Registry::get().find(handle);
  if (!session)
    return failure(where + ": " + unknownSession(handle));
  where += " on '" + session->address + "'";
  auto reply = session->backend->call(
      session->id, sym, StringRef(static_cast<const char *>(args), argsSize), outSize);
  if (!reply)
    return failure(where, reply.takeError());
  if (int64_t(reply->size()) != outSize)
    return failure(
        formatv("{0}: the reply has {1} bytes, expected {2}", where, reply->size(), outSize));
  return reply;
}

} // namespace

std::string kernelName(StringRef entry, StringRef object) {
  std::string entryText = entry.str(), objectText = object.str();
  std::string name(entryText.size() + objectText.size() + 6, '\0');
  writeKernelName(entryText.c_str(), objectText.c_str(), name.data(), name.size());
  name.resize(std::strlen(name.c_str()));
  return name;
}

bool kernelInFlight(char *buffer, size_t size) {
  const LaunchInFlight *launch = threadLaunch;
  if (!launch)
    launch = latestLaunch.load(std::memory_order_acquire);
  if (!launch || size == 0)
    return false;
  writeKernelName(launch->entry, launch->object, buffer, size);
  return true;
}

ModuleScope::ModuleScope(ScopeOptions options) : state(std::make_shared<State>()) {
  static std::atomic<uint64_t> nextId{1};
  state->options = std::move(options);
  state->id = nextId++;
  for (auto &[name, bytes] : state->options.objects)
    state->inMemory[name] =
        std::make_shared<const ObjectBlob>(ObjectBlob::fromBytes(std::move(bytes)));
  state->options.objects.clear(); // Held once, in inMemory.
}

ModuleScope::~ModuleScope() {
  try {
    Registry::get().releaseScope(*state);
  } catch (...) {
    // A destructor must not throw; the sessions then stay open until exit.
  }
}

ModuleScope::Entered::Entered(ModuleScope &scope) : previous(activeScope) {
  activeScope = &scope;
  activeState = scope.state.get();
}

ModuleScope::Entered::~Entered() {
  activeScope = previous;
  activeState = previous ? previous->state.get() : nullptr;
}

void clearError() { firstError.reset(); }

Error takeError() {
  if (!firstError)
    return Error::success();
  RecordedError recorded = std::move(*firstError);
  firstError.reset();
  if (recorded.code)
    return transport::makeCodedError(*recorded.code, recorded.message);
  return createStringError(inconvertibleErrorCode(), recorded.message);
}

ArrayRef<AbiSymbol> abiSymbols() {
  static const AbiSymbol symbols[] = {
      {"__catalyst__executor__open", reinterpret_cast<void *>(&__catalyst__executor__open)},
      {"__catalyst__executor__send_binary",
       reinterpret_cast<void *>(&__catalyst__executor__send_binary)},
      {"__catalyst__executor__launch", reinterpret_cast<void *>(&__catalyst__executor__launch)},
      {"__catalyst__executor__launch_async",
       reinterpret_cast<void *>(&__catalyst__executor__launch_async)},
      {"__catalyst__executor__await", reinterpret_cast<void *>(&__catalyst__executor__await)},
      {"__catalyst__executor__call_wrapper",
       reinterpret_cast<void *>(&__catalyst__executor__call_wrapper)},
      {"__catalyst__executor__free_result",
       reinterpret_cast<void *>(&__catalyst__executor__free_result)},
      {"__catalyst__executor__close", reinterpret_cast<void *>(&__catalyst__executor__close)},
  };
  return symbols;
}

} // namespace courier::runtime

using namespace courier::runtime;

extern "C" {

int64_t __catalyst__executor__open(const char *address) {
  return guarded<int64_t>(0, "open", [&]() -> int64_t {
    if (!address) {
      recordError("open: null address");
      return 0;
    }
    auto handle = Registry::get().open(address);
    if (!handle) {
      recordError("open '" + Twine(address) + "'", handle.takeError());
      return 0;
    }
    return *handle;
  });
}

int64_t __catalyst__executor__send_binary(int64_t session, const char *path, uint32_t format) {
  return guarded<int64_t>(1, "send_binary", [&]() -> int64_t {
    if (!path) {
      recordError("send_binary: null path");
      return 1;
    }
    // The object is named where a failure is about it: by the executor, or by the read.
    std::string where = "send_binary";
    if (std::string why = unsupportedFormat(format); !why.empty()) {
      recordError(where + ": " + why);
      return 1;
    }
    std::shared_ptr<Session> found = Registry::get().find(session);
    if (!found) {
      recordError(where + ": " + unknownSession(session));
      return 1;
    }
    auto blob = shipOrFind(*found, path);
    if (!blob) {
      recordError(where + " to '" + found->address + "'", blob.takeError());
      return 1;
    }
    return 0;
  });
}

void __catalyst__executor__launch(int64_t session, const char *entry, const char *object,
                                  size_t num_inputs, void *const *input_descs,
                                  const size_t *input_ranks, const size_t *input_elem_sizes,
                                  size_t num_outputs, void *const *output_descs,
                                  const size_t *output_ranks, const size_t *output_elem_sizes) {
  int32_t status = guarded<int32_t>(1, "launch", [&]() -> int32_t {
    Error error =
        launchImpl(session, entry, object, num_inputs, input_descs, input_ranks, input_elem_sizes,
                   num_outputs, output_descs, output_ranks, output_elem_sizes);
    if (!error)
      return 0;
    recordError(std::move(error));
    return 1;
  });
  if (status != 0)
    guarded<int>(0, "launch", [&] {
      fillZeroResults(num_outputs, output_descs, output_ranks, output_elem_sizes);
      return 0;
    });
}

int64_t __catalyst__executor__launch_async(int64_t session, const char *entry, const char *object) {
  return guarded<int64_t>(0, "launch_async", [&]() -> int64_t {
    if (!entry || !object) {
      recordError("launch_async: null entry or object path");
      return 0;
    }
    std::string name = entryName(entry);
    std::string where = "launch_async of " + kernelName(name, object);
    std::shared_ptr<Session> found = Registry::get().find(session);
    if (!found) {
      recordError(where + ": " + unknownSession(session));
      return 0;
    }
    where += " on '" + found->address + "'";
    auto blob = objectFor(*found, object);
    if (!blob) {
      recordError(where, blob.takeError());
      return 0;
    }
    auto launchId = found->backend->launchAsync(found->id, **blob, name);
    if (!launchId) {
      recordError(where, inUserTerms(launchId.takeError(), name, object));
      return 0;
    }
    return Registry::get().addToken(std::move(found), *launchId, name, object);
  });
}

void __catalyst__executor__await(int64_t token) {
  guarded<int32_t>(1, "await", [&]() -> int32_t {
    auto launch = Registry::get().takeToken(token);
    if (!launch) {
      // A failed launch_async returned 0 and recorded why; awaiting it adds nothing.
      if (token != 0)
        recordError(formatv("await: unknown token {0} (never issued or already awaited)", token));
      return 1;
    }
    if (Error error = launch->session->backend->await(launch->session->id, launch->launchId)) {
      recordError(formatv("await of token {0} ({1}) on '{2}'", token,
                          kernelName(launch->entry, launch->object), launch->session->address),
                  inUserTerms(std::move(error), launch->entry, launch->object));
      return 1;
    }
    return 0;
  });
}

int32_t __catalyst__executor__call_wrapper(int64_t session, const char *symbol,
                                           const char *args_buf, size_t args_size, void **out_buf,
                                           size_t *out_size) {
  if (!out_buf || !out_size) {
    recordError("call: null reply pointers");
    return 1;
  }
  // Only Courier's lowering says how big the reply must be; without it nothing is known.
  bool sized = reinterpret_cast<intptr_t>(*out_buf) == COURIER_EXPECTED_SHAPE_MARKER;
  size_t expected = sized ? *out_size : 0;
  *out_buf = nullptr;
  int32_t status = guarded<int32_t>(1, "call", [&]() -> int32_t {
    if (!sized) {
      recordError(formatv("call '{0}': the expected reply size is unknown: host code must set "
                          "*out_buf to COURIER_EXPECTED_SHAPE_MARKER and *out_size to the reply "
                          "size, as convert-executor-to-llvm does",
                          symbol ? symbol : "(null)")
                      .str());
      return 1;
    }
    if (args_size > static_cast<size_t>(INT64_MAX) || expected > static_cast<size_t>(INT64_MAX)) {
      recordError(formatv("call '{0}': sizes beyond 2^63 bytes", symbol ? symbol : "(null)"));
      return 1;
    }
    auto reply = callImpl(session, symbol, args_buf, static_cast<int64_t>(args_size),
                          static_cast<int64_t>(expected));
    if (!reply) {
      recordError(reply.takeError());
      return 1;
    }
    void *buffer = std::malloc(std::max<size_t>(1, expected));
    if (!buffer) {
      recordError(formatv("call '{0}': out of memory for a {1}-byte reply", symbol, expected));
      return 1;
    }
    std::memcpy(buffer, reply->data(), reply->size());
    *out_buf = buffer;
    return 0;
  });
  if (status != 0) {
    // An unknown reply size (host code that did not say) leaves the caller reading what it
    // expects from zeros it cannot write.
    *out_size = expected;
    *out_buf = sized ? std::calloc(std::max<size_t>(1, expected), 1) : nullptr;
    if (!*out_buf)
      *out_buf = zeroRegion();
  }
  return status;
}

void __catalyst__executor__free_result(void *buf) {
  if (!inZeroRegion(buf))
    std::free(buf);
}

int64_t __catalyst__executor__close(int64_t session) {
  return guarded<int64_t>(1, "close", [&]() -> int64_t {
    std::shared_ptr<Session> found = Registry::get().remove(session);
    if (!found) {
      recordError("close: " + unknownSession(session));
      return 1;
    }
    if (Error error = found->backend->closeSession(found->id)) {
      recordError(formatv("close of '{0}'", found->address), std::move(error));
      return 1;
    }
    return 0;
  });
}

} // extern "C"
