// The HTTP backend against a real courier-executor process: shipping and releasing objects,
// launching with every rank and layout, call, async launch, concurrency, executor crashes
// and restarts.
#include "transport/HttpBackend.h"
#include "tests/kernels/KernelPaths.h"
#include "tests/support/Require.h"
#include "tests/support/Sanitized.h"
#include "tests/transport/ExecutorProcess.h"
#include "transport/Backend.h"
#include "transport/Wire.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <mutex>
#include <numeric>
#include <thread>

using namespace courier::transport;
using namespace courier::testing;

namespace {

const char *const kScale = "_catalyst_pyface_scale";
/// An --object-grace short enough to wait out, long enough that an upload and the attach
/// that follows it do not straddle it even on a loaded machine.
const char *const kShortGrace = "2";

ObjectBlob loadObject(const char *path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  REQUIRE(buffer);
  return ObjectBlob::fromBytes((*buffer)->getBuffer().str());
}

/// The error's message, or "" on success.
template <typename T> std::string errorOf(llvm::Expected<T> value) {
  return value ? std::string() : llvm::toString(value.takeError());
}
std::string errorOf(llvm::Error error) { return error ? llvm::toString(std::move(error)) : ""; }

std::unique_ptr<Backend> connect(const ExecutorProcess &executor, BackendOptions options = {}) {
  return require(createHttpBackend(executor.address(), options));
}

template <typename T> TensorView view(const std::vector<T> &data, std::vector<int64_t> sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t i = sizes.size(); i > 1; --i)
    strides[i - 2] = strides[i - 1] * sizes[i - 1];
  return TensorView{data.data(), sizeof(T), std::move(sizes), std::move(strides)};
}

template <typename T> std::vector<T> valuesOf(const OwnedTensor &tensor) {
  int64_t count = 1;
  for (int64_t s : tensor.sizes)
    count *= s;
  const T *data = static_cast<const T *>(tensor.data);
  return std::vector<T>(data, data + count);
}

struct Fixture {
  ExecutorProcess executor{ExecutorConfig{0, "", {"--plugin", COURIER_TEST_PLUGIN}}};
  std::unique_ptr<Backend> backend = connect(executor);
  std::string session = require(backend->openSession());
};

} // namespace

TEST_CASE("a shipped kernel doubles a float tensor over HTTP", "[http]") {
  Fixture f;
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  requireOk(f.backend->shipObject(f.session, scale));
  std::vector<double> input = {1, 2.5, -3, 1e300};
  auto results = require(f.backend->launch(f.session, scale, kScale, {view(input, {4})}, {{1, 8}}));
  REQUIRE(results.size() == 1);
  CHECK(results[0].sizes == std::vector<int64_t>{4});
  CHECK(results[0].strides == std::vector<int64_t>{1});
  CHECK(valuesOf<double>(results[0]) == std::vector<double>{2, 5, -6, 2e300});
  requireOk(f.backend->closeSession(f.session));
}

TEST_CASE("tensors of rank 0 to 3, float and integer, strided both ways, keep their values",
          "[http]") {
  Fixture f;
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  ObjectBlob add = loadObject(COURIER_KERNEL_ADD);
  requireOk(f.backend->shipObject(f.session, shapes));
  requireOk(f.backend->shipObject(f.session, add));

  SECTION("rank 0") {
    std::vector<double> x = {-3};
    auto r = require(
        f.backend->launch(f.session, shapes, "_catalyst_pyface_square0", {view(x, {})}, {{0, 8}}));
    CHECK(r[0].sizes.empty());
    CHECK(valuesOf<double>(r[0]) == std::vector<double>{9});
  }
  SECTION("rank 1 integers with a stride of 2") {
    std::vector<int32_t> a = {1, -1, 2, -1, 3, -1}, b = {10, 20, 30};
    TensorView strided{a.data(), 4, {3}, {2}};
    auto r = require(f.backend->launch(f.session, add, "_catalyst_pyface_add",
                                       {strided, view(b, {3})}, {{1, 4}}));
    CHECK(valuesOf<int32_t>(r[0]) == std::vector<int32_t>{11, 22, 33});
  }
  SECTION("rank 2 floats given as a transposed (column-major) view") {
    // Storage is [3][2]; the view reads it as a [2][3] tensor with strides [1, 2].
    std::vector<float> storage = {0, 1, 2, 3, 4, 5};
    TensorView transposed{storage.data(), 4, {2, 3}, {1, 2}};
    auto r = require(f.backend->launch(f.session, shapes, "_catalyst_pyface_transpose2",
                                       {transposed}, {{2, 4}}));
    // transpose2 of the logical [2][3] tensor [[0,2,4],[1,3,5]] is [3][2] [[0,1],[2,3],[4,5]].
    CHECK(r[0].sizes == std::vector<int64_t>{3, 2});
    CHECK(valuesOf<float>(r[0]) == std::vector<float>{0, 1, 2, 3, 4, 5});
  }
  SECTION("rank 3 integers with an inner stride") {
    std::vector<int64_t> storage(2 * 3 * 8);
    std::iota(storage.begin(), storage.end(), 0);
    // Every other element of the innermost dimension: sizes [2, 3, 4], strides [24, 8, 2].
    TensorView every2nd{storage.data(), 8, {2, 3, 4}, {24, 8, 2}};
    auto r = require(
        f.backend->launch(f.session, shapes, "_catalyst_pyface_negate3", {every2nd}, {{3, 8}}));
    std::vector<int64_t> expected;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 4; ++k)
          expected.push_back(-(i * 24 + j * 8 + k * 2));
    CHECK(r[0].sizes == std::vector<int64_t>{2, 3, 4});
    CHECK(valuesOf<int64_t>(r[0]) == expected);
  }
  SECTION("a column-major result arrives packed row-major") {
    auto r = require(
        f.backend->launch(f.session, shapes, "_catalyst_pyface_column_major", {}, {{2, 8}}));
    CHECK(r[0].strides == std::vector<int64_t>{3, 1});
    CHECK(valuesOf<double>(r[0]) == std::vector<double>{0, 1, 2, 10, 11, 12});
  }
  SECTION("two results of different ranks") {
    std::vector<double> x = {1, 2, 3};
    auto r = require(f.backend->launch(f.session, shapes, "_catalyst_pyface_stats", {view(x, {3})},
                                       {{0, 8}, {1, 8}}));
    REQUIRE(r.size() == 2);
    CHECK(valuesOf<double>(r[0]) == std::vector<double>{6});
    CHECK(valuesOf<double>(r[1]) == std::vector<double>{1, 3, 6});
  }
  SECTION("results the kernel does not own: an aliased input and a constant") {
    std::vector<double> x = {4, 5};
    auto same = require(f.backend->launch(f.session, shapes, "_catalyst_pyface_identity",
                                          {view(x, {2})}, {{1, 8}}));
    CHECK(valuesOf<double>(same[0]) == x);
    auto constant =
        require(f.backend->launch(f.session, shapes, "_catalyst_pyface_constant", {}, {{1, 4}}));
    CHECK(valuesOf<int32_t>(constant[0]) == std::vector<int32_t>{7, 11, 13, 17});
  }
  SECTION("an empty tensor") {
    std::vector<double> none;
    auto r = require(f.backend->launch(f.session, loadObject(COURIER_KERNEL_SCALE), kScale,
                                       {TensorView{none.data(), 8, {0}, {1}}}, {{1, 8}}));
    CHECK(r[0].sizes == std::vector<int64_t>{0});
  }
}

TEST_CASE("an object shipped twice, even by two sessions, is uploaded once", "[http]") {
  Fixture f;
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  requireOk(f.backend->shipObject(f.session, scale));
  requireOk(f.backend->shipObject(f.session, scale));
  std::string other = require(f.backend->openSession());
  requireOk(f.backend->shipObject(other, scale));
  CHECK(f.executor.metric("courier_object_uploads_total") == 1);
  CHECK(f.executor.metric("courier_objects") == 1);
  CHECK(f.executor.metric("courier_sessions") == 2);
}

TEST_CASE("a released object leaves its session, then the executor once nobody holds it",
          "[http]") {
  ExecutorProcess executor(
      ExecutorConfig{0, "", {"--plugin", COURIER_TEST_PLUGIN, "--object-grace", kShortGrace}});
  std::unique_ptr<Backend> backend = connect(executor);
  std::string first = require(backend->openSession());
  std::string second = require(backend->openSession());
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  requireOk(backend->shipObject(first, scale));
  requireOk(backend->shipObject(second, scale));
  CHECK(executor.metric("courier_attached_objects") == 2);

  // Another session still holds it: the bytes stay past the grace period.
  requireOk(backend->releaseObject(first, scale.sha256));
  CHECK(executor.metric("courier_attached_objects") == 1);
  std::vector<double> x = {1, 2};
  auto kept = require(backend->launch(second, scale, kScale, {view(x, {2})}, {{1, 8}}));
  CHECK(valuesOf<double>(kept[0]) == std::vector<double>{2, 4});

  // Releasing twice, an object never shipped, or on a session the executor lost is no error.
  requireOk(backend->releaseObject(first, scale.sha256));
  requireOk(backend->releaseObject(first, std::string(64, 'a')));
  requireOk(backend->releaseObject("lost-session", scale.sha256));

  requireOk(backend->releaseObject(second, scale.sha256));
  CHECK(executor.metric("courier_attached_objects") == 0);
  CHECK(executor.awaitMetricAtMost("courier_objects", 0) == 0);
  CHECK(executor.metric("courier_objects_dropped_total") == 1);
  CHECK(executor.metric("courier_object_uploads_total") == 1);

  // Both sessions keep working: a launch uploads the object again.
  auto again = require(backend->launch(first, scale, kScale, {view(x, {2})}, {{1, 8}}));
  CHECK(valuesOf<double>(again[0]) == std::vector<double>{2, 4});
  // More than two if a stall outlasted the grace period between upload and attach: the
  // client then uploads once more, which is what it should do.
  CHECK(executor.metric("courier_object_uploads_total") >= 2);
  CHECK(executor.metric("courier_attached_objects") == 1);
  CHECK(executor.metric("courier_sessions") == 2);
}

TEST_CASE("closing a session ends its holds, and unheld objects are dropped", "[http]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--object-grace", kShortGrace}});
  std::unique_ptr<Backend> backend = connect(executor);
  std::string session = require(backend->openSession());
  requireOk(backend->shipObject(session, loadObject(COURIER_KERNEL_SCALE)));
  requireOk(backend->shipObject(session, loadObject(COURIER_KERNEL_SCALE3)));
  CHECK(executor.metric("courier_attached_objects") == 2);
  requireOk(backend->closeSession(session));
  CHECK(executor.metric("courier_attached_objects") == 0);
  CHECK(executor.awaitMetricAtMost("courier_objects", 0) == 0);
  CHECK(executor.metric("courier_object_bytes") == 0);
}

TEST_CASE("two objects exporting the same entry name stay apart", "[http]") {
  Fixture f;
  ObjectBlob times2 = loadObject(COURIER_KERNEL_SCALE);
  ObjectBlob times3 = loadObject(COURIER_KERNEL_SCALE3);
  requireOk(f.backend->shipObject(f.session, times2));
  requireOk(f.backend->shipObject(f.session, times3));
  std::vector<double> x = {1, 2};
  auto two = require(f.backend->launch(f.session, times2, kScale, {view(x, {2})}, {{1, 8}}));
  auto three = require(f.backend->launch(f.session, times3, kScale, {view(x, {2})}, {{1, 8}}));
  CHECK(valuesOf<double>(two[0]) == std::vector<double>{2, 4});
  CHECK(valuesOf<double>(three[0]) == std::vector<double>{3, 6});
}

TEST_CASE("a launch ships its object itself when the session lacks it", "[http]") {
  Fixture f;
  std::vector<double> x = {5};
  auto r = require(f.backend->launch(f.session, loadObject(COURIER_KERNEL_SCALE), kScale,
                                     {view(x, {1})}, {{1, 8}}));
  CHECK(valuesOf<double>(r[0]) == std::vector<double>{10});
}

TEST_CASE("call reaches plugin and object symbols and checks sizes both ways", "[http]") {
  Fixture f;
  std::vector<double> values = {1.5, 2.5, 3};
  std::string input(reinterpret_cast<const char *>(values.data()), values.size() * 8);
  std::string sum = require(f.backend->call(f.session, "courier_test_sum", input, 8));
  double total;
  std::memcpy(&total, sum.data(), 8);
  CHECK(total == 7.0);

  requireOk(f.backend->shipObject(f.session, loadObject(COURIER_KERNEL_ADD)));
  std::vector<int32_t> ints = {1, -2, 3};
  std::string packed(reinterpret_cast<const char *>(ints.data()), 12);
  std::string negated = require(f.backend->call(f.session, "courier_object_negate", packed, 12));
  std::vector<int32_t> back(3);
  std::memcpy(back.data(), negated.data(), 12);
  CHECK(back == std::vector<int32_t>{-1, 2, -3});

  std::string failed = errorOf(f.backend->call(f.session, "courier_test_fail", "", 4));
  CHECK_THAT(failed, Catch::Contains("calling 'courier_test_fail' on " + f.executor.address()));
  CHECK_THAT(failed, Catch::Contains("[call_failed]"));
  // The callee itself rejects a reply size it does not produce.
  CHECK_THAT(errorOf(f.backend->call(f.session, "courier_test_sum", input, 16)),
             Catch::Contains("[call_failed]"));
  CHECK_THAT(errorOf(f.backend->call(f.session, "no_such_symbol", "", 0)),
             Catch::Contains("[unknown_symbol]"));
}

TEST_CASE("an async launch is awaited once", "[http]") {
  Fixture f;
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  requireOk(f.backend->shipObject(f.session, shapes));
  uint64_t first = require(f.backend->launchAsync(f.session, shapes, "_catalyst_pyface_noop"));
  uint64_t second = require(f.backend->launchAsync(f.session, shapes, "_catalyst_pyface_noop"));
  CHECK(first != second);
  requireOk(f.backend->await(f.session, second));
  requireOk(f.backend->await(f.session, first));
  CHECK_THAT(errorOf(f.backend->await(f.session, first)), Catch::Contains("[unknown_launch]"));
}

TEST_CASE("an async launch of an entry the object lacks is refused at once", "[http]") {
  Fixture f;
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  requireOk(f.backend->shipObject(f.session, shapes));
  std::string refused =
      errorOf(f.backend->launchAsync(f.session, shapes, "_catalyst_pyface_missing"));
  CHECK_THAT(refused, Catch::Contains("no entry '_catalyst_pyface_missing' in object " +
                                      shapes.sha256 + " [unknown_entry]"));
  // Nothing was queued for it.
  uint64_t next = require(f.backend->launchAsync(f.session, shapes, "_catalyst_pyface_noop"));
  CHECK(next == 1);
  requireOk(f.backend->await(f.session, next));
}

TEST_CASE("a session refuses async launches beyond its cap until some are awaited", "[http]") {
  Fixture f;
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  requireOk(f.backend->shipObject(f.session, shapes));
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < wire::kMaxPendingLaunches; ++i)
    ids.push_back(require(f.backend->launchAsync(f.session, shapes, "_catalyst_pyface_noop")));
  std::string refused = errorOf(f.backend->launchAsync(f.session, shapes, "_catalyst_pyface_noop"));
  CHECK_THAT(refused, Catch::Contains("async launches not yet awaited; await some first "
                                      "[too_many_launches]"));
  // Another session has its own allowance.
  std::string other = require(f.backend->openSession());
  requireOk(f.backend->shipObject(other, shapes));
  requireOk(f.backend->await(
      other, require(f.backend->launchAsync(other, shapes, "_catalyst_pyface_noop"))));
  // Awaiting one frees its place.
  requireOk(f.backend->await(f.session, ids.front()));
  ids.push_back(require(f.backend->launchAsync(f.session, shapes, "_catalyst_pyface_noop")));
  for (size_t i = 1; i < ids.size(); ++i)
    requireOk(f.backend->await(f.session, ids[i]));
}

TEST_CASE("a session closes cleanly with async launches never awaited", "[http]") {
  Fixture f;
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  requireOk(f.backend->shipObject(f.session, shapes));
  for (int i = 0; i < 4; ++i)
    require(f.backend->launchAsync(f.session, shapes, "_catalyst_pyface_noop"));
  requireOk(f.backend->closeSession(f.session));
  CHECK(f.executor.metric("courier_sessions") == 0);
  // Closing ends the session's worker and with it the launches not yet run; none of them
  // starts a worker for the closed session afterwards.
  // Only the warm workers (two by default) remain.
  CHECK(f.executor.awaitMetricAtMost("courier_workers", 2) <= 2);
  require(f.backend->health());
}

TEST_CASE("eight threads launch a thousand times (200 sanitized) each on one session",
          "[http][stress]") {
  Fixture f;
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  requireOk(f.backend->shipObject(f.session, scale));
  std::atomic<int> wrong{0}, failed{0};
  std::mutex firstErrorMutex;
  std::string firstError;
  std::vector<std::thread> threads;
  const int launches = courier::testing::soakRounds(1000);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < launches; ++i) {
        std::vector<double> x = {double(t), double(i), double(t * 1000 + i), -0.5};
        auto r = f.backend->launch(f.session, scale, kScale, {view(x, {4})}, {{1, 8}});
        if (!r) {
          std::lock_guard<std::mutex> lock(firstErrorMutex);
          if (firstError.empty())
            firstError = llvm::toString(r.takeError());
          else
            llvm::consumeError(r.takeError());
          failed++;
          continue;
        }
        std::vector<double> expected = {2.0 * t, 2.0 * i, 2.0 * (t * 1000 + i), -1};
        if (valuesOf<double>((*r)[0]) != expected)
          wrong++;
      }
    });
  for (std::thread &t : threads)
    t.join();
  INFO(firstError);
  CHECK(failed == 0);
  CHECK(wrong == 0);
  CHECK(f.executor.metric("courier_launches_total") == 8 * launches);
}

TEST_CASE("eight sessions launch concurrently, each with its own objects", "[http][stress]") {
  Fixture f;
  ObjectBlob times2 = loadObject(COURIER_KERNEL_SCALE);
  ObjectBlob times3 = loadObject(COURIER_KERNEL_SCALE3);
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      // Even sessions hold only the x2 object, odd ones only the x3 object.
      const ObjectBlob &mine = t % 2 ? times3 : times2;
      double factor = t % 2 ? 3 : 2;
      auto session = f.backend->openSession();
      if (!session || f.backend->shipObject(*session, mine)) {
        if (!session)
          llvm::consumeError(session.takeError());
        failed++;
        return;
      }
      for (int i = 0; i < 100; ++i) {
        std::vector<double> x = {double(i)};
        auto r = f.backend->launch(*session, mine, kScale, {view(x, {1})}, {{1, 8}});
        if (!r) {
          llvm::consumeError(r.takeError());
          failed++;
        } else if (valuesOf<double>((*r)[0]) != std::vector<double>{factor * i}) {
          wrong++;
        }
      }
      if (f.backend->closeSession(*session))
        failed++;
    });
  for (std::thread &t : threads)
    t.join();
  CHECK(failed == 0);
  CHECK(wrong == 0);
  CHECK(f.executor.metric("courier_object_uploads_total") == 2);
  CHECK(f.executor.metric("courier_sessions") == 1); // The fixture's own session.
}

TEST_CASE("objects shipped to one session are invisible to another", "[http]") {
  Fixture f;
  requireOk(f.backend->shipObject(f.session, loadObject(COURIER_KERNEL_ADD)));
  std::string other = require(f.backend->openSession());
  std::string four(4, '\0');
  CHECK(require(f.backend->call(f.session, "courier_object_negate", four, 4)).size() == 4);
  CHECK_THAT(errorOf(f.backend->call(other, "courier_object_negate", four, 4)),
             Catch::Contains("[unknown_symbol]"));
}

TEST_CASE("an executor killed mid-run fails the caller within its timeout", "[http]") {
  Fixture f;
  BackendOptions options;
  options.requestTimeout = std::chrono::seconds(3);
  std::unique_ptr<Backend> backend = connect(f.executor, options);
  std::string session = require(backend->openSession());
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  std::vector<double> big(1 << 20, 1.0);

  std::mutex mutex;
  std::condition_variable progress;
  int launches = 0;
  std::string error;
  std::chrono::steady_clock::time_point failedAt;
  std::thread caller([&] {
    while (true) {
      auto r = backend->launch(session, scale, kScale, {view(big, {1 << 20})}, {{1, 8}});
      std::lock_guard<std::mutex> lock(mutex);
      if (!r) {
        error = llvm::toString(r.takeError());
        failedAt = std::chrono::steady_clock::now();
        break;
      }
      ++launches;
      progress.notify_all();
    }
  });
  {
    std::unique_lock<std::mutex> lock(mutex);
    REQUIRE(progress.wait_for(lock, std::chrono::seconds(30), [&] { return launches >= 3; }));
  }
  auto killedAt = std::chrono::steady_clock::now();
  f.executor.kill();
  caller.join();
  // A killed peer resets the connection, so this fails at once; the bound only has to tell
  // "failed" from "hung", with room for a loaded machine.
  CHECK(failedAt - killedAt < std::chrono::seconds(30));
  CHECK_THAT(error,
             Catch::Contains("launching '_catalyst_pyface_scale' on " + f.executor.address()));

  // With nothing listening any more, the next call fails fast and says why.
  std::string refused =
      errorOf(backend->launch(session, scale, kScale, {view(big, {4})}, {{1, 8}}));
  CHECK_THAT(refused, Catch::Contains("cannot connect"));
}

TEST_CASE("a frozen executor fails the caller after the request timeout", "[http]") {
  Fixture f;
  BackendOptions options;
  options.requestTimeout = std::chrono::seconds(1);
  // Over HTTP: on the same-host channel the session's worker answers, frozen executor or not.
  options.sharedMemory = SharedMemory::Off;
  std::unique_ptr<Backend> backend = connect(f.executor, options);
  std::string session = require(backend->openSession());
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  std::vector<double> x = {1};
  require(backend->launch(session, scale, kScale, {view(x, {1})}, {{1, 8}}));

  f.executor.freeze();
  auto started = std::chrono::steady_clock::now();
  std::string error = errorOf(backend->launch(session, scale, kScale, {view(x, {1})}, {{1, 8}}));
  auto waited = std::chrono::steady_clock::now() - started;
  f.executor.signal(SIGCONT);
  CHECK_THAT(error,
             Catch::Contains("launching '_catalyst_pyface_scale' on " + f.executor.address() +
                             ": no reply within the request timeout"));
  // The lower bound proves the timeout was waited for; the upper one only that the caller
  // did not hang, with room for a loaded machine.
  CHECK(waited >= std::chrono::milliseconds(900));
  CHECK(waited < std::chrono::seconds(30));
  // Thawed, it serves again.
  auto r = require(backend->launch(session, scale, kScale, {view(x, {1})}, {{1, 8}}));
  CHECK(valuesOf<double>(r[0]) == std::vector<double>{2});
}

TEST_CASE("after an executor restarts, the next launch re-creates the session and re-ships",
          "[http]") {
  auto first = std::make_unique<ExecutorProcess>();
  int port = first->port();
  std::unique_ptr<Backend> backend = connect(*first);
  std::string session = require(backend->openSession());
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  ObjectBlob add = loadObject(COURIER_KERNEL_ADD);
  requireOk(backend->shipObject(session, scale));
  requireOk(backend->shipObject(session, add));
  std::vector<double> x = {1, 2};
  require(backend->launch(session, scale, kScale, {view(x, {2})}, {{1, 8}}));

  first->kill();
  first.reset();
  ExecutorProcess second(ExecutorConfig{port, "", {}});
  auto r = require(backend->launch(session, scale, kScale, {view(x, {2})}, {{1, 8}}));
  CHECK(valuesOf<double>(r[0]) == std::vector<double>{2, 4});
  // The session came back under its old id, with everything it held.
  CHECK(second.metric("courier_sessions") == 1);
  CHECK(second.metric("courier_object_uploads_total") == 2);
  std::vector<int32_t> ints = {4};
  std::string packed(reinterpret_cast<const char *>(ints.data()), 4);
  CHECK(require(backend->call(session, "courier_object_negate", packed, 4)).size() == 4);
  requireOk(backend->closeSession(session));
}

TEST_CASE("a restarted executor that lost only its objects gets them again", "[http]") {
  Fixture f;
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  requireOk(f.backend->shipObject(f.session, scale));
  // Another session, then a launch naming an object this executor never saw.
  std::string fresh = require(f.backend->openSession());
  std::vector<double> x = {3};
  auto r = require(f.backend->launch(fresh, loadObject(COURIER_KERNEL_SCALE3), kScale,
                                     {view(x, {1})}, {{1, 8}}));
  CHECK(valuesOf<double>(r[0]) == std::vector<double>{9});
}

TEST_CASE("launch failures name the operation and keep the wire code", "[http]") {
  Fixture f;
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  requireOk(f.backend->shipObject(f.session, scale));
  std::vector<double> x = {1};
  CHECK_THAT(errorOf(f.backend->launch(f.session, scale, "_catalyst_pyface_nope", {view(x, {1})},
                                       {{1, 8}})),
             Catch::Contains("[unknown_entry]"));
  CHECK_THAT(errorOf(f.backend->shipObject(f.session, loadObject(COURIER_KERNEL_SCALE_TRUNCATED))),
             Catch::Contains("[invalid_object]"));
  CHECK_THAT(errorOf(f.backend->shipObject(f.session, loadObject(COURIER_KERNEL_UNRESOLVED))),
             Catch::Contains("courier_missing_function"));
  // Still serving.
  auto r = require(f.backend->launch(f.session, scale, kScale, {view(x, {1})}, {{1, 8}}));
  CHECK(valuesOf<double>(r[0]) == std::vector<double>{2});
}

TEST_CASE("health reports the executor's machine", "[http]") {
  Fixture f;
  Health health = require(f.backend->health());
  CHECK(!health.version.empty());
  CHECK(!health.triple.empty());
  CHECK(!health.cpu.empty());
  CHECK(!health.features.empty());
}

TEST_CASE("with a token, the backend must present it", "[http][security]") {
  ExecutorProcess executor(ExecutorConfig{0, "s3cret", {}});
  BackendOptions good;
  good.bearerToken = "s3cret";
  CHECK(require(connect(executor, good)->openSession()).size() > 0);
  BackendOptions bad;
  bad.bearerToken = "guess";
  CHECK_THAT(errorOf(connect(executor, bad)->openSession()), Catch::Contains("[unauthorized]"));
  CHECK_THAT(errorOf(connect(executor)->openSession()), Catch::Contains("[unauthorized]"));
}

TEST_CASE("an unreachable executor is reported with its address", "[http]") {
  BackendOptions options;
  options.connectTimeout = std::chrono::milliseconds(500);
  auto backend = require(createHttpBackend("127.0.0.1:1", options));
  CHECK_THAT(errorOf(backend->openSession()),
             Catch::Contains("opening a session on 127.0.0.1:1: cannot connect"));
}
