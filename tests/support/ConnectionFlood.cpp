// Holding many connections open to a server, the way an abusive client does (see
// ConnectionFlood.h).
#include "tests/support/ConnectionFlood.h"

#include "tests/support/HostileRequests.h"
#include "tests/support/RawConnection.h"

#include <openssl/err.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <stdexcept>

namespace courier::testing {

size_t raiseFileLimit() {
  struct rlimit files {};
  getrlimit(RLIMIT_NOFILE, &files);
  if (files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
    getrlimit(RLIMIT_NOFILE, &files);
  }
  return static_cast<size_t>(files.rlim_cur);
}

int connectFrom(int port, const std::string &from) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  inet_pton(AF_INET, from.c_str(), &local.sin_addr);
  sockaddr_in address = loopbackAddress(port);
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  if (::bind(fd, reinterpret_cast<sockaddr *>(&local), sizeof(local)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) != 0) {
    int error = errno;
    ::close(fd);
    errno = error;
    return -1;
  }
  return fd;
}

ConnectionFlood::ConnectionFlood(int port, const Shape &shape) {
  raiseFileLimit();
  // OpenSSL writes without MSG_NOSIGNAL: a write after the server closed would end the test.
  std::signal(SIGPIPE, SIG_IGN);
  if (!shape.tlsCaFile.empty()) {
    ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx || (SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr),
                 SSL_CTX_load_verify_locations(ctx, shape.tlsCaFile.c_str(), nullptr) != 1))
      throw std::runtime_error("a TLS client context trusting " + shape.tlsCaFile +
                               " could not be made");
  }
  const std::string half = "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Le";
  auto open = [&](bool handshake, const std::string &send) {
    int fd = connectFrom(port, shape.from);
    if (fd < 0)
      throw std::runtime_error("connection " + std::to_string(connections.size()) +
                               " of the flood: " + std::strerror(errno));
    Held held{fd, nullptr};
    connections.push_back(held);
    if (ctx && handshake) {
      connections.back().ssl = held.ssl = SSL_new(ctx);
      SSL_set_fd(held.ssl, fd);
      SSL_set_tlsext_host_name(held.ssl, "localhost");
      if (SSL_connect(held.ssl) != 1)
        throw std::runtime_error("handshake " + std::to_string(connections.size()) +
                                 " of the flood: " + ERR_error_string(ERR_get_error(), nullptr));
    }
    if (send.empty())
      return;
    bool sent = held.ssl ? SSL_write(held.ssl, send.data(), static_cast<int>(send.size())) ==
                               static_cast<int>(send.size())
                         : ::send(fd, send.data(), send.size(), MSG_NOSIGNAL) ==
                               static_cast<ssize_t>(send.size());
    if (!sent)
      throw std::runtime_error("a half-sent head of the flood could not be sent");
  };
  connections.reserve(shape.idle + shape.heads + shape.silent);
  try {
    for (size_t i = 0; i < shape.silent; ++i)
      open(false, "");
    for (size_t i = 0; i < shape.idle; ++i)
      open(true, "");
    for (size_t i = 0; i < shape.heads; ++i)
      open(true, half);
  } catch (...) {
    release();
    throw;
  }
}

ConnectionFlood::~ConnectionFlood() { release(); }

void ConnectionFlood::release() {
  for (Held &held : connections) {
    if (held.ssl)
      SSL_free(held.ssl);
    ::close(held.fd);
  }
  connections.clear();
  if (ctx)
    SSL_CTX_free(ctx);
  ctx = nullptr;
}

size_t ConnectionFlood::closedByServer() const {
  size_t closed = 0;
  for (const Held &held : connections) {
    struct pollfd ready {
      held.fd, POLLIN, 0
    };
    if (::poll(&ready, 1, 0) <= 0)
      continue;
    char byte;
    ssize_t got = ::recv(held.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    closed += got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }
  return closed;
}

std::string exchangeFrom(int port, const std::string &from, const std::string &request) {
  int fd = connectFrom(port, from);
  if (fd < 0)
    return "";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string reply;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;)
    reply.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  return reply;
}

bool closedWithin(int fd, int withinMs) {
  struct pollfd ready {
    fd, POLLIN, 0
  };
  if (::poll(&ready, 1, withinMs) <= 0)
    return false;
  char byte;
  ssize_t got = ::recv(fd, &byte, 1, MSG_DONTWAIT);
  return got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

long residentKiB(int pid) { return procStatusKiB(pid, "VmRSS"); }

} // namespace courier::testing
