// Many clients on one executor: more keep-alive connections than a fixed pool of threads would
// serve, every one answered; and past --threads, a connection refused at once with a status.
#include "abi/ContentHash.h"
#include "tests/executor/Replies.h"
#include "tests/kernels/KernelPaths.h"
#include "tests/transport/ExecutorProcess.h"

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

using courier::testing::ExecutorConfig;
using courier::testing::ExecutorProcess;
using courier::testing::kFrameType;
using courier::testing::kJsonType;
using courier::testing::readFile;
using json = nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

std::unique_ptr<httplib::Client> keepAliveClient(const ExecutorProcess &executor,
                                                 std::chrono::seconds timeout = 10s) {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", executor.port());
  client->set_keep_alive(true);
  client->set_tcp_nodelay(true);
  client->set_connection_timeout(timeout);
  client->set_read_timeout(timeout);
  client->set_write_timeout(timeout);
  return client;
}

/// A session holding shapes.o, for noop launches.
std::string sessionWithShapes(httplib::Client &client, const std::string &sha,
                              const std::string &bytes) {
  httplib::Result opened = client.Post("/v1/sessions", "", kJsonType);
  REQUIRE(opened);
  REQUIRE(opened->status == 201);
  std::string session = json::parse(opened->body)["session"];
  httplib::Result stored =
      client.Put(("/v1/objects/" + sha).c_str(), bytes, "application/octet-stream");
  REQUIRE(stored);
  REQUIRE((stored->status == 201 || stored->status == 200));
  httplib::Result attached = client.Post(("/v1/sessions/" + session + "/objects/" + sha).c_str(),
                                         {{"X-Courier-Session", session}}, "", kJsonType);
  REQUIRE(attached);
  REQUIRE(attached->status == 200);
  return session;
}

} // namespace

TEST_CASE("256 keep-alive clients of one executor are all answered, throughout",
          "[http][clients]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--warm-workers", "2"}});
  std::string bytes = readFile(COURIER_KERNEL_SHAPES);
  std::string sha = courier::sha256Hex(bytes);
  std::vector<std::string> sessions;
  {
    auto setup = keepAliveClient(executor);
    for (int i = 0; i < 8; ++i)
      sessions.push_back(sessionWithShapes(*setup, sha, bytes));
  }
  // Each client keeps its connection busy for 3 s, a request every 250 ms, and gives up on
  // one after 2 s: connections queued behind a fixed pool's threads until the first ones
  // close would wait those 3 s and fail.
  constexpr int kClients = 256;
  auto until = Clock::now() + 3s;
  std::atomic<int> answered{0}, failed{0};
  std::atomic<int64_t> slowestMicros{0};
  std::mutex firstFailureMutex;
  std::string firstFailure;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&, c] {
      auto client = keepAliveClient(executor, 2s);
      const std::string &session = sessions[c % sessions.size()];
      std::string frame = json({{"object", sha},
                                {"entry", "_catalyst_pyface_noop"},
                                {"inputs", json::array()},
                                {"results", json::array()}})
                              .dump() +
                          "\n";
      for (int round = 0; round == 0 || Clock::now() < until; ++round) {
        auto start = Clock::now();
        httplib::Result res =
            round % 2 ? client->Post(("/v1/sessions/" + session + "/launch").c_str(),
                                     {{"X-Courier-Session", session}}, frame, kFrameType)
                      : client->Get("/v1/health");
        int64_t micros =
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
        for (int64_t seen = slowestMicros.load(); micros > seen;)
          slowestMicros.compare_exchange_weak(seen, micros);
        if (res && res->status == 200) {
          answered++;
        } else {
          failed++;
          std::lock_guard<std::mutex> lock(firstFailureMutex);
          if (firstFailure.empty())
            firstFailure = "client " + std::to_string(c) + " round " + std::to_string(round) +
                           ": " +
                           (res ? std::to_string(res->status) + " " + res->body
                                : httplib::to_string(res.error()));
        }
        std::this_thread::sleep_for(250ms);
      }
    });
  for (std::thread &client : clients)
    client.join();
  INFO("first failure: " << firstFailure);
  INFO("slowest answer: " << slowestMicros.load() / 1000 << " ms");
  CHECK(failed.load() == 0);
  CHECK(answered.load() >= kClients * 2);
}

TEST_CASE("a connection past --threads is answered 503 overloaded at once, and served once "
          "one closes",
          "[http][clients]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--threads", "4"}});
  std::vector<std::unique_ptr<httplib::Client>> holders;
  for (int i = 0; i < 4; ++i) {
    holders.push_back(keepAliveClient(executor));
    httplib::Result res = holders.back()->Get("/v1/health");
    REQUIRE(res);
    REQUIRE(res->status == 200);
  }
  auto extra = keepAliveClient(executor);
  httplib::Result refused = extra->Get("/v1/health");
  REQUIRE(refused);
  CHECK(refused->status == 503);
  CHECK(json::parse(refused->body)["error"]["code"] == "overloaded");
  CHECK(refused->get_header_value("Connection") == "close");
  CHECK(refused->get_header_value("Retry-After") == "1");
  // The four held connections are still served.
  for (auto &holder : holders) {
    httplib::Result res = holder->Get("/v1/health");
    REQUIRE(res);
    CHECK(res->status == 200);
  }
  // Once one closes, a new connection is served (the server sees the close a moment later).
  holders.front()->stop();
  int status = 0;
  for (auto deadline = Clock::now() + 10s; Clock::now() < deadline;) {
    httplib::Result res = extra->Get("/v1/health");
    status = res ? res->status : 0;
    if (status == 200)
      break;
    std::this_thread::sleep_for(20ms);
  }
  CHECK(status == 200);
}
