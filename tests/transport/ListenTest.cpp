// How courier-executor meets its clients: a listener no second server can share, unix-domain
// sockets, the session and call-reply caps, and readiness and drain on SIGTERM.
#include "tests/executor/Replies.h"
#include "tests/kernels/KernelPaths.h"
#include "tests/support/RawConnection.h"
#include "tests/transport/ExecutorProcess.h"
#include "tests/transport/Sessions.h"
#include "transport/HttpBackend.h"
#include "transport/Wire.h"

#include "llvm/Support/MemoryBuffer.h"

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace courier::transport;
using namespace courier::testing;
using json = nlohmann::json;

namespace {

std::string messageOf(const httplib::Result &res) {
  json body = res ? json::parse(res->body, nullptr, false) : json();
  return body.is_object() && body.contains("error") ? body["error"]["message"] : "";
}

std::string doubles(std::vector<double> values) {
  return std::string(reinterpret_cast<const char *>(values.data()), values.size() * 8);
}

/// A unix socket bound at `path` and closed without removing its file, as a server that
/// crashed leaves it.
void leaveStaleSocket(const std::string &path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) == 0);
  ::close(fd);
}

/// Polls metric `name` until it reaches `value` or 20 s pass; returns its last value.
double awaitMetric(const ExecutorProcess &executor, const std::string &name, double value) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  double seen = executor.metric(name);
  while (seen != value && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    seen = executor.metric(name);
  }
  return seen;
}

} // namespace

TEST_CASE("a second executor on a port in use is refused at start-up, naming the address",
          "[listen]") {
  ExecutorProcess first;
  std::string address = "127.0.0.1:" + std::to_string(first.port());
  auto [status, log] = runServerToExit(COURIER_EXECUTOR_PATH, {"--listen", address});
  CHECK(status > 0);
  CHECK_THAT(log, Catch::Contains("courier-executor: error: " + address + " is already in use"));
  // The first one kept its port and every request.
  CHECK(first.client()->Get("/v1/health")->status == 200);
}

TEST_CASE("an executor on a unix socket runs a shipped kernel for the HTTP backend",
          "[listen][unix]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--listen", "unix:{dir}/executor.sock"}});
  const std::string path = executor.directory() + "/executor.sock";
  CHECK(executor.address() == "unix:" + path);
  struct stat info;
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  CHECK(S_ISSOCK(info.st_mode));
  CHECK((info.st_mode & 0777) == 0600);

  auto backend = createHttpBackend("unix:" + path, {});
  REQUIRE(static_cast<bool>(backend));
  llvm::Expected<std::string> session = (*backend)->openSession();
  REQUIRE(static_cast<bool>(session));
  auto bytes = llvm::MemoryBuffer::getFile(COURIER_KERNEL_SCALE);
  REQUIRE(bytes);
  ObjectBlob scale = ObjectBlob::fromBytes((*bytes)->getBuffer().str());
  std::vector<double> input = {1, 2.5, -3, 8};
  TensorView view{input.data(), 8, {4}, {1}};
  auto results = (*backend)->launch(*session, scale, "_catalyst_pyface_scale", {view}, {{1, 8}});
  REQUIRE(static_cast<bool>(results));
  REQUIRE(results->size() == 1);
  const double *out = static_cast<const double *>((*results)[0].data);
  CHECK(std::vector<double>(out, out + 4) == std::vector<double>{2, 5, -6, 16});
  CHECK(!(*backend)->closeSession(*session));

  // A clean exit takes its socket file with it.
  CHECK(executor.stop(SIGTERM) == 0);
  CHECK(::lstat(path.c_str(), &info) != 0);
}

TEST_CASE("a unix socket path is taken over only from a stale socket", "[listen][unix]") {
  ExecutorProcess live(ExecutorConfig{0, "", {"--listen", "unix:{dir}/executor.sock"}});
  const std::string dir = live.directory();

  auto [busyStatus, busyLog] =
      runServerToExit(COURIER_EXECUTOR_PATH, {"--listen", "unix:" + dir + "/executor.sock"});
  CHECK(busyStatus > 0);
  CHECK_THAT(busyLog, Catch::Contains("unix:" + dir + "/executor.sock is already in use"));

  std::ofstream(dir + "/notes.txt") << "not a socket\n";
  auto [fileStatus, fileLog] =
      runServerToExit(COURIER_EXECUTOR_PATH, {"--listen", "unix:" + dir + "/notes.txt"});
  CHECK(fileStatus > 0);
  CHECK_THAT(fileLog, Catch::Contains("cannot listen on unix:" + dir +
                                      "/notes.txt: the path exists and is not a socket"));
  std::ifstream kept(dir + "/notes.txt");
  std::string line;
  CHECK((std::getline(kept, line) && line == "not a socket"));

  auto [relativeStatus, relativeLog] =
      runServerToExit(COURIER_EXECUTOR_PATH, {"--listen", "unix:executor.sock"});
  CHECK(relativeStatus > 0);
  CHECK_THAT(relativeLog, Catch::Contains("--listen expects HOST:PORT or unix:PATH, got "
                                          "'unix:executor.sock': a unix socket's path must be "
                                          "absolute"));

  leaveStaleSocket(dir + "/stale.sock");
  ExecutorProcess replacing(ExecutorConfig{0, "", {"--listen", "unix:" + dir + "/stale.sock"}});
  CHECK(replacing.client()->Get("/v1/health")->status == 200);
}

TEST_CASE("a PUT of one session beyond --max-sessions gets 503 too_many_sessions",
          "[listen][limits]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--max-sessions", "1"}});
  auto http = executor.client();
  httplib::Result first = http->Put("/v1/sessions/first", "", wire::kJsonContentType);
  REQUIRE(first);
  CHECK(first->status == 201);
  httplib::Result second = http->Put("/v1/sessions/second", "", wire::kJsonContentType);
  REQUIRE(second);
  CHECK(second->status == 503);
  CHECK(codeOf(second) == "too_many_sessions");
  CHECK_THAT(messageOf(second), Catch::Contains("its limit of 1 sessions"));
  // The session it holds is still confirmed.
  httplib::Result again = http->Put("/v1/sessions/first", "", wire::kJsonContentType);
  REQUIRE(again);
  CHECK(again->status == 200);
}

TEST_CASE("a call's reply beyond the body limit is refused before the call runs",
          "[listen][limits]") {
  auto call = [](httplib::Client &http, const std::string &session, uint64_t replyBytes,
                 const std::string &input) {
    return http.Post(("/v1/sessions/" + session + "/call/courier_test_sum").c_str(),
                     {{wire::kOutputSizeHeader, std::to_string(replyBytes)}}, input,
                     wire::kBytesContentType);
  };
  std::string input = doubles({1, 2, 3});

  SECTION("at the default limit, 4 GiB asked by a 24-byte body") {
    ExecutorProcess executor(ExecutorConfig{0, "", {"--plugin", COURIER_TEST_PLUGIN}});
    auto http = executor.client();
    std::string session = openSession(*http);
    httplib::Result res = call(*http, session, uint64_t(4) << 30, input);
    REQUIRE(res);
    CHECK(res->status == 413);
    CHECK(codeOf(res) == "payload_too_large");
    CHECK_THAT(messageOf(res), Catch::Contains("a call's reply of 4294967296 bytes"));
    CHECK_THAT(messageOf(res), Catch::Contains("its input of 24 bytes"));
    CHECK(executor.metric("courier_calls_total") == 0);
  }

  SECTION("at a limit of 1 MiB; within it the call runs") {
    ExecutorProcess executor(
        ExecutorConfig{0, "", {"--plugin", COURIER_TEST_PLUGIN, "--max-body-mib", "1"}});
    auto http = executor.client();
    std::string session = openSession(*http);
    httplib::Result refused = call(*http, session, 1 << 20, input);
    REQUIRE(refused);
    CHECK(refused->status == 413);
    CHECK_THAT(messageOf(refused), Catch::Contains("the executor's limit of 1048576 bytes"));
    httplib::Result summed = call(*http, session, 8, input);
    REQUIRE(summed);
    CHECK(summed->status == 200);
    CHECK(summed->body == doubles({6}));
  }
}

TEST_CASE("after SIGTERM /v1/ready answers 503 while an in-flight call completes",
          "[listen][drain]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--plugin", COURIER_TEST_PLUGIN}});
  auto http = executor.client();
  std::string session = openSession(*http);
  httplib::Result ready = http->Get("/v1/ready");
  REQUIRE(ready);
  CHECK(ready->status == 200);

  // A call whose body has not all arrived is in flight.
  std::string input = doubles({1.5, 2.5, 3});
  RawConnection inFlight(executor.port());
  inFlight.send("POST /v1/sessions/" + session + "/call/courier_test_sum HTTP/1.1\r\n" +
                "Host: x\r\nConnection: close\r\n" + wire::kOutputSizeHeader +
                ": 8\r\nContent-Length: " + std::to_string(input.size()) + "\r\n\r\n" +
                input.substr(0, 8));
  REQUIRE(awaitMetric(executor, "courier_requests_in_flight", 1) == 1);

  executor.signal(SIGTERM);
  auto probe = executor.client();
  int drainingStatus = 0;
  std::string drainingCode;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(10))) {
    httplib::Result answer = probe->Get("/v1/ready");
    drainingStatus = answer ? answer->status : -1;
    drainingCode = codeOf(answer);
    if (drainingStatus != 200)
      break;
  }
  CHECK(drainingStatus == 503);
  CHECK(drainingCode == "draining");
  // Alive, though not ready: a supervisor must not restart it.
  httplib::Result health = probe->Get("/v1/health");
  REQUIRE(health);
  CHECK(health->status == 200);
  httplib::Result refused = probe->Post("/v1/sessions", "", wire::kJsonContentType);
  REQUIRE(refused);
  CHECK(refused->status == 503);
  CHECK(codeOf(refused) == "draining");
  // A session the executor holds is still confirmed; one it does not hold is new.
  httplib::Result held =
      probe->Put(("/v1/sessions/" + session).c_str(), "", wire::kJsonContentType);
  REQUIRE(held);
  CHECK(held->status == 200);
  httplib::Result newcomer = probe->Put("/v1/sessions/newcomer", "", wire::kJsonContentType);
  REQUIRE(newcomer);
  CHECK(newcomer->status == 503);
  CHECK(codeOf(newcomer) == "draining");

  inFlight.send(input.substr(8));
  std::string reply = inFlight.readAll();
  CHECK(reply.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(reply.size() >= 8);
  CHECK(reply.substr(reply.size() - 8) == doubles({7}));
  CHECK(executor.stop(SIGTERM) == 0);
}

TEST_CASE("a drain waits no longer than --drain-timeout-ms", "[listen][drain]") {
  // A request that never finishes its body holds the drain until the timeout.
  ExecutorProcess executor(ExecutorConfig{0, "", {"--drain-timeout-ms", "200"}});
  RawConnection stuck(executor.port());
  stuck.send("PUT /v1/objects/" + std::string(64, 'a') +
             " HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly a few bytes");
  REQUIRE(awaitMetric(executor, "courier_requests_in_flight", 1) == 1);
  CHECK(executor.stop(SIGTERM) == 0);

  auto [status, log] = runServerToExit(COURIER_EXECUTOR_PATH, {"--drain-timeout-ms", "soon"});
  CHECK(status > 0);
  CHECK_THAT(log, Catch::Contains("--drain-timeout-ms expects a number, got 'soon'"));
}

TEST_CASE("a second SIGTERM during a drain stops the executor at once", "[listen][drain]") {
  // The drain would wait 10 minutes for a request that never finishes its body.
  ExecutorProcess executor(ExecutorConfig{0, "", {"--drain-timeout-ms", "600000"}});
  RawConnection stuck(executor.port());
  stuck.send("PUT /v1/objects/" + std::string(64, 'a') +
             " HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly a few bytes");
  REQUIRE(awaitMetric(executor, "courier_requests_in_flight", 1) == 1);
  executor.signal(SIGTERM);
  auto probe = executor.client();
  int status = 200;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       status == 200 && std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(10))) {
    httplib::Result answer = probe->Get("/v1/ready");
    status = answer ? answer->status : -1;
  }
  REQUIRE(status == 503);
  CHECK(executor.stop(SIGTERM) == 0);
}
