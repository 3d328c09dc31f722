// Whether a client takes the same-host shared-memory channel to an executor: the setting the
// runtime's HTTP backend, the engine and the tools share. No dependencies, so the engine's
// public header can carry it.
#ifndef COURIER_TRANSPORT_SHAREDMEMORYMODE_H
#define COURIER_TRANSPORT_SHAREDMEMORYMODE_H

namespace courier::transport {

/// Whether an HTTP backend runs launches through a same-host shared-memory channel
/// (transport/SharedChannel.h) when the executor offers one.
enum class SharedMemory {
  /// For "unix:" and loopback addresses (127.0.0.0/8, ::1, localhost), whose executor
  /// shares the host unless a port forwarded into another network namespace (or a proxy)
  /// is in between: the executor's offer tells, and HTTP stays then.
  Auto,
  On,  ///< For any address whose executor reports this host and network namespace.
  Off, ///< Never: launches go over HTTP.
};

} // namespace courier::transport

#endif // COURIER_TRANSPORT_SHAREDMEMORYMODE_H
