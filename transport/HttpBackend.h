// The HTTP/JSON client backend that reaches a remote courier-executor.
#ifndef COURIER_TRANSPORT_HTTPBACKEND_H
#define COURIER_TRANSPORT_HTTPBACKEND_H

#include "transport/Backend.h"

namespace courier::transport {

/// Creates a client for the executor at `address` ("host:port", "[v6]:port", "unix:PATH",
/// or "https://host:port" for TLS, verified with options.tls or the environment). The client
/// is thread-safe: it keeps a small pool of keep-alive connections, so several threads may
/// launch on one session at once. It remembers what each session shipped, so when the
/// executor restarted (and answers `unknown_session` or `unknown_object`) it re-creates the
/// session under the same id, re-ships, and retries the request (at most two repairs per
/// request); behind a balancer the same moves a session off an executor that died or drained
/// (docs/protocol.md, "Failover"). Errors name the operation and the address and are
/// CodedErrors (transport/ErrorCode.h) with the executor's code, decoded once from the reply,
/// `unavailable` when the request could not reach the executor, `executor_lost` when the
/// executor died with a launch in hand that cannot be run again, `deadline_exceeded` when no
/// reply came within the timeout, or `tls_failed` when TLS failed (the error says how); their
/// text reads "launching
/// '_catalyst_pyface_scale' on 127.0.0.1:7000: ... [unknown_entry]". Protocol: docs/protocol.md.
llvm::Expected<std::unique_ptr<Backend>> createHttpBackend(llvm::StringRef address,
                                                           const BackendOptions &options);

} // namespace courier::transport

#endif // COURIER_TRANSPORT_HTTPBACKEND_H
