// The /v1 protocol spoken directly (no Backend): every kind of bad request gets its error
// code and status, and the executor keeps serving the requests that follow.
#include "executor/ExecutorServer.h"
#include "tests/executor/Replies.h"
#include "tests/kernels/KernelPaths.h"
#include "tests/support/PrometheusText.h"
#include "tests/support/RawConnection.h"
#include "tests/transport/ExecutorProcess.h"
#include "transport/ParkingServer.h"
#include "transport/Wire.h"

#include "llvm/Support/MemoryBuffer.h"

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <chrono>
#include <csignal>
#include <fstream>
#include <future>
#include <netinet/in.h>
#include <regex>
#include <sstream>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace courier::transport;
using namespace courier::testing;
using json = nlohmann::json;

namespace {

struct Peer {
  explicit Peer(const ExecutorProcess &executor, std::string token = "")
      : executor(executor), client("127.0.0.1", executor.port()), token(std::move(token)) {
    client.set_keep_alive(true);
    client.set_read_timeout(std::chrono::seconds(20));
  }

  httplib::Headers headers(httplib::Headers extra = {}) const {
    if (!token.empty())
      extra.emplace("Authorization", "Bearer " + token);
    return extra;
  }

  httplib::Result post(const std::string &path, const std::string &body,
                       const char *type = wire::kFrameContentType, httplib::Headers extra = {}) {
    return client.Post(path.c_str(), headers(std::move(extra)), body, type);
  }

  std::string openSession() {
    httplib::Result res = post("/v1/sessions", "", wire::kJsonContentType);
    REQUIRE(res);
    REQUIRE(res->status == 201);
    return json::parse(res->body)["session"];
  }

  std::string putObject(const std::string &bytes) {
    std::string sha = wire::sha256Hex(bytes);
    httplib::Result res =
        client.Put(("/v1/objects/" + sha).c_str(), headers(), bytes, wire::kBytesContentType);
    REQUIRE(res);
    REQUIRE((res->status == 201 || res->status == 200));
    return sha;
  }

  /// The executor still answers a plain request.
  bool healthy() {
    httplib::Result res = client.Get("/v1/health", headers());
    return res && res->status == 200;
  }

  const ExecutorProcess &executor;
  httplib::Client client;
  std::string token;
};

std::string frame(const json &header, const std::string &payload) {
  return header.dump() + "\n" + payload;
}

json scaleHeader(const std::string &sha, int64_t n, const char *entry = "_catalyst_pyface_scale") {
  return {{"object", sha},
          {"entry", entry},
          {"inputs", {{{"elemSize", 8}, {"sizes", {n}}, {"offset", 0}, {"bytes", 8 * n}}}},
          {"results", {{{"rank", 1}, {"elemSize", 8}}}}};
}

/// Sends `request` as is on a fresh connection and returns whatever the executor answers
/// before it closes the connection. `endBody` closes the sending side, so a body shorter
/// than its Content-Length ends there (httplib then sends no reply at all).
std::string rawExchange(const ExecutorProcess &executor, const std::string &request,
                        bool endBody = false) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address = loopbackAddress(executor.port());
  timeval timeout{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string reply;
  if (::connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    if (endBody)
      ::shutdown(fd, SHUT_WR);
    char buffer[4096];
    for (ssize_t n; (n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;)
      reply.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return reply;
}

std::string doubles(std::vector<double> values) {
  return std::string(reinterpret_cast<const char *>(values.data()), values.size() * 8);
}

} // namespace

TEST_CASE("a launch frame is a JSON line followed by raw bytes, both ways", "[protocol]") {
  ExecutorProcess executor;
  Peer peer(executor);
  std::string session = peer.openSession();
  std::string sha = peer.putObject(readFile(COURIER_KERNEL_SCALE));
  httplib::Result res = peer.post("/v1/sessions/" + session + "/launch",
                                  frame(scaleHeader(sha, 2), doubles({1.5, -2})),
                                  wire::kFrameContentType, {{wire::kSessionHeader, session}});
  REQUIRE(res);
  REQUIRE(res->status == 200);
  CHECK(res->get_header_value("Content-Type") == wire::kFrameContentType);
  size_t newline = res->body.find('\n');
  REQUIRE(newline != std::string::npos);
  json header = json::parse(res->body.substr(0, newline));
  CHECK(header == json::parse(R"({"results":[{"elemSize":8,"sizes":[2],"offset":0,"bytes":16}]})"));
  CHECK(res->body.substr(newline + 1) == doubles({3, -4}));
}

TEST_CASE("bad requests get their error code and leave the executor serving", "[protocol]") {
  ExecutorProcess executor;
  Peer peer(executor);
  std::string session = peer.openSession();
  std::string sha = peer.putObject(readFile(COURIER_KERNEL_SCALE));
  std::string launch = "/v1/sessions/" + session + "/launch";

  struct Case {
    const char *what;
    std::function<httplib::Result()> send;
    int status;
    const char *code;
  };
  std::vector<Case> cases = {
      {"a frame whose header is not JSON", [&] { return peer.post(launch, "not json\n1234"); }, 400,
       "bad_frame"},
      {"a frame without a newline", [&] { return peer.post(launch, "{\"object\":"); }, 400,
       "bad_frame"},
      {"a frame with fewer bytes than its header declares",
       [&] {
         return peer.post(launch, frame(scaleHeader(sha, 4), doubles({1, 2})));
       },
       400, "bad_frame"},
      {"a frame with more bytes than its header declares",
       [&] {
         return peer.post(launch, frame(scaleHeader(sha, 1), doubles({1, 2})));
       },
       400, "bad_frame"},
      {"a tensor whose byte count does not match its sizes",
       [&] {
         json h = scaleHeader(sha, 2);
         h["inputs"][0]["bytes"] = 8;
         return peer.post(launch, frame(h, doubles({1})));
       },
       400, "bad_frame"},
      {"a negative dimension",
       [&] {
         json h = scaleHeader(sha, 2);
         h["inputs"][0]["sizes"] = {-2};
         return peer.post(launch, frame(h, ""));
       },
       400, "bad_frame"},
      {"an unknown session",
       [&] {
         return peer.post("/v1/sessions/nosuch/launch", frame(scaleHeader(sha, 1), doubles({1})));
       },
       404, "unknown_session"},
      {"a session header that disagrees with the path",
       [&] {
         return peer.post(launch, frame(scaleHeader(sha, 1), doubles({1})), wire::kFrameContentType,
                          {{wire::kSessionHeader, "other"}});
       },
       400, "bad_request"},
      {"an unknown object",
       [&] { return peer.post(launch, frame(scaleHeader(std::string(64, 'a'), 1), doubles({1}))); },
       404, "unknown_object"},
      {"an unknown entry",
       [&] {
         return peer.post(launch,
                          frame(scaleHeader(sha, 1, "_catalyst_pyface_nope"), doubles({1})));
       },
       404, "unknown_entry"},
      {"an object whose bytes do not match its hash",
       [&] {
         return peer.client.Put(("/v1/objects/" + std::string(64, 'b')).c_str(), "abc",
                                wire::kBytesContentType);
       },
       400, "hash_mismatch"},
      {"an object that is not a loadable ELF file",
       [&] {
         std::string bad = peer.putObject("definitely not ELF");
         return peer.post("/v1/sessions/" + session + "/objects/" + bad, "",
                          wire::kJsonContentType);
       },
       422, "invalid_object"},
      {"a call without an output size",
       [&] {
         return peer.post("/v1/sessions/" + session + "/call/courier_test_sum", doubles({1}),
                          wire::kBytesContentType);
       },
       400, "bad_request"},
      {"awaiting a launch that was never started",
       [&] {
         return peer.post("/v1/sessions/" + session + "/launches/42/await", "",
                          wire::kJsonContentType);
       },
       404, "unknown_launch"},
      {"closing an unknown session", [&] { return peer.client.Delete("/v1/sessions/nosuch"); }, 404,
       "unknown_session"},
      {"detaching an object from an unknown session",
       [&] { return peer.client.Delete(("/v1/sessions/nosuch/objects/" + sha).c_str()); }, 404,
       "unknown_session"},
      {"a path that is not a route", [&] { return peer.client.Get("/v2/anything"); }, 404,
       "not_found"},
  };
  for (Case &c : cases) {
    INFO(c.what);
    httplib::Result res = c.send();
    REQUIRE(res);
    CHECK(res->status == c.status);
    CHECK(codeOf(res) == c.code);
    CHECK(res->get_header_value("Content-Type") == wire::kJsonContentType);
    CHECK(peer.healthy());
  }
  // And a good launch still works on the same connection.
  httplib::Result res = peer.post(launch, frame(scaleHeader(sha, 1), doubles({21})));
  REQUIRE(res);
  CHECK(res->status == 200);
}

TEST_CASE("a bad frame header is described once, with the code of what is wrong", "[protocol]") {
  ExecutorProcess executor;
  Peer peer(executor);
  std::string session = peer.openSession();
  std::string sha = peer.putObject(readFile(COURIER_KERNEL_SCALE));
  std::string launch = "/v1/sessions/" + session + "/launch";
  auto withInput = [&](const std::string &input) {
    return R"({"object":")" + sha + R"(","entry":"e","inputs":[)" + input + R"(],"results":[]})" +
           "\n";
  };
  struct Case {
    const char *what;
    std::string body;
    int status;
    std::string message;
  };
  std::vector<Case> cases = {
      {"a negative element size", withInput(R"({"elemSize":-8,"sizes":[3],"offset":0,"bytes":0})"),
       400, "malformed launch header: element size must be positive, got -8"},
      {"an element size beyond int64",
       withInput(R"({"elemSize":18446744073709551615,"sizes":[1],"offset":0,"bytes":0})"), 400,
       "malformed launch header: 'elemSize' is out of range: 18446744073709551615"},
      {"a shape whose byte count overflows",
       withInput(R"({"elemSize":8,"sizes":[1099511627776,1073741824],"offset":0,"bytes":0})"), 413,
       "launch header: tensor shape overflows 64 bits"},
      {"a dimension beyond int64",
       withInput(R"({"elemSize":8,"sizes":[18446744073709551615],"offset":0,"bytes":0})"), 413,
       "launch header: dimension 18446744073709551615 is too large"},
  };
  for (const Case &c : cases) {
    INFO(c.what);
    httplib::Result res = peer.post(launch, c.body);
    REQUIRE(res);
    CHECK(res->status == c.status);
    json body = json::parse(res->body, nullptr, false);
    CHECK(body["error"]["code"] == (c.status == 413 ? "payload_too_large" : "bad_frame"));
    CHECK(body["error"]["message"] == c.message);
  }
  CHECK(peer.healthy());
}

TEST_CASE("the executor refuses a request whose body could end in two places, before routing",
          "[protocol][security]") {
  ExecutorProcess executor;
  Peer peer(executor);
  std::string session = peer.openSession();
  std::string line =
      R"({"object":")" + std::string(64, 'a') + R"(","entry":"e","inputs":[],"results":[]})" + "\n";
  std::ostringstream chunk;
  chunk << std::hex << line.size();
  // What a client hiding a request in a body would have run: closing the session.
  std::string smuggled = "DELETE /v1/sessions/" + session + " HTTP/1.1\r\nHost: x\r\n\r\n";
  struct Case {
    const char *what;
    std::string request;
    std::string message;
  };
  std::vector<Case> cases = {
      {"two Content-Length headers",
       "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 5\r\n"
       "Connection: close\r\n\r\nhello",
       "the request has 2 Content-Length headers; send exactly one"},
      {"Content-Length beside Transfer-Encoding",
       "POST /v1/sessions/" + session + "/launch HTTP/1.1\r\nHost: x\r\n" +
           "Transfer-Encoding: chunked\r\nContent-Length: 3\r\nConnection: close\r\n\r\n" +
           chunk.str() + "\r\n" + line + "\r\n0\r\n\r\n",
       "the request has both Content-Length and Transfer-Encoding headers; send one of them"},
      {"a Content-Length that is a list",
       "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 2, 2\r\n"
       "Connection: close\r\n\r\n{}",
       "the Content-Length header '2, 2' is not a number of bytes"},
      {"a Transfer-Encoding httplib does not decode",
       "PUT /v1/sessions/other HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n"
       "\r\nsixteen bytes...",
       "the only Transfer-Encoding accepted is one 'chunked'; got 'gzip, chunked'"},
      // httplib reads no body of a GET: this one's would be run as a request of its own.
      {"a GET with a body",
       "GET /v1/sessions/" + session + " HTTP/1.1\r\nHost: x\r\nContent-Length: " +
           std::to_string(smuggled.size()) + "\r\n\r\n" + smuggled,
       "a GET carries no body; this one declares " + std::to_string(smuggled.size()) + " bytes"},
      {"a GET with a chunked body",
       "GET /v1/health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
           smuggled,
       "a GET carries no body; this one declares a chunked one"},
  };
  for (const Case &c : cases) {
    INFO(c.what);
    RawConnection connection(executor.port());
    connection.send(c.request);
    std::string reply = connection.readAll();
    CHECK_THAT(reply, Catch::StartsWith("HTTP/1.1 400"));
    std::string body = reply.substr(std::min(reply.size(), reply.find("\r\n\r\n") + 4));
    json error = json::parse(body, nullptr, false);
    CHECK(error["error"]["code"] == "bad_request");
    CHECK(error["error"]["message"] == c.message);
  }
  // None of them reached its route: only the session opened above exists, still open.
  CHECK(executor.metric("courier_sessions_opened_total") == 1);
  CHECK(executor.metric("courier_sessions") == 1);
  CHECK(executor.metric("courier_launches_total") == 0);
  CHECK(peer.healthy());
}

TEST_CASE("a POST with neither Content-Length nor Transfer-Encoding has no body, and what "
          "follows its head is the next request",
          "[protocol][security]") {
  // RFC 9112 6.3, as nginx reads it; httplib alone would read the body until the connection
  // closed. Triton's client asks for the model repository's index with such a POST.
  ExecutorProcess executor;
  RawConnection connection(executor.port());
  connection.send("POST /v1/sessions HTTP/1.1\r\nHost: x\r\n\r\n"
                  "GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  std::string replies = connection.readAll();
  CHECK_THAT(replies, Catch::StartsWith("HTTP/1.1 201"));
  size_t second = replies.find("HTTP/1.1 ", 1);
  REQUIRE(second != std::string::npos);
  CHECK_THAT(replies.substr(second), Catch::StartsWith("HTTP/1.1 200"));
  CHECK(executor.metric("courier_sessions_opened_total") == 1);
}

TEST_CASE("replies are not compressed, whatever the request's Accept-Encoding", "[protocol]") {
  ExecutorProcess executor;
  for (const char *coding : {"gzip", "br", "gzip, deflate, br"}) {
    INFO(coding);
    RawConnection connection(executor.port());
    connection.send(std::string("GET /v1/sessions/nope HTTP/1.1\r\nHost: x\r\n") +
                    "Accept-Encoding: " + coding + "\r\nConnection: close\r\n\r\n");
    std::string reply = connection.readAll();
    CHECK_THAT(reply, Catch::StartsWith("HTTP/1.1 404"));
    CHECK_THAT(reply, !Catch::Contains("Content-Encoding", Catch::CaseSensitive::No));
    std::string body = reply.substr(std::min(reply.size(), reply.find("\r\n\r\n") + 4));
    CHECK(json::parse(body, nullptr, false)["error"]["code"] == "unknown_session");
  }
}

TEST_CASE("a detached object leaves the session but stays stored for the grace period",
          "[protocol]") {
  ExecutorProcess executor;
  Peer peer(executor);
  std::string session = peer.openSession();
  std::string sha = peer.putObject(readFile(COURIER_KERNEL_SCALE));
  std::string object = "/v1/sessions/" + session + "/objects/" + sha;
  httplib::Result res = peer.post(object, "", wire::kJsonContentType);
  REQUIRE(res);
  REQUIRE(res->status == 200);
  CHECK(executor.metric("courier_attached_objects") == 1);

  res = peer.client.Delete(object.c_str());
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(json::parse(res->body) == json{{"session", session}, {"sha256", sha}, {"detached", true}});
  res = peer.client.Delete(object.c_str());
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(json::parse(res->body)["detached"] == false);
  CHECK(executor.metric("courier_attached_objects") == 0);
  CHECK(executor.metric("courier_objects") == 1);

  // A launch within the grace period attaches it from the store again, without an upload.
  res = peer.post("/v1/sessions/" + session + "/launch", frame(scaleHeader(sha, 1), doubles({4})));
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(executor.metric("courier_attached_objects") == 1);
  CHECK(executor.metric("courier_object_uploads_total") == 1);

  // An attach that fails to load takes no hold.
  std::string bad = peer.putObject("definitely not ELF");
  res = peer.post("/v1/sessions/" + session + "/objects/" + bad, "", wire::kJsonContentType);
  REQUIRE(res);
  CHECK(res->status == 422);
  CHECK(executor.metric("courier_attached_objects") == 1);
}

TEST_CASE("a body over the executor's limit gets 413", "[protocol]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--max-body-mib", "1"}});
  Peer peer(executor);
  std::string session = peer.openSession();
  std::string sha = peer.putObject(readFile(COURIER_KERNEL_SCALE));
  int64_t n = (2 << 20) / 8;
  httplib::Result res = peer.post("/v1/sessions/" + session + "/launch",
                                  frame(scaleHeader(sha, n), std::string(8 * n, '\0')));
  REQUIRE(res);
  CHECK(res->status == 413);
  CHECK(codeOf(res) == "payload_too_large");
  Peer fresh(executor);
  CHECK(fresh.healthy());
}

TEST_CASE("a body's claimed length is not reserved before its bytes arrive", "[protocol]") {
  // A limit of 1 TiB lets a request claim a body no machine could reserve at once; taken at
  // its word, the executor failed such a request (500) before reading any of it. Now it
  // reads what comes and finds the body cut short (400). httplib sends no reply after a
  // failed read, so the status is read from the metrics. The store's bound is as large, or
  // the upload would be refused (507) from its claim before any of it is read.
  ExecutorProcess executor(ExecutorConfig{0,
                                          "",
                                          {"--plugin", COURIER_TEST_PLUGIN, "--max-body-mib",
                                           "1048576", "--max-object-store-mib", "1048576"}});
  Peer peer(executor);
  std::string session = peer.openSession();
  const std::string claimed = std::to_string((uint64_t(1) << 40) - 1);
  int refused = 0;
  for (const std::string &head :
       {"PUT /v1/objects/" + std::string(64, 'a') + " HTTP/1.1\r\n",
        "POST /v1/sessions/" + session + "/call/courier_test_sum HTTP/1.1\r\n" +
            wire::kOutputSizeHeader + ": 8\r\n"}) {
    INFO(head);
    rawExchange(executor,
                head + "Host: x\r\nContent-Length: " + claimed +
                    "\r\nConnection: close\r\n\r\nonly a few bytes",
                /*endBody=*/true);
    ++refused;
    // The count trails the closed connection.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (executor.metric("courier_requests_total{status=\"400\"}") < refused &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(executor.metric("courier_requests_total{status=\"400\"}") == refused);
    CHECK(executor.metric("courier_requests_total{status=\"500\"}") == -1);
    CHECK(peer.healthy());
  }
}

TEST_CASE("without the bearer token every route answers 401", "[protocol][security]") {
  ExecutorProcess executor(ExecutorConfig{0, "tok-123", {}});
  Peer anonymous(executor);
  for (const char *path : {"/v1/health", "/metrics", "/v1/sessions/x"}) {
    INFO(path);
    httplib::Result res = anonymous.client.Get(path);
    REQUIRE(res);
    CHECK(res->status == 401);
    CHECK(codeOf(res) == "unauthorized");
  }
  Peer wrong(executor, "tok-124");
  httplib::Result res = wrong.post("/v1/sessions", "", wire::kJsonContentType);
  REQUIRE(res);
  CHECK(res->status == 401);
  Peer right(executor, "tok-123");
  CHECK(right.healthy());
  CHECK(!right.openSession().empty());
}

TEST_CASE("an executor refuses to listen beyond loopback without a token", "[protocol][security]") {
  courier::executor::ExecutorServerOptions options;
  options.host = "0.0.0.0";
  auto server = courier::executor::ExecutorServer::create(options);
  REQUIRE(!server);
  CHECK_THAT(llvm::toString(server.takeError()), Catch::Contains("without a token"));
  CHECK(isLoopbackHost("127.0.0.1"));
  CHECK(isLoopbackHost("127.8.9.10"));
  CHECK(isLoopbackHost("::1"));
  CHECK(isLoopbackHost("localhost"));
  CHECK(!isLoopbackHost("0.0.0.0"));
  CHECK(!isLoopbackHost("::"));
  CHECK(!isLoopbackHost("10.0.0.1"));
}

TEST_CASE("SIGTERM and SIGINT stop the executor cleanly, even with a connection open",
          "[protocol]") {
  for (int signal : {SIGTERM, SIGINT}) {
    ExecutorProcess executor;
    Peer peer(executor);
    peer.openSession(); // Leaves a keep-alive connection open.
    CHECK(executor.stop(signal) == 0);
  }
}

TEST_CASE("closing a server's connections wakes a wait for its request threads when it has "
          "none",
          "[protocol]") {
  // An executor that never had a connection once stayed after SIGTERM: its accept loop ended
  // and run() waited for request threads before stop() closed the connections, and with no
  // thread to end, nothing woke it.
  auto *server = new ParkingServer({}, [](ParkingServer::Refusal) { return std::string(); });
  auto awaited = std::make_shared<std::promise<void>>();
  std::future<void> done = awaited->get_future();
  std::thread waiter([server, awaited] {
    server->awaitThreads();
    awaited->set_value();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50)); // The wait begins first.
  server->closeConnections();
  if (done.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    waiter.detach(); // Still waiting on the server, which stays.
    FAIL("awaitThreads() did not return 10 s after closeConnections()");
  }
  waiter.join();
  delete server;
}

TEST_CASE("an executor that never had a connection stops at once, however the stop and its "
          "accept loop's end interleave",
          "[protocol]") {
  for (int round = 0; round < 20; ++round) {
    courier::executor::ExecutorServerOptions options;
    options.core.warmWorkers = 0;
    auto created = courier::executor::ExecutorServer::create(options);
    REQUIRE(static_cast<bool>(created));
    std::unique_ptr<courier::executor::ExecutorServer> server = std::move(*created);
    auto ran = std::make_shared<std::promise<std::string>>();
    std::future<std::string> result = ran->get_future();
    std::thread runner([ran, raw = server.get()] {
      llvm::Error error = raw->run();
      ran->set_value(error ? llvm::toString(std::move(error)) : "");
    });
    if (round % 2)
      std::this_thread::sleep_for(std::chrono::milliseconds(round % 5));
    server->drainAndStop();
    if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      runner.detach();
      (void)server.release(); // Still in use by the stuck run().
      FAIL("run() did not return 10 s after drainAndStop(), round " << round);
    }
    runner.join();
    CHECK(result.get() == "");
  }
}

TEST_CASE("courier-executor refuses a non-loopback address without a token", "[protocol]") {
  std::string command = std::string(COURIER_EXECUTOR_PATH) + " --listen 0.0.0.0:0 2>&1";
  FILE *pipe = popen(command.c_str(), "r");
  REQUIRE(pipe);
  std::string output;
  char buffer[256];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe))
    output.append(buffer, n);
  int status = pclose(pipe);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) != 0);
  CHECK_THAT(output, Catch::Contains("refusing to listen on '0.0.0.0' without a token"));
}

TEST_CASE("idle sessions are closed after the idle timeout", "[protocol]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--idle-timeout", "1"}});
  Peer peer(executor);
  std::string session = peer.openSession();
  CHECK(executor.metric("courier_sessions") == 1);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (executor.metric("courier_sessions") != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(executor.metric("courier_sessions") == 0);
  CHECK(executor.metric("courier_sessions_expired_total") == 1);
  httplib::Result res = peer.client.Get(("/v1/sessions/" + session).c_str());
  REQUIRE(res);
  CHECK(codeOf(res) == "unknown_session");
}

TEST_CASE("a kernel that never returns holds up neither closing nor expiring sessions",
          "[protocol]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--idle-timeout", "1"}});
  Peer peer(executor);
  peer.client.set_read_timeout(std::chrono::seconds(10));
  std::string sha = peer.putObject(readFile(COURIER_KERNEL_SHAPES));
  auto spin = [&](const std::string &session) {
    httplib::Result res = peer.post(
        "/v1/sessions/" + session + "/launch_async",
        json({{"object", sha}, {"entry", "_catalyst_pyface_spin"}}).dump(), wire::kJsonContentType);
    REQUIRE(res);
    REQUIRE(res->status == 202);
  };
  auto awaitExpired = [&](double count) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (executor.metric("courier_sessions_expired_total") < count &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return executor.metric("courier_sessions_expired_total");
  };

  // Closing a session whose kernel spins answers at once.
  std::string closed = peer.openSession();
  spin(closed);
  httplib::Result res = peer.client.Delete(("/v1/sessions/" + closed).c_str());
  REQUIRE(res);
  CHECK(res->status == 204);

  // A session left idle with its kernel spinning expires, and expiry goes on after it: the
  // session opened next expires too.
  spin(peer.openSession());
  CHECK(awaitExpired(1) == 1);
  peer.openSession();
  CHECK(awaitExpired(2) == 2);
  CHECK(executor.metric("courier_sessions") == 0);
  CHECK(peer.healthy());
  // The kernels spin on; a clean stop would wait for them forever.
  executor.kill();
}

TEST_CASE("metrics are valid Prometheus text with exact histogram bounds", "[protocol]") {
  ExecutorProcess executor;
  Peer peer(executor);
  REQUIRE(peer.healthy());
  // A request is counted after its answer is sent, so the health check's count may trail it.
  std::string text = executor.metrics();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (text.find("courier_requests_total{status=\"200\"} ") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    text = executor.metrics();
  }
  CHECK_THAT(text, Catch::Contains("courier_request_duration_seconds_bucket{le=\"0.0001\"} "));
  CHECK_THAT(text, Catch::Contains("courier_request_duration_seconds_bucket{le=\"+Inf\"} "));
  CHECK_THAT(text, Catch::Contains("courier_requests_total{status=\"200\"} "));
  CHECK(executor.metric("courier_request_duration_seconds_sum") > 0);
  CHECK(executor.metric("courier_request_duration_seconds_count") >= 1);
  // Every sample line is "name[{labels}] value", under the # TYPE line of its family.
  std::istringstream lines(text);
  std::string line;
  std::regex sample(R"([a-z_]+(\{[a-z]+="[^"]*"\})? [0-9.e+-]+)");
  while (std::getline(lines, line))
    if (!line.empty() && line[0] != '#') {
      INFO(line);
      CHECK(std::regex_match(line, sample));
    }
  CHECK(samplesOutsideTheirFamily(text).empty());
  // Each histogram has the documented bounds, counts that never fall, and +Inf = _count.
  for (const char *name : {"courier_request_duration_seconds", "courier_launch_duration_seconds"}) {
    INFO(name);
    HistogramSamples histogram = histogramSamples(text, name);
    std::vector<std::string> bounds;
    for (size_t i = 0; i < histogram.buckets.size(); ++i) {
      bounds.push_back(histogram.buckets[i].first);
      if (i > 0)
        CHECK(histogram.buckets[i].second >= histogram.buckets[i - 1].second);
    }
    CHECK(bounds == std::vector<std::string>{"0.0001", "0.00025", "0.0005", "0.001", "0.0025",
                                             "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "1",
                                             "5", "30", "+Inf"});
    REQUIRE_FALSE(histogram.buckets.empty());
    CHECK(histogram.buckets.back().second == histogram.count);
    CHECK(histogram.sum >= 0);
  }
}

TEST_CASE("the executor logs one line per request", "[protocol]") {
  ExecutorProcess executor;
  Peer peer(executor);
  peer.openSession();
  // The line is written once the response is out, so it may trail the reply a little.
  std::regex line(
      R"((.|\n)*Z info POST /v1/sessions 201 in=0 out=\d+ [0-9.]+ms request=[0-9a-f]{16} )"
      R"(session=[0-9a-f]{32}\n(.|\n)*)");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!std::regex_match(executor.log(), line) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(std::regex_match(executor.log(), line));
}

TEST_CASE("the error table in docs/protocol.md matches the wire table", "[protocol][docs]") {
  std::ifstream doc(COURIER_PROTOCOL_DOC);
  REQUIRE(doc);
  std::stringstream text;
  text << doc.rdbuf();
  std::map<std::string, int> documented;
  std::regex row(R"(\|\s*`([a-z_]+)`\s*\|\s*(\d{3})\s*\|)");
  std::string all = text.str();
  for (std::sregex_iterator it(all.begin(), all.end(), row), end; it != end; ++it)
    documented[(*it)[1]] = std::stoi((*it)[2]);
  std::map<std::string, int> actual;
  for (const wire::ErrorCodeInfo &info : wire::kErrorCodes)
    actual[info.code] = info.status;
  CHECK(documented == actual);
}
