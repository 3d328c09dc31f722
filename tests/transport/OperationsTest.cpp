// What an operator sees of courier-executor: the name its process goes by, the log lines it
// writes, and what it lists of the sessions and objects it holds.
#include "tests/kernels/KernelPaths.h"
#include "tests/support/RawConnection.h"
#include "tests/transport/ExecutorProcess.h"
#include "tests/transport/Sessions.h"
#include "transport/Wire.h"

#include "llvm/Support/MemoryBuffer.h"

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace courier::testing;
using json = nlohmann::json;
namespace wire = courier::transport::wire;

namespace {

std::vector<std::string> nulSeparated(const std::string &text) {
  std::vector<std::string> fields;
  std::stringstream in(text);
  for (std::string field; std::getline(in, field, '\0');)
    fields.push_back(field);
  return fields;
}

std::string putObject(httplib::Client &http, const char *path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  REQUIRE(buffer);
  std::string bytes = (*buffer)->getBuffer().str();
  std::string sha = wire::sha256Hex(bytes);
  httplib::Result res = http.Put(("/v1/objects/" + sha).c_str(), bytes, wire::kBytesContentType);
  REQUIRE(res);
  REQUIRE(res->status == 201);
  return sha;
}

json getJson(httplib::Client &http, const std::string &path) {
  httplib::Result res = http.Get(path.c_str());
  REQUIRE(res);
  INFO(res->body);
  REQUIRE(res->status == 200);
  return json::parse(res->body);
}

} // namespace

TEST_CASE("the executor keeps its program's name after it re-executes itself",
          "[transport][operations]") {
  // Without the tunable in the environment it inherits, the executor re-executes itself to
  // add it (courier-executor.cpp, enableHugePageMalloc), and the tunable then shows that it
  // did.
  const char *inherited = std::getenv("GLIBC_TUNABLES");
  REQUIRE(std::string(inherited ? inherited : "").find("glibc.malloc.hugetlb") ==
          std::string::npos);
  ExecutorProcess executor;
  std::vector<std::string> environment = nulSeparated(procFile(executor.processId(), "environ"));
  bool tuned = false;
  for (const std::string &variable : environment)
    tuned |= variable.rfind("GLIBC_TUNABLES=", 0) == 0 &&
             variable.find("glibc.malloc.hugetlb=1") != std::string::npos;
  REQUIRE(tuned);
  // The kernel keeps 15 characters of a process's name: what ps, top and pgrep match.
  CHECK(procFile(executor.processId(), "comm") == "courier-executo\n");
  std::vector<std::string> argv = nulSeparated(procFile(executor.processId(), "cmdline"));
  REQUIRE(!argv.empty());
  CHECK(argv[0] == COURIER_EXECUTOR_PATH);
}

TEST_CASE("the executor lists its sessions, with what each holds, and its objects, with their "
          "holders",
          "[transport][operations]") {
  ExecutorProcess executor(ExecutorConfig{0, "listing-token", {}});
  auto http = executor.client();
  CHECK(getJson(*http, "/v1/sessions") == json::parse(R"({"sessions":[]})"));
  CHECK(getJson(*http, "/v1/objects") == json::parse(R"({"objects":[],"bytes":0})"));

  std::string holder = openSession(*http), idle = openSession(*http);
  std::string scale = putObject(*http, COURIER_KERNEL_SCALE);
  std::string add = putObject(*http, COURIER_KERNEL_ADD);
  httplib::Result attached =
      http->Post(("/v1/sessions/" + holder + "/objects/" + scale).c_str(), "", "text/plain");
  REQUIRE(attached);
  REQUIRE(attached->status == 200);

  json sessions = getJson(*http, "/v1/sessions")["sessions"];
  REQUIRE(sessions.size() == 2);
  // By id, each with its objects, its worker and what is running on it.
  CHECK(sessions[0]["session"] < sessions[1]["session"]);
  json held = sessions[0]["session"] == holder ? sessions[0] : sessions[1];
  json other = sessions[0]["session"] == holder ? sessions[1] : sessions[0];
  CHECK(other["session"] == idle);
  CHECK(held["objects"] == json::array({scale}));
  CHECK(other["objects"] == json::array());
  // The attach loaded the object in the session's worker, a process of its own.
  REQUIRE(held["worker_pid"].is_number());
  CHECK(held["worker_pid"].get<int64_t>() != executor.processId());
  CHECK(held["worker_pid"].get<int64_t>() > 0);
  CHECK(held["requests_in_flight"] == 0);
  CHECK(held["pending_launches"] == 0);
  CHECK(held["idle_ms"].get<int64_t>() >= 0);

  json objects = getJson(*http, "/v1/objects");
  REQUIRE(objects["objects"].size() == 2);
  uint64_t total = 0;
  for (const json &object : objects["objects"]) {
    CHECK((object["sha256"] == scale || object["sha256"] == add));
    CHECK(object["holders"] == (object["sha256"] == scale ? 1 : 0));
    total += object["size"].get<uint64_t>();
  }
  CHECK(objects["objects"][0]["sha256"] < objects["objects"][1]["sha256"]);
  CHECK(objects["bytes"] == total);

  // Closing the session ends its hold.
  REQUIRE(http->Delete(("/v1/sessions/" + holder).c_str())->status == 204);
  json after = getJson(*http, "/v1/sessions")["sessions"];
  REQUIRE(after.size() == 1);
  CHECK(after[0]["session"] == idle);
  json heldBy = getJson(*http, "/v1/objects")["objects"];
  for (const json &object : heldBy)
    CHECK(object["holders"] == 0);

  // Both lists are behind the token.
  httplib::Client anonymous("127.0.0.1", executor.port());
  CHECK(anonymous.Get("/v1/sessions")->status == 401);
  CHECK(anonymous.Get("/v1/objects")->status == 401);
}

TEST_CASE("with --log-format=json each request is one JSON line with its time, level, id, "
          "route, status, duration and session",
          "[transport][operations][log]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--log-format=json"}});
  auto http = executor.client();
  std::string session = openSession(*http);
  httplib::Result got = http->Get(("/v1/sessions/" + session).c_str(),
                                  httplib::Headers{{"X-Request-Id", "probe-42.a_b"}});
  REQUIRE(got);
  CHECK(got->get_header_value("X-Request-Id") == "probe-42.a_b");
  httplib::Result missing = http->Get("/v1/sessions/no-such-session");
  REQUIRE(missing);
  std::string madeUp = missing->get_header_value("X-Request-Id");
  CHECK(std::regex_match(madeUp, std::regex("[0-9a-f]{16}")));
  // An id a log line could not carry as it is gets replaced.
  httplib::Result odd = http->Get("/v1/health", httplib::Headers{{"X-Request-Id", "a b"}});
  REQUIRE(odd);
  CHECK(std::regex_match(odd->get_header_value("X-Request-Id"), std::regex("[0-9a-f]{16}")));

  auto requestLine = [&](const std::string &id) {
    std::string line = executor.awaitLogLine([&](const std::string &text) {
      return text.find("\"request_id\":\"" + id + "\"") != std::string::npos;
    });
    INFO(executor.log());
    REQUIRE(!line.empty());
    return json::parse(line);
  };
  json found = requestLine("probe-42.a_b");
  CHECK(std::regex_match(found["time"].get<std::string>(),
                         std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
  CHECK(found["level"] == "info");
  CHECK(found["msg"] == "request");
  CHECK(found["method"] == "GET");
  CHECK(found["route"] == "GET /v1/sessions/{id}");
  CHECK(found["path"] == "/v1/sessions/" + session);
  CHECK(found["status"] == 200);
  CHECK(found["duration_ms"].get<double>() >= 0);
  CHECK(found["bytes_in"] == 0);
  CHECK(found["bytes_out"].get<int64_t>() > 0);
  CHECK(found["session"] == session);

  json notFound = requestLine(madeUp);
  CHECK(notFound["level"] == "warn");
  CHECK(notFound["status"] == 404);
  CHECK(notFound["session"] == "no-such-session");

  // The session a POST opened is named though the path does not hold it.
  std::string opened = executor.awaitLogLine([&](const std::string &text) {
    return text.find("\"route\":\"POST /v1/sessions\"") != std::string::npos;
  });
  REQUIRE(!opened.empty());
  CHECK(json::parse(opened)["session"] == session);

  // Every line the executor writes is a JSON object.
  executor.awaitLogLine([&](const std::string &text) {
    return text.find("\"path\":\"/v1/health\"") != std::string::npos;
  });
  for (const std::string &line : executor.logLines()) {
    INFO(line);
    json parsed = json::parse(line, nullptr, false);
    CHECK(parsed.is_object());
    CHECK(parsed.contains("time"));
    CHECK(parsed.contains("level"));
  }
}

TEST_CASE("a request httplib refuses before routing gets an id in its reply and its log line",
          "[transport][operations][log]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--log-format=json"}});
  // A request line past httplib's 8192 bytes: refused before any handler of the executor runs.
  RawConnection connection(executor.port());
  connection.send("GET /v1/" + std::string(9000, 'a') +
                  " HTTP/1.1\r\nHost: x\r\n"
                  "Connection: close\r\n\r\n");
  std::string reply = connection.readAll();
  INFO(reply);
  std::smatch status;
  REQUIRE(std::regex_search(reply, status, std::regex("^HTTP/1.1 (4[0-9][0-9]) ")));
  std::smatch id;
  REQUIRE(std::regex_search(reply, id, std::regex("\r\nX-Request-Id: ([0-9a-f]{16})\r\n")));
  CHECK(reply.find("\"code\":\"bad_request\"") != std::string::npos);
  // The rest of what was sent cannot be read as a request: the reply says the connection
  // closes, so a client does not send its next request on it.
  CHECK(reply.find("\r\nConnection: close\r\n") != std::string::npos);
  std::string line = executor.awaitLogLine([&](const std::string &text) {
    return text.find("\"request_id\":\"" + id[1].str() + "\"") != std::string::npos;
  });
  INFO(executor.log());
  REQUIRE(!line.empty());
  CHECK(json::parse(line)["status"] == std::stoi(status[1].str()));
}

TEST_CASE("text log lines begin with the time and level and end with the request id and "
          "session",
          "[transport][operations][log]") {
  ExecutorProcess executor;
  auto http = executor.client();
  std::string session = openSession(*http);
  REQUIRE(
      http->Get(("/v1/sessions/" + session).c_str(), httplib::Headers{{"X-Request-Id", "text-7"}})
          ->status == 200);
  std::string line = executor.awaitLogLine(
      [](const std::string &text) { return text.find("request=text-7") != std::string::npos; });
  INFO(executor.log());
  CHECK(std::regex_match(
      line,
      std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z info GET /v1/sessions/)" + session +
                 R"( 200 in=0 out=\d+ [0-9.]+ms request=text-7 session=)" + session)));
}

TEST_CASE("the executor takes a log format of text or json and refuses any other",
          "[transport][operations][log]") {
  auto [status, log] = runServerToExit(COURIER_EXECUTOR_PATH, {"--log-format=xml"});
  CHECK(status > 0);
  CHECK_THAT(log, Catch::Contains("courier-executor: error: --log-format expects 'text' or 'json', "
                                  "got 'xml'"));
}

TEST_CASE("a request's path goes into a text log line quoted when it could pass for fields",
          "[transport][operations][log]") {
  ExecutorProcess executor;
  auto http = executor.client();
  // Decoded, the path is "/v1/sessions/x request=forged": a field, were it written bare.
  auto reply =
      http->Get("/v1/sessions/x%20request=forged", httplib::Headers{{"X-Request-Id", "real-1"}});
  REQUIRE(reply);
  std::string line = executor.awaitLogLine(
      [](const std::string &text) { return text.find("request=real-1") != std::string::npos; });
  INFO(line);
  // The forged text stays inside the quoted path: the one field is the real id.
  CHECK(std::regex_match(line, std::regex(R"(\S+ warn GET "/v1/sessions/x request=forged" 404 )"
                                          R"(in=0 out=\d+ [0-9.]+ms request=real-1)")));
}
