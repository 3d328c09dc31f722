// One suite for both kernel hosts (executor/KernelHost.h): every case runs on an executor
// core whose sessions' kernels run in this process and on one whose run in sandboxed
// courier-worker processes, and expects the same outcome, codes included. Where the hosts
// may differ (only a worker's kernel can be ended), the case says so.
#include "executor/ExecutorCore.h"
#include "transport/ErrorCode.h"

#include "tests/runtime/TestSupport.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <thread>

using namespace courier;
using namespace courier::test;
using executor::Clock;
using executor::CoreOptions;
using executor::ExecutorCore;
using executor::InputArea;
using executor::LaunchResults;
using executor::SessionRef;
using transport::ErrorCode;
using transport::Isolation;
using transport::ResultSpec;
using transport::TensorView;
namespace wire = transport::wire;

namespace {

const char *placeName(Isolation isolation) {
  return isolation == Isolation::Process ? "in a worker" : "in this process";
}

std::unique_ptr<ExecutorCore> makeCore(Isolation isolation, CoreOptions options = {}) {
  options.isolation = isolation;
  options.workerProgram = COURIER_WORKER_PATH;
  options.warmWorkers = 1;
  options.plugins = {COURIER_TEST_PLUGIN};
  llvm::Expected<std::unique_ptr<ExecutorCore>> core = ExecutorCore::create(std::move(options));
  REQUIRE(messageOf(core ? llvm::Error::success() : core.takeError()) == "");
  return std::move(*core);
}

SessionRef openSession(ExecutorCore &core, const std::string &id = "s") {
  bool created = false;
  llvm::Expected<SessionRef> session = core.openSession(id, created);
  REQUIRE(messageOf(session ? llvm::Error::success() : session.takeError()) == "");
  REQUIRE(created);
  return *session;
}

/// Stores the kernel object at `path`; its SHA-256.
std::string store(ExecutorCore &core, const char *path) {
  transport::ObjectBlob blob = kernel(path);
  std::string sha = blob.sha256;
  llvm::Expected<bool> stored = core.storeObject(std::move(blob));
  REQUIRE(messageOf(stored ? llvm::Error::success() : stored.takeError()) == "");
  return sha;
}

/// The code of an error that must have happened.
ErrorCode codeOf(llvm::Error error) {
  REQUIRE(bool(error));
  std::optional<ErrorCode> code;
  llvm::handleAllErrors(
      std::move(error), [&](const transport::CodedError &e) { code = e.kind; },
      [&](const llvm::ErrorInfoBase &e) { FAIL("an error without a code: " << e.message()); });
  REQUIRE(code);
  return *code;
}

template <typename T> ErrorCode codeOf(llvm::Expected<T> value) {
  REQUIRE_FALSE(bool(value));
  return codeOf(value.takeError());
}

std::optional<uint64_t> holdersOf(ExecutorCore &core, const std::string &sha) {
  for (const executor::ObjectSummary &object : core.listObjects())
    if (object.sha256 == sha)
      return object.holders;
  return std::nullopt;
}

/// Launches `entry` on f64 vectors `inputs` through an input area, as the HTTP adapter does.
llvm::Expected<LaunchResults> launchVectors(ExecutorCore &core, executor::Session &session,
                                            const std::string &sha, const std::string &entry,
                                            const std::vector<std::vector<double>> &inputs,
                                            std::vector<ResultSpec> results) {
  std::vector<wire::TensorHeader> headers;
  std::vector<TensorView> views;
  for (const std::vector<double> &input : inputs) {
    int64_t n = static_cast<int64_t>(input.size());
    headers.push_back(wire::TensorHeader{8, {n}, 0, input.size() * sizeof(double)});
    views.push_back(view(input, {n}, {1}));
  }
  llvm::Expected<InputArea> area = core.inputArea(session, headers);
  if (!area)
    return area.takeError();
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::memcpy(area->input(i), inputs[i].data(), headers[i].bytes);
    views[i].data = area->input(i);
  }
  return core.launch(session, sha, entry, &*area, views, results, core.deadline(std::nullopt));
}

std::vector<double> valuesOf(const TensorView &tensor) {
  REQUIRE(tensor.elemSize == 8);
  std::vector<double> out;
  int64_t n = tensor.sizes.empty() ? 1 : tensor.sizes[0];
  int64_t stride = tensor.strides.empty() ? 1 : tensor.strides[0];
  for (int64_t i = 0; i < n; ++i)
    out.push_back(static_cast<const double *>(tensor.data)[i * stride]);
  return out;
}

/// Runs the rest of the case once for each kernel host, each in a section named after it.
#define ON_EACH_HOST(isolation)                                                                    \
  Isolation isolation = GENERATE(Isolation::InProcess, Isolation::Process);                        \
  DYNAMIC_SECTION(placeName(isolation))

/// A core of one host kind with session "s" open.
struct Opened {
  std::unique_ptr<ExecutorCore> core;
  SessionRef session;
};

Opened openCore(Isolation isolation) {
  Opened opened{makeCore(isolation), nullptr};
  opened.session = openSession(*opened.core);
  return opened;
}

} // namespace

TEST_CASE("a launch runs the attached object's entry on its inputs and returns its results",
          "[kernel-host]") {
  ON_EACH_HOST(isolation) {
    auto [core, session] = openCore(isolation);
    std::string sha = store(*core, COURIER_KERNEL_SCALE);
    REQUIRE_OK(core->attach(*session, sha));
    llvm::Expected<LaunchResults> results = launchVectors(
        *core, *session, sha, "_catalyst_pyface_scale", {{1, 2, 3}}, {ResultSpec{1, 8}});
    REQUIRE_OK(results.takeError());
    REQUIRE(results->views.size() == 1);
    CHECK(valuesOf(results->views[0]) == std::vector<double>{2, 4, 6});

    // Two results from one launch, one of them rank 0.
    std::string shapes = store(*core, COURIER_KERNEL_SHAPES);
    REQUIRE_OK(core->attach(*session, shapes));
    llvm::Expected<LaunchResults> stats =
        launchVectors(*core, *session, shapes, "_catalyst_pyface_stats", {{1, 2, 3, 6}},
                      {ResultSpec{0, 8}, ResultSpec{1, 8}});
    REQUIRE_OK(stats.takeError());
    REQUIRE(stats->views.size() == 2);
  }
}

TEST_CASE("large inputs and results cross whole, launch after launch", "[kernel-host]") {
  ON_EACH_HOST(isolation) {
    auto [core, session] = openCore(isolation);
    std::string sha = store(*core, COURIER_KERNEL_SCALE);
    REQUIRE_OK(core->attach(*session, sha));
    // 8 MiB: past what a worker's request carries inline, so in shared memory, and the
    // second launch reuses what the first one used.
    std::vector<double> input(1 << 20);
    for (int round = 0; round < 2; ++round) {
      for (size_t i = 0; i < input.size(); ++i)
        input[i] = double(i) + round;
      llvm::Expected<LaunchResults> results = launchVectors(
          *core, *session, sha, "_catalyst_pyface_scale", {input}, {ResultSpec{1, 8}});
      REQUIRE_OK(results.takeError());
      std::vector<double> out = valuesOf(results->views[0]);
      REQUIRE(out.size() == input.size());
      for (size_t i = 0; i < out.size(); i += 4099)
        REQUIRE(out[i] == 2 * input[i]);
      CHECK(out.back() == 2 * input.back());
    }
  }
}

TEST_CASE("objects are held once per session while attached", "[kernel-host]") {
  ON_EACH_HOST(isolation) {
    auto core = makeCore(isolation);
    SessionRef a = openSession(*core, "a");
    SessionRef b = openSession(*core, "b");
    std::string sha = store(*core, COURIER_KERNEL_SCALE);
    CHECK(holdersOf(*core, sha) == 0u);
    REQUIRE_OK(core->attach(*a, sha));
    REQUIRE_OK(core->attach(*a, sha)); // A no-op.
    REQUIRE_OK(core->attach(*b, sha));
    CHECK(holdersOf(*core, sha) == 2u);
    CHECK(core->detach(*a, sha));
    CHECK_FALSE(core->detach(*a, sha));
    CHECK(holdersOf(*core, sha) == 1u);
    // Attached again after a detach, it launches again.
    REQUIRE_OK(core->attach(*a, sha));
    llvm::Expected<LaunchResults> results =
        launchVectors(*core, *a, sha, "_catalyst_pyface_scale", {{5}}, {ResultSpec{1, 8}});
    REQUIRE_OK(results.takeError());
    CHECK(valuesOf(results->views[0]) == std::vector<double>{10});
    REQUIRE_OK(core->closeSession("b"));
    CHECK(holdersOf(*core, sha) == 1u);
  }
}

TEST_CASE("what a session does not have is refused with its code", "[kernel-host]") {
  ON_EACH_HOST(isolation) {
    auto [core, session] = openCore(isolation);
    CHECK(codeOf(core->attach(*session, std::string(64, 'a'))) == ErrorCode::UnknownObject);
    CHECK(codeOf(core->findSession("nobody")) == ErrorCode::UnknownSession);
    std::string sha = store(*core, COURIER_KERNEL_SHAPES);
    REQUIRE_OK(core->attach(*session, sha));
    Clock::time_point deadline = core->deadline(std::nullopt);
    CHECK(codeOf(core->launchAsync(session, sha, "absent", deadline)) == ErrorCode::UnknownEntry);
    // An async entry takes and returns nothing; `identity` takes a tensor.
    CHECK(codeOf(core->launchAsync(session, sha, "_catalyst_pyface_identity", deadline)) ==
          ErrorCode::SignatureMismatch);
    CHECK(codeOf(launchVectors(*core, *session, sha, "absent", {}, {})) == ErrorCode::UnknownEntry);
    CHECK(codeOf(core->await(*session, 99, deadline)) == ErrorCode::UnknownLaunch);
    // The session is still usable.
    llvm::Expected<LaunchResults> results =
        launchVectors(*core, *session, sha, "_catalyst_pyface_identity", {{7}}, {ResultSpec{1, 8}});
    REQUIRE_OK(results.takeError());
    CHECK(valuesOf(results->views[0]) == std::vector<double>{7});
  }
}

TEST_CASE("async launches are awaited once each, and a session has a bounded number pending",
          "[kernel-host]") {
  ON_EACH_HOST(isolation) {
    auto [core, session] = openCore(isolation);
    std::string sha = store(*core, COURIER_KERNEL_SHAPES);
    Clock::time_point deadline = core->deadline(std::nullopt);
    llvm::Expected<uint64_t> first =
        core->launchAsync(session, sha, "_catalyst_pyface_noop", deadline);
    REQUIRE_OK(first.takeError());
    REQUIRE_OK(core->await(*session, *first, deadline));
    CHECK(codeOf(core->await(*session, *first, deadline)) == ErrorCode::UnknownLaunch);
    std::vector<uint64_t> pending;
    for (size_t i = 0; i < wire::kMaxPendingLaunches; ++i) {
      llvm::Expected<uint64_t> id =
          core->launchAsync(session, sha, "_catalyst_pyface_noop", deadline);
      REQUIRE_OK(id.takeError());
      pending.push_back(*id);
    }
    CHECK(codeOf(core->launchAsync(session, sha, "_catalyst_pyface_noop", deadline)) ==
          ErrorCode::TooManyLaunches);
    CHECK(core->listSessions().at(0).pendingLaunches == wire::kMaxPendingLaunches);
    for (uint64_t id : pending)
      REQUIRE_OK(core->await(*session, id, deadline));
  }
}

TEST_CASE("a call runs a plugin's symbol and its reply has the size asked for", "[kernel-host]") {
  ON_EACH_HOST(isolation) {
    auto [core, session] = openCore(isolation);
    Clock::time_point deadline = core->deadline(std::nullopt);
    double in[] = {1.5, 2.5, 4};
    llvm::StringRef input(reinterpret_cast<const char *>(in), sizeof(in));
    llvm::Expected<std::string> sum = core->call(*session, "courier_test_sum", input, 8, deadline);
    REQUIRE_OK(sum.takeError());
    double total = 0;
    std::memcpy(&total, sum->data(), sizeof(total));
    CHECK(total == 8);
    CHECK(codeOf(core->call(*session, "courier_test_sum", input, 4, deadline)) ==
          ErrorCode::CallFailed);
    CHECK(codeOf(core->call(*session, "courier_test_fail", "", 0, deadline)) ==
          ErrorCode::CallFailed);
    CHECK(codeOf(core->call(*session, "courier_absent", "", 0, deadline)) ==
          ErrorCode::UnknownSymbol);
    llvm::Expected<std::string> nothing =
        core->call(*session, "courier_test_nothing", "", 0, deadline);
    REQUIRE_OK(nothing.takeError());
    CHECK(nothing->empty());
  }
}

TEST_CASE("a closed session's holds end and what it is asked afterwards is refused",
          "[kernel-host]") {
  ON_EACH_HOST(isolation) {
    auto [core, session] = openCore(isolation);
    std::string sha = store(*core, COURIER_KERNEL_SCALE);
    REQUIRE_OK(core->attach(*session, sha));
    CHECK(holdersOf(*core, sha) == 1u);
    REQUIRE_OK(core->closeSession("s"));
    CHECK(holdersOf(*core, sha) == 0u);
    CHECK_FALSE(core->sessionOpen(*session));
    CHECK(codeOf(core->closeSession("s")) == ErrorCode::UnknownSession);
    // A request that still holds the session learns it was closed.
    std::string other = store(*core, COURIER_KERNEL_SHAPES);
    CHECK(codeOf(core->attach(*session, other)) == ErrorCode::UnknownSession);
    CHECK(holdersOf(*core, other) == 0u);
  }
}

TEST_CASE("health and session summaries say where kernels run", "[kernel-host]") {
  ON_EACH_HOST(isolation) {
    auto core = makeCore(isolation);
    bool contained = isolation == Isolation::Process;
    CHECK(core->hostsContained() == contained);
    SessionRef session = openSession(*core);
    executor::HealthReport health = core->health();
    CHECK(health.isolated == contained);
    CHECK(health.healthy);
    CHECK(health.sessions == 1);
    std::vector<executor::SessionSummary> sessions = core->listSessions();
    REQUIRE(sessions.size() == 1);
    CHECK(sessions[0].id == "s");
    CHECK((sessions[0].workerPid > 0) == contained);
    // Only a host in a worker can answer a same-host channel itself.
    if (!contained)
      CHECK(codeOf(core->serveDirect(*session, nullptr, core->deadline(std::nullopt), true)) ==
            ErrorCode::Unavailable);
  }
}

TEST_CASE("an async launch past its deadline is reported so, and ended where its host can",
          "[kernel-host]") {
  ON_EACH_HOST(isolation) {
    auto [core, session] = openCore(isolation);
    std::string busy = store(*core, COURIER_KERNEL_BUSY);
    std::string shapes = store(*core, COURIER_KERNEL_SHAPES);
    REQUIRE_OK(core->attach(*session, shapes));
    int64_t pid = core->listSessions().at(0).workerPid;
    llvm::Expected<uint64_t> id =
        core->launchAsync(session, busy, "_catalyst_pyface_busy", core->deadline(std::nullopt));
    REQUIRE_OK(id.takeError());
    Clock::time_point soon = Clock::now() + std::chrono::milliseconds(20);
    CHECK(codeOf(core->await(*session, *id, soon)) == ErrorCode::DeadlineExceeded);
    CHECK(codeOf(core->await(*session, *id, soon)) == ErrorCode::UnknownLaunch);
    // A worker's kernel was ended with its worker, and the session goes on in a fresh one,
    // its objects loaded again; in this process the kernel runs on to its end.
    llvm::Expected<LaunchResults> results = launchVectors(
        *core, *session, shapes, "_catalyst_pyface_identity", {{3}}, {ResultSpec{1, 8}});
    REQUIRE_OK(results.takeError());
    CHECK(valuesOf(results->views[0]) == std::vector<double>{3});
    int64_t now = core->listSessions().at(0).workerPid;
    if (isolation == Isolation::Process)
      CHECK((now != pid && now > 0));
    else
      CHECK(now == 0);
  }
}
