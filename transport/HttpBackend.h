// The HTTP/JSON client backend that reaches a remote courier-executor.
#ifndef COURIER_TRANSPORT_HTTPBACKEND_H
#define COURIER_TRANSPORT_HTTPBACKEND_H

#include "transport/Backend.h"

namespace courier::transport {

/// Creates a client for the executor at `address` ("host:port").
llvm::Expected<std::unique_ptr<Backend>> createHttpBackend(llvm::StringRef address,
                                                           const BackendOptions &options);

} // namespace courier::transport

#endif // COURIER_TRANSPORT_HTTPBACKEND_H
