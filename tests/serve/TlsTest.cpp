// courier-serve and TLS: its REST API over TLS to curl, its modules' targets sent to an
// https:// executor it verifies, and its refusal to serve plaintext beyond loopback.
#include "tests/serve/RestClient.h"
#include "tests/serve/ServeProcess.h"
#include "tests/support/TestCertificates.h"

#include <catch2/catch.hpp>
#include <httplib.h>

#include <fstream>

using namespace courier::testing;
using Catch::Contains;

namespace {

/// Doubles its input in a target module, on whichever executor courier-serve sends it to.
const std::string kTwiceOnTarget =
    "module @app {\n"
    "  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {\n"
    "    %y = catalyst.launch_kernel @dev::@twice(%x) : (tensor<4xf64>) -> tensor<4xf64>\n"
    "    return %y : tensor<4xf64>\n"
    "  }\n"
    "  module @dev attributes {catalyst.target = {}} {\n"
    "    func.func public @twice(%x: tensor<4xf64>) -> tensor<4xf64> {\n"
    "      %r = arith.addf %x, %x : tensor<4xf64>\n"
    "      return %r : tensor<4xf64>\n"
    "    }\n"
    "  }\n"
    "}\n";

} // namespace

TEST_CASE("courier-serve with a certificate serves its REST API over TLS to curl trusting its CA",
          "[serve][tls]") {
  TestCertificates pki;
  auto serve =
      startTlsServer(pki, COURIER_SERVE_PATH, "courier-serve", {"--cache-dir", "{dir}/cache"});
  REQUIRE(serve->address().rfind("https://127.0.0.1:", 0) == 0);
  std::string body = pki.directory() + "/create.json";
  std::ofstream(body) << createBody("twice", kTwiceOnTarget);
  std::string curl = "curl -sS --cacert " + pki.caCert + " ";
  auto [status, output] =
      runCommand(curl + "-d @" + body + " -H 'Content-Type: application/json' " + serve->address() +
                 "/v1/modules");
  CHECK(status == 0);
  CHECK_THAT(output, Contains("\"twice\""));
  std::tie(status, output) = runCommand(curl + "-d '{\"inputs\": [[1, 2, 3, 4]]}' " +
                                        serve->address() + "/v1/modules/twice/invoke/main");
  CHECK(status == 0);
  CHECK_THAT(output, Contains("\"data\":[2,4,6,8]"));
  // curl's own CA bundle does not know the test CA.
  std::tie(status, output) = runCommand("curl -sS " + serve->address() + "/v1/health");
  CHECK(status != 0);
  // Nor is plaintext answered on the TLS port.
  std::tie(status, output) =
      runCommand("curl -sS http://127.0.0.1:" + std::to_string(serve->port()) + "/v1/health");
  CHECK(status != 0);
}

TEST_CASE("courier-serve sends a module's target to an https:// executor it verifies with "
          "--tls-ca",
          "[serve][tls]") {
  TestCertificates pki;
  auto executor = startTlsServer(pki, COURIER_EXECUTOR_PATH, "courier-executor");
  ServeProcess serve(ServeConfig{"", {"--executor", executor->address(), "--tls-ca", pki.caCert}});
  auto http = serve.client();
  requireCreated(*http, "twice", kTwiceOnTarget);
  Reply invoked = post(*http, "/v1/modules/twice/invoke/main", R"({"inputs": [[1, 2, 3, 4]]})");
  INFO(invoked.raw);
  REQUIRE(invoked.status == 200);
  CHECK(outputData(invoked) == std::vector<double>{2, 4, 6, 8});
}

TEST_CASE("courier-serve without the executor's CA fails the module's load, naming the unknown CA",
          "[serve][tls]") {
  TestCertificates pki;
  auto executor = startTlsServer(pki, COURIER_EXECUTOR_PATH, "courier-executor");
  ServeProcess serve(
      ServeConfig{"", {"--executor", executor->address(), "--tls-ca", pki.otherCaCert}});
  auto http = serve.client();
  Reply created = post(*http, "/v1/modules", createBody("twice", kTwiceOnTarget));
  INFO(created.raw);
  CHECK(created.status == 502);
  CHECK(errorCode(created) == "executor_unavailable");
  CHECK_THAT(errorMessage(created), Contains("unknown CA"));
  CHECK_THAT(errorMessage(created), Contains("[tls_failed]"));
}

TEST_CASE("courier-serve beyond loopback needs TLS or --insecure-plaintext", "[serve][tls]") {
  TestCertificates pki;
  std::string token = pki.directory() + "/token";
  std::ofstream(token) << "secret\n";
  auto [status, log] = runServeToExit({"--listen", "0.0.0.0:0", "--token-file", token});
  CHECK(status > 0);
  CHECK_THAT(log, Contains("refusing to listen on '0.0.0.0' without TLS"));
  CHECK_THAT(log, Contains("--insecure-plaintext"));
  std::tie(status, log) = runServeToExit({"--tls-cert", pki.serverCert, "--tls-key", pki.notPem});
  CHECK(status > 0);
  CHECK_THAT(log, Contains("--tls-key '" + pki.notPem + "' holds no unencrypted PEM private key"));
}
