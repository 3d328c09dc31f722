// Requests no well-behaved client sends, as raw bytes, and the replies to them read back: for
// the tests of what both servers refuse before a body is read (a compressed body) or as it is
// read (framing that a proxy in front would read otherwise).
#ifndef COURIER_TESTS_SUPPORT_HOSTILEREQUESTS_H
#define COURIER_TESTS_SUPPORT_HOSTILEREQUESTS_H

#include <cstddef>
#include <string>

namespace courier::testing {

/// gzip of `inflated` zero bytes: about a thousandth of that in size.
std::string gzipOfZeros(size_t inflated);

/// "METHOD PATH HTTP/1.1" with `Content-Encoding: coding` and, when `body` is not empty, a
/// Content-Length and the body.
std::string encodedRequest(const std::string &method, const std::string &path,
                           const std::string &coding, const std::string &body);

/// A reply as raw bytes read until the server closed, taken apart.
struct RawReply {
  int status = 0;         ///< 0 when there was no status line.
  std::string code;       ///< error.code of a JSON error body, else "".
  std::string message;    ///< error.message of it.
  bool saysClose = false; ///< It has "Connection: close".
  size_t responses = 0;   ///< Status lines in the bytes: a request run after it counts too.
};
RawReply parseRawReply(const std::string &bytes);

/// A field of /proc/PID/status in KiB ("VmHWM": the peak resident memory).
long procStatusKiB(int pid, const std::string &field);

} // namespace courier::testing

#endif // COURIER_TESTS_SUPPORT_HOSTILEREQUESTS_H
