// A loopback TLS connection made with OpenSSL's client API, for tests that send bytes no HTTP
// client would send over TLS, or that look at the session (resumption).
#ifndef COURIER_TESTS_SUPPORT_TLSCONNECTION_H
#define COURIER_TESTS_SUPPORT_TLSCONNECTION_H

#include "tests/support/RawConnection.h"

#include <catch2/catch.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <csignal>
#include <memory>
#include <string>

namespace courier::testing {

struct TlsClientFiles {
  std::string caFile{};              ///< Verifies the server's certificate.
  std::string certFile{}, keyFile{}; ///< Presented when the server asks; none when empty.
  int maxVersion = 0;                ///< TLS1_2_VERSION to keep to TLS 1.2; 0 for the highest.
};

/// A TLS connection to 127.0.0.1:`port`, its handshake done (REQUIRE'd); `resume` offers a
/// session of an earlier connection. Reads give up after 60 s.
class TlsConnection {
public:
  TlsConnection(int port, const TlsClientFiles &files, SSL_SESSION *resume = nullptr)
      : tcp(port), ctx(SSL_CTX_new(TLS_client_method())) {
    // OpenSSL writes to the socket without MSG_NOSIGNAL: a write after the server closed
    // (which these tests provoke) would end the test process.
    std::signal(SIGPIPE, SIG_IGN);
    REQUIRE(ctx);
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
    REQUIRE(SSL_CTX_load_verify_locations(ctx.get(), files.caFile.c_str(), nullptr) == 1);
    if (!files.certFile.empty()) {
      REQUIRE(SSL_CTX_use_certificate_chain_file(ctx.get(), files.certFile.c_str()) == 1);
      REQUIRE(SSL_CTX_use_PrivateKey_file(ctx.get(), files.keyFile.c_str(), SSL_FILETYPE_PEM) == 1);
    }
    if (files.maxVersion)
      SSL_CTX_set_max_proto_version(ctx.get(), files.maxVersion);
    ssl.reset(SSL_new(ctx.get()));
    REQUIRE(ssl);
    SSL_set_fd(ssl.get(), tcp.descriptor());
    SSL_set_tlsext_host_name(ssl.get(), "localhost");
    if (resume)
      SSL_set_session(ssl.get(), resume);
    int connected = SSL_connect(ssl.get());
    INFO("handshake: " << ERR_error_string(ERR_get_error(), nullptr));
    REQUIRE(connected == 1);
  }
  /// Says close_notify first: OpenSSL takes a session that ended without it for a bad one,
  /// and no later connection could resume it.
  ~TlsConnection() { SSL_shutdown(ssl.get()); }
  TlsConnection(const TlsConnection &) = delete;
  TlsConnection &operator=(const TlsConnection &) = delete;

  /// Sends all of `bytes`; false when the connection would not take them.
  bool send(const std::string &bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      int n = SSL_write(ssl.get(), bytes.data() + sent, static_cast<int>(bytes.size() - sent));
      if (n <= 0)
        return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  /// Everything the server sends until it closes the connection.
  std::string readAll() {
    std::string reply;
    char buffer[4096];
    for (int n; (n = SSL_read(ssl.get(), buffer, sizeof(buffer))) > 0;)
      reply.append(buffer, static_cast<size_t>(n));
    ERR_clear_error();
    return reply;
  }
  /// The session, for a later connection to resume (the caller frees it).
  SSL_SESSION *session() const { return SSL_get1_session(ssl.get()); }
  bool resumed() const { return SSL_session_reused(ssl.get()) == 1; }
  int descriptor() const { return tcp.descriptor(); }

private:
  struct CtxFree {
    void operator()(SSL_CTX *c) const { SSL_CTX_free(c); }
  };
  struct SslFree {
    void operator()(SSL *s) const { SSL_free(s); }
  };
  RawConnection tcp;
  std::unique_ptr<SSL_CTX, CtxFree> ctx;
  std::unique_ptr<SSL, SslFree> ssl; // Freed before ctx, then the socket closes.
};

} // namespace courier::testing

#endif // COURIER_TESTS_SUPPORT_TLSCONNECTION_H
