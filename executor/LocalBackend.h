// The in-process executor: a Backend whose sessions are ObjectHosts in this process, so a
// launch is a direct call into the kernel with no copy of inputs or results.
#ifndef COURIER_EXECUTOR_LOCALBACKEND_H
#define COURIER_EXECUTOR_LOCALBACKEND_H

#include "transport/Backend.h"

namespace courier::executor {

/// Creates the "local" backend. Plugins named in `options` are loaded once, here, and shared
/// by every session of the backend.
llvm::Expected<std::unique_ptr<transport::Backend>>
createLocalBackend(const transport::BackendOptions &options);

} // namespace courier::executor

#endif // COURIER_EXECUTOR_LOCALBACKEND_H
