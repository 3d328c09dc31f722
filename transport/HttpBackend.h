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

/// The CPU an executor reports in its health: what code for it is compiled for.
struct ExecutorCpu {
  std::string triple;                ///< "x86_64-unknown-linux-gnu".
  std::string cpu;                   ///< LLVM's name: "znver3", "generic".
  std::vector<std::string> features; ///< Enabled features, by LLVM's names.
};

/// Asks the executor at `address` (as createHttpBackend takes it, with `options`' token and
/// TLS settings) for its CPU, one `GET /v1/health` connecting within `connectTimeout` and
/// answered within `timeout` (each at most the options' own). An error (CodedError) when it
/// cannot be reached, does not answer in time, or is too old to report its CPU.
llvm::Expected<ExecutorCpu> askExecutorCpu(llvm::StringRef address, const BackendOptions &options,
                                           std::chrono::milliseconds connectTimeout,
                                           std::chrono::milliseconds timeout);

} // namespace courier::transport

#endif // COURIER_TRANSPORT_HTTPBACKEND_H
