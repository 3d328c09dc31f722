// Many clients on one executor: more keep-alive connections than a fixed pool of threads would
// serve, every one answered; and past --threads, a connection refused at once with a status.
#include "abi/ContentHash.h"
#include "tests/executor/Replies.h"
#include "tests/kernels/KernelPaths.h"
#include "tests/support/RawConnection.h"
#include "tests/transport/ExecutorProcess.h"

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <dirent.h>
#include <mutex>
#include <poll.h>
#include <thread>
#include <vector>

using namespace courier::testing;
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

/// Threads of process `pid` now.
size_t threadsOf(pid_t pid) {
  size_t count = 0;
  if (DIR *dir = ::opendir(("/proc/" + std::to_string(pid) + "/task").c_str())) {
    while (struct dirent *entry = ::readdir(dir))
      count += entry->d_name[0] != '.';
    ::closedir(dir);
  }
  return count;
}

/// Reads from `connection` until `responses` whole responses (each with a Content-Length)
/// arrived, or 10 s pass; returns their status lines and bodies in order.
std::vector<std::pair<std::string, std::string>> readResponses(RawConnection &connection,
                                                               size_t responses) {
  std::vector<std::pair<std::string, std::string>> out;
  std::string bytes;
  char buffer[4096];
  auto until = Clock::now() + 10s;
  while (out.size() < responses && Clock::now() < until) {
    size_t end = bytes.find("\r\n\r\n");
    if (end != std::string::npos) {
      std::string head = bytes.substr(0, end);
      size_t at = head.find("Content-Length: ");
      REQUIRE(at != std::string::npos);
      size_t length = std::stoul(head.substr(at + 16));
      if (bytes.size() >= end + 4 + length) {
        out.emplace_back(head.substr(0, head.find("\r\n")), bytes.substr(end + 4, length));
        bytes.erase(0, end + 4 + length);
        continue;
      }
    }
    struct pollfd ready {
      connection.descriptor(), POLLIN, 0
    };
    if (::poll(&ready, 1, 100) <= 0)
      continue;
    ssize_t n = ::recv(connection.descriptor(), buffer, sizeof(buffer), 0);
    if (n <= 0)
      break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

} // namespace

TEST_CASE("300 idle keep-alive connections hold no thread of the executor, and each is "
          "answered again",
          "[http][clients]") {
  // One client holds all 300: no per-client limit here (ConnectionLimitsTest has it).
  ExecutorProcess executor(
      ExecutorConfig{0, "", {"--warm-workers", "0", "--max-connections-per-client", "0"}});
  size_t before = threadsOf(executor.processId());
  constexpr int kConnections = 300;
  std::vector<std::unique_ptr<RawConnection>> connections;
  const std::string health = "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n";
  for (int round = 0; round < 2; ++round) {
    if (round == 0)
      for (int c = 0; c < kConnections; ++c)
        connections.push_back(std::make_unique<RawConnection>(executor.port()));
    for (auto &connection : connections)
      connection->send(health);
    for (auto &connection : connections) {
      auto responses = readResponses(*connection, 1);
      REQUIRE(responses.size() == 1);
      CHECK(responses[0].first == "HTTP/1.1 200 OK");
    }
    // All 300 are open and idle now. A thread per connection would be 300 threads for the
    // keep-alive timeout; the executor keeps its few request threads (four per core, at most
    // 64) beside its own.
    size_t now = threadsOf(executor.processId());
    INFO("threads before: " << before << ", with 300 idle connections: " << now);
    CHECK(now <= before + 70);
    // The scrape's own connection is the 301st (an earlier scrape's or the start-up probe's
    // may not have been seen closed yet).
    double open = executor.metric("courier_connections_open");
    CHECK(open >= kConnections + 1);
    CHECK(open <= kConnections + 3);
    CHECK(executor.metric("courier_request_threads") <= 64);
  }
}

TEST_CASE("requests a client sends before the last is answered are answered in order",
          "[http][clients]") {
  ExecutorProcess executor;
  RawConnection connection(executor.port());
  connection.send("GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
                  "GET /v1/sessions/none-such HTTP/1.1\r\nHost: x\r\n\r\n"
                  "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n");
  auto responses = readResponses(connection, 3);
  REQUIRE(responses.size() == 3);
  CHECK(responses[0].first == "HTTP/1.1 200 OK");
  CHECK(responses[1].first.rfind("HTTP/1.1 404", 0) == 0);
  CHECK(responses[2].first == "HTTP/1.1 200 OK");
}

TEST_CASE("after a response that closes the connection, bytes the client sent later are never "
          "run as a request",
          "[http][clients][security]") {
  ExecutorProcess executor;
  auto setup = keepAliveClient(executor);
  httplib::Result opened = setup->Post("/v1/sessions", "", kJsonType);
  REQUIRE(opened);
  std::string session = json::parse(opened->body)["session"];
  // A GET declaring a body is refused and the connection closed; the DELETE that follows,
  // sent a moment later as its own packet, must not close the session.
  RawConnection connection(executor.port());
  std::string smuggled = "DELETE /v1/sessions/" + session + " HTTP/1.1\r\nHost: x\r\n\r\n";
  connection.send("GET /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                  std::to_string(smuggled.size()) + "\r\n\r\n");
  std::this_thread::sleep_for(100ms);
  ::send(connection.descriptor(), smuggled.data(), smuggled.size(), MSG_NOSIGNAL);
  std::string reply = connection.readAll();
  CHECK(reply.rfind("HTTP/1.1 400", 0) == 0);
  CHECK(reply.find("HTTP/1.1", 1) == std::string::npos);
  CHECK(executor.metric("courier_sessions") == 1);
}

TEST_CASE("256 keep-alive clients of one executor are all answered, throughout",
          "[http][clients]") {
  // 256 clients and the setup's connection, from one address.
  ExecutorProcess executor(
      ExecutorConfig{0, "", {"--warm-workers", "2", "--max-connections-per-client", "0"}});
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
      std::string frame = noopFrame(sha);
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
  // Every client is answered throughout, none waiting as long as a second.
  CHECK(slowestMicros.load() < 1000000);
}

TEST_CASE("a request whose headers never end is cut off at 64 KiB, and the executor serves on",
          "[http][clients][security]") {
  ExecutorProcess executor;
  RawConnection connection(executor.port());
  std::string line = "X-Filler: " + std::string(1000, 'a') + "\r\n";
  std::string head = "GET /v1/health HTTP/1.1\r\nHost: x\r\n";
  ::send(connection.descriptor(), head.data(), head.size(), MSG_NOSIGNAL);
  // Up to 1 MiB of header lines; the server closes the connection long before.
  size_t sent = head.size();
  for (int i = 0; i < 1000; ++i) {
    ssize_t n = ::send(connection.descriptor(), line.data(), line.size(), MSG_NOSIGNAL);
    if (n <= 0)
      break;
    sent += static_cast<size_t>(n);
  }
  std::string reply = connection.readAll(); // Returns once the server has closed.
  INFO("sent " << sent << " bytes before the close; reply: " << reply.substr(0, 80));
  CHECK(reply.find("200 OK") == std::string::npos);
  // A line of a bare "\n" does not end a head (httplib skips it), so it does not lift the
  // limit either: one endless header line after it is cut off too.
  RawConnection endless(executor.port());
  head = "GET /v1/health HTTP/1.1\r\n\nX-Endless: ";
  ::send(endless.descriptor(), head.data(), head.size(), MSG_NOSIGNAL);
  std::string run(4096, 'a');
  for (int i = 0; i < 256; ++i)
    if (::send(endless.descriptor(), run.data(), run.size(), MSG_NOSIGNAL) <= 0)
      break;
  CHECK(endless.readAll().find("200 OK") == std::string::npos);
  auto client = keepAliveClient(executor);
  httplib::Result health = client->Get("/v1/health");
  REQUIRE(health);
  CHECK(health->status == 200);
}
