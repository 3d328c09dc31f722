// What the courier-serve tests share: replies parsed as JSON, the calls they make, and a
// scratch directory.
#ifndef COURIER_TESTS_SERVE_RESTCLIENT_H
#define COURIER_TESTS_SERVE_RESTCLIENT_H

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
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

/// What clients calling one entry saw while the module was being replaced.
struct CallTally {
  std::atomic<int> failures{0}, mixed{0}, fromA{0}, fromB{0};
  std::mutex mutex;
  std::string firstFailure;
};

/// Runs `clients` threads, each on a connection from `connect`, posting `body` to `path`
/// until `work` returns. Odd versions must answer `resultA` and even ones `resultB` (as the
/// first output's data): a reply whose version and data disagree is mixed.
inline void callDuring(const std::function<std::unique_ptr<httplib::Client>()> &connect,
                       int clients, const std::string &path, const std::string &body,
                       const std::vector<double> &resultA, const std::vector<double> &resultB,
                       CallTally &tally, const std::function<void()> &work) {
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t)
    threads.emplace_back([&] {
      std::unique_ptr<httplib::Client> http = connect();
      while (!done) {
        httplib::Result res = http->Post(path.c_str(), body, "application/json");
        if (!res || res->status != 200) {
          std::lock_guard<std::mutex> lock(tally.mutex);
          if (tally.firstFailure.empty())
            tally.firstFailure = res ? res->body : httplib::to_string(res.error());
          tally.failures++;
          continue;
        }
        json reply = json::parse(res->body);
        auto data = reply["outputs"][0]["data"].get<std::vector<double>>();
        int version = reply["version"];
        if (data == resultA && version % 2 == 1)
          tally.fromA++;
        else if (data == resultB && version % 2 == 0)
          tally.fromB++;
        else
          tally.mixed++;
      }
    });
  work();
  done = true;
  for (std::thread &thread : threads)
    thread.join();
}

} // namespace courier::testing

#endif // COURIER_TESTS_SERVE_RESTCLIENT_H
