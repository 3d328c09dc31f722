// courier-serve --kernel-threads: a module worker's kernel-thread team, started before its
// sandbox, runs a parallel kernel to the numbers one thread gives.
#include "tests/serve/RestClient.h"
#include "tests/serve/ServeProcess.h"
#include "tests/support/SharedPrograms.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

using namespace courier::testing;

namespace {

json inputs() {
  std::vector<float> a(256 * 256), b(256 * 256);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>((i * 7919) % 1000) / 997.0f - 0.5f;
    b[i] = static_cast<float>((i * 104729) % 1000) / 991.0f - 0.5f;
  }
  json shape = {256, 256};
  return json{{"inputs",
               {{{"dtype", "f32"}, {"shape", shape}, {"data", a}},
                {{"dtype", "f32"}, {"shape", shape}, {"data", b}}}}};
}

struct Run {
  std::vector<float> data;
  size_t workerThreads = 0; ///< Threads of the module's worker after the call.
  /// The server's courier_kernel_launches_total by `threads`, after the call.
  double parallelLaunches = 0, oneThreadLaunches = 0;
};

/// The matmul's result through a courier-serve started with `args`.
Run matmulThrough(const std::vector<std::string> &args) {
  ServeProcess serve({"", args});
  auto http = serve.client();
  http->set_read_timeout(std::chrono::seconds(120));
  Reply created = post(*http, "/v1/modules", createBody("threads", kMatmul256Program));
  INFO(created.raw.substr(0, 2000));
  REQUIRE(created.status == 201);
  Reply called = post(*http, "/v1/modules/threads/invoke/main", inputs().dump());
  INFO(called.raw.substr(0, 400));
  REQUIRE(called.status == 200);
  Run run;
  run.data = called.body.at("outputs").at(0).at("data").get<std::vector<float>>();
  Reply described = get(*http, "/v1/modules/threads");
  REQUIRE(described.status == 200);
  pid_t worker = described.body["worker"]["pid"].get<pid_t>();
  for ([[maybe_unused]] const auto &task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(worker) + "/task"))
    ++run.workerThreads;
  run.parallelLaunches = serve.metric("courier_kernel_launches_total{threads=\"parallel\"}");
  run.oneThreadLaunches = serve.metric("courier_kernel_launches_total{threads=\"one\"}");
  return run;
}

} // namespace

TEST_CASE("a parallel matmul through courier-serve's sandboxed module worker gives with "
          "--kernel-threads 2 the numbers of --kernel-threads 1, and the server's metrics count "
          "how it ran",
          "[serve][threads]") {
  Run one = matmulThrough({"--kernel-threads", "1"});
  Run two = matmulThrough({"--kernel-threads", "2"});
  REQUIRE(one.data.size() == 256 * 256);
  CHECK(one.data == two.data);
  // The second worker holds a team of two, the first a team of its calling thread alone;
  // else they are alike (the compiler's threads).
  CHECK(two.workerThreads > one.workerThreads);
  // The worker's team counts in the server's metrics: one launch each, parallel on two.
  CHECK(one.parallelLaunches == 0);
  CHECK(one.oneThreadLaunches == 1);
  CHECK(two.parallelLaunches == 1);
  CHECK(two.oneThreadLaunches == 0);
}

TEST_CASE("courier-serve refuses a --kernel-threads outside 1 to 1024, naming it",
          "[serve][threads]") {
  for (const char *bad : {"0", "1025"}) {
    auto [status, err] = courier::testing::runServeToExit({"--kernel-threads", bad});
    INFO(bad << ": " << err);
    CHECK(status != 0);
    CHECK(err.find("--kernel-threads must be between 1 and 1024") != std::string::npos);
  }
}
