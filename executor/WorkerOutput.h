// Where what a worker writes to its stdout and stderr goes: a kernel's prints, a plugin's
// messages, the worker's own last words. By default a worker shares its server's stderr and
// its bytes arrive there as they are. A server whose log is lines of its own format (JSON
// for a log pipeline) sets a sink before it starts workers: each worker then writes into a
// pipe, and one thread of the server reads every worker's pipe and hands the sink each line
// with the worker's pid, so the log stays one event a line whatever a kernel prints.
#ifndef COURIER_EXECUTOR_WORKEROUTPUT_H
#define COURIER_EXECUTOR_WORKEROUTPUT_H

#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <functional>
#include <sys/types.h>

namespace courier::executor {

/// Called on the relay's thread, one line at a time (without its newline). A line longer
/// than kWorkerOutputLineMax bytes comes in pieces of that size, so a kernel that never
/// writes a newline costs the server a bounded buffer.
using WorkerOutputSink = std::function<void(pid_t worker, llvm::StringRef line)>;

constexpr size_t kWorkerOutputLineMax = 4096;

/// Sets the sink for workers started from now on; set once, by a server's main(), before it
/// starts any. An empty sink (the default) leaves workers on the server's own stderr.
void setWorkerOutputSink(WorkerOutputSink sink);

/// Sets the sink to the server's log (transport/Log.h): each line becomes an info event with
/// the line as its message (in text, always quoted and escaped by textLogValue) and the
/// worker's pid as `worker`.
void logWorkerOutput();

/// True when a sink is set: WorkerProcess::spawn then gives each worker a pipe.
bool workerOutputRelayed();

/// Hands the read end of a new worker's output pipe to the relay, which reads it until the
/// worker and everything it started have closed it, then closes it. Takes ownership of `fd`.
void relayWorkerOutput(pid_t worker, int fd);

} // namespace courier::executor

#endif // COURIER_EXECUTOR_WORKEROUTPUT_H
