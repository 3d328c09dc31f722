// What the executor refuses of a request's encoding and framing on a direct connection, against
// a real courier-executor: a compressed body (httplib would inflate it past the body limit),
// header lines a proxy in front would read otherwise, and chunks whose data does not end where
// their size lines say. Each is refused before its route runs, and its connection closed.
#include "tests/support/HostileRequests.h"
#include "tests/support/RawConnection.h"
#include "tests/support/RefusedReplies.h"
#include "tests/transport/ExecutorProcess.h"
#include "tests/transport/Sessions.h"
#include "transport/Wire.h"

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

using namespace courier::testing;
using json = nlohmann::json;

namespace {

/// Sends `request` on a fresh connection and reads the reply until the executor closes it.
RawReply sendAndRead(const ExecutorProcess &executor, const std::string &request) {
  RawConnection connection(executor.port());
  connection.send(request);
  return parseRawReply(connection.readAll());
}

/// A request to close `session`, hidden after a body whose end is in question.
std::string smuggledClose(const std::string &session) {
  return "DELETE /v1/sessions/" + session + " HTTP/1.1\r\nHost: x\r\n\r\n";
}

} // namespace

TEST_CASE("a header name with whitespace before its colon, or a header line a proxy would read "
          "otherwise, is refused with 400 and its connection closed",
          "[protocol][security]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--quiet"}});
  auto http = executor.client();
  std::string session = openSession(*http);
  std::string smuggled = smuggledClose(session);
  std::string length = std::to_string(smuggled.size());
  std::string get = "GET /v1/sessions/" + session + " HTTP/1.1\r\nHost: x\r\n";
  struct Case {
    const char *what;
    std::string head, message;
  };
  // httplib would take none of these as a Content-Length, and run the body as a request;
  // nginx reads the first two as one, or answers 400.
  std::vector<Case> cases = {
      {"a space before the colon", "Content-Length : " + length + "\r\n",
       "the header name 'Content-Length ' is not a token"},
      {"a tab before the colon", "Content-Length\t: " + length + "\r\n",
       "the header name 'Content-Length?' is not a token"},
      {"a line folded onto the one before", "X-A: 1\r\n Content-Length: " + length + "\r\n",
       "the header name ' Content-Length' is not a token"},
      {"a line without a colon", "Content-Length " + length + "\r\n", "has no colon"},
      {"a line ending in a bare LF", "Content-Length: " + length + "\n", "ends in a bare LF"},
      {"a CR inside a line", "X-A: 1\rContent-Length: " + length + "\r\n",
       "a CR that does not end a line"},
  };
  for (const Case &c : cases) {
    INFO(c.what);
    RawReply reply = sendAndRead(executor, get + c.head + "\r\n" + smuggled);
    checkRefusedAlone(reply, 400, "bad_request", c.message);
  }
  // The hidden DELETE never ran.
  CHECK(executor.metric("courier_sessions") == 1);
  httplib::Result health = executor.client()->Get("/v1/health");
  REQUIRE(health);
  CHECK(health->status == 200);
}

TEST_CASE("a chunk whose data is not followed by CRLF at its declared size is refused with 400, "
          "and nothing after it runs as a request",
          "[protocol][security]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--quiet"}});
  auto http = executor.client();
  std::string session = openSession(*http);
  std::string smuggled = smuggledClose(session);
  struct Case {
    const char *what;
    std::string chunks, message;
  };
  std::vector<Case> cases = {
      // httplib's own reader ends such a body at "xx" and runs what follows as a request.
      {"data longer than its size", "2\r\n{}xx\r\n0\r\n\r\n",
       "a chunk's data is not followed by CRLF at its declared size of 2 bytes"},
      {"data shorter than its size", "5\r\n{}\r\n0\r\n\r\n",
       "a chunk size line begins with 0x0d, not a hex digit"},
      {"data ending in a bare LF", "2\r\n{}\n0\r\n\r\n",
       "a chunk's data is not followed by CRLF at its declared size of 2 bytes"},
      {"a size with a 0x prefix", "0x2\r\n{}\r\n0\r\n\r\n", "a chunk size has 'x' after"},
      {"a size with a space after it", "2 \r\n{}\r\n0\r\n\r\n", "a chunk size has ' ' after"},
      {"a size of more than 16 digits", "00000000000000002\r\n{}\r\n0\r\n\r\n",
       "more than 16 hex digits"},
      {"trailer fields", "2\r\n{}\r\n0\r\nX-Trailer: 1\r\n\r\n", "trailer fields are not accepted"},
  };
  // A route whose body httplib reads whole before routing, and one that reads its own.
  for (const std::string &target :
       {std::string("POST /v1/sessions"),
        "PUT /v1/objects/" + courier::transport::wire::sha256Hex("{}")}) {
    for (const Case &c : cases) {
      INFO(target << ": " << c.what);
      RawReply reply = sendAndRead(executor, target +
                                                 " HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                                 "application/octet-stream\r\nTransfer-Encoding: "
                                                 "chunked\r\n\r\n" +
                                                 c.chunks + smuggled);
      checkRefusedAlone(reply, 400, "bad_request", c.message);
    }
  }
  CHECK(executor.metric("courier_sessions") == 1);
  CHECK(executor.metric("courier_sessions_opened_total") == 1);
  // A body framed exactly, chunk extensions and all, is read whole.
  std::string object = "{}";
  RawReply stored =
      sendAndRead(executor, "PUT /v1/objects/" + courier::transport::wire::sha256Hex(object) +
                                " HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
                                "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                                "1;name=value\r\n{\r\n01\r\n}\r\n0\r\n\r\n");
  CHECK(stored.status == 201);
}

TEST_CASE("a body with a Content-Encoding is refused with 415 on every route before it is read, "
          "and the executor's memory stays small",
          "[protocol][security][memory]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--quiet", "--max-body-mib", "1"}});
  auto http = executor.client();
  std::string session = openSession(*http);
  std::string sha = courier::transport::wire::sha256Hex("no such object");
  std::string at = "/v1/sessions/" + session;
  // 128 MiB of zeros in about 128 KiB, within the 1 MiB body limit: inflated by httplib, each
  // would be 128 MiB in the executor.
  const std::string bomb = gzipOfZeros(128u << 20);
  REQUIRE(bomb.size() < (1u << 20));
  struct Route {
    const char *method;
    std::string path;
  };
  // Every route of executor/ExecutorServer.cpp's table (GET serves HEAD too).
  const std::vector<Route> routes = {
      {"GET", "/v1/health"},
      {"GET", "/v1/ready"},
      {"GET", "/metrics"},
      {"GET", "/v1/objects"},
      {"GET", "/v1/objects/" + sha},
      {"HEAD", "/v1/objects/" + sha},
      {"PUT", "/v1/objects/" + sha},
      {"GET", "/v1/sessions"},
      {"POST", "/v1/sessions"},
      {"PUT", "/v1/sessions/" + std::string(32, 'a')},
      {"GET", at},
      {"DELETE", at},
      {"POST", at + "/shm"},
      {"POST", at + "/objects/" + sha},
      {"DELETE", at + "/objects/" + sha},
      {"POST", at + "/launch"},
      {"POST", at + "/launch_async"},
      {"POST", at + "/launches/1/await"},
      {"POST", at + "/call/courier_test_add"},
  };
  long peakBefore = procStatusKiB(executor.processId(), "VmHWM");
  for (const Route &route : routes) {
    INFO(route.method << " " << route.path);
    // A GET or HEAD carries no body (a declared one is refused as framing); its encoding is
    // refused all the same.
    bool bodied = std::string(route.method) != "GET" && std::string(route.method) != "HEAD";
    RawReply reply =
        sendAndRead(executor, encodedRequest(route.method, route.path, "gzip", bodied ? bomb : ""));
    checkRefusedAlone(reply, 415);
    if (std::string(route.method) != "HEAD") {
      CHECK(reply.code == "unsupported_encoding");
      CHECK(reply.message == "Content-Encoding 'gzip' is not accepted: send the body "
                             "uncompressed (no route takes a compressed body)");
    }
  }
  long grownKiB = procStatusKiB(executor.processId(), "VmHWM") - peakBefore;
  INFO("the executor's peak memory grew by " << grownKiB << " KiB");
  CHECK(grownKiB < (32 << 10));
  // No route ran: the one session is still open and the store is empty.
  CHECK(executor.metric("courier_sessions") == 1);
  CHECK(executor.metric("courier_sessions_opened_total") == 1);
  httplib::Result health = http->Get("/v1/health");
  REQUIRE(health);
  CHECK(health->status == 200);
}

TEST_CASE("every Content-Encoding but identity is refused, however it is written",
          "[protocol][security]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--quiet"}});
  for (const char *coding : {"deflate", "br", "GZIP", "x-gzip", "identity, gzip", "compress"}) {
    INFO(coding);
    RawReply reply = sendAndRead(executor, encodedRequest("POST", "/v1/sessions", coding, "{}"));
    CHECK(reply.status == 415);
    CHECK(reply.code == "unsupported_encoding");
    CHECK_THAT(reply.message, Catch::Contains(std::string("'") + coding + "'"));
  }
  // Two headers, the second a coding: refused too.
  RawReply twice = sendAndRead(executor, "POST /v1/sessions HTTP/1.1\r\nHost: x\r\n"
                                         "Content-Encoding: identity\r\nContent-Encoding: gzip\r\n"
                                         "Content-Length: 2\r\n\r\n{}");
  CHECK(twice.status == 415);
  // identity is the body as it is.
  RawReply plain = sendAndRead(
      executor, "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Encoding: identity\r\n"
                "Content-Length: 0\r\nConnection: close\r\n\r\n");
  CHECK(plain.status == 201);
}
