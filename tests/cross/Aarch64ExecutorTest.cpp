// The aarch64 courier-executor (cmake/aarch64-linux-gnu.cmake) under qemu-user on a loopback
// port, driven by this x86-64 process: programs whose target module names the aarch64 triple
// run there with their numbers checked, an x86-64 object is refused, health names the board.
// The kernel runs the executor and its workers through binfmt_misc's qemu-aarch64 entry, as
// it would any program; qemu-user cannot load a seccomp filter (the filter would apply to
// qemu's own system calls), so the executor runs with --no-sandbox (docs/deploy.md).
#include "executor/ElfValidation.h"
#include "executor/HostCpu.h"
#include "jit/Engine.h"
#include "passes/TargetModules.h"
#include "transport/HttpBackend.h"

#include "tests/jit/TestSupport.h"
#include "tests/kernels/KernelPaths.h"
#include "tests/support/KernelPrograms.h"
#include "tests/support/ServerProcess.h"

#include "llvm/BinaryFormat/ELF.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

using namespace courier;
using namespace courier::testing;

namespace {

/// Fails the test, saying how to fix it, unless the aarch64 executor runs here. It is tried,
/// not looked for in /proc/sys/fs/binfmt_misc: a container may run aarch64 programs through
/// its host's entry without seeing that file system.
void requireAarch64Programs() {
  static const std::pair<int, std::string> run =
      testing::runServerToExit(COURIER_AARCH64_EXECUTOR, {"--version"});
  INFO("the kernel runs aarch64 programs through binfmt_misc's qemu-aarch64 entry, which "
       "scripts/install-deps.sh --aarch64 installs and enables; "
       << COURIER_AARCH64_EXECUTOR << " --version exited with " << run.first << ": " << run.second);
  REQUIRE(run.first == 0);
}

/// The aarch64 executor with the aarch64 build of tests/kernels/plugin.c, in the worker
/// model it has on x86-64 (one sandboxed worker process per session) less the seccomp filter.
std::unique_ptr<testing::ServerProcess> startAarch64Executor() {
  requireAarch64Programs();
  return std::make_unique<testing::ServerProcess>(
      testing::ServerSpec{COURIER_AARCH64_EXECUTOR,
                          "courier-executor-aarch64",
                          0,
                          "",
                          {"--no-sandbox", "--quiet", "--plugin", COURIER_AARCH64_PLUGIN}});
}

/// `text` with every ADDRESS replaced by `address`.
std::string at(std::string text, const std::string &address) {
  for (size_t i = text.find("ADDRESS"); i != std::string::npos; i = text.find("ADDRESS", i))
    text.replace(i, 7, address);
  return text;
}

// One entry per case; the kernels compute with numbers whose results are exact, so any
// difference is an error in shipping, linking or the aarch64 code, not rounding.
const char *kBoardProgram = R"mlir(
module @app {
  func.func public @f32_rank0(%x: tensor<f32>) -> tensor<f32> {
    %y = catalyst.launch_kernel @board::@halve_plus_quarter(%x) : (tensor<f32>) -> tensor<f32>
    return %y : tensor<f32>
  }
  func.func public @f64_rank1(%x: tensor<5xf64>) -> tensor<5xf64> {
    %y = catalyst.launch_kernel @board::@square_plus_one(%x) : (tensor<5xf64>) -> tensor<5xf64>
    return %y : tensor<5xf64>
  }
  func.func public @i32_rank2(%x: tensor<2x3xi32>) -> tensor<2x3xi32> {
    %y = catalyst.launch_kernel @board::@triple_minus_seven(%x)
        : (tensor<2x3xi32>) -> tensor<2x3xi32>
    return %y : tensor<2x3xi32>
  }
  func.func public @i64_rank3(%x: tensor<2x2x2xi64>) -> tensor<2x2x2xi64> {
    %y = catalyst.launch_kernel @board::@times_2_33_plus_one(%x)
        : (tensor<2x2x2xi64>) -> tensor<2x2x2xi64>
    return %y : tensor<2x2x2xi64>
  }
  func.func public @two_results(%a: tensor<3xf64>, %b: tensor<3xi32>)
      -> (tensor<3xf64>, tensor<3xi32>) {
    %q, %m = catalyst.launch_kernel @board::@quarter_and_times_minus_two(%a, %b)
        : (tensor<3xf64>, tensor<3xi32>) -> (tensor<3xf64>, tensor<3xi32>)
    return %q, %m : tensor<3xf64>, tensor<3xi32>
  }
  func.func public @sum_on_board(%a: f64, %b: f64, %c: f64) -> f64 {
    %r = catalyst.runtime_call fn("courier_test_sum") (%a, %b, %c)
        {c_params = ["f64", "f64", "f64"], c_result = "f64", dispatch = "ADDRESS"}
        : (f64, f64, f64) -> f64
    return %r : f64
  }
  module @board attributes {catalyst.target = {triple = "aarch64-unknown-linux-gnu"},
                            catalyst.dispatch = {address = "ADDRESS"}} {
    func.func public @halve_plus_quarter(%x: tensor<f32>) -> tensor<f32> {
      %half = arith.constant dense<0.5> : tensor<f32>
      %quarter = arith.constant dense<0.25> : tensor<f32>
      %h = arith.mulf %x, %half : tensor<f32>
      %y = arith.addf %h, %quarter : tensor<f32>
      return %y : tensor<f32>
    }
    func.func public @square_plus_one(%x: tensor<5xf64>) -> tensor<5xf64> {
      %one = arith.constant dense<1.0> : tensor<5xf64>
      %s = arith.mulf %x, %x : tensor<5xf64>
      %y = arith.addf %s, %one : tensor<5xf64>
      return %y : tensor<5xf64>
    }
    func.func public @triple_minus_seven(%x: tensor<2x3xi32>) -> tensor<2x3xi32> {
      %three = arith.constant dense<3> : tensor<2x3xi32>
      %seven = arith.constant dense<7> : tensor<2x3xi32>
      %t = arith.muli %x, %three : tensor<2x3xi32>
      %y = arith.subi %t, %seven : tensor<2x3xi32>
      return %y : tensor<2x3xi32>
    }
    func.func public @times_2_33_plus_one(%x: tensor<2x2x2xi64>) -> tensor<2x2x2xi64> {
      %big = arith.constant dense<8589934592> : tensor<2x2x2xi64>
      %t = arith.muli %x, %big : tensor<2x2x2xi64>
      %y = arith.addi %t, %x : tensor<2x2x2xi64>
      return %y : tensor<2x2x2xi64>
    }
    func.func public @quarter_and_times_minus_two(%a: tensor<3xf64>, %b: tensor<3xi32>)
        -> (tensor<3xf64>, tensor<3xi32>) {
      %four = arith.constant dense<4.0> : tensor<3xf64>
      %minus_two = arith.constant dense<-2> : tensor<3xi32>
      %q = arith.divf %a, %four : tensor<3xf64>
      %m = arith.muli %b, %minus_two : tensor<3xi32>
      return %q, %m : tensor<3xf64>, tensor<3xi32>
    }
  }
}
)mlir";

/// The executor's answer to GET /v1/health, which must be 200.
nlohmann::json healthOf(const testing::ServerProcess &executor) {
  httplib::Result res = executor.client()->Get("/v1/health");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  return nlohmann::json::parse(res->body);
}

/// Why the executor at `address` refuses the object at `path` when a session ships it: its
/// invalid_object message.
std::string refusalOf(const std::string &address, const char *path) {
  auto backend = transport::createHttpBackend(address, {});
  REQUIRE(ok(backend));
  auto session = (*backend)->openSession();
  REQUIRE(ok(session));
  auto bytes = llvm::MemoryBuffer::getFile(path);
  REQUIRE(bytes);
  llvm::Error shipped = (*backend)->shipObject(
      *session, transport::ObjectBlob::fromBytes((*bytes)->getBuffer().str()));
  REQUIRE(static_cast<bool>(shipped));
  std::string message;
  llvm::handleAllErrors(std::move(shipped), [&](const transport::CodedError &e) {
    CHECK(e.kind == ErrorCode::InvalidObject);
    message = e.message;
  });
  return message;
}

/// A program whose `main` multiplies A (m x k) by B (k x n) with a linalg.matmul in a target
/// module for aarch64 that names no CPU, run at ADDRESS.
std::string matmulProgram(int64_t m, int64_t n, int64_t k) {
  return testing::matmulProgram(m, n, k, "{triple = \"aarch64-unknown-linux-gnu\"}", "ADDRESS");
}

/// The aarch64 objects the engine cached in `dir`.
std::vector<std::string> aarch64ObjectsIn(const TempDir &dir) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (llvm::sys::fs::recursive_directory_iterator it(dir.path, ec), end; it != end && !ec;
       it.increment(ec)) {
    if (llvm::sys::path::extension(it->path()) != ".o")
      continue;
    std::string bytes = testing::readFile(it->path());
    // e_machine, little-endian, at offset 18 of the ELF header.
    if (bytes.size() > 20 && uint8_t(bytes[18]) == llvm::ELF::EM_AARCH64 && bytes[19] == 0)
      paths.push_back(it->path());
  }
  return paths;
}

/// The shape and element type of `t`, then its values.
void checkTensor(const Tensor &t, DType dtype, std::vector<int64_t> shape,
                 std::vector<double> expected) {
  CHECK(t.dtype == dtype);
  CHECK(t.shape == shape);
  CHECK(values(t) == expected);
}

} // namespace

TEST_CASE("the aarch64 executor reports its triple, its CPU's features and its workers",
          "[cross]") {
  auto executor = startAarch64Executor();
  auto health = healthOf(*executor);
  INFO(health.dump());
  CHECK(health["triple"] == "aarch64-unknown-linux-gnu");
  // Every Armv8-A CPU Linux runs on has these two; qemu's emulated CPU has many more.
  std::vector<std::string> features = health["features"];
  CHECK(std::find(features.begin(), features.end(), "neon") != features.end());
  CHECK(std::find(features.begin(), features.end(), "fp-armv8") != features.end());
  CHECK(std::is_sorted(features.begin(), features.end()));
  CHECK(health["isolation"] == "process");

  // A session is served by an aarch64 worker process of its own, a child of the executor.
  httplib::Result res = executor->client()->Post("/v1/sessions", "", "application/json");
  REQUIRE(res);
  REQUIRE(res->status == 201);
  int workers = 0;
  for (pid_t child : courier::testing::childrenOf(executor->processId()))
    if (courier::testing::procFile(child, "cmdline").find(COURIER_AARCH64_WORKER) !=
        std::string::npos)
      ++workers;
  CHECK(workers > 0);
}

TEST_CASE("the features the aarch64 executor reads from capability words are those LLVM "
          "reads from a board's /proc/cpuinfo",
          "[cross]") {
  requireAarch64Programs();
  // A board's file, with every word arm64 Linux prints on its Features line
  // (arch/arm64/kernel/cpuinfo.c), seen by the executor alone: unshare gives it a mount
  // namespace of its own, in which the file is bound over /proc/cpuinfo.
  TempDir dir;
  std::ofstream(dir.sub("cpuinfo"))
      << "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 "
         "crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp "
         "sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg dcpodp sve2 sveaes "
         "svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svef32mm svef64mm svebf16 "
         "i8mm bf16 dgh rng bti mte ecv afp rpres mte3 sme smei16i64 smef64f64 smei8i32 "
         "smef16f32 smeb16f32 smef32f32 smefa64 wfxt ebf16 sveebf16 cssc rprfm sve2p1 sme2 "
         "sme2p1 smei16i32 smebi32i32 smeb16b16 smef16f16 mops hbc sveb16b16 lrcpc3 lse128 "
         "fpmr lut faminmax f8cvt f8fma f8dp4 f8dp2 f8e4m3 f8e5m2 smelutv2 smef8f16 smef8f32 "
         "smesf8fma smesf8dp4 smesf8dp2 poe gcs\nCPU implementer\t: 0x41\nCPU architecture: "
         "8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n";
  testing::ServerProcess board(testing::ServerSpec{
      "/usr/bin/unshare",
      "courier-executor-aarch64-board",
      0,
      "",
      {"--user", "--map-root-user", "--mount", "sh", "-c",
       "mount --bind \"$0\" /proc/cpuinfo && exec \"$@\"", dir.sub("cpuinfo"),
       COURIER_AARCH64_EXECUTOR, "--listen", "127.0.0.1:0", "--no-sandbox", "--quiet"}});
  auto health = healthOf(board);
  INFO(health.dump());
  // LLVM's reading found the board's CPU, so the features are its reading too.
  REQUIRE(health["cpu"] == "neoverse-n1");
  std::vector<std::string> features = health["features"];
  CHECK(features == executor::aarch64FeaturesFromHwcaps(~uint64_t{0}, ~uint64_t{0}));
}

TEST_CASE("a program whose target module names aarch64 runs on the aarch64 executor", "[cross]") {
  auto executor = startAarch64Executor();
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(at(kBoardProgram, executor->address()), "board.mlir");
  REQUIRE(ok(module));
  Module &board = **module;

  SECTION("f32 of rank 0") {
    auto out = board.invoke("f32_rank0", {Tensor::fromDoubles(DType::F32, {}, {-1.75})});
    REQUIRE(ok(out));
    REQUIRE(out->size() == 1);
    checkTensor((*out)[0], DType::F32, {}, {-0.625});
  }
  SECTION("f64 of rank 1") {
    auto out = board.invoke("f64_rank1",
                            {Tensor::fromDoubles(DType::F64, {5}, {0.5, -1.5, 2, 3.25, -4096})});
    REQUIRE(ok(out));
    REQUIRE(out->size() == 1);
    checkTensor((*out)[0], DType::F64, {5}, {1.25, 3.25, 5, 11.5625, 16777217});
  }
  SECTION("i32 of rank 2") {
    auto out = board.invoke(
        "i32_rank2",
        {Tensor::fromDoubles(DType::I32, {2, 3}, {0, 1, -1, 1000, -1000, 1000000000})});
    REQUIRE(ok(out));
    REQUIRE(out->size() == 1);
    // 3 * 10^9 wraps in 32 bits, to 3 * 10^9 - 2^32.
    checkTensor((*out)[0], DType::I32, {2, 3}, {-7, -4, -10, 2993, -3007, -1294967303});
  }
  SECTION("i64 of rank 3") {
    auto out = board.invoke(
        "i64_rank3", {Tensor::fromDoubles(DType::I64, {2, 2, 2}, {0, 1, -1, 2, -3, 4, 100, -255})});
    REQUIRE(ok(out));
    REQUIRE(out->size() == 1);
    const double k = 8589934593.0; // 2^33 + 1: products beyond 32 bits, exact as doubles
    checkTensor((*out)[0], DType::I64, {2, 2, 2},
                {0, k, -k, 2 * k, -3 * k, 4 * k, 100 * k, -255 * k});
  }
  SECTION("two results of two element types") {
    auto out =
        board.invoke("two_results", {Tensor::fromDoubles(DType::F64, {3}, {1, -2.5, 10}),
                                     Tensor::fromDoubles(DType::I32, {3}, {3, -4, 2147483647})});
    REQUIRE(ok(out));
    REQUIRE(out->size() == 2);
    checkTensor((*out)[0], DType::F64, {3}, {0.25, -0.625, 2.5});
    // -2 * (2^31 - 1) = -2^32 + 2 wraps to 2 in 32 bits.
    checkTensor((*out)[1], DType::I32, {3}, {-6, 8, 2});
  }
  SECTION("a call into the aarch64 plugin") {
    auto out = board.invoke("sum_on_board", {Tensor::fromDoubles(DType::F64, {}, {0.5}),
                                             Tensor::fromDoubles(DType::F64, {}, {1.25}),
                                             Tensor::fromDoubles(DType::F64, {}, {-3})});
    REQUIRE(ok(out));
    REQUIRE(out->size() == 1);
    checkTensor((*out)[0], DType::F64, {}, {-1.25});
  }
  CHECK(executor->metric("courier_sessions") == 1);
}

TEST_CASE("a kernel that aborts on the aarch64 executor costs its own call, not the session",
          "[cross]") {
  auto executor = startAarch64Executor();
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(at(R"mlir(
module @app {
  func.func public @give_up(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = catalyst.launch_kernel @board::@give_up(%x) : (tensor<2xf32>) -> tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func public @negate(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = catalyst.launch_kernel @board::@negate(%x) : (tensor<2xf32>) -> tensor<2xf32>
    return %y : tensor<2xf32>
  }
  module @board attributes {catalyst.target = {triple = "aarch64-unknown-linux-gnu"},
                            catalyst.dispatch = {address = "ADDRESS"}} {
    func.func private @abort()
    func.func public @give_up(%x: tensor<2xf32>) -> tensor<2xf32> {
      func.call @abort() : () -> ()
      return %x : tensor<2xf32>
    }
    func.func public @negate(%x: tensor<2xf32>) -> tensor<2xf32> {
      %y = arith.negf %x : tensor<2xf32>
      return %y : tensor<2xf32>
    }
  }
}
)mlir",
                                  executor->address()),
                               "give-up.mlir");
  REQUIRE(ok(module));
  Tensor x = Tensor::fromDoubles(DType::F32, {2}, {1.5, -2});
  auto crashed = (*module)->invoke("give_up", {x});
  REQUIRE(failed(crashed));
  std::string message;
  llvm::handleAllErrors(crashed.takeError(), [&](const EngineError &e) { message = e.message; });
  CHECK_THAT(message, Catch::Contains("SIGABRT"));
  CHECK(executor->metric("courier_kernel_crashes_total{signal=\"SIGABRT\"}") == 1);
  // The worker died with the call; the session goes on in a new one.
  auto out = (*module)->invoke("negate", {x});
  REQUIRE(ok(out));
  checkTensor((*out)[0], DType::F32, {2}, {-1.5, 2});
}

TEST_CASE("an x86-64 object sent to the aarch64 executor is refused naming both machines",
          "[cross]") {
  auto executor = startAarch64Executor();
  TempDir dir;
  Engine engine(optionsIn(dir));
  std::string text = at(kBoardProgram, executor->address());
  text.replace(text.find("aarch64-unknown-linux-gnu"), 25, "x86_64-unknown-linux-gnu");
  auto module = engine.compile(text, "x86.mlir");
  REQUIRE(failed(module));
  std::string message;
  llvm::handleAllErrors(module.takeError(), [&](const EngineError &e) {
    CHECK(e.kind == ErrorCode::ExecutorFailed);
    message = e.message;
  });
  CHECK_THAT(message, Catch::Contains("is for x86_64 but this executor runs aarch64"));

  // The executor's own word for it, to a client that ships a compiled x86-64 kernel.
  CHECK_THAT(refusalOf(executor->address(), COURIER_KERNEL_SCALE),
             Catch::Contains("is for x86_64 but this executor runs aarch64"));
  // The executor goes on serving.
  healthOf(*executor);
}

TEST_CASE("an ILP32 object sent to the aarch64 executor is refused as 32-bit", "[cross]") {
  auto executor = startAarch64Executor();
  // ELF32 with the executor's own machine field, which the linker would read as ELF64.
  CHECK_THAT(refusalOf(executor->address(), COURIER_KERNEL_SCALE_ILP32),
             Catch::Contains("is a 32-bit aarch64 object but this executor runs 64-bit aarch64 "
                             "code"));
}

TEST_CASE("under qemu-user the aarch64 executor cannot sandbox its workers and says so",
          "[cross]") {
  requireAarch64Programs();
  auto [status, log] =
      testing::runServerToExit(COURIER_AARCH64_EXECUTOR, {"--listen", "127.0.0.1:0", "--quiet"});
  CHECK(status != 0);
  CHECK_THAT(log, Catch::Contains("cannot enter the sandbox"));
  CHECK_THAT(log, Catch::Contains("--no-sandbox"));
}

TEST_CASE("a vectorized f32 matmul for aarch64 is compiled for the executor's CPU and runs there "
          "with exact numbers",
          "[cross]") {
  auto executor = startAarch64Executor();
  TempDir dir;
  Engine engine(optionsIn(dir));
  // 37 x 43 x 29: whole 8 x 8 register tiles (two NEON vectors a row) and the peeled
  // remainders of every loop.
  const int64_t m = 37, n = 43, k = 29;
  auto module = engine.compile(at(matmulProgram(m, n, k), executor->address()), "matmul.mlir");
  REQUIRE(ok(module));
  // Small integers: every product and sum is exact in f32, in any order.
  std::vector<double> a(m * k), b(k * n), expected(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      a[i * k + p] = double((i * 3 + p * 5) % 7 - 3);
  for (int64_t p = 0; p < k; ++p)
    for (int64_t j = 0; j < n; ++j)
      b[p * n + j] = double((p * 2 + j) % 5 - 2);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        expected[i * n + j] += a[i * k + p] * b[p * n + j];
  auto out = (*module)->invoke("main", {Tensor::fromDoubles(DType::F32, {m, k}, a),
                                        Tensor::fromDoubles(DType::F32, {k, n}, b)});
  REQUIRE(ok(out));
  REQUIRE(out->size() == 1);
  checkTensor((*out)[0], DType::F32, {m, n}, expected);

  // The object records what the executor reported, and what that implies, less what every
  // aarch64 CPU has (the executor ran it, so its CPU has them); its code multiplies and adds
  // four f32 lanes at a time.
  auto health = healthOf(*executor);
  std::vector<std::string> reported = health["features"];
  std::vector<std::string> required = getRequiredFeatures(getReportedTargetCpu(
      "aarch64-unknown-linux-gnu", health["cpu"].get<std::string>(), reported));
  std::vector<std::string> objects = aarch64ObjectsIn(dir);
  REQUIRE(objects.size() == 1);
  auto record = executor::readRequiredFeatures(objects[0], testing::readFile(objects[0]),
                                               /*anyMachine=*/true);
  REQUIRE(ok(record));
  CHECK(*record == required);
  auto [status, disassembly] =
      testing::runCommand(std::string(COURIER_LLVM_OBJDUMP) + " -d " + objects[0]);
  REQUIRE(status == 0);
  std::regex fma(R"(fmla\s+v[0-9]+\.4s)");
  std::istringstream lines(disassembly);
  bool vectorized = false;
  for (std::string line; std::getline(lines, line) && !vectorized;)
    vectorized = std::regex_search(line, fma);
  INFO(disassembly);
  CHECK(vectorized);
}
