// The front door: scripts/pool.sh starting real courier-executors (and courier-serve
// instances) on unix sockets behind a real nginx, which pins each session (module) to one
// server and stands between the servers and hostile or broken clients.
#include "abi/ContentHash.h"
#include "tests/deploy/PoolProcess.h"
#include "tests/support/ConnectionFlood.h"
#include "tests/support/RawConnection.h"
#include "tests/support/TestCertificates.h"

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <poll.h>
#include <sstream>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace courier::testing;
using json = nlohmann::json;

namespace {

std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Two servers behind nginx: enough to see where a session goes.
class Pool : public PoolProcess {
public:
  explicit Pool(PoolKind kind, std::vector<std::string> serverArgs = {})
      : PoolProcess(kind, kServers, std::move(serverArgs)) {}
  static constexpr int kServers = 2;
};

/// VmRSS of `pid` in KiB.
long residentKiB(pid_t pid) {
  std::istringstream status(readFile("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stol(line.substr(6));
  FAIL("no VmRSS for process " << pid);
  return 0;
}

/// Sends `request` and reads until the server closes the connection, writing and reading
/// together so that a server answering before it has read everything is heard; gives up
/// after 60 s. Returns what came back.
std::string exchangeRaw(int port, const std::string &request) {
  RawConnection connection(port);
  int fd = connection.descriptor();
  fcntl(fd, F_SETFL, O_NONBLOCK);
  std::string reply;
  size_t sent = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, static_cast<short>(POLLIN | (sent < request.size() ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, 1000) <= 0)
      continue;
    if (p.revents & POLLOUT) {
      ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n > 0)
        sent += static_cast<size_t>(n);
      else if (errno != EAGAIN)
        sent = request.size(); // The server stopped reading; what it says follows.
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      char buffer[65536];
      ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n > 0)
        reply.append(buffer, static_cast<size_t>(n));
      else if (n == 0 || errno != EAGAIN)
        break;
    }
  }
  return reply;
}

int statusOf(const std::string &reply) {
  return reply.rfind("HTTP/1.1 ", 0) == 0 ? std::stoi(reply.substr(9, 3)) : -1;
}

/// The "code" of a raw reply's JSON error body, or what the body was instead.
std::string errorCodeOf(const std::string &reply) {
  size_t body = reply.find("\r\n\r\n");
  json parsed =
      json::parse(body == std::string::npos ? "" : reply.substr(body + 4), nullptr, false);
  if (!parsed.is_object() || !parsed.contains("error") || !parsed["error"].contains("message"))
    return "not an error body: " + reply;
  return parsed["error"]["code"];
}

std::string errorCodeOf(const httplib::Result &res) {
  if (!res)
    return "no reply: " + httplib::to_string(res.error());
  return errorCodeOf("HTTP/1.1 " + std::to_string(res->status) + " \r\n\r\n" + res->body);
}

/// Asks for /v1/health through the front door, over and over on its own thread, until it
/// goes away; each probe may take 5 s, far above the milliseconds one takes.
class HealthProbe {
public:
  explicit HealthProbe(int port)
      : thread([this, port] {
          httplib::Client http("127.0.0.1", port);
          http.set_keep_alive(true);
          http.set_connection_timeout(std::chrono::seconds(5));
          http.set_read_timeout(std::chrono::seconds(5));
          while (!stop) {
            httplib::Result res = http.Get("/v1/health");
            ++(res && res->status == 200 ? answered : failed);
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
        }) {}
  ~HealthProbe() { finish(); }
  void finish() {
    stop = true;
    if (thread.joinable())
      thread.join();
  }
  std::atomic<int> answered{0};
  std::atomic<int> failed{0};

private:
  std::atomic<bool> stop{false};
  std::thread thread;
};

/// The servers' resident sets, in KiB.
std::vector<long> residentSets(const Pool &pool) {
  std::vector<long> sizes;
  for (int i = 0; i < Pool::kServers; ++i)
    sizes.push_back(residentKiB(pool.serverPid(i)));
  return sizes;
}

/// Generous: nothing of a flood nginx absorbs should reach a server at all.
void requireResidentSetsFlat(const std::vector<long> &before, const std::vector<long> &after) {
  for (size_t i = 0; i < before.size(); ++i) {
    INFO("server " << i + 1 << ": " << before[i] << " KiB before, " << after[i] << " KiB after");
    CHECK(after[i] < before[i] + 64 * 1024);
  }
}

/// A request whose headers outgrow the front door's 32 KiB: 5000 header lines.
std::string headerFlood() {
  std::string request = "GET /v1/health HTTP/1.1\r\nHost: pool\r\n";
  for (int i = 0; i < 5000; ++i)
    request += "X-Flood-" + std::to_string(i) + ": 0123456789abcdef\r\n";
  return request + "\r\n";
}

void requireHeaderFloodRefused(const Pool &pool) {
  std::vector<long> before = residentSets(pool);
  HealthProbe probe(pool.port());
  constexpr int kConnections = 8;
  std::vector<std::string> replies(kConnections);
  {
    std::vector<std::thread> flooders;
    for (int i = 0; i < kConnections; ++i)
      flooders.emplace_back([&, i] { replies[i] = exchangeRaw(pool.port(), headerFlood()); });
    for (std::thread &t : flooders)
      t.join();
  }
  probe.finish();
  for (const std::string &reply : replies) {
    // exchangeRaw returned, so nginx closed the connection after its answer.
    CHECK(statusOf(reply) == 400);
    CHECK(errorCodeOf(reply) == "bad_request");
  }
  CHECK(probe.failed == 0);
  CHECK(probe.answered > 0);
  requireResidentSetsFlat(before, residentSets(pool));
}

/// 64 connections that send a request's first line and then one byte a second: nginx holds
/// them, not the servers, and ends each once its header is late (client_header_timeout).
void requireSlowClientsCutOff(const Pool &pool) {
  std::vector<long> before = residentSets(pool);
  HealthProbe probe(pool.port());
  constexpr int kConnections = 64;
  std::vector<std::unique_ptr<RawConnection>> connections;
  std::vector<bool> closed(kConnections, false);
  for (int i = 0; i < kConnections; ++i) {
    connections.push_back(std::make_unique<RawConnection>(pool.port()));
    connections.back()->send("GET /v1/health HTTP/1.1\r\nHost: pool\r\nX-Slow: ");
    fcntl(connections.back()->descriptor(), F_SETFL, O_NONBLOCK);
  }
  // Past client_header_timeout (10 s) every connection should be gone; 60 s is the bound.
  int open = kConnections;
  for (int second = 0; second < 60 && open > 0; ++second) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    for (int i = 0; i < kConnections; ++i) {
      if (closed[i])
        continue;
      int fd = connections[i]->descriptor();
      char byte = 'x';
      char buffer[4096];
      ssize_t got = ::recv(fd, buffer, sizeof(buffer), 0);
      if (got == 0 || (got < 0 && errno != EAGAIN) || ::send(fd, &byte, 1, MSG_NOSIGNAL) < 0) {
        closed[i] = true;
        --open;
      }
    }
  }
  probe.finish();
  CHECK(open == 0);
  CHECK(probe.failed == 0);
  CHECK(probe.answered > 0);
  requireResidentSetsFlat(before, residentSets(pool));
}

void requireAmbiguousFramingRefused(const Pool &pool, const std::string &path) {
  std::string head = "PUT " + path + " HTTP/1.1\r\nHost: pool\r\n";
  std::string twoLengths =
      exchangeRaw(pool.port(), head + "Content-Length: 0\r\nContent-Length: 5\r\n\r\nhello");
  CHECK(statusOf(twoLengths) == 400);
  CHECK(errorCodeOf(twoLengths) == "bad_request");
  std::string lengthAndChunked = exchangeRaw(
      pool.port(), head + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nhello");
  CHECK(statusOf(lengthAndChunked) == 400);
  CHECK(errorCodeOf(lengthAndChunked) == "bad_request");
  std::string otherCoding =
      exchangeRaw(pool.port(), head + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n");
  CHECK(statusOf(otherCoding) == 400);
  CHECK(errorCodeOf(otherCoding) == "bad_request");
  httplib::Result health = pool.front()->Get("/v1/health");
  REQUIRE(health);
  CHECK(health->status == 200);
}

/// The head of a request announcing `bytes` of body, which never follow.
void requireOversizedBodyRefused(const Pool &pool, const std::string &method,
                                 const std::string &path, size_t bytes) {
  std::string reply =
      exchangeRaw(pool.port(), method + " " + path + " HTTP/1.1\r\nHost: pool\r\nContent-Length: " +
                                   std::to_string(bytes) + "\r\n\r\n");
  CHECK(statusOf(reply) == 413);
  CHECK(errorCodeOf(reply) == "payload_too_large");
}

httplib::Result openSession(httplib::Client &http, const std::string &id) {
  return http.Put("/v1/sessions/" + id, {{"X-Courier-Session", id}}, "", "application/json");
}

/// Which servers answer `path` with 200 when asked directly.
std::vector<int> serversAnswering(const Pool &pool, const std::string &path) {
  std::vector<int> found;
  for (int i = 0; i < Pool::kServers; ++i) {
    httplib::Result res = pool.direct(i)->Get(path);
    REQUIRE(res);
    if (res->status == 200)
      found.push_back(i);
  }
  return found;
}

} // namespace

TEST_CASE("every request of a session reaches the executor its id hashes to", "[deploy]") {
  Pool pool(PoolKind::Executors);
  auto front = pool.front();
  std::vector<std::string> ids;
  for (int i = 0; i < 12; ++i)
    ids.push_back("pinned-" + std::to_string(i));
  for (const std::string &id : ids) {
    httplib::Result res = openSession(*front, id);
    REQUIRE(res);
    REQUIRE(res->status == 201);
  }
  for (const std::string &id : ids) {
    INFO("session " << id);
    // Exactly one executor holds it, and every later request finds it there.
    CHECK(serversAnswering(pool, "/v1/sessions/" + id).size() == 1);
    for (int i = 0; i < 5; ++i) {
      httplib::Result res = front->Get("/v1/sessions/" + id, {{"X-Courier-Session", id}});
      REQUIRE(res);
      CHECK(res->status == 200);
    }
  }
  double held = 0;
  for (int i = 0; i < Pool::kServers; ++i) {
    httplib::Result res = pool.direct(i)->Get("/v1/health");
    REQUIRE(res);
    held += json::parse(res->body)["sessions"].get<double>();
  }
  CHECK(held == ids.size());
}

TEST_CASE("an object upload reaches the executor of the session its header names", "[deploy]") {
  Pool pool(PoolKind::Executors);
  auto front = pool.front();
  for (int i = 0; i < 4; ++i) {
    std::string id = "uploader-" + std::to_string(i);
    REQUIRE(openSession(*front, id)->status == 201);
    std::string bytes = "object bytes of " + id;
    std::string sha = courier::sha256Hex(bytes);
    httplib::Result res = front->Put("/v1/objects/" + sha, {{"X-Courier-Session", id}}, bytes,
                                     "application/octet-stream");
    REQUIRE(res);
    REQUIRE(res->status == 201);
    INFO("session " << id);
    CHECK(serversAnswering(pool, "/v1/objects/" + sha) ==
          serversAnswering(pool, "/v1/sessions/" + id));
  }
}

TEST_CASE("behind the front door a session id is the client's, never the executor's", "[deploy]") {
  Pool pool(PoolKind::Executors);
  httplib::Result res = pool.front()->Post("/v1/sessions", "", "application/json");
  REQUIRE(res);
  CHECK(res->status == 400);
  CHECK(errorCodeOf(res) == "bad_request");
  CHECK(res->body.find("PUT /v1/sessions/{id}") != std::string::npos);
}

/// Runs sample 02 with courier-run against `executor` (with `extra` flags) and checks its
/// printed result.
void requireSampleRunsOn(const std::string &executor, const std::string &extra = "") {
  std::string command = std::string(COURIER_BIN_DIR) + "/courier-run " + COURIER_SAMPLE_APP +
                        " --entry main --arg '[1, 2, 3, 4]' --no-disk-cache --executor " +
                        executor + " " + extra + " 2>&1";
  FILE *out = popen(command.c_str(), "r");
  REQUIRE(out);
  std::string printed;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), out)) > 0;)
    printed.append(buffer, n);
  int status = pclose(out);
  INFO(command << "\n" << printed);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(printed == "{\"data\":[3,5,7,9],\"dtype\":\"f64\",\"shape\":[4]}\n");
}

TEST_CASE("a program runs on a pool through its front door", "[deploy]") {
  Pool pool(PoolKind::Executors);
  // Each run opens a session of its own, which may hash to either executor. The front door
  // is on loopback, where a client asks for the same-host channel by default (and the last
  // run asks whatever the address): the executors refuse it behind the door, so every launch
  // goes through it.
  for (int run = 0; run < 4; ++run)
    requireSampleRunsOn(pool.address(), run == 3 ? "--shared-memory on" : "");
  for (int i = 0; i < Pool::kServers; ++i) {
    INFO("server " << i);
    CHECK(pool.serverMetric(i, "courier_shm_channels_opened_total") == 0);
    CHECK(pool.serverMetric(i, "courier_shm_launches_total") == 0);
  }
}

TEST_CASE("a program runs on a pool through a front door that terminates TLS", "[deploy][tls]") {
  courier::testing::TestCertificates certificates;
  PoolProcess pool(PoolKind::Executors, 2, {},
                   {certificates.serverCert, certificates.serverKey, certificates.caCert});
  requireSampleRunsOn(pool.address(), "--tls-ca " + certificates.caCert);
}

namespace {

/// Under 2000 idle connections and 200 half-sent heads from one client at the front door, a
/// new client's health check is answered within 1 s and a program runs on the pool; nginx's
/// workers stay small.
void requireServedThroughFlood(const PoolProcess &pool, const std::string &tlsCaFile,
                               const std::string &runExtra) {
  long before = 0;
  for (pid_t worker : courier::testing::childrenOf(pool.nginxPid()))
    before += residentKiB(worker);
  courier::testing::ConnectionFlood flood(pool.port(), {2000, 200, 0, tlsCaFile});
  REQUIRE(flood.opened() == 2200);
  auto client = pool.front();
  client->set_connection_timeout(std::chrono::seconds(1));
  client->set_read_timeout(std::chrono::seconds(1));
  httplib::Result health = client->Get("/v1/health");
  INFO(
      "health: " << (health ? std::to_string(health->status) : httplib::to_string(health.error())));
  REQUIRE(health);
  CHECK(health->status == 200);
  httplib::Result opened = openSession(*client, "through-the-flood");
  REQUIRE(opened);
  CHECK(opened->status == 201);
  requireSampleRunsOn(pool.address(), runExtra);
  CHECK(flood.closedByServer() < 200);
  long after = 0;
  for (pid_t worker : courier::testing::childrenOf(pool.nginxPid()))
    after += residentKiB(worker);
  INFO("nginx workers' resident memory before: " << before << " KiB, during: " << after << " KiB");
  CHECK(after - before < 64 * 1024);
}

} // namespace

TEST_CASE("2000 idle connections and 200 half-sent heads from one client leave an executor "
          "pool's front door serving a new client",
          "[deploy][connections]") {
  Pool pool(PoolKind::Executors);
  requireServedThroughFlood(pool, "", "");
}

TEST_CASE("2000 idle TLS connections and 200 half-sent heads from one client leave a TLS "
          "front door serving a new client",
          "[deploy][connections][tls]") {
  courier::testing::TestCertificates certificates;
  PoolProcess pool(PoolKind::Executors, 2, {},
                   {certificates.serverCert, certificates.serverKey, certificates.caCert});
  requireServedThroughFlood(pool, certificates.caCert, "--tls-ca " + certificates.caCert);
}

TEST_CASE("past the front door's limit_conn one address gets nginx's 503 overloaded, which it "
          "reads, while another address is served",
          "[deploy][connections]") {
  Pool pool(PoolKind::Executors);
  // Requests in progress from 127.0.0.1, each with its head read and half its body sent (an
  // executor waits 5 s for the rest): 260, past the 256 one address may have
  // (deploy/nginx/courier-limits.conf), so that whatever else nginx counts, the limit is met.
  std::vector<std::unique_ptr<RawConnection>> busy;
  for (int i = 0; i < 260; ++i) {
    busy.push_back(std::make_unique<RawConnection>(pool.port()));
    busy.back()->send("PUT /v1/sessions/limit-" + std::to_string(i) +
                      " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Content-Length: 4\r\n\r\n{}");
  }
  const std::string health = "GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  // nginx counts a request once its head is read: the last ones may still be on their way.
  std::string refused;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       statusOf(refused) != 503 && std::chrono::steady_clock::now() < deadline;) {
    refused = exchangeRaw(pool.port(), health);
    if (statusOf(refused) != 503)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  INFO(refused);
  CHECK(statusOf(refused) == 503);
  CHECK(errorCodeOf(refused) == "overloaded");
  CHECK(refused.find("limit_conn") != std::string::npos);
  std::string served = courier::testing::exchangeFrom(pool.port(), "127.0.0.2", health);
  INFO(served);
  CHECK(statusOf(served) == 200);
  // Once those requests end, the address is served again.
  busy.clear();
  std::string again;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       statusOf(again) != 200 && std::chrono::steady_clock::now() < deadline;) {
    again = exchangeRaw(pool.port(), health);
    if (statusOf(again) != 200)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(statusOf(again) == 200);
}

TEST_CASE("an executor pool's front door refuses a header flood and keeps answering health",
          "[deploy]") {
  Pool pool(PoolKind::Executors);
  requireHeaderFloodRefused(pool);
}

TEST_CASE("an executor pool's front door cuts off 64 clients sending a byte a second", "[deploy]") {
  Pool pool(PoolKind::Executors);
  requireSlowClientsCutOff(pool);
}

TEST_CASE("an executor pool's front door refuses ambiguous framing", "[deploy]") {
  Pool pool(PoolKind::Executors);
  requireAmbiguousFramingRefused(pool, "/v1/sessions/framing");
}

TEST_CASE("an executor pool's front door refuses a body over the executors' limit", "[deploy]") {
  Pool pool(PoolKind::Executors, {"--max-body-mib", "1"});
  std::string sha(64, 'a');
  requireOversizedBodyRefused(pool, "PUT", "/v1/objects/" + sha, (1u << 20) + 1);
  // The executors' own limit is the same, so a body under it passes the front door and is
  // the executor's to judge.
  httplib::Result res = pool.front()->Put("/v1/objects/" + sha, std::string(1u << 20, 'x'),
                                          "application/octet-stream");
  REQUIRE(res);
  CHECK(errorCodeOf(res) == "hash_mismatch");
}

TEST_CASE("the front door names a lost executor in Courier's error shape", "[deploy]") {
  Pool pool(PoolKind::Executors);
  for (int i = 0; i < Pool::kServers; ++i)
    ::kill(pool.serverPid(i), SIGKILL);
  httplib::Result res = openSession(*pool.front(), "orphan");
  REQUIRE(res);
  CHECK(res->status == 502);
  CHECK(errorCodeOf(res) == "executor_lost");
}

TEST_CASE("a request's id is the same in the reply, the front door's log and the server's log",
          "[deploy]") {
  Pool pool(PoolKind::Executors);
  auto front = pool.front();
  // No id from the client: nginx makes one (32 hex digits) and the server answers with it.
  httplib::Result made = front->Get("/v1/sessions/nobody", {{"X-Courier-Session", "nobody"}});
  REQUIRE(made);
  CHECK(made->status == 404);
  std::string madeId = made->get_header_value("X-Request-Id");
  CHECK(madeId.size() == 32);
  CHECK(madeId.find_first_not_of("0123456789abcdef") == std::string::npos);
  // A usable id from the client passes through; one the servers would not take is replaced.
  httplib::Result given = front->Get("/v1/sessions/nobody", {{"X-Courier-Session", "nobody"},
                                                             {"X-Request-Id", "client-chosen.7"}});
  REQUIRE(given);
  CHECK(given->get_header_value("X-Request-Id") == "client-chosen.7");
  httplib::Result odd = front->Get(
      "/v1/sessions/nobody", {{"X-Courier-Session", "nobody"}, {"X-Request-Id", "has\"quote"}});
  REQUIRE(odd);
  std::string oddId = odd->get_header_value("X-Request-Id");
  CHECK(oddId.size() == 32);
  CHECK(oddId != madeId);
  // Each id is on the access log's line and on one server's request line.
  for (const std::string &id : {madeId, std::string("client-chosen.7"), oddId}) {
    INFO("request id " << id);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    auto logged = [&] {
      bool byServer = false;
      for (int i = 0; i < Pool::kServers; ++i)
        byServer |=
            readFile(pool.runDir() + "/" + pool.serverName(i) + ".log").find("request=" + id) !=
            std::string::npos;
      return byServer &&
             readFile(pool.runDir() + "/nginx-access.log").find("request_id=" + id + " ") !=
                 std::string::npos;
    };
    while (!logged() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(logged());
  }
}

TEST_CASE("a pool reports a server that dies and sends its new sessions to the others",
          "[deploy]") {
  Pool pool(PoolKind::Executors);
  ::kill(pool.serverPid(0), SIGKILL);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (pool.process.log().find("executor-1") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(pool.process.log().find("executor-1 (pid " + std::to_string(pool.serverPid(0)) +
                                ") exited on its own") != std::string::npos);
  auto front = pool.front();
  for (int i = 0; i < 6; ++i) {
    httplib::Result res = openSession(*front, "survivor-" + std::to_string(i));
    REQUIRE(res);
    CHECK(res->status == 201);
  }
}

TEST_CASE("a pool stops its servers and nginx on SIGTERM and exits 0", "[deploy]") {
  Pool pool(PoolKind::Executors);
  std::vector<pid_t> pids = {pool.nginxPid()};
  for (int i = 0; i < Pool::kServers; ++i)
    pids.push_back(pool.serverPid(i));
  int status = pool.process.terminate(SIGTERM, std::chrono::seconds(30));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  for (pid_t pid : pids) {
    INFO("process " << pid);
    CHECK(::kill(pid, 0) != 0);
  }
}

TEST_CASE("every request about a module reaches the courier-serve instance its name hashes to",
          "[deploy][serve]") {
  Pool pool(PoolKind::Serve);
  auto front = pool.front();
  std::string mlir = readFile(COURIER_SAMPLE_APP);
  std::vector<std::string> names = {"scale-a", "scale-b", "scale-c", "scale-d"};
  for (const std::string &name : names) {
    httplib::Result res = front->Put("/v1/modules/" + name, mlir, "text/plain");
    REQUIRE(res);
    REQUIRE(res->status == 201);
  }
  for (const std::string &name : names) {
    INFO("module " << name);
    CHECK(serversAnswering(pool, "/v1/modules/" + name).size() == 1);
    for (int i = 0; i < 3; ++i) {
      httplib::Result res = front->Post("/v1/modules/" + name + "/invoke/main",
                                        R"({"inputs": [[1, 2, 3, 4]]})", "application/json");
      REQUIRE(res);
      REQUIRE(res->status == 200);
      CHECK(json::parse(res->body)["outputs"][0]["data"] == json::array({3, 5, 7, 9}));
      // The KServe v2 routes reach the same instance, by the model's module.
      httplib::Result v2 =
          front->Post("/v2/models/" + name + (i == 0 ? "" : ".main") + "/infer",
                      R"({"inputs": [{"name": "input0", "datatype": "FP64", "shape": [4],
                          "data": [1, 2, 3, 4]}]})",
                      "application/json");
      REQUIRE(v2);
      INFO(v2->body);
      REQUIRE(v2->status == 200);
      CHECK(json::parse(v2->body)["outputs"][0]["data"] == json::array({3, 5, 7, 9}));
    }
  }
}

TEST_CASE("behind the front door a module is created with PUT, which names it in the path",
          "[deploy][serve]") {
  Pool pool(PoolKind::Serve);
  json body = {{"name", "scale"}, {"mlir", readFile(COURIER_SAMPLE_APP)}};
  httplib::Result res = pool.front()->Post("/v1/modules", body.dump(), "application/json");
  REQUIRE(res);
  CHECK(res->status == 400);
  CHECK(errorCodeOf(res) == "bad_request");
  CHECK(res->body.find("PUT /v1/modules/{name}") != std::string::npos);
}

TEST_CASE("a courier-serve pool's front door refuses a header flood and keeps answering health",
          "[deploy][serve]") {
  Pool pool(PoolKind::Serve);
  requireHeaderFloodRefused(pool);
}

TEST_CASE("a courier-serve pool's front door cuts off 64 clients sending a byte a second",
          "[deploy][serve]") {
  Pool pool(PoolKind::Serve);
  requireSlowClientsCutOff(pool);
}

TEST_CASE("a courier-serve pool's front door refuses ambiguous framing", "[deploy][serve]") {
  Pool pool(PoolKind::Serve);
  requireAmbiguousFramingRefused(pool, "/v1/modules/framing");
}

TEST_CASE("a courier-serve pool's front door names a lost instance executor_lost",
          "[deploy][serve]") {
  Pool pool(PoolKind::Serve);
  for (int i = 0; i < Pool::kServers; ++i)
    ::kill(pool.serverPid(i), SIGKILL);
  // The request may have reached an instance as it died: unavailable would promise it did not.
  httplib::Result res = pool.front()->Post("/v1/modules/orphan/invoke/main",
                                           R"({"inputs": [[1, 2, 3, 4]]})", "application/json");
  REQUIRE(res);
  CHECK(res->status == 502);
  CHECK(errorCodeOf(res) == "executor_lost");
}

TEST_CASE("a courier-serve pool's front door refuses a body over the instances' limit",
          "[deploy][serve]") {
  Pool pool(PoolKind::Serve, {"--max-body-bytes", "65536"});
  requireOversizedBodyRefused(pool, "PUT", "/v1/modules/big", 65537);
}

TEST_CASE("a pool that cannot start says why and exits non-zero", "[deploy]") {
  using courier::testing::runServerToExit;
  auto [badArgument, badArgumentLog] =
      runServerToExit(COURIER_POOL_SCRIPT, {"--executors", "2", "--listen", "127.0.0.1:0",
                                            "--bin-dir", COURIER_BIN_DIR, "--", "--frobnicate"});
  CHECK(badArgument == 1);
  CHECK(badArgumentLog.find("executor-1 exited before listening") != std::string::npos);
  CHECK(badArgumentLog.find("unknown option '--frobnicate'") != std::string::npos);
  auto [exposed, exposedLog] =
      runServerToExit(COURIER_POOL_SCRIPT,
                      {"--executors", "1", "--listen", "0.0.0.0:0", "--bin-dir", COURIER_BIN_DIR});
  CHECK(exposed == 2);
  CHECK(exposedLog.find("beyond loopback: give --token-file") != std::string::npos);
}

TEST_CASE("a pool with a token file serves the token's holders and leaves no copy of it behind",
          "[deploy]") {
  const std::string token = "pool-token-" + std::to_string(::getpid());
  PoolProcess pool(PoolKind::Executors, 2, {}, {}, token);
  httplib::Result opened = openSession(*pool.front(), "with-token");
  REQUIRE(opened);
  CHECK(opened->status == 201);
  httplib::Client stranger("127.0.0.1", pool.port());
  httplib::Result refused = openSession(stranger, "without-token");
  REQUIRE(refused);
  CHECK(refused->status == 401);
  CHECK(errorCodeOf(refused) == "unauthorized");
  int status = pool.process.terminate(SIGTERM, std::chrono::seconds(30));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // The token file itself is outside the run directory.
  for (const auto &entry : std::filesystem::recursive_directory_iterator(pool.runDir())) {
    INFO(entry.path());
    if (entry.is_regular_file())
      CHECK(readFile(entry.path()).find(token) == std::string::npos);
  }
}

TEST_CASE("a pool that fails after its servers started stops them before it exits", "[deploy]") {
  std::string dir = "/tmp/courier-pool-failure-XXXXXX";
  REQUIRE(::mkdtemp(dir.data()));
  // pool.sh copies courier-limits.conf into its run directory once the servers are ready; a
  // directory in its place makes that copy fail.
  std::filesystem::create_directories(dir + "/run/courier-limits.conf");
  auto [status, log] = courier::testing::runServerToExit(
      COURIER_POOL_SCRIPT, {"--executors", "2", "--listen", "127.0.0.1:0", "--run-dir",
                            dir + "/run", "--bin-dir", COURIER_BIN_DIR});
  INFO(log);
  CHECK(status == 1);
  CHECK(log.find("cannot overwrite directory") != std::string::npos);
  CHECK(log.find("stopping the pool after a failure") != std::string::npos);
  for (const char *name : {"executor-1", "executor-2"}) {
    std::string pidFile = dir + "/run/" + name + ".pid";
    REQUIRE(std::filesystem::exists(pidFile));
    pid_t pid = static_cast<pid_t>(std::stol(readFile(pidFile)));
    INFO(name << " (pid " << pid << ")");
    bool running = ::kill(pid, 0) == 0;
    CHECK_FALSE(running);
    if (running) // Left behind: end it here rather than leave it to outlive the test.
      ::kill(pid, SIGKILL);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a front door with TLS serves https and answers plain HTTP in Courier's shape",
          "[deploy][tls]") {
  courier::testing::TestCertificates certificates;
  PoolProcess pool(PoolKind::Executors, 2, {},
                   {certificates.serverCert, certificates.serverKey, certificates.caCert});
  CHECK(pool.address() == "https://127.0.0.1:" + std::to_string(pool.port()));
  auto front = pool.front();
  httplib::Result opened = openSession(*front, "over-tls");
  REQUIRE(opened);
  CHECK(opened->status == 201);
  httplib::Result found = front->Get("/v1/sessions/over-tls", {{"X-Courier-Session", "over-tls"}});
  REQUIRE(found);
  CHECK(found->status == 200);
  httplib::Client plain("127.0.0.1", pool.port());
  httplib::Result refused = plain.Get("/v1/health");
  REQUIRE(refused);
  CHECK(refused->status == 400);
  CHECK(errorCodeOf(refused) == "bad_request");
  CHECK(refused->body.find("https://") != std::string::npos);
}
