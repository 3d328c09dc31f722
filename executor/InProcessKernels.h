// A session's kernels run in this process, with failures as wire codes: the in-process host
// of the executor core and the local backend (executor/InProcessHost.cpp) launches on one,
// and a session's worker (executor/Worker.cpp) is a dispatcher from the executor's messages
// to one, which it runs inside its sandbox.
#ifndef COURIER_EXECUTOR_INPROCESSKERNELS_H
#define COURIER_EXECUTOR_INPROCESSKERNELS_H

#include "executor/ObjectHost.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace courier::executor {

/// One session's objects linked by an ObjectHost of their own (executor/ObjectHost.h), so
/// objects one client ships never resolve another's symbols. Every failure is a CodedError
/// (transport/ErrorCode.h), classified by type, never by message text. Thread-safe.
class InProcessKernels {
public:
  /// A fresh object host; `internal` when one cannot be made.
  static llvm::Expected<std::shared_ptr<InProcessKernels>>
  create(std::shared_ptr<PluginSet> plugins, ObjectHostOptions options);
  explicit InProcessKernels(std::unique_ptr<ObjectHost> objects);

  /// Loads `blob` (a no-op once loaded); `invalid_object` or `unsigned_object`, its message
  /// naming the object, when it cannot be.
  llvm::Error attach(const transport::ObjectBlob &blob);
  /// Unloads `sha`; launches of it still running keep its code until they return.
  void detach(llvm::StringRef sha);
  bool attached(llvm::StringRef sha) const;
  /// What loading `sha` established, or nothing when it is not loaded.
  std::optional<ObjectInfo> describe(llvm::StringRef sha) const;
  /// `unknown_entry` unless `entry` of the attached `sha` exists; a signature error unless
  /// it takes and returns nothing, as an async launch must.
  llvm::Error checkAsyncEntry(llvm::StringRef sha, llvm::StringRef entry) const;

  /// Runs `entry` of `object` (ObjectHost::launch, `resultArena` included): `unknown_entry`,
  /// a signature error, or `launch_failed`, also when the kernel returns another number of
  /// results than `results` declares.
  llvm::Expected<std::vector<transport::OwnedTensor>> launch(
      llvm::StringRef object, llvm::StringRef entry, llvm::ArrayRef<transport::TensorView> inputs,
      llvm::ArrayRef<transport::ResultSpec> results, llvm::MutableArrayRef<char> resultArena = {});
  /// Calls `symbol` (ObjectHost::call): `unknown_symbol` or `call_failed`.
  llvm::Expected<std::string> call(llvm::StringRef symbol, llvm::StringRef input,
                                   uint64_t outputSize);

private:
  std::unique_ptr<ObjectHost> objects;
};

} // namespace courier::executor

#endif // COURIER_EXECUTOR_INPROCESSKERNELS_H
