// Failover in the HTTP backend: sessions under ids the client chooses, and what happens to a
// request under way when the executor behind the client's address dies and another takes its
// place. Two real executors listen on unix sockets; the client reaches them through a
// symbolic link, and moving the link to the other socket is what a balancer does when an
// executor goes away.
#include "tests/kernels/KernelPaths.h"
#include "tests/support/Require.h"
#include "tests/transport/ExecutorProcess.h"
#include "transport/Backend.h"
#include "transport/ErrorCode.h"
#include "transport/HttpBackend.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace courier::transport;
using namespace courier::testing;

namespace {

const char *const kSlowPlusOne = "_catalyst_pyface_slow_plus_one";
const char *const kPlusOne = "_catalyst_pyface_plus_one";

ObjectBlob crashers() {
  auto buffer = llvm::MemoryBuffer::getFile(COURIER_KERNEL_CRASHERS);
  REQUIRE(buffer);
  return ObjectBlob::fromBytes((*buffer)->getBuffer().str());
}

/// The code and message of a failure; the test fails if there was none.
template <typename T> std::pair<ErrorCode, std::string> failureOf(llvm::Expected<T> value) {
  REQUIRE(!value);
  std::pair<ErrorCode, std::string> failure{ErrorCode::Internal, ""};
  llvm::handleAllErrors(
      value.takeError(),
      [&](const CodedError &e) {
        failure = {e.kind, e.message};
      },
      [&](const llvm::ErrorInfoBase &e) { failure.second = e.message(); });
  return failure;
}

TensorView view(const std::vector<double> &data) {
  return TensorView{data.data(), 8, {static_cast<int64_t>(data.size())}, {1}};
}

std::vector<double> valuesOf(const OwnedTensor &tensor) {
  const double *data = static_cast<const double *>(tensor.data);
  return std::vector<double>(data, data + tensor.sizes.at(0));
}

/// Two executors, and the address the client is given: a link to one of their sockets.
struct Pair {
  explicit Pair(std::vector<std::string> extra = {})
      : first(config(extra)), second(config(extra)), front(first.directory() + "/front.sock") {
    point(first);
  }

  static ExecutorConfig config(std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--listen", "unix:{dir}/executor.sock"});
    return ExecutorConfig{0, "", std::move(extra)};
  }

  /// Sends the client's next connections to `executor`, replacing the link in one step.
  void point(const ExecutorProcess &executor) {
    std::string staged = front + ".new";
    std::remove(staged.c_str());
    REQUIRE(symlink(executor.socketPath().c_str(), staged.c_str()) == 0);
    REQUIRE(std::rename(staged.c_str(), front.c_str()) == 0);
  }

  std::unique_ptr<Backend> connect(BackendOptions options = {}) const {
    return require(createHttpBackend("unix:" + front, options));
  }

  /// Waits until `executor` is running a launch, over HTTP or the same-host channel: its
  /// request has arrived whole, so the client cannot know whether it ran. (Requests in
  /// flight would not do: the request before it is still counted while its reply is written.)
  static void awaitLaunchRunning(const ExecutorProcess &executor) {
    auto giveUp = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (executor.metric("courier_launches_running") < 1) {
      REQUIRE(std::chrono::steady_clock::now() < giveUp);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  /// Starts a launch of slow_plus_one ({1000}: a second's sleep) on `session` and kills the
  /// first executor once it is serving it; with `moveFirst` the link moves to the second
  /// executor beforehand. Returns the launch's outcome.
  llvm::Expected<std::vector<OwnedTensor>> killFirstUnder(Backend &backend,
                                                          const std::string &session,
                                                          const ObjectBlob &object,
                                                          bool moveFirst) {
    std::vector<double> x = {1000};
    auto running = std::async(std::launch::async, [&] {
      return backend.launch(session, object, kSlowPlusOne, {view(x)}, {{1, 8}});
    });
    awaitLaunchRunning(first);
    if (moveFirst)
      point(second);
    first.kill();
    return running.get();
  }

  ExecutorProcess first, second;
  std::string front;
};

} // namespace

TEST_CASE("a client opens each session under a fresh id of its own choosing", "[failover]") {
  Pair pair;
  std::unique_ptr<Backend> backend = pair.connect();
  std::string one = require(backend->openSession());
  std::string two = require(backend->openSession());
  CHECK(one.size() == 32);
  CHECK(one.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(one != two);
  // The executor holds them under exactly those ids.
  auto client = pair.first.client();
  auto found = client->Get(("/v1/sessions/" + one).c_str());
  REQUIRE(found);
  CHECK(found->status == 200);
  CHECK(pair.first.metric("courier_sessions") == 2);
}

TEST_CASE("a contained launch whose executor dies under it runs again where its session moved",
          "[failover]") {
  Pair pair;
  std::unique_ptr<Backend> backend = pair.connect();
  std::string session = require(backend->openSession());
  ObjectBlob object = crashers();
  requireOk(backend->shipObject(session, object));
  std::vector<OwnedTensor> results =
      require(pair.killFirstUnder(*backend, session, object, /*moveFirst=*/true));
  CHECK(valuesOf(results.at(0)) == std::vector<double>{1001});
  // The session moved under its id, with its object, and the launch ran there once.
  CHECK(pair.second.metric("courier_sessions") == 1);
  CHECK(pair.second.metric("courier_object_uploads_total") == 1);
  CHECK(pair.second.metric("courier_launches_total") == 1);
  CHECK(pair.second.metric("courier_launches_running") == 0);
}

TEST_CASE("a launch lost with an executor that does not contain it fails with executor_lost",
          "[failover]") {
  Pair pair({"--no-sandbox"});
  std::unique_ptr<Backend> backend = pair.connect();
  std::string session = require(backend->openSession());
  ObjectBlob object = crashers();
  requireOk(backend->shipObject(session, object));
  auto [code, message] =
      failureOf(pair.killFirstUnder(*backend, session, object, /*moveFirst=*/true));
  CHECK(code == ErrorCode::ExecutorLost);
  CHECK_THAT(message, Catch::Contains("launching '_catalyst_pyface_slow_plus_one'") &&
                          Catch::Contains("is not run again"));
  CHECK(pair.second.metric("courier_launches_total") == 0);
  // The session itself moves with the next launch, which runs normally.
  std::vector<double> y = {5};
  auto results = require(backend->launch(session, object, kPlusOne, {view(y)}, {{1, 8}}));
  CHECK(valuesOf(results.at(0)) == std::vector<double>{6});
  CHECK(pair.second.metric("courier_launches_total") == 1);
}

TEST_CASE("with no executor to move to, a lost launch says so under executor_lost", "[failover]") {
  Pair pair;
  std::unique_ptr<Backend> backend = pair.connect();
  std::string session = require(backend->openSession());
  ObjectBlob object = crashers();
  requireOk(backend->shipObject(session, object));
  auto [code, message] =
      failureOf(pair.killFirstUnder(*backend, session, object, /*moveFirst=*/false));
  CHECK(code == ErrorCode::ExecutorLost);
  // How re-creating the session failed depends on whether a pooled connection to the dead
  // executor was tried first ("connection lost") or a new one ("cannot connect").
  CHECK_THAT(message, Catch::Contains("moving the session elsewhere failed: re-creating session"));
}

TEST_CASE("awaiting an async launch lost with its executor is executor_lost", "[failover]") {
  Pair pair;
  std::unique_ptr<Backend> backend = pair.connect();
  std::string session = require(backend->openSession());
  uint64_t launch =
      require(backend->launchAsync(session, crashers(), "_catalyst_pyface_loop_forever"));
  pair.point(pair.second);
  pair.first.kill();

  llvm::Error awaited = backend->await(session, launch);
  REQUIRE(static_cast<bool>(awaited));
  ErrorCode code = ErrorCode::Internal;
  std::string message;
  llvm::handleAllErrors(std::move(awaited), [&](const CodedError &e) {
    code = e.kind;
    message = e.message;
  });
  CHECK(code == ErrorCode::ExecutorLost);
  CHECK_THAT(message,
             Catch::Contains("awaiting launch") && Catch::Contains("lost with its executor"));
}
