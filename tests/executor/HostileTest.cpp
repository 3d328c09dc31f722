// Red-team tests of courier-executor's main process against hostile kernels and clients:
// kernels of tests/kernels/hostile.c forge replies on their worker's channel, workers are
// stopped or killed from outside, sessions crash over and over, and SIGTERM arrives with all
// of it going on. Whatever happens, the main process answers the request that caused it with
// an error, keeps serving every other session, and leaks no descriptors, zombies or threads.
#include "tests/executor/Replies.h"
#include "tests/kernels/KernelPaths.h"
#include "tests/support/RawConnection.h"
#include "tests/support/Sanitized.h"
#include "tests/transport/ExecutorProcess.h"
#include "transport/Backend.h"

#include "llvm/Support/MemoryBuffer.h"

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <chrono>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <regex>
#include <set>
#include <sstream>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace std::chrono_literals;
using namespace courier::testing; // Replies.h: tensors, outcomes, file reading
using namespace courier::testing;
using courier::transport::ObjectBlob;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

/// The /v1 protocol on loopback, every request bounded by timeouts.
class Client {
public:
  explicit Client(const courier::testing::ServerProcess &executor)
      : http("127.0.0.1", executor.port()) {
    http.set_keep_alive(true);
    http.set_connection_timeout(2s);
    http.set_read_timeout(30s);
    http.set_write_timeout(30s);
  }

  std::string openSession() {
    Outcome opened = outcomeOf(http.Post("/v1/sessions", "", kJsonType));
    INFO("opening a session: " << opened.describe());
    REQUIRE(opened.status == 201);
    return json::parse(opened.body)["session"];
  }

  std::string upload(const std::string &bytes) {
    std::string sha = ObjectBlob::fromBytes(bytes).sha256;
    Outcome stored =
        outcomeOf(http.Put(("/v1/objects/" + sha).c_str(), bytes, "application/octet-stream"));
    INFO("uploading an object: " << stored.describe());
    REQUIRE((stored.status == 201 || stored.status == 200));
    return sha;
  }

  httplib::Result attach(const std::string &session, const std::string &sha) {
    return http.Post((path(session) + "/objects/" + sha).c_str(), {{"X-Courier-Session", session}},
                     "", kJsonType);
  }

  std::string ship(const std::string &session, const char *file) {
    std::string sha = upload(readFile(file));
    Outcome attached = outcomeOf(attach(session, sha));
    INFO("attaching " << file << ": " << attached.describe());
    REQUIRE(attached.status == 200);
    return sha;
  }

  static std::string frame(const std::string &sha, const std::string &entry,
                           const std::vector<Tensor> &inputs, const std::vector<int64_t> &ranks) {
    json header = {
        {"object", sha}, {"entry", entry}, {"inputs", json::array()}, {"results", json::array()}};
    std::string payload;
    for (const Tensor &input : inputs) {
      header["inputs"].push_back({{"elemSize", input.elemSize},
                                  {"sizes", input.sizes},
                                  {"offset", payload.size()},
                                  {"bytes", input.bytes.size()}});
      payload += input.bytes;
    }
    for (int64_t rank : ranks)
      header["results"].push_back({{"rank", rank}, {"elemSize", 8}});
    return header.dump() + "\n" + payload;
  }

  /// Launches `entry` with results of f64 elements and the given ranks.
  httplib::Result launch(const std::string &session, const std::string &sha,
                         const std::string &entry, const std::vector<Tensor> &inputs,
                         const std::vector<int64_t> &ranks, httplib::Headers extra = {}) {
    extra.emplace("X-Courier-Session", session);
    return http.Post((path(session) + "/launch").c_str(), extra, frame(sha, entry, inputs, ranks),
                     kFrameType);
  }

  httplib::Result launchAsync(const std::string &session, const std::string &sha,
                              const std::string &entry) {
    return http.Post((path(session) + "/launch_async").c_str(), {{"X-Courier-Session", session}},
                     json({{"object", sha}, {"entry", entry}}).dump(), kJsonType);
  }

  httplib::Result await(const std::string &session, uint64_t launch, httplib::Headers extra = {}) {
    extra.emplace("X-Courier-Session", session);
    return http.Post((path(session) + "/launches/" + std::to_string(launch) + "/await").c_str(),
                     extra, "", kJsonType);
  }

  httplib::Result call(const std::string &session, const std::string &symbol, uint64_t outputSize) {
    return http.Post(
        (path(session) + "/call/" + symbol).c_str(),
        {{"X-Courier-Session", session}, {"X-Courier-Output-Size", std::to_string(outputSize)}}, "",
        "application/octet-stream");
  }

  httplib::Result close(const std::string &session) {
    return http.Delete(path(session).c_str(), {{"X-Courier-Session", session}});
  }

  bool healthy() {
    httplib::Result res = http.Get("/v1/health");
    return res && res->status == 200;
  }

private:
  static std::string path(const std::string &session) { return "/v1/sessions/" + session; }
  httplib::Client http;
};

/// `x + 1` on [1, 2] works on `session`, which has crashers.o attached as `sha`.
void requirePlusOneWorks(Client &client, const std::string &session, const std::string &sha) {
  Outcome launched =
      outcomeOf(client.launch(session, sha, "_catalyst_pyface_plus_one", {f64s({1, 2})}, {1}));
  INFO("plus_one: " << launched.describe());
  REQUIRE(launched.status == 200);
  REQUIRE(launched.results.size() == 1);
  CHECK(doublesOf(launched.results[0]) == std::vector<double>{2, 3});
}

/// The courier-executor this test process started (tests here run one at a time).
pid_t executorPid() {
  for (pid_t child : childrenOf(::getpid())) {
    std::error_code ignored;
    std::string exe =
        std::filesystem::read_symlink("/proc/" + std::to_string(child) + "/exe", ignored);
    if (llvm::StringRef(exe).ends_with("/courier-executor"))
      return child;
  }
  FAIL("no courier-executor child of the test process");
  return -1;
}

size_t entriesIn(const std::string &dir) {
  size_t n = 0;
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *entry = ::readdir(d))
      n += entry->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

char processState(pid_t pid) {
  std::string stat = procFile(pid, "stat");
  size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
}

/// What the executor holds: descriptors, threads, child processes, zombies among them.
struct Holdings {
  size_t fds = 0, threads = 0, children = 0, zombies = 0;
  std::string describe() const {
    return std::to_string(fds) + " fds, " + std::to_string(threads) + " threads, " +
           std::to_string(children) + " children (" + std::to_string(zombies) + " zombies)";
  }
  /// Descriptors a count of `before` may grow by beside `slack`: a warm worker started since
  /// holds its channel, doorbell and arena, a few a child. A leak per request would be dozens.
  size_t fdsAllowed(const Holdings &before, size_t slack) const {
    size_t newChildren = children > before.children ? children - before.children : 0;
    return before.fds + slack + 4 * newChildren;
  }
};

Holdings holdingsOf(pid_t pid) {
  Holdings h;
  h.fds = entriesIn("/proc/" + std::to_string(pid) + "/fd");
  h.threads = entriesIn("/proc/" + std::to_string(pid) + "/task");
  for (pid_t child : childrenOf(pid)) {
    ++h.children;
    h.zombies += processState(child) == 'Z';
  }
  return h;
}

/// Polls until the executor holds no more than `baseline` (plus `slack` descriptors and
/// children, for the warm pool refilling) or 10 s pass.
Holdings awaitHoldingsBack(pid_t pid, const Holdings &baseline, size_t slack) {
  auto deadline = Clock::now() + 10s;
  Holdings now = holdingsOf(pid);
  while (Clock::now() < deadline &&
         (now.fds > baseline.fds + slack || now.children > baseline.children + slack ||
          now.zombies > 0 || now.threads > baseline.threads + slack)) {
    std::this_thread::sleep_for(50ms);
    now = holdingsOf(pid);
  }
  return now;
}

/// A session with hostile.o and crashers.o, beside a bystander session with crashers.o.
struct Hostile {
  explicit Hostile(std::vector<std::string> args = {"--launch-timeout-ms", "5000"})
      : executor(ExecutorConfig{0, "", std::move(args)}), client(executor),
        session(client.openSession()), hostile(client.ship(session, COURIER_KERNEL_HOSTILE)),
        crashers(client.ship(session, COURIER_KERNEL_CRASHERS)), bystander(client.openSession()),
        bystanderCrashers(client.ship(bystander, COURIER_KERNEL_CRASHERS)) {}

  httplib::Result forge(const std::string &on, int64_t what, int64_t after) {
    return client.launch(on, hostile, "_catalyst_pyface_forge", {i64Scalar(what), i64Scalar(after)},
                         {1});
  }

  ExecutorProcess executor;
  Client client;
  std::string session, hostile, crashers, bystander, bystanderCrashers;
};

/// Sends a launch frame on a raw connection, reads the first bytes of the reply, waits
/// `pause`, then reads the rest; returns how many bytes arrived in all.
size_t launchReadingSlowly(int port, const std::string &session, const std::string &body,
                           std::chrono::milliseconds pause) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address = loopbackAddress(port);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) == 0);
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string request = "POST /v1/sessions/" + session +
                        "/launch HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Courier-Session: " + session +
                        "\r\nContent-Type: " + kFrameType +
                        "\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) +
                        "\r\n\r\n" + body;
  REQUIRE(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size()));
  std::vector<char> buffer(1 << 20);
  size_t total = 0;
  ssize_t got = ::recv(fd, buffer.data(), 256, 0);
  total += got > 0 ? static_cast<size_t>(got) : 0;
  std::this_thread::sleep_for(pause);
  auto deadline = Clock::now() + 20s;
  while (Clock::now() < deadline && (got = ::recv(fd, buffer.data(), buffer.size(), 0)) > 0)
    total += static_cast<size_t>(got);
  ::close(fd);
  return total;
}

} // namespace

TEST_CASE("forged replies on the worker channel fail only their own request, other sessions, "
          "health and the executor's holdings are untouched",
          "[hostile][channel]") {
  Hostile f;
  pid_t pid = executorPid();
  requirePlusOneWorks(f.client, f.bystander, f.bystanderCrashers);
  Holdings before = holdingsOf(pid);
  // what: 0 huge count, 1 overflowing shape, 2 8 TiB claimed, 3 short memfd, 4 the channel as
  // the buffer, 5 a result outside the reply, 7 a zero-length message, 8 four descriptors and
  // a truncated body, 9 Ready, 11 oversized, 12 a malformed Failed, 13 dup2 over the channel.
  // after: 0 return, 1 spin, 2 close the channel and spin.
  for (int64_t what : {0, 1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13})
    for (int64_t after : {0, 1, 2}) {
      INFO("forge " << what << ", then " << after);
      std::string session = f.client.openSession();
      std::string sha = f.client.ship(session, COURIER_KERNEL_HOSTILE);
      auto start = Clock::now();
      Outcome forged = outcomeOf(f.client.launch(session, sha, "_catalyst_pyface_forge",
                                                 {i64Scalar(what), i64Scalar(after)}, {1}));
      INFO(forged.describe());
      CHECK(forged.status >= 400);
      CHECK(Clock::now() - start < 2s);
      CHECK((forged.code == "launch_failed" || forged.code == "kernel_crashed"));
      // A spinning worker goes with its session.
      CHECK(outcomeOf(f.client.close(session)).status == 204);
      requirePlusOneWorks(f.client, f.bystander, f.bystanderCrashers);
    }
  CHECK(f.client.healthy());
  Holdings after = awaitHoldingsBack(pid, before, 2);
  INFO("before: " << before.describe() << "; after: " << after.describe());
  CHECK(after.zombies == 0);
  CHECK(after.fds <= after.fdsAllowed(before, 2));
  CHECK(after.children <= before.children + 2);
  CHECK(after.threads <= before.threads + 2);
}

TEST_CASE("a forged crash report while the kernel goes on costs its request at most ~1 s",
          "[hostile][channel]") {
  Hostile f;
  auto start = Clock::now();
  Outcome forged = outcomeOf(f.forge(f.session, 6, /*spin*/ 1));
  INFO(forged.describe());
  CHECK(forged.code == "kernel_crashed");
  CHECK(Clock::now() - start < 3s);
  requirePlusOneWorks(f.client, f.session, f.crashers);
  requirePlusOneWorks(f.client, f.bystander, f.bystanderCrashers);
}

TEST_CASE("a kernel truncating the memfd of a forged launch reply while it streams does not "
          "take the executor down",
          "[hostile][channel][memfd]") {
  Hostile f;
  // 64 MiB of results in a memfd, truncated 200 ms after the forged reply, while this client
  // has stopped reading for 1 s.
  std::string body = Client::frame(f.hostile, "_catalyst_pyface_forge_then_truncate",
                                   {i64Scalar(64), i64Scalar(200)}, {1});
  size_t received = launchReadingSlowly(f.executor.port(), f.session, body, 1000ms);
  INFO("received " << received << " bytes of a 64 MiB reply");
  CHECK(received < (64u << 20));
  REQUIRE(f.client.healthy());
  requirePlusOneWorks(f.client, f.bystander, f.bystanderCrashers);
}

TEST_CASE("a worker stopped with SIGSTOP mid-launch is still ended by the deadline",
          "[hostile][signals]") {
  Hostile f({"--launch-timeout-ms", "20000", "--warm-workers", "0"});
  pid_t pid = executorPid();
  std::set<pid_t> idle;
  for (pid_t child : childrenOf(pid))
    idle.insert(child);
  Outcome launched;
  auto start = Clock::now();
  std::thread launching([&] {
    launched =
        outcomeOf(f.client.launch(f.session, f.hostile, "_catalyst_pyface_nap", {i64Scalar(5000)},
                                  {1}, {{"X-Courier-Deadline-Ms", "1500"}}));
  });
  std::this_thread::sleep_for(300ms);
  // With no warm workers, the two children are the two sessions' workers; stop both (the
  // bystander's is idle) and let the deadline deal with the napping one.
  std::vector<pid_t> stopped = childrenOf(pid);
  for (pid_t child : stopped)
    ::kill(child, SIGSTOP);
  launching.join();
  auto elapsed = Clock::now() - start;
  for (pid_t child : childrenOf(pid))
    ::kill(child, SIGCONT);
  INFO(launched.describe());
  CHECK(launched.code == "deadline_exceeded");
  CHECK(elapsed < 3s);
  requirePlusOneWorks(f.client, f.session, f.crashers);
}

TEST_CASE("300 crash-restart cycles (60 sanitized) leave the executor's descriptors, threads "
          "and children where they were, with no zombies",
          "[hostile][leaks]") {
  Hostile f;
  pid_t pid = executorPid();
  requirePlusOneWorks(f.client, f.session, f.crashers);
  Holdings before = awaitHoldingsBack(pid, holdingsOf(pid), 0);
  for (int i = 0; i < soakRounds(300); ++i) {
    const char *entry = i % 3 == 0   ? "_catalyst_pyface_null_load"
                        : i % 3 == 1 ? "_catalyst_pyface_call_abort"
                                     : "_catalyst_pyface_exit_group";
    Outcome crashed = outcomeOf(f.client.launch(f.session, f.crashers, entry, {}, {}));
    INFO("cycle " << i << ": " << crashed.describe());
    REQUIRE(crashed.code == "kernel_crashed");
  }
  requirePlusOneWorks(f.client, f.session, f.crashers);
  requirePlusOneWorks(f.client, f.bystander, f.bystanderCrashers);
  Holdings after = awaitHoldingsBack(pid, before, 1);
  INFO("before: " << before.describe() << "; after: " << after.describe());
  CHECK(after.zombies == 0);
  CHECK(after.fds <= after.fdsAllowed(before, 1));
  CHECK(after.children <= before.children + 1);
  CHECK(after.threads <= before.threads + 1);
}

TEST_CASE("SIGTERM with spinning, channel-closing and forging kernels in flight exits within "
          "5 s and leaves no worker process behind",
          "[hostile][signals]") {
  Hostile f({"--launch-timeout-ms", "60000"});
  pid_t pid = executorPid();
  std::vector<std::thread> launches;
  std::vector<std::unique_ptr<Client>> clients;
  for (int64_t after : {1, 2}) {
    for (int64_t what : {10, 14}) {
      clients.push_back(std::make_unique<Client>(f.executor));
      Client &client = *clients.back();
      std::string session = client.openSession();
      std::string sha = client.ship(session, COURIER_KERNEL_HOSTILE);
      launches.emplace_back([&client, session, sha, what, after] {
        client.launch(session, sha, "_catalyst_pyface_forge", {i64Scalar(what), i64Scalar(after)},
                      {1});
        // The forged reply answered; the kernel still spins. Queue behind it.
        client.launch(session, sha, "_catalyst_pyface_nap", {i64Scalar(100)}, {1});
      });
    }
  }
  clients.push_back(std::make_unique<Client>(f.executor));
  Outcome spinning = outcomeOf(
      clients.back()->launchAsync(f.session, f.crashers, "_catalyst_pyface_loop_forever"));
  REQUIRE(spinning.status == 202);
  // A worker per session, each started as its first launch came: on a loaded machine the
  // last may take a moment.
  std::vector<pid_t> workers = childrenOf(pid);
  for (auto giveUp = Clock::now() + 10s; workers.size() < 5 && Clock::now() < giveUp;
       workers = childrenOf(pid))
    std::this_thread::sleep_for(50ms);
  REQUIRE(workers.size() >= 5);
  std::this_thread::sleep_for(500ms); // Each launch is in flight, the forged replies sent.
  auto start = Clock::now();
  int status = f.executor.terminate(SIGTERM, std::chrono::seconds(5));
  auto elapsed = Clock::now() - start;
  for (std::thread &t : launches)
    t.join();
  CHECK(WIFEXITED(status));
  CHECK(elapsed < 5s);
  // Orphaned workers would be reparented and keep running; give them a moment to go.
  auto deadline = Clock::now() + 3s;
  std::vector<pid_t> left;
  do {
    left.clear();
    for (pid_t worker : workers)
      if (::kill(worker, 0) == 0 && processState(worker) != 'Z')
        left.push_back(worker);
    if (!left.empty())
      std::this_thread::sleep_for(50ms);
  } while (!left.empty() && Clock::now() < deadline);
  INFO(left.size() << " of " << workers.size() << " workers still running");
  CHECK(left.empty());
}

// Regressions of what a red-team pass found, each fixed in the executor core or the worker.

namespace {
/// The session's worker: the child of the executor that is not among `others`.
pid_t newChild(pid_t executor, const std::set<pid_t> &others) {
  for (pid_t child : childrenOf(executor))
    if (!others.count(child))
      return child;
  return -1;
}
} // namespace

TEST_CASE("a call kernel shrinking its forged reply memfd does not kill the executor (SIGBUS)",
          "[hostile][memfd]") {
  Hostile f;
  for (int i = 0; i < 20 && f.client.healthy(); ++i)
    f.client.call(f.session, "courier_hostile_truncating_call", 64u << 20);
  REQUIRE(f.client.healthy());
  requirePlusOneWorks(f.client, f.bystander, f.bystanderCrashers);
}

TEST_CASE("a forged Done does not hand the kernel's real reply to the session's next request",
          "[hostile][channel]") {
  Hostile f;
  // A well-formed forged reply [42.0], then the kernel returns [7.0] through the worker.
  Outcome forged = outcomeOf(f.forge(f.session, 10, 0));
  INFO("forged: " << forged.describe());
  Outcome next = outcomeOf(
      f.client.launch(f.session, f.crashers, "_catalyst_pyface_plus_one", {f64s({1, 2})}, {1}));
  INFO("next: " << next.describe());
  if (next.status == 200) {
    REQUIRE(next.results.size() == 1);
    CHECK(doublesOf(next.results[0]) == std::vector<double>{2, 3});
  }
  // Whatever the next one got, the one after must be right again.
  requirePlusOneWorks(f.client, f.session, f.crashers);
}

TEST_CASE("a session running a launch longer than --idle-timeout is not expired mid-launch",
          "[hostile][idle]") {
  Hostile f({"--launch-timeout-ms", "10000", "--idle-timeout", "1"});
  Outcome napped = outcomeOf(
      f.client.launch(f.session, f.hostile, "_catalyst_pyface_nap", {i64Scalar(2500)}, {1}));
  INFO(napped.describe());
  CHECK(napped.status == 200);
}

TEST_CASE("a session worker killed from outside between requests costs no request",
          "[hostile][signals]") {
  Hostile f({"--launch-timeout-ms", "5000", "--warm-workers", "0"});
  pid_t pid = executorPid();
  // With no warm workers, a new session's worker is the one new child.
  std::set<pid_t> before;
  for (pid_t child : childrenOf(pid))
    before.insert(child);
  std::string session = f.client.openSession();
  std::string sha = f.client.ship(session, COURIER_KERNEL_CRASHERS);
  pid_t worker = newChild(pid, before);
  REQUIRE(worker > 0);
  ::kill(worker, SIGKILL);
  std::this_thread::sleep_for(200ms);
  Outcome next =
      outcomeOf(f.client.launch(session, sha, "_catalyst_pyface_plus_one", {f64s({1, 2})}, {1}));
  INFO("the launch after the idle worker was killed: " << next.describe());
  CHECK(next.status == 200);
}

TEST_CASE("a warm worker that died while idle is not handed to a new session",
          "[hostile][signals]") {
  Hostile f({"--launch-timeout-ms", "5000", "--warm-workers", "2"});
  pid_t pid = executorPid();
  std::this_thread::sleep_for(500ms);
  // Kill every child but the two sessions' workers (the warm ones: the newest).
  std::vector<pid_t> children = childrenOf(pid);
  std::sort(children.begin(), children.end());
  REQUIRE(children.size() >= 4);
  for (size_t i = children.size() - 2; i < children.size(); ++i)
    ::kill(children[i], SIGKILL);
  std::this_thread::sleep_for(200ms);
  std::string session = f.client.openSession();
  Outcome attached = outcomeOf(f.client.attach(session, f.crashers));
  INFO("attach on a session opened after its warm worker died: " << attached.describe());
  CHECK(attached.status == 200);
}

TEST_CASE("DELETE of a session whose launch is waiting for a worker ends that launch",
          "[hostile][races]") {
  Hostile f({"--launch-timeout-ms", "4000", "--warm-workers", "0"});
  Client other(f.executor);
  // The DELETE lands at different points of the launch; somewhere in the ~50 ms the launch
  // waits for a fresh worker (none are warm), the close used to find no worker to end.
  for (int delayMs : {0, 10, 20, 30, 40, 50, 60, 80}) {
    std::string session = f.client.openSession();
    std::string sha = f.client.ship(session, COURIER_KERNEL_CRASHERS);
    // A crash first, so the next launch has to start a worker.
    outcomeOf(f.client.launch(session, sha, "_catalyst_pyface_null_load", {}, {}));
    Outcome spun;
    std::thread launching([&] {
      spun = outcomeOf(f.client.launch(session, sha, "_catalyst_pyface_loop_forever", {}, {}));
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
    auto closedAt = Clock::now();
    CHECK(outcomeOf(other.close(session)).status == 204);
    launching.join();
    auto after = Clock::now() - closedAt;
    INFO("DELETE " << delayMs << " ms after the launch: " << spun.describe() << ", answered "
                   << std::chrono::duration_cast<std::chrono::milliseconds>(after).count()
                   << " ms after the DELETE");
    CHECK(after < 1500ms);
    CHECK(spun.code == "unknown_session");
  }
}

TEST_CASE("launch_async on a session busy with a launch replies 202 at once", "[hostile][async]") {
  Hostile f({"--launch-timeout-ms", "10000"});
  Client other(f.executor);
  std::thread napping([&] {
    f.client.launch(f.session, f.hostile, "_catalyst_pyface_nap", {i64Scalar(1500)}, {1});
  });
  std::this_thread::sleep_for(200ms);
  auto start = Clock::now();
  Outcome started =
      outcomeOf(other.launchAsync(f.session, f.hostile, "_catalyst_pyface_nap_second"));
  auto took = Clock::now() - start;
  napping.join();
  INFO(started.describe() << " after "
                          << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                          << " ms");
  CHECK(started.status == 202);
  CHECK(took < 500ms);
}

TEST_CASE("what a kernel prints reaches a JSON log as lines of it, one event a line",
          "[hostile][log]") {
  Hostile f({"--launch-timeout-ms", "5000", "--log-format", "json"});
  Outcome shouted =
      outcomeOf(f.client.launch(f.session, f.hostile, "_catalyst_pyface_shout", {}, {1}));
  INFO(shouted.describe());
  REQUIRE(shouted.status == 200);
  // The unterminated last line is the worker's last words: it arrives when the worker ends,
  // as its session closes.
  REQUIRE(f.client.close(f.session)->status == 204);

  std::vector<std::string> said;
  std::set<int64_t> workers;
  auto deadline = Clock::now() + 10s;
  while (true) {
    said.clear();
    workers.clear();
    // Whole lines only: the last may still be being written.
    std::string log = f.executor.log();
    std::istringstream whole(log.substr(0, log.rfind('\n') + 1));
    for (std::string line; std::getline(whole, line);) {
      INFO("log line: " << line);
      json event = json::parse(line, nullptr, /*allow_exceptions=*/false);
      REQUIRE(event.is_object());
      CHECK(event.contains("time"));
      CHECK(event.contains("level"));
      if (event.contains("worker")) {
        said.push_back(event["msg"].get<std::string>());
        workers.insert(event["worker"].get<int64_t>());
      }
    }
    if (llvm::is_contained(said, "no newline at the end") || Clock::now() > deadline)
      break;
    std::this_thread::sleep_for(20ms);
  }
  // One worker said it all, in order; the long line came in pieces of the relay's line size.
  CHECK(workers.size() == 1);
  std::vector<std::string> expected = {"kernel says hello",
                                       "he said \"hi\" \\ and\tleft",
                                       "not utf-8: \xEF\xBF\xBD\xEF\xBF\xBD end",
                                       std::string(4096, 'x'),
                                       std::string(4096, 'x'),
                                       std::string(10000 - 2 * 4096, 'x'),
                                       "no newline at the end"};
  CHECK(said == expected);
  requirePlusOneWorks(f.client, f.bystander, f.bystanderCrashers);
}

/// True when `log` holds a control character other than the newlines ending its lines: C0,
/// DEL, or C1 as UTF-8.
bool holdsRawControl(const std::string &log) {
  return log.find("\xc2\x9b") != std::string::npos || llvm::any_of(log, [](char c) {
           auto byte = static_cast<unsigned char>(c);
           return (byte < 0x20 && byte != '\n') || byte == 0x7f;
         });
}

constexpr const char *kForgedRequestLine =
    "2026-12-01T07:10:03.123Z info GET /v1/health 200 in=0 out=0 0.100ms request=forged";

TEST_CASE("a kernel's stderr reaches a text log quoted, as lines of its worker: it forges no "
          "line of the executor's and passes no control character",
          "[hostile][log]") {
  Hostile f;
  Outcome forged =
      outcomeOf(f.client.launch(f.session, f.hostile, "_catalyst_pyface_forge_log_line", {}, {1}));
  INFO(forged.describe());
  REQUIRE(forged.status == 200);
  std::string last = f.executor.awaitLogLine(
      [](const std::string &line) { return line.find("end of forgery") != std::string::npos; });
  REQUIRE(last != "");

  std::string log = f.executor.log();
  INFO("log:\n" << log);
  CHECK_FALSE(holdsRawControl(log));
  // The forged request line is in the log once: as what a worker said, quoted whole.
  std::vector<std::string> mentions;
  for (const std::string &line : f.executor.logLines())
    if (line.find("request=forged") != std::string::npos)
      mentions.push_back(line);
  REQUIRE(mentions.size() == 1);
  std::regex workerLine(R"re(\S+ info "(.*)" worker=\d+)re");
  std::smatch said;
  REQUIRE(std::regex_match(mentions[0], said, workerLine));
  CHECK(said[1] == kForgedRequestLine);
  REQUIRE(std::regex_match(last, said, workerLine));
  CHECK(said[1] == R"(\u001b[2J\rcleared \u001b]0;title\u0007 \u007f \u009b2J end of forgery)");
  requirePlusOneWorks(f.client, f.bystander, f.bystanderCrashers);
}

TEST_CASE("a kernel's stderr reaches a JSON log as strings: every line is one object, with no "
          "control character outside JSON's escapes",
          "[hostile][log]") {
  Hostile f({"--launch-timeout-ms", "5000", "--log-format", "json"});
  Outcome forged =
      outcomeOf(f.client.launch(f.session, f.hostile, "_catalyst_pyface_forge_log_line", {}, {1}));
  INFO(forged.describe());
  REQUIRE(forged.status == 200);
  REQUIRE(f.executor.awaitLogLine([](const std::string &line) {
    return line.find("end of forgery") != std::string::npos;
  }) != "");

  std::string log = f.executor.log();
  INFO("log:\n" << log);
  CHECK_FALSE(holdsRawControl(log));
  std::vector<std::string> said;
  // Whole lines only: a request's line may still be being written.
  std::istringstream whole(log.substr(0, log.rfind('\n') + 1));
  for (std::string line; std::getline(whole, line);) {
    INFO("log line: " << line);
    json event = json::parse(line, nullptr, /*allow_exceptions=*/false);
    REQUIRE(event.is_object());
    if (event.contains("worker"))
      said.push_back(event["msg"].get<std::string>());
    else
      CHECK(event.dump().find("forged") == std::string::npos);
  }
  CHECK(llvm::is_contained(said, kForgedRequestLine));
  CHECK(llvm::is_contained(said, "\x1b[2J\rcleared \x1b]0;title\x07 \x7f \xc2\x9b"
                                 "2J end of forgery"));
}

TEST_CASE("with every request thread held by launches waiting on one busy session, a health "
          "check and another session's launch are still answered within a second",
          "[hostile][clients]") {
  Hostile f({"--launch-timeout-ms", "20000"});
  // More launches than the executor keeps request threads (8 here), each napping 250 ms on one
  // session: one naps, the others wait for the session's worker, each holding a thread.
  constexpr int kHeld = 24;
  std::vector<Outcome> held(kHeld);
  std::vector<std::thread> holders;
  for (int i = 0; i < kHeld; ++i)
    holders.emplace_back([&, i] {
      Client own(f.executor);
      held[i] = outcomeOf(
          own.launch(f.session, f.hostile, "_catalyst_pyface_nap", {i64Scalar(250)}, {1}));
    });
  std::this_thread::sleep_for(500ms);
  Client fresh(f.executor);
  auto start = Clock::now();
  bool healthy = fresh.healthy();
  auto healthTook = Clock::now() - start;
  start = Clock::now();
  Outcome other = outcomeOf(fresh.launch(f.bystander, f.bystanderCrashers,
                                         "_catalyst_pyface_plus_one", {f64s({1, 2})}, {1}));
  auto otherTook = Clock::now() - start;
  for (std::thread &holder : holders)
    holder.join();
  INFO(other.describe());
  CHECK(healthy);
  CHECK(other.status == 200);
  CHECK(healthTook < 1s);
  CHECK(otherTook < 1s);
  for (const Outcome &launch : held) {
    INFO(launch.describe());
    CHECK(launch.status == 200);
  }
}
