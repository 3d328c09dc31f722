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
/// same entry name. Thread-safe.
class ObjectHost {
public:
  static llvm::Expected<std::unique_ptr<ObjectHost>> create(std::shared_ptr<PluginSet> plugins);
  ~ObjectHost();

  /// Loads an object (validated: ELF relocatable for this machine's architecture). Loading
  /// the same hash twice is a no-op.
  llvm::Error addObject(const ObjectBlob &object);
  bool hasObject(llvm::StringRef sha256) const;

  /// Runs `entry` of the object `sha256`. Inputs are read in place; results are buffers the
  /// kernel allocated, handed over to the caller.
  llvm::Expected<std::vector<OwnedTensor>> launch(llvm::StringRef sha256, llvm::StringRef entry,
                                                  llvm::ArrayRef<TensorView> inputs,
                                                  llvm::ArrayRef<ResultSpec> results);

  /// Calls `symbol` with the flat wire layout (see docs/protocol.md for its C signature).
  llvm::Expected<std::string> call(llvm::StringRef symbol, llvm::StringRef input,
                                   uint64_t outputSize);

private:
  struct Impl;
  explicit ObjectHost(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace courier::transport

#endif // COURIER_TRANSPORT_OBJECTHOST_H
