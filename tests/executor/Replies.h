// What the executor tests send and get back over the /v1 protocol: tensors as launch frames
// carry them, and replies decoded enough to check and to describe in a failure.
#ifndef COURIER_TESTS_EXECUTOR_REPLIES_H
#define COURIER_TESTS_EXECUTOR_REPLIES_H

#include "llvm/Support/MemoryBuffer.h"

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace courier::testing {

inline constexpr const char *kFrameType = "application/x-courier-frame";
inline constexpr const char *kJsonType = "application/json";

inline std::string readFile(const char *path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  REQUIRE(buffer);
  return (*buffer)->getBuffer().str();
}

/// A tensor as it travels in a launch frame: packed row-major bytes.
struct Tensor {
  int64_t elemSize = 0;
  std::vector<int64_t> sizes;
  std::string bytes;
};

inline Tensor f64s(const std::vector<double> &values) {
  return {8,
          {static_cast<int64_t>(values.size())},
          std::string(reinterpret_cast<const char *>(values.data()), values.size() * 8)};
}

inline Tensor i64Scalar(int64_t value) {
  return {8, {}, std::string(reinterpret_cast<const char *>(&value), 8)};
}

/// A rank-1 i8 tensor holding `text` and, when `terminate`, a trailing NUL.
inline Tensor chars(const std::string &text, bool terminate) {
  std::string bytes = terminate ? text + '\0' : text;
  return {1, {static_cast<int64_t>(bytes.size())}, bytes};
}

struct ResultShape {
  int64_t rank = 0;
  int64_t elemSize = 0;
};

/// What a request got back, decoded enough to check and to describe in a failure.
struct Outcome {
  int status = 0; ///< 0 when no reply arrived.
  std::string code, message;
  std::vector<std::string> results; ///< Each result's bytes, for a launch frame.
  std::string body;

  std::string describe() const {
    if (status == 0)
      return "no reply: " + message;
    return "status " + std::to_string(status) + (code.empty() ? "" : " " + code + ": " + message) +
           (!results.empty() ? ", " + std::to_string(results.size()) + " result(s)"
            : code.empty()   ? ", body: " + body.substr(0, 300)
                             : "");
  }
};

inline Outcome outcomeOf(const httplib::Result &res) {
  Outcome outcome;
  if (!res) {
    outcome.message = httplib::to_string(res.error());
    return outcome;
  }
  outcome.status = res->status;
  outcome.body = res->body;
  if (res->get_header_value("Content-Type") == kFrameType) {
    size_t newline = res->body.find('\n');
    nlohmann::json header = nlohmann::json::parse(res->body.substr(0, newline), nullptr, false);
    if (newline != std::string::npos && header.is_object() && header.contains("results"))
      for (const nlohmann::json &result : header["results"])
        outcome.results.push_back(res->body.substr(newline + 1 + result["offset"].get<size_t>(),
                                                   result["bytes"].get<size_t>()));
    return outcome;
  }
  nlohmann::json body = nlohmann::json::parse(res->body, nullptr, false);
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    outcome.code = body["error"].value("code", "");
    outcome.message = body["error"].value("message", "");
  }
  return outcome;
}

/// The error code of a reply, or what came instead (no reply, a body without an error).
inline std::string codeOf(const httplib::Result &res) {
  if (!res)
    return "no reply: " + httplib::to_string(res.error());
  nlohmann::json body = nlohmann::json::parse(res->body, nullptr, false);
  if (!body.is_object() || !body.contains("error"))
    return "not an error body: " + res->body;
  return body["error"]["code"];
}

/// The launch frame of the test kernels' noop entry of the object `sha`: no inputs, no results.
inline std::string noopFrame(const std::string &sha) {
  return nlohmann::json({{"object", sha},
                         {"entry", "_catalyst_pyface_noop"},
                         {"inputs", nlohmann::json::array()},
                         {"results", nlohmann::json::array()}})
             .dump() +
         "\n";
}

inline std::vector<double> doublesOf(const std::string &bytes) {
  std::vector<double> values(bytes.size() / 8);
  std::memcpy(values.data(), bytes.data(), values.size() * 8);
  return values;
}

inline int64_t i64Of(const std::string &bytes) {
  int64_t value = 0;
  std::memcpy(&value, bytes.data(), std::min<size_t>(bytes.size(), 8));
  return value;
}

} // namespace courier::testing

#endif // COURIER_TESTS_EXECUTOR_REPLIES_H
