// What the servers' connection streams (ParkingServer for plaintext, TlsServer for TLS) check
// of the bytes cpp-httplib's request parser takes from a client, one request at a time.
//
// httplib 0.11.4 reads a head with no deadline and grows a line without bound; it silently
// skips a header line with no colon or ending in a bare LF, keeps whitespace before a colon as
// part of the header's name ("Content-Length : 5" is no Content-Length to it), and ends a
// chunked body early, without an error, when a chunk's data runs past its size line. Each of
// those lets a request mean one thing here and another to a proxy in front (nginx answers 400),
// or lets a client hold a thread or memory. A RequestWatch sees every byte the parser takes,
// as it takes it (the parser reads lines a byte at a time and bodies no further than it needs),
// and fails the read at the first byte that breaks a rule; httplib then answers 400, and the
// reply closes the connection.
#ifndef COURIER_TRANSPORT_SERVERSTREAM_H
#define COURIER_TRANSPORT_SERVERSTREAM_H

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace courier::transport {

/// A request line and headers must arrive within this, whatever the read timeout (a client
/// sending a byte every few seconds would hold a request thread for ever), and be at most this
/// long. A TLS handshake must end within kHeadTimeout too.
inline constexpr std::chrono::seconds kHeadTimeout{10};
inline constexpr size_t kMaxHeadBytes = 64 * 1024;
/// A chunk's size line (size and extensions) is at most this long.
inline constexpr size_t kMaxChunkLineBytes = 4096;

/// Watches one request's bytes as the parser takes them: the head within kHeadTimeout and
/// kMaxHeadBytes, every header line `name: value` with a name that is a token and a CRLF end,
/// and, once expectChunkedBody() was called, a chunked body framed exactly as its size lines
/// say. While it lives it is the calling thread's watch (a request is read on one thread).
class RequestWatch {
public:
  using Clock = std::chrono::steady_clock;

  /// Starts the head's clock.
  RequestWatch();
  ~RequestWatch();
  RequestWatch(const RequestWatch &) = delete;
  RequestWatch &operator=(const RequestWatch &) = delete;

  /// Checks `n` bytes the parser took; false once the request broke a rule, and for every
  /// call after that (the stream fails the read).
  bool take(const char *bytes, size_t n);
  /// Whether the request line and headers are still being read, and by when they must end.
  bool inHead() const { return !headDone; }
  Clock::time_point headDeadline() const { return deadline; }
  /// The head came too slowly or grew past kMaxHeadBytes: the connection is closed at once.
  void breakConnection() { isBroken = true; }
  bool broken() const { return isBroken; }
  /// The request broke a rule of framing (problem() says which): it is answered 400 and its
  /// connection closed after the reply.
  bool refused() const { return !isBroken && failed; }

  /// Called once httplib has parsed the head of the calling thread's request (from the
  /// pre-routing handler): its body is chunked, and each chunk must be followed by CRLF
  /// exactly at its declared size.
  static void expectChunkedBody();
  /// What the calling thread's current request broke, or "": for the 400's message.
  static const std::string &problem();

private:
  enum class Chunk : uint8_t {
    Off,
    Size,
    Extension,
    SizeEnd,
    Data,
    DataCr,
    DataLf,
    LastCr,
    LastLf,
    Done
  };
  bool refuse(std::string why);
  bool takeHeadByte(char byte);
  bool takeChunked(const char *bytes, size_t n);

  Clock::time_point deadline;
  bool headDone = false, isBroken = false, failed = false;
  size_t headBytes = 0, lines = 0, lineLength = 0;
  char lastByte = 0;
  /// Of the header line being read: whether its colon came, and its name so far (a prefix).
  bool sawColon = false, badName = false;
  std::string name;

  Chunk chunk = Chunk::Off;
  unsigned sizeDigits = 0;
  uint64_t chunkSize = 0, chunkLeft = 0;
  size_t chunkLine = 0;

  RequestWatch *previous;
};

/// Called while a request is served (by the logger, which sees the response): the response
/// says "Connection: close", so nothing after it on the connection is read, such as a request
/// hidden in a body whose framing or encoding was refused.
void closeAfterResponse();
/// Whether closeAfterResponse() was called on this thread since the last call; clears it.
bool takeCloseAfterResponse();

/// The numeric address and port of a socket's peer (`remote`) or its own end; "" and 0 for a
/// unix socket.
void socketAddress(int fd, bool remote, std::string &ip, int &port);

} // namespace courier::transport

#endif // COURIER_TRANSPORT_SERVERSTREAM_H
