// Where code handed to a server or an engine runs: the one setting the executor, the engine,
// courier-serve and the tools share (courier-executor's and courier-serve's --isolation,
// EngineOptions::isolation). No dependencies, so the engine's public header can carry it.
#ifndef COURIER_TRANSPORT_ISOLATION_H
#define COURIER_TRANSPORT_ISOLATION_H

namespace courier::transport {

/// Where shipped objects, or an engine's modules, are linked and run.
enum class Isolation {
  /// In the calling process: the fastest to start and to call, and not contained: code that
  /// crashes ends the process, and nothing can stop a kernel that never returns.
  InProcess,
  /// In a sandboxed worker process (one per executor session, or per module): a crash, a
  /// kernel past its deadline or one that misbehaves costs only its own requests.
  Process,
};

} // namespace courier::transport

#endif // COURIER_TRANSPORT_ISOLATION_H
