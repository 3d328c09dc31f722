// How courier-serve meets its clients: a listener no second server can share, a unix-domain
// socket, and readiness and drain on SIGTERM.
#include "tests/serve/RestClient.h"
#include "tests/serve/ServeProcess.h"
#include "tests/support/ConnectionFlood.h"
#include "tests/support/HostileRequests.h"
#include "tests/support/RawConnection.h"
#include "tests/support/TestCertificates.h"

#include <catch2/catch.hpp>
#include <httplib.h>

#include <arpa/inet.h>
#include <chrono>
#include <csignal>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace courier::testing;

namespace {

const std::string kTwice = "module {\n"
                           "  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {\n"
                           "    %y = arith.addf %x, %x : tensor<4xf64>\n"
                           "    return %y : tensor<4xf64>\n"
                           "  }\n"
                           "}\n";

} // namespace

TEST_CASE("a second courier-serve on a port in use is refused at start-up, naming the address",
          "[serve][listen]") {
  ServeProcess first;
  std::string address = "127.0.0.1:" + std::to_string(first.port());
  auto [status, log] = runServeToExit({"--listen", address});
  CHECK(status > 0);
  CHECK_THAT(log, Catch::Contains("courier-serve: error: " + address + " is already in use"));
}

TEST_CASE("courier-serve on a unix socket compiles and invokes a module", "[serve][listen]") {
  ServeProcess serve(ServeConfig{"", {"--listen", "unix:{dir}/serve.sock"}});
  const std::string path = serve.directory() + "/serve.sock";
  CHECK(serve.address() == "unix:" + path);
  struct stat info;
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  CHECK(S_ISSOCK(info.st_mode));
  CHECK((info.st_mode & 0777) == 0600);

  auto http = serve.client();
  requireCreated(*http, "twice", kTwice);
  Reply invoked = post(*http, "/v1/modules/twice/invoke/main", R"({"inputs": [[1, 2, 3, 4]]})");
  INFO(invoked.raw);
  REQUIRE(invoked.status == 200);
  CHECK(outputData(invoked) == std::vector<double>{2, 4, 6, 8});

  int status = serve.terminate();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(::lstat(path.c_str(), &info) != 0);
}

TEST_CASE("after SIGTERM courier-serve's /v1/ready answers 503 while an in-flight create "
          "completes",
          "[serve][drain]") {
  ServeProcess serve;
  auto http = serve.client();
  REQUIRE(get(*http, "/v1/ready").status == 200);

  // A create whose body has not all arrived is in flight.
  std::string body = createBody("twice", kTwice);
  std::unique_ptr<RawConnection> inFlight = serve.postInFlight("/v1/modules", body);

  serve.signal(SIGTERM);
  auto probe = serve.client();
  Reply ready;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(10))) {
    ready = get(*probe, "/v1/ready");
    if (ready.status != 200)
      break;
  }
  CHECK(ready.status == 503);
  CHECK(errorCode(ready) == "draining");
  CHECK(get(*probe, "/v1/health").status == 200);
  Reply refused = post(*probe, "/v1/modules", createBody("other", kTwice));
  CHECK(refused.status == 503);
  CHECK(errorCode(refused) == "draining");

  inFlight->send(body.substr(10));
  std::string reply = inFlight->readAll();
  INFO(reply);
  CHECK(reply.rfind("HTTP/1.1 201", 0) == 0);
  int status = serve.terminate();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

namespace {

/// A new client creates a module and invokes it, each answered within `within` (the client's
/// timeouts for the health check; compiling gets longer).
void requireServedPromptly(const ServerProcess &serve, const std::string &name,
                           std::chrono::milliseconds within) {
  auto http = serve.client();
  http->set_connection_timeout(within);
  http->set_read_timeout(within);
  http->set_write_timeout(within);
  httplib::Result health = http->Get("/v1/health");
  INFO(
      "health: " << (health ? std::to_string(health->status) : httplib::to_string(health.error())));
  REQUIRE(health);
  REQUIRE(health->status == 200);
  http->set_read_timeout(std::chrono::seconds(60));
  requireCreated(*http, name, kTwice);
  for (int i = 0; i < 10; ++i) {
    Reply invoked =
        post(*http, "/v1/modules/" + name + "/invoke/main", R"({"inputs": [[1, 2, 3, 4]]})");
    INFO(invoked.raw);
    REQUIRE(invoked.status == 200);
    CHECK(outputData(invoked) == std::vector<double>{2, 4, 6, 8});
  }
}

/// requireServedPromptly as the flood check calls it, creating a module of its own each time.
courier::testing::ServedCheck servedWithModules() {
  auto round = std::make_shared<int>(0);
  return [round](const ServerProcess &serve, std::chrono::milliseconds within) {
    requireServedPromptly(serve, "served" + std::to_string(++*round), within);
  };
}

} // namespace

TEST_CASE("2000 idle connections and 200 half-sent heads from one client leave courier-serve "
          "serving a new client at once",
          "[serve][listen][connections][memory]") {
  ServeProcess serve(ServeConfig{"", {"--quiet", "--max-connections-per-client", "0"}});
  courier::testing::requireServedThroughFlood(serve, "", "courier_serve", servedWithModules());
}

TEST_CASE("2000 idle TLS connections and 200 half-sent heads from one client leave "
          "courier-serve serving a new TLS client at once",
          "[serve][listen][connections][tls][memory]") {
  TestCertificates pki;
  std::unique_ptr<ServerProcess> serve =
      startTlsServer(pki, COURIER_SERVE_PATH, "courier-serve",
                     {"--cache-dir", "{dir}/cache", "--max-connections-per-client", "0"});
  courier::testing::requireServedThroughFlood(*serve, pki.caCert, "courier_serve",
                                              servedWithModules());
}

TEST_CASE("past courier-serve's --max-connections-per-client one address gets a 503 it can "
          "read while another address is served",
          "[serve][listen][connections]") {
  ServeProcess serve(ServeConfig{"", {"--max-connections-per-client", "4"}});
  ConnectionFlood flood(serve.port(), {4, 0, 0, "", "127.0.0.1"});
  const std::string health = "GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  std::string refusedBytes = exchangeFrom(serve.port(), "127.0.0.1", health);
  INFO(refusedBytes);
  RawReply refused = parseRawReply(refusedBytes);
  CHECK(refused.status == 503);
  CHECK(refused.code == "overloaded");
  CHECK_THAT(refused.message, Catch::Contains("--max-connections-per-client"));
  CHECK(parseRawReply(exchangeFrom(serve.port(), "127.0.0.2", health)).status == 200);
}

TEST_CASE("at courier-serve's --max-connections with every connection busy the next one is "
          "answered 503 overloaded, which the client reads, and one is served once a busy one "
          "is done",
          "[serve][listen][connections]") {
  ServeProcess serve(ServeConfig{"", {"--max-connections", "2"}});
  // The readiness check's connection is gone (only the scrape's own is open) before the two.
  REQUIRE(serve.awaitMetricAtMost("courier_serve_connections_open", 1) <= 1);
  // Two module creations whose bodies are half sent: each holds its connection busy.
  std::string body = createBody("twice", kTwice);
  std::string head = "POST /v1/modules HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n";
  RawConnection first(serve.port()), second(serve.port());
  first.send(head + body.substr(0, 10));
  second.send(head + body.substr(0, 10));
  auto extra = serve.client();
  extra->set_read_timeout(std::chrono::seconds(5));
  Reply refused = get(*extra, "/v1/health");
  INFO(refused.raw);
  CHECK(refused.status == 503);
  CHECK(errorCode(refused) == "overloaded");
  CHECK(refused.headers.find("Retry-After") != refused.headers.end());
  // The busy ones are served once their bodies come.
  first.send(body.substr(10));
  second.send(body.substr(10));
  int status = 0;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       status != 200 && std::chrono::steady_clock::now() < deadline;) {
    httplib::Result res = extra->Get("/v1/health");
    status = res ? res->status : 0;
    if (status != 200)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(status == 200);
}
