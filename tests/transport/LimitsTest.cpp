// What a peer cannot make the executor (or its client) hold: JSON nested past
// wire::kMaxJsonDepth on every route that reads JSON; against a real courier-executor, whose
// memory is read from /proc.
#include "tests/support/Require.h"
#include "tests/transport/ExecutorProcess.h"
#include "transport/Backend.h"
#include "transport/ErrorCode.h"
#include "transport/Wire.h"

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>

using namespace courier::transport;
using courier::testing::ExecutorConfig;
using courier::testing::ExecutorProcess;
using json = nlohmann::json;

namespace {

/// A field of /proc/PID/status in KiB ("VmRSS", "VmHWM": the peak of VmRSS).
long statusKiB(pid_t pid, const std::string &field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(field + ":", 0) == 0)
      return std::stol(line.substr(field.size() + 1));
  FAIL("no " << field << " for process " << pid);
  return 0;
}

struct ErrorReply {
  int status = 0;
  std::string code, message;
};

ErrorReply errorOf(const httplib::Result &res) {
  REQUIRE(res);
  ErrorReply reply{res->status, "", ""};
  json body = json::parse(res->body, nullptr, false);
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    reply.code = body["error"].value("code", "");
    reply.message = body["error"].value("message", "");
  }
  return reply;
}

std::string openSession(httplib::Client &http) {
  httplib::Result opened = http.Post("/v1/sessions");
  REQUIRE(opened);
  REQUIRE(opened->status == 201);
  return json::parse(opened->body)["session"];
}

} // namespace

TEST_CASE("JSON nested deeper than 128 levels is refused with 400 on every route that reads "
          "JSON, and the executor's memory stays small",
          "[limits][memory]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--quiet"}});
  auto http = executor.client();
  http->set_read_timeout(std::chrono::seconds(60));
  http->set_write_timeout(std::chrono::seconds(60));
  std::string session = openSession(*http);
  std::string base = "/v1/sessions/" + session;
  long peakBefore = statusKiB(executor.processId(), "VmHWM");

  // Tens of megabytes of '[': parsed, each would take the executor gigabytes.
  const std::string deep(24 << 20, '[');
  struct Route {
    std::string path, body, contentType, code;
  };
  // A launch frame's header line ends at its newline, and is at most 1 MiB.
  std::string deepFrame = std::string(512 << 10, '[') + "\n";
  for (const Route &route :
       {Route{base + "/launch_async", deep, wire::kJsonContentType, "bad_request"},
        Route{base + "/shm", deep, wire::kJsonContentType, "bad_request"},
        Route{base + "/launch", deepFrame, wire::kFrameContentType, "bad_frame"}}) {
    INFO(route.path);
    ErrorReply refused = errorOf(http->Post(route.path, route.body, route.contentType.c_str()));
    CHECK(refused.status == 400);
    CHECK(refused.code == route.code);
    CHECK_THAT(refused.message, Catch::Contains("deeper than 128 levels"));
  }
  // Peaks, not samples: whatever the executor held at any moment of the requests.
  long grownKiB = statusKiB(executor.processId(), "VmHWM") - peakBefore;
  INFO("the executor's peak memory grew by " << grownKiB << " KiB");
  CHECK(grownKiB < (192 << 10));

  // 128 levels are JSON like any other; the body is then refused for what it says.
  std::string nested128 = R"({"object": )" + std::string(127, '[') + std::string(127, ']') + "}";
  ErrorReply shallow = errorOf(http->Post(base + "/launch_async", nested128, "application/json"));
  CHECK(shallow.status == 400);
  CHECK_THAT(shallow.message, Catch::Contains("expected {\"object\""));
  std::string nested129 = R"({"object": )" + std::string(128, '[') + std::string(128, ']') + "}";
  CHECK_THAT(errorOf(http->Post(base + "/launch_async", nested129, "application/json")).message,
             Catch::Contains("deeper than 128 levels"));
  // Brackets in strings are text.
  std::string quoted = R"({"object": ")" + std::string(1000, '[') + R"(", "entry": "e"})";
  CHECK_THAT(errorOf(http->Post(base + "/launch_async", quoted, "application/json")).message,
             Catch::Contains("SHA-256"));
  httplib::Result health = http->Get("/v1/health");
  REQUIRE(health);
  CHECK(health->status == 200);
}

TEST_CASE("the HTTP client refuses an executor's reply or error body nested deeper than 128 "
          "levels without parsing it",
          "[limits]") {
  // A hostile executor: a health reply of 8 MiB of '[', then an error body of the same.
  httplib::Server hostile;
  std::atomic<int> asked{0};
  const std::string deep(8 << 20, '[');
  hostile.Get("/v1/health", [&](const httplib::Request &, httplib::Response &res) {
    res.status = asked++ == 0 ? 200 : 503;
    res.set_content(deep, "application/json");
  });
  int port = hostile.bind_to_any_port("127.0.0.1");
  REQUIRE(port > 0);
  // Bound and listening: a connection waits in the backlog until the loop accepts it.
  std::thread serving([&] { hostile.listen_after_bind(); });

  std::unique_ptr<Backend> backend = courier::testing::require(
      createBackend("127.0.0.1:" + std::to_string(port), BackendOptions{}));
  for (const char *what : {"the reply", "the error body"}) {
    INFO(what);
    llvm::Expected<Health> health = backend->health();
    REQUIRE(!health);
    std::string message = llvm::toString(health.takeError());
    CHECK_THAT(message, Catch::Contains(what) && Catch::Contains("deeper than 128 levels"));
    CHECK_THAT(message, Catch::Contains("127.0.0.1:" + std::to_string(port)));
  }
  hostile.stop();
  serving.join();
}
