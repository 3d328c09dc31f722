// How the runtime reaches an executor: the Backend interface, the value types backends
// exchange, and the registry createBackend picks from. The HTTP client (transport/HttpBackend.h)
// is built in; the in-process executor ("local") registers itself from the executor library
// when a program links it. A backend sees bytes and buffer shapes only; no MLIR type and no
// HTTP type crosses this header.
#ifndef COURIER_TRANSPORT_BACKEND_H
#define COURIER_TRANSPORT_BACKEND_H

#include "transport/BackendOptions.h"
#include "transport/SharedMemoryMode.h"
#include "transport/TlsOptions.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace courier::transport {

/// A strided tensor in caller memory that a backend reads; never owned by the backend.
struct TensorView {
  const void *data = nullptr; ///< Address of element [0, ..., 0] (aligned pointer + offset).
  int64_t elemSize = 0;       ///< Bytes per element.
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides; ///< In elements, as in a memref descriptor.
};

/// A tensor produced by an executor. Owns `allocated` (released with std::free) until
/// release() hands it to the caller, who then frees it with std::free.
class OwnedTensor {
public:
  OwnedTensor() = default;
  OwnedTensor(void *allocated, void *data, int64_t elemSize, std::vector<int64_t> sizes,
              std::vector<int64_t> strides)
      : allocated(allocated), data(data), elemSize(elemSize), sizes(std::move(sizes)),
        strides(std::move(strides)) {}
  OwnedTensor(OwnedTensor &&other) noexcept { *this = std::move(other); }
  OwnedTensor &operator=(OwnedTensor &&other) noexcept;
  OwnedTensor(const OwnedTensor &) = delete;
  OwnedTensor &operator=(const OwnedTensor &) = delete;
  ~OwnedTensor();

  /// Gives up ownership of the allocation; returns the pointer to free().
  void *release() {
    void *p = allocated;
    allocated = nullptr;
    return p;
  }

  void *allocated = nullptr; ///< Base of the malloc'd allocation.
  void *data = nullptr;      ///< Address of element [0, ..., 0].
  int64_t elemSize = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides; ///< In elements.
};

/// What a caller expects back from a launch, per result.
struct ResultSpec {
  int64_t rank = 0;
  int64_t elemSize = 0;
};

/// An object file's bytes and their content address (lowercase hex SHA-256).
struct ObjectBlob {
  std::string sha256;
  std::shared_ptr<const std::string> bytes;

  /// Hashes `bytes` to form a blob.
  static ObjectBlob fromBytes(std::string bytes);
};

/// What an executor reports about itself.
struct Health {
  std::string version;
  std::string triple;
  std::string cpu;
  std::vector<std::string> features;
};

/// "auto", "on" or "off".
llvm::Expected<SharedMemory> parseSharedMemory(llvm::StringRef text);

/// A connection to one executor. Implementations are thread-safe: several threads may
/// launch on one session at once. Errors name the executor address and the operation.
class Backend {
public:
  virtual ~Backend();

  /// "local", "host:port", "unix:PATH" or "https://host:port"; used in error messages.
  virtual const std::string &address() const = 0;

  virtual llvm::Expected<Health> health() = 0;

  /// Creates a session on the executor and returns its id.
  virtual llvm::Expected<std::string> openSession() = 0;
  virtual llvm::Error closeSession(llvm::StringRef session) = 0;

  /// Makes `object` loadable in `session`; uploads its bytes only if the executor lacks them.
  virtual llvm::Error shipObject(llvm::StringRef session, const ObjectBlob &object) = 0;

  /// Ends `session`'s hold on the object `sha256`: its code is unloaded once launches of it
  /// already running end, and a remote executor drops its bytes once no session holds it.
  /// A later launch naming the object ships it again, as after an executor restart.
  /// Releasing an object the session does not hold is not an error: a release may race
  /// with a restart.
  virtual llvm::Error releaseObject(llvm::StringRef session, llvm::StringRef sha256) = 0;

  /// Runs `entry` of `object` with `inputs` and returns one tensor per `results` entry.
  /// If the executor no longer knows the object (it restarted), ships it again and retries
  /// once.
  virtual llvm::Expected<std::vector<OwnedTensor>>
  launch(llvm::StringRef session, const ObjectBlob &object, llvm::StringRef entry,
         llvm::ArrayRef<TensorView> inputs, llvm::ArrayRef<ResultSpec> results) = 0;

  /// Starts `entry` (no arguments, no results) without waiting; returns a launch id.
  virtual llvm::Expected<uint64_t> launchAsync(llvm::StringRef session, const ObjectBlob &object,
                                               llvm::StringRef entry) = 0;
  /// Waits for a launch started with launchAsync. Each id is awaited at most once.
  virtual llvm::Error await(llvm::StringRef session, uint64_t launchId) = 0;

  /// Calls `symbol` (from a plugin library or a shipped object) with the flat wire layout:
  /// `input` holds the inputs packed in order; the reply is exactly `outputSize` bytes.
  virtual llvm::Expected<std::string> call(llvm::StringRef session, llvm::StringRef symbol,
                                           llvm::StringRef input, uint64_t outputSize) = 0;
};

/// Makes a backend for an address a registered name stands for.
using BackendFactory = llvm::Expected<std::unique_ptr<Backend>> (*)(const BackendOptions &options);

/// Registers `factory` for the address `name` (as "local"); a later registration of the same
/// name replaces the earlier. Thread-safe. The executor library registers "local" when it is
/// linked in (executor/LocalBackend.cpp).
void registerBackend(llvm::StringRef name, BackendFactory factory);

/// Creates the backend for `address`: a registered name ("local", the in-process executor,
/// when the program links it) gives what its factory makes; "host:port", "unix:PATH" or
/// "https://host:port" an HTTP client. "local" in a program without the executor library is
/// refused `bad_request`, naming what to link.
llvm::Expected<std::unique_ptr<Backend>> createBackend(llvm::StringRef address,
                                                       const BackendOptions &options);

} // namespace courier::transport

#endif // COURIER_TRANSPORT_BACKEND_H
