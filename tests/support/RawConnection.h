// A loopback TCP connection for tests that send a request in pieces, or bytes no HTTP client
// would send, and read whatever comes back.
#ifndef COURIER_TESTS_SUPPORT_RAWCONNECTION_H
#define COURIER_TESTS_SUPPORT_RAWCONNECTION_H

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

namespace courier::testing {

/// 127.0.0.1:`port`, to connect to.
inline sockaddr_in loopbackAddress(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

/// A TCP connection to 127.0.0.1:`port`; reads give up after 60 s.
class RawConnection {
public:
  explicit RawConnection(int port) : fd(::socket(AF_INET, SOCK_STREAM, 0)) {
    REQUIRE(fd >= 0);
    sockaddr_in address = loopbackAddress(port);
    timeval timeout{60, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) == 0);
  }
  ~RawConnection() { ::close(fd); }
  RawConnection(const RawConnection &) = delete;
  RawConnection &operator=(const RawConnection &) = delete;

  void send(const std::string &bytes) {
    REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(bytes.size()));
  }
  /// The socket, for a test that polls it or makes it non-blocking.
  int descriptor() const { return fd; }
  /// Everything the server sends until it closes the connection.
  std::string readAll() {
    std::string reply;
    char buffer[4096];
    for (ssize_t n; (n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;)
      reply.append(buffer, static_cast<size_t>(n));
    return reply;
  }

private:
  int fd;
};

} // namespace courier::testing

#endif // COURIER_TESTS_SUPPORT_RAWCONNECTION_H
