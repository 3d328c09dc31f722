// Isolated modules: what a server process (jit/IsolatedModule.cpp) and a module's worker
// process (tools/courier-module-worker) say to each other. The channel, shared
// buffers, crash reports and sandbox are the executor's (executor/WorkerProtocol.h,
// executor/Sandbox.h); the messages here are Compile, Invoke and Unload.
//
// Compile: the engine options the worker compiles with, the module's name, what diagnostics
// call its text (empty: the name) and the text.
// Done answers with an outcome (below), then the entries, the public functions invoke cannot
// call and the phase times. Invoke: the entry and its inputs (dtype, shape, bytes), inline or
// in the server's input arena. Done answers with an outcome, then the results, inline or in
// the worker's result arena. Unload: teardown() and the sessions close; Done answers.
//
// While compiling, a worker sends Progress {kPhaseSetup} just before the module's setup()
// runs: a death after it is the setup's (setup_crashed), one before it the compiler's
// (compile_crashed).
//
// An outcome is a u64 status (OutcomeStatus) and what it carries. Bodies (a module's text, a
// Compile's answer) are executor::writeBody's: inline, or larger in a sealed memfd; an
// Invoke's tensors and its results are an executor::TensorBlock: inline or in an arena.
#ifndef COURIER_JIT_MODULEPROTOCOL_H
#define COURIER_JIT_MODULEPROTOCOL_H

#include "executor/WorkerProtocol.h"
#include "jit/Engine.h"

namespace courier {

namespace moduleproto {

using executor::MessageReader;
using executor::MessageWriter;

/// The phase a Compile request reports (MessageKind::Progress) once it is compiled and
/// linked and the module's setup() is about to run.
inline constexpr uint64_t kPhaseSetup = 1;

/// The options a worker compiles with: everything in EngineOptions that changes what is
/// compiled or how it runs (not the isolation settings, nor the diagnostic sink).
void writeOptions(MessageWriter &out, const EngineOptions &options);
EngineOptions readOptions(MessageReader &in);

void writeEntries(MessageWriter &out, const std::vector<EntrySignature> &entries);
std::vector<EntrySignature> readEntries(MessageReader &in);

void writeTimes(MessageWriter &out, const PhaseTimes &times);
PhaseTimes readTimes(MessageReader &in);

/// What an outcome is, its first field.
enum class OutcomeStatus : uint64_t {
  Success = 0,
  CompileError = 1, ///< {summary, diagnostics}
  CodedError = 2,   ///< {code name, message, cause code name or ""}
  OtherError = 3,   ///< {message}
};

/// Writes Success, or the error (consumed) as described above.
void writeOutcome(MessageWriter &out, llvm::Error error);
/// The error an outcome carries (success for Success). Codes name ErrorCode values; an
/// unknown code, or a malformed body, is an error of its own.
llvm::Error readOutcome(MessageReader &in);

} // namespace moduleproto

} // namespace courier

#endif // COURIER_JIT_MODULEPROTOCOL_H
