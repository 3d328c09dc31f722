// The local backend and the backend factory: sessions over the object host, implicit
// shipping, releasing objects, async launches and plugin calls.
#include "transport/Backend.h"

#include "tests/runtime/TestSupport.h"

#include "llvm/TargetParser/Host.h"

#include <cstring>

using namespace courier;
using namespace courier::test;

namespace {

std::unique_ptr<transport::Backend> local(std::vector<std::string> plugins = {}) {
  transport::BackendOptions options;
  options.plugins = std::move(plugins);
  auto backend = transport::createBackend("local", options);
  if (!backend)
    FAIL(llvm::toString(backend.takeError()));
  return std::move(*backend);
}

std::string open(transport::Backend &backend) {
  auto session = backend.openSession();
  if (!session)
    FAIL(llvm::toString(session.takeError()));
  return *session;
}

} // namespace

TEST_CASE("a malformed address is rejected before any connection", "[backend]") {
  for (const char *address : {"nonsense", "host:", ":80", "host:0", "host:65536", "host:http",
                              "a:b:80", "[::1:80", "http://host:80"}) {
    INFO(address);
    auto backend = transport::createBackend(address, {});
    CHECK_THAT(failure(std::move(backend)),
               Catch::Contains(std::string("bad executor address '") + address + "'") &&
                   Catch::Contains("host:port"));
  }
}

TEST_CASE("a well-formed remote address goes to the http backend", "[backend]") {
  // Whatever the http backend does with an unreachable port, it is not an address error.
  transport::BackendOptions options;
  options.connectTimeout = std::chrono::milliseconds(200);
  auto backend = transport::createBackend("127.0.0.1:1", options);
  if (!backend)
    CHECK_THAT(llvm::toString(backend.takeError()), !Catch::Contains("bad executor address"));
}

TEST_CASE("the local backend reports this machine's triple", "[backend]") {
  auto backend = local();
  CHECK(backend->address() == "local");
  auto health = backend->health();
  REQUIRE(bool(health));
  CHECK(health->triple == llvm::sys::getProcessTriple());
  CHECK_FALSE(health->version.empty());
}

TEST_CASE("a local launch ships its object on first use", "[backend]") {
  auto backend = local();
  std::string session = open(*backend);
  auto scale = kernel(COURIER_KERNEL_SCALE);
  std::vector<double> x{1, 2};
  auto out =
      backend->launch(session, scale, "_catalyst_pyface_scale", {view(x, {2}, {1})}, {{1, 8}});
  REQUIRE(bool(out));
  CHECK(elements<double>((*out)[0]) == std::vector<double>{2, 4});
  REQUIRE_OK(backend->shipObject(session, scale));
  REQUIRE_OK(backend->closeSession(session));
}

TEST_CASE("local sessions are independent", "[backend]") {
  auto backend = local();
  std::string first = open(*backend);
  std::string second = open(*backend);
  CHECK(first != second);
  REQUIRE_OK(backend->closeSession(first));
  auto scale = kernel(COURIER_KERNEL_SCALE);
  CHECK_THAT(failure(backend->shipObject(first, scale)),
             Catch::Contains("local") && Catch::Contains(first));
  REQUIRE_OK(backend->shipObject(second, scale));
  CHECK_THAT(failure(backend->closeSession(first)), Catch::Contains(first));
}

TEST_CASE("a released local object leaves only its session, releasing it again is no error",
          "[backend]") {
  auto backend = local();
  std::string first = open(*backend);
  std::string second = open(*backend);
  auto add = kernel(COURIER_KERNEL_ADD);
  REQUIRE_OK(backend->shipObject(first, add));
  REQUIRE_OK(backend->shipObject(second, add));
  std::vector<int32_t> ints{3, -4};
  llvm::StringRef input(reinterpret_cast<const char *>(ints.data()), 8);

  REQUIRE_OK(backend->releaseObject(first, add.sha256));
  CHECK_THAT(failure(backend->call(first, "courier_object_negate", input, 8)),
             Catch::Contains("unknown symbol 'courier_object_negate'"));
  CHECK(bool(backend->call(second, "courier_object_negate", input, 8)));
  REQUIRE_OK(backend->releaseObject(first, add.sha256));
  REQUIRE_OK(backend->releaseObject(first, std::string(64, '0')));

  // A launch after the release ships the object again, as after an executor restart.
  auto scale = kernel(COURIER_KERNEL_SCALE);
  REQUIRE_OK(backend->shipObject(first, scale));
  REQUIRE_OK(backend->releaseObject(first, scale.sha256));
  std::vector<double> x{1};
  auto out = backend->launch(first, scale, "_catalyst_pyface_scale", {view(x, {1}, {1})}, {{1, 8}});
  REQUIRE(bool(out));
  CHECK(elements<double>((*out)[0]) == std::vector<double>{2});
}

TEST_CASE("an async local launch is awaited once", "[backend]") {
  auto backend = local();
  std::string session = open(*backend);
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  auto id = backend->launchAsync(session, shapes, "_catalyst_pyface_noop");
  REQUIRE(bool(id));
  REQUIRE_OK(backend->await(session, *id));
  CHECK_THAT(failure(backend->await(session, *id)), Catch::Contains("already awaited"));

  // An entry the object lacks is refused at once, as a remote executor does.
  auto missing = backend->launchAsync(session, shapes, "_catalyst_pyface_nowhere");
  REQUIRE_FALSE(bool(missing));
  CHECK_THAT(llvm::toString(missing.takeError()),
             Catch::Contains("no entry '_catalyst_pyface_nowhere'") &&
                 Catch::Contains("[unknown_entry]"));
}

TEST_CASE("a session closes with async launches pending, which finish on their own", "[backend]") {
  auto backend = local();
  std::string session = open(*backend);
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  for (int i = 0; i < 4; ++i)
    REQUIRE(bool(backend->launchAsync(session, shapes, "_catalyst_pyface_noop")));
  REQUIRE_OK(backend->closeSession(session));
}

TEST_CASE("a local call reaches the configured plugins", "[backend]") {
  auto backend = local({COURIER_TEST_PLUGIN});
  std::string session = open(*backend);
  double values[2] = {1.25, 2};
  auto reply = backend->call(session, "courier_test_sum",
                             llvm::StringRef(reinterpret_cast<const char *>(values), 16), 8);
  REQUIRE(bool(reply));
  double sum;
  std::memcpy(&sum, reply->data(), 8);
  CHECK(sum == 3.25);
  CHECK_THAT(failure(backend->call(session, "courier_test_sum", "", 3)),
             Catch::Contains("local") && Catch::Contains("code 22"));
}

TEST_CASE("a local backend with a missing plugin is not created", "[backend]") {
  transport::BackendOptions options;
  options.plugins = {"/nonexistent/plugin.so"};
  CHECK_THAT(failure(transport::createBackend("local", options)),
             Catch::Contains("/nonexistent/plugin.so"));
}

TEST_CASE("the local backend refuses objects without signature tables and mismatched launches",
          "[backend]") {
  auto backend = local();
  std::string session = open(*backend);
  auto unsignedScale = kernel(COURIER_KERNEL_SCALE_UNSIGNED);
  CHECK_THAT(failure(backend->shipObject(session, unsignedScale)),
             Catch::Contains("[unsigned_object]"));
  std::vector<double> x{1, 2};
  CHECK_THAT(failure(backend->launch(session, unsignedScale, "_catalyst_pyface_scale",
                                     {view(x, {2}, {1})}, {{1, 8}})),
             Catch::Contains("[unsigned_object]"));

  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  CHECK_THAT(failure(backend->launch(session, shapes, "_catalyst_pyface_stats", {view(x, {2}, {1})},
                                     {{1, 8}, {0, 8}})),
             Catch::Contains("[signature_mismatch]"));
  // An async launch of an entry that takes arguments fails, and the session goes on.
  auto id = backend->launchAsync(session, shapes, "_catalyst_pyface_stats");
  if (id)
    CHECK_THAT(failure(backend->await(session, *id)), Catch::Contains("[signature_mismatch]"));
  else
    CHECK_THAT(llvm::toString(id.takeError()), Catch::Contains("[signature_mismatch]"));
  auto out = backend->launch(session, shapes, "_catalyst_pyface_stats", {view(x, {2}, {1})},
                             {{0, 8}, {1, 8}});
  REQUIRE(bool(out));
  CHECK(elements<double>((*out)[1]) == std::vector<double>{1, 3});
}
