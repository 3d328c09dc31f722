// The runtime's C++ control surface for the engine: configuration, the per-thread error
// that ABI calls record, and module scopes that decide when sessions close. The ABI that
// lowered code calls is in runtime/ExecutorABI.h.
//
// How the ABI behaves beyond what its header fixes:
// - Sessions are keyed by the address actually opened (after any scope override); the
//   first open of an address creates its backend with the options in force then, and
//   later opens share it whatever their options.
// - `send_binary` re-reads the file every time (an edited object is shipped anew) and
//   ships only bytes the session does not hold yet; `launch` names the object by the path
//   last sent, sending it first if it never was. A name the active scope holds the bytes
//   of (ScopeOptions::objects) is not read from disk at all, and means those bytes whatever
//   another scope holds under the same name. A file named `<sha256>.o` must hold bytes with
//   that hash, or it is refused.
// - `launch` accepts a bare function name for `entry` and calls its `_catalyst_pyface_`
//   entry. Results arrive contiguous (row-major), as identity-layout host code assumes.
// - `close` ends the session for every holder of the handle, scopes included.
// - Objects are held per session and counted per scope: the scope active during the
//   `send_binary` (or the implicit send of a `launch`, or a launch of an object it does not
//   hold yet) holds it. When a scope is destroyed, each object no other scope holds is
//   released on the executor (Backend::releaseObject), before the scope's sessions close;
//   a later launch naming its path reads and ships it again. Objects shipped with no scope
//   active stay until their session closes.
#ifndef COURIER_RUNTIME_RUNTIME_H
#define COURIER_RUNTIME_RUNTIME_H

#include "runtime/ExecutorABI.h"
#include "transport/Backend.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <map>
#include <memory>
#include <string>

namespace courier::runtime {

/// Settings applied to sessions opened while a ModuleScope carrying them is active.
struct ScopeOptions {
  /// When non-empty, every `open` goes to this address ("local" or "host:port") instead of
  /// the one in the IR.
  std::string addressOverride;
  transport::BackendOptions backend;
  /// Objects the scope's module ships from memory, by the name its code gives them
  /// (`send_binary`, `launch`): these names are never read from disk, so a file replaced or
  /// removed after the engine checked (or built) the object changes nothing.
  std::map<std::string, std::string> objects;
};

/// Sessions opened and objects shipped on a thread while a scope is entered there are
/// attributed to the scope; an object is released when the last scope holding it is
/// destroyed, and a session closed when the last scope that opened it is. The engine keeps
/// one scope per loaded module and enters it around setup() and each invoke.
class ModuleScope {
public:
  explicit ModuleScope(ScopeOptions options);
  ~ModuleScope();
  ModuleScope(const ModuleScope &) = delete;
  ModuleScope &operator=(const ModuleScope &) = delete;

  /// Makes this the calling thread's active scope until the guard is destroyed.
  class Entered {
  public:
    explicit Entered(ModuleScope &scope);
    ~Entered();

  private:
    ModuleScope *previous;
  };

  struct State;

private:
  std::shared_ptr<State> state;
};

/// One entry point of the C ABI: its name as lowered code spells it and its address here.
struct AbiSymbol {
  const char *name;
  void *address;
};

/// Every function of runtime/ExecutorABI.h, for a JIT that defines them as absolute
/// symbols (and so that a static link keeps them).
llvm::ArrayRef<AbiSymbol> abiSymbols();

/// Clears the calling thread's recorded error.
void clearError();

/// Returns the first error recorded on the calling thread since the last clear (and clears
/// it), or success. A failure that came with a code (from the executor or the transport) is a
/// transport::CodedError with that code, so callers tell kinds apart without reading text.
llvm::Error takeError();

/// A kernel as its MLIR names it, from what a launch names: "@dev::@spin" for the entry
/// `_catalyst_pyface_spin` (or `spin`) of an object the engine named "target:0-dev"
/// (targetObjectName in jit/DiskCache.h), "@spin" of an object at a path.
std::string kernelName(llvm::StringRef entry, llvm::StringRef object);

/// Writes the name kernelName gives the kernel a launch of this process is running (the
/// calling thread's, else the latest to start on any thread) into `buffer`, NUL-terminated
/// and cut to `size`; returns false, writing nothing, when none is running. Async-signal-safe:
/// for a crash report of a kernel run in process.
bool kernelInFlight(char *buffer, size_t size);

} // namespace courier::runtime

#endif // COURIER_RUNTIME_RUNTIME_H
