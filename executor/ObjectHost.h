// The executor's object host: loads shipped object files into ORC and runs their
// `_catalyst_pyface_<fn>` entries. Shared by the local backend and courier-executor.
#ifndef COURIER_TRANSPORT_OBJECTHOST_H
#define COURIER_TRANSPORT_OBJECTHOST_H

#include "transport/Backend.h"

#include <memory>
#include <string>
#include <vector>

namespace courier::transport {

/// Shared libraries loaded once at start; their symbols are what `call` can reach besides
/// symbols of shipped objects.
class PluginSet {
public:
  static llvm::Expected<std::shared_ptr<PluginSet>> load(llvm::ArrayRef<std::string> paths);
  /// Address of `symbol` in the first plugin exporting it, or null.
  void *lookup(llvm::StringRef symbol) const;

private:
  std::vector<void *> handles;
};

/// One session's loaded objects: one JITDylib per object, so two objects may export the
/// same entry name and each can be unloaded on its own. Thread-safe.
class ObjectHost {
public:
  static llvm::Expected<std::unique_ptr<ObjectHost>> create(std::shared_ptr<PluginSet> plugins);
  ~ObjectHost();

  /// Loads an object (validated: an intact ELF relocatable object for this machine's
  /// architecture) and links it at once, so a missing symbol is reported here. Kernels may
  /// call the C allocator and memory functions, libm and compiler-rt helpers, nothing else
  /// from the process. Loading the same hash twice is a no-op.
  llvm::Error addObject(const ObjectBlob &object);
  bool hasObject(llvm::StringRef sha256) const;
  /// True if the loaded object `sha256` exports `entry`; a map lookup, so a caller can
  /// refuse a launch before it queues it.
  bool hasEntry(llvm::StringRef sha256, llvm::StringRef entry) const;

  /// Unloads the object `sha256` (its JITDylib, and with it its code memory); a later
  /// launch of it fails as for an object never loaded. Launches and calls of the object
  /// already running keep its code until they return, so removal is safe at any time;
  /// the last of them unloads it. Launches of other objects are not disturbed. Removing
  /// an object that is not loaded is a no-op.
  llvm::Error removeObject(llvm::StringRef sha256);

  /// Runs `entry` of the object `sha256`. Inputs are read in place; results are buffers the
  /// kernel allocated, handed over to the caller. A result whose buffer the kernel does not
  /// own (an input it returned, a constant global, a buffer returned twice) is copied.
  llvm::Expected<std::vector<OwnedTensor>> launch(llvm::StringRef sha256, llvm::StringRef entry,
                                                  llvm::ArrayRef<TensorView> inputs,
                                                  llvm::ArrayRef<ResultSpec> results);

  /// Calls `symbol`, found in the plugins first, then in loaded objects in load order. Its C
  /// signature is
  ///   int32_t symbol(const void *in, uint64_t in_size, void *out, uint64_t out_size);
  /// `in` holds the packed inputs; `out` is a zero-filled buffer of exactly `out_size` bytes
  /// for the packed outputs, returned on success. A non-zero return is an error carrying
  /// that code (a callee rejects sizes it does not expect this way).
  llvm::Expected<std::string> call(llvm::StringRef symbol, llvm::StringRef input,
                                   uint64_t outputSize);

private:
  struct Impl;
  explicit ObjectHost(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace courier::transport

#endif // COURIER_TRANSPORT_OBJECTHOST_H
