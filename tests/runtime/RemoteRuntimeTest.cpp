// The C ABI end to end against a real courier-executor process over HTTP.
#include "runtime/Runtime.h"

#include "tests/kernels/KernelPaths.h"
#include "tests/transport/ExecutorProcess.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

using namespace courier;
using namespace courier::runtime;

namespace {

/// Marks result storage as Courier's lowering does, so its sizes are the expected shape.
void *const kMarker = reinterpret_cast<void *>(COURIER_EXPECTED_SHAPE_MARKER);

struct Descriptor1 {
  void *allocated = nullptr;
  void *aligned = kMarker;
  int64_t offset = 0;
  int64_t sizes[1] = {};
  int64_t strides[1] = {};
};

/// A message launchVector() took from the thread, kept for takeMessage().
std::optional<std::string> pendingMessage;

std::string takeMessage() {
  if (pendingMessage)
    return std::exchange(pendingMessage, std::nullopt).value();
  llvm::Error error = takeError();
  return error ? llvm::toString(std::move(error)) : std::string();
}

/// Launches `entry` on a 1-D f64 vector; returns 1 when it recorded an error (kept for
/// takeMessage()), else 0, and fills `result`.
int32_t launchVector(int64_t session, const char *entry, const char *object, std::vector<double> x,
                     std::vector<double> &result, int64_t expected = -1) {
  Descriptor1 in, out;
  in.allocated = in.aligned = x.data();
  in.sizes[0] = int64_t(x.size());
  in.strides[0] = 1;
  out.sizes[0] = expected;
  void *ins[] = {&in}, *outs[] = {&out};
  size_t ranks[] = {1}, sizes[] = {8};
  __catalyst__executor__launch(session, entry, object, 1, ins, ranks, sizes, 1, outs, ranks, sizes);
  llvm::Error error = takeError();
  int32_t status = error ? 1 : 0;
  if (error)
    pendingMessage = llvm::toString(std::move(error));
  auto *data = static_cast<double *>(out.aligned);
  result.assign(data, data + out.sizes[0]);
  std::free(out.allocated);
  return status;
}

} // namespace

TEST_CASE("the C ABI launches and calls on a remote executor", "[runtime][http]") {
  testing::ExecutorProcess executor({0, "", {"--plugin", COURIER_TEST_PLUGIN}});
  clearError();
  int64_t session = __catalyst__executor__open(executor.address().c_str());
  REQUIRE(session != 0);
  CHECK(__catalyst__executor__open(executor.address().c_str()) == session);
  REQUIRE(__catalyst__executor__send_binary(session, COURIER_KERNEL_SCALE,
                                            COURIER_BINARY_FORMAT_OBJECT) == 0);

  std::vector<double> y;
  REQUIRE(launchVector(session, "_catalyst_pyface_scale", COURIER_KERNEL_SCALE, {1, 2, 3}, y) == 0);
  CHECK(y == std::vector<double>{2, 4, 6});
  // Never sent: shipped on first use.
  REQUIRE(launchVector(session, "_catalyst_pyface_scale", COURIER_KERNEL_SCALE3, {1}, y) == 0);
  CHECK(y == std::vector<double>{3});

  double values[2] = {0.5, 0.25};
  void *out = kMarker;
  size_t outSize = 8;
  REQUIRE(__catalyst__executor__call_wrapper(session, "courier_test_sum",
                                             reinterpret_cast<const char *>(values), 16, &out,
                                             &outSize) == 0);
  CHECK(*static_cast<double *>(out) == 0.75);
  __catalyst__executor__free_result(out);

  // An empty reply ends like any other (a zero-length stream would never end).
  out = kMarker;
  outSize = 0;
  REQUIRE(__catalyst__executor__call_wrapper(session, "courier_test_nothing", nullptr, 0, &out,
                                             &outSize) == 0);
  CHECK(outSize == 0);
  __catalyst__executor__free_result(out);

  int64_t token =
      __catalyst__executor__launch_async(session, "_catalyst_pyface_noop", COURIER_KERNEL_SHAPES);
  REQUIRE(token != 0);
  __catalyst__executor__await(token);
  CHECK(takeMessage() == "");
  CHECK(__catalyst__executor__close(session) == 0);
}

TEST_CASE("remote failures carry the executor's message and the address", "[runtime][http]") {
  testing::ExecutorProcess executor;
  clearError();
  int64_t session = __catalyst__executor__open(executor.address().c_str());
  REQUIRE(session != 0);

  std::vector<double> y;
  CHECK(launchVector(session, "_catalyst_pyface_nope", COURIER_KERNEL_SCALE, {1, 2}, y, 2) != 0);
  CHECK_THAT(takeMessage(), Catch::Contains(executor.address()) &&
                                Catch::Contains("unknown entry @nope in object"));
  CHECK(y == std::vector<double>{0, 0});

  CHECK(__catalyst__executor__send_binary(session, COURIER_KERNEL_SCALE_AARCH64,
                                          COURIER_BINARY_FORMAT_OBJECT) != 0);
  CHECK_THAT(takeMessage(),
             Catch::Contains(executor.address()) && Catch::Contains("is for aarch64"));

  void *out = kMarker;
  size_t outSize = 8;
  CHECK(__catalyst__executor__call_wrapper(session, "courier_nothing", nullptr, 0, &out,
                                           &outSize) != 0);
  CHECK_THAT(takeMessage(), Catch::Contains("courier_nothing"));
  __catalyst__executor__free_result(out);

  REQUIRE(launchVector(session, "_catalyst_pyface_scale", COURIER_KERNEL_SCALE, {4}, y) == 0);
  CHECK(y == std::vector<double>{8});
  CHECK(__catalyst__executor__close(session) == 0);
}

TEST_CASE("a scope's address override sends its sessions to a remote executor", "[runtime][http]") {
  testing::ExecutorProcess executor({0, "s3cret", {}});
  ScopeOptions options;
  options.addressOverride = executor.address();
  options.backend.bearerToken = "s3cret";
  ModuleScope scope(options);
  int64_t session;
  {
    ModuleScope::Entered entered(scope);
    session = __catalyst__executor__open("local");
  }
  REQUIRE(session != 0);
  std::vector<double> y;
  REQUIRE(launchVector(session, "scale", COURIER_KERNEL_SCALE, {5}, y) == 0);
  CHECK(y == std::vector<double>{10});
}

TEST_CASE("an object two scopes shipped is released on the executor when the second goes",
          "[runtime][http]") {
  testing::ExecutorProcess executor({0, "", {"--object-grace", "1"}});
  clearError();
  // Opened outside any scope, so the session outlives both and only the object goes.
  int64_t session = __catalyst__executor__open(executor.address().c_str());
  REQUIRE(session != 0);
  auto first = std::make_unique<ModuleScope>(ScopeOptions{});
  auto second = std::make_unique<ModuleScope>(ScopeOptions{});
  for (ModuleScope *scope : {first.get(), second.get()}) {
    ModuleScope::Entered entered(*scope);
    REQUIRE(__catalyst__executor__send_binary(session, COURIER_KERNEL_SCALE,
                                              COURIER_BINARY_FORMAT_OBJECT) == 0);
  }
  CHECK(executor.metric("courier_object_uploads_total") == 1);
  CHECK(executor.metric("courier_attached_objects") == 1);

  first.reset();
  CHECK(executor.metric("courier_attached_objects") == 1);
  CHECK(executor.metric("courier_objects") == 1);

  second.reset();
  CHECK(executor.metric("courier_attached_objects") == 0);
  // Unheld, the bytes go after the grace period; the session stays.
  CHECK(executor.awaitMetricAtMost("courier_objects", 0) == 0);
  CHECK(executor.metric("courier_object_bytes") == 0);
  CHECK(executor.metric("courier_sessions") == 1);

  // The executor keeps serving the session: a launch ships the object anew.
  std::vector<double> y;
  REQUIRE(launchVector(session, "scale", COURIER_KERNEL_SCALE, {3}, y) == 0);
  CHECK(y == std::vector<double>{6});
  CHECK(executor.metric("courier_object_uploads_total") == 2);
  CHECK(executor.metric("courier_attached_objects") == 1);
  CHECK(takeMessage() == "");
  CHECK(__catalyst__executor__close(session) == 0);
}

TEST_CASE("an unreachable executor fails to open with its address", "[runtime][http]") {
  std::string address;
  {
    testing::ExecutorProcess executor;
    address = executor.address();
  }
  ScopeOptions options;
  options.backend.connectTimeout = std::chrono::milliseconds(500);
  ModuleScope scope(options);
  ModuleScope::Entered entered(scope);
  clearError();
  CHECK(__catalyst__executor__open(address.c_str()) == 0);
  CHECK_THAT(takeMessage(), Catch::Contains(address));
}
TEST_CASE("a launch after the executor restarts in place succeeds", "[runtime][http]") {
  int port;
  clearError();
  int64_t session;
  std::vector<double> y;
  auto first = std::make_unique<testing::ExecutorProcess>();
  port = first->port();
  session = __catalyst__executor__open(first->address().c_str());
  REQUIRE(session != 0);
  REQUIRE(launchVector(session, "scale", COURIER_KERNEL_SCALE, {1}, y) == 0);
  first->kill();
  first.reset();
  testing::ExecutorProcess second({port, "", {}});
  int32_t status = launchVector(session, "scale", COURIER_KERNEL_SCALE, {2}, y);
  INFO(takeMessage());
  CHECK(status == 0);
  CHECK(y == std::vector<double>{4});
}

TEST_CASE("sessions left open at exit are closed on the executor", "[runtime][http]") {
  testing::ExecutorProcess executor;
  std::string command =
      std::string(COURIER_EXIT_CHECK_PATH) + " " + executor.address() + " > /dev/null";
  CHECK(std::system(command.c_str()) == 0);
  CHECK(executor.metric("courier_sessions") == 0);
  // The executor logs a request after answering it, so the line may trail the exit.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (executor.log().find("DELETE /v1/sessions/") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK_THAT(executor.log(), Catch::Contains("DELETE /v1/sessions/"));
}
