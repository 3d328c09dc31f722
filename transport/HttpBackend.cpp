// The HTTP/JSON client backend: speaks the /v1 protocol (docs/protocol.md) to a
// courier-executor over a small pool of keep-alive connections, streaming tensors straight
// from the caller's memory and into freshly allocated result buffers. It remembers what each
// session shipped, so an executor that restarted (and lost sessions and objects) is
// repopulated transparently on the next request.
#include "transport/HttpBackend.h"

#include "transport/SharedChannel.h"

#include "transport/HostPort.h"
#include "transport/Tls.h"
#include "transport/Wire.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <openssl/err.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <pthread.h>
#include <sys/socket.h>

using json = nlohmann::json;

namespace courier::transport {

namespace {

/// Error bodies are small; caps what a misbehaving peer can make a client keep.
void appendErrorBody(std::string &body, const char *data, size_t size) {
  constexpr size_t kLimit = 1 << 16;
  if (body.size() < kLimit)
    body.append(data, std::min(size, kLimit - body.size()));
}

/// Replies other than a launch's are small JSON: a health report, a session, an error. The
/// most a client holds of one.
constexpr size_t kMaxReplyBytes = 1 << 20;

/// Reads the reply to `req` into `body`, up to kMaxReplyBytes; past it the request is given up
/// (the connection with it) and `overflowed` set.
void capReply(httplib::Request &req, std::string &body, bool &overflowed) {
  req.content_receiver = [&body, &overflowed](const char *data, size_t size, uint64_t, uint64_t) {
    if (body.size() + size > kMaxReplyBytes) {
      overflowed = true;
      return false;
    }
    body.append(data, size);
    return true;
  };
}

/// The error of a reply capReply gave up on.
llvm::Error replyTooLarge(const std::string &where) {
  return makeCodedError(ErrorCode::BadFrame,
                        where + ": the executor's reply is larger than " +
                            llvm::Twine(kMaxReplyBytes >> 20) +
                            " MiB, more than any reply but a launch's; it was not read");
}

/// Whether `req` runs code on the executor (a launch, an await of one, or a call): such a
/// request may have run even when no reply came back.
bool runsCode(const httplib::Request &req) {
  llvm::StringRef path = req.path;
  if (!path.consume_front("/v1/sessions/"))
    return false;
  llvm::StringRef route = path.split('/').second; // What follows the session id.
  return route == "launch" || route == "launch_async" || route.starts_with("call/") ||
         (route.starts_with("launches/") && route.ends_with("/await"));
}

/// OpenSSL writes to its socket with write(), which raises SIGPIPE when the executor has
/// closed the connection (a server refusing a client certificate does, right after the
/// handshake). While this lives, SIGPIPE is blocked on the calling thread and one raised
/// meanwhile is discarded, so the request fails with a write error instead of ending the
/// program.
class SigpipeBlocked {
public:
  explicit SigpipeBlocked(bool active) : active(active) {
    if (!active)
      return;
    sigemptyset(&pipeSignal);
    sigaddset(&pipeSignal, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    alreadyPending = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipeSignal, &previous);
  }
  ~SigpipeBlocked() {
    if (!active)
      return;
    if (!alreadyPending) {
      timespec now{0, 0};
      while (sigtimedwait(&pipeSignal, nullptr, &now) == SIGPIPE) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked &) = delete;
  SigpipeBlocked &operator=(const SigpipeBlocked &) = delete;

private:
  bool active;
  bool alreadyPending = false;
  sigset_t pipeSignal, previous;
};

/// Code and message of a failed request; keeps the code so callers can recover.
struct Failure {
  ErrorCode code;
  std::string message;
};

Failure toFailure(llvm::Error error) {
  auto [code, message] = takeCodeAndMessage(std::move(error), ErrorCode::Internal);
  return Failure{code, std::move(message)};
}

llvm::Error toError(const Failure &failure) {
  return makeCodedError(failure.code, failure.message);
}

std::string describeTransportError(httplib::Error error) {
  switch (error) {
  case httplib::Error::Connection:
    return "cannot connect (connection refused or host unreachable)";
  case httplib::Error::ConnectionTimeout:
    return "connection timed out";
  case httplib::Error::SSLConnection:
    return "TLS handshake failed";
  case httplib::Error::SSLLoadingCerts:
    return "cannot load the TLS CA certificates";
  case httplib::Error::Write:
    return "connection lost while sending the request";
  case httplib::Error::Canceled:
    return "request abandoned";
  default:
    return httplib::to_string(error);
  }
}

/// Turns an executor's JSON error body into a Failure, decoding the wire code into an
/// ErrorCode: the one place the client reads a code's name. A code this client does not
/// know (a newer executor's) is `internal`, its name kept in the message; anything that is
/// not an error body (a proxy's HTML page, say) is described by its status.
Failure parseErrorBody(int status, const std::string &body) {
  // A body nested past the bound is not parsed: an executor cannot make its client build a
  // value per bracket.
  if (llvm::Error error = wire::checkJsonDepth(body, "the error body")) {
    std::string message = takeCodeAndMessage(std::move(error), ErrorCode::Internal).second;
    return Failure{ErrorCode::Internal, "HTTP " + std::to_string(status) + ": " + message};
  }
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_object()) {
    const json &error = parsed["error"];
    Failure failure{ErrorCode::Internal, "HTTP " + std::to_string(status)};
    if (error.contains("message") && error["message"].is_string())
      failure.message = error["message"].get<std::string>();
    if (error.contains("code") && error["code"].is_string()) {
      std::string name = error["code"].get<std::string>();
      if (std::optional<ErrorCode> code = parseErrorCode(name))
        failure.code = *code;
      else
        failure.message += " (executor error code '" + name + "')";
    }
    return failure;
  }
  // A reverse proxy's own pages: 502 when the executor behind it went away (or none was
  // there to take the request), 504 when it did not answer in time.
  ErrorCode code = ErrorCode::Internal;
  if (status == 401)
    code = ErrorCode::Unauthorized;
  else if (status == 502)
    code = ErrorCode::ExecutorLost;
  else if (status == 504)
    code = ErrorCode::DeadlineExceeded;
  return Failure{code, "HTTP " + std::to_string(status) + " without an executor error body"};
}

/// True if every view has as many strides as sizes, a positive element size and data unless
/// it is empty.
bool checkViews(llvm::ArrayRef<TensorView> views) {
  for (const TensorView &view : views)
    if (view.sizes.size() != view.strides.size() || view.elemSize <= 0 ||
        (!view.data && !llvm::is_contained(view.sizes, 0)))
      return false;
  return true;
}

/// What the client keeps per session to rebuild it on an executor that lost it.
struct SessionState {
  std::mutex mutex;
  std::map<std::string, ObjectBlob> objects; ///< Shipped objects, by SHA-256.
  /// The executor said, when the session opened, that it runs the session's launches
  /// contained (each session in its own sandboxed worker): nothing a launch did outlives
  /// the executor, so one lost with it may run again elsewhere.
  std::atomic<bool> contained{false};
  /// The session's same-host channel, once one was granted; `channelRefused` once asking
  /// for one failed, so the session's launches stay on HTTP.
  std::mutex channelMutex;
  std::shared_ptr<shm::Client> channel;
  bool channelRefused = false;
};

class HttpBackend final : public Backend {
public:
  HttpBackend(std::string address, HostPort target, BackendOptions options)
      : addressText(std::move(address)), target(std::move(target)), options(std::move(options)),
        asksForChannel(this->options.sharedMemory == SharedMemory::On ||
                       (this->options.sharedMemory == SharedMemory::Auto &&
                        (this->target.unixSocket || isLoopbackHost(this->target.host)))) {}

  const std::string &address() const override { return addressText; }

  llvm::Expected<Health> health() override;
  llvm::Expected<std::string> openSession() override;
  llvm::Error closeSession(llvm::StringRef session) override;
  llvm::Error shipObject(llvm::StringRef session, const ObjectBlob &object) override;
  llvm::Error releaseObject(llvm::StringRef session, llvm::StringRef sha256) override;
  llvm::Expected<std::vector<OwnedTensor>> launch(llvm::StringRef session, const ObjectBlob &object,
                                                  llvm::StringRef entry,
                                                  llvm::ArrayRef<TensorView> inputs,
                                                  llvm::ArrayRef<ResultSpec> results) override;
  llvm::Expected<uint64_t> launchAsync(llvm::StringRef session, const ObjectBlob &object,
                                       llvm::StringRef entry) override;
  llvm::Error await(llvm::StringRef session, uint64_t launchId) override;
  llvm::Expected<std::string> call(llvm::StringRef session, llvm::StringRef symbol,
                                   llvm::StringRef input, uint64_t outputSize) override;

private:
  /// A pooled connection, returned to the pool when the lease ends.
  class Lease {
  public:
    Lease(HttpBackend &owner, std::unique_ptr<httplib::ClientImpl> client)
        : owner(owner), client(std::move(client)) {}
    ~Lease() { owner.release(std::move(client)); }
    httplib::ClientImpl &operator*() { return *client; }

  private:
    HttpBackend &owner;
    std::unique_ptr<httplib::ClientImpl> client;
  };

  Lease acquire();
  /// Closes every idle pooled connection.
  void dropIdleConnections() {
    std::vector<IdleClient> stale;
    std::lock_guard<std::mutex> lock(poolMutex);
    stale.swap(idle);
  }
  void release(std::unique_ptr<httplib::ClientImpl> client);
  /// What a request that never got a reply ran into; with TLS, OpenSSL's verify result and
  /// whether the executor asked for a client certificate this client lacks say more.
  llvm::Error transportFailure(const std::string &operation, httplib::Error error,
                               httplib::ClientImpl &client, bool mayHaveRun,
                               std::chrono::steady_clock::duration waited);

  /// Sends `req` and returns the status; a transport failure or an error status becomes a
  /// Failure whose message starts with "<operation> on <address>: ".
  llvm::Expected<int> send(httplib::Request &req, httplib::Response &res,
                           const std::string &operation);
  /// Sends `req` and returns its reply's body, read up to the client's bound; a reply past
  /// the bound, a transport failure or an error status is an error.
  llvm::Expected<std::string> sendForBody(httplib::Request &req, const std::string &operation);
  /// A request with a small body whose reply is read whole (JSON control messages).
  llvm::Expected<json> exchange(const std::string &method, const std::string &path,
                                const std::string &body, const std::string &operation,
                                llvm::StringRef session = {});

  std::shared_ptr<SessionState> stateOf(llvm::StringRef session, bool create);
  /// Creates `session` on the executor (PUT, so that a balancer hashing on the id sends it
  /// where its later requests go) and records what the executor said about it.
  llvm::Error createSession(llvm::StringRef session, const std::string &operation);
  llvm::Error attachOrUpload(llvm::StringRef session, const ObjectBlob &object);
  /// Ships `object`; `session` names the session it is for (in X-Courier-Session), so a
  /// balancer hashing on sessions sends it where the session's launches run.
  llvm::Error upload(llvm::StringRef session, const ObjectBlob &object);
  /// Re-creates `session` under the same id and ships everything it held.
  llvm::Error reopen(llvm::StringRef session);
  /// Runs `attempt`; when the executor lost the object or the session, or the request never
  /// reached it, or the executor died under a contained launch, repairs what is needed and
  /// tries again, a bounded number of times.
  /// Mends what `failure` says went wrong with `session` so the request can be sent again;
  /// an error when it cannot be sent again.
  llvm::Error repair(llvm::StringRef session, const ObjectBlob *object, Failure failure);
  template <typename T>
  llvm::Expected<T> withRecovery(llvm::StringRef session, const ObjectBlob *object,
                                 const std::function<llvm::Expected<T>()> &attempt);

  llvm::Expected<std::vector<OwnedTensor>>
  launchOnce(llvm::StringRef session, const ObjectBlob &object, llvm::StringRef entry,
             llvm::ArrayRef<TensorView> inputs, llvm::ArrayRef<ResultSpec> results);
  /// The session's same-host channel: asked for on first use when the options and the
  /// address allow one; null when the launch is to go over HTTP.
  std::shared_ptr<shm::Client> channelFor(llvm::StringRef session);
  llvm::Expected<std::string> callOnce(llvm::StringRef session, llvm::StringRef symbol,
                                       llvm::StringRef input, uint64_t outputSize);

  std::string sessionPath(llvm::StringRef session) const { return "/v1/sessions/" + session.str(); }
  std::string where(const std::string &operation) const { return operation + " on " + addressText; }

  std::string addressText;
  HostPort target; ///< A unix socket's path as its host, as httplib's client takes it.
  BackendOptions options;
  /// Whether a session asks for the same-host channel (options.sharedMemory at `target`).
  const bool asksForChannel;

  std::mutex poolMutex;
  struct IdleClient {
    std::unique_ptr<httplib::ClientImpl> client;
    std::chrono::steady_clock::time_point since;
  };
  std::vector<IdleClient> idle; ///< Most recently used last.

  std::mutex sessionsMutex;
  std::map<std::string, std::shared_ptr<SessionState>, std::less<>> sessions;
};

/// The executor closes a keep-alive connection after 5 s without a request. Reusing one
/// close to that moment races with the close and can lose the request, so connections idle
/// for longer than this are dropped instead.
constexpr std::chrono::seconds kMaxIdleTime{2};

HttpBackend::Lease HttpBackend::acquire() {
  std::vector<IdleClient> stale;
  {
    std::lock_guard<std::mutex> lock(poolMutex);
    if (!idle.empty()) {
      if (std::chrono::steady_clock::now() - idle.back().since < kMaxIdleTime) {
        std::unique_ptr<httplib::ClientImpl> client = std::move(idle.back().client);
        idle.pop_back();
        return Lease(*this, std::move(client));
      }
      stale.swap(idle); // The newest is too old, so all are; close them outside the lock.
    }
  }
  // httplib names a unix socket by its path in place of the host (the port is unused).
  std::unique_ptr<httplib::ClientImpl> client;
  if (target.tls) {
    auto ssl = std::make_unique<httplib::SSLClient>(target.host, static_cast<int>(target.port),
                                                    options.tls.certFile, options.tls.keyFile);
    // Verification (chain and host name) is httplib's default; without a CA file it uses
    // the system's default CA paths.
    ssl->enable_server_certificate_verification(true);
    if (!options.tls.caFile.empty())
      ssl->set_ca_cert_path(options.tls.caFile);
    if (SSL_CTX *ctx = ssl->ssl_context())
      watchCertificateRequests(*ctx);
    client = std::move(ssl);
  } else {
    client = std::make_unique<httplib::ClientImpl>(
        target.host, target.unixSocket ? 80 : static_cast<int>(target.port));
  }
  if (target.unixSocket)
    client->set_address_family(AF_UNIX);
  client->set_keep_alive(true);
  client->set_tcp_nodelay(!target.unixSocket);
  client->set_connection_timeout(options.connectTimeout);
  client->set_read_timeout(options.requestTimeout);
  client->set_write_timeout(options.requestTimeout);
  return Lease(*this, std::move(client));
}

void HttpBackend::release(std::unique_ptr<httplib::ClientImpl> client) {
  // Keep enough idle connections for a handful of concurrent callers; more just hold
  // executor threads.
  constexpr size_t kMaxIdle = 8;
  std::lock_guard<std::mutex> lock(poolMutex);
  if (client && idle.size() < kMaxIdle)
    idle.push_back({std::move(client), std::chrono::steady_clock::now()});
}

llvm::Expected<int> HttpBackend::send(httplib::Request &req, httplib::Response &res,
                                      const std::string &operation) {
  if (!options.bearerToken.empty())
    req.set_header("Authorization", "Bearer " + options.bearerToken);
  // Work the caller will stop waiting for is ended on the executor too; the deadline is a
  // little shorter than the timeout, so the executor's 504 arrives before the client gives up.
  if (runsCode(req)) {
    int64_t timeout = options.requestTimeout.count();
    int64_t deadline = std::max<int64_t>(1, timeout - std::min<int64_t>(1000, timeout / 10));
    req.set_header(wire::kDeadlineHeader, std::to_string(deadline));
  }
  // httplib's server waits for a body on these methods unless told there is none. httplib's
  // client says so itself for an empty POST or PUT, and a second Content-Length there is
  // refused by a proxy in front (nginx answers 400).
  bool saysEmptyItself = req.body.empty() && (req.method == "POST" || req.method == "PUT");
  if (req.method != "GET" && req.method != "HEAD" && !req.content_provider_ &&
      !req.has_header("Content-Length") && !saysEmptyItself)
    req.set_header("Content-Length", std::to_string(req.body.size()));
  httplib::Error error = httplib::Error::Success;
  SigpipeBlocked quiet(target.tls);
  Lease lease = acquire();
  if (target.tls)
    ERR_clear_error(); // So a handshake's failure is the only one OpenSSL holds.
  auto started = std::chrono::steady_clock::now();
  if (!(*lease).send(req, res, error))
    return transportFailure(operation, error, *lease, runsCode(req),
                            std::chrono::steady_clock::now() - started);
  // A server that asks for a client certificate without requiring one (optional mutual
  // TLS) accepted this client anyway: forget the request, so that a later failure on this
  // connection is not taken for a refused certificate.
  if (target.tls)
    if (SSL_CTX *ctx = static_cast<httplib::SSLClient &>(*lease).ssl_context())
      (void)askedForMissingCertificate(*ctx);
  return res.status;
}

llvm::Error HttpBackend::transportFailure(const std::string &operation, httplib::Error error,
                                          httplib::ClientImpl &client, bool mayHaveRun,
                                          std::chrono::steady_clock::duration waited) {
  auto *ssl = target.tls ? static_cast<httplib::SSLClient *>(&client) : nullptr;
  std::string reason = describeTransportError(error);
  if (ssl && ssl->ssl_context() && askedForMissingCertificate(*ssl->ssl_context()))
    return makeCodedError(ErrorCode::TlsFailed,
                          where(operation) +
                              ": the executor asks for a client certificate (mutual TLS) and "
                              "none was given: set --tls-client-cert and --tls-client-key, or "
                              "COURIER_TLS_CLIENT_CERT and COURIER_TLS_CLIENT_KEY");
  switch (error) {
  case httplib::Error::SSLServerVerification:
    return makeCodedError(
        ErrorCode::TlsFailed,
        where(operation) + ": " +
            describeVerifyFailure(ssl ? ssl->get_openssl_verify_result() : 0, target.host));
  case httplib::Error::SSLConnection:
  case httplib::Error::SSLLoadingCerts: {
    std::string detail = takeOpenSslReason();
    return makeCodedError(
        ErrorCode::TlsFailed,
        where(operation) + ": " + reason + (detail.empty() ? "" : " (" + detail + ")") +
            (error == httplib::Error::SSLConnection ? "; is the executor serving TLS on that port?"
                                                    : ""));
  }
  case httplib::Error::Read: {
    // The request went out and no reply came back. After the whole timeout the executor may
    // still be running it; sooner, the connection dropped. A launch or call may then have
    // run: the executor died with it in hand. Anything else is safe to send again.
    if (waited >= options.requestTimeout)
      return makeCodedError(ErrorCode::DeadlineExceeded,
                            where(operation) + ": no reply within the request timeout (" +
                                std::to_string(options.requestTimeout.count()) + " ms)");
    reason = "connection lost before the reply";
    // A TLS server closes a plaintext connection without a word.
    if (!target.tls && !target.unixSocket)
      reason += " (an executor serving TLS needs an https:// address)";
    if (mayHaveRun)
      return makeCodedError(ErrorCode::ExecutorLost, where(operation) + ": " + reason);
    break;
  }
  default:
    break;
  }
  return makeCodedError(ErrorCode::Unavailable, where(operation) + ": " + reason);
}

llvm::Expected<std::string> HttpBackend::sendForBody(httplib::Request &req,
                                                     const std::string &operation) {
  std::string reply;
  bool overflowed = false;
  capReply(req, reply, overflowed);
  httplib::Response res;
  llvm::Expected<int> status = send(req, res, operation);
  if (overflowed) {
    llvm::consumeError(status.takeError());
    return replyTooLarge(where(operation));
  }
  if (!status)
    return status.takeError();
  if (*status >= 400) {
    Failure failure = parseErrorBody(*status, reply);
    return makeCodedError(failure.code, where(operation) + ": " + failure.message);
  }
  return reply;
}

llvm::Expected<json> HttpBackend::exchange(const std::string &method, const std::string &path,
                                           const std::string &body, const std::string &operation,
                                           llvm::StringRef session) {
  httplib::Request req;
  req.method = method;
  req.path = path;
  req.body = body;
  if (!body.empty())
    req.set_header("Content-Type", wire::kJsonContentType);
  if (!session.empty())
    req.set_header(wire::kSessionHeader, session.str());
  llvm::Expected<std::string> reply = sendForBody(req, operation);
  if (!reply)
    return reply.takeError();
  if (reply->empty())
    return json::object();
  if (llvm::Error error = wire::checkJsonDepth(*reply, "the reply", ErrorCode::Internal))
    return withContext(where(operation), std::move(error));
  json parsed = json::parse(*reply, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded())
    return makeCodedError(ErrorCode::Internal, where(operation) + ": reply is not JSON");
  return parsed;
}

std::shared_ptr<SessionState> HttpBackend::stateOf(llvm::StringRef session, bool create) {
  std::lock_guard<std::mutex> lock(sessionsMutex);
  auto it = sessions.find(session);
  if (it != sessions.end())
    return it->second;
  if (!create)
    return nullptr;
  auto state = std::make_shared<SessionState>();
  sessions.emplace(session.str(), state);
  return state;
}

llvm::Expected<Health> HttpBackend::health() {
  llvm::Expected<json> reply = exchange("GET", "/v1/health", "", "checking health");
  if (!reply)
    return reply.takeError();
  Health health;
  const json &j = *reply;
  if (j.contains("version") && j["version"].is_string())
    health.version = j["version"];
  if (j.contains("triple") && j["triple"].is_string())
    health.triple = j["triple"];
  if (j.contains("cpu") && j["cpu"].is_string())
    health.cpu = j["cpu"];
  if (j.contains("features") && j["features"].is_array())
    for (const json &f : j["features"])
      if (f.is_string())
        health.features.push_back(f.get<std::string>());
  return health;
}

llvm::Error HttpBackend::createSession(llvm::StringRef session, const std::string &operation) {
  llvm::Expected<json> reply = exchange("PUT", sessionPath(session), "", operation, session);
  if (!reply)
    return reply.takeError();
  if (!reply->contains("session") || (*reply)["session"] != session.str())
    return makeCodedError(ErrorCode::Internal,
                          where(operation) + ": reply does not confirm the session id");
  bool contained = reply->contains("contained") && (*reply)["contained"].is_boolean() &&
                   (*reply)["contained"].get<bool>();
  stateOf(session, /*create=*/true)->contained = contained;
  return llvm::Error::success();
}

llvm::Expected<std::string> HttpBackend::openSession() {
  std::string id = wire::randomSessionId();
  if (llvm::Error error = createSession(id, "opening a session"))
    return std::move(error);
  return id;
}

llvm::Error HttpBackend::closeSession(llvm::StringRef session) {
  std::shared_ptr<SessionState> state;
  {
    std::lock_guard<std::mutex> lock(sessionsMutex);
    auto it = sessions.find(session);
    if (it != sessions.end()) {
      state = it->second;
      sessions.erase(it);
    }
  }
  std::string operation = "closing session '" + session.str() + "'";
  llvm::Expected<json> reply = exchange("DELETE", sessionPath(session), "", operation, session);
  if (reply)
    return llvm::Error::success();
  Failure failure = toFailure(reply.takeError());
  // An executor that restarted has already forgotten a session we opened: it is closed.
  if (state && (failure.code == ErrorCode::UnknownSession ||
                failure.code == ErrorCode::Unavailable || failure.code == ErrorCode::ExecutorLost))
    return llvm::Error::success();
  return toError(failure);
}

llvm::Error HttpBackend::upload(llvm::StringRef session, const ObjectBlob &object) {
  // Unnamed here: the executor's refusals name the object.
  std::string operation = "shipping an object";
  httplib::Request req;
  req.method = "PUT";
  req.path = "/v1/objects/" + object.sha256;
  req.set_header("Content-Type", wire::kBytesContentType);
  req.set_header(wire::kSessionHeader, session.str());
  std::shared_ptr<const std::string> bytes = object.bytes;
  req.content_length_ = bytes->size();
  req.content_provider_ = [bytes](size_t offset, size_t length, httplib::DataSink &sink) {
    return sink.write(bytes->data() + offset, length);
  };
  return sendForBody(req, operation).takeError();
}

llvm::Error HttpBackend::attachOrUpload(llvm::StringRef session, const ObjectBlob &object) {
  if (!object.bytes || !wire::isSha256(object.sha256))
    return makeCodedError(ErrorCode::BadRequest,
                          where("shipping an object") + ": the object has no bytes or no SHA-256");
  std::string operation = "shipping an object";
  std::string path = sessionPath(session) + "/objects/" + object.sha256;
  // Attaching first makes shipping an object the executor already holds one small request.
  // The executor may drop an object no session holds once its grace period passes, so an
  // upload followed by a stall can find it gone again; one more upload settles that.
  for (int attempt = 0;; ++attempt) {
    llvm::Expected<json> attached = exchange("POST", path, "", operation, session);
    if (attached)
      return llvm::Error::success();
    Failure failure = toFailure(attached.takeError());
    if (failure.code != ErrorCode::UnknownObject || attempt == 2)
      return toError(failure);
    if (llvm::Error error = upload(session, object))
      return error;
  }
}

llvm::Error HttpBackend::reopen(llvm::StringRef session) {
  if (llvm::Error error = createSession(session, "re-creating session '" + session.str() + "'"))
    return error;
  std::shared_ptr<SessionState> state = stateOf(session, /*create=*/true);
  std::vector<ObjectBlob> objects;
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    for (const auto &entry : state->objects)
      objects.push_back(entry.second);
  }
  for (const ObjectBlob &object : objects)
    if (llvm::Error error = attachOrUpload(session, object))
      return error;
  return llvm::Error::success();
}

llvm::Error HttpBackend::repair(llvm::StringRef session, const ObjectBlob *object,
                                Failure failure) {
  switch (failure.code) {
  case ErrorCode::UnknownSession:
    // The executor restarted, or the balancer in front sent the session to another one.
    if (llvm::Error error = reopen(session))
      return error;
    break;
  case ErrorCode::UnknownObject:
    // Only our own object can be missing: upload it (the attach below loads it).
    if (!object)
      return toError(failure);
    if (llvm::Error error = upload(session, *object))
      return error;
    break;
  case ErrorCode::Unavailable:
    // The request never reached an executor: nothing ran, so sending it again is safe.
    return llvm::Error::success();
  case ErrorCode::ExecutorLost: {
    // The executor died with the request in hand. Running it again is safe only when the
    // executor kept what its launches do inside the session's own worker, which died too.
    std::shared_ptr<SessionState> state = stateOf(session, /*create=*/false);
    if (!state || !state->contained)
      return makeCodedError(ErrorCode::ExecutorLost,
                            failure.message + "; the executor does not run launches contained, "
                                              "so what may have run there is not run again");
    if (llvm::Error error = reopen(session))
      return makeCodedError(ErrorCode::ExecutorLost, failure.message +
                                                         "; moving the session elsewhere failed: " +
                                                         toFailure(std::move(error)).message);
    break;
  }
  default:
    return toError(failure);
  }
  if (object) {
    // Remember it, so that a later re-creation of the session brings it back too.
    std::shared_ptr<SessionState> state = stateOf(session, /*create=*/true);
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      state->objects.emplace(object->sha256, *object);
    }
    if (llvm::Error error = attachOrUpload(session, *object)) {
      Failure shipping = toFailure(std::move(error));
      // The executor went away while the object went over; the request itself has not been
      // sent again, so the next attempt finds out where the session is now.
      if (shipping.code != ErrorCode::ExecutorLost && shipping.code != ErrorCode::Unavailable)
        return toError(shipping);
    }
  }
  return llvm::Error::success();
}

template <typename T>
llvm::Expected<T> HttpBackend::withRecovery(llvm::StringRef session, const ObjectBlob *object,
                                            const std::function<llvm::Expected<T>()> &attempt) {
  // Enough for one failover followed by one missing object; a request that still fails
  // reports its last error.
  constexpr int kMaxRepairs = 2;
  for (int repairs = 0;; ++repairs) {
    llvm::Expected<T> result = attempt();
    if (result || repairs == kMaxRepairs)
      return result;
    if (llvm::Error error = repair(session, object, toFailure(result.takeError())))
      return std::move(error);
  }
}

llvm::Error HttpBackend::shipObject(llvm::StringRef session, const ObjectBlob &object) {
  std::shared_ptr<SessionState> state = stateOf(session, /*create=*/true);
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->objects.emplace(object.sha256, object);
  }
  llvm::Error shipped = attachOrUpload(session, object);
  if (!shipped)
    return shipped;
  Failure failure = toFailure(std::move(shipped));
  // Shipping is safe to repeat: re-creating the session ships this object with the others.
  if (failure.code != ErrorCode::UnknownSession && failure.code != ErrorCode::ExecutorLost &&
      failure.code != ErrorCode::Unavailable)
    return toError(failure);
  return reopen(session);
}

llvm::Error HttpBackend::releaseObject(llvm::StringRef session, llvm::StringRef sha256) {
  // Forgotten first, so a session re-created after a restart does not bring it back.
  if (std::shared_ptr<SessionState> state = stateOf(session, /*create=*/false)) {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->objects.erase(sha256.str());
  }
  std::string operation = "releasing object " + sha256.take_front(12).str();
  llvm::Expected<json> reply =
      exchange("DELETE", sessionPath(session) + "/objects/" + sha256.str(), "", operation, session);
  if (reply)
    return llvm::Error::success();
  Failure failure = toFailure(reply.takeError());
  // An executor that lost the session (it restarted or died) holds nothing for it any more.
  if (failure.code == ErrorCode::UnknownSession || failure.code == ErrorCode::ExecutorLost)
    return llvm::Error::success();
  return toError(failure);
}

namespace {
/// Where a launch reply's result bytes go, from its header `line`: a buffer per result, owned
/// by `tensors` at once so that every exit path frees them, once the header is checked
/// against the results the caller declared and the reply's Content-Length (if it had one).
llvm::Expected<std::vector<wire::Destination>>
resultDestinations(llvm::StringRef line, llvm::ArrayRef<ResultSpec> results,
                   std::optional<uint64_t> replyLength, std::vector<OwnedTensor> &tensors) {
  llvm::Expected<wire::LaunchReply> reply = wire::decodeLaunchReply(line);
  if (!reply)
    return reply.takeError();
  if (reply->results.size() != results.size())
    return makeCodedError(ErrorCode::BadFrame,
                          llvm::formatv("executor returned {0} results, expected {1}",
                                        reply->results.size(), results.size()));
  uint64_t total = 0;
  for (const wire::TensorHeader &t : reply->results) {
    if (t.bytes > UINT64_MAX - total)
      return makeCodedError(ErrorCode::BadFrame, "reply tensors overflow 64 bits");
    total += t.bytes;
  }
  if (replyLength && *replyLength != line.size() + 1 + total)
    return makeCodedError(ErrorCode::BadFrame,
                          llvm::formatv("reply header declares {0} tensor bytes, "
                                        "the body holds {1}",
                                        total, *replyLength - line.size() - 1));
  std::vector<wire::Destination> destinations;
  for (size_t i = 0; i < results.size(); ++i) {
    wire::TensorHeader &t = reply->results[i];
    if (static_cast<int64_t>(t.sizes.size()) != results[i].rank ||
        t.elemSize != results[i].elemSize)
      return makeCodedError(ErrorCode::BadFrame,
                            llvm::formatv("result {0} has rank {1} and element size {2}, "
                                          "expected rank {3} and element size {4}",
                                          i, t.sizes.size(), t.elemSize, results[i].rank,
                                          results[i].elemSize));
    void *data = wire::allocateTensorBuffer(t.bytes);
    if (!data)
      return makeCodedError(ErrorCode::PayloadTooLarge,
                            "cannot allocate " + llvm::Twine(t.bytes) + " bytes for a result");
    std::vector<int64_t> strides = wire::packedStrides(t.sizes);
    tensors.emplace_back(data, data, t.elemSize, std::move(t.sizes), std::move(strides));
    destinations.push_back({static_cast<char *>(data), t.bytes});
  }
  return destinations;
}
/// The first of `inputs` that is not a valid tensor view, if any.
std::optional<size_t> invalidView(llvm::ArrayRef<TensorView> inputs) {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!checkViews(inputs[i]))
      return i;
  return std::nullopt;
}
} // namespace

llvm::Expected<std::vector<OwnedTensor>>
HttpBackend::launchOnce(llvm::StringRef session, const ObjectBlob &object, llvm::StringRef entry,
                        llvm::ArrayRef<TensorView> inputs, llvm::ArrayRef<ResultSpec> results) {
  std::string operation = "launching '" + entry.str() + "'";
  if (std::optional<size_t> bad = invalidView(inputs))
    return makeCodedError(ErrorCode::BadRequest, where(operation) + ": input " +
                                                     std::to_string(*bad) +
                                                     " is not a valid tensor view");
  wire::LaunchRequest header;
  header.object = object.sha256;
  header.entry = entry.str();
  header.inputs = wire::describePacked(inputs);
  header.results.assign(results.begin(), results.end());
  wire::FrameWriter writer(wire::encodeLaunchRequest(header),
                           std::vector<TensorView>(inputs.begin(), inputs.end()));

  httplib::Request req;
  req.method = "POST";
  req.path = sessionPath(session) + "/launch";
  req.set_header("Content-Type", wire::kFrameContentType);
  req.set_header(wire::kSessionHeader, session.str());
  req.content_length_ = writer.size();
  req.content_provider_ = [&writer](size_t offset, size_t, httplib::DataSink &sink) {
    return writer.writeNext(offset,
                            [&](const char *data, size_t size) { return sink.write(data, size); });
  };

  // Results land in buffers sized from the reply's header line, owned by `tensors` at once
  // so that every exit path frees them.
  std::vector<OwnedTensor> tensors;
  std::optional<uint64_t> replyLength; ///< From the reply's Content-Length, when it has one.
  wire::FrameReader reader(
      [&](llvm::StringRef line) -> llvm::Expected<std::vector<wire::Destination>> {
        return resultDestinations(line, results, replyLength, tensors);
      });

  bool isFrame = false;
  std::string errorBody;
  llvm::Error frameError = llvm::Error::success();
  bool frameFailed = false;
  req.response_handler = [&](const httplib::Response &res) {
    uint64_t length = 0;
    if (!llvm::StringRef(res.get_header_value("Content-Length")).getAsInteger(10, length))
      replyLength = length;
    isFrame =
        res.status == 200 &&
        llvm::StringRef(res.get_header_value("Content-Type")).starts_with(wire::kFrameContentType);
    return true;
  };
  req.content_receiver = [&](const char *data, size_t size, uint64_t, uint64_t) {
    if (!isFrame) {
      appendErrorBody(errorBody, data, size);
      return true;
    }
    frameError = reader.feed(data, size);
    frameFailed = static_cast<bool>(frameError);
    return !frameFailed;
  };

  httplib::Response res;
  llvm::Expected<int> status = send(req, res, operation);
  if (frameFailed) {
    llvm::consumeError(status.takeError());
    Failure failure = toFailure(std::move(frameError));
    return makeCodedError(failure.code, where(operation) + ": " + failure.message);
  }
  llvm::consumeError(std::move(frameError));
  if (!status)
    return status.takeError();
  if (*status != 200 || !isFrame) {
    Failure failure =
        *status >= 400 ? parseErrorBody(*status, errorBody)
                       : Failure{ErrorCode::Internal, "unexpected HTTP " + std::to_string(*status)};
    return makeCodedError(failure.code, where(operation) + ": " + failure.message);
  }
  if (llvm::Error error = reader.finish()) {
    Failure failure = toFailure(std::move(error));
    return makeCodedError(failure.code, where(operation) + ": " + failure.message);
  }
  return std::move(tensors);
}

llvm::Expected<std::vector<OwnedTensor>>
HttpBackend::launch(llvm::StringRef session, const ObjectBlob &object, llvm::StringRef entry,
                    llvm::ArrayRef<TensorView> inputs, llvm::ArrayRef<ResultSpec> results) {
  return withRecovery<std::vector<OwnedTensor>>(
      session, &object, [&]() -> llvm::Expected<std::vector<OwnedTensor>> {
        if (std::shared_ptr<shm::Client> channel = channelFor(session);
            channel && checkViews(inputs) && channel->fits(entry, inputs, results)) {
          // A launch that finds the channel busy with another thread's goes over HTTP.
          std::optional<llvm::Expected<std::vector<OwnedTensor>>> done =
              channel->launch(object.sha256, entry, inputs, results, options.requestTimeout,
                              where("launching '" + entry.str() + "'"));
          if (done) {
            // The executor behind the channel is gone: the idle connections to it are too,
            // and the repair that follows must not be sent down one of them.
            if (!channel->usable())
              dropIdleConnections();
            return std::move(*done);
          }
        }
        return launchOnce(session, object, entry, inputs, results);
      });
}

std::shared_ptr<shm::Client> HttpBackend::channelFor(llvm::StringRef session) {
  if (!asksForChannel)
    return nullptr;
  std::shared_ptr<SessionState> state = stateOf(session, /*create=*/false);
  if (!state)
    return nullptr;
  std::lock_guard<std::mutex> lock(state->channelMutex);
  if (state->channel && state->channel->usable())
    return state->channel;
  // A channel that broke (its executor went) is asked for again: the session may have
  // moved to an executor that offers one.
  state->channel.reset();
  if (state->channelRefused)
    return nullptr;
  uint32_t asked =
      options.sharedMemoryPageVersion ? options.sharedMemoryPageVersion : shm::kPageVersion;
  llvm::Expected<json> offer =
      exchange("POST", sessionPath(session) + "/shm", json{{"page_version", asked}}.dump(),
               "asking for a shared-memory channel", session);
  if (!offer) {
    Failure failure = toFailure(offer.takeError());
    // A session the executor lost is repaired by the HTTP launch that follows; anything
    // else (an executor without channels, or one that cannot make them) keeps HTTP.
    if (failure.code != ErrorCode::UnknownSession && failure.code != ErrorCode::Unavailable &&
        failure.code != ErrorCode::ExecutorLost)
      state->channelRefused = true;
    return nullptr;
  }
  auto text = [&](const char *key) {
    return offer->contains(key) && (*offer)[key].is_string() ? (*offer)[key].get<std::string>()
                                                             : std::string();
  };
  // Another host, or another network namespace, cannot reach the executor's socket.
  if (text("host") != shm::hostIdentity()) {
    state->channelRefused = true;
    return nullptr;
  }
  // An executor that does not name a version speaks the first; one naming a version this
  // client did not ask for is not trusted with the channel.
  uint32_t version = 1;
  if (offer->contains("page_version")) {
    const json &given = (*offer)["page_version"];
    if (!given.is_number_unsigned() || given.get<uint64_t>() < 1 || given.get<uint64_t>() > asked) {
      state->channelRefused = true;
      return nullptr;
    }
    version = given.get<uint32_t>();
  }
  llvm::Expected<std::unique_ptr<shm::Client>> client =
      shm::Client::connect(text("socket"), text("token"), options.connectTimeout, version);
  if (!client) {
    llvm::consumeError(client.takeError());
    state->channelRefused = true;
    return nullptr;
  }
  state->channel = std::move(*client);
  return state->channel;
}

llvm::Expected<uint64_t> HttpBackend::launchAsync(llvm::StringRef session, const ObjectBlob &object,
                                                  llvm::StringRef entry) {
  std::string operation = "starting '" + entry.str() + "'";
  std::string body = json{{"object", object.sha256}, {"entry", entry.str()}}.dump();
  return withRecovery<uint64_t>(session, &object, [&]() -> llvm::Expected<uint64_t> {
    llvm::Expected<json> reply =
        exchange("POST", sessionPath(session) + "/launch_async", body, operation, session);
    if (!reply)
      return reply.takeError();
    if (!reply->contains("launch") || !(*reply)["launch"].is_number_unsigned())
      return makeCodedError(ErrorCode::Internal, where(operation) + ": reply has no launch id");
    return (*reply)["launch"].get<uint64_t>();
  });
}

llvm::Error HttpBackend::await(llvm::StringRef session, uint64_t launchId) {
  std::string operation = "awaiting launch " + std::to_string(launchId);
  std::string path = sessionPath(session) + "/launches/" + std::to_string(launchId) + "/await";
  llvm::Error awaited = exchange("POST", path, "", operation, session).takeError();
  if (!awaited)
    return awaited;
  Failure failure = toFailure(std::move(awaited));
  if (failure.code == ErrorCode::Unavailable) // Not delivered: the launch is still there.
    return exchange("POST", path, "", operation, session).takeError();
  // A launch whose session is gone (its executor died or restarted) may or may not have run;
  // it had no results to bring back, and running it again could run it twice.
  if (failure.code == ErrorCode::UnknownSession || failure.code == ErrorCode::ExecutorLost)
    return makeCodedError(ErrorCode::ExecutorLost,
                          failure.message + "; the launch was lost with its executor");
  return toError(failure);
}

llvm::Expected<std::string> HttpBackend::callOnce(llvm::StringRef session, llvm::StringRef symbol,
                                                  llvm::StringRef input, uint64_t outputSize) {
  std::string operation = "calling '" + symbol.str() + "'";
  httplib::Request req;
  req.method = "POST";
  req.path = sessionPath(session) + "/call/" + symbol.str();
  req.set_header("Content-Type", wire::kBytesContentType);
  req.set_header(wire::kSessionHeader, session.str());
  req.set_header(wire::kOutputSizeHeader, std::to_string(outputSize));
  req.content_length_ = input.size();
  req.content_provider_ = [input](size_t offset, size_t length, httplib::DataSink &sink) {
    return sink.write(input.data() + offset, length);
  };
  bool ok = false;
  bool tooLong = false;
  std::string output, errorBody;
  req.response_handler = [&](const httplib::Response &res) {
    ok = res.status == 200;
    if (ok)
      output.reserve(outputSize);
    return true;
  };
  req.content_receiver = [&](const char *data, size_t size, uint64_t, uint64_t) {
    if (!ok) {
      appendErrorBody(errorBody, data, size);
      return true;
    }
    if (output.size() + size > outputSize) {
      tooLong = true;
      return false;
    }
    output.append(data, size);
    return true;
  };
  httplib::Response res;
  llvm::Expected<int> status = send(req, res, operation);
  if (tooLong) {
    llvm::consumeError(status.takeError());
    return makeCodedError(ErrorCode::BadFrame, where(operation) + ": reply is longer than the " +
                                                   std::to_string(outputSize) + " bytes expected");
  }
  if (!status)
    return status.takeError();
  if (*status != 200) {
    Failure failure = parseErrorBody(*status, errorBody);
    return makeCodedError(failure.code, where(operation) + ": " + failure.message);
  }
  if (output.size() != outputSize)
    return makeCodedError(ErrorCode::BadFrame,
                          llvm::formatv("{0}: reply has {1} bytes, expected {2}", where(operation),
                                        output.size(), outputSize));
  return std::move(output);
}

llvm::Expected<std::string> HttpBackend::call(llvm::StringRef session, llvm::StringRef symbol,
                                              llvm::StringRef input, uint64_t outputSize) {
  return withRecovery<std::string>(session, nullptr,
                                   [&] { return callOnce(session, symbol, input, outputSize); });
}

} // namespace

llvm::Expected<std::unique_ptr<Backend>> createHttpBackend(llvm::StringRef address,
                                                           const BackendOptions &options) {
  llvm::StringRef text = address;
  text.consume_front("http://");
  llvm::Expected<HostPort> parsed = parseHostPort(text);
  if (!parsed)
    return llvm::createStringError("connecting to '" + address +
                                   "': " + llvm::toString(parsed.takeError()) +
                                   "; expected host:port, https://host:port or unix:PATH");
  BackendOptions settings = options;
  if (parsed->tls) {
    settings.tls = withTlsEnvironment(options.tls);
    if (llvm::Error error = checkClientFiles(settings.tls))
      return makeCodedError(ErrorCode::TlsFailed,
                            "connecting to '" + address + "': " + llvm::toString(std::move(error)));
  }
  return std::make_unique<HttpBackend>(address.str(), std::move(*parsed), std::move(settings));
}

llvm::Expected<ExecutorCpu> askExecutorCpu(llvm::StringRef address, const BackendOptions &options,
                                           std::chrono::milliseconds connectTimeout,
                                           std::chrono::milliseconds timeout) {
  BackendOptions settings = options;
  settings.connectTimeout = std::min(connectTimeout, options.connectTimeout);
  settings.requestTimeout = std::min(timeout, options.requestTimeout);
  settings.sharedMemory = SharedMemory::Off;
  llvm::Expected<std::unique_ptr<Backend>> backend = createHttpBackend(address, settings);
  if (!backend)
    return backend.takeError();
  llvm::Expected<Health> health = (*backend)->health();
  if (!health)
    return health.takeError();
  if (health->triple.empty() || health->cpu.empty())
    return makeCodedError(ErrorCode::Unavailable,
                          "asking " + address +
                              " for its CPU: its health names no triple or cpu (an executor "
                              "older than the CPU report)");
  return ExecutorCpu{health->triple, health->cpu, health->features};
}

} // namespace courier::transport
