// Whether a client takes the same-host shared-memory channel to an executor: the setting the
// runtime's HTTP backend, the engine and the tools share. No dependencies, so the engine's
// public header can carry it.
#ifndef COURIER_TRANSPORT_SHAREDMEMORYMODE_H
#define COURIER_TRANSPORT_SHAREDMEMORYMODE_H

namespace courier::transport {

/// Whether an HTTP backend runs launches through a same-host shared-memory channel
/// (transport/SharedChannel.h) when the executor offers one.
enum class SharedMemory {
  Auto, ///< For "unix:" addresses only: a unix socket proves the executor shares the host.
  On,   ///< For any address whose executor reports this host and network namespace.
  Off,  ///< Never: launches go over HTTP.
};

} // namespace courier::transport

#endif // COURIER_TRANSPORT_SHAREDMEMORYMODE_H
