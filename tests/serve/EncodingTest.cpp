// courier-serve refuses a compressed request body before reading it, on every route and on
// plaintext and TLS listeners alike: httplib would inflate it past --max-body-bytes.
#include "tests/serve/ServeProcess.h"
#include "tests/support/HostileRequests.h"
#include "tests/support/RawConnection.h"
#include "tests/support/RefusedReplies.h"
#include "tests/support/TestCertificates.h"
#include "tests/support/TlsConnection.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace courier::testing;

namespace {

struct Route {
  const char *method;
  std::string path;
};

/// Every route of serve/RestService.cpp's table (GET serves HEAD too).
const std::vector<Route> kRoutes = {
    {"GET", "/v1/health"},
    {"GET", "/v1/ready"},
    {"GET", "/metrics"},
    {"HEAD", "/v1/health"},
    {"GET", "/v1/modules"},
    {"POST", "/v1/modules"},
    {"GET", "/v1/modules/twice"},
    {"PUT", "/v1/modules/twice"},
    {"DELETE", "/v1/modules/twice"},
    {"POST", "/v1/modules/twice/invoke/main"},
};

bool carriesBody(const Route &route) {
  return std::string(route.method) != "GET" && std::string(route.method) != "HEAD";
}

} // namespace

TEST_CASE("courier-serve refuses a gzip body with 415 on every route before reading it, and its "
          "memory stays small",
          "[serve][security][memory]") {
  ServeProcess serve(ServeConfig{"", {"--quiet", "--max-body-bytes", std::to_string(1 << 20)}});
  // 128 MiB of zeros in about 128 KiB, within the 1 MiB body limit.
  const std::string bomb = gzipOfZeros(128u << 20);
  REQUIRE(bomb.size() < (1u << 20));
  long peakBefore = procStatusKiB(serve.processId(), "VmHWM");
  for (const Route &route : kRoutes) {
    INFO(route.method << " " << route.path);
    RawConnection connection(serve.port());
    connection.send(
        encodedRequest(route.method, route.path, "gzip", carriesBody(route) ? bomb : ""));
    RawReply reply = parseRawReply(connection.readAll());
    checkRefusedAlone(reply, 415);
    if (std::string(route.method) != "HEAD") {
      CHECK(reply.code == "unsupported_encoding");
      CHECK_THAT(reply.message, Catch::Contains("Content-Encoding 'gzip' is not accepted"));
    }
  }
  long grownKiB = procStatusKiB(serve.processId(), "VmHWM") - peakBefore;
  INFO("courier-serve's peak memory grew by " << grownKiB << " KiB");
  CHECK(grownKiB < (32 << 10));
  // No route ran, and the server serves on.
  CHECK(serve.metric("courier_serve_modules") <= 0);
  auto http = serve.client();
  httplib::Result health = http->Get("/v1/health");
  REQUIRE(health);
  CHECK(health->status == 200);
}

TEST_CASE("courier-serve's TLS listener refuses a gzip body with 415 and closes the connection",
          "[serve][tls][security]") {
  TestCertificates pki;
  ServerProcess serve(ServerSpec{COURIER_SERVE_PATH,
                                 "courier-serve",
                                 0,
                                 "",
                                 {"--quiet", "--cache-dir", "{dir}/cache", "--tls-cert",
                                  pki.serverCert, "--tls-key", pki.serverKey},
                                 pki.caCert});
  const std::string bomb = gzipOfZeros(16u << 20);
  for (const Route &route : kRoutes) {
    INFO(route.method << " " << route.path);
    TlsConnection connection(serve.port(), {pki.caCert});
    REQUIRE(connection.send(
        encodedRequest(route.method, route.path, "gzip", carriesBody(route) ? bomb : "")));
    RawReply reply = parseRawReply(connection.readAll());
    checkRefusedAlone(reply, 415);
  }
  auto http = serve.client();
  httplib::Result health = http->Get("/v1/health");
  REQUIRE(health);
  CHECK(health->status == 200);
}
