// What an operator sees of courier-serve: its invoke and compile histograms by module, with
// no more series than modules it holds, and log lines that name the module of a request.
#include "tests/serve/RestClient.h"
#include "tests/serve/ServeProcess.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace courier::testing;

namespace {

const std::string kDouble = "func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {\n"
                            "  %y = arith.addf %x, %x : tensor<4xf64>\n"
                            "  return %y : tensor<4xf64>\n"
                            "}\n";
const std::string kBroken = "func.func public @main() {\n  retrun\n}\n";
const std::string kInvokeBody = R"({"inputs": [[1, 2, 3, 4]]})";

/// Creates `name` (kDouble) on `http`'s server and invokes its main `calls` times.
void createAndInvoke(httplib::Client &http, const std::string &name, int calls) {
  requireCreated(http, name, kDouble);
  for (int i = 0; i < calls; ++i)
    REQUIRE(post(http, "/v1/modules/" + name + "/invoke/main", kInvokeBody).status == 200);
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("invoke and compile histograms have a series per module held, and a deleted "
          "module's series go with it",
          "[serve][operations][metrics]") {
  ServeProcess serve;
  auto http = serve.client();
  createAndInvoke(*http, "alpha", 2);
  createAndInvoke(*http, "beta", 1);
  // A create that fails leaves no module, and no series: it counts under none.
  REQUIRE(post(*http, "/v1/modules", createBody("broken", kBroken)).status == 422);
  // A replace that fails still concerns a module the server holds.
  REQUIRE(put(*http, "/v1/modules/alpha", createBody("alpha", kBroken)).status == 422);

  const std::string invoke = "courier_serve_invoke_duration_seconds";
  const std::string compile = "courier_serve_compile_request_duration_seconds";
  CHECK(serve.metric(invoke + "_count{module=\"alpha\"}") == 2);
  CHECK(serve.metric(invoke + "_count{module=\"beta\"}") == 1);
  CHECK(serve.metric(invoke + "_count") == 0);
  CHECK(serve.metric(compile + "_count{module=\"alpha\"}") == 2);
  CHECK(serve.metric(compile + "_count{module=\"beta\"}") == 1);
  CHECK(serve.metric(compile + "_count") == 1);
  CHECK(serve.metric(invoke + "_bucket{module=\"alpha\",le=\"+Inf\"}") == 2);
  std::string text = serve.metrics();
  CHECK_FALSE(contains(text, "module=\"broken\""));

  REQUIRE(http->Delete("/v1/modules/alpha")->status == 204);
  text = serve.metrics();
  CHECK_FALSE(contains(text, "module=\"alpha\""));
  CHECK(serve.metric(invoke + "_count{module=\"beta\"}") == 1);
  // An invoke of a module the server no longer holds makes no series either.
  CHECK(post(*http, "/v1/modules/alpha/invoke/main", kInvokeBody).status == 404);
  CHECK_FALSE(contains(serve.metrics(), "module=\"alpha\""));
}

TEST_CASE("a module's invoke histogram counts what its description's calls count, refused "
          "calls included",
          "[serve][operations][metrics]") {
  ServeProcess serve;
  auto http = serve.client();
  createAndInvoke(*http, "delta", 2);
  // Refused before the engine runs: not JSON, a shape, a count and a dtype that do not fit.
  for (const char *body : {"{not json", R"({"inputs": [[1, 2, 3]]})", R"({"inputs": []})",
                           R"({"inputs": [{"dtype": "i32", "shape": [4], "data": [1, 2, 3, 4]}]})"})
    REQUIRE(post(*http, "/v1/modules/delta/invoke/main", body).status == 400);

  Reply described = get(*http, "/v1/modules/delta");
  REQUIRE(described.status == 200);
  CHECK(described.body["calls"] == 6);
  CHECK(described.body["failedCalls"] == 4);
  CHECK(serve.metric("courier_serve_invoke_duration_seconds_count{module=\"delta\"}") == 6);
}

TEST_CASE("courier-serve's JSON log lines name the module of each request",
          "[serve][operations][log]") {
  ServeProcess serve({"", {"--log-format", "json"}});
  auto http = serve.client();
  createAndInvoke(*http, "gamma", 0);
  httplib::Result invoked =
      http->Post("/v1/modules/gamma/invoke/main", httplib::Headers{{"X-Request-Id", "invoke-1"}},
                 kInvokeBody, "application/json");
  REQUIRE(invoked);
  REQUIRE(invoked->status == 200);
  CHECK(invoked->get_header_value("X-Request-Id") == "invoke-1");

  std::string line = serve.awaitLogLine(
      [](const std::string &text) { return contains(text, "\"request_id\":\"invoke-1\""); });
  INFO(serve.log());
  REQUIRE(!line.empty());
  json invokeLine = json::parse(line);
  CHECK(invokeLine["level"] == "info");
  CHECK(invokeLine["route"] == "POST /v1/modules/{name}/invoke/{entry}");
  CHECK(invokeLine["status"] == 200);
  CHECK(invokeLine["module"] == "gamma");
  CHECK(invokeLine["duration_ms"].get<double>() >= 0);

  // The module a create names in its body.
  std::string created = serve.awaitLogLine(
      [](const std::string &text) { return contains(text, "\"route\":\"POST /v1/modules\""); });
  REQUIRE(!created.empty());
  CHECK(json::parse(created)["module"] == "gamma");
  for (const std::string &text : serve.logLines()) {
    INFO(text);
    CHECK(json::parse(text, nullptr, false).is_object());
  }
}

TEST_CASE("a create whose name is refused is logged without a module", "[serve][operations][log]") {
  ServeProcess serve({"", {"--log-format", "json"}});
  auto http = serve.client();
  std::string forged(300, 'x');
  forged += " \n module=forged";
  httplib::Result refused =
      http->Post("/v1/modules", httplib::Headers{{"X-Request-Id", "bad-name"}},
                 createBody(forged, kDouble), "application/json");
  REQUIRE(refused);
  CHECK(refused->status == 400);
  std::string line = serve.awaitLogLine(
      [](const std::string &text) { return contains(text, "\"request_id\":\"bad-name\""); });
  INFO(serve.log());
  REQUIRE(!line.empty());
  json logged = json::parse(line);
  CHECK(logged["status"] == 400);
  CHECK_FALSE(logged.contains("module"));
}

TEST_CASE("courier-serve takes a log format of text or json and refuses any other",
          "[serve][operations][log]") {
  auto [status, log] = courier::testing::runServeToExit({"--log-format", "yaml"});
  CHECK(status > 0);
  CHECK(contains(log, "courier-serve: error: --log-format expects 'text' or 'json', got 'yaml'"));
}
