// courier-serve's module workers against real processes: a module that crashes, spins, or
// outgrows its memory costs only its own request; deadlines end the work (checked in the
// process tree); reloads under load stay whole.
#include "tests/serve/RestClient.h"
#include "tests/serve/ServeProcess.h"
#include "tests/support/HostileModules.h"
#include "tests/support/Sanitized.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iomanip>
#include <mutex>
#include <set>
#include <sstream>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>

using namespace courier::testing;
using namespace courier::testing;

namespace {

/// Host-only: doubles a vector of any length (arenas and their growth).
const std::string kDouble = R"(
module {
  func.func public @twice(%x: tensor<?xf64>) -> tensor<?xf64> {
    %y = arith.addf %x, %x : tensor<?xf64>
    return %y : tensor<?xf64>
  }
}
)";

/// setup() loads from address 0: the module dies while it is being loaded.
const std::string kSetupCrash = R"(
module {
  func.func public @setup() {
    %null = llvm.mlir.zero : !llvm.ptr
    %v = llvm.load volatile %null : !llvm.ptr -> f64
    return
  }
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    return %x : tensor<4xf64>
  }
}
)";

/// setup() never returns: the module spins while it is being loaded.
const std::string kSetupSpin = R"(
module {
  func.func public @setup() {
    %zero = arith.constant 0 : i64
    %r = scf.while (%i = %zero) : (i64) -> i64 {
      %true = arith.constant true
      scf.condition(%true) %i : i64
    } do {
    ^bb0(%i: i64):
      llvm.inline_asm has_side_effects "", "" : () -> ()
      scf.yield %i : i64
    }
    return
  }
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    return %x : tensor<4xf64>
  }
}
)";

/// Counts to its input (one element) and returns the count: a call as long as it is asked.
const std::string kBusy = R"(
module {
  func.func public @main(%x: tensor<1xi64>) -> tensor<1xi64> {
    %c0 = arith.constant 0 : index
    %n = tensor.extract %x[%c0] : tensor<1xi64>
    %zero = arith.constant 0 : i64
    %one = arith.constant 1 : i64
    %r = scf.while (%i = %zero) : (i64) -> i64 {
      %go = arith.cmpi slt, %i, %n : i64
      scf.condition(%go) %i : i64
    } do {
    ^bb0(%i: i64):
      llvm.inline_asm has_side_effects "", "" : () -> ()
      %j = arith.addi %i, %one : i64
      scf.yield %j : i64
    }
    %out = tensor.from_elements %r : tensor<1xi64>
    return %out : tensor<1xi64>
  }
}
)";

/// A 400 MB splat: minutes of work and gigabytes once past the constant limit.
const std::string kHugeConstant = R"(
module {
  func.func public @big() -> tensor<100000000xf32> {
    %c = arith.constant dense<1.0> : tensor<100000000xf32>
    return %c : tensor<100000000xf32>
  }
}
)";

const std::string kVector = R"({"inputs": [[1, 2, 3, 4]]})";

std::string kernelModule(double factor) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(1);
  text << "module @app {\n"
          "  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {\n"
          "    %y = catalyst.launch_kernel @dev::@scale(%x) : (tensor<4xf64>) -> tensor<4xf64>\n"
          "    return %y : tensor<4xf64>\n"
          "  }\n"
          "  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "
          "\"local\"}} {\n"
          "    func.func public @scale(%x: tensor<4xf64>) -> tensor<4xf64> {\n"
          "      %f = arith.constant dense<"
       << factor
       << "> : tensor<4xf64>\n"
          "      %r = arith.mulf %x, %f : tensor<4xf64>\n"
          "      return %r : tensor<4xf64>\n"
          "    }\n"
          "  }\n"
          "}\n";
  return text.str();
}

Reply invoke(httplib::Client &http, const std::string &module, const std::string &entry,
             const std::string &body = kVector, httplib::Headers headers = {}) {
  return toReply(http.Post(("/v1/modules/" + module + "/invoke/" + entry).c_str(), headers, body,
                           "application/json"));
}

/// CPU time `pid` has used, in clock ticks; -1 once it is gone.
long cpuTicks(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line))
    return -1;
  std::istringstream fields(line.substr(line.rfind(')') + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14)
      utime = std::stol(field);
    if (i == 15)
      stime = std::stol(field);
  }
  return utime + stime;
}

bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line))
    return false;
  size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

/// True when no process the server started burns CPU through `window`.
bool idleThrough(pid_t server, std::chrono::milliseconds window) {
  std::map<pid_t, long> before;
  for (pid_t child : liveChildrenOf(server))
    before[child] = cpuTicks(child);
  std::this_thread::sleep_for(window);
  long ticksPerSecond = sysconf(_SC_CLK_TCK);
  for (auto [child, ticks] : before) {
    long now = cpuTicks(child);
    // A tenth of the window: a busy process would use all of it.
    if (now >= 0 && (now - ticks) * 1000 > ticksPerSecond * window.count() / 10)
      return false;
  }
  return true;
}

/// True once, within 20 s, no process the server started burns CPU through `window`: nothing
/// goes on. A worker the pool starts to replace one it ended warms up first (a compile, which
/// takes seconds under the sanitizers); a call left spinning never goes quiet.
bool childrenIdle(pid_t server, std::chrono::milliseconds window) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!idleThrough(server, window))
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
  return true;
}

int workerPid(httplib::Client &http, const std::string &module) {
  Reply described = get(http, "/v1/modules/" + module);
  REQUIRE(described.status == 200);
  const json &worker = described.body["worker"];
  REQUIRE(worker.is_object());
  return worker["pid"].is_number() ? worker["pid"].get<int>() : 0;
}

/// Creates the hostile module (courier::testing::kHostileModule); returns its worker's pid.
int createHostile(httplib::Client &http) {
  requireCreated(http, "hostile", courier::testing::kHostileModule);
  int worker = workerPid(http, "hostile");
  REQUIRE(worker > 0);
  return worker;
}

} // namespace

TEST_CASE("a crash in a module's call is its own 500, and every other module keeps serving",
          "[serve][containment]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "hostile", courier::testing::kHostileModule);
  requireCreated(*http, "calm", kernelModule(3));
  int firstWorker = workerPid(*http, "hostile");
  CHECK(firstWorker > 0);
  CHECK(firstWorker != serve.processId());

  struct Case {
    std::string entry, body, signal;
  };
  for (const Case &c : {Case{"crash", kVector, "SIGSEGV (address 0x0)"},
                        Case{"crashKernel", kVector, "SIGSEGV (address 0x0)"},
                        Case{"at", R"({"inputs": [[1, 2, 3, 4], 1099511627776]})", "SIGSEGV"}}) {
    INFO("entry " << c.entry);
    Reply crashed = invoke(*http, "hostile", c.entry, c.body);
    INFO(crashed.raw);
    CHECK(crashed.status == 500);
    CHECK(errorCode(crashed) == "kernel_crashed");
    CHECK(errorMessage(crashed).find(c.signal) != std::string::npos);
    CHECK(errorMessage(crashed).find("'" + c.entry + "'") != std::string::npos);

    Reply described = get(*http, "/v1/modules/hostile");
    CHECK(described.body["state"] == "crashed");
    CHECK(described.body["worker"]["pid"].is_null());
    CHECK(described.body["worker"]["lastDeath"].get<std::string>().find(c.signal) !=
          std::string::npos);
    CHECK(described.body["lastError"]["code"] == "kernel_crashed");

    // The other module never noticed; the crashed one restarts on its next call.
    CHECK(outputData(invoke(*http, "calm", "main")) == std::vector<double>{3, 6, 9, 12});
    Reply again = invoke(*http, "hostile", "main");
    INFO(again.raw);
    CHECK(outputData(again) == std::vector<double>{2, 4, 6, 8});
    CHECK(get(*http, "/v1/modules/hostile").body["state"] == "serving");
  }
  Reply described = get(*http, "/v1/modules/hostile");
  CHECK(described.body["worker"]["crashes"] == 3);
  CHECK(described.body["worker"]["restarts"] == 3);
  CHECK(described.body["version"] == 1);
  CHECK(get(*http, "/v1/health").status == 200);
}

TEST_CASE("a module cannot signal, outlive, read or shrink the server through its worker",
          "[serve][containment]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "escape", courier::testing::kEscapeModule);
  std::string server = std::to_string(serve.processId());
  struct Case {
    std::string entry, input, call;
  };
  for (const Case &c : {Case{"signalOwner", server, "fcntl"}, Case{"keepAlive", "0", "prctl"}}) {
    INFO(c.entry);
    Reply refused = invoke(*http, "escape", c.entry, R"({"inputs": [)" + c.input + "]}");
    INFO(refused.raw);
    CHECK(refused.status == 500);
    CHECK(errorCode(refused) == "kernel_crashed");
    CHECK(errorMessage(refused).find("SIGSYS (system call " + c.call + ")") != std::string::npos);
  }
  // The server is not dumpable: its memory cannot be opened by a worker of the same user.
  Reply opened = invoke(*http, "escape", "openParentMemory", R"({"inputs": [0]})");
  INFO(opened.raw);
  REQUIRE(opened.status == 200);
  CHECK(opened.body["outputs"][0]["data"][0].get<int>() < 0);
  // Once compiled, a module writes no file (where the kernel has Landlock).
  ::unlink("/tmp/courier-module-write-probe");
  Reply created = invoke(*http, "escape", "createFile", R"({"inputs": [0]})");
  INFO(created.raw);
  REQUIRE(created.status == 200);
  if (::syscall(SYS_landlock_create_ruleset, nullptr, 0, 1) >= 0) {
    CHECK(created.body["outputs"][0]["data"][0].get<int>() < 0);
    CHECK(::access("/tmp/courier-module-write-probe", F_OK) != 0);
  } else {
    WARN("this kernel has no Landlock: module workers may write files");
  }
  ::unlink("/tmp/courier-module-write-probe");
  // The input arena is sealed: shrinking it fails, and the server's next write is safe.
  std::string big = json({{"inputs", {std::vector<double>(8192, 1.0)}}}).dump();
  for (int i = 0; i < 2; ++i) {
    Reply shrunk = invoke(*http, "escape", "shrinkInputs", big);
    INFO(shrunk.raw);
    REQUIRE(shrunk.status == 200);
    CHECK(shrunk.body["outputs"][0]["data"][0] == 0);
  }
  CHECK(get(*http, "/v1/health").status == 200);
}

TEST_CASE("a worker killed from outside while idle shows at once, and the next call restarts it",
          "[serve][containment]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "calm", kernelModule(2));
  int pid = workerPid(*http, "calm");
  REQUIRE(pid > 0);
  REQUIRE(::kill(pid, SIGKILL) == 0);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (get(*http, "/v1/modules/calm").body["state"] != "crashed" &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Reply described = get(*http, "/v1/modules/calm");
  CHECK(described.body["state"] == "crashed");
  CHECK(described.body["worker"]["pid"].is_null());
  // Not the call's doing: it runs on a fresh worker.
  CHECK(outputData(invoke(*http, "calm", "main")) == std::vector<double>{2, 4, 6, 8});
  Reply after = get(*http, "/v1/modules/calm");
  CHECK(after.body["state"] == "serving");
  CHECK(after.body["worker"]["restarts"] == 1);
  CHECK(after.body["worker"]["crashes"] == 0);
}

TEST_CASE("a crash in setup() is 500 setup_crashed naming the signal, not a compile that died, "
          "and a reload whose setup() crashes keeps the old version",
          "[serve][containment]") {
  ServeProcess serve;
  auto http = serve.client();
  Reply created = post(*http, "/v1/modules", createBody("loads", kSetupCrash));
  INFO(created.raw);
  CHECK(created.status == 500);
  CHECK(errorCode(created) == "setup_crashed");
  CHECK(errorMessage(created).find("died while running its setup(): SIGSEGV (address 0x0)") !=
        std::string::npos);
  CHECK(errorMessage(created).find("compiling") == std::string::npos);
  CHECK(get(*http, "/v1/modules/loads").status == 404);

  requireCreated(*http, "calm", kernelModule(2));
  Reply replaced = put(*http, "/v1/modules/calm", json({{"mlir", kSetupCrash}}).dump());
  INFO(replaced.raw);
  CHECK(replaced.status == 500);
  CHECK(errorCode(replaced) == "setup_crashed");
  Reply described = get(*http, "/v1/modules/calm");
  CHECK(described.body["version"] == 1);
  CHECK(described.body["failedReloads"] == 1);
  CHECK(described.body["lastError"]["code"] == "setup_crashed");
  CHECK(outputData(invoke(*http, "calm", "main")) == std::vector<double>{2, 4, 6, 8});
}

TEST_CASE("a setup() past --compile-timeout-ms is 504 compile_timeout naming the setup",
          "[serve][containment]") {
  ServeProcess serve({"", {"--compile-timeout-ms", "3000"}});
  auto http = serve.client();
  Reply created = post(*http, "/v1/modules", createBody("slow", kSetupSpin));
  INFO(created.raw);
  CHECK(created.status == 504);
  CHECK(errorCode(created) == "compile_timeout");
  CHECK(errorMessage(created).find("the setup() of module 'slow' ran longer than 3000 ms") !=
        std::string::npos);
  requireCreated(*http, "calm", kernelModule(2));
  CHECK(outputData(invoke(*http, "calm", "main")) == std::vector<double>{2, 4, 6, 8});
}

TEST_CASE("an invoke past its deadline is 504 and its worker is gone", "[serve][containment]") {
  ServeProcess serve({"", {"--invoke-timeout-ms", "300"}});
  auto http = serve.client();
  int spinning = createHostile(*http);

  Reply spun = invoke(*http, "hostile", "spin", R"({"inputs": [1]})");
  INFO(spun.raw);
  CHECK(spun.status == 504);
  CHECK(errorCode(spun) == "deadline_exceeded");
  CHECK(errorMessage(spun).find("300 ms") != std::string::npos);
  CHECK_FALSE(running(spinning));
  CHECK(childrenIdle(serve.processId(), std::chrono::milliseconds(500)));

  // A request's own deadline may shorten the server's, never lengthen it.
  Reply quick =
      invoke(*http, "hostile", "spin", R"({"inputs": [1]})", {{"X-Courier-Deadline-Ms", "100"}});
  CHECK(quick.status == 504);
  CHECK(errorMessage(quick).find("100 ms") != std::string::npos);
  Reply greedy =
      invoke(*http, "hostile", "spin", R"({"inputs": [1]})", {{"X-Courier-Deadline-Ms", "600000"}});
  CHECK(greedy.status == 504);
  CHECK(errorMessage(greedy).find("300 ms") != std::string::npos);
  Reply bad =
      invoke(*http, "hostile", "spin", R"({"inputs": [1]})", {{"X-Courier-Deadline-Ms", "soon"}});
  CHECK(bad.status == 400);
  CHECK(errorMessage(bad).find("X-Courier-Deadline-Ms") != std::string::npos);
  // And the module still answers the calls that end.
  CHECK(outputData(invoke(*http, "hostile", "main")) == std::vector<double>{2, 4, 6, 8});
}

TEST_CASE("deleting a module whose call spins ends the call and its worker",
          "[serve][containment]") {
  ServeProcess serve({"", {"--invoke-timeout-ms", "0"}});
  auto http = serve.client();
  int spinning = createHostile(*http);

  Reply spun;
  std::thread caller([&] {
    auto own = serve.client();
    own->set_read_timeout(60, 0);
    spun = invoke(*own, "hostile", "spin", R"({"inputs": [1]})");
  });
  // The call is running once the worker burns CPU.
  long start = cpuTicks(spinning);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (cpuTicks(spinning) - start < sysconf(_SC_CLK_TCK) / 10 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto deleted = http->Delete("/v1/modules/hostile");
  REQUIRE(deleted);
  CHECK(deleted->status == 204);
  caller.join();
  INFO(spun.raw);
  CHECK(spun.status == 404);
  CHECK(errorCode(spun) == "unknown_module");
  CHECK_FALSE(running(spinning));
  CHECK(childrenIdle(serve.processId(), std::chrono::milliseconds(500)));
}

TEST_CASE("a call that waits for its module's busy worker counts that wait as the v2 "
          "statistics' queue time, which in process is zero",
          "[serve][containment][v2]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "busy", kBusy);
  int worker = workerPid(*http, "busy");
  REQUIRE(worker > 0);

  // A long call holds the module's one worker; a short one sent while it runs waits for it.
  Reply longCall;
  std::thread caller([&] {
    auto own = serve.client();
    own->set_read_timeout(120, 0);
    longCall = invoke(*own, "busy", "main", R"({"inputs": [[3000000000]]})");
  });
  long start = cpuTicks(worker);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (cpuTicks(worker) - start < sysconf(_SC_CLK_TCK) / 10 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Reply shortCall = invoke(*http, "busy", "main", R"({"inputs": [[1]]})");
  caller.join();
  INFO(longCall.raw << "\n" << shortCall.raw);
  REQUIRE(longCall.status == 200);
  REQUIRE(shortCall.status == 200);

  Reply stats = get(*http, "/v2/models/busy/stats");
  INFO(stats.raw);
  REQUIRE(stats.status == 200);
  const json &s = stats.body["model_stats"][0]["inference_stats"];
  CHECK(s["queue"]["count"] == 2);
  CHECK(s["queue"]["ns"].get<int64_t>() > 0);
  CHECK(s["success"]["ns"].get<int64_t>() >=
        s["queue"]["ns"].get<int64_t>() + s["compute_infer"]["ns"].get<int64_t>());

  // In process calls never wait for one another: no queue.
  ServeProcess inProcess({"", {"--isolation", "none"}});
  auto direct = inProcess.client();
  requireCreated(*direct, "busy", kBusy);
  REQUIRE(invoke(*direct, "busy", "main", R"({"inputs": [[1000]]})").status == 200);
  Reply counted = get(*direct, "/v2/models/busy/stats");
  const json &t = counted.body["model_stats"][0]["inference_stats"];
  CHECK(t["queue"]["count"] == 1);
  CHECK(t["queue"]["ns"] == 0);
  CHECK(t["compute_infer"]["ns"].get<int64_t>() > 0);
}

namespace {

/// A thread calling the hostile module's `spin` on a connection of its own; `spun` and
/// `answered` say how it ended, once the thread is joined.
std::thread callSpin(ServeProcess &serve, Reply &spun, bool &answered) {
  return std::thread([&serve, &spun, &answered] {
    auto own = serve.client();
    own->set_read_timeout(60, 0);
    auto reply =
        own->Post("/v1/modules/hostile/invoke/spin", R"({"inputs": [1]})", "application/json");
    // No Catch assertion on this thread: the reply is looked at once it is joined.
    answered = bool(reply);
    if (reply)
      spun = Reply{reply->status, json::parse(reply->body, nullptr, false), reply->body,
                   reply->headers};
  });
}

/// Starts callSpin and returns once the call is running (`burning`, its worker or with
/// `--isolation none` the server, burns CPU).
std::thread startSpinning(ServeProcess &serve, int burning, Reply &spun, bool &answered) {
  std::thread caller = callSpin(serve, spun, answered);
  long start = cpuTicks(burning);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (cpuTicks(burning) - start < sysconf(_SC_CLK_TCK) / 10 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return caller;
}

} // namespace

TEST_CASE("SIGTERM past the drain timeout ends a spinning call's worker and the server exits",
          "[serve][containment][drain]") {
  ServeProcess serve({"", {"--invoke-timeout-ms", "0", "--drain-timeout-ms", "300"}});
  auto http = serve.client();
  int spinning = createHostile(*http);
  Reply spun;
  bool answered = false;
  std::thread caller = startSpinning(serve, spinning, spun, answered);

  auto signalled = std::chrono::steady_clock::now();
  int status = serve.terminate();
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  caller.join();
  INFO("exited after " << seconds << " s; the call was " << (answered ? spun.raw : "cut"));
  // terminate() kills what is still there after 15 s: a server that waited for the call
  // until then did not exit by itself.
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(running(spinning));
  // The call ended with its worker and was answered, before the process left: it did not
  // have to leave without it.
  CHECK(answered);
  CHECK(errorCode(spun) == "unknown_module");
  CHECK(serve.log().find("cannot be stopped") == std::string::npos);
}

TEST_CASE("module workers die with their server, a spinning one too, after its compile "
          "changed user on a compiler thread",
          "[serve][containment]") {
  // A root server's module worker compiles as root and becomes nobody before module code
  // runs; that clears the parent-death signal, which was armed again on the compiler thread
  // only: once that thread ended, a worker outlived a killed server, spinning for good.
  ServeProcess serve({"", {"--invoke-timeout-ms", "0"}});
  auto http = serve.client();
  int spinning = createHostile(*http);
  Reply spun;
  bool answered = false;
  std::thread caller = startSpinning(serve, spinning, spun, answered);
  std::vector<pid_t> workers = liveChildrenOf(serve.processId());
  REQUIRE(std::find(workers.begin(), workers.end(), spinning) != workers.end());
  serve.kill();
  caller.join();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto anyRunning = [&] {
    return std::any_of(workers.begin(), workers.end(), [](pid_t pid) { return running(pid); });
  };
  while (anyRunning() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (pid_t worker : workers) {
    INFO("worker " << worker << (worker == spinning ? " (spinning)" : ""));
    CHECK_FALSE(running(worker));
    if (running(worker))
      ::kill(worker, SIGKILL); // Not left behind to burn a core.
  }
}

TEST_CASE("SIGTERM with an in-process call spinning past the drain exits without it",
          "[serve][containment][drain]") {
  ServeProcess serve({"", {"--isolation", "none", "--drain-timeout-ms", "0"}});
  auto http = serve.client();
  requireCreated(*http, "hostile", courier::testing::kHostileModule);
  Reply spun;
  bool answered = false;
  std::thread caller = startSpinning(serve, serve.processId(), spun, answered);

  int status = serve.terminate();
  caller.join();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(answered);
  std::string log = serve.log();
  CHECK(log.find("in-process code cannot be stopped") != std::string::npos);
}

TEST_CASE("a compile past --compile-timeout-ms ends with its worker, nothing goes on",
          "[serve][containment]") {
  // 2 s: a module of one small kernel compiles well within it even on a loaded machine (its
  // first compile starts the worker), where the 400 MB constant takes 10 s or more.
  ServeProcess serve({"", {"--compile-timeout-ms", "2000", "--max-constant-mib", "0"}});
  auto http = serve.client();
  requireCreated(*http, "calm", kernelModule(2));
  // Six at once, as a client that retries might send them.
  constexpr int kCompiles = 6;
  std::vector<Reply> replies(kCompiles);
  std::vector<std::thread> senders;
  for (int i = 0; i < kCompiles; ++i)
    senders.emplace_back([&, i] {
      auto own = serve.client();
      replies[i] = post(*own, "/v1/modules", createBody("huge" + std::to_string(i), kHugeConstant));
    });
  for (std::thread &sender : senders)
    sender.join();
  for (int i = 0; i < kCompiles; ++i) {
    INFO(replies[i].raw);
    CHECK(replies[i].status == 504);
    CHECK(errorCode(replies[i]) == "compile_timeout");
    // Ended in its worker, or still waiting for one (the engine's message says which).
    CHECK(errorMessage(replies[i])
              .find("compiling module 'huge" + std::to_string(i) + "' took longer than 2000 ms") !=
          std::string::npos);
    CHECK(get(*http, "/v1/modules/huge" + std::to_string(i)).status == 404);
  }
  // No compile runs on in the background, in the server or in any worker.
  CHECK(childrenIdle(serve.processId(), std::chrono::milliseconds(500)));
  CHECK(cpuTicks(serve.processId()) >= 0);
  CHECK(serve.metric("courier_serve_compile_timeouts_total") == kCompiles);
  CHECK(outputData(invoke(*http, "calm", "main")) == std::vector<double>{2, 4, 6, 8});
}

TEST_CASE("a compile that outgrows --module-memory-mib ends its worker, naming the cause",
          "[serve][containment][oom]") {
  ServeProcess serve({"", {"--module-memory-mib", "300", "--max-constant-mib", "0"}});
  auto http = serve.client();
  Reply big = post(*http, "/v1/modules", createBody("huge", kHugeConstant));
  INFO(big.raw);
  CHECK(big.status == 500);
  CHECK(errorCode(big) == "compile_crashed");
  CHECK(errorMessage(big).find("out of memory") != std::string::npos);
  requireCreated(*http, "calm", kernelModule(2));
  CHECK(outputData(invoke(*http, "calm", "main")) == std::vector<double>{2, 4, 6, 8});
}

TEST_CASE("tensors larger than a message travel through shared memory, growing as needed",
          "[serve][containment]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "double", kDouble);
  for (size_t n : {size_t(8), size_t(20000), size_t(300000), size_t(1000), size_t(300000)}) {
    INFO("n = " << n);
    std::vector<double> values(n);
    for (size_t i = 0; i < n; ++i)
      values[i] = static_cast<double>(i) * 0.5 - 7;
    Reply doubled = invoke(*http, "double", "twice", json({{"inputs", {values}}}).dump());
    REQUIRE(doubled.status == 200);
    std::vector<double> out = outputData(doubled);
    REQUIRE(out.size() == n);
    bool same = true;
    for (size_t i = 0; i < n; ++i)
      same &= out[i] == values[i] * 2;
    CHECK(same);
  }
}

TEST_CASE("100 reloads (20 sanitized) while 4 clients call, isolated: none fails, none mixes "
          "versions",
          "[serve][containment]") {
  ServeProcess serve;
  requireCreated(*serve.client(), "scale", kernelModule(1));
  const std::string versionA = kernelModule(1), versionB = kernelModule(10);
  const std::vector<double> resultA = {1, 2, 3, 4}, resultB = {10, 20, 30, 40};
  constexpr int kClients = 4, kReloads = soakRounds(100);
  CallTally tally;
  auto http = serve.client();
  int replaced = 0;
  callDuring([&] { return serve.client(); }, kClients, "/v1/modules/scale/invoke/main", kVector,
             resultA, resultB, tally,
             [&] {
               for (int i = 0; i < kReloads; ++i) {
                 Reply reply = put(*http, "/v1/modules/scale",
                                   json({{"mlir", i % 2 == 0 ? versionB : versionA}}).dump());
                 INFO(reply.raw);
                 CHECK(reply.status == 200);
                 replaced += reply.status == 200;
               }
             });
  INFO(tally.firstFailure);
  CHECK(tally.failures == 0);
  CHECK(tally.mixed == 0);
  CHECK(tally.fromA + tally.fromB > kReloads);
  CHECK(replaced == kReloads);
  CHECK(get(*http, "/v1/modules/scale").body["version"] == kReloads + 1);
  // Retired versions' workers are gone: the current one and the warm spare remain.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (liveChildrenOf(serve.processId()).size() > 2 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(liveChildrenOf(serve.processId()).size() <= 2);
}

TEST_CASE("a cache directory others can write to is refused at start", "[serve][containment]") {
  TempDir scratch;
  std::string dir = scratch.path + "/shared";
  std::filesystem::create_directory(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::all);
  auto [status, err] = courier::testing::runServeToExit({"--cache-dir", dir});
  CHECK(status != 0);
  CHECK(err.find("writable by group or others") != std::string::npos);
  CHECK(err.find(dir) != std::string::npos);
}

TEST_CASE("with --isolation=none the server still serves, in its own process",
          "[serve][containment]") {
  ServeProcess serve({"", {"--isolation", "none"}});
  auto http = serve.client();
  requireCreated(*http, "calm", kernelModule(2));
  CHECK(outputData(invoke(*http, "calm", "main")) == std::vector<double>{2, 4, 6, 8});
  Reply described = get(*http, "/v1/modules/calm");
  CHECK(described.body["worker"].is_null());
  CHECK(liveChildrenOf(serve.processId()).empty());
  auto refused = courier::testing::runServeToExit({"--isolation", "thread"});
  CHECK(refused.first != 0);
  CHECK(refused.second.find("--isolation") != std::string::npos);
}

TEST_CASE("with --workers-per-module 2 two calls of one module spin at once, in two workers",
          "[serve][containment]") {
  ServeProcess serve({"", {"--workers-per-module", "2", "--invoke-timeout-ms", "0"}});
  auto http = serve.client();
  requireCreated(*http, "hostile", courier::testing::kHostileModule);
  Reply first, second;
  bool answeredFirst = false, answeredSecond = false;
  std::thread one = callSpin(serve, first, answeredFirst);
  std::thread two = callSpin(serve, second, answeredSecond);
  // Both calls run: two of the server's module workers burn CPU at once (with one worker,
  // the second call would wait for the first, which never ends).
  std::set<pid_t> burning;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       burning.size() < 2 && std::chrono::steady_clock::now() < deadline;) {
    std::map<pid_t, long> before;
    for (pid_t child : liveChildrenOf(serve.processId()))
      before[child] = cpuTicks(child);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    burning.clear();
    for (auto [child, ticks] : before)
      if (cpuTicks(child) > ticks)
        burning.insert(child);
  }
  CHECK(burning.size() >= 2);
  // Deleting the module ends both.
  auto deleted = http->Delete("/v1/modules/hostile");
  REQUIRE(deleted);
  CHECK(deleted->status == 204);
  one.join();
  two.join();
  CHECK(answeredFirst);
  CHECK(answeredSecond);
  CHECK(errorCode(first) == "unknown_module");
  CHECK(errorCode(second) == "unknown_module");

  auto [status, log] = runServeToExit({"--workers-per-module", "0"});
  CHECK(status > 0);
  CHECK_THAT(log, Catch::Contains("--workers-per-module is 1 to 64"));
}
