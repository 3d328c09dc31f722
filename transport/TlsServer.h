// The TLS server of courier-executor and courier-serve: cpp-httplib's SSLServer (its context,
// request parsing, routing and responses, a thread per connection from a ConnectionPool) with
// the connection's handshake and reads done here, so a TLS listener holds a client to what a
// plaintext one does (transport/ServerStream.h): a handshake and then each request's head
// within kHeadTimeout, a head of at most kMaxHeadBytes, header lines and chunked bodies framed
// exactly, and a reply saying "Connection: close" as the connection's last. httplib's own
// SSLServer waits up to the read timeout per step of a handshake and per read of a head, and
// without end in total; grows a header line without bound; and keeps reading after such a
// reply.
#ifndef COURIER_TRANSPORT_TLSSERVER_H
#define COURIER_TRANSPORT_TLSSERVER_H

#include <httplib.h>

#include <functional>

namespace courier::transport {

class TlsServer final : public httplib::SSLServer {
public:
  /// `setup` configures the context (transport/Tls.h, configureServerContext); false leaves
  /// the server invalid.
  explicit TlsServer(const std::function<bool(SSL_CTX &)> &setup) : httplib::SSLServer(setup) {}

private:
  bool process_and_close_socket(socket_t sock) override;
};

} // namespace courier::transport

#endif // COURIER_TRANSPORT_TLSSERVER_H
