// Opening a session on a courier-executor over HTTP, for the tests that need one and talk to
// the executor through a plain client.
#ifndef COURIER_TESTS_TRANSPORT_SESSIONS_H
#define COURIER_TESTS_TRANSPORT_SESSIONS_H

#include "transport/Wire.h"

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <string>

namespace courier::testing {

/// Opens a session through `http` (POST /v1/sessions) and returns its id; fails the test
/// unless the executor created one.
inline std::string openSession(httplib::Client &http) {
  httplib::Result opened = http.Post("/v1/sessions", "", transport::wire::kJsonContentType);
  REQUIRE(opened);
  REQUIRE(opened->status == 201);
  return nlohmann::json::parse(opened->body)["session"];
}

} // namespace courier::testing

#endif // COURIER_TESTS_TRANSPORT_SESSIONS_H
