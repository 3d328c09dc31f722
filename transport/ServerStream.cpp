// The checks both servers' connection streams make of a request's bytes (see ServerStream.h).
#include "transport/ServerStream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

namespace courier::transport {

namespace {

/// The watch of the request the calling thread reads now, if any.
thread_local RequestWatch *currentWatch = nullptr;
/// What that request broke; kept past the watch, for the reply written after the read failed.
thread_local std::string currentProblem;
/// Set while a request is served when its response says "Connection: close".
thread_local bool closeAfter = false;

/// RFC 9110's token characters: what a header's name is made of.
bool isTokenChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

int hexValue(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/// A byte as a message shows it: itself when printable, else its code.
std::string shown(char c) {
  if (std::isprint(static_cast<unsigned char>(c)))
    return std::string("'") + c + "'";
  char code[8];
  std::snprintf(code, sizeof(code), "0x%02x", static_cast<unsigned char>(c));
  return code;
}

} // namespace

RequestWatch::RequestWatch() : deadline(Clock::now() + kHeadTimeout), previous(currentWatch) {
  currentWatch = this;
  currentProblem.clear();
}

RequestWatch::~RequestWatch() { currentWatch = previous; }

void RequestWatch::expectChunkedBody() {
  if (currentWatch && currentWatch->headDone && currentWatch->chunk == Chunk::Off)
    currentWatch->chunk = Chunk::Size;
}

const std::string &RequestWatch::problem() { return currentProblem; }

bool RequestWatch::refuse(std::string why) {
  failed = true;
  currentProblem = std::move(why);
  return false;
}

bool RequestWatch::take(const char *bytes, size_t n) {
  if (failed || isBroken)
    return false;
  size_t i = 0;
  for (; i < n && !headDone; ++i)
    if (!takeHeadByte(bytes[i]))
      return false;
  if (!headDone && headBytes > kMaxHeadBytes) {
    isBroken = true;
    currentProblem =
        "the request line and headers exceed " + std::to_string(kMaxHeadBytes) + " bytes";
    return false;
  }
  if (i == n || chunk == Chunk::Off || chunk == Chunk::Done)
    return true;
  return takeChunked(bytes + i, n - i);
}

bool RequestWatch::takeHeadByte(char byte) {
  ++headBytes;
  if (lastByte == '\r' && byte != '\n')
    return refuse("the request's head has a CR that does not end a line");
  if (byte == '\n') {
    // As cpp-httplib reads a head: the line that is exactly "\r\n", after the request line,
    // ends it. Each line between must be a header httplib reads as a proxy would: it skips a
    // line without a colon or ending in a bare LF, and keeps what stands before the colon,
    // whitespace included, as the name.
    if (lines > 0 && lineLength == 1 && lastByte == '\r') {
      headDone = true;
    } else if (lines > 0) {
      if (lastByte != '\r')
        return refuse("header line " + std::to_string(lines) + " ends in a bare LF, not CRLF");
      if (!sawColon)
        return refuse("header line " + std::to_string(lines) + " has no colon");
      if (badName)
        return refuse("the header name '" + name +
                      "' is not a token: nothing may stand between a header's name and its "
                      "colon, and a line may not begin with whitespace");
    }
    ++lines;
    lineLength = 0;
    sawColon = badName = false;
    name.clear();
  } else {
    if (lines > 0 && !sawColon && byte != '\r') {
      if (byte == ':') {
        sawColon = true;
        badName = badName || lineLength == 0;
      } else {
        badName = badName || !isTokenChar(byte);
        if (name.size() < 64)
          name += std::isprint(static_cast<unsigned char>(byte)) ? byte : '?';
      }
    }
    ++lineLength;
  }
  lastByte = byte;
  return true;
}

bool RequestWatch::takeChunked(const char *bytes, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    char byte = bytes[i];
    switch (chunk) {
    case Chunk::Size: {
      int digit = hexValue(byte);
      if (digit >= 0) {
        if (++sizeDigits > 16)
          return refuse("a chunk size has more than 16 hex digits");
        chunkSize = chunkSize * 16 + static_cast<uint64_t>(digit);
        ++chunkLine;
        break;
      }
      if (sizeDigits == 0)
        return refuse("a chunk size line begins with " + shown(byte) + ", not a hex digit");
      if (byte == ';') {
        chunk = Chunk::Extension;
        ++chunkLine;
      } else if (byte == '\r') {
        chunk = Chunk::SizeEnd;
      } else {
        return refuse("a chunk size has " + shown(byte) + " after its hex digits");
      }
      break;
    }
    case Chunk::Extension:
      if (byte == '\r') {
        chunk = Chunk::SizeEnd;
      } else if (byte == '\n') {
        return refuse("a chunk size line ends in a bare LF, not CRLF");
      } else if (++chunkLine > kMaxChunkLineBytes) {
        return refuse("a chunk size line is longer than " + std::to_string(kMaxChunkLineBytes) +
                      " bytes");
      }
      break;
    case Chunk::SizeEnd:
      if (byte != '\n')
        return refuse("a chunk size line does not end in CRLF");
      chunk = chunkSize == 0 ? Chunk::LastCr : Chunk::Data;
      chunkLeft = chunkSize;
      break;
    case Chunk::Data: {
      size_t taken = static_cast<size_t>(std::min<uint64_t>(chunkLeft, n - i));
      chunkLeft -= taken;
      i += taken - 1;
      if (chunkLeft == 0)
        chunk = Chunk::DataCr;
      break;
    }
    case Chunk::DataCr:
    case Chunk::DataLf:
      if (byte != (chunk == Chunk::DataCr ? '\r' : '\n'))
        return refuse("a chunk's data is not followed by CRLF at its declared size of " +
                      std::to_string(chunkSize) + " bytes");
      if (chunk == Chunk::DataLf) {
        chunk = Chunk::Size;
        sizeDigits = 0;
        chunkSize = 0;
        chunkLine = 0;
      } else {
        chunk = Chunk::DataLf;
      }
      break;
    case Chunk::LastCr:
    case Chunk::LastLf:
      if (byte != (chunk == Chunk::LastCr ? '\r' : '\n'))
        return refuse("a chunked body must end with the last chunk '0' and an empty line; "
                      "trailer fields are not accepted");
      chunk = chunk == Chunk::LastCr ? Chunk::LastLf : Chunk::Done;
      break;
    case Chunk::Off:
    case Chunk::Done:
      return true;
    }
  }
  return true;
}

void closeAfterResponse() { closeAfter = true; }

bool takeCloseAfterResponse() {
  bool was = closeAfter;
  closeAfter = false;
  return was;
}

void socketAddress(int fd, bool remote, std::string &ip, int &port) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  ip.clear();
  port = 0;
  int got = remote ? ::getpeername(fd, reinterpret_cast<sockaddr *>(&address), &length)
                   : ::getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length);
  if (got != 0)
    return;
  char text[INET6_ADDRSTRLEN] = "";
  if (address.ss_family == AF_INET && length >= sizeof(sockaddr_in)) {
    const auto &v4 = reinterpret_cast<const sockaddr_in &>(address);
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
    port = ntohs(v4.sin_port);
  } else if (address.ss_family == AF_INET6 && length >= sizeof(sockaddr_in6)) {
    const auto &v6 = reinterpret_cast<const sockaddr_in6 &>(address);
    inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text));
    port = ntohs(v6.sin6_port);
  }
  ip = text;
}

} // namespace courier::transport
