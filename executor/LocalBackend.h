// The in-process executor: a Backend whose sessions are ObjectHosts in this process, so a
// launch is a direct call into the kernel with no copy of inputs or results.
#ifndef COURIER_TRANSPORT_LOCALBACKEND_H
#define COURIER_TRANSPORT_LOCALBACKEND_H

#include "transport/Backend.h"

namespace courier::transport {

/// Creates the "local" backend. Plugins named in `options` are loaded once, here, and shared
/// by every session of the backend.
llvm::Expected<std::unique_ptr<Backend>> createLocalBackend(const BackendOptions &options);

} // namespace courier::transport

#endif // COURIER_TRANSPORT_LOCALBACKEND_H
