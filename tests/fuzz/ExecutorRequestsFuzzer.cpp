// Fuzzes courier-executor's request bodies through its real HTTP server
// (executor/ExecutorServer.h), running in this process on a loopback port: session opening
// and checks, launch frames, calls and async launches with their awaits. Each input is up to
// four requests separated by a line "----", each
//   METHOD PATH
//   Header: value
//   (an empty line)
//   body
// where $SESSION, $OBJECT and $MISSING stand for the input's session, the stored object
// (tests/kernels/scale.o) and an object the executor lacks. The harness frames each request
// (Content-Length), so the bodies, not HTTP's framing, are what varies. Every input starts
// from the same state, the session open with the object attached: an input that could have
// changed it (anything but launches and calls) has the session closed and opened again after
// it, so inputs do not depend on each other.
// Every reply must be either a success of its route or {"error": {"code", "message"}} with
// a known code and that code's status, and the executor must keep serving.
//
// An input that starts with the line "RAW" is instead one request's bytes, sent as they are
// on a connection of its own and half-closed: HTTP's framing itself (chunk sizes, the
// spellings of Content-Length and Transfer-Encoding). It must hold exactly one request line
// (one " HTTP/1."), and the executor must answer it once: a second answer means part of the
// request was served as another (a framing differential), which is what nginx in front would
// not see. The one exception is a request whose head names neither Content-Length nor
// Transfer-Encoding: it has no body (RFC 9112 6.3), so the bytes after its head are a next
// request, which nginx too reads so; holding no request line, they may only be refused (400).
//
// Shipped code runs in this process (isolation "none"), so only what cannot misbehave is
// offered: scale.o, whose one entry reads exactly the input it is given, and the test plugin's
// call symbols. A call of any other symbol would run arbitrary code with the call signature,
// which only a session's worker contains (docs/protocol.md, "Workers"); such inputs are
// left out of the corpus.
#include "tests/fuzz/FuzzSupport.h"

#include "executor/ExecutorServer.h"
#include "tests/kernels/KernelPaths.h"
#include "transport/ErrorCode.h"
#include "transport/Wire.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <memory>
#include <netinet/in.h>
#include <regex>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

using namespace courier;
using namespace courier::fuzz;
using namespace courier::transport;
using courier::executor::ExecutorServer;
using courier::executor::ExecutorServerOptions;

namespace {

constexpr const char *kSession = "fuzz";

struct Executor {
  std::unique_ptr<ExecutorServer> server;
  std::thread serving;
  std::unique_ptr<httplib::Client> client;
  std::string object;
};

void openSession(Executor &e);

/// Started once and never stopped: it serves until the fuzzer exits.
Executor &fuzzedExecutor() {
  static Executor *instance = [] {
    auto *started = new Executor;
    Executor &e = *started;
    ExecutorServerOptions options;
    options.core.isolation = Isolation::InProcess;
    options.core.plugins = {COURIER_TEST_PLUGIN};
    options.logRequests = false;
    options.threads = 4;
    options.maxBodyBytes = uint64_t(1) << 20;
    llvm::Expected<std::unique_ptr<ExecutorServer>> server = ExecutorServer::create(options);
    if (!server)
      broken("starting the executor: " + llvm::toString(server.takeError()));
    e.server = std::move(*server);
    e.serving = std::thread([server = e.server.get()] {
      if (llvm::Error error = server->run())
        broken("the executor stopped: " + llvm::toString(std::move(error)));
    });
    e.client = std::make_unique<httplib::Client>("127.0.0.1", e.server->port());
    e.client->set_read_timeout(10, 0);
    e.client->set_keep_alive(true);
    // Without it, Nagle's algorithm and delayed ACKs cost tens of milliseconds a request.
    e.client->set_tcp_nodelay(true);
    auto bytes = llvm::MemoryBuffer::getFile(COURIER_KERNEL_SCALE);
    if (!bytes)
      broken("reading " COURIER_KERNEL_SCALE);
    e.object = wire::sha256Hex((*bytes)->getBuffer());
    httplib::Result stored = e.client->Put("/v1/objects/" + e.object, (*bytes)->getBuffer().str(),
                                           wire::kBytesContentType);
    if (!stored || stored->status / 100 != 2)
      broken("storing scale.o in the executor");
    openSession(e);
    return started;
  }();
  return *instance;
}

std::string substitute(llvm::StringRef text, const Executor &e) {
  std::string out = text.str();
  auto replaceAll = [&](const std::string &from, const std::string &to) {
    for (size_t at = out.find(from); at != std::string::npos; at = out.find(from, at + to.size()))
      out.replace(at, from.size(), to);
  };
  replaceAll("$SESSION", kSession);
  replaceAll("$OBJECT", e.object);
  replaceAll("$MISSING", std::string(64, 'e'));
  return out;
}

/// The path as httplib decodes it before routing.
std::string decodedPath(const std::string &path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    unsigned value = 0;
    if (path[i] == '%' && i + 2 < path.size() && llvm::isHexDigit(path[i + 1]) &&
        llvm::isHexDigit(path[i + 2]) &&
        !llvm::StringRef(path).substr(i + 1, 2).getAsInteger(16, value)) {
      out.push_back(static_cast<char>(value));
      i += 2;
    } else {
      out.push_back(path[i]);
    }
  }
  return out;
}

/// True for a path the route table would hand to `call` with a symbol outside the plugin.
bool callsOutsideThePlugin(const std::string &path) {
  static const std::regex call(
      R"(/v1/sessions/[A-Za-z0-9_-]{1,64}/call/([A-Za-z_.$][A-Za-z0-9_.$]{0,255}))");
  std::smatch match;
  std::string decoded = decodedPath(path);
  if (!std::regex_match(decoded, match, call))
    return false;
  std::string symbol = match[1];
  return symbol != "courier_test_sum" && symbol != "courier_test_fail" &&
         symbol != "courier_test_nothing";
}

struct Request {
  std::string method, path, body;
  httplib::Headers headers;
};

/// Opens the fuzz session, with the object attached: the state every input starts from.
void openSession(Executor &e) {
  std::string session = std::string("/v1/sessions/") + kSession;
  httplib::Result opened = e.client->Put(session, "", wire::kJsonContentType);
  if (!opened || opened->status / 100 != 2)
    broken("opening the fuzz session");
  httplib::Result attached =
      e.client->Post(session + "/objects/" + e.object, "", wire::kJsonContentType);
  if (!attached || attached->status != 200)
    broken("attaching the object to the fuzz session");
}

/// True for a request that leaves the session as it found it: a launch or a call (its
/// object is attached already), whatever their bodies hold.
bool leavesSessionAlone(const Request &request) {
  static const std::regex stateless(
      R"(/v1/sessions/[A-Za-z0-9_-]{1,64}/(launch|call/[A-Za-z_.$][A-Za-z0-9_.$]{0,255}))");
  return request.method == "POST" && std::regex_match(decodedPath(request.path), stateless);
}

/// One request of the input, or nothing if it is not one this harness sends.
std::optional<Request> parseRequest(llvm::StringRef text, const Executor &e) {
  Request request;
  llvm::StringRef line = takeLine(text);
  auto [method, path] = line.split(' ');
  if (!llvm::is_contained({"GET", "PUT", "POST", "DELETE"}, method) || !path.starts_with("/"))
    return std::nullopt;
  request.method = method.str();
  request.path = substitute(path, e);
  if (callsOutsideThePlugin(request.path))
    return std::nullopt;
  while (!text.empty()) {
    llvm::StringRef header = takeLine(text);
    if (header.empty())
      break;
    auto [name, value] = header.split(':');
    name = name.trim();
    // The harness frames the request; HTTP's own framing is not what this fuzzer varies.
    if (name.empty() || name.equals_insensitive("Content-Length") ||
        name.equals_insensitive("Transfer-Encoding") || name.equals_insensitive("Connection") ||
        name.equals_insensitive("Host") || name.equals_insensitive("Expect"))
      return std::nullopt;
    request.headers.emplace(name.str(), substitute(value.trim(), e));
  }
  request.body = substitute(text, e);
  return request;
}

/// What every reply promises: a success of its route, or the executor's error body.
void checkReply(const Request &request, const httplib::Response &reply) {
  if (reply.status / 100 == 2) {
    if (reply.get_header_value("Content-Type") == wire::kFrameContentType) {
      llvm::StringRef body = reply.body;
      llvm::Expected<wire::LaunchReply> decoded = wire::decodeLaunchReply(body.split('\n').first);
      if (!decoded)
        broken("a launch reply whose header does not decode: " +
               llvm::toString(decoded.takeError()));
      uint64_t bytes = 0;
      for (const wire::TensorHeader &t : decoded->results)
        bytes += t.bytes;
      if (body.split('\n').second.size() != bytes)
        broken("a launch reply whose payload is not what its header declares");
    }
    return;
  }
  nlohmann::json body = nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || !body.contains("error") || !body["error"].is_object() ||
      !body["error"].contains("code") || !body["error"]["code"].is_string() ||
      !body["error"].contains("message") || !body["error"]["message"].is_string())
    broken(request.method + " " + request.path + " answered " + std::to_string(reply.status) +
           " without an error body: " + reply.body);
  std::string code = body["error"]["code"];
  std::optional<ErrorCode> known = parseErrorCode(code);
  if (!known)
    broken("an error code outside the table: " + code);
  if (httpStatus(*known) != reply.status)
    broken("error code " + code + " sent with status " + std::to_string(reply.status));
  if (*known == ErrorCode::Internal)
    broken(request.method + " " + request.path + " failed inside the executor: " + reply.body);
}

httplib::Result send(Executor &e, const Request &request) {
  httplib::Request sent;
  sent.method = request.method;
  sent.path = request.path;
  sent.headers = request.headers;
  sent.body = request.body;
  if (request.method != "GET" && !sent.has_header("Content-Type"))
    sent.set_header("Content-Type", "application/octet-stream");
  return e.client->send(sent);
}

/// Sends `bytes` on a new connection to the executor, half-closes it and returns all it
/// answered (at most 1 MiB, within 10 s).
std::string exchangeRaw(const Executor &e, const std::string &bytes) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    broken("socket for a raw request");
  llvm::scope_exit closeFd([&] { ::close(fd); });
  struct timeval limit = {10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(e.server->port());
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) != 0)
    broken("connecting for a raw request");
  for (size_t sent = 0; sent < bytes.size();) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0)
      break; // The executor closed first: what it answered is still read.
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string answered;
  char buffer[65536];
  while (answered.size() < (1u << 20)) {
    ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0)
      break;
    answered.append(buffer, static_cast<size_t>(n));
  }
  return answered;
}

/// Counts occurrences of `needle` in `haystack`.
size_t occurrences(llvm::StringRef haystack, llvm::StringRef needle) {
  size_t count = 0;
  for (size_t at = haystack.find(needle); at != llvm::StringRef::npos;
       at = haystack.find(needle, at + needle.size()))
    ++count;
  return count;
}

/// The status of each answer in `answered`, in order (the three characters after each
/// status line's "HTTP/1.x ").
std::vector<llvm::StringRef> answerStatuses(llvm::StringRef answered) {
  std::vector<llvm::StringRef> statuses;
  for (size_t at = answered.find("HTTP/1."); at != llvm::StringRef::npos;
       at = answered.find("HTTP/1.", at + 1)) {
    llvm::StringRef line = answered.substr(at);
    if (line.size() >= 12 && line[8] == ' ')
      statuses.push_back(line.substr(9, 3));
  }
  return statuses;
}

/// Whether the head of `request` (up to its blank line) has a header line named
/// Content-Length or Transfer-Encoding (any case, blanks allowed before the colon).
bool namesFraming(llvm::StringRef request) {
  llvm::StringRef head = request.substr(0, request.find("\r\n\r\n"));
  llvm::SmallVector<llvm::StringRef> lines;
  head.split(lines, '\n');
  for (llvm::StringRef line : lines) {
    llvm::StringRef name = line.split(':').first.rtrim(" \t");
    if (line.contains(':') &&
        (name.equals_insensitive("content-length") || name.equals_insensitive("transfer-encoding")))
      return true;
  }
  return false;
}

int runRaw(Executor &e, llvm::StringRef text) {
  std::string bytes = substitute(text, e);
  // Calls run code in this process; only a session's worker contains that (see above).
  if (occurrences(bytes, " HTTP/1.1\r\n") != 1 || occurrences(bytes, " HTTP/1.") != 1 ||
      decodedPath(bytes).find("call") != std::string::npos)
    return -1;
  std::string answered = exchangeRaw(e, bytes);
  std::vector<llvm::StringRef> statuses = answerStatuses(answered);
  bool unframed = !namesFraming(bytes);
  for (size_t i = 1; i < statuses.size(); ++i)
    if (!unframed || statuses[i] != "400")
      broken("one raw request was answered " + std::to_string(statuses.size()) + " times, answer " +
             std::to_string(i + 1) + " with " + statuses[i] +
             ": part of it was served as another request");
  // Whatever the request did to the session, the next input starts from the same state.
  httplib::Result closed = e.client->Delete(std::string("/v1/sessions/") + kSession);
  if (!closed)
    broken("closing the fuzz session after a raw request: no reply");
  openSession(e);
  return 0;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Executor &e = fuzzedExecutor();
  if (llvm::StringRef input = bytesOf(data, size); input.consume_front("RAW\n")) {
    if (int rejected = runRaw(e, input))
      return rejected;
    httplib::Result health = e.client->Get("/v1/health");
    if (!health || health->status != 200)
      broken("the executor no longer answers after a raw request");
    return 0;
  }
  std::vector<Request> requests;
  llvm::StringRef rest = bytesOf(data, size);
  while (!rest.empty() && requests.size() < 4) {
    auto [text, tail] = rest.split("\n----\n");
    std::optional<Request> request = parseRequest(text, e);
    if (!request)
      return -1;
    requests.push_back(std::move(*request));
    rest = tail;
  }
  if (requests.empty() || !rest.empty())
    return -1;

  for (const Request &request : requests) {
    httplib::Result reply = send(e, request);
    if (!reply)
      broken(request.method + " " + request.path +
             " got no reply: " + httplib::to_string(reply.error()));
    checkReply(request, *reply);
  }
  if (!llvm::all_of(requests, leavesSessionAlone)) {
    httplib::Result closed = e.client->Delete(std::string("/v1/sessions/") + kSession);
    if (!closed)
      broken("closing the fuzz session: no reply");
    openSession(e);
  }
  httplib::Result health = e.client->Get("/v1/health");
  if (!health)
    broken("the executor no longer answers: " + httplib::to_string(health.error()));
  if (health->status != 200)
    broken("the executor is no longer healthy: " + std::to_string(health->status) + " " +
           health->body);
  return 0;
}
