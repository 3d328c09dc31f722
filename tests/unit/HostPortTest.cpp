// The one host:port parser behind executor addresses, --listen and courier-serve's options.
#include "transport/HostPort.h"

#include <catch2/catch.hpp>

#include <string>

using courier::transport::parseHostPort;
using courier::transport::PortZero;

namespace {

/// The parser's reason for refusing `address`, or "" if it accepted it.
std::string refusal(const char *address, PortZero zero = PortZero::Refused) {
  auto parsed = parseHostPort(address, zero);
  return parsed ? std::string() : llvm::toString(parsed.takeError());
}

} // namespace

TEST_CASE("host:port splits into a host and a port, an IPv6 host without its brackets",
          "[hostport]") {
  auto named = parseHostPort("executor.internal:7000");
  REQUIRE(bool(named));
  CHECK(named->host == "executor.internal");
  CHECK(named->port == 7000);
  auto v6 = parseHostPort("[::1]:65535");
  REQUIRE(bool(v6));
  CHECK(v6->host == "::1");
  CHECK(v6->port == 65535);
}

TEST_CASE("port 0 is a listening address, never one to connect to", "[hostport]") {
  CHECK(refusal("127.0.0.1:0") == "the port must be a number from 1 to 65535");
  auto listen = parseHostPort("127.0.0.1:0", PortZero::Allowed);
  REQUIRE(bool(listen));
  CHECK(listen->port == 0);
  CHECK(refusal("127.0.0.1:65536", PortZero::Allowed) ==
        "the port must be a number from 0 to 65535");
}

TEST_CASE("a malformed host:port is refused with what is wrong", "[hostport]") {
  CHECK(refusal("nonsense") == "no port");
  CHECK(refusal(":80") == "no host");
  CHECK(refusal("[]:80") == "no host");
  CHECK(refusal("[::1:80") == "unbalanced brackets around the host");
  CHECK(refusal("a:b:80") == "an IPv6 host must be in brackets");
  CHECK(refusal("http://host:80") == "the host contains '/', a space or a stray bracket");
  for (const char *port : {"host:", "host:http", "host:+80", "host:-1", "host:99999999999"})
    CHECK(refusal(port) == "the port must be a number from 1 to 65535");
}

TEST_CASE("https://host:port names an executor that speaks TLS", "[hostport]") {
  auto tls = parseHostPort("https://executor.internal:7443");
  REQUIRE(bool(tls));
  CHECK(tls->tls);
  CHECK(tls->host == "executor.internal");
  CHECK(tls->port == 7443);
  auto v6 = parseHostPort("https://[fe80::a]:7443");
  REQUIRE(bool(v6));
  CHECK(v6->tls);
  CHECK(v6->host == "fe80::a");
  CHECK_FALSE(parseHostPort("127.0.0.1:7000")->tls);
  CHECK(refusal("https://") == "no port");
  CHECK(refusal("https://unix:/run/x.sock") ==
        "a unix socket's address takes no https:// (its file mode guards it)");
}

TEST_CASE("unix:PATH names a unix-domain socket by its absolute path", "[hostport]") {
  auto socket = parseHostPort("unix:/run/courier/executor.sock");
  REQUIRE(bool(socket));
  CHECK(socket->unixSocket);
  CHECK(socket->host == "/run/courier/executor.sock");
  CHECK(socket->port == 0);
  CHECK_FALSE(parseHostPort("127.0.0.1:7000")->unixSocket);
  CHECK(refusal("unix:") == "a unix socket's path must be absolute");
  CHECK(refusal("unix:run/executor.sock") == "a unix socket's path must be absolute");
  CHECK(refusal(("unix:/" + std::string(107, 's')).c_str()) ==
        "a unix socket's path is at most 107 bytes");
}
