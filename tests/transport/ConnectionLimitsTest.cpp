// An executor's connection limits under a client that abuses them: idle connections and
// half-sent heads by the thousand, plaintext and TLS, leave everyone else served; past
// --max-connections-per-client one address is refused with a 503 it can read while another is
// served; at --max-connections with every connection busy the next is refused the same way;
// and a TLS port closes connections that never start a handshake.
#include "abi/ContentHash.h"
#include "tests/executor/Replies.h"
#include "tests/kernels/KernelPaths.h"
#include "tests/support/ConnectionFlood.h"
#include "tests/support/HostileRequests.h"
#include "tests/support/RawConnection.h"
#include "tests/support/TestCertificates.h"
#include "tests/support/TlsConnection.h"
#include "tests/transport/ExecutorProcess.h"

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

using namespace courier::testing;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

/// A new client's health check, a session, an object and a noop launch, each answered within
/// `within` (the client's timeouts) and successful.
void requireServedPromptly(const ServerProcess &server, std::chrono::milliseconds within) {
  auto client = server.client();
  client->set_connection_timeout(within);
  client->set_read_timeout(within);
  client->set_write_timeout(within);
  httplib::Result health = client->Get("/v1/health");
  INFO(
      "health: " << (health ? std::to_string(health->status) : httplib::to_string(health.error())));
  REQUIRE(health);
  REQUIRE(health->status == 200);
  // The object store and a launch: work, not only a probe, is served.
  client->set_read_timeout(10s);
  std::string bytes = readFile(COURIER_KERNEL_SHAPES);
  std::string sha = courier::sha256Hex(bytes);
  httplib::Result opened = client->Post("/v1/sessions", "", kJsonType);
  REQUIRE(opened);
  REQUIRE(opened->status == 201);
  std::string session = json::parse(opened->body)["session"];
  httplib::Result stored =
      client->Put(("/v1/objects/" + sha).c_str(), bytes, "application/octet-stream");
  REQUIRE(stored);
  REQUIRE((stored->status == 201 || stored->status == 200));
  httplib::Result attached = client->Post(("/v1/sessions/" + session + "/objects/" + sha).c_str(),
                                          {{"X-Courier-Session", session}}, "", kJsonType);
  REQUIRE(attached);
  REQUIRE(attached->status == 200);
  std::string frame = noopFrame(sha);
  for (int i = 0; i < 10; ++i) {
    httplib::Result launched = client->Post(("/v1/sessions/" + session + "/launch").c_str(),
                                            {{"X-Courier-Session", session}}, frame, kFrameType);
    REQUIRE(launched);
    CHECK(launched->status == 200);
  }
}

} // namespace

TEST_CASE("2000 idle connections and 200 half-sent heads from one client leave the executor "
          "serving a new client at once",
          "[http][connections][memory]") {
  ExecutorProcess executor(ExecutorConfig{
      0, "", {"--quiet", "--warm-workers", "1", "--max-connections-per-client", "0"}});
  courier::testing::requireServedThroughFlood(executor, "", "courier", requireServedPromptly);
}

TEST_CASE("2000 idle TLS connections and 200 half-sent heads from one client leave the "
          "executor serving a new TLS client at once",
          "[http][connections][tls][memory]") {
  TestCertificates pki;
  std::unique_ptr<ServerProcess> executor =
      startTlsServer(pki, COURIER_EXECUTOR_PATH, "courier-executor",
                     {"--warm-workers", "1", "--max-connections-per-client", "0"});
  courier::testing::requireServedThroughFlood(*executor, pki.caCert, "courier",
                                              requireServedPromptly);
}

TEST_CASE("past --max-connections-per-client one address gets a 503 it can read while another "
          "address is served",
          "[http][connections]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--max-connections-per-client", "8"}});
  auto flood = std::make_unique<ConnectionFlood>(executor.port(),
                                                 ConnectionFlood::Shape{8, 0, 0, "", "127.0.0.1"});
  const std::string health = "GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  std::string refusedBytes = courier::testing::exchangeFrom(executor.port(), "127.0.0.1", health);
  INFO(refusedBytes);
  RawReply refused = parseRawReply(refusedBytes);
  CHECK(refused.status == 503);
  CHECK(refused.code == "overloaded");
  CHECK_THAT(refused.message, Catch::Contains("--max-connections-per-client"));
  CHECK(refused.saysClose);
  CHECK(refusedBytes.find("Retry-After: 1") != std::string::npos);
  RawReply served =
      parseRawReply(courier::testing::exchangeFrom(executor.port(), "127.0.0.2", health));
  CHECK(served.status == 200);
  // Once the flood's connections close, the first address is served again.
  flood.reset();
  int status = 0;
  for (auto deadline = std::chrono::steady_clock::now() + 10s;
       status != 200 && std::chrono::steady_clock::now() < deadline;) {
    status =
        parseRawReply(courier::testing::exchangeFrom(executor.port(), "127.0.0.1", health)).status;
    if (status != 200)
      std::this_thread::sleep_for(20ms);
  }
  CHECK(status == 200);
  CHECK(executor.metric("courier_connections_refused_total{reason=\"per_client\"}") >= 1);
}

TEST_CASE("at --max-connections the oldest idle connection is closed to admit a new one",
          "[http][connections]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--max-connections", "4"}});
  std::vector<std::unique_ptr<httplib::Client>> holders;
  for (int i = 0; i < 4; ++i) {
    holders.push_back(executor.client());
    httplib::Result res = holders.back()->Get("/v1/health");
    REQUIRE(res);
    REQUIRE(res->status == 200);
  }
  // Each of the four is idle now; a fifth connection is served, not refused, and so is each
  // one after it, all held open.
  for (int i = 0; i < 3; ++i) {
    holders.push_back(executor.client());
    httplib::Result res = holders.back()->Get("/v1/health");
    REQUIRE(res);
    CHECK(res->status == 200);
  }
  CHECK(executor.metric("courier_connections_evicted_total{state=\"idle\"}") >= 3);
  CHECK(executor.metric("courier_connections_refused_total{reason=\"connections\"}") == 0);
}

TEST_CASE("at --max-connections with every connection busy the next one is answered 503 "
          "overloaded, which the client reads, and one is served once a busy one is done",
          "[http][connections]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--max-connections", "4"}});
  // The readiness check's connection is gone (only the scrape's own is open) before the four.
  REQUIRE(executor.awaitMetricAtMost("courier_connections_open", 1) <= 1);
  // Four requests whose bodies are half sent: each holds its connection busy.
  const std::string head =
      "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 4\r\n\r\n{}";
  std::vector<std::unique_ptr<RawConnection>> busy;
  for (int i = 0; i < 4; ++i) {
    busy.push_back(std::make_unique<RawConnection>(executor.port()));
    busy.back()->send(head);
  }
  auto extra = executor.client();
  extra->set_read_timeout(5s);
  httplib::Result refused = extra->Get("/v1/health");
  REQUIRE(refused);
  CHECK(refused->status == 503);
  CHECK(json::parse(refused->body)["error"]["code"] == "overloaded");
  CHECK_THAT(std::string(json::parse(refused->body)["error"]["message"]),
             Catch::Contains("--max-connections"));
  CHECK(refused->get_header_value("Connection") == "close");
  CHECK(refused->get_header_value("Retry-After") == "1");
  // One busy request ends: answered, its connection idle, and so a new one is served.
  busy.front()->send("  ");
  int status = 0;
  for (auto deadline = std::chrono::steady_clock::now() + 10s;
       status != 200 && std::chrono::steady_clock::now() < deadline;) {
    httplib::Result res = extra->Get("/v1/health");
    status = res ? res->status : 0;
    if (status != 200)
      std::this_thread::sleep_for(20ms);
  }
  CHECK(status == 200);
  // The scrape's own connection may meet the limit too while the busy ones hold it.
  double refusedCount = -1;
  for (auto deadline = std::chrono::steady_clock::now() + 10s;
       refusedCount < 1 && std::chrono::steady_clock::now() < deadline;) {
    refusedCount = executor.metric("courier_connections_refused_total{reason=\"connections\"}");
    if (refusedCount < 1)
      std::this_thread::sleep_for(20ms);
  }
  CHECK(refusedCount >= 1);
}

TEST_CASE("a TCP connection to a TLS port that never starts a handshake is closed within the "
          "handshake timeout, and 1000 of them do not stop a real TLS client",
          "[http][connections][tls]") {
  TestCertificates pki;
  std::unique_ptr<ServerProcess> started =
      startTlsServer(pki, COURIER_EXECUTOR_PATH, "courier-executor",
                     {"--warm-workers", "1", "--max-connections-per-client", "0"});
  ServerProcess &executor = *started;
  {
    RawConnection silent(executor.port());
    // The handshake timeout is 3 s; a second more for the server's turn.
    CHECK(courier::testing::closedWithin(silent.descriptor(), 4000));
  }
  ConnectionFlood flood(executor.port(), {0, 0, 1000, ""});
  REQUIRE(flood.opened() == 1000);
  requireServedPromptly(executor, 1000ms);
  CHECK(executor.metric("courier_connections_evicted_total{state=\"handshake\"}") >= 700);
}

TEST_CASE("a half-sent head waits the head timeout, and once three quarters of --max-connections "
          "are open, half-sent heads are closed within the shorter timeout of a server under "
          "pressure",
          "[http][connections]") {
  ExecutorProcess executor(
      ExecutorConfig{0, "", {"--max-connections", "8", "--max-connections-per-client", "0"}});
  REQUIRE(executor.awaitMetricAtMost("courier_connections_open", 1) <= 1);
  const std::string head = "GET /v1/health HTTP/1.1\r\nHost: x\r\n";
  {
    // One of eight: no pressure, the head timeout is 10 s.
    RawConnection calm(executor.port());
    calm.send(head);
    CHECK_FALSE(courier::testing::closedWithin(calm.descriptor(), 2500));
  }
  // Seven of eight open: pressure, which the five silent ones (idle for the 5 s keep-alive)
  // keep while the heads close. The head timeout is 1 s from each head's first byte; a
  // second more for the server's turn.
  std::vector<std::unique_ptr<RawConnection>> silent, heads;
  for (int i = 0; i < 5; ++i)
    silent.push_back(std::make_unique<RawConnection>(executor.port()));
  for (int i = 0; i < 2; ++i) {
    heads.push_back(std::make_unique<RawConnection>(executor.port()));
    heads.back()->send(head);
  }
  for (auto &connection : heads)
    CHECK(courier::testing::closedWithin(connection->descriptor(), 4000));
  silent.clear();
  CHECK(executor.metric("courier_connections_timed_out_total{state=\"head\"}") >= 2);
}

TEST_CASE("a --max-connections past what RLIMIT_NOFILE allows is refused at start-up, naming "
          "the limit",
          "[http][connections]") {
  // Under a hard limit of 4096 descriptors, set for the executor alone.
  auto [status, log] = courier::testing::runCommand(
      "ulimit -n 4096 && ulimit -Hn 4096 && exec " + std::string(COURIER_EXECUTOR_PATH) +
      " --listen 127.0.0.1:0 --max-connections 10000");
  CHECK(status > 0);
  CHECK_THAT(log, Catch::Contains("--max-connections 10000 needs 11792 open files, and "
                                  "RLIMIT_NOFILE allows 4096: give --max-connections 2304 or "
                                  "less"));
}

namespace {

/// A connection to the unix socket at `path`, or -1.
int connectUnix(const std::string &path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), std::min(path.size(), sizeof(address.sun_path) - 1));
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (::connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

} // namespace

TEST_CASE("on a unix socket --max-connections-per-client counts a client's connections by its "
          "uid",
          "[http][connections]") {
  ExecutorProcess executor(ExecutorConfig{
      0, "", {"--listen", "unix:{dir}/executor.sock", "--max-connections-per-client", "2"}});
  // The fixture's own start-up probe may still be open: wait until it is not.
  std::vector<int> held;
  std::string reply;
  for (auto deadline = std::chrono::steady_clock::now() + 10s;
       std::chrono::steady_clock::now() < deadline;) {
    for (int fd : held)
      ::close(fd);
    held = {connectUnix(executor.socketPath()), connectUnix(executor.socketPath())};
    int third = connectUnix(executor.socketPath());
    REQUIRE(third >= 0);
    std::string health = "GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    ::send(third, health.data(), health.size(), MSG_NOSIGNAL);
    reply.clear();
    char buffer[4096];
    for (ssize_t n; (n = ::recv(third, buffer, sizeof(buffer), 0)) > 0;)
      reply.append(buffer, static_cast<size_t>(n));
    ::close(third);
    if (parseRawReply(reply).status == 503)
      break;
    std::this_thread::sleep_for(20ms);
  }
  for (int fd : held)
    ::close(fd);
  INFO(reply);
  RawReply refused = parseRawReply(reply);
  CHECK(refused.status == 503);
  CHECK(refused.code == "overloaded");
  CHECK_THAT(refused.message, Catch::Contains("--max-connections-per-client"));
}

TEST_CASE("a TLS connection past --max-connections-per-client is sent its 503 after the "
          "handshake, and reads it",
          "[http][connections][tls]") {
  TestCertificates pki;
  std::unique_ptr<ServerProcess> started = startTlsServer(
      pki, COURIER_EXECUTOR_PATH, "courier-executor", {"--max-connections-per-client", "2"});
  ServerProcess &executor = *started;
  std::string reply;
  for (auto deadline = std::chrono::steady_clock::now() + 10s;
       std::chrono::steady_clock::now() < deadline;) {
    // Two held (the fixture's start-up probe may be a third until the server sees it close).
    ConnectionFlood held(executor.port(), {2, 0, 0, pki.caCert});
    courier::testing::TlsConnection third(executor.port(), {pki.caCert});
    third.send("GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    reply = third.readAll();
    if (parseRawReply(reply).status == 503)
      break;
    std::this_thread::sleep_for(20ms);
  }
  INFO(reply);
  RawReply refused = parseRawReply(reply);
  CHECK(refused.status == 503);
  CHECK(refused.code == "overloaded");
  CHECK_THAT(refused.message, Catch::Contains("--max-connections-per-client"));
}
