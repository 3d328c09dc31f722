// A TLS connection's handshake, requests and close (see TlsServer.h). The socket stays
// non-blocking throughout: a blocking SSL_read waits inside OpenSSL for the rest of a record,
// which a client sending a byte at a time could stretch without end.
#include "transport/TlsServer.h"

#include "transport/ParkingServer.h"
#include "transport/ServerStream.h"
#include "transport/SharedMemory.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <string>

namespace courier::transport {

namespace {

using Clock = std::chrono::steady_clock;

/// Waits for what `error` (SSL_get_error) says the connection needs, until `until`; false on a
/// timeout, an error, or a failure that waiting does not mend.
bool awaitTls(int fd, int error, Clock::time_point until) {
  if (error == SSL_ERROR_WANT_READ)
    return pollUntil(fd, POLLIN, until) > 0;
  if (error == SSL_ERROR_WANT_WRITE)
    return pollUntil(fd, POLLOUT, until) > 0;
  return false;
}

/// cpp-httplib's view of a TLS connection for one request, with the request's RequestWatch.
class TlsStream final : public httplib::Stream {
public:
  TlsStream(int fd, SSL *ssl, std::chrono::microseconds readTimeout,
            std::chrono::microseconds writeTimeout)
      : fd(fd), ssl(ssl), readTimeout(readTimeout), writeTimeout(writeTimeout) {}

  bool broken() const { return watch.broken(); }
  bool refused() const { return watch.refused(); }

  bool is_readable() const override {
    return SSL_pending(ssl) > 0 || pollUntil(fd, POLLIN, readUntil()) > 0;
  }
  bool is_writable() const override {
    return pollUntil(fd, POLLOUT, Clock::now() + writeTimeout) > 0;
  }

  ssize_t read(char *ptr, size_t size) override {
    if (size == 0)
      return 0;
    if (watch.broken())
      return -1;
    int wanted = static_cast<int>(std::min<size_t>(size, INT_MAX));
    while (true) {
      int got = SSL_read(ssl, ptr, wanted);
      if (got > 0)
        return watch.take(ptr, static_cast<size_t>(got)) ? got : -1;
      int error = SSL_get_error(ssl, got);
      if (error == SSL_ERROR_ZERO_RETURN)
        return 0;
      if (error == SSL_ERROR_WANT_READ && watch.inHead()) {
        Clock::time_point until = readUntil();
        if (pollUntil(fd, POLLIN, until) > 0)
          continue;
        if (until >= watch.headDeadline())
          watch.breakConnection(); // The head did not come in time.
        return -1;
      }
      if (!awaitTls(fd, error, Clock::now() + readTimeout)) {
        ERR_clear_error();
        return -1;
      }
    }
  }

  ssize_t write(const char *ptr, size_t size) override {
    if (size == 0)
      return 0;
    int offered = static_cast<int>(std::min<size_t>(size, INT_MAX));
    while (true) {
      int put = SSL_write(ssl, ptr, offered);
      if (put > 0)
        return put;
      if (!awaitTls(fd, SSL_get_error(ssl, put), Clock::now() + writeTimeout)) {
        ERR_clear_error();
        return -1;
      }
    }
  }

  void get_remote_ip_and_port(std::string &ip, int &port) const override {
    socketAddress(fd, /*remote=*/true, ip, port);
  }
  void get_local_ip_and_port(std::string &ip, int &port) const override {
    socketAddress(fd, /*remote=*/false, ip, port);
  }
  socket_t socket() const override { return fd; }

private:
  /// How long a read may wait now: the read timeout, and no later than the head's deadline
  /// while the head is read.
  Clock::time_point readUntil() const {
    Clock::time_point until = Clock::now() + readTimeout;
    return watch.inHead() ? std::min(until, watch.headDeadline()) : until;
  }

  int fd;
  SSL *ssl;
  std::chrono::microseconds readTimeout, writeTimeout;
  RequestWatch watch;
};

/// The TLS handshake, within kHeadTimeout.
bool accept(int fd, SSL *ssl) {
  Clock::time_point until = Clock::now() + kHeadTimeout;
  while (true) {
    int accepted = SSL_accept(ssl);
    if (accepted == 1)
      return true;
    if (!awaitTls(fd, SSL_get_error(ssl, accepted), until))
      return false;
  }
}

/// After the last response: the client's close is awaited, and what it still sends dropped,
/// for up to ParkingServer::kDrain, so the response is not lost to a reset (closing a socket
/// with unread bytes resets the connection).
void drain(int fd) {
  ::shutdown(fd, SHUT_WR);
  Clock::time_point until = Clock::now() + ParkingServer::kDrain;
  char discard[16384];
  while (pollUntil(fd, POLLIN, until) > 0) {
    ssize_t got = ::recv(fd, discard, sizeof(discard), MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
      return;
  }
}

} // namespace

bool TlsServer::process_and_close_socket(socket_t sock) {
  SSL *ssl = SSL_new(ssl_context());
  int flags = ::fcntl(sock, F_GETFL);
  bool ready = ssl && flags >= 0 && ::fcntl(sock, F_SETFL, flags | O_NONBLOCK) == 0 &&
               SSL_set_fd(ssl, sock) == 1;
  bool answered = false, lastSaid = false;
  if (ready) {
    SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    ready = accept(sock, ssl);
  }
  auto readTimeout =
      std::chrono::seconds(read_timeout_sec_) + std::chrono::microseconds(read_timeout_usec_);
  auto writeTimeout =
      std::chrono::seconds(write_timeout_sec_) + std::chrono::microseconds(write_timeout_usec_);
  for (size_t left = keep_alive_max_count_; ready && left > 0; --left) {
    // The next request, within the keep-alive timeout (after stop(), the socket is shut down,
    // which ends the wait).
    if (svr_sock_ == INVALID_SOCKET ||
        (SSL_has_pending(ssl) == 0 &&
         pollUntil(sock, POLLIN, Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_)) <=
             0))
      break;
    TlsStream stream(sock, ssl, readTimeout, writeTimeout);
    bool closing = left == 1 || svr_sock_ == INVALID_SOCKET;
    bool closed = false;
    takeCloseAfterResponse();
    answered =
        process_request(stream, closing, closed, [ssl](httplib::Request &req) { req.ssl = ssl; });
    bool closeAfter = takeCloseAfterResponse() || stream.refused();
    if (!answered || stream.broken()) {
      answered = false; // The client went, or broke the head's limits: closed at once.
      break;
    }
    if (closed || closing || closeAfter) {
      lastSaid = true;
      break;
    }
  }
  if (ssl) {
    if (answered)
      SSL_shutdown(ssl); // Its close_notify, if the socket takes it now.
    SSL_free(ssl);
  }
  ERR_clear_error();
  if (lastSaid)
    drain(sock);
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return answered;
}

} // namespace courier::transport
