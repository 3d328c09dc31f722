// Code for the CPU that runs it: an object records the CPU features it needs, an executor
// whose CPU lacks one refuses it (unsupported_cpu), and a target sent to an executor is
// compiled for the CPU that executor reports, or for its triple's generic CPU when it cannot
// be asked.
#include "jit/Engine.h"

#include "executor/ElfValidation.h"
#include "executor/HostCpu.h"
#include "passes/TargetModules.h"
#include "tests/jit/TestSupport.h"
#include "tests/kernels/KernelPaths.h"
#include "tests/transport/ExecutorProcess.h"
#include "transport/HttpBackend.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/TargetParser/Host.h"

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <thread>

using namespace courier;
using namespace courier::testing;

namespace {

/// A program whose kernel runs at `address`, with the `catalyst.target` attributes `target`.
std::string program(const std::string &address, const std::string &target = "") {
  return scaleProgram(address, "%r = arith.addf %x, %x : tensor<4xf64>", target);
}

std::string messageOf(llvm::Error error) { return llvm::toString(std::move(error)); }

/// Why `module` failed to compile or, compiled, failed to run its entry: one or the other must.
std::string refusal(llvm::Expected<std::shared_ptr<Module>> &module) {
  if (!module)
    return messageOf(module.takeError());
  auto out = (*module)->invoke("main", {Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4})});
  REQUIRE(failed(out));
  return messageOf(out.takeError());
}

/// A feature this machine's CPU lacks, for an object to claim; empty if it has them all.
std::string featureThisCpuLacks() {
#if defined(__x86_64__)
  const char *candidates[] = {"amx-tile", "avx512fp16", "amx-int8", "avx10.2"};
#elif defined(__aarch64__)
  const char *candidates[] = {"sme", "sme2", "sve2p1"};
#else
  const char *candidates[] = {""};
#endif
  for (const char *feature : candidates)
    if (*feature && !executor::missingHostFeatures({feature}).empty())
      return feature;
  return "";
}

/// The objects the engine cached in `dir`: the host's and the target modules'.
std::vector<std::string> objectsIn(const TempDir &dir) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (llvm::sys::fs::recursive_directory_iterator it(dir.path, ec), end; it != end && !ec;
       it.increment(ec))
    if (llvm::sys::path::extension(it->path()) == ".o")
      paths.push_back(it->path());
  return paths;
}

/// The features record of the object at `path`.
std::vector<std::string> recordOf(const std::string &path) {
  llvm::Expected<std::vector<std::string>> record =
      executor::readRequiredFeatures(path, readFile(path));
  REQUIRE(ok(record));
  return *record;
}

/// The features records of the objects the engine cached in `dir`, the empty ones (host
/// code, code for a generic CPU) left out.
std::vector<std::vector<std::string>> recordsIn(const TempDir &dir) {
  std::vector<std::vector<std::string>> records;
  for (const std::string &path : objectsIn(dir))
    if (std::vector<std::string> record = recordOf(path); !record.empty())
      records.push_back(std::move(record));
  return records;
}

/// What code for the executor at `address` records it needs, by what it reports.
std::vector<std::string> requiredFor(const std::string &address) {
  llvm::Expected<transport::ExecutorCpu> cpu = transport::askExecutorCpu(
      address, {}, std::chrono::milliseconds(2000), std::chrono::milliseconds(5000));
  REQUIRE(ok(cpu));
  return getRequiredFeatures(
      getReportedTargetCpu(llvm::sys::getProcessTriple(), cpu->cpu, cpu->features));
}

} // namespace

TEST_CASE("an executor refuses an object needing a feature its CPU lacks, naming it, and the "
          "session goes on",
          "[engine][executor][cpu]") {
  std::string lacking = featureThisCpuLacks();
  if (lacking.empty()) {
    WARN("skipped: this machine's CPU has every feature the test could claim");
    return;
  }
  testing::ExecutorProcess executor;
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(
      program(executor.address(), "cpu = \"generic\", features = \"+" + lacking + "\""), "lacking");
  std::string text = refusal(module);
  CHECK_THAT(text, Catch::Contains("unsupported_cpu"));
  CHECK_THAT(text, Catch::Contains(lacking));

  // The object records what it claims; the executor did not keep it.
  std::vector<std::vector<std::string>> records = recordsIn(dir);
  REQUIRE(records.size() == 1);
  CHECK(llvm::is_contained(records[0], lacking));
  CHECK(executor.metric("courier_objects") == 0);

  // On one session: the refused object, then one without a record, which loads and runs.
  std::string refused;
  for (const std::string &path : objectsIn(dir))
    if (!recordOf(path).empty())
      refused = readFile(path);
  REQUIRE(!refused.empty());
  auto backend = transport::createHttpBackend(executor.address(), {});
  REQUIRE(ok(backend));
  auto session = (*backend)->openSession();
  REQUIRE(ok(session));
  llvm::Error shipped = (*backend)->shipObject(*session, transport::ObjectBlob::fromBytes(refused));
  bool refusedToShip = static_cast<bool>(shipped);
  REQUIRE(refusedToShip);
  llvm::handleAllErrors(std::move(shipped), [&](const transport::CodedError &e) {
    CHECK(e.kind == ErrorCode::UnsupportedCpu);
    CHECK_THAT(e.message, Catch::Contains(lacking));
  });
  transport::ObjectBlob plain = transport::ObjectBlob::fromBytes(readFile(COURIER_KERNEL_SCALE));
  CHECK(messageOf((*backend)->shipObject(*session, plain)).empty());
  std::vector<double> input = {1, 2, 3, 4};
  transport::TensorView view{input.data(), 8, {4}, {1}};
  auto results = (*backend)->launch(*session, plain, "_catalyst_pyface_scale", {view}, {{1, 8}});
  REQUIRE(ok(results));
  const double *out = static_cast<const double *>((*results)[0].data);
  CHECK(std::vector<double>(out, out + 4) == std::vector<double>{2, 4, 6, 8});
}

TEST_CASE("the in-process executor refuses an object needing a feature this CPU lacks",
          "[engine][cpu]") {
  std::string lacking = featureThisCpuLacks();
  if (lacking.empty()) {
    WARN("skipped: this machine's CPU has every feature the test could claim");
    return;
  }
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(program("local", "features = \"+" + lacking + "\""), "lacking");
  std::string text = refusal(module);
  CHECK_THAT(text, Catch::Contains("unsupported_cpu"));
  CHECK_THAT(text, Catch::Contains(lacking));
}

TEST_CASE("an object without a features record runs on any executor of its architecture",
          "[engine][executor][cpu]") {
  testing::ExecutorProcess executor;
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(program(executor.address(), "cpu = \"generic\""), "generic");
  REQUIRE(ok(module));
  CHECK(recordsIn(dir).empty());
  CHECK(objectsIn(dir).size() >= 2); // The host's and the target's.
  auto out = (*module)->invoke("main", {Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4})});
  REQUIRE(ok(out));
  CHECK(values((*out)[0]) == std::vector<double>{2, 4, 6, 8});
}

TEST_CASE("a target sent to an executor without a cpu is compiled for the executor's CPU",
          "[engine][executor][cpu]") {
  testing::ExecutorProcess executor;
  std::vector<std::string> expected = requiredFor(executor.address());
#if defined(__x86_64__)
  // Every x86-64 server CPU has more than the generic one (SSE3 and up).
  CHECK(!expected.empty());
#endif
  SECTION("by its address") {
    TempDir dir;
    Engine engine(optionsIn(dir));
    auto module = engine.compile(program(executor.address()), "remote");
    REQUIRE(ok(module));
    std::vector<std::vector<std::string>> records = recordsIn(dir);
    if (expected.empty()) {
      CHECK(records.empty());
    } else {
      REQUIRE(records.size() == 1);
      CHECK(records[0] == expected);
    }
    CHECK(executor::missingHostFeatures(expected).empty());
    auto out = (*module)->invoke("main", {Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4})});
    REQUIRE(ok(out));
    CHECK(values((*out)[0]) == std::vector<double>{2, 4, 6, 8});
  }
  SECTION("through the executor override, whatever address the IR names") {
    TempDir dir;
    EngineOptions options = optionsIn(dir);
    options.executorOverride = executor.address();
    Engine engine(options);
    auto module = engine.compile(program("127.0.0.1:1"), "override");
    REQUIRE(ok(module));
    std::vector<std::vector<std::string>> records = recordsIn(dir);
    if (!expected.empty()) {
      REQUIRE(records.size() == 1);
      CHECK(records[0] == expected);
    }
    auto out = (*module)->invoke("main", {Tensor::fromDoubles(DType::F64, {4}, {1, 1, 1, 1})});
    REQUIRE(ok(out));
    CHECK(values((*out)[0]) == std::vector<double>{2, 2, 2, 2});
  }
}

TEST_CASE("an executor that cannot tell its CPU gets code for the generic CPU, asked once",
          "[engine][cpu]") {
  // An executor too old to report its CPU: health without one. Its answers are counted.
  httplib::Server old;
  std::atomic<int> asked{0};
  old.Get("/v1/health", [&](const httplib::Request &, httplib::Response &res) {
    asked++;
    res.set_content(R"({"status":"ok","version":"0.1"})", "application/json");
  });
  int port = old.bind_to_any_port("127.0.0.1");
  REQUIRE(port > 0);
  std::thread serving([&] { old.listen_after_bind(); });
  std::string address = "127.0.0.1:" + std::to_string(port);

  TempDir dir;
  EngineOptions options = optionsIn(dir);
  options.executors.connectTimeout = std::chrono::milliseconds(500);
  Engine engine(options);
  auto start = std::chrono::steady_clock::now();
  // Loading fails (it is no executor), compiling does not: the object is made and cached.
  auto first = engine.compile(program(address), "old");
  if (!first)
    llvm::consumeError(first.takeError());
  auto second = engine.compile(program(address) + "\n// again\n", "old");
  if (!second)
    llvm::consumeError(second.takeError());
  CHECK(recordsIn(dir).empty());
  CHECK(!objectsIn(dir).empty());
  CHECK(asked == 1);
  while (!old.is_running())
    std::this_thread::yield();
  old.stop();
  serving.join();

  // Nobody listens on port 1: the compile falls back at once.
  TempDir other;
  Engine unreachable(optionsIn(other));
  auto down = unreachable.compile(program("127.0.0.1:1"), "down");
  if (!down)
    llvm::consumeError(down.takeError());
  CHECK(recordsIn(other).empty());
  CHECK(!objectsIn(other).empty());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
}

TEST_CASE("cpu = \"native\" in process is this machine's CPU", "[engine][cpu]") {
  TempDir unnamed, native;
  auto plain = Engine(optionsIn(unnamed)).compile(program("local"), "plain");
  REQUIRE(ok(plain));
  auto named = Engine(optionsIn(native)).compile(program("local", "cpu = \"native\""), "native");
  REQUIRE(ok(named));
  CHECK(recordsIn(native) == recordsIn(unnamed));
#if defined(__x86_64__)
  CHECK(!recordsIn(native).empty());
#endif
  auto out = (*named)->invoke("main", {Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4})});
  REQUIRE(ok(out));
  CHECK(values((*out)[0]) == std::vector<double>{2, 4, 6, 8});
}

#if defined(__x86_64__)
TEST_CASE("cpu = \"native\" for an executor is the CPU that executor reports, or generic when "
          "it cannot be asked",
          "[engine][cpu]") {
  // An executor that says it runs on an x86-64-v2 CPU: code for this machine's (with AVX) would
  // be refused there. Only its health is answered; loading then fails, compiling does not.
  const std::vector<std::string> v2 = {"sse3",   "ssse3", "sse4.1", "sse4.2",
                                       "popcnt", "cx16",  "sahf"};
  std::vector<std::string> expected =
      getRequiredFeatures(getReportedTargetCpu(llvm::sys::getProcessTriple(), "x86-64-v2", v2));
  REQUIRE(!expected.empty());
  httplib::Server reporter;
  reporter.Get("/v1/health", [&](const httplib::Request &, httplib::Response &res) {
    nlohmann::json body = {{"status", "ok"},
                           {"version", "0.1"},
                           {"triple", llvm::sys::getProcessTriple()},
                           {"cpu", "x86-64-v2"},
                           {"features", v2}};
    res.set_content(body.dump(), "application/json");
  });
  int port = reporter.bind_to_any_port("127.0.0.1");
  REQUIRE(port > 0);
  std::thread serving([&] { reporter.listen_after_bind(); });
  std::string address = "127.0.0.1:" + std::to_string(port);

  TempDir dir;
  auto reported = Engine(optionsIn(dir)).compile(program(address, "cpu = \"native\""), "v2");
  if (!reported)
    llvm::consumeError(reported.takeError());
  while (!reporter.is_running())
    std::this_thread::yield();
  reporter.stop();
  serving.join();
  CHECK(recordsIn(dir) == std::vector<std::vector<std::string>>{expected});

  // Nobody listens on port 1; and an aarch64 executor's CPU is not this one either way.
  for (std::string target :
       {"cpu = \"native\"", "triple = \"aarch64-unknown-linux-gnu\", cpu = \"native\""}) {
    INFO(target);
    TempDir down;
    auto compiled = Engine(optionsIn(down)).compile(program("127.0.0.1:1", target), "down");
    if (!compiled) {
      std::string message = messageOf(compiled.takeError());
      CHECK_THAT(message, !Catch::Contains("unknown CPU"));
    }
    CHECK(recordsIn(down).empty());
    CHECK(!objectsIn(down).empty());
  }
}
#endif
