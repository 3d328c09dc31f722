// courier-serve against real processes: every endpoint, every refusal, concurrent clients,
// reloads under load, and watch mode.
#include "serve/ModuleStore.h"
#include "tests/serve/RestClient.h"
#include "tests/serve/ServeProcess.h"
#include "tests/support/PrometheusText.h"
#include "tests/support/RawConnection.h"
#include "tests/transport/ExecutorProcess.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace courier::testing;

namespace {

/// A program whose kernel, dispatched to the in-process executor, computes x * factor + offset.
std::string kernelModule(double factor, double offset) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(1);
  text << "module @app {\n"
          "  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {\n"
          "    %y = catalyst.launch_kernel @dev::@affine(%x) : (tensor<4xf64>) -> tensor<4xf64>\n"
          "    return %y : tensor<4xf64>\n"
          "  }\n"
          "  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "
          "\"local\"}} {\n"
          "    func.func public @affine(%x: tensor<4xf64>) -> tensor<4xf64> {\n"
          "      %f = arith.constant dense<"
       << factor
       << "> : tensor<4xf64>\n"
          "      %o = arith.constant dense<"
       << offset
       << "> : tensor<4xf64>\n"
          "      %m = arith.mulf %x, %f : tensor<4xf64>\n"
          "      %r = arith.addf %m, %o : tensor<4xf64>\n"
          "      return %r : tensor<4xf64>\n"
          "    }\n"
          "  }\n"
          "}\n";
  return text.str();
}

const std::string kVersionA = kernelModule(2.0, 1.0);  // [1,2,3,4] -> [3,5,7,9]
const std::string kVersionB = kernelModule(10.0, 0.0); // [1,2,3,4] -> [10,20,30,40]
const std::vector<double> kResultA = {3, 5, 7, 9};
const std::vector<double> kResultB = {10, 20, 30, 40};

/// Host-only: the error is on line 3, column 10 (`%bad` uses an undefined value).
const std::string kBroken = "module {\n"
                            "  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {\n"
                            "    return %bad : tensor<4xf64>\n"
                            "  }\n"
                            "}\n";

const std::string kHostOnly = "module {\n"
                              "  func.func public @twice(%x: tensor<?xf32>) -> tensor<?xf32> {\n"
                              "    %y = arith.addf %x, %x : tensor<?xf32>\n"
                              "    return %y : tensor<?xf32>\n"
                              "  }\n"
                              "}\n";

const std::string kInvokeBody = R"({"inputs": [[1, 2, 3, 4]]})";

/// A raw-bytes frame: one line of JSON, a newline, the f64 values packed.
std::string frame(const json &header, const std::vector<double> &values) {
  std::string body = header.dump() + "\n";
  body.append(reinterpret_cast<const char *>(values.data()), values.size() * sizeof(double));
  return body;
}

} // namespace

TEST_CASE("a fresh server is healthy, ready, and exposes metrics", "[serve]") {
  ServeProcess serve;
  auto http = serve.client();
  Reply health = get(*http, "/v1/health");
  CHECK(health.status == 200);
  CHECK(health.body["status"] == "ok");
  CHECK(health.body["modules"] == 0);
  // Without --watch there is nothing to load first: ready as soon as it listens.
  CHECK(get(*http, "/v1/ready").status == 200);

  httplib::Result metrics = http->Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->status == 200);
  CHECK(metrics->body.find("courier_serve_modules 0") != std::string::npos);
  CHECK(metrics->body.find("courier_serve_request_duration_seconds_bucket{le=\"0.0001\"}") !=
        std::string::npos);
  CHECK(serve.metric("courier_serve_requests_total{route=\"GET /v1/health\",status=\"200\"}") >= 1);
  // Each family's samples sit under its own # TYPE line; each histogram ends at +Inf with its
  // _count.
  CHECK(samplesOutsideTheirFamily(metrics->body).empty());
  for (const char *name :
       {"courier_serve_request_duration_seconds", "courier_serve_invoke_duration_seconds",
        "courier_serve_compile_request_duration_seconds"}) {
    INFO(name);
    HistogramSamples histogram = histogramSamples(metrics->body, name);
    REQUIRE(histogram.buckets.size() == 15);
    CHECK(histogram.buckets.back().first == "+Inf");
    CHECK(histogram.buckets.back().second == histogram.count);
  }
}

TEST_CASE("a module is created, listed, described, invoked and deleted", "[serve]") {
  ServeProcess serve;
  auto http = serve.client();
  Reply created = post(*http, "/v1/modules", createBody("scale", kVersionA, {{"optLevel", 1}}));
  INFO(created.raw);
  REQUIRE(created.status == 201);
  CHECK(created.body["name"] == "scale");
  CHECK(created.body["version"] == 1);
  CHECK(created.body["options"]["optLevel"] == 1);
  REQUIRE(created.body["entries"].size() == 1);
  const json &entry = created.body["entries"][0];
  CHECK(entry["name"] == "main");
  CHECK(entry["inputs"][0] == json({{"dtype", "f64"}, {"shape", {4}}, {"type", "tensor<4xf64>"}}));
  CHECK(entry["outputs"][0]["type"] == "tensor<4xf64>");

  Reply listed = get(*http, "/v1/modules");
  REQUIRE(listed.status == 200);
  REQUIRE(listed.body["modules"].size() == 1);
  CHECK(listed.body["modules"][0]["name"] == "scale");

  Reply invoked = post(*http, "/v1/modules/scale/invoke/main", kInvokeBody);
  INFO(invoked.raw);
  REQUIRE(invoked.status == 200);
  CHECK(outputData(invoked) == kResultA);
  CHECK(invoked.body["version"] == 1);
  CHECK(invoked.body["outputs"][0]["dtype"] == "f64");

  // The explicit tensor form works as well as nested arrays.
  Reply explicitForm =
      post(*http, "/v1/modules/scale/invoke/main",
           R"({"inputs": [{"dtype": "f64", "shape": [4], "data": [0, 0, 0, 0]}]})");
  REQUIRE(explicitForm.status == 200);
  CHECK(outputData(explicitForm) == std::vector<double>{1, 1, 1, 1});

  Reply described = get(*http, "/v1/modules/scale");
  REQUIRE(described.status == 200);
  CHECK(described.body["calls"] == 2);
  CHECK(described.body["failedCalls"] == 0);
  CHECK(described.body["compileMs"].get<double>() > 0);
  CHECK(described.body["origin"] == "api");
  CHECK(described.body["lastError"].is_null());
  CHECK(described.body["sha256"].get<std::string>().size() == 64);

  httplib::Result deleted = http->Delete("/v1/modules/scale");
  REQUIRE(deleted);
  CHECK(deleted->status == 204);
  CHECK(get(*http, "/v1/modules/scale").status == 404);
  CHECK(get(*http, "/v1/modules").body["modules"].empty());
  Reply gone = post(*http, "/v1/modules/scale/invoke/main", kInvokeBody);
  CHECK(gone.status == 404);
  CHECK(errorCode(gone) == "unknown_module");
  CHECK(serve.metric("courier_serve_invokes_total") == 2);
}

TEST_CASE("a compile error is 422 with each diagnostic's file, line and column", "[serve]") {
  ServeProcess serve;
  auto http = serve.client();
  Reply failed = post(*http, "/v1/modules", createBody("broken", kBroken));
  INFO(failed.raw);
  REQUIRE(failed.status == 422);
  CHECK(errorCode(failed) == "compile_failed");
  const json &diagnostics = failed.body["error"]["diagnostics"];
  REQUIRE(diagnostics.is_array());
  REQUIRE(!diagnostics.empty());
  const json &first = diagnostics[0];
  CHECK(first["file"] == "broken");
  CHECK(first["line"] == 3);
  CHECK(first["column"] == 12);
  CHECK(first["severity"] == "error");
  CHECK(first["message"].get<std::string>().find("undeclared") != std::string::npos);
  CHECK(failed.body["error"]["message"].get<std::string>().find("broken:3:12") !=
        std::string::npos);
  // Nothing was created.
  CHECK(get(*http, "/v1/modules/broken").status == 404);
  CHECK(serve.metric("courier_serve_compile_failures_total") == 1);
}

TEST_CASE("a plain-text PUT's diagnostics name a file: Content-Disposition's filename, else "
          "NAME.mlir",
          "[serve]") {
  ServeProcess serve;
  auto http = serve.client();
  auto fileOf = [](const Reply &reply) {
    INFO(reply.raw);
    REQUIRE(reply.status == 422);
    return reply.body["error"]["diagnostics"][0]["file"].get<std::string>();
  };
  CHECK(fileOf(put(*http, "/v1/modules/plain", kBroken, "text/plain")) == "plain.mlir");
  Reply named = toReply(http->Put("/v1/modules/plain",
                                  {{"Content-Disposition", "inline; filename=\"app.mlir\""}},
                                  kBroken, "text/plain"));
  CHECK(fileOf(named) == "app.mlir");
  CHECK(named.body["error"]["message"].get<std::string>().find("app.mlir:3:12") !=
        std::string::npos);
  // A path is not a file's name: refused, and nothing is compiled.
  Reply path = toReply(http->Put("/v1/modules/plain",
                                 {{"Content-Disposition", "inline; filename=\"../etc/app.mlir\""}},
                                 kBroken, "text/plain"));
  CHECK(path.status == 400);
  CHECK(errorCode(path) == "bad_request");
}

TEST_CASE("a second POST of a name is 409, PUT replaces the module and bumps its version",
          "[serve]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "scale", kVersionA);
  Reply duplicate = post(*http, "/v1/modules", createBody("scale", kVersionB));
  CHECK(duplicate.status == 409);
  CHECK(errorCode(duplicate) == "module_exists");
  CHECK(outputData(post(*http, "/v1/modules/scale/invoke/main", kInvokeBody)) == kResultA);

  Reply replaced = put(*http, "/v1/modules/scale", json({{"mlir", kVersionB}}).dump());
  INFO(replaced.raw);
  REQUIRE(replaced.status == 200);
  CHECK(replaced.body["version"] == 2);
  CHECK(replaced.body["reloads"] == 1);
  Reply invoked = post(*http, "/v1/modules/scale/invoke/main", kInvokeBody);
  CHECK(outputData(invoked) == kResultB);
  CHECK(invoked.body["version"] == 2);

  // Plain MLIR text replaces too; new options get a new engine and versions keep counting.
  Reply text = put(*http, "/v1/modules/scale", kVersionA, "text/plain");
  REQUIRE(text.status == 200);
  CHECK(text.body["version"] == 3);
  Reply optioned = put(*http, "/v1/modules/scale",
                       json({{"mlir", kVersionB}, {"options", {{"optLevel", 0}}}}).dump());
  REQUIRE(optioned.status == 200);
  CHECK(optioned.body["version"] == 4);
  CHECK(optioned.body["options"]["optLevel"] == 0);
  CHECK(outputData(post(*http, "/v1/modules/scale/invoke/main", kInvokeBody)) == kResultB);

  // PUT of a new name creates it.
  Reply fresh = put(*http, "/v1/modules/other", json({{"mlir", kHostOnly}}).dump());
  CHECK(fresh.status == 201);
  CHECK(fresh.body["version"] == 1);
  CHECK(serve.metric("courier_serve_reloads_total{outcome=\"ok\"}") == 3);
}

TEST_CASE("a failed reload is 422 with diagnostics and the old version keeps serving", "[serve]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "scale", kVersionA);
  Reply failed = put(*http, "/v1/modules/scale", json({{"mlir", kBroken}}).dump());
  INFO(failed.raw);
  REQUIRE(failed.status == 422);
  CHECK(errorCode(failed) == "compile_failed");
  CHECK(failed.body["error"]["diagnostics"][0]["line"] == 3);
  Reply invoked = post(*http, "/v1/modules/scale/invoke/main", kInvokeBody);
  REQUIRE(invoked.status == 200);
  CHECK(outputData(invoked) == kResultA);
  CHECK(invoked.body["version"] == 1);
  Reply described = get(*http, "/v1/modules/scale");
  CHECK(described.body["version"] == 1);
  CHECK(described.body["failedReloads"] == 1);
  CHECK(described.body["lastError"]["code"] == "compile_failed");
  CHECK(serve.metric("courier_serve_reloads_total{outcome=\"failed\"}") == 1);
}

TEST_CASE("malformed requests are 400 and unknown names 404, each with a JSON error", "[serve]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "scale", kVersionA);
  requireCreated(*http, "twice", kHostOnly);
  requireCreated(*http, "matrix",
                 "module {\n"
                 "  func.func public @twice(%x: tensor<?x?xf32>) -> tensor<?x?xf32> {\n"
                 "    %y = arith.addf %x, %x : tensor<?x?xf32>\n"
                 "    return %y : tensor<?x?xf32>\n"
                 "  }\n"
                 "}\n");

  struct Case {
    const char *what;
    std::function<Reply()> send;
    int status;
    const char *code;
    const char *mentions;
  };
  std::vector<Case> cases = {
      {"body that is not JSON", [&] { return post(*http, "/v1/modules", "{not json"); }, 400,
       "bad_request", "not JSON"},
      {"body that is a JSON array", [&] { return post(*http, "/v1/modules", "[1]"); }, 400,
       "bad_request", "object"},
      {"create without mlir", [&] { return post(*http, "/v1/modules", R"({"name": "x"})"); }, 400,
       "bad_request", "mlir"},
      {"create without name",
       [&] { return post(*http, "/v1/modules", R"({"mlir": "module {}"})"); }, 400, "bad_request",
       "name"},
      {"a name with a slash",
       [&] { return post(*http, "/v1/modules", createBody("a/b", kHostOnly)); }, 400, "bad_request",
       "module name"},
      {"an unknown option",
       [&] {
         return post(*http, "/v1/modules", createBody("x", kHostOnly, {{"opt", 1}}));
       },
       400, "bad_request", "unknown option 'opt'"},
      {"an optLevel out of range",
       [&] {
         return post(*http, "/v1/modules", createBody("x", kHostOnly, {{"optLevel", 7}}));
       },
       400, "bad_request", "optLevel"},
      {"an optLevel of 2^63 written as a double",
       [&] {
         return post(*http, "/v1/modules",
                     createBody("x", kHostOnly, {{"optLevel", 9223372036854775808.0}}));
       },
       400, "bad_request", "optLevel"},
      {"an executor that is no address",
       [&] {
         return post(*http, "/v1/modules", createBody("x", kHostOnly, {{"executor", "nowhere"}}));
       },
       400, "bad_request", "executor"},
      {"PUT whose body names another module",
       [&] {
         return put(*http, "/v1/modules/scale", json({{"name", "y"}, {"mlir", kVersionA}}).dump());
       },
       400, "bad_request", "the body names module 'y'"},
      {"invoke with a body that is not JSON",
       [&] { return post(*http, "/v1/modules/scale/invoke/main", "[[1,2"); }, 400, "bad_request",
       "not JSON"},
      {"invoke without inputs",
       [&] { return post(*http, "/v1/modules/scale/invoke/main", R"({"in": []})"); }, 400,
       "bad_request", "inputs"},
      {"invoke with too many inputs",
       [&] { return post(*http, "/v1/modules/scale/invoke/main", R"({"inputs": [[1], [2]]})"); },
       400, "invalid_input", "takes 1 inputs, got 2"},
      {"invoke with the wrong dtype",
       [&] {
         return post(*http, "/v1/modules/scale/invoke/main",
                     R"({"inputs": [{"dtype": "i32", "data": [1, 2, 3, 4]}]})");
       },
       400, "invalid_input", "must be f64, got i32"},
      {"invoke with the wrong shape",
       [&] { return post(*http, "/v1/modules/scale/invoke/main", R"({"inputs": [[1, 2, 3]]})"); },
       400, "invalid_input", "got dimension 0 of size 3"},
      {"invoke with the wrong rank",
       [&] {
         return post(*http, "/v1/modules/scale/invoke/main", R"({"inputs": [[[1, 2], [3, 4]]]})");
       },
       400, "invalid_input", "must have rank 1, got rank 2"},
      {"invoke with a ragged array",
       [&] {
         return post(*http, "/v1/modules/twice/invoke/twice", R"({"inputs": [[[1, 2], [3]]]})");
       },
       400, "invalid_input", "ragged"},
      {"invoke with a shape whose element count overflows to the data's size",
       [&] {
         return post(*http, "/v1/modules/matrix/invoke/twice",
                     R"({"inputs": [{"dtype": "f32", "shape": [4294967296, 4294967296],
                                     "data": []}]})");
       },
       400, "invalid_input", "\"shape\" is too large"},
      {"invoke with an unknown dtype",
       [&] {
         return post(*http, "/v1/modules/scale/invoke/main",
                     R"({"inputs": [{"dtype": "q8", "data": [1, 2, 3, 4]}]})");
       },
       400, "invalid_input", "unknown dtype 'q8'"},
      {"an unknown module", [&] { return get(*http, "/v1/modules/nothing"); }, 404,
       "unknown_module", "nothing"},
      {"invoke of an unknown module",
       [&] { return post(*http, "/v1/modules/nothing/invoke/main", kInvokeBody); }, 404,
       "unknown_module", "nothing"},
      {"invoke of an unknown entry",
       [&] { return post(*http, "/v1/modules/scale/invoke/nope", kInvokeBody); }, 404,
       "unknown_entry", "entries: main"},
      {"PUT of an unknown module that does not compile",
       [&] {
         return put(*http, "/v1/modules/fresh", json({{"mlir", kBroken}}).dump());
       },
       422, "compile_failed", "fresh:3:12"},
      {"DELETE of an unknown module", [&] { return toReply(http->Delete("/v1/modules/nothing")); },
       404, "unknown_module", "nothing"},
      {"an unknown route", [&] { return get(*http, "/v3/modules"); }, 404, "not_found", "no route"},
      // Either would overflow the stack of a recursive parser and take the server down.
      {"JSON nested a hundred thousand deep",
       [&] { return post(*http, "/v1/modules", std::string(100000, '[')); }, 400, "bad_request",
       "nested deeper than 128 levels"},
      {"MLIR nested ten thousand deep",
       [&] {
         std::string deep;
         for (int i = 0; i < 10000; ++i)
           deep += "module {";
         deep += std::string(10000, '}');
         return put(*http, "/v1/modules/deep", deep, "text/plain");
       },
       422, "compile_failed", "nested deeper than 512 levels"},
  };
  for (const Case &c : cases) {
    INFO(c.what);
    Reply reply = c.send();
    INFO(reply.raw);
    CHECK(reply.status == c.status);
    CHECK(errorCode(reply) == c.code);
    CHECK(reply.body["error"]["message"].get<std::string>().find(c.mentions) != std::string::npos);
  }
  // Nothing above disturbed the modules.
  CHECK(outputData(post(*http, "/v1/modules/scale/invoke/main", kInvokeBody)) == kResultA);
  Reply described = get(*http, "/v1/modules/scale");
  CHECK(described.body["failedCalls"].get<int>() >= 6);
  CHECK(described.body["lastError"]["code"] == "invalid_input");
}

TEST_CASE("raw-bytes frames carry inputs and outputs beside a JSON header", "[serve]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "scale", kVersionA);
  requireCreated(*http, "twice", kHostOnly);
  const std::string type = "application/x-courier-frame";

  httplib::Result res = http->Post(
      "/v1/modules/scale/invoke/main",
      frame({{"inputs", {{{"dtype", "f64"}, {"shape", {4}}}}}}, {1, 2, 3, 4}), type.c_str());
  REQUIRE(res);
  INFO(res->body);
  REQUIRE(res->status == 200);
  CHECK(res->get_header_value("Content-Type") == type);
  size_t newline = res->body.find('\n');
  REQUIRE(newline != std::string::npos);
  json header = json::parse(res->body.substr(0, newline));
  CHECK(header["version"] == 1);
  CHECK(header["outputs"][0] ==
        json({{"dtype", "f64"}, {"shape", {4}}, {"offset", 0}, {"bytes", 32}}));
  REQUIRE(res->body.size() == newline + 1 + 32);
  std::vector<double> values(4);
  std::memcpy(values.data(), res->body.data() + newline + 1, 32);
  CHECK(values == kResultA);

  // A dynamic shape takes its size from the header.
  std::vector<float> floats(1000, 1.5f);
  std::string body = json({{"inputs", {{{"dtype", "f32"}, {"shape", {1000}}}}}}).dump() + "\n";
  body.append(reinterpret_cast<const char *>(floats.data()), floats.size() * sizeof(float));
  res = http->Post("/v1/modules/twice/invoke/twice", body, type.c_str());
  REQUIRE(res);
  REQUIRE(res->status == 200);
  newline = res->body.find('\n');
  REQUIRE(res->body.size() == newline + 1 + 4000);
  float last;
  std::memcpy(&last, res->body.data() + res->body.size() - 4, 4);
  CHECK(last == 3.0f);

  struct Bad {
    const char *what;
    std::string body;
    int status;
    const char *mentions;
  };
  std::vector<Bad> bads = {
      {"a header that is not JSON", "{oops\n", 400, "not JSON"},
      {"no newline after the header", R"({"inputs": []})", 400, "newline"},
      {"fewer bytes than declared",
       json({{"inputs", {{{"dtype", "f64"}, {"shape", {4}}}}}}).dump() + "\n" + std::string(8, 0),
       400, "declares 32 bytes"},
      {"more bytes than declared",
       json({{"inputs", {{{"dtype", "f64"}, {"shape", {4}}}}}}).dump() + "\n" + std::string(40, 0),
       400, "declares 32 bytes"},
      {"a huge shape in a small body",
       json({{"inputs", {{{"dtype", "f64"}, {"shape", {1 << 20, 1 << 20}}}}}}).dump() + "\n", 413,
       "limit"},
      {"a shape that overflows",
       json({{"inputs", {{{"dtype", "f64"}, {"shape", {1 << 30, 1 << 30, 1 << 30}}}}}}).dump() +
           "\n",
       413, "overflows"},
      {"a wrong shape", frame({{"inputs", {{{"dtype", "f64"}, {"shape", {2}}}}}}, {1, 2}), 400,
       "got dimension 0 of size 2"},
      {"an input without dtype", frame({{"inputs", {{{"shape", {4}}}}}}, {1, 2, 3, 4}), 400,
       "dtype"},
  };
  for (const Bad &bad : bads) {
    INFO(bad.what);
    Reply reply = toReply(http->Post("/v1/modules/scale/invoke/main", bad.body, type.c_str()));
    INFO(reply.raw);
    CHECK(reply.status == bad.status);
    CHECK(reply.body["error"]["message"].get<std::string>().find(bad.mentions) !=
          std::string::npos);
  }
  // The connection is still in step after the refusals.
  res = http->Post("/v1/modules/scale/invoke/main",
                   frame({{"inputs", {{{"dtype", "f64"}, {"shape", {4}}}}}}, {0, 0, 0, 0}),
                   type.c_str());
  REQUIRE(res);
  CHECK(res->status == 200);
}

TEST_CASE("a frame input's bytes or offset of the wrong type is 400 naming the field", "[serve]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "scale", kVersionA);
  const std::string tensor(32, 0);
  auto send = [&](const std::string &input) {
    return toReply(
        http->Post("/v1/modules/scale/invoke/main",
                   R"({"inputs": [{"dtype": "f64", "shape": [4], )" + input + "}]}\n" + tensor,
                   "application/x-courier-frame"));
  };
  struct Bad {
    const char *field;
    const char *input;
  };
  for (Bad bad : {Bad{"bytes", R"("bytes": 32.5)"}, Bad{"bytes", R"("bytes": "32")"},
                  Bad{"bytes", R"("bytes": -32)"}, Bad{"bytes", R"("bytes": 1e30)"},
                  Bad{"offset", R"("offset": 0.5)"}, Bad{"offset", R"("offset": null)"},
                  Bad{"offset", R"("offset": 18446744073709551616)"}}) {
    INFO(bad.input);
    Reply reply = send(bad.input);
    INFO(reply.raw);
    CHECK(reply.status == 400);
    CHECK(reply.body["error"]["code"] == "bad_request");
    CHECK(reply.body["error"]["message"] ==
          "frame input 0: \"" + std::string(bad.field) + "\" must be a non-negative integer");
  }
  // Right values of either JSON spelling pass; a wrong one is still checked.
  CHECK(send(R"("bytes": 32, "offset": 0)").status == 200);
  CHECK(send(R"("bytes": 32.0, "offset": 0.0)").status == 200);
  Reply mismatch = send(R"("bytes": 18446744073709551615)");
  CHECK(mismatch.status == 400);
  CHECK(mismatch.body["error"]["message"] ==
        "frame input 0 declares 18446744073709551615 bytes, its shape needs 32");
  // 2^63 written as a double is read as the whole number it is, in bytes and in the shape.
  Reply wide = send(R"("bytes": 9223372036854775808.0)");
  CHECK(wide.status == 400);
  CHECK(wide.body["error"]["message"] ==
        "frame input 0 declares 9223372036854775808 bytes, its shape needs 32");
  Reply shape =
      toReply(http->Post("/v1/modules/scale/invoke/main",
                         R"({"inputs": [{"dtype": "f64", "shape": [9223372036854775808.0]}]})"
                         "\n",
                         "application/x-courier-frame"));
  CHECK(shape.status == 400);
  CHECK(shape.body["error"]["message"] ==
        "frame input 0: \"shape\" must hold non-negative integers");
}

TEST_CASE("scalars and several outputs travel as JSON and as frames", "[serve]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "axpy",
                 "module {\n"
                 "  func.func public @axpy(%a: f64, %x: tensor<4xf64>) -> (f64, tensor<4xf64>) {\n"
                 "    %t = tensor.splat %a : tensor<4xf64>\n"
                 "    %y = arith.mulf %t, %x : tensor<4xf64>\n"
                 "    %b = arith.addf %a, %a : f64\n"
                 "    return %b, %y : f64, tensor<4xf64>\n"
                 "  }\n"
                 "}\n");
  Reply reply = post(*http, "/v1/modules/axpy/invoke/axpy", R"({"inputs": [2.5, [1, 2, 3, 4]]})");
  INFO(reply.raw);
  REQUIRE(reply.status == 200);
  CHECK(reply.body["outputs"][0] ==
        json({{"dtype", "f64"}, {"shape", json::array()}, {"data", {5}}}));
  CHECK(reply.body["outputs"][1]["data"] == json({2.5, 5, 7.5, 10}));

  json header = {
      {"inputs",
       {{{"dtype", "f64"}, {"shape", json::array()}}, {{"dtype", "f64"}, {"shape", {4}}}}}};
  httplib::Result res = http->Post("/v1/modules/axpy/invoke/axpy", frame(header, {2.5, 1, 2, 3, 4}),
                                   "application/x-courier-frame");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  size_t newline = res->body.find('\n');
  json replyHeader = json::parse(res->body.substr(0, newline));
  CHECK(replyHeader["outputs"][0]["bytes"] == 8);
  CHECK(replyHeader["outputs"][1]["offset"] == 8);
  REQUIRE(res->body.size() == newline + 1 + 40);
  std::vector<double> values(5);
  std::memcpy(values.data(), res->body.data() + newline + 1, 40);
  CHECK(values == std::vector<double>{5, 2.5, 5, 7.5, 10});
}

TEST_CASE("a body over --max-body-bytes is 413, with or without Content-Length", "[serve]") {
  ServeProcess serve({"", {"--max-body-bytes", "4096"}});
  auto http = serve.client();
  Reply tooLarge =
      post(*http, "/v1/modules", createBody("big", kHostOnly + std::string(5000, ' ')));
  CHECK(tooLarge.status == 413);
  CHECK(errorCode(tooLarge) == "payload_too_large");

  // A chunked body has no Content-Length for httplib to check; the server counts it.
  std::string chunk(1024, ' ');
  int sent = 0;
  httplib::Result res = serve.client()->Post(
      "/v1/modules",
      [&](size_t, httplib::DataSink &sink) {
        if (sent++ < 8)
          sink.write(chunk.data(), chunk.size());
        else
          sink.done();
        return true;
      },
      "application/json");
  REQUIRE(res);
  CHECK(res->status == 413);
  CHECK(res->body.find("payload_too_large") != std::string::npos);

  // Small requests still pass.
  requireCreated(*http, "small", kHostOnly);
}

TEST_CASE("courier-serve refuses a request whose body could end in two places, before routing",
          "[serve][security]") {
  ServeProcess serve;
  std::string body = createBody("twice", kHostOnly);
  std::string head = "POST /v1/modules HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\n";
  std::string length = "Content-Length: " + std::to_string(body.size()) + "\r\n";
  std::ostringstream chunked;
  chunked << std::hex << body.size() << "\r\n" << body << "\r\n0\r\n\r\n";
  struct Case {
    const char *what;
    std::string request;
    std::string message;
  };
  std::vector<Case> cases = {
      {"two Content-Length headers", head + length + length + "\r\n" + body,
       "the request has 2 Content-Length headers; send exactly one"},
      {"Content-Length beside Transfer-Encoding",
       head + length + "Transfer-Encoding: chunked\r\n\r\n" + chunked.str(),
       "the request has both Content-Length and Transfer-Encoding headers; send one of them"},
  };
  for (const Case &c : cases) {
    INFO(c.what);
    RawConnection connection(serve.port());
    connection.send(c.request);
    std::string reply = connection.readAll();
    CHECK_THAT(reply, Catch::StartsWith("HTTP/1.1 400"));
    json answer = json::parse(reply.substr(std::min(reply.size(), reply.find("\r\n\r\n") + 4)),
                              nullptr, false);
    CHECK(answer["error"]["code"] == "bad_request");
    CHECK(answer["error"]["message"] == c.message);
  }
  // Neither reached its route, and the server goes on serving.
  auto http = serve.client();
  CHECK(serve.metric("courier_serve_modules") == 0);
  requireCreated(*http, "twice", kHostOnly);
}

TEST_CASE("the module limit refuses one more with 507 until a module is deleted", "[serve]") {
  ServeProcess serve({"", {"--max-modules", "2"}});
  auto http = serve.client();
  requireCreated(*http, "one", kHostOnly);
  requireCreated(*http, "two", kVersionA);
  Reply third = post(*http, "/v1/modules", createBody("three", kVersionB));
  CHECK(third.status == 507);
  CHECK(errorCode(third) == "too_many_modules");
  CHECK(third.body["error"]["message"].get<std::string>().find("maximum of 2") !=
        std::string::npos);
  // Replacing an existing module is not a new one.
  CHECK(put(*http, "/v1/modules/two", json({{"mlir", kVersionB}}).dump()).status == 200);
  CHECK(put(*http, "/v1/modules/three", json({{"mlir", kVersionB}}).dump()).status == 507);
  REQUIRE(http->Delete("/v1/modules/one")->status == 204);
  requireCreated(*http, "three", kVersionB);
}

TEST_CASE("in process, a compile over --compile-timeout-ms is 504 and its result is discarded",
          "[serve]") {
  // No real compile (parse, passes, cross-compile, link) finishes in a millisecond. In a
  // worker it would be ended (tests/serve/ContainmentTest.cpp); in process it cannot be.
  ServeProcess serve({"", {"--compile-timeout-ms", "1", "--isolation", "none"}});
  auto http = serve.client();
  Reply slow = post(*http, "/v1/modules", createBody("slow", kVersionA));
  INFO(slow.raw);
  CHECK(slow.status == 504);
  CHECK(errorCode(slow) == "compile_timeout");
  CHECK(slow.body["error"]["message"].get<std::string>().find("discarded") != std::string::npos);
  CHECK(get(*http, "/v1/modules/slow").status == 404);
  // The compile finishes in the background and is dropped, not installed.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (serve.metric("courier_serve_compiles_discarded_total") < 1 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  CHECK(serve.metric("courier_serve_compiles_discarded_total") == 1);
  CHECK(serve.metric("courier_serve_compile_timeouts_total") == 1);
  CHECK(get(*http, "/v1/modules/slow").status == 404);
  CHECK(get(*http, "/v1/modules").body["modules"].empty());
}

TEST_CASE("in process, a replacement over --compile-timeout-ms is 504 and the old version keeps "
          "serving",
          "[serve]") {
  // Watched files compile without the deadline, so the module exists to be replaced.
  TempDir scratch;
  const std::string &dir = scratch.path;
  std::ofstream(dir + "/scale.mlir") << kVersionA;
  ServeProcess serve({"", {"--compile-timeout-ms", "1", "--watch", dir, "--isolation", "none"}});
  auto http = serve.client();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (get(*http, "/v1/ready").status != 200 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(get(*http, "/v1/modules/scale").status == 200);

  Reply slow = put(*http, "/v1/modules/scale", json({{"mlir", kVersionB}}).dump());
  INFO(slow.raw);
  CHECK(slow.status == 504);
  CHECK(errorCode(slow) == "compile_timeout");
  Reply invoked = post(*http, "/v1/modules/scale/invoke/main", kInvokeBody);
  CHECK(outputData(invoked) == kResultA);
  CHECK(invoked.body["version"] == 1);
  while (serve.metric("courier_serve_compiles_discarded_total") < 1 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  // Finished in the background, the compile was dropped rather than swapped in.
  CHECK(serve.metric("courier_serve_compiles_discarded_total") == 1);
  Reply described = get(*http, "/v1/modules/scale");
  CHECK(described.body["version"] == 1);
  CHECK(described.body["failedReloads"] == 1);
  CHECK(described.body["lastError"]["code"] == "compile_timeout");
  CHECK(outputData(post(*http, "/v1/modules/scale/invoke/main", kInvokeBody)) == kResultA);
}

TEST_CASE("with a token every request needs it, without, non-loopback is refused", "[serve]") {
  ServeProcess serve({"s3cret", {}});
  httplib::Client anonymous("127.0.0.1", serve.port());
  for (const char *path : {"/v1/health", "/v1/ready", "/metrics", "/v1/modules"}) {
    INFO(path);
    Reply reply = toReply(anonymous.Get(path));
    CHECK(reply.status == 401);
    CHECK(errorCode(reply) == "unauthorized");
  }
  Reply create =
      toReply(anonymous.Post("/v1/modules", createBody("x", kHostOnly), "application/json"));
  CHECK(create.status == 401);
  httplib::Client wrong("127.0.0.1", serve.port());
  wrong.set_bearer_token_auth("s3cre");
  CHECK(toReply(wrong.Get("/v1/modules")).status == 401);

  auto http = serve.client();
  requireCreated(*http, "twice", kHostOnly);
  Reply invoked = post(*http, "/v1/modules/twice/invoke/twice", R"({"inputs": [[1, 2]]})");
  CHECK(invoked.status == 200);
  CHECK(outputData(invoked) == std::vector<double>{2, 4});

  auto [status, log] = courier::testing::runServeToExit({"--listen", "0.0.0.0:0"});
  CHECK(status != 0);
  CHECK(log.find("without a token") != std::string::npos);
}

TEST_CASE("an executor that cannot be reached is 502 with the executor client's message",
          "[serve]") {
  ServeProcess serve;
  auto http = serve.client();
  // Loading runs the module's setup, which opens its executor sessions. Port 1 on loopback
  // refuses connections at once.
  Reply refused =
      post(*http, "/v1/modules", createBody("nowhere", kVersionA, {{"executor", "127.0.0.1:1"}}));
  INFO(refused.raw);
  CHECK(refused.status == 502);
  CHECK(errorCode(refused) == "executor_unavailable");
  CHECK(refused.body["error"]["message"].get<std::string>().find("127.0.0.1:1") !=
        std::string::npos);

  // An executor that goes away after the module loaded fails the call, not the server.
  auto executor = std::make_unique<ExecutorProcess>();
  Reply created = post(*http, "/v1/modules",
                       createBody("remote", kVersionA, {{"executor", executor->address()}}));
  INFO(created.raw);
  REQUIRE(created.status == 201);
  CHECK(created.body["options"]["executor"] == executor->address());
  // The same source under another name is a module of its own, and its errors say so.
  CHECK(
      post(*http, "/v1/modules", createBody("twin", kVersionA, {{"executor", executor->address()}}))
          .status == 201);
  Reply invoked = post(*http, "/v1/modules/remote/invoke/main", kInvokeBody);
  REQUIRE(invoked.status == 200);
  CHECK(outputData(invoked) == kResultA);
  std::string address = executor->address();
  executor->kill();
  Reply failed = post(*http, "/v1/modules/remote/invoke/main", kInvokeBody);
  INFO(failed.raw);
  CHECK(failed.status == 502);
  CHECK(errorCode(failed) == "executor_unavailable");
  CHECK(failed.body["error"]["message"].get<std::string>().find(address) != std::string::npos);
  CHECK(get(*http, "/v1/health").status == 200);
  CHECK(get(*http, "/v1/modules/remote").body["lastError"]["code"] == "executor_unavailable");
  Reply twin = post(*http, "/v1/modules/twin/invoke/main", kInvokeBody);
  CHECK(twin.status == 502);
  CHECK(twin.body["error"]["message"].get<std::string>().find("of module 'twin'") !=
        std::string::npos);
}

TEST_CASE("a kernel that cannot be loaded names its object once and no path of the server's host",
          "[serve]") {
  ServeProcess serve;
  auto http = serve.client();
  const std::string unresolved =
      "module @app {\n"
      "  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {\n"
      "    %y = catalyst.launch_kernel @dev::@broken(%x) : (tensor<4xf64>) -> tensor<4xf64>\n"
      "    return %y : tensor<4xf64>\n"
      "  }\n"
      "  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "
      "\"local\"}} {\n"
      "    func.func private @courier_missing_function()\n"
      "    func.func public @broken(%x: tensor<4xf64>) -> tensor<4xf64> {\n"
      "      func.call @courier_missing_function() : () -> ()\n"
      "      return %x : tensor<4xf64>\n"
      "    }\n"
      "  }\n"
      "}\n";
  // Loading ships the kernel's object, which is where its missing symbol shows.
  Reply failed = post(*http, "/v1/modules", createBody("unresolved", unresolved));
  INFO(failed.raw);
  CHECK(failed.status == 422);
  CHECK(errorCode(failed) == "executor_failed");
  std::string message = failed.body["error"]["message"].get<std::string>();
  CHECK_THAT(message, Catch::Contains("Symbols not found: [ courier_missing_function ]"));
  // One SHA-256, and no shorter piece of it elsewhere.
  std::smatch hash;
  REQUIRE(std::regex_search(message, hash, std::regex("[0-9a-f]{64}")));
  std::string prefix = hash.str().substr(0, 12);
  CHECK(message.find(prefix) == message.rfind(prefix));
  // Nothing of the host: no cache directory, no path at all.
  CHECK(message.find(serve.directory()) == std::string::npos);
  CHECK(message.find('/') == std::string::npos);
  CHECK(get(*http, "/v1/health").status == 200);
}

TEST_CASE("a module worker that cannot start is 503 naming no path, the server's log has it",
          "[serve]") {
  const std::string missing = "/nonexistent/courier-module-worker";
  ::setenv("COURIER_MODULE_WORKER", missing.c_str(), 1);
  ServeProcess serve;
  ::unsetenv("COURIER_MODULE_WORKER");
  auto http = serve.client();
  Reply failed = post(*http, "/v1/modules", createBody("scale", kVersionA));
  INFO(failed.raw);
  CHECK(failed.status == 503);
  CHECK(errorCode(failed) == "worker_unavailable");
  CHECK(!failed.body["error"].contains("cause")); // The server's own failure.
  std::string message = failed.body["error"]["message"].get<std::string>();
  CHECK(message.find('/') == std::string::npos);
  CHECK_THAT(serve.log(), Catch::Contains(missing));
  CHECK(get(*http, "/v1/health").status == 200);
}

TEST_CASE("an executor that refuses the server is 422, --executor-token-file gets it in",
          "[serve]") {
  courier::testing::ExecutorConfig config;
  config.token = "executor-secret";
  ExecutorProcess executor(config);
  json options = {{"executor", executor.address()}};

  ServeProcess without;
  Reply refused = post(*without.client(), "/v1/modules", createBody("remote", kVersionA, options));
  INFO(refused.raw);
  CHECK(refused.status == 422);
  CHECK(errorCode(refused) == "executor_failed");
  CHECK(refused.body["error"]["message"].get<std::string>().find("unauthorized") !=
        std::string::npos);
  // The executor's own code, beside the server's.
  CHECK(refused.body["error"]["cause"] == "unauthorized");

  char path[] = "/tmp/courier-serve-executor-token-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  std::ofstream(path) << config.token << "\n";
  ServeProcess with({"", {"--executor-token-file", path}});
  auto http = with.client();
  Reply created = post(*http, "/v1/modules", createBody("remote", kVersionA, options));
  INFO(created.raw);
  CHECK(created.status == 201);
  Reply invoked = post(*http, "/v1/modules/remote/invoke/main", kInvokeBody);
  CHECK(invoked.status == 200);
  CHECK(outputData(invoked) == kResultA);
  std::remove(path);
}

TEST_CASE("eight clients invoke at once and every call succeeds", "[serve]") {
  ServeProcess serve;
  requireCreated(*serve.client(), "scale", kVersionA);
  constexpr int kThreads = 8, kCalls = 50;
  std::atomic<int> failures{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      auto http = serve.client();
      for (int i = 0; i < kCalls; ++i) {
        double x = t * 100 + i;
        json body = {{"inputs", {{x, x + 1, x + 2, x + 3}}}};
        httplib::Result res =
            http->Post("/v1/modules/scale/invoke/main", body.dump(), "application/json");
        if (!res || res->status != 200) {
          failures++;
          continue;
        }
        auto data = json::parse(res->body)["outputs"][0]["data"].get<std::vector<double>>();
        if (data != std::vector<double>{2 * x + 1, 2 * x + 3, 2 * x + 5, 2 * x + 7})
          wrong++;
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  CHECK(failures == 0);
  CHECK(wrong == 0);
  CHECK(get(*serve.client(), "/v1/modules/scale").body["calls"] == kThreads * kCalls);
}

TEST_CASE("reloads under load drop no call and never mix versions", "[serve]") {
  ServeProcess serve;
  requireCreated(*serve.client(), "scale", kVersionA);
  constexpr int kThreads = 8, kReloads = 10;
  CallTally tally;
  auto http = serve.client();
  callDuring([&] { return serve.client(); }, kThreads, "/v1/modules/scale/invoke/main", kInvokeBody,
             kResultA, kResultB, tally,
             [&] {
               for (int i = 0; i < kReloads; ++i) {
                 const std::string &next = i % 2 == 0 ? kVersionB : kVersionA;
                 Reply replaced = put(*http, "/v1/modules/scale", json({{"mlir", next}}).dump());
                 INFO(replaced.raw);
                 REQUIRE(replaced.status == 200);
                 CHECK(replaced.body["version"] == i + 2);
                 // Let some calls land on each version before the next swap.
                 int seen = tally.fromA + tally.fromB;
                 auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
                 while (tally.fromA + tally.fromB < seen + 20 &&
                        std::chrono::steady_clock::now() < deadline)
                   std::this_thread::yield();
               }
             });
  INFO(tally.firstFailure);
  CHECK(tally.failures == 0);
  CHECK(tally.mixed == 0);
  CHECK(tally.fromA > 0);
  CHECK(tally.fromB > 0);
  CHECK(serve.metric("courier_serve_reloads_total{outcome=\"ok\"}") == kReloads);
}

TEST_CASE("watch mode loads a directory and reloads a module when its file changes", "[serve]") {
  TempDir scratch;
  const std::string &dir = scratch.path;
  std::ofstream(dir + "/scale.mlir") << kVersionA;
  std::ofstream(dir + "/twice.mlir") << kHostOnly;
  std::ofstream(dir + "/notes.txt") << "not a module";
  ServeProcess serve({"", {"--watch", dir}});
  auto http = serve.client();

  auto waitFor = [&](const std::function<bool()> &condition) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!condition()) {
      if (std::chrono::steady_clock::now() > deadline)
        return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  };
  auto version = [&] {
    Reply reply = get(*http, "/v1/modules/scale");
    return reply.status == 200 ? reply.body["version"].get<int>() : 0;
  };
  REQUIRE(waitFor([&] { return get(*http, "/v1/ready").status == 200; }));
  CHECK(version() == 1);
  CHECK(get(*http, "/v1/modules").body["modules"].size() == 2);
  CHECK(get(*http, "/v1/modules/scale").body["origin"] == dir + "/scale.mlir");
  CHECK(outputData(post(*http, "/v1/modules/scale/invoke/main", kInvokeBody)) == kResultA);

  // An edit in place.
  std::ofstream(dir + "/scale.mlir") << kVersionB;
  REQUIRE(waitFor([&] { return version() == 2; }));
  CHECK(outputData(post(*http, "/v1/modules/scale/invoke/main", kInvokeBody)) == kResultB);
  // The log line follows the swap, so it may trail the new version.
  CHECK(waitFor([&] { return serve.log().find("watch: reloaded 'scale'") != std::string::npos; }));

  // A broken edit keeps version 2 serving and says so in the log.
  std::ofstream(dir + "/scale.mlir") << kBroken;
  REQUIRE(waitFor([&] { return serve.log().find("watch: loading 'scale'") != std::string::npos; }));
  std::string log = serve.log();
  CHECK(log.find("version 2 keeps serving") != std::string::npos);
  // The diagnostics name the file, not the module.
  CHECK(log.find("parsing '" + dir + "/scale.mlir' failed: " + dir + "/scale.mlir:3:12: error") !=
        std::string::npos);
  CHECK(version() == 2);
  CHECK(outputData(post(*http, "/v1/modules/scale/invoke/main", kInvokeBody)) == kResultB);

  // Saving by renaming a new file over the old one, as editors do.
  std::ofstream(dir + "/scale.mlir.tmp") << kVersionA;
  REQUIRE(std::rename((dir + "/scale.mlir.tmp").c_str(), (dir + "/scale.mlir").c_str()) == 0);
  REQUIRE(waitFor([&] { return version() == 3; }));
  CHECK(outputData(post(*http, "/v1/modules/scale/invoke/main", kInvokeBody)) == kResultA);

  // A new file becomes a new module.
  std::ofstream(dir + "/added.mlir") << kVersionB;
  REQUIRE(waitFor([&] { return get(*http, "/v1/modules/added").status == 200; }));
  CHECK(outputData(post(*http, "/v1/modules/added/invoke/main", kInvokeBody)) == kResultB);
}

TEST_CASE("SIGTERM stops the server cleanly and promptly, idle connections or not", "[serve]") {
  ServeProcess serve;
  // An idle keep-alive connection would otherwise hold the server for its 5 s keep-alive.
  auto http = serve.client();
  requireCreated(*http, "scale", kVersionA);
  auto started = std::chrono::steady_clock::now();
  int status = serve.terminate();
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(seconds < 3);
}

TEST_CASE("docs/rest.md lists the server's error codes with their statuses", "[serve]") {
  std::ifstream in(COURIER_REST_DOC);
  std::stringstream text;
  text << in.rdbuf();
  std::string doc = text.str();
  std::map<std::string, int> documented;
  std::regex row(R"(\|\s*`([a-z_]+)`\s*\|\s*(\d{3})\s*\|)");
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), row); it != std::sregex_iterator();
       ++it)
    documented[(*it)[1]] = std::stoi((*it)[2]);
  std::map<std::string, int> served;
  for (const courier::serve::ErrorCodeInfo &info : courier::serve::kErrorCodes)
    served[info.code] = info.status;
  CHECK(documented == served);
}

TEST_CASE("NaN and the infinities travel as JSON strings both ways", "[serve]") {
  ServeProcess serve;
  auto http = serve.client();
  // x / [0, 0, 0, -1]: [1, 0, -1, 0] gives [inf, nan, -inf, -0].
  requireCreated(*http, "divide",
                 "module {\n"
                 "  func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                 "    %d = arith.constant dense<[0.0, 0.0, 0.0, -1.0]> : tensor<4xf32>\n"
                 "    %y = arith.divf %x, %d : tensor<4xf32>\n"
                 "    return %y : tensor<4xf32>\n"
                 "  }\n"
                 "}\n");
  for (const char *inputs :
       {R"({"inputs": [[1, 0, -1, 0]]})", R"({"inputs": [["Infinity", "NaN", "-Infinity", 0]]})"}) {
    INFO(inputs);
    Reply invoked = post(*http, "/v1/modules/divide/invoke/main", inputs);
    INFO(invoked.raw);
    REQUIRE(invoked.status == 200);
    // nlohmann/json reads RFC 8259 only: a bare NaN or inf would not parse.
    REQUIRE(json::accept(invoked.raw));
    const json &data = invoked.body["outputs"][0]["data"];
    CHECK(data[0] == "Infinity");
    CHECK(data[1] == "NaN");
    CHECK(data[2] == "-Infinity");
    // Negative zero is the number -0 (a parser may read it as the integer 0).
    CHECK(data[3] == 0);
    CHECK(invoked.raw.find(R"("-Infinity",-0.0])") != std::string::npos);
  }
}

TEST_CASE("numbers with more digits than a double keeps are read as the nearest value", "[serve]") {
  // Found by tests/fuzz (json-tensors): the on-demand reading got about one such number in
  // ten wrong by powers of ten (0.221737119476327930079 as 0.000376...).
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "twice", kHostOnly);
  const std::vector<std::string> numbers = {"0.221737119476327930079", "-0.36632425591253007892",
                                            "0.1234567890123456789012",
                                            "0.261601769254984650318634e-19"};
  std::string body = R"({"inputs": [[)";
  for (size_t i = 0; i < numbers.size(); ++i)
    body += (i ? "," : "") + numbers[i];
  body += "]]}";
  Reply invoked = post(*http, "/v1/modules/twice/invoke/twice", body);
  INFO(invoked.raw);
  REQUIRE(invoked.status == 200);
  const json &data = invoked.body["outputs"][0]["data"];
  REQUIRE(data.size() == numbers.size());
  for (size_t i = 0; i < numbers.size(); ++i) {
    float x = static_cast<float>(std::strtod(numbers[i].c_str(), nullptr));
    CHECK(static_cast<float>(data[i].get<double>()) == x + x);
  }
}

TEST_CASE("outputs are printed in the shortest text that reads back in their own element type",
          "[serve]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "twice", kHostOnly);
  // 0.1 as an f32, doubled, is the float nearest 0.2: "0.2", where a double's digits would
  // be 0.20000000298023224.
  Reply invoked =
      post(*http, "/v1/modules/twice/invoke/twice", R"({"inputs": [[0.1, 1.5, -2.5, 8388608]]})");
  INFO(invoked.raw);
  REQUIRE(invoked.status == 200);
  CHECK(invoked.raw.find(R"("data":[0.2,3,-5,16777216],"dtype":"f32")") != std::string::npos);
  // Each text, read back as a float, is exactly the kernel's result.
  const std::vector<float> inputs = {0.1f, 1.5f, -2.5f, 8388608.0f};
  const json &data = invoked.body["outputs"][0]["data"];
  REQUIRE(data.size() == inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    CHECK(static_cast<float>(data[i].get<double>()) == inputs[i] + inputs[i]);
}

TEST_CASE("a constant or object over the server's limits is 422 naming it, and the server "
          "keeps serving",
          "[serve]") {
  ServeProcess serve({"", {"--max-constant-mib", "1", "--max-object-mib", "1"}});
  auto http = serve.client();
  // 2 MiB of constant, in a source of 150 bytes.
  Reply constant = post(*http, "/v1/modules",
                        createBody("big", "func.func public @f() -> tensor<524288xf32> {\n"
                                          "  %c = arith.constant dense<1.0> : tensor<524288xf32>\n"
                                          "  return %c : tensor<524288xf32>\n"
                                          "}\n"));
  INFO(constant.raw);
  CHECK(constant.status == 422);
  CHECK(errorCode(constant) == "compile_failed");
  CHECK(constant.body["error"]["diagnostics"][0] ==
        json({{"file", "big"},
              {"line", 2},
              {"column", 8},
              {"severity", "error"},
              {"message", "'arith.constant' holds a constant of 2097152 bytes, more than the "
                          "limit of 1048576 (maxConstantBytes)"}}));

  // Two constants within the limit, 1.6 MB together: unoptimised, both land whole in the
  // object.
  Reply object =
      post(*http, "/v1/modules",
           createBody("wide",
                      "module @wide {\n"
                      "  func.func public @f() -> (tensor<100000xf64>, tensor<100000xf64>) {\n"
                      "    %a = arith.constant dense<1.0> : tensor<100000xf64>\n"
                      "    %b = arith.constant dense<2.0> : tensor<100000xf64>\n"
                      "    return %a, %b : tensor<100000xf64>, tensor<100000xf64>\n"
                      "  }\n"
                      "}\n",
                      {{"optLevel", 0}}));
  INFO(object.raw);
  CHECK(object.status == 422);
  CHECK(errorCode(object) == "compile_failed");
  CHECK_THAT(object.body["error"]["message"].get<std::string>(),
             Catch::Contains("'builtin.module' @wide compiled to a host object of") &&
                 Catch::Contains("more than the limit of 1048576 (maxObjectBytes)"));

  requireCreated(*http, "scale", kVersionA);
  CHECK(outputData(post(*http, "/v1/modules/scale/invoke/main", kInvokeBody)) == kResultA);
  CHECK(get(*http, "/v1/modules/big").status == 404);
  CHECK(get(*http, "/v1/modules/wide").status == 404);
}

TEST_CASE("by default a 400 MB splat constant is refused at once", "[serve]") {
  ServeProcess serve;
  auto http = serve.client();
  auto started = std::chrono::steady_clock::now();
  Reply refused =
      post(*http, "/v1/modules",
           createBody("huge", "func.func public @f() -> tensor<100000000xf32> {\n"
                              "  %c = arith.constant dense<1.0> : tensor<100000000xf32>\n"
                              "  return %c : tensor<100000000xf32>\n"
                              "}\n"));
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(refused.raw);
  CHECK(refused.status == 422);
  CHECK(errorCode(refused) == "compile_failed");
  CHECK(refused.body["error"]["message"] ==
        "compiling 'huge' failed: huge:2:8: error: 'arith.constant' holds a constant of "
        "400000000 bytes, more than the limit of 67108864 (maxConstantBytes)");
  CHECK(seconds < 2);
  requireCreated(*http, "scale", kVersionA);
  CHECK(outputData(post(*http, "/v1/modules/scale/invoke/main", kInvokeBody)) == kResultA);
}

TEST_CASE("MLIR built to exhaust the parser's stack is 422 at its place, and the server lives",
          "[serve]") {
  ServeProcess serve;
  auto http = serve.client();
  auto repeat = [](const std::string &piece, size_t times) {
    std::string text;
    for (size_t i = 0; i < times; ++i)
      text += piece;
    return text;
  };
  struct Hostile {
    const char *name;
    std::string text;
    const char *place;
  };
  std::vector<Hostile> hostile = {
      {"minus", "#m = affine_map<(d0) -> (" + std::string(250000, '-') + "d0)>\nmodule {}\n",
       "minus.mlir:1:536"},
      {"tuples",
       "func.func private @f() -> " + repeat("tuple<", 100000) + "i32" + repeat(">", 100000),
       "tuples.mlir:1:3104"},
      {"locations",
       "module {} loc(" + repeat("callsite(", 100000) + "\"a\":1:1" +
           repeat(" at \"b\":1:1)", 100000) + ")",
       "locations.mlir:1:4622"},
  };
  for (const Hostile &h : hostile) {
    INFO(h.name);
    Reply reply = put(*http, std::string("/v1/modules/") + h.name, h.text, "text/plain");
    INFO(reply.raw.substr(0, 500));
    CHECK(reply.status == 422);
    CHECK(errorCode(reply) == "compile_failed");
    CHECK_THAT(reply.body["error"]["message"].get<std::string>(),
               Catch::Contains(h.place) && Catch::Contains("nested deeper than 512 levels"));
  }
  requireCreated(*http, "scale", kVersionA);
  CHECK(outputData(post(*http, "/v1/modules/scale/invoke/main", kInvokeBody)) == kResultA);
}

namespace {

/// Entries on ui8, ui64 and bf16 whose kernels compute on the same bytes (the integers as
/// signless ones).
const std::string kElementTypes = R"mlir(
module @app {
  func.func public @inc(%x: tensor<4xui8>) -> tensor<4xui8> {
    %y = catalyst.launch_kernel @dev::@inc(%x) : (tensor<4xui8>) -> tensor<4xui8>
    return %y : tensor<4xui8>
  }
  func.func public @wide(%x: tensor<2xui64>) -> tensor<2xui64> {
    %y = catalyst.launch_kernel @dev::@wide(%x) : (tensor<2xui64>) -> tensor<2xui64>
    return %y : tensor<2xui64>
  }
  func.func public @half(%x: tensor<2xbf16>) -> tensor<2xbf16> {
    %y = catalyst.launch_kernel @dev::@half(%x) : (tensor<2xbf16>) -> tensor<2xbf16>
    return %y : tensor<2xbf16>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @inc(%x: tensor<4xi8>) -> tensor<4xi8> {
      %one = arith.constant dense<1> : tensor<4xi8>
      %y = arith.addi %x, %one : tensor<4xi8>
      return %y : tensor<4xi8>
    }
    func.func public @wide(%x: tensor<2xi64>) -> tensor<2xi64> {
      %one = arith.constant dense<1> : tensor<2xi64>
      %y = arith.addi %x, %one : tensor<2xi64>
      return %y : tensor<2xi64>
    }
    func.func public @half(%x: tensor<2xbf16>) -> tensor<2xbf16> {
      %y = arith.addf %x, %x : tensor<2xbf16>
      return %y : tensor<2xbf16>
    }
  }
}
)mlir";

} // namespace

TEST_CASE("a module on ui8, ui64 and bf16 is described and invoked with those dtypes",
          "[serve][dtypes]") {
  ServeProcess serve;
  auto http = serve.client();
  Reply created = post(*http, "/v1/modules", createBody("types", kElementTypes));
  INFO(created.raw);
  REQUIRE(created.status == 201);
  json inc;
  for (const json &entry : created.body["entries"])
    if (entry["name"] == "inc")
      inc = entry;
  CHECK(inc["inputs"][0] == json({{"dtype", "ui8"}, {"shape", {4}}, {"type", "tensor<4xui8>"}}));
  CHECK(inc["outputs"][0]["dtype"] == "ui8");

  Reply invoked =
      post(*http, "/v1/modules/types/invoke/inc", R"({"inputs": [[0, 200, 254, 255]]})");
  INFO(invoked.raw);
  REQUIRE(invoked.status == 200);
  CHECK(invoked.body["outputs"][0] ==
        json({{"dtype", "ui8"}, {"shape", {4}}, {"data", {1, 201, 255, 0}}}));

  Reply wide =
      post(*http, "/v1/modules/types/invoke/wide", R"({"inputs": [[18446744073709551614, 7]]})");
  INFO(wide.raw);
  REQUIRE(wide.status == 200);
  CHECK(wide.body["outputs"][0]["data"] ==
        json::array({std::numeric_limits<uint64_t>::max(), uint64_t(8)}));

  // 1 + 3 * 2^-8 rounds (ties to even) to 1 + 2^-6 before the kernel doubles it.
  Reply half = post(*http, "/v1/modules/types/invoke/half", R"({"inputs": [[1.01171875, -0.5]]})");
  INFO(half.raw);
  REQUIRE(half.status == 200);
  CHECK(half.body["outputs"][0] ==
        json({{"dtype", "bf16"}, {"shape", {2}}, {"data", {2.03125, -1}}}));

  struct Refused {
    const char *body;
    const char *mentions;
  };
  for (const Refused &r : std::vector<Refused>{
           {R"({"inputs": [[0, 256, 1, 2]]})",
            "element 1 (256) is not a whole number ui8 can hold (0 to 255)"},
           {R"({"inputs": [[0, -1, 1, 2]]})",
            "element 1 (-1) is not a whole number ui8 can hold (0 to 255)"},
           {R"({"inputs": [{"dtype": "i8", "data": [1, 2, 3, 4]}]})",
            "input 0 of 'inc' must be ui8, got i8"},
       }) {
    Reply reply = post(*http, "/v1/modules/types/invoke/inc", r.body);
    INFO(r.body << " -> " << reply.raw);
    CHECK(reply.status == 400);
    CHECK(errorCode(reply) == "invalid_input");
    CHECK_THAT(reply.raw, Catch::Contains(r.mentions));
  }

  // Every spelling of the same input gives the same answer, whichever reading takes it: keys
  // in any order, booleans, 200.0 for 200 (also last, after numbers read in one step each), a
  // key the server does not read.
  for (const char *same : {
           R"({"inputs": [{"data": [false, 200, 254, 255], "dtype": "ui8", "shape": [4]}]})",
           R"({"inputs": [{"shape": [4], "data": [0.0, 200.0, 254, 255]}]})",
           R"({"inputs": [[0, 200, 254, 255.0]]})",
           R"({"note": "ignored", "inputs": [[0, 200, 254, 255]]})",
           R"({"inputs": [[0, 200, 254, 255]], "inputs": [[0, 200, 254, 255]]})",
       }) {
    Reply reply = post(*http, "/v1/modules/types/invoke/inc", same);
    INFO(same << " -> " << reply.raw);
    REQUIRE(reply.status == 200);
    CHECK(reply.body["outputs"][0]["data"] == json({1, 201, 255, 0}));
  }
  // Nothing may follow the object.
  Reply trailing = post(*http, "/v1/modules/types/invoke/inc", R"({"inputs": [[0, 1, 2, 3]]} [])");
  INFO(trailing.raw);
  CHECK(trailing.status == 400);
  CHECK_THAT(trailing.raw, Catch::Contains("the request body is not JSON"));

  // Frames carry the same bytes, labelled ui8 both ways.
  const std::string type = "application/x-courier-frame";
  std::string body = json({{"inputs", {{{"dtype", "ui8"}, {"shape", {4}}}}}}).dump() + "\n";
  body += std::string("\x00\x7f\x80\xff", 4);
  httplib::Result res = http->Post("/v1/modules/types/invoke/inc", body, type.c_str());
  REQUIRE(res);
  INFO(res->body);
  REQUIRE(res->status == 200);
  size_t newline = res->body.find('\n');
  REQUIRE(newline != std::string::npos);
  CHECK(json::parse(res->body.substr(0, newline))["outputs"][0] ==
        json({{"dtype", "ui8"}, {"shape", {4}}, {"offset", 0}, {"bytes", 4}}));
  CHECK(res->body.substr(newline + 1) == std::string("\x01\x80\x81\x00", 4));
}
