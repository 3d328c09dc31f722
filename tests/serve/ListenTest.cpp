// How courier-serve meets its clients: a listener no second server can share, a unix-domain
// socket, and readiness and drain on SIGTERM.
#include "tests/serve/RestClient.h"
#include "tests/serve/ServeProcess.h"
#include "tests/support/RawConnection.h"

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
  // Readiness follows shortly after start (see "a fresh server is healthy, ready, ...").
  Reply ready = get(*http, "/v1/ready");
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       ready.status != 200 && std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(10)))
    ready = get(*http, "/v1/ready");
  REQUIRE(ready.status == 200);

  // A create whose body has not all arrived is in flight.
  std::string body = createBody("twice", kTwice);
  RawConnection inFlight(serve.port());
  inFlight.send("POST /v1/modules HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                "Content-Type: application/json\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body.substr(0, 10));
  double seen = serve.metric("courier_serve_requests_in_flight");
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       seen != 1 && std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(10)))
    seen = serve.metric("courier_serve_requests_in_flight");
  REQUIRE(seen == 1);

  serve.signal(SIGTERM);
  auto probe = serve.client();
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

  inFlight.send(body.substr(10));
  std::string reply = inFlight.readAll();
  INFO(reply);
  CHECK(reply.rfind("HTTP/1.1 201", 0) == 0);
  int status = serve.terminate();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a connection past courier-serve's --threads is answered 503 overloaded at once, and "
          "served once one closes",
          "[serve][listen]") {
  ServeProcess serve(ServeConfig{"", {"--threads", "2"}});
  auto first = serve.client(), second = serve.client(), extra = serve.client();
  requireCreated(*first, "twice", kTwice);
  REQUIRE(get(*second, "/v1/health").status == 200);
  Reply refused = get(*extra, "/v1/health");
  INFO(refused.raw);
  CHECK(refused.status == 503);
  CHECK(refused.body["error"]["code"] == "overloaded");
  // The connections held are still served.
  Reply invoked = post(*first, "/v1/modules/twice/invoke/main", R"({"inputs": [[1, 2, 3, 4]]})");
  CHECK(outputData(invoked) == std::vector<double>{2, 4, 6, 8});
  second->stop();
  int status = 0;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       status != 200 && std::chrono::steady_clock::now() < deadline;) {
    status = get(*extra, "/v1/health").status;
    if (status != 200)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(status == 200);
}
