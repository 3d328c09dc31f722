// courier-serve as a ServerProcess, caching under the fixture's scratch directory.
#include "tests/serve/ServeProcess.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <thread>

namespace courier::testing {

namespace {

ServerSpec serveSpec(ServeConfig config) {
  std::vector<std::string> args = {"--cache-dir", "{dir}/cache"};
  args.insert(args.end(), config.extraArgs.begin(), config.extraArgs.end());
  return ServerSpec{COURIER_SERVE_PATH, "courier-serve", 0, std::move(config.token),
                    std::move(args)};
}

} // namespace

ServeProcess::ServeProcess(ServeConfig config) : ServerProcess(serveSpec(std::move(config))) {}

int ServeProcess::terminate() {
  return ServerProcess::terminate(SIGTERM, std::chrono::seconds(15));
}

std::pair<int, std::string> runServeToExit(const std::vector<std::string> &args) {
  return runServerToExit(COURIER_SERVE_PATH, args);
}

std::unique_ptr<RawConnection> ServeProcess::postInFlight(const std::string &path,
                                                          const std::string &body) {
  auto connection = std::make_unique<RawConnection>(port());
  connection->send("POST " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" +
                   "Content-Type: application/json\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\n\r\n" + body.substr(0, 10));
  double seen = metric("courier_serve_requests_in_flight");
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       seen != 1 && std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(10)))
    seen = metric("courier_serve_requests_in_flight");
  REQUIRE(seen == 1);
  return connection;
}

} // namespace courier::testing
