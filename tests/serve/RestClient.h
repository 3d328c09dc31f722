// What the courier-serve tests share: replies parsed as JSON, the calls they make, and a
// scratch directory.
#ifndef COURIER_TESTS_SERVE_RESTCLIENT_H
#define COURIER_TESTS_SERVE_RESTCLIENT_H

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace courier::testing {

using json = nlohmann::json;

/// A scratch directory removed when the test ends, passed or not.
struct TempDir {
  TempDir() {
    char pattern[] = "/tmp/courier-serve-test-XXXXXX";
    if (!mkdtemp(pattern))
      throw std::runtime_error("cannot create a temporary directory");
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string path;
};

struct Reply {
  int status = 0;
  json body;
  std::string raw;
  httplib::Headers headers;
};

inline Reply toReply(const httplib::Result &res) {
  REQUIRE(res);
  Reply reply{res->status, json(), res->body, res->headers};
  reply.body = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  return reply;
}

inline Reply post(httplib::Client &http, const std::string &path, const std::string &body,
                  const std::string &type = "application/json") {
  return toReply(http.Post(path.c_str(), body, type.c_str()));
}

inline Reply put(httplib::Client &http, const std::string &path, const std::string &body,
                 const std::string &type = "application/json") {
  return toReply(http.Put(path.c_str(), body, type.c_str()));
}

inline Reply get(httplib::Client &http, const std::string &path) {
  return toReply(http.Get(path.c_str()));
}

inline std::string createBody(const std::string &name, const std::string &mlir,
                              json options = json::object()) {
  json body = {{"name", name}, {"mlir", mlir}};
  if (!options.empty())
    body["options"] = options;
  return body.dump();
}

inline std::vector<double> outputData(const Reply &reply) {
  return reply.body.at("outputs").at(0).at("data").get<std::vector<double>>();
}

inline std::string errorCode(const Reply &reply) {
  if (!reply.body.is_object() || !reply.body.contains("error"))
    return "<no JSON error in: " + reply.raw + ">";
  return reply.body["error"].value("code", "<no code>");
}

inline std::string errorMessage(const Reply &reply) {
  if (!reply.body.is_object() || !reply.body.contains("error"))
    return "<no JSON error in: " + reply.raw + ">";
  return reply.body["error"].value("message", "<no message>");
}

inline void requireCreated(httplib::Client &http, const std::string &name,
                           const std::string &mlir) {
  Reply created = post(http, "/v1/modules", createBody(name, mlir));
  INFO(created.raw);
  REQUIRE(created.status == 201);
}

} // namespace courier::testing

#endif // COURIER_TESTS_SERVE_RESTCLIENT_H
