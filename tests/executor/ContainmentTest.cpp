// Sandboxed worker processes (issue 8) against real courier-executor processes: every kernel
// of tests/kernels/crashers.c costs only its own launch, with the error that names what
// happened; the executor keeps serving, the session's next launch works without re-shipping,
// other sessions never notice, deadlines end spinning kernels, and health and metrics say
// what happened.
#include "executor/WorkerCgroup.h"
#include "tests/executor/Replies.h"
#include "tests/kernels/KernelPaths.h"
#include "tests/support/Sanitized.h"
#include "tests/transport/ExecutorProcess.h"
#include "transport/Backend.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <regex>
#include <sstream>
#include <sys/wait.h>
#include <thread>

using namespace std::chrono_literals;
using namespace courier::testing; // Replies.h: tensors, outcomes, file reading
using namespace courier::testing;
using courier::transport::Backend;
using courier::transport::BackendOptions;
using courier::transport::ObjectBlob;
using courier::transport::OwnedTensor;
using courier::transport::TensorView;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

const char *const kDeadlineHeader = "X-Courier-Deadline-Ms";
/// Bounds every launch of a test that is not about the server's default deadline, so a
/// kernel that is neither contained nor ended fails its test instead of stalling it.
const char *const kTestLaunchTimeoutMs = "20000";

const char *const kPlusOne = "_catalyst_pyface_plus_one";
const char *const kNullLoad = "_catalyst_pyface_null_load";
const char *const kLoopForever = "_catalyst_pyface_loop_forever";

/// The /v1 protocol spoken directly on loopback, every request bounded by timeouts.
class Client {
public:
  explicit Client(const courier::testing::ServerProcess &executor)
      : http("127.0.0.1", executor.port()) {
    http.set_keep_alive(true);
    http.set_connection_timeout(2s);
    http.set_read_timeout(30s);
    http.set_write_timeout(30s);
  }

  void setReadTimeout(std::chrono::milliseconds timeout) { http.set_read_timeout(timeout); }

  std::string openSession() {
    Outcome opened = outcomeOf(http.Post("/v1/sessions", "", kJsonType));
    INFO("opening a session: " << opened.describe());
    REQUIRE(opened.status == 201);
    return json::parse(opened.body)["session"];
  }

  /// Uploads `bytes` and returns their content address.
  std::string upload(const std::string &bytes) {
    std::string sha = ObjectBlob::fromBytes(bytes).sha256;
    Outcome stored = outcomeOf(put(sha, bytes));
    INFO("uploading an object: " << stored.describe());
    REQUIRE((stored.status == 201 || stored.status == 200));
    return sha;
  }

  httplib::Result put(const std::string &sha, const std::string &bytes) {
    return http.Put(("/v1/objects/" + sha).c_str(), bytes, "application/octet-stream");
  }

  httplib::Result attach(const std::string &session, const std::string &sha) {
    return http.Post((sessionPath(session) + "/objects/" + sha).c_str(), sessionHeader(session), "",
                     kJsonType);
  }

  /// Uploads the object at `path` and attaches it to `session`; returns its address.
  std::string ship(const std::string &session, const char *path) {
    std::string sha = upload(readFile(path));
    Outcome attached = outcomeOf(attach(session, sha));
    INFO("attaching " << path << ": " << attached.describe());
    REQUIRE(attached.status == 200);
    return sha;
  }

  httplib::Result launch(const std::string &session, const std::string &sha,
                         const std::string &entry, const std::vector<Tensor> &inputs,
                         const std::vector<ResultShape> &results, httplib::Headers extra = {}) {
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
    for (const ResultShape &result : results)
      header["results"].push_back({{"rank", result.rank}, {"elemSize", result.elemSize}});
    return http.Post((sessionPath(session) + "/launch").c_str(), withSession(session, extra),
                     header.dump() + "\n" + payload, kFrameType);
  }

  httplib::Result launchAsync(const std::string &session, const std::string &sha,
                              const std::string &entry) {
    return http.Post((sessionPath(session) + "/launch_async").c_str(), sessionHeader(session),
                     json({{"object", sha}, {"entry", entry}}).dump(), kJsonType);
  }

  httplib::Result await(const std::string &session, uint64_t launch, httplib::Headers extra = {}) {
    return http.Post(
        (sessionPath(session) + "/launches/" + std::to_string(launch) + "/await").c_str(),
        withSession(session, extra), "", kJsonType);
  }

  httplib::Result call(const std::string &session, const std::string &symbol,
                       const std::string &input, uint64_t outputSize, httplib::Headers extra = {}) {
    extra.emplace("X-Courier-Output-Size", std::to_string(outputSize));
    return http.Post((sessionPath(session) + "/call/" + symbol).c_str(),
                     withSession(session, extra), input, "application/octet-stream");
  }

  /// /v1/health as JSON, or null when it does not answer 200.
  json health() {
    httplib::Result res = http.Get("/v1/health");
    if (!res || res->status != 200)
      return nullptr;
    return json::parse(res->body, nullptr, false);
  }

  bool healthy() { return !health().is_null(); }

private:
  static std::string sessionPath(const std::string &session) { return "/v1/sessions/" + session; }
  static httplib::Headers sessionHeader(const std::string &session) {
    return {{"X-Courier-Session", session}};
  }
  static httplib::Headers withSession(const std::string &session, httplib::Headers extra) {
    extra.emplace("X-Courier-Session", session);
    return extra;
  }

  httplib::Client http;
};

/// An executor with crashers.o shipped to one session.
struct Contained {
  explicit Contained(std::vector<std::string> extraArgs = {})
      : executor(ExecutorConfig{0, "", withTestTimeout(std::move(extraArgs))}), client(executor),
        session(client.openSession()), crashers(client.ship(session, COURIER_KERNEL_CRASHERS)) {}

  static std::vector<std::string> withTestTimeout(std::vector<std::string> args) {
    if (std::find(args.begin(), args.end(), "--launch-timeout-ms") == args.end())
      args.insert(args.begin(), {"--launch-timeout-ms", kTestLaunchTimeoutMs});
    return args;
  }

  httplib::Result launch(const std::string &entry, const std::vector<Tensor> &inputs = {},
                         const std::vector<ResultShape> &results = {},
                         httplib::Headers extra = {}) {
    return client.launch(session, crashers, entry, inputs, results, std::move(extra));
  }

  ExecutorProcess executor;
  Client client;
  std::string session;
  std::string crashers; ///< crashers.o's content address.
};

/// `x + 1` on `session` works: its worker is (again) there, with crashers.o linked.
void requirePlusOneWorks(Client &client, const std::string &session, const std::string &sha,
                         double seed = 1.5) {
  std::vector<double> input = {seed, -seed, 1e6 * seed};
  Outcome launched = outcomeOf(client.launch(session, sha, kPlusOne, {f64s(input)}, {{1, 8}}));
  INFO("the next launch of plus_one on the same session: " << launched.describe());
  REQUIRE(launched.status == 200);
  REQUIRE(launched.results.size() == 1);
  CHECK(doublesOf(launched.results[0]) == std::vector<double>{seed + 1, -seed + 1, 1e6 * seed + 1});
}

void requirePlusOneWorks(Contained &f) { requirePlusOneWorks(f.client, f.session, f.crashers); }

bool containsWord(const std::string &text, const std::string &word) {
  return std::regex_search(text, std::regex("\\b" + word + "\\b"));
}

/// The launch failed with 500 kernel_crashed, its message naming `cause` (a signal, or "exited
/// with status N"; empty: any) and the entry or call symbol in quotes.
void requireCrashed(const Outcome &outcome, const std::string &cause, const std::string &symbol) {
  INFO(outcome.describe());
  REQUIRE(outcome.status == 500);
  CHECK(outcome.code == "kernel_crashed");
  if (!cause.empty())
    CHECK_THAT(outcome.message, Catch::Contains(cause));
  CHECK_THAT(outcome.message, Catch::Contains("'" + symbol + "'"));
}

/// The executor answers health, and the crashing session's next launch works.
void requireSessionGoesOn(Contained &f) {
  CHECK(f.client.healthy());
  requirePlusOneWorks(f);
}

/// Polls `read` until `done` holds of its value or 10 s pass; returns the last value.
template <typename T>
T poll(const std::function<T()> &read, const std::function<bool(const T &)> &done) {
  auto deadline = Clock::now() + 10s;
  T value = read();
  while (!done(value) && Clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
    value = read();
  }
  return value;
}

/// health's workers.<field>, or -1 when health does not answer or lacks it.
int64_t workersField(Client &client, const std::string &field) {
  json health = client.health();
  if (!health.is_object() || !health.contains("workers") || !health["workers"].is_object() ||
      !health["workers"].contains(field) || !health["workers"][field].is_number_integer())
    return -1;
  return health["workers"][field].get<int64_t>();
}

int64_t awaitWorkersField(Client &client, const std::string &field, int64_t atLeast) {
  return poll<int64_t>([&] { return workersField(client, field); },
                       [&](const int64_t &v) { return v >= atLeast; });
}

/// The sum of every sample of metric family `name` whatever its labels, or -1 if it has none.
double metricSum(const ExecutorProcess &executor, const std::string &name) {
  std::istringstream lines(executor.metrics());
  std::string line;
  double sum = -1;
  while (std::getline(lines, line))
    if (line.compare(0, name.size() + 1, name + "{") == 0 ||
        line.compare(0, name.size() + 1, name + " ") == 0)
      sum = (sum < 0 ? 0 : sum) + std::stod(line.substr(line.rfind(' ') + 1));
  return sum;
}

/// Polls the executor's log until it holds a line containing every one of `pieces`.
std::string awaitLogLine(const ExecutorProcess &executor, const std::vector<std::string> &pieces) {
  auto matching = [&](const std::string &log) {
    std::istringstream lines(log);
    std::string line;
    while (std::getline(lines, line))
      if (std::all_of(pieces.begin(), pieces.end(),
                      [&](const std::string &piece) { return line.find(piece) != line.npos; }))
        return line;
    return std::string();
  };
  return poll<std::string>([&] { return matching(executor.log()); },
                           [](const std::string &line) { return !line.empty(); });
}

/// A kernel making system call `name` directly gets its worker killed: kernel_crashed naming
/// SIGSYS and the call; whatever it would have created does not exist; the session goes on.
void requireSystemCallBlocked(const std::string &entry, const std::string &name, bool takesPath,
                              std::vector<std::string> executorArgs = {}) {
  Contained f(std::move(executorArgs));
  std::string path = f.executor.directory() + "/created-by-" + name;
  std::vector<Tensor> inputs;
  if (takesPath)
    inputs.push_back(chars(path, /*terminate=*/true));
  Outcome launched = outcomeOf(f.launch(entry, inputs, {{0, 8}}));
  if (launched.status == 200 && launched.results.size() == 1)
    FAIL("the raw " << name << " ran and returned " << i64Of(launched.results[0]));
  requireCrashed(launched, "SIGSYS", entry);
  CHECK(containsWord(launched.message, name));
  if (takesPath)
    CHECK_FALSE(std::filesystem::exists(path));
  requireSessionGoesOn(f);
  if (takesPath)
    CHECK_FALSE(std::filesystem::exists(path));
}

} // namespace

TEST_CASE("a kernel that loads from address 0 gets kernel_crashed naming SIGSEGV, the address "
          "and the entry, and the session's next launch works without re-shipping",
          "[containment][crash]") {
  Contained f;
  requireCrashed(outcomeOf(f.launch(kNullLoad)), "SIGSEGV (address 0x0)", kNullLoad);
  requireSessionGoesOn(f);
  CHECK(f.executor.metric("courier_object_uploads_total") == 1);
}

TEST_CASE("a kernel that calls abort() gets kernel_crashed naming SIGABRT and the entry",
          "[containment][crash]") {
  Contained f;
  requireCrashed(outcomeOf(f.launch("_catalyst_pyface_call_abort")), "SIGABRT",
                 "_catalyst_pyface_call_abort");
  requireSessionGoesOn(f);
}

TEST_CASE("a kernel calling exit_group(3) gets kernel_crashed saying it exited with status 3",
          "[containment][crash]") {
  Contained f;
  requireCrashed(outcomeOf(f.launch("_catalyst_pyface_exit_group")), "exited with status 3",
                 "_catalyst_pyface_exit_group");
  requireSessionGoesOn(f);
}

TEST_CASE("unbounded recursion overflows only its worker's stack: kernel_crashed naming SIGSEGV",
          "[containment][crash]") {
  Contained f;
  requireCrashed(outcomeOf(f.launch("_catalyst_pyface_recurse_forever", {}, {{0, 8}})), "SIGSEGV",
                 "_catalyst_pyface_recurse_forever");
  requireSessionGoesOn(f);
}

TEST_CASE("a malloc bomb past --worker-memory-mib 256 gets kernel_crashed and the session goes on",
          "[containment][crash][memory]") {
  Contained f({"--worker-memory-mib", "256"});
  // The bomb stops by itself at 2 GiB, so a missing limit fails this test, not the machine.
  Outcome launched =
      outcomeOf(f.launch("_catalyst_pyface_malloc_bomb", {i64Scalar(2048)}, {{0, 8}}));
  if (launched.status == 200 && launched.results.size() == 1)
    FAIL("the kernel held " << i64Of(launched.results[0]) << " MiB under a 256 MiB limit");
  requireCrashed(launched, "", "_catalyst_pyface_malloc_bomb");
  requireSessionGoesOn(f);
}

TEST_CASE("a raw openat creating a file is killed with SIGSYS naming openat, and no file appears",
          "[containment][sandbox]") {
  requireSystemCallBlocked("_catalyst_pyface_openat_path", "openat", true);
}

TEST_CASE("a raw open creating a file is killed with SIGSYS naming open, and no file appears",
          "[containment][sandbox]") {
  requireSystemCallBlocked("_catalyst_pyface_open_path", "open", true);
}

TEST_CASE("a raw creat is killed with SIGSYS naming creat, and no file appears",
          "[containment][sandbox]") {
  requireSystemCallBlocked("_catalyst_pyface_creat_path", "creat", true);
}

TEST_CASE("a raw socket call is killed with SIGSYS naming socket", "[containment][sandbox]") {
  requireSystemCallBlocked("_catalyst_pyface_open_socket", "socket", false);
}

TEST_CASE("a raw execve is killed with SIGSYS naming execve", "[containment][sandbox]") {
  requireSystemCallBlocked("_catalyst_pyface_exec_missing", "execve", false);
}

TEST_CASE("a raw fork is killed with SIGSYS naming fork", "[containment][sandbox]") {
  requireSystemCallBlocked("_catalyst_pyface_fork_child", "fork", false);
}

TEST_CASE("a raw clone of a process is killed with SIGSYS naming clone, the kernel-thread team "
          "started",
          "[containment][sandbox][threads]") {
  // The default team is the CPUs the executor may run on; two makes sure there is one.
  requireSystemCallBlocked("_catalyst_pyface_clone_child", "clone", false,
                           {"--kernel-threads", "2"});
}

TEST_CASE("a raw fork is killed with SIGSYS naming fork with a kernel-thread team of two",
          "[containment][sandbox][threads]") {
  requireSystemCallBlocked("_catalyst_pyface_fork_child", "fork", false, {"--kernel-threads", "2"});
}

TEST_CASE("a raw kill is killed with SIGSYS naming kill", "[containment][sandbox]") {
  requireSystemCallBlocked("_catalyst_pyface_kill_probe", "kill", false);
}

TEST_CASE("with --no-sandbox the same raw openat creates its file: the filter is what stops it",
          "[containment][sandbox]") {
  Contained f({"--no-sandbox"});
  std::string path = f.executor.directory() + "/created-without-sandbox";
  Outcome launched =
      outcomeOf(f.launch("_catalyst_pyface_openat_path", {chars(path, true)}, {{0, 8}}));
  INFO(launched.describe());
  REQUIRE(launched.status == 200);
  REQUIRE(launched.results.size() == 1);
  CHECK(i64Of(launched.results[0]) >= 0);
  CHECK(std::filesystem::exists(path));
  requireSessionGoesOn(f);
}

TEST_CASE("a kernel writing a line to stdout with the raw write call succeeds, and the line "
          "reaches the executor's log",
          "[containment][sandbox]") {
  Contained f;
  // The session id makes the line this test's own.
  std::string text = "printed by a kernel of session " + f.session;
  Outcome launched =
      outcomeOf(f.launch("_catalyst_pyface_print_line", {chars(text + "\n", false)}, {{0, 8}}));
  INFO(launched.describe());
  REQUIRE(launched.status == 200);
  REQUIRE(launched.results.size() == 1);
  CHECK(i64Of(launched.results[0]) == static_cast<int64_t>(text.size() + 1));
  CHECK(awaitLogLine(f.executor, {text}) != "");
  requireSessionGoesOn(f);
}

TEST_CASE("a call whose callee loads from address 0 gets kernel_crashed naming SIGSEGV and the "
          "symbol",
          "[containment][crash][call]") {
  Contained f;
  requireCrashed(outcomeOf(f.client.call(f.session, "courier_crashers_null_call", "", 8)),
                 "SIGSEGV (address 0x0)", "courier_crashers_null_call");
  requireSessionGoesOn(f);
}

TEST_CASE("a kernel that loads from address 0 on a kernel thread gets kernel_crashed naming the "
          "thread, and the session goes on",
          "[containment][crash][threads]") {
  Contained f({"--kernel-threads", "2"});
  requireCrashed(outcomeOf(f.launch("_catalyst_pyface_null_load_on_thread", {}, {})),
                 "SIGSEGV (address 0x0) on kernel thread 1",
                 "_catalyst_pyface_null_load_on_thread");
  requireSessionGoesOn(f);
}

TEST_CASE("a kernel spinning on every kernel thread is ended at its deadline, threads and all",
          "[containment][deadline][threads]") {
  Contained f({"--kernel-threads", "2"});
  Outcome launched =
      outcomeOf(f.launch("_catalyst_pyface_spin_on_threads", {}, {}, {{kDeadlineHeader, "300"}}));
  INFO(launched.describe());
  CHECK(launched.status == 504);
  CHECK(launched.code == "deadline_exceeded");
  requireSessionGoesOn(f);
}

TEST_CASE("a kernel spinning on every kernel thread shows them busy in the metrics until its "
          "deadline ends its worker, every thread with it",
          "[containment][deadline][threads][metrics]") {
  Contained f({"--kernel-threads", "2"});
  std::vector<pid_t> before = childrenOf(f.executor.processId());
  Outcome started =
      outcomeOf(f.client.launchAsync(f.session, f.crashers, "_catalyst_pyface_spin_on_threads"));
  INFO(started.describe());
  REQUIRE(started.status == 202);
  // Both threads of the team spin: the gauge reaches 2 (polled for at most 10 s).
  double busy = 0;
  for (auto until = Clock::now() + 10s; Clock::now() < until && busy < 2;
       std::this_thread::sleep_for(10ms))
    busy = f.executor.metric("courier_kernel_threads_busy");
  CHECK(busy == 2);
  uint64_t id = json::parse(started.body)["launch"];
  Outcome awaited = outcomeOf(f.client.await(f.session, id, {{kDeadlineHeader, "300"}}));
  INFO(awaited.describe());
  CHECK(awaited.status == 504);
  CHECK(f.executor.awaitMetricAtMost("courier_kernel_threads_busy", 0) == 0);
  // The worker that spun is gone, reaped, and every thread of its team with it.
  bool oneGone = false;
  for (auto until = Clock::now() + 10s; Clock::now() < until && !oneGone;
       std::this_thread::sleep_for(10ms))
    for (pid_t worker : before)
      oneGone = oneGone || !std::filesystem::exists("/proc/" + std::to_string(worker));
  CHECK(oneGone);
  requireSessionGoesOn(f);
}

TEST_CASE("a call that never returns gets 504 deadline_exceeded under its deadline header",
          "[containment][deadline][call]") {
  Contained f;
  Outcome called = outcomeOf(
      f.client.call(f.session, "courier_crashers_spin_call", "", 8, {{kDeadlineHeader, "200"}}));
  INFO(called.describe());
  CHECK(called.status == 504);
  CHECK(called.code == "deadline_exceeded");
  requireSessionGoesOn(f);
}

TEST_CASE("an async launch that crashes its worker reports kernel_crashed to its await",
          "[containment][crash][async]") {
  Contained f;
  Outcome started = outcomeOf(f.client.launchAsync(f.session, f.crashers, kNullLoad));
  INFO(started.describe());
  REQUIRE(started.status == 202);
  uint64_t id = json::parse(started.body)["launch"];
  requireCrashed(outcomeOf(f.client.await(f.session, id)), "SIGSEGV", kNullLoad);
  requireSessionGoesOn(f);
}

TEST_CASE("an await's deadline ends the spinning async launch it waits for with 504",
          "[containment][deadline][async]") {
  Contained f;
  Outcome started = outcomeOf(f.client.launchAsync(f.session, f.crashers, kLoopForever));
  INFO(started.describe());
  REQUIRE(started.status == 202);
  uint64_t id = json::parse(started.body)["launch"];
  Outcome awaited = outcomeOf(f.client.await(f.session, id, {{kDeadlineHeader, "200"}}));
  INFO(awaited.describe());
  CHECK(awaited.status == 504);
  CHECK(awaited.code == "deadline_exceeded");
  requireSessionGoesOn(f);
}

TEST_CASE("launch_async of an entry that takes arguments fails, and the session goes on",
          "[containment][async]") {
  bool withTable = GENERATE(true, false);
  // Without a table, only the executor's own knowledge of the entry stands between the
  // launch and a kernel reading arguments that are not there.
  INFO((withTable ? "with a signature table saying so"
                  : "without a signature table, under --allow-unsigned-objects"));
  auto f = withTable
               ? std::make_unique<Contained>()
               : std::make_unique<Contained>(std::vector<std::string>{"--allow-unsigned-objects"});
  std::string sha =
      withTable ? f->crashers : f->client.ship(f->session, COURIER_KERNEL_CRASHERS_UNSIGNED);
  const char *entry = "_catalyst_pyface_first_element";
  Outcome started = outcomeOf(f->client.launchAsync(f->session, sha, entry));
  INFO("launch_async: " << started.describe());
  if (started.status == 202) {
    // Refusing it at once is better, but an error from its await contains it too.
    Outcome awaited =
        outcomeOf(f->client.await(f->session, json::parse(started.body)["launch"].get<uint64_t>()));
    INFO("await: " << awaited.describe());
    CHECK(awaited.status >= 400);
    CHECK(awaited.code != "");
  } else {
    CHECK(started.status >= 400);
    CHECK(started.status < 500);
    CHECK(started.code != "");
  }
  requireSessionGoesOn(*f);
}

TEST_CASE("a crash in one session leaves another session's worker and launches alone",
          "[containment][crash]") {
  Contained f;
  std::string other = f.client.openSession();
  std::string sha = f.client.ship(other, COURIER_KERNEL_CRASHERS);
  requirePlusOneWorks(f.client, other, sha, 2.5);
  requireCrashed(outcomeOf(f.launch(kNullLoad)), "SIGSEGV", kNullLoad);
  requirePlusOneWorks(f.client, other, sha, 3.5);
  CHECK(awaitWorkersField(f.client, "restarted", 1) == 1);
  requirePlusOneWorks(f);
}

TEST_CASE("8 sessions x 1000 launches (200 sanitized) with every result checked see zero failed "
          "calls while another session crashes its worker 50 times",
          "[containment][concurrency]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--launch-timeout-ms", kTestLaunchTimeoutMs}});
  ObjectBlob crashers = ObjectBlob::fromBytes(readFile(COURIER_KERNEL_CRASHERS));
  BackendOptions options;
  options.requestTimeout = 30s;
  constexpr int kSessions = 8, kLaunches = soakRounds(1000), kCrashes = 50;
  // A guard against a hang, not a performance bound.
  const Clock::time_point giveUp = Clock::now() + 300s;

  // The 8 pace themselves by the crashes so that their launches span all 50 of them: launch i
  // waits for crash i * 50 / 1000. The crasher never waits for them.
  std::mutex mutex;
  std::condition_variable crashed;
  int crashes = 0;
  bool crasherDone = false;
  std::vector<std::string> failures;
  auto fail = [&](std::string what) {
    std::lock_guard<std::mutex> lock(mutex);
    failures.push_back(std::move(what));
  };
  std::vector<int> succeeded(kSessions, 0);

  auto connect = [&]() -> std::unique_ptr<Backend> {
    auto backend = courier::transport::createBackend(executor.address(), options);
    if (!backend) {
      fail("connecting: " + llvm::toString(backend.takeError()));
      return nullptr;
    }
    return std::move(*backend);
  };
  auto openAndShip = [&](Backend &backend) -> std::string {
    auto session = backend.openSession();
    if (!session) {
      fail("opening a session: " + llvm::toString(session.takeError()));
      return "";
    }
    if (llvm::Error error = backend.shipObject(*session, crashers)) {
      fail("shipping crashers.o: " + llvm::toString(std::move(error)));
      return "";
    }
    return *session;
  };
  // One launch of plus_one on [i, t, -i / 2]; "" when its result is right.
  auto plusOne = [&](Backend &backend, const std::string &session, int t, int i) -> std::string {
    std::vector<double> input = {double(i), double(t), -0.5 * i};
    auto results = backend.launch(session, crashers, kPlusOne,
                                  {TensorView{input.data(), 8, {3}, {1}}}, {{1, 8}});
    if (!results)
      return llvm::toString(results.takeError());
    if (results->size() != 1 || (*results)[0].sizes != std::vector<int64_t>{3})
      return "a result of the wrong shape";
    const double *out = static_cast<const double *>((*results)[0].data);
    for (int k = 0; k < 3; ++k)
      if (out[k] != input[k] + 1)
        return "element " + std::to_string(k) + " is " + std::to_string(out[k]);
    return "";
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < kSessions; ++t)
    threads.emplace_back([&, t] {
      std::unique_ptr<Backend> backend = connect();
      std::string session = backend ? openAndShip(*backend) : "";
      if (session.empty())
        return;
      int failed = 0;
      for (int i = 0; i < kLaunches && failed < 5; ++i) {
        {
          std::unique_lock<std::mutex> lock(mutex);
          while (!crasherDone && crashes < i * kCrashes / kLaunches && Clock::now() < giveUp)
            crashed.wait_for(lock, 1s);
        }
        if (Clock::now() > giveUp) {
          fail("session " + std::to_string(t) + " ran out of time at launch " + std::to_string(i));
          return;
        }
        std::string error = plusOne(*backend, session, t, i);
        if (error.empty()) {
          ++succeeded[t];
        } else {
          ++failed;
          fail("session " + std::to_string(t) + ", launch " + std::to_string(i) + ": " + error);
        }
      }
    });

  int reportedCrashes = 0;
  std::vector<std::string> crasherProblems;
  std::string crasherNextLaunch = "not run";
  {
    std::unique_ptr<Backend> backend = connect();
    std::string session = backend ? openAndShip(*backend) : "";
    for (int k = 0; !session.empty() && k < kCrashes && Clock::now() < giveUp; ++k) {
      auto results = backend->launch(session, crashers, kNullLoad, {}, {});
      std::string error = results ? "" : llvm::toString(results.takeError());
      // The executor's message, whatever the client adds around it.
      if (error.find("SIGSEGV") != std::string::npos &&
          error.find(std::string("'") + kNullLoad + "'") != std::string::npos)
        ++reportedCrashes;
      else if (crasherProblems.size() < 5)
        crasherProblems.push_back("crash " + std::to_string(k) + ": " +
                                  (error.empty() ? "the launch succeeded" : error));
      std::lock_guard<std::mutex> lock(mutex);
      ++crashes;
      crashed.notify_all();
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      crasherDone = true;
      crashed.notify_all();
    }
    if (!session.empty())
      crasherNextLaunch = plusOne(*backend, session, -1, 7);
  }
  for (std::thread &thread : threads)
    thread.join();

  std::string firstFailures;
  for (size_t k = 0; k < failures.size() && k < 10; ++k)
    firstFailures += "\n  " + failures[k];
  INFO("failed calls on the 8 sessions: " << failures.size() << firstFailures);
  CHECK(failures.empty());
  CHECK(std::all_of(succeeded.begin(), succeeded.end(), [](int n) { return n == kLaunches; }));
  std::string problems;
  for (const std::string &problem : crasherProblems)
    problems += "\n  " + problem;
  INFO("crash launches not reported as SIGSEGV in null_load:" << problems);
  CHECK(reportedCrashes == kCrashes);
  INFO("the crashing session's next launch: " << crasherNextLaunch);
  CHECK(crasherNextLaunch.empty());
  CHECK(executor.metric("courier_kernel_crashes_total{signal=\"SIGSEGV\"}") == kCrashes);
}

TEST_CASE("a spinning kernel under a 200 ms deadline gets 504 within 1 s, health answers "
          "throughout, and the worker is replaced",
          "[containment][deadline]") {
  Contained f;
  auto start = Clock::now();
  std::atomic<bool> answered{false};
  Outcome launched;
  std::chrono::milliseconds elapsed{0};
  std::thread spinner([&] {
    Client client(f.executor);
    launched = outcomeOf(
        client.launch(f.session, f.crashers, kLoopForever, {}, {}, {{kDeadlineHeader, "200"}}));
    elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    answered = true;
  });
  Client watcher(f.executor);
  watcher.setReadTimeout(2s);
  int checks = 0, unanswered = 0;
  do {
    ++checks;
    if (!watcher.healthy())
      ++unanswered;
  } while (!answered);
  spinner.join();

  INFO(launched.describe() << " after " << elapsed.count() << " ms");
  CHECK(launched.status == 504);
  CHECK(launched.code == "deadline_exceeded");
  CHECK(elapsed >= 200ms);
  CHECK(elapsed < 1000ms);
  INFO(unanswered << " of " << checks << " health checks during the launch went unanswered");
  CHECK(unanswered == 0);
  requireSessionGoesOn(f);
  CHECK(awaitWorkersField(f.client, "restarted", 1) == 1);
  CHECK(f.executor.metric("courier_deadline_kills_total") == 1);
}

TEST_CASE("the server's --launch-timeout-ms ends a spinning launch whose deadline header asks "
          "for longer",
          "[containment][deadline]") {
  Contained f({"--launch-timeout-ms", "300"});
  Outcome asked = outcomeOf(f.launch(kLoopForever, {}, {}, {{kDeadlineHeader, "600000"}}));
  INFO("with a 600 s header: " << asked.describe());
  CHECK(asked.status == 504);
  CHECK(asked.code == "deadline_exceeded");
  Outcome unasked = outcomeOf(f.launch(kLoopForever));
  INFO("without a header: " << unasked.describe());
  CHECK(unasked.status == 504);
  CHECK(unasked.code == "deadline_exceeded");
  requireSessionGoesOn(f);
  CHECK(f.executor.metric("courier_deadline_kills_total") == 2);
}

TEST_CASE("SIGTERM with 4 spinning kernels stops the executor within 5 s",
          "[containment][deadline]") {
  // The default --launch-timeout-ms (60 s) is far beyond the 5 s.
  ExecutorProcess executor;
  Client client(executor);
  for (int k = 0; k < 4; ++k) {
    std::string session = client.openSession();
    std::string sha = client.ship(session, COURIER_KERNEL_CRASHERS);
    Outcome started = outcomeOf(client.launchAsync(session, sha, kLoopForever));
    INFO(started.describe());
    REQUIRE(started.status == 202);
  }
  REQUIRE(client.healthy());
  auto start = Clock::now();
  int status = executor.terminate(SIGTERM, std::chrono::seconds(5));
  auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  INFO("stopped after " << elapsed.count() << " ms with wait status " << status);
  // Still running after 5 s, terminate() SIGKILLs it: then it did not exit by itself.
  CHECK(WIFEXITED(status));
  CHECK(elapsed < 5000ms);
}

TEST_CASE("an executor started with --isolation=none still serves a normal launch",
          "[containment][isolation]") {
  Contained f({"--isolation=none"});
  requirePlusOneWorks(f);
  CHECK(f.client.healthy());
}

TEST_CASE("an object without signature tables is refused by default with unsigned_object",
          "[containment][strictness]") {
  ExecutorProcess executor;
  Client client(executor);
  std::string session = client.openSession();
  std::string bytes = readFile(COURIER_KERNEL_CRASHERS_UNSIGNED);
  std::string sha = ObjectBlob::fromBytes(bytes).sha256;
  // The refusal may come at upload, attach or launch; the first step that fails must say why,
  // and the launch must never run.
  Outcome uploaded = outcomeOf(client.put(sha, bytes));
  Outcome refused = uploaded;
  if (uploaded.status == 200 || uploaded.status == 201) {
    refused = outcomeOf(client.attach(session, sha));
    if (refused.status == 200)
      refused = outcomeOf(client.launch(session, sha, kPlusOne, {f64s({1, 2})}, {{1, 8}}));
  }
  INFO(refused.describe());
  CHECK(refused.code == "unsigned_object");
  CHECK(refused.status >= 400);
  CHECK(refused.status < 500);
  CHECK(client.healthy());
}

TEST_CASE("an object without signature tables runs with --allow-unsigned-objects",
          "[containment][strictness]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--allow-unsigned-objects"}});
  Client client(executor);
  std::string session = client.openSession();
  std::string sha = client.ship(session, COURIER_KERNEL_CRASHERS_UNSIGNED);
  requirePlusOneWorks(client, session, sha);
}

TEST_CASE("after crashes health counts the restarted workers, metrics count crashes by signal "
          "and restarts by cause, and each death is logged with session, entry and cause",
          "[containment][observability]") {
  Contained f;
  json before = f.client.health();
  INFO("health: " << before.dump());
  REQUIRE(before.contains("workers"));
  for (const char *field : {"live", "warm", "restarted"})
    CHECK(workersField(f.client, field) >= 0);
  CHECK(workersField(f.client, "restarted") == 0);

  requireCrashed(outcomeOf(f.launch(kNullLoad)), "SIGSEGV", kNullLoad);
  requirePlusOneWorks(f);
  CHECK(awaitWorkersField(f.client, "restarted", 1) == 1);
  CHECK(workersField(f.client, "live") >= 1);
  CHECK(f.executor.metric("courier_kernel_crashes_total{signal=\"SIGSEGV\"}") == 1);
  CHECK(metricSum(f.executor, "courier_worker_restarts_total") == 1);
  CHECK(awaitLogLine(f.executor, {f.session, kNullLoad, "SIGSEGV"}) != "");

  requireCrashed(outcomeOf(f.launch("_catalyst_pyface_call_abort")), "SIGABRT",
                 "_catalyst_pyface_call_abort");
  requirePlusOneWorks(f);
  CHECK(awaitWorkersField(f.client, "restarted", 2) == 2);
  CHECK(f.executor.metric("courier_kernel_crashes_total{signal=\"SIGABRT\"}") == 1);
  CHECK(f.executor.metric("courier_kernel_crashes_total{signal=\"SIGSEGV\"}") == 1);
  CHECK(metricSum(f.executor, "courier_worker_restarts_total") == 2);
  CHECK(f.executor.metric("courier_deadline_kills_total") == 0);
  CHECK(awaitLogLine(f.executor, {f.session, "_catalyst_pyface_call_abort", "SIGABRT"}) != "");
}

TEST_CASE("an executor started with --warm-workers 3 keeps three idle workers ready",
          "[containment][observability]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--warm-workers", "3"}});
  Client client(executor);
  CHECK(awaitWorkersField(client, "warm", 3) == 3);
  std::string session = client.openSession();
  std::string sha = client.ship(session, COURIER_KERNEL_CRASHERS);
  requirePlusOneWorks(client, session, sha);
  // The worker the session took is replaced in the background.
  CHECK(awaitWorkersField(client, "warm", 3) == 3);
}

TEST_CASE("the http client's request timeout ends its spinning kernel on the executor too",
          "[containment][deadline]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--launch-timeout-ms", kTestLaunchTimeoutMs}});
  ObjectBlob crashers = ObjectBlob::fromBytes(readFile(COURIER_KERNEL_CRASHERS));
  BackendOptions options;
  options.requestTimeout = 1500ms;
  auto backend = courier::transport::createBackend(executor.address(), options);
  REQUIRE(static_cast<bool>(backend));
  auto session = (*backend)->openSession();
  REQUIRE(static_cast<bool>(session));
  llvm::Error shipped = (*backend)->shipObject(*session, crashers);
  REQUIRE_FALSE(static_cast<bool>(shipped));

  auto spun = (*backend)->launch(*session, crashers, kLoopForever, {}, {});
  REQUIRE_FALSE(static_cast<bool>(spun));
  std::string message = llvm::toString(spun.takeError());
  INFO(message);
  // The executor answered (it ended the kernel) rather than the client giving up on it.
  CHECK_THAT(message, Catch::Contains("[deadline_exceeded]"));
  CHECK(executor.metric("courier_deadline_kills_total") == 1);

  std::vector<double> input = {1, 2, 3};
  auto next = (*backend)->launch(*session, crashers, kPlusOne,
                                 {TensorView{input.data(), 8, {3}, {1}}}, {{1, 8}});
  REQUIRE(static_cast<bool>(next));
  const double *out = static_cast<const double *>((*next)[0].data);
  CHECK(std::vector<double>(out, out + 3) == std::vector<double>{2, 3, 4});
}

TEST_CASE("where seccomp is unavailable the executor refuses to serve unless --no-sandbox",
          "[containment][sandbox]") {
  auto [status, log] =
      courier::testing::runServerToExit(COURIER_WITHOUT_SECCOMP_PATH, {"--listen", "127.0.0.1:0"});
  INFO(log);
  CHECK(status != 0);
  CHECK_THAT(log, Catch::Contains("cannot enter the sandbox"));
  CHECK_THAT(log, Catch::Contains("--no-sandbox"));

  courier::testing::ServerProcess unsandboxed(courier::testing::ServerSpec{
      COURIER_WITHOUT_SECCOMP_PATH, "courier-executor", 0, "", {"--no-sandbox"}});
  Client client(unsandboxed);
  std::string session = client.openSession();
  std::string sha = client.ship(session, COURIER_KERNEL_CRASHERS);
  requirePlusOneWorks(client, session, sha);
}

TEST_CASE("large tensors of changing sizes, from four threads on one session, reuse shared "
          "memory without mixing up any result",
          "[containment][sharedmemory]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--launch-timeout-ms", kTestLaunchTimeoutMs}});
  ObjectBlob scale = ObjectBlob::fromBytes(readFile(COURIER_KERNEL_SCALE));
  BackendOptions options;
  options.requestTimeout = 60s;
  auto backend = courier::transport::createBackend(executor.address(), options);
  REQUIRE(static_cast<bool>(backend));
  auto session = (*backend)->openSession();
  REQUIRE(static_cast<bool>(session));
  llvm::Error shipped = (*backend)->shipObject(*session, scale);
  REQUIRE_FALSE(static_cast<bool>(shipped));

  // Sizes straddle the inline limit and grow and shrink, so arenas are made, reused for
  // smaller tensors, outgrown and dropped.
  const std::vector<int64_t> sizes = {3, 10000, 1 << 20, 7000, 3 << 20, 1 << 18, 5, 2 << 20};
  std::mutex mutex;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 6; ++round)
        for (size_t k = 0; k < sizes.size(); ++k) {
          int64_t n = sizes[(k + t) % sizes.size()];
          std::vector<double> input(n);
          for (int64_t i = 0; i < n; ++i)
            input[i] = double(t * 1000003 + round * 7919 + i);
          auto results = (*backend)->launch(*session, scale, "_catalyst_pyface_scale",
                                            {TensorView{input.data(), 8, {n}, {1}}}, {{1, 8}});
          std::string problem;
          if (!results)
            problem = llvm::toString(results.takeError());
          else if ((*results)[0].sizes != std::vector<int64_t>{n})
            problem = "a result of the wrong size";
          else {
            const double *out = static_cast<const double *>((*results)[0].data);
            for (int64_t i = 0; i < n && problem.empty(); ++i)
              if (out[i] != 2 * input[i])
                problem = "element " + std::to_string(i) + " of " + std::to_string(n) + " is wrong";
          }
          if (!problem.empty()) {
            std::lock_guard<std::mutex> lock(mutex);
            failures.push_back(problem);
          }
        }
    });
  for (std::thread &thread : threads)
    thread.join();
  INFO((failures.empty() ? std::string() : failures.front()));
  CHECK(failures.empty());
}

TEST_CASE("sessions beyond --max-sessions are refused with 503 until one closes",
          "[containment][limits]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--max-sessions", "2"}});
  Client client(executor);
  std::string first = client.openSession();
  client.openSession();
  auto refused = [&] {
    httplib::Client http("127.0.0.1", executor.port());
    return outcomeOf(http.Post("/v1/sessions", "", kJsonType));
  };
  Outcome third = refused();
  INFO(third.describe());
  CHECK(third.status == 503);
  CHECK(third.code == "too_many_sessions");
  CHECK(executor.metric("courier_sessions") == 2);
  // No worker was started for the refused session.
  CHECK(executor.awaitMetricAtMost("courier_workers", 4) <= 4);

  httplib::Client http("127.0.0.1", executor.port());
  auto closed = http.Delete(("/v1/sessions/" + first).c_str());
  REQUIRE(closed);
  CHECK(closed->status == 204);
  client.openSession();
}

namespace {

/// "NAME" of each "NAME=value" in /proc/PID/environ.
std::vector<std::string> environmentNames(pid_t pid) {
  std::vector<std::string> names;
  std::istringstream entries(courier::testing::procFile(pid, "environ"));
  for (std::string entry; std::getline(entries, entry, '\0');)
    names.push_back(entry.substr(0, entry.find('=')));
  return names;
}

/// A line of /proc/PID/task/TID/status, without its name ("CapEff:\t0000000000000000").
std::string statusField(const std::filesystem::path &task, const std::string &name) {
  std::ifstream in(task / "status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + ":", 0) == 0)
      return line.substr(line.find_first_not_of(" \t", name.size() + 1));
  return "";
}

bool workerCgroupsUsable() {
  return std::string(courier::executor::WorkerCgroup::kind()) != "none";
}

} // namespace

TEST_CASE("a kernel cannot stat a path outside its worker, and fstat of its own descriptors works",
          "[containment][sandbox]") {
  Contained f;
  for (const char *path : {"/etc/shadow", "/proc/1", "/"}) {
    Outcome stat = outcomeOf(f.launch("_catalyst_pyface_stat_path", {chars(path, true)}, {{0, 8}}));
    INFO(path << ": " << stat.describe());
    REQUIRE(stat.status == 200);
    CHECK(i64Of(stat.results[0]) == -EACCES);
  }
  Outcome own = outcomeOf(f.launch("_catalyst_pyface_stat_stdin", {}, {{0, 8}}));
  INFO(own.describe());
  REQUIRE(own.status == 200);
  CHECK(i64Of(own.results[0]) == 0);
  requireSessionGoesOn(f);
}

TEST_CASE("memory a kernel holds in unmapped memfds counts against --worker-memory-mib",
          "[containment][sandbox][memory]") {
  Contained f({"--worker-memory-mib", "64"});
  Outcome hoarded = outcomeOf(f.launch("_catalyst_pyface_memfd_hoard", {i64Scalar(512)}, {{0, 8}}));
  INFO(hoarded.describe());
  if (workerCgroupsUsable())
    requireCrashed(hoarded, "out of memory", "_catalyst_pyface_memfd_hoard");
  else
    WARN("no control group can be made here: memfds are bounded by the file size limit and "
         "the open-file limit only");
  requireSessionGoesOn(f);
}

TEST_CASE("session workers hold no capability, run as nobody under a root executor, and have none "
          "of the executor's environment but what they read",
          "[containment][sandbox]") {
  ::setenv("COURIER_TEST_SECRET", "a-secret-of-the-executor", 1);
  Contained f;
  ::unsetenv("COURIER_TEST_SECRET");
  requirePlusOneWorks(f);
  // The executor has it, so a worker that inherited its environment would.
  CHECK(courier::testing::procFile(f.executor.processId(), "environ")
            .find("a-secret-of-the-executor") != std::string::npos);
  // A warm worker the pool is starting has not reached its sandbox yet: wait for every one to.
  std::vector<pid_t> workers;
  auto started = [&] {
    workers = courier::testing::liveChildrenOf(f.executor.processId());
    return !workers.empty() && std::all_of(workers.begin(), workers.end(), [](pid_t worker) {
      return statusField("/proc/" + std::to_string(worker), "Seccomp") == "2";
    });
  };
  for (auto until = Clock::now() + 10s; !started() && Clock::now() < until;)
    std::this_thread::sleep_for(10ms);
  REQUIRE_FALSE(workers.empty());
  const std::vector<std::string> kept = {"GLIBC_TUNABLES",        "ASAN_OPTIONS",
                                         "UBSAN_OPTIONS",         "LSAN_OPTIONS",
                                         "COURIER_TLS_CA",        "COURIER_TLS_CLIENT_CERT",
                                         "COURIER_TLS_CLIENT_KEY"};
  for (pid_t worker : workers) {
    INFO("worker " << worker);
    for (const std::string &name : environmentNames(worker)) {
      INFO(name);
      CHECK(std::find(kept.begin(), kept.end(), name) != kept.end());
    }
    // A worker of a root executor runs as nobody.
    if (::geteuid() == 0)
      CHECK(statusField("/proc/" + std::to_string(worker), "Uid").rfind("0\t", 0) != 0);
    for (const auto &task :
         std::filesystem::directory_iterator("/proc/" + std::to_string(worker) + "/task")) {
      INFO("thread " << task.path().filename().string());
      for (const char *set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"})
        CHECK(statusField(task.path(), set) == "0000000000000000");
      CHECK(statusField(task.path(), "Seccomp") == "2");
    }
  }
}
