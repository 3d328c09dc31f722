// The engine with Isolation::Process: modules compiled and run in real courier-module-worker
// processes, answering as in-process modules do, while crashes, timeouts and the sandbox
// cost only the call that met them.
#include "jit/Engine.h"
#include "tests/jit/TestSupport.h"
#include "tests/support/HostileModules.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <csignal>
#include <thread>
#include <unistd.h>

using namespace courier;
using namespace courier::testing;

namespace {

EngineOptions isolated() {
  EngineOptions options;
  options.isolation = Isolation::Process;
  options.diskCache = false;
  return options;
}

Tensor vector4() { return Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4}); }
Tensor scalar(int64_t value) {
  return Tensor::fromDoubles(DType::I64, {}, {static_cast<double>(value)});
}

/// The kind and message of an EngineError; Internal and the text for anything else.
std::pair<ErrorCode, std::string> kindOf(llvm::Error error) {
  std::pair<ErrorCode, std::string> result{ErrorCode::Internal, ""};
  llvm::handleAllErrors(
      std::move(error),
      [&](const EngineError &e) {
        result = {e.kind, e.message};
      },
      [&](const llvm::ErrorInfoBase &e) { result.second = e.message(); });
  return result;
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("an isolated module answers as the in-process one does, from another process",
          "[isolation]") {
  Engine inProcess(EngineOptions{});
  Engine engine(isolated());
  auto local = inProcess.compile(kHostileModule, "app");
  auto remote = engine.compile(kHostileModule, "app");
  REQUIRE(ok(local));
  REQUIRE(ok(remote));
  const Module &module = **remote;
  REQUIRE(module.entries().size() == (*local)->entries().size());
  for (size_t i = 0; i < module.entries().size(); ++i) {
    CHECK(module.entries()[i].name == (*local)->entries()[i].name);
    CHECK(module.entries()[i].inputs.size() == (*local)->entries()[i].inputs.size());
  }
  auto out = module.invoke("main", {vector4()});
  REQUIRE(ok(out));
  REQUIRE(out->size() == 1);
  CHECK((*out)[0].at(3) == 8);
  CHECK(module.rawEntry("main") == nullptr);
  CHECK((*local)->rawEntry("main") != nullptr);
  WorkerState state = module.workerState();
  CHECK(state.isolated);
  CHECK(state.pid > 0);
  CHECK(state.pid != ::getpid());
  CHECK(state.restarts == 0);
  CHECK_FALSE((*local)->workerState().isolated);
  CHECK(module.compileTimes().parse > 0);
  // Inputs that do not fit are refused with the in-process engine's kind and words.
  auto wrong = module.invoke("main", {scalar(1)});
  REQUIRE(!wrong);
  auto [kind, message] = kindOf(wrong.takeError());
  CHECK(kind == ErrorCode::InvalidInput);
  CHECK(contains(message, "input 0 of 'main'"));
  auto unknown = module.invoke("nope", {});
  REQUIRE(!unknown);
  CHECK(kindOf(unknown.takeError()).first == ErrorCode::UnknownEntry);
}

TEST_CASE("a compile error in a worker carries every diagnostic to the caller and its sink",
          "[isolation]") {
  EngineOptions options = isolated();
  std::vector<Diagnostic> seen;
  options.diagnosticSink = [&](const Diagnostic &d) { seen.push_back(d); };
  Engine engine(options);
  auto broken = engine.compile("module {\n  func.func @f() {\n    return %x : f32\n  }\n}", "b");
  REQUIRE(!broken);
  bool checked = false;
  llvm::handleAllErrors(broken.takeError(), [&](const CompileError &e) {
    REQUIRE(!e.diagnostics.empty());
    CHECK(e.diagnostics[0].line == 3);
    CHECK(e.diagnostics[0].column == 12);
    CHECK(e.diagnostics[0].severity == "error");
    CHECK(e.diagnostics[0].sourceLine == "    return %x : f32");
    checked = true;
  });
  CHECK(checked);
  REQUIRE(!seen.empty());
  CHECK(seen[0].line == 3);
}

TEST_CASE("a crash fails its call with KernelCrashed, the next call gets a fresh worker",
          "[isolation]") {
  Engine engine(isolated());
  auto module = engine.compile(kHostileModule, "app");
  REQUIRE(ok(module));
  int first = (*module)->workerState().pid;
  auto crashed = (*module)->invoke("crash", {vector4()});
  REQUIRE(!crashed);
  auto [kind, message] = kindOf(crashed.takeError());
  CHECK(kind == ErrorCode::KernelCrashed);
  CHECK(contains(message, "SIGSEGV (address 0x0)"));
  CHECK(contains(message, "'crash'"));
  WorkerState after = (*module)->workerState();
  CHECK(after.pid == 0);
  CHECK(after.crashes == 1);
  CHECK(contains(after.lastDeath, "SIGSEGV"));

  auto again = (*module)->invoke("main", {vector4()});
  REQUIRE(ok(again));
  CHECK((*again)[0].at(0) == 2);
  WorkerState restarted = (*module)->workerState();
  CHECK(restarted.restarts == 1);
  CHECK(restarted.pid > 0);
  CHECK(restarted.pid != first);
}

TEST_CASE("the sandbox stops a module starting a process or signalling its parent", "[isolation]") {
  Engine engine(isolated());
  auto module = engine.compile(kHostileModule, "app");
  REQUIRE(ok(module));
  for (const char *entry : {"spawn", "killParent"}) {
    INFO(entry);
    auto refused = (*module)->invoke(entry, {scalar(0)});
    REQUIRE(!refused);
    auto [kind, message] = kindOf(refused.takeError());
    CHECK(kind == ErrorCode::KernelCrashed);
    CHECK(contains(message, "SIGSYS (system call "));
  }
  // This process was the parent: it is still here, and the module still serves.
  auto fine = (*module)->invoke("main", {vector4()});
  REQUIRE(ok(fine));
}

TEST_CASE("timeouts end the worker with DeadlineExceeded, per engine and per call", "[isolation]") {
  EngineOptions options = isolated();
  options.invokeTimeout = std::chrono::milliseconds(200);
  Engine engine(options);
  auto module = engine.compile(kHostileModule, "app");
  REQUIRE(ok(module));
  int spinning = (*module)->workerState().pid;
  auto start = std::chrono::steady_clock::now();
  auto spun = (*module)->invoke("spin", {scalar(1)});
  REQUIRE(!spun);
  auto [kind, message] = kindOf(spun.takeError());
  CHECK(kind == ErrorCode::DeadlineExceeded);
  CHECK(contains(message, "200 ms"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  CHECK(::kill(spinning, 0) != 0); // Gone, and reaped.

  InvokeOptions call;
  call.timeout = std::chrono::milliseconds(50);
  auto quick = (*module)->invoke("spin", {scalar(1)}, call);
  REQUIRE(!quick);
  auto [quickKind, quickMessage] = kindOf(quick.takeError());
  CHECK(quickKind == ErrorCode::DeadlineExceeded);
  CHECK(contains(quickMessage, "50 ms"));
  REQUIRE(ok((*module)->invoke("main", {vector4()})));

  // A compile that would run for many seconds ends at its own deadline.
  EngineOptions unlimited = isolated();
  unlimited.maxConstantBytes = 0;
  Engine slow(unlimited);
  CompileOptions compile;
  compile.timeout = std::chrono::milliseconds(300);
  auto huge = slow.compile("func.func @big() -> tensor<100000000xf32> {\n"
                           "  %c = arith.constant dense<1.0> : tensor<100000000xf32>\n"
                           "  return %c : tensor<100000000xf32>\n}\n",
                           "huge", compile);
  REQUIRE(!huge);
  auto [hugeKind, hugeMessage] = kindOf(huge.takeError());
  CHECK(hugeKind == ErrorCode::DeadlineExceeded);
  CHECK(contains(hugeMessage, "compiling module 'huge' took longer than 300 ms"));
}

TEST_CASE("terminate ends a call still running, and every later one", "[isolation]") {
  Engine engine(isolated());
  auto module = engine.compile(kHostileModule, "app");
  REQUIRE(ok(module));
  std::shared_ptr<Module> held = *module;
  std::pair<ErrorCode, std::string> outcome{ErrorCode::Internal, "not run"};
  std::thread caller([&] {
    auto spun = held->invoke("spin", {scalar(1)});
    if (!spun)
      outcome = kindOf(spun.takeError());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  held->terminate();
  caller.join();
  CHECK(outcome.first == ErrorCode::UnknownModule);
  auto later = held->invoke("main", {vector4()});
  REQUIRE(!later);
  CHECK(kindOf(later.takeError()).first == ErrorCode::UnknownModule);
}

TEST_CASE("a worker program that cannot start is WorkerUnavailable, naming it", "[isolation]") {
  EngineOptions options = isolated();
  options.workerProgram = "/nonexistent/courier-module-worker";
  options.warmWorkers = 0;
  Engine engine(options);
  auto module = engine.compile(kHostileModule, "app");
  REQUIRE(!module);
  auto [kind, message] = kindOf(module.takeError());
  CHECK(kind == ErrorCode::WorkerUnavailable);
  CHECK(contains(message, "/nonexistent/courier-module-worker"));
}
