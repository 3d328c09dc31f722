// What binds a module worker's every thread once module code may run: no file written from
// setup(), from a signal handler on another thread, or with one compile job; no capability
// in any thread; no program the server starts changed on disk; threads and memory in
// memfds bounded by the worker's control group, against real courier-serve processes.
#include "executor/Sandbox.h"
#include "executor/WorkerCgroup.h"
#include "tests/serve/RestClient.h"
#include "tests/serve/ServeProcess.h"
#include "tests/support/HostileModules.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace courier::testing;
using namespace courier::testing;

namespace {

const char *const kProbe = "/tmp/courier-breakout-probe";

int callI64(httplib::Client &http, const std::string &module, const std::string &entry,
            int64_t input, Reply *reply = nullptr) {
  Reply called =
      toReply(http.Post(("/v1/modules/" + module + "/invoke/" + entry).c_str(),
                        R"({"inputs": [)" + std::to_string(input) + "]}", "application/json"));
  INFO(called.raw);
  if (reply) {
    *reply = called;
    return 0;
  }
  REQUIRE(called.status == 200);
  return called.body["outputs"][0]["data"][0].get<int>();
}

pid_t workerOf(httplib::Client &http, const std::string &module) {
  Reply described = get(http, "/v1/modules/" + module);
  REQUIRE(described.status == 200);
  REQUIRE(described.body["worker"]["pid"].is_number());
  return described.body["worker"]["pid"].get<pid_t>();
}

/// A capability set line of /proc/PID/task/TID/status ("CapEff:\t0000000000000000").
std::string field(const std::string &status, const std::string &name) {
  std::istringstream lines(status);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(name + ":", 0) == 0)
      return line.substr(line.find_first_not_of(" \t", name.size() + 1));
  return "";
}

bool cgroupsUsable() { return std::string(courier::executor::WorkerCgroup::kind()) != "none"; }

} // namespace

TEST_CASE("module code writes no file from setup() nor from a signal handler on any of its "
          "worker's threads, with any number of compile jobs",
          "[serve][containment][sandbox]") {
  for (std::vector<std::string> args :
       {std::vector<std::string>{}, std::vector<std::string>{"--jobs", "1"}}) {
    INFO("courier-serve " << (args.empty() ? "" : args[0] + " " + args[1]));
    std::filesystem::remove(kProbe);
    ServeProcess serve({"", args});
    auto http = serve.client();
    requireCreated(*http, "breakout", kBreakoutModule);
    // The handler ran on more than the thread that sent the signals: the compiler's threads
    // were reached too, as an escape needs.
    CHECK(callI64(*http, "breakout", "signalsHandled", 0) >= 2);
    CHECK(callI64(*http, "breakout", "filesCreated", 0) == 0);
    CHECK_FALSE(std::filesystem::exists(kProbe));
    std::filesystem::remove(kProbe);
  }
}

TEST_CASE("no thread of a module worker holds a capability, even under a root server",
          "[serve][containment][sandbox]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "breakout", kBreakoutModule);
  pid_t worker = workerOf(*http, "breakout");
  std::string tasks = "/proc/" + std::to_string(worker) + "/task";
  int threads = 0;
  for (const auto &task : std::filesystem::directory_iterator(tasks)) {
    std::ifstream in(task.path() / "status");
    std::stringstream status;
    status << in.rdbuf();
    INFO("thread " << task.path().filename().string());
    for (const char *set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"})
      CHECK(field(status.str(), set) == "0000000000000000");
    CHECK(field(status.str(), "NoNewPrivs") == "1");
    CHECK(field(status.str(), "Seccomp") == "2");
    ++threads;
  }
  CHECK(threads >= 2);
}

TEST_CASE("module code of a root server runs as nobody in every thread and cannot read the "
          "files only root may",
          "[serve][containment][sandbox]") {
  if (::geteuid() != 0) {
    WARN("skipped: the server runs as root only when the test does");
    return;
  }
  const char *const rootOnly = "/tmp/courier-root-only-probe";
  {
    std::ofstream(rootOnly) << "secret\n";
    std::filesystem::permissions(rootOnly, std::filesystem::perms::owner_read |
                                               std::filesystem::perms::owner_write);
  }
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "breakout", kBreakoutModule);
  CHECK(callI64(*http, "breakout", "readsOwnersFile", 0) == 0);
  // The compile still wrote the server's cache, as root, before module code ran: a second
  // module with the same text is a cache hit.
  requireCreated(*http, "again", kBreakoutModule);
  Reply again = get(*http, "/v1/modules/again");
  REQUIRE(again.status == 200);
  CHECK(again.body["phases"]["cacheHit"] == true);
  pid_t worker = workerOf(*http, "breakout");
  std::string nobody = std::to_string(courier::executor::unprivilegedIdentity().uid);
  int threads = 0;
  for (const auto &task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(worker) + "/task")) {
    std::ifstream in(task.path() / "status");
    std::stringstream status;
    status << in.rdbuf();
    INFO("thread " << task.path().filename().string());
    std::string uid = field(status.str(), "Uid");
    CHECK(uid == nobody + "\t" + nobody + "\t" + nobody + "\t" + nobody);
    ++threads;
  }
  CHECK(threads >= 2);
  std::filesystem::remove(rootOnly);
}

TEST_CASE("a worker program replaced on disk after the server started is never run",
          "[serve][containment][sandbox]") {
  // A copy of the two programs, so the test may replace one: courier-serve starts the
  // courier-module-worker beside it.
  std::filesystem::path bin = std::filesystem::path(COURIER_SERVE_PATH).parent_path();
  char pattern[] = "/tmp/courier-replaced-XXXXXX";
  REQUIRE(::mkdtemp(pattern));
  std::filesystem::path copy(pattern);
  for (const char *program : {"courier-serve", "courier-module-worker"})
    std::filesystem::copy_file(bin / program, copy / program);
  std::filesystem::path marker = copy / "replacement-ran";
  {
    ServerProcess serve(ServerSpec{
        (copy / "courier-serve").string(), "courier-serve", 0, "", {"--cache-dir", "{dir}/cache"}});
    auto http = serve.client();
    requireCreated(*http, "first", kBreakoutModule);
    // What a module with write access once did: a script put in the worker's place.
    std::filesystem::path script = copy / "script";
    {
      std::ofstream out(script);
      out << "#!/bin/sh\ntouch " << marker.string() << "\nexit 1\n";
    }
    std::filesystem::permissions(script, std::filesystem::perms::owner_all);
    std::filesystem::rename(script, copy / "courier-module-worker");
    // Past the warm worker started before the swap, each takes a worker started after it.
    for (const char *name : {"second", "third", "fourth"}) {
      requireCreated(*http, name, kBreakoutModule);
      CHECK(callI64(*http, name, "filesCreated", 0) == 0);
    }
    CHECK_FALSE(std::filesystem::exists(marker));
  }
  std::filesystem::remove_all(copy);
  std::filesystem::remove(kProbe);
}

TEST_CASE("a module starting 2000 threads gets as many as its worker's allowance",
          "[serve][containment][sandbox]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "greedy", kGreedyModule);
  int started = callI64(*http, "greedy", "spawn", 2000);
  if (!cgroupsUsable()) {
    WARN("no control group can be made here: module threads are bounded by memory only");
    return;
  }
  // executor::WorkerSettings::extraThreads, less the few threads compiling the module took.
  CHECK(started <= 64);
  CHECK(started > 0);
  CHECK(get(*http, "/v1/health").status == 200);
  // The module still answers.
  CHECK(callI64(*http, "greedy", "hoard", 64) == 64);
}

TEST_CASE("memory a module holds in memfds counts against --module-memory-mib",
          "[serve][containment][sandbox][oom]") {
  if (!cgroupsUsable()) {
    WARN("no control group can be made here: memfd pages are not bounded");
    return;
  }
  ServeProcess serve({"", {"--module-memory-mib", "256"}});
  auto http = serve.client();
  requireCreated(*http, "greedy", kGreedyModule);
  Reply hoarded;
  callI64(*http, "greedy", "hoard", 1024, &hoarded);
  INFO(hoarded.raw);
  CHECK(hoarded.status == 500);
  CHECK(errorMessage(hoarded).find("out of memory") != std::string::npos);
  // The next call gets a fresh worker.
  CHECK(callI64(*http, "greedy", "hoard", 64) == 64);
}
