// Checks a shipped object's ELF structure before ORC links it, and reads what it exports.
// JITLink trusts the objects it links (fixups are applied without bounds checks in release
// builds, damaged unwind records reach unreachable code), so everything it would trip over
// is refused here with a message naming the object.
#ifndef COURIER_EXECUTOR_ELFVALIDATION_H
#define COURIER_EXECUTOR_ELFVALIDATION_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace courier::executor {

/// What a valid object exports.
struct ObjectExports {
  /// Every global function defined with default or protected visibility: entries and
  /// `call` symbols alike.
  std::vector<std::string> functions;
  /// Entry name (`_catalyst_pyface_<fn>`) -> the words of its signature table
  /// `_catalyst_signature_<fn>`, read from the object's bytes and checked to be well formed
  /// (layout in runtime/ExecutorABI.h). Entries without a table are absent.
  std::map<std::string, std::vector<int64_t>> signatures;
};

/// The most memory an object's allocated sections may take once linked: its code and data,
/// zero-filled sections (`.bss`) and alignment padding included. A zero-filled section costs
/// nothing in the object's bytes, so without this bound a few bytes of header could ask the
/// linker to map and clear gigabytes. The same bound as the compiler's default
/// `max-object-bytes`.
constexpr uint64_t kMaxObjectMemoryBytes = uint64_t{256} << 20;

/// Checks that `bytes` is an intact ELF relocatable object for this machine, that its
/// allocated sections fit in kMaxObjectMemoryBytes, that every section the loaded code refers
/// to is one the linker allocates, and that its signature tables are well formed and belong
/// to entries it exports; fills `out`. Errors name `sha256`.
llvm::Error validateObject(llvm::StringRef sha256, llvm::StringRef bytes, ObjectExports &out);

/// The CPU features `bytes`' features record names (abi/KernelABI.h), sorted as written: empty
/// when it has none, and when it is not an ELF object for this machine (validateObject then
/// says why it does not load) unless `anyMachine` (a tool reading another machine's objects).
/// A record that is not as the header lays it out is an error naming `sha256`.
llvm::Expected<std::vector<std::string>>
readRequiredFeatures(llvm::StringRef sha256, llvm::StringRef bytes, bool anyMachine = false);

} // namespace courier::executor

#endif // COURIER_EXECUTOR_ELFVALIDATION_H
