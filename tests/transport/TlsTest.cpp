// TLS between the HTTP backend and a real courier-executor on loopback: verification of the
// executor's certificate, mutual TLS and its session resumption, the errors of each way it
// fails, the start-up refusals of a server whose TLS settings do not hold, and a TLS
// listener's limits on a request's head, encoding and framing.
#include "tests/kernels/KernelPaths.h"
#include "tests/support/HostileRequests.h"
#include "tests/support/RefusedReplies.h"
#include "tests/support/ServerProcess.h"
#include "tests/support/TestCertificates.h"
#include "tests/support/TlsConnection.h"
#include "transport/Backend.h"
#include "transport/ErrorCode.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <catch2/catch.hpp>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <poll.h>
#include <sys/wait.h>

using namespace courier::transport;
using Catch::Contains;
using namespace courier::testing;

namespace {

/// A courier-executor serving TLS with `cert` and the test server key; `extra` follows.
std::unique_ptr<ServerProcess> tlsExecutor(const TestCertificates &pki, const std::string &cert,
                                           std::vector<std::string> extra = {}) {
  ServerSpec spec{COURIER_EXECUTOR_PATH,
                  "courier-executor",
                  0,
                  "",
                  {"--quiet", "--tls-cert", cert, "--tls-key", pki.serverKey}};
  spec.args.insert(spec.args.end(), extra.begin(), extra.end());
  spec.tlsCaFile = pki.caCert;
  // An executor that asks for client certificates gets the good one from the fixture.
  spec.tlsClientCert = pki.clientCert;
  spec.tlsClientKey = pki.clientKey;
  return std::make_unique<ServerProcess>(spec);
}

/// The code and text of a failed result.
template <typename T> std::pair<ErrorCode, std::string> failure(llvm::Expected<T> value) {
  REQUIRE(!value);
  ErrorCode code = ErrorCode::Internal;
  std::string text;
  llvm::handleAllErrors(
      value.takeError(),
      [&](const CodedError &e) {
        code = e.kind;
        text = e.message;
      },
      [&](const llvm::ErrorInfoBase &e) { text = e.message(); });
  return {code, text};
}

std::unique_ptr<Backend> backendFor(const std::string &address, TlsClientOptions tls) {
  BackendOptions options;
  options.tls = std::move(tls);
  options.connectTimeout = std::chrono::seconds(5);
  auto backend = createBackend(address, options);
  if (!backend)
    FAIL(llvm::toString(backend.takeError()));
  return std::move(*backend);
}

TensorView view(const std::vector<double> &data) {
  return TensorView{data.data(), sizeof(double), {static_cast<int64_t>(data.size())}, {1}};
}

ObjectBlob scaleKernel() {
  auto buffer = llvm::MemoryBuffer::getFile(COURIER_KERNEL_SCALE);
  REQUIRE(buffer);
  return ObjectBlob::fromBytes((*buffer)->getBuffer().str());
}

} // namespace

TEST_CASE("an executor with a certificate announces an https:// address that a client "
          "trusting its CA launches through",
          "[tls]") {
  TestCertificates pki;
  auto executor = tlsExecutor(pki, pki.serverCert);
  CHECK(llvm::StringRef(executor->address()).starts_with("https://127.0.0.1:"));
  auto backend = backendFor(executor->address(), {pki.caCert, "", ""});
  std::string session = [&] {
    auto id = backend->openSession();
    if (!id)
      FAIL(llvm::toString(id.takeError()));
    return *id;
  }();
  ObjectBlob scale = scaleKernel();
  std::vector<double> input = {1, 2, 3, 4};
  auto results = backend->launch(session, scale, "_catalyst_pyface_scale", {view(input)}, {{1, 8}});
  if (!results)
    FAIL(llvm::toString(results.takeError()));
  const double *data = static_cast<const double *>((*results)[0].data);
  CHECK(std::vector<double>(data, data + 4) == std::vector<double>{2, 4, 6, 8});
  CHECK(!backend->closeSession(session));
}

TEST_CASE("a client takes its CA from COURIER_TLS_CA when it is given none", "[tls]") {
  TestCertificates pki;
  auto executor = tlsExecutor(pki, pki.serverCert);
  setenv("COURIER_TLS_CA", pki.caCert.c_str(), 1);
  auto backend = backendFor(executor->address(), {});
  auto health = backend->health();
  unsetenv("COURIER_TLS_CA");
  if (!health)
    FAIL(llvm::toString(health.takeError()));
  CHECK(!health->version.empty());
}

TEST_CASE("a client trusting another CA refuses the executor's certificate as of an unknown CA",
          "[tls]") {
  TestCertificates pki;
  auto executor = tlsExecutor(pki, pki.serverCert);
  auto [code, text] = failure(backendFor(executor->address(), {pki.otherCaCert, "", ""})->health());
  CHECK(code == ErrorCode::TlsFailed);
  CHECK_THAT(text, Contains(executor->address()));
  CHECK_THAT(text, Contains("certificate verify failed: unknown CA"));
  CHECK_THAT(text, Contains("--tls-ca"));
}

TEST_CASE("a client without any CA for the executor's private CA refuses it too", "[tls]") {
  TestCertificates pki;
  auto executor = tlsExecutor(pki, pki.serverCert);
  unsetenv("COURIER_TLS_CA");
  // The system's CA paths do not hold the throwaway CA.
  auto [code, text] = failure(backendFor(executor->address(), {})->health());
  CHECK(code == ErrorCode::TlsFailed);
  CHECK_THAT(text, Contains("unknown CA"));
}

TEST_CASE("an expired executor certificate is refused as expired", "[tls]") {
  TestCertificates pki;
  // Without a CA the fixture checks the executor's health without verifying it.
  ServerProcess executor(
      ServerSpec{COURIER_EXECUTOR_PATH,
                 "courier-executor",
                 0,
                 "",
                 {"--quiet", "--tls-cert", pki.expiredServerCert, "--tls-key", pki.serverKey}});
  auto [code, text] = failure(backendFor(executor.address(), {pki.caCert, "", ""})->health());
  CHECK(code == ErrorCode::TlsFailed);
  CHECK_THAT(text, Contains("certificate verify failed"));
  CHECK_THAT(text, Contains("has expired"));
}

TEST_CASE("a certificate that does not name the host the client dialled is refused", "[tls]") {
  TestCertificates pki;
  // 127.0.0.2 is loopback too, and not in the certificate's subjectAltName; without a CA the
  // fixture checks the executor's health without verifying it.
  ServerProcess executor(ServerSpec{COURIER_EXECUTOR_PATH,
                                    "courier-executor",
                                    0,
                                    "",
                                    {"--quiet", "--listen", "127.0.0.2:0", "--tls-cert",
                                     pki.serverCert, "--tls-key", pki.serverKey}});
  REQUIRE(executor.address().rfind("https://127.0.0.2:", 0) == 0);
  auto [code, text] = failure(backendFor(executor.address(), {pki.caCert, "", ""})->health());
  CHECK(code == ErrorCode::TlsFailed);
  CHECK_THAT(text, Contains("does not name '127.0.0.2'"));
}

TEST_CASE("a plaintext client to a TLS port is told an https:// address is needed", "[tls]") {
  TestCertificates pki;
  auto executor = tlsExecutor(pki, pki.serverCert);
  std::string plain = "127.0.0.1:" + std::to_string(executor->port());
  auto [code, text] = failure(backendFor(plain, {})->health());
  CHECK((code == ErrorCode::Unavailable || code == ErrorCode::ExecutorLost));
  CHECK_THAT(text, Contains(plain));
  CHECK_THAT(text, Contains("needs an https:// address"));
}

TEST_CASE("a TLS client to a plaintext executor fails its handshake", "[tls]") {
  TestCertificates pki;
  ServerProcess executor(ServerSpec{COURIER_EXECUTOR_PATH, "courier-executor", 0, "", {"--quiet"}});
  std::string address = "https://" + executor.address();
  auto [code, text] = failure(backendFor(address, {pki.caCert, "", ""})->health());
  CHECK(code == ErrorCode::TlsFailed);
  CHECK_THAT(text, Contains(address));
  CHECK_THAT(text, Contains("TLS handshake failed"));
}

TEST_CASE("under mutual TLS a client without a certificate is told one is asked for", "[tls]") {
  TestCertificates pki;
  auto executor = tlsExecutor(pki, pki.serverCert, {"--tls-client-ca", pki.caCert});
  auto [code, text] = failure(backendFor(executor->address(), {pki.caCert, "", ""})->health());
  CHECK(code == ErrorCode::TlsFailed);
  CHECK_THAT(text, Contains("asks for a client certificate"));
  CHECK_THAT(text, Contains("--tls-client-cert"));
}

TEST_CASE("under mutual TLS a client certificate the client CA signed is let in", "[tls]") {
  TestCertificates pki;
  auto executor = tlsExecutor(pki, pki.serverCert, {"--tls-client-ca", pki.caCert});
  auto backend = backendFor(executor->address(), {pki.caCert, pki.clientCert, pki.clientKey});
  auto session = backend->openSession();
  if (!session)
    FAIL(llvm::toString(session.takeError()));
  CHECK(!backend->closeSession(*session));
}

TEST_CASE("under mutual TLS a client certificate of another CA is refused", "[tls]") {
  TestCertificates pki;
  auto executor = tlsExecutor(pki, pki.serverCert, {"--tls-client-ca", pki.caCert});
  auto backend = backendFor(executor->address(), {pki.caCert, pki.strangerCert, pki.strangerKey});
  auto [code, text] = failure(backend->health());
  CHECK((code == ErrorCode::Unavailable || code == ErrorCode::TlsFailed));
  CHECK_THAT(text, Contains(executor->address()));
}

TEST_CASE("a client refuses client certificate files that do not load, naming them", "[tls]") {
  TestCertificates pki;
  std::string address = "https://127.0.0.1:1";
  BackendOptions options;
  options.tls = {pki.caCert, pki.clientCert, ""};
  auto [code, text] = failure(createBackend(address, options));
  CHECK(code == ErrorCode::TlsFailed);
  CHECK_THAT(text, Contains("give both --tls-client-cert and --tls-client-key"));
  options.tls = {pki.caCert, pki.clientCert, pki.serverKey};
  std::tie(code, text) = failure(createBackend(address, options));
  CHECK_THAT(text, Contains("'" + pki.serverKey + "' is not the key of the certificate in"));
  options.tls = {pki.notPem, "", ""};
  std::tie(code, text) = failure(createBackend(address, options));
  CHECK_THAT(text, Contains("'" + pki.notPem + "' holds no PEM certificate"));
}

TEST_CASE("an https:// address takes a host and port, never a unix socket", "[tls]") {
  auto [code, text] = failure(createBackend("https://unix:/tmp/x.sock", {}));
  CHECK_THAT(text, Contains("a unix socket's address takes no https://"));
}

TEST_CASE("an executor refuses to start with certificate or key files that do not hold", "[tls]") {
  TestCertificates pki;
  std::string missing = pki.directory() + "/missing.pem";
  auto start = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--listen", "127.0.0.1:0"});
    return runServerToExit(COURIER_EXECUTOR_PATH, args);
  };
  auto [status, log] = start({"--tls-cert", missing, "--tls-key", pki.serverKey});
  CHECK(status != 0);
  CHECK_THAT(log, Contains("cannot read --tls-cert '" + missing + "'"));
  std::tie(status, log) = start({"--tls-cert", pki.notPem, "--tls-key", pki.serverKey});
  CHECK(status != 0);
  CHECK_THAT(log, Contains("--tls-cert '" + pki.notPem + "' holds no PEM certificate"));
  std::tie(status, log) = start({"--tls-cert", pki.serverCert, "--tls-key", pki.clientKey});
  CHECK(status != 0);
  CHECK_THAT(log, Contains("--tls-key '" + pki.clientKey +
                           "' is not the key of the certificate in --tls-cert"));
  std::tie(status, log) = start({"--tls-cert", pki.serverCert, "--tls-key", pki.serverCert});
  CHECK(status != 0);
  CHECK_THAT(log, Contains("holds no unencrypted PEM private key"));
  std::tie(status, log) =
      start({"--tls-cert", pki.serverCert, "--tls-key", pki.serverKey, "--tls-client-ca", missing});
  CHECK(status != 0);
  CHECK_THAT(log, Contains("cannot read --tls-client-ca '" + missing + "'"));
  std::tie(status, log) = start({"--tls-cert", pki.serverCert});
  CHECK(status != 0);
  CHECK_THAT(log, Contains("--tls-cert and --tls-key go together"));
}

TEST_CASE("an executor beyond loopback needs TLS or --insecure-plaintext, and says both", "[tls]") {
  TestCertificates pki;
  std::string token = pki.directory() + "/token";
  std::ofstream(token) << "secret\n";
  auto [status, log] =
      runServerToExit(COURIER_EXECUTOR_PATH, {"--listen", "0.0.0.0:0", "--token-file", token});
  CHECK(status != 0);
  CHECK_THAT(log, Contains("refusing to listen on '0.0.0.0' without TLS"));
  CHECK_THAT(log, Contains("--tls-cert and --tls-key"));
  CHECK_THAT(log, Contains("--insecure-plaintext"));
  std::tie(status, log) = runServerToExit(
      COURIER_EXECUTOR_PATH, {"--listen", "unix:" + pki.directory() + "/e.sock", "--tls-cert",
                              pki.serverCert, "--tls-key", pki.serverKey});
  CHECK(status != 0);
  CHECK_THAT(log, Contains("TLS is for TCP listeners"));
}

TEST_CASE("courier-run reaches an executor at https:// with --tls-ca, and names a wrong CA",
          "[tls]") {
  TestCertificates pki;
  auto executor = tlsExecutor(pki, pki.serverCert);
  std::string program = pki.directory() + "/app.mlir";
  std::ofstream(program) << R"(module @app {
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @dev::@twice(%x) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {},
                          catalyst.dispatch = {address = ")"
                         << executor->address() << R"("}} {
    func.func public @twice(%x: tensor<4xf64>) -> tensor<4xf64> {
      %r = arith.addf %x, %x : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
}
)";
  std::string run = std::string(COURIER_RUN_PATH) + " " + program +
                    " --arg '[1, 2, 3, 4]' --no-disk-cache --cache-dir " + pki.directory() +
                    "/cache";
  auto [status, output] = runCommand(run + " --tls-ca " + pki.caCert);
  CHECK(status == 0);
  CHECK_THAT(output, Contains(R"({"data":[2,4,6,8],"dtype":"f64","shape":[4]})"));
  std::tie(status, output) = runCommand(run + " --tls-ca " + pki.otherCaCert);
  CHECK(status != 0);
  CHECK_THAT(output, Contains(executor->address()));
  CHECK_THAT(output, Contains("certificate verify failed: unknown CA"));
  CHECK_THAT(output, Contains("[tls_failed]"));
}

TEST_CASE("a TLS executor stops cleanly on SIGTERM with a client's connection open", "[tls]") {
  TestCertificates pki;
  auto executor = tlsExecutor(pki, pki.serverCert);
  auto backend = backendFor(executor->address(), {pki.caCert, "", ""});
  auto session = backend->openSession(); // Leaves a keep-alive TLS connection open.
  if (!session)
    FAIL(llvm::toString(session.takeError()));
  int status = executor->terminate(SIGTERM, std::chrono::seconds(15));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

namespace {

const std::string kHealth = "GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

} // namespace

TEST_CASE("under mutual TLS a client resumes its session, over TLS 1.2 and 1.3", "[tls]") {
  TestCertificates pki;
  auto executor = tlsExecutor(pki, pki.serverCert, {"--tls-client-ca", pki.caCert});
  for (int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    INFO("TLS version 0x" << std::hex << version);
    TlsClientFiles files{pki.caCert, pki.clientCert, pki.clientKey, version};
    SSL_SESSION *saved = nullptr;
    {
      TlsConnection first(executor->port(), files);
      REQUIRE(first.send(kHealth));
      // Reading the reply also reads the session tickets TLS 1.3 sends after the handshake.
      CHECK_THAT(first.readAll(), Catch::StartsWith("HTTP/1.1 200"));
      saved = first.session();
    }
    REQUIRE(saved);
    // Without a session id context the executor answered this handshake with a fatal
    // "internal error" alert.
    TlsConnection second(executor->port(), files, saved);
    SSL_SESSION_free(saved);
    CHECK(second.resumed());
    REQUIRE(second.send(kHealth));
    CHECK_THAT(second.readAll(), Catch::StartsWith("HTTP/1.1 200"));
  }
}

TEST_CASE("a TLS listener refuses a compressed body with 415 before reading it, and closes the "
          "connection",
          "[tls][security]") {
  TestCertificates pki;
  auto executor = tlsExecutor(pki, pki.serverCert, {"--max-body-mib", "1"});
  const std::string bomb = gzipOfZeros(64u << 20);
  for (auto [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"POST", "/v1/sessions"}, {"PUT", "/v1/objects/" + std::string(64, 'a')}}) {
    INFO(method << " " << path);
    TlsConnection connection(executor->port(), {pki.caCert});
    REQUIRE(connection.send(encodedRequest(method, path, "gzip", bomb)));
    RawReply reply = parseRawReply(connection.readAll());
    checkRefusedAlone(reply, 415, "unsupported_encoding");
  }
  TlsConnection connection(executor->port(), {pki.caCert});
  REQUIRE(connection.send(encodedRequest("GET", "/v1/health", "br", "")));
  CHECK(parseRawReply(connection.readAll()).status == 415);
}

TEST_CASE("a TLS listener refuses what a plaintext one refuses of a head and a chunked body",
          "[tls][security]") {
  TestCertificates pki;
  auto executor = tlsExecutor(pki, pki.serverCert);
  std::string smuggled = "GET /v1/ready HTTP/1.1\r\nHost: x\r\n\r\n";
  struct Case {
    const char *what;
    std::string request, message;
  };
  for (const Case &c : std::vector<Case>{
           {"a space before a header's colon",
            "GET /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length : " +
                std::to_string(smuggled.size()) + "\r\n\r\n" + smuggled,
            "the header name 'Content-Length ' is not a token"},
           {"a chunk's data longer than its size",
            "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            "2\r\n{}xx\r\n0\r\n\r\n" +
                smuggled,
            "a chunk's data is not followed by CRLF at its declared size of 2 bytes"}}) {
    INFO(c.what);
    TlsConnection connection(executor->port(), {pki.caCert});
    REQUIRE(connection.send(c.request));
    RawReply reply = parseRawReply(connection.readAll());
    checkRefusedAlone(reply, 400, "", c.message);
  }
}

TEST_CASE("a TLS listener cuts off a head that never ends at 64 KiB, and the executor's memory "
          "stays small",
          "[tls][security][memory]") {
  TestCertificates pki;
  auto executor = tlsExecutor(pki, pki.serverCert);
  long peakBefore = procStatusKiB(executor->processId(), "VmHWM");
  TlsConnection connection(executor->port(), {pki.caCert});
  // One header line without a newline, up to 32 MiB; the executor closes long before.
  const size_t most = 32u << 20;
  REQUIRE(connection.send("GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Endless: "));
  const std::string run(16384, 'a');
  size_t sent = 0;
  while (sent < most && connection.send(run))
    sent += run.size();
  INFO("sent " << sent << " bytes of the line");
  CHECK(sent < most);
  CHECK(connection.readAll().find("200 OK") == std::string::npos);
  long grownKiB = procStatusKiB(executor->processId(), "VmHWM") - peakBefore;
  INFO("the executor's peak memory grew by " << grownKiB << " KiB");
  CHECK(grownKiB < (16 << 10));
  TlsConnection after(executor->port(), {pki.caCert});
  REQUIRE(after.send(kHealth));
  CHECK_THAT(after.readAll(), Catch::StartsWith("HTTP/1.1 200"));
}

TEST_CASE("a TLS listener closes a connection whose head trickles in past 10 s, unanswered",
          "[tls][security]") {
  TestCertificates pki;
  auto executor = tlsExecutor(pki, pki.serverCert);
  // TLS 1.2: a TLS 1.3 server sends session tickets after the handshake, which the poll below
  // would take for the executor's close.
  TlsConnection connection(executor->port(), {pki.caCert, "", "", TLS1_2_VERSION});
  // A byte every 200 ms would take 25 s to send this head; each byte comes well within the
  // read timeout, so only the head's deadline ends it.
  std::string head =
      "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(70, 'a') + "\r\n\r\n";
  size_t sent = 0;
  for (; sent < head.size(); ++sent) {
    if (!connection.send(head.substr(sent, 1)))
      break;
    struct pollfd closed {
      connection.descriptor(), POLLIN, 0
    };
    if (::poll(&closed, 1, 200) > 0)
      break; // The executor closed the connection (or answered).
  }
  INFO("sent " << sent << " of " << head.size() << " bytes");
  CHECK(sent < head.size());
  CHECK(connection.readAll().find("HTTP/1.1 200") == std::string::npos);
}
