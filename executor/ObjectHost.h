// The executor's object host: loads shipped object files into ORC and runs their
// `_catalyst_pyface_<fn>` entries. Shared by the local backend and courier-executor.
#ifndef COURIER_EXECUTOR_OBJECTHOST_H
#define COURIER_EXECUTOR_OBJECTHOST_H

#include "transport/Backend.h"
#include "transport/Wire.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace courier::executor {

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

/// The declared shape of one tensor of a kernel entry.
struct TensorSignature {
  int64_t rank = 0;
  int64_t elemSize = 0; ///< Bytes per element.
};

/// What loading an object established about it: enough for a process that never links the
/// object (the executor's main process, when objects run in a worker) to check launches
/// exactly as the host does, with checkLaunch below.
struct ObjectInfo {
  std::string sha256;
  /// Every `_catalyst_pyface_` entry the object exports, sorted.
  std::vector<std::string> entries;
  /// Entry -> the words of its signature table (layout in abi/KernelABI.h), as the object
  /// holds them. An entry without a table is absent.
  std::map<std::string, std::vector<int64_t>, std::less<>> signatures;

  /// True when every entry has a signature table.
  bool hasTables() const { return signatures.size() == entries.size(); }
  bool hasEntry(llvm::StringRef entry) const;
};

/// Checks a launch of `entry` declaring `inputs` and `results` against what `info` says of
/// it. With a signature table the declaration must match it exactly (count, ranks, element
/// sizes): otherwise `signature_mismatch`. An async launch declares no inputs and no
/// results, so it needs a table declaring none. Without a table (an object loaded with
/// ObjectHostOptions::allowUnsignedObjects) only plausible ranks (up to 64) and element
/// sizes (1, 2, 4, 8 or 16 bytes) are required. At most kMaxLaunchTensors inputs and as
/// many results, either way. `info` must hold `entry`.
llvm::Error checkLaunch(const ObjectInfo &info, llvm::StringRef entry,
                        llvm::ArrayRef<TensorSignature> inputs,
                        llvm::ArrayRef<TensorSignature> results);

/// Most inputs, and most results, one launch may declare: what a launch frame may carry.
inline constexpr size_t kMaxLaunchTensors = transport::wire::kMaxFrameTensors;
/// Highest rank a launch may declare for a tensor.
inline constexpr size_t kMaxLaunchRank = transport::wire::kMaxFrameRank;

/// Kernel allocations of at least this many bytes go to a launch's result arena.
inline constexpr uint64_t kArenaAllocationBytes = 256 * 1024;
/// Arena allocations start at this alignment or their own, up to kArenaAlignmentLimit;
/// allocations asking for more come from the process's allocator.
inline constexpr uint64_t kArenaAlignment = 64;
inline constexpr uint64_t kArenaAlignmentLimit = 4096;

/// Ranges of this process's memory that launches may place kernel allocations in (result
/// arenas, ObjectHost::launch), known from when they are mapped until they are unmapped: no
/// kernel's free() or realloc() hands a pointer into one to the C allocator, whichever launch
/// makes the call. Thread-safe.
void rememberArena(const void *base, uint64_t size);
void forgetArena(const void *base);

struct ObjectHostOptions {
  /// Loads objects some of whose entries have no signature table (hand-written kernels).
  /// Their launches cannot be checked against what the kernel reads and writes, so a wrong
  /// declaration makes the kernel read or write out of bounds: only for a host whose process
  /// contains that (a sandboxed worker), or for trusted objects. Off: such objects are
  /// refused with `unsigned_object`.
  bool allowUnsignedObjects = false;
};

/// One session's loaded objects: one JITDylib per object, so two objects may export the
/// same entry name and each can be unloaded on its own. Thread-safe.
class ObjectHost {
public:
  static llvm::Expected<std::unique_ptr<ObjectHost>> create(std::shared_ptr<PluginSet> plugins,
                                                            ObjectHostOptions options = {});
  ~ObjectHost();

  /// Loads an object (validated: an intact ELF relocatable object for this machine's
  /// architecture, see executor/ElfValidation.h) and links it at once, so a missing symbol
  /// is reported here. Unless the host allows unsigned objects, every entry must have a
  /// signature table (`unsigned_object` otherwise). Kernels may call the C allocator and
  /// memory functions, libm and compiler-rt helpers, nothing else from the process. Loading
  /// the same hash twice is a no-op.
  llvm::Error addObject(const transport::ObjectBlob &object);
  bool hasObject(llvm::StringRef sha256) const;
  /// What the host learned loading `sha256`, or nothing if it is not loaded.
  std::optional<ObjectInfo> describe(llvm::StringRef sha256) const;
  /// Calls `check` with what the host learned loading `sha256` (null if it is not loaded),
  /// without copying it; the object stays loaded while `check` runs, which must not call back
  /// into this host.
  llvm::Error checkInfo(llvm::StringRef sha256,
                        llvm::function_ref<llvm::Error(const ObjectInfo *)> check) const;
  /// True if the loaded object `sha256` exports `entry`; a map lookup, so a caller can
  /// refuse a launch before it queues it.
  bool hasEntry(llvm::StringRef sha256, llvm::StringRef entry) const;

  /// Unloads the object `sha256` (its JITDylib, and with it its code memory); a later
  /// launch of it fails as for an object never loaded. Launches and calls of the object
  /// already running keep its code until they return, so removal is safe at any time;
  /// the last of them unloads it. Launches of other objects are not disturbed. Removing
  /// an object that is not loaded is a no-op.
  llvm::Error removeObject(llvm::StringRef sha256);

  /// Runs `entry` of the object `sha256`, once checkLaunch accepts the declared inputs and
  /// results. Inputs are read in place; results are buffers the kernel allocated, handed
  /// over to the caller. A result whose buffer the kernel does not own (an input it
  /// returned, a constant global, a buffer returned twice) is copied. A result whose
  /// descriptor points outside every buffer the kernel could have returned is an error,
  /// never read.
  ///
  /// With a `resultArena` (memory the caller sends results from, such as a worker's shared
  /// result region), an entry with a signature table (code cross-compile-targets emitted,
  /// which keeps no buffer past its call but those it returns) has its allocations of
  /// kArenaAllocationBytes or more placed there while it has room, so a large result is
  /// computed where it is sent from: no fresh pages to fault in, no copy. A result in the
  /// arena frees nothing: its `allocated` is null, which no other result's is, and it is
  /// packed row-major (a strided view into the arena is copied out). It is valid until the
  /// arena is used again; so is any other allocation the kernel made there. The caller registers
  /// the arena with rememberArena.
  llvm::Expected<std::vector<transport::OwnedTensor>> launch(
      llvm::StringRef sha256, llvm::StringRef entry, llvm::ArrayRef<transport::TensorView> inputs,
      llvm::ArrayRef<transport::ResultSpec> results, llvm::MutableArrayRef<char> resultArena = {});

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

} // namespace courier::executor

#endif // COURIER_EXECUTOR_OBJECTHOST_H
