// Failover through the front door: a program whose two target modules run on a pool of three
// executors behind nginx (scripts/pool.sh) keeps every result right while the executor
// holding its session is killed with SIGKILL mid-run, and while another drains on SIGTERM.
#include "jit/Engine.h"

#include "tests/deploy/PoolProcess.h"
#include "tests/jit/TestSupport.h"

#include <catch2/catch.hpp>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <future>
#include <thread>
#include <unistd.h>

using namespace courier;
using namespace courier::testing;

namespace {

/// Two target modules, each doubling or incrementing on whatever executor the front door
/// picks for the program's session.
const char *kProgram = R"mlir(
module @app {
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @twice::@run(%x) : (tensor<4xf64>) -> tensor<4xf64>
    %z = catalyst.launch_kernel @plus::@run(%y) : (tensor<4xf64>) -> tensor<4xf64>
    return %z : tensor<4xf64>
  }
  module @twice attributes {catalyst.target = {}, catalyst.dispatch = {address = "ADDRESS"}} {
    func.func public @run(%x: tensor<4xf64>) -> tensor<4xf64> {
      %r = arith.addf %x, %x : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
  module @plus attributes {catalyst.target = {}, catalyst.dispatch = {address = "ADDRESS"}} {
    func.func public @run(%x: tensor<4xf64>) -> tensor<4xf64> {
      %one = arith.constant dense<1.0> : tensor<4xf64>
      %r = arith.addf %x, %one : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
}
)mlir";

std::string programAt(const std::string &address) {
  std::string text = kProgram;
  for (size_t at; (at = text.find("ADDRESS")) != std::string::npos;)
    text.replace(at, 7, address);
  return text;
}

bool alive(const PoolProcess &pool, int index) { return ::kill(pool.serverPid(index), 0) == 0; }

/// A live executor holding at least one session, other than `except`; -1 if none.
int holder(const PoolProcess &pool, int except = -1) {
  for (int i = 0; i < pool.servers(); ++i)
    if (i != except && alive(pool, i) && pool.serverMetric(i, "courier_sessions") > 0)
      return i;
  return -1;
}

} // namespace

TEST_CASE("a program keeps every result right while its executor is killed and another drains",
          "[deploy][failover]") {
  PoolProcess pool(PoolKind::Executors, 3);
  TempDir dir("courier-failover-test");
  Engine engine(optionsIn(dir));
  auto module = engine.compile(programAt(pool.address()), "failover");
  if (!module)
    FAIL(llvm::toString(module.takeError()));

  // 500 calls, two launches each; the main thread strikes at two points along the way.
  constexpr int kCalls = 500;
  std::atomic<int> done{0};
  auto run = std::async(std::launch::async, [&]() -> std::string {
    for (int i = 0; i < kCalls; ++i) {
      double base = i;
      auto out = (*module)->invoke(
          "main", {Tensor::fromDoubles(DType::F64, {4}, {base, base + 1, base + 2, base + 3})});
      if (!out)
        return "call " + std::to_string(i) + ": " + llvm::toString(out.takeError());
      std::vector<double> want = {2 * base + 1, 2 * base + 3, 2 * base + 5, 2 * base + 7};
      if (values((*out)[0]) != want)
        return "call " + std::to_string(i) + " returned a wrong result";
      done++;
    }
    return "";
  });
  auto awaitCalls = [&](int count) {
    while (done < count && run.wait_for(std::chrono::milliseconds(5)) != std::future_status::ready)
      ;
  };

  awaitCalls(150);
  int killed = holder(pool);
  REQUIRE(killed >= 0);
  REQUIRE(::kill(pool.serverPid(killed), SIGKILL) == 0);

  awaitCalls(300);
  int drained = holder(pool, killed);
  if (drained < 0 && run.wait_for(std::chrono::seconds(0)) == std::future_status::ready)
    FAIL("the calls ended before the drain: '" << run.get() << "' after " << done << " calls");
  REQUIRE(drained >= 0);
  pid_t drainedPid = pool.serverPid(drained);
  REQUIRE(::kill(drainedPid, SIGTERM) == 0);

  std::string failure = run.get();
  CHECK(failure == "");
  CHECK(done == kCalls);
  // The drained executor exited once idle; every session now lives on the one left.
  auto giveUp = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (alive(pool, drained) && std::chrono::steady_clock::now() < giveUp)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_FALSE(alive(pool, killed));
  CHECK_FALSE(alive(pool, drained));
  int left = 3 - killed - drained;
  CHECK(pool.serverMetric(left, "courier_sessions") >= 1);
}
