// The server plumbing the executor (ExecutorServer.cpp) and courier-serve (RestService.cpp)
// share, so the two agree on auth, framing, error shape, body reading, metrics, logging and
// shutdown. Internal: only those two files include it, and they are the only ones that touch
// cpp-httplib's server side.
#ifndef COURIER_TRANSPORT_HTTPSERVICE_H
#define COURIER_TRANSPORT_HTTPSERVICE_H

#include "transport/ListenOptions.h"
#include "transport/ParkingServer.h"
#include "transport/Wire.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <httplib.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

namespace courier::transport {

/// The declared Content-Length of a request, 0 when absent or malformed.
uint64_t contentLength(const httplib::Request &req);

/// Streams a frame as the response body, piece by piece as the socket takes it. `writer`
/// keeps whatever it reads from (result tensors) alive until the response is sent.
void streamFrame(httplib::Response &res, std::shared_ptr<wire::FrameWriter> writer);
/// Sends a frame as the response body: a small one copied out in one piece (a streamed reply
/// costs extra writes per request), a large one streamed (streamFrame).
void sendFrame(httplib::Response &res, std::shared_ptr<wire::FrameWriter> writer);

/// Reads and discards the rest of a body, so a refused request leaves the keep-alive
/// connection in step; when the body cannot be read the connection closes after the reply.
void discardBody(const httplib::ContentReader &reader, httplib::Response &res);

/// Refuses to serve beyond loopback without a token; `because` says why it matters here.
llvm::Error requireTokenBeyondLoopback(const std::string &host, const std::string &token,
                                       llvm::StringRef because);

struct HttpServiceOptions {
  HttpListenOptions listen;
  /// Names the server in run()'s error ("executor", "courier-serve").
  std::string name;
  /// The message of httplib's own 413 (a Content-Length over maxBodyBytes).
  std::string payloadTooLargeMessage;
  /// Writes {"error":{"code","message"}} in the server's own JSON, with the status of `code`.
  std::function<void(httplib::Response &, ErrorCode code, llvm::StringRef message)> sendError;
  /// Turns a handler's failure into an error response (the server's error types may carry
  /// more than a code and a message).
  std::function<void(httplib::Response &, llvm::Error)> reportFailure;
  /// Names the request metrics ("courier": courier_requests_total, courier_sent_bytes_total,
  /// ...).
  std::string metricPrefix;
  /// Whether <prefix>_requests_total counts by route as well as by status.
  bool countByRoute = false;
  /// What a request's log line calls the thing it concerns ("session", "module"), and the
  /// placeholder of route names that stands for it ("{id}", "{name}"): a route whose first
  /// placeholder it is logs its first capture under that key, and a handler may name the
  /// thing itself (noteLogSubject) when the path does not.
  std::string subjectKey, subjectPlaceholder;
};

/// One httplib server set up the way both servers want it: a thread pool, TCP_NODELAY,
/// short keep-alive, a body limit, the bearer-token check before routing, httplib's own
/// statuses in our error shape, one log line per request, a listener no second server can
/// share (TCP or a unix socket), a drain that lets requests in flight finish, and a stop()
/// that does not wait out idle keep-alive connections. The owner installs its route table
/// (addRoutes), then bind()s.
class HttpService {
public:
  using Handler = std::function<llvm::Error(const httplib::Request &, httplib::Response &)>;
  using ReaderHandler = std::function<llvm::Error(const httplib::Request &, httplib::Response &,
                                                  const httplib::ContentReader &)>;

  /// One line of a server's route table. A ReaderHandler reads the body itself; a Handler
  /// gets it read whole into req.body (GET routes take only a Handler).
  struct Route {
    enum class Method { Get, Put, Post, Delete };
    Method method;
    /// httplib's regular expression over the path; its groups land in req.matches.
    std::string pattern;
    /// The route as a template ("GET /v1/modules/{name}"): the label requests are counted
    /// under.
    const char *name;
    std::variant<Handler, ReaderHandler> handler;
  };
  /// Turns a member function of the server into a route's handler.
  template <typename Owner>
  static Handler to(Owner *owner,
                    llvm::Error (Owner::*fn)(const httplib::Request &, httplib::Response &)) {
    return [owner, fn](const httplib::Request &req, httplib::Response &res) {
      return (owner->*fn)(req, res);
    };
  }
  template <typename Owner>
  static ReaderHandler to(Owner *owner,
                          llvm::Error (Owner::*fn)(const httplib::Request &, httplib::Response &,
                                                   const httplib::ContentReader &)) {
    return [owner, fn](const httplib::Request &req, httplib::Response &res,
                       const httplib::ContentReader &reader) {
      return (owner->*fn)(req, res, reader);
    };
  }

  explicit HttpService(HttpServiceOptions options);
  /// Removes the unix socket file bind() created, if it is still the one.
  ~HttpService();

  const HttpServiceOptions &options() const { return opts; }
  httplib::Server &server() { return http; }
  /// Where the server adds metrics of its own; /metrics serializes them with the request
  /// metrics.
  prometheus::Registry &metrics() { return *registry; }
  /// The Prometheus text of the registry's metrics, then of `more` (families read from
  /// counters kept elsewhere, see transport/Metrics.h).
  std::string metricsText(const std::vector<prometheus::MetricFamily> &more = {});

  /// The one place failures become responses; nothing thrown below escapes into httplib.
  /// `route` tags the request for the metrics counted by route.
  httplib::Server::Handler wrap(Handler handler) { return wrap(0, std::move(handler)); }
  httplib::Server::HandlerWithContentReader wrap(ReaderHandler handler) {
    return wrap(0, std::move(handler));
  }
  httplib::Server::Handler wrap(size_t route, Handler handler);
  httplib::Server::HandlerWithContentReader wrap(size_t route, ReaderHandler handler);

  /// Installs a route table, each route wrapped; its tag is its place in the table plus one
  /// (0: no route ran).
  void addRoutes(std::vector<Route> table);
  /// The name of the route `tag` stands for; "none" for 0.
  const char *routeName(size_t tag) const;
  /// Names what the request being served concerns in its log line (a session just opened,
  /// a module named in the body); call from its handler.
  static void noteLogSubject(std::string subject);
  /// The id of the request being served: the client's X-Request-Id when it gives a usable
  /// one (1 to 64 of A-Z a-z 0-9 . _ -), else one made up here; every response carries it
  /// back in X-Request-Id and its log line names it.
  static const std::string &requestId();
  /// The path of the request being served or refused, for a server whose routes answer
  /// errors in more than one shape (courier-serve's /v2); empty before a request is read.
  static const std::string &requestPath();
  /// How many tags there are, "none" included.
  size_t routeCount() const { return routeNames.size(); }

  /// Reads a whole body into `out`, growing it as the bytes come, up to the body limit. A
  /// failure is payload_too_large (over the limit) or bad_request (cut short); either way the
  /// unread rest would be parsed as a next request, so the connection closes after the reply.
  llvm::Error readBody(const httplib::Request &req, httplib::Response &res,
                       const httplib::ContentReader &reader, std::string &out) const;
  /// Feeds a body to `frame`, up to the body limit, failing as readBody does; the frame's own
  /// first error ends feeding but not reading, so the connection stays in step.
  llvm::Error readFrame(const httplib::Request &req, httplib::Response &res,
                        const httplib::ContentReader &reader, wire::FrameReader &frame) const;

  /// Binds the listener: without SO_REUSEPORT, so an address another server holds is
  /// refused ("127.0.0.1:7000 is already in use") rather than shared. Refuses TLS settings
  /// that do not fit (transport/Tls.h, checkListenTls) and certificate or key files that do
  /// not load, naming the file.
  llvm::Error bind();
  /// "host:port" actually bound ("https://host:port" with TLS), or "unix:PATH".
  std::string address() const;
  int port() const { return boundPort; }

  /// Serves requests on the calling thread until stop() is called.
  llvm::Error run();
  /// Starts a drain and waits until no request other than the probes (/v1/health,
  /// /v1/ready, /metrics) is in flight, or the drain timeout passes, or stop() is called.
  /// From then on draining() is true; the listener keeps accepting, so probes and work on
  /// what already exists keep being answered. Call stop() afterwards.
  void drain();
  /// Ends a drain's wait at once (a second SIGTERM); safe from any thread.
  void cutDrainShort();
  /// True once drain() began: /v1/ready answers 503 and nothing new is taken on.
  bool draining() const { return drainStarted; }
  /// Requests in flight other than the probes: what a drain waits for.
  int64_t workInFlightNow() const { return workInFlight; }
  /// Stops serving; safe from any thread, and before or during run().
  void stop();
  /// Waits up to `timeout` for stop(); true once it has been called.
  bool waitForStop(std::chrono::steady_clock::duration timeout);

private:
  bool authorized(const httplib::Request &req) const;
  void installHandlers();
  /// Every request before its route: counts it, gives it an id, and refuses ambiguous
  /// framing, compressed bodies and a missing token.
  httplib::Server::HandlerResponse beforeRouting(const httplib::Request &req,
                                                 httplib::Response &res);
  /// A status httplib produced itself, given our JSON error body.
  httplib::Server::HandlerResponse httplibError(const httplib::Request &req,
                                                httplib::Response &res);
  /// Every response: counts and logs it, and wakes drain() or stop() after the last.
  void afterResponse(const httplib::Request &req, const httplib::Response &res);
  void installMetrics();

  HttpServiceOptions opts;
  /// Why the TLS context could not be set up, reported by bind(); empty when it could.
  std::string tlsProblem;
  /// The server, plaintext or TLS.
  std::unique_ptr<ParkingServer> ownedServer;
  httplib::Server &http;
  ParkingServer *parking = nullptr;
  /// The whole response refusing a connection at a connection limit.
  std::string refusalResponse(ParkingServer::Refusal reason);
  int boundPort = 0;
  /// The listening socket, for raising its backlog after httplib's listen().
  int listenFd = -1;
  /// The unix socket file created by bind(), removed by the destructor if unchanged.
  bool ownsSocketFile = false;
  uint64_t socketDevice = 0, socketInode = 0;
  std::vector<const char *> routeNames{"none"};
  /// Per route tag: whether its first capture is the log subject (subjectPlaceholder).
  std::vector<bool> subjectFromPath{false};
  /// Writes the request's log line.
  void logRequest(const httplib::Request &req, const httplib::Response &res, size_t route,
                  double seconds, uint64_t in, uint64_t out);

  /// Counts a request under its route (when counted by route) and status.
  void countRequest(size_t route, int status);
  std::unique_ptr<prometheus::Registry> registry;
  prometheus::Family<prometheus::Counter> *requests = nullptr;
  prometheus::Histogram *requestSeconds = nullptr;
  prometheus::Counter *bytesIn = nullptr, *bytesOut = nullptr;
  prometheus::Gauge *workGauge = nullptr;
  /// Read from the ParkingServer at each scrape.
  prometheus::Gauge *connectionsGauge = nullptr, *threadsGauge = nullptr;
  /// requests' counters, [route tag][status] flattened, each looked up on its first use.
  static constexpr size_t kStatuses = 600;
  std::unique_ptr<std::atomic<prometheus::Counter *>[]> requestCounters;

  std::mutex stopMutex;
  std::condition_variable stopSignal;
  bool stopping = false;
  std::atomic<bool> runEntered{false};
  /// Set once run()'s accept loop has returned, for whatever reason.
  std::atomic<bool> listenReturned{false};
  /// Requests between routing and their response being written.
  std::atomic<int64_t> inFlight{0};
  /// Requests in flight other than the probes; drain() waits for none.
  std::atomic<int64_t> workInFlight{0};
  std::atomic<bool> drainStarted{false};
  bool drainCut = false; ///< Guarded by stopMutex.
  /// Set while stop() waits for requests in flight.
  std::atomic<bool> stopWaiting{false};
};

} // namespace courier::transport

#endif // COURIER_TRANSPORT_HTTPSERVICE_H
