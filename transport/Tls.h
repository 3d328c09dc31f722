// TLS for both ends of the HTTP layer, with OpenSSL: a server's context from its certificate,
// key and optional client CA, each file checked so a bad one is refused by name; a client's
// certificate files checked the same way; and the words for a failed handshake, taken from
// OpenSSL's own verify result. Internal to transport/ (HttpService.cpp, HttpBackend.cpp).
#ifndef COURIER_TRANSPORT_TLS_H
#define COURIER_TRANSPORT_TLS_H

#include "transport/Backend.h"
#include "transport/ListenOptions.h"

#include "llvm/Support/Error.h"

#include <openssl/ssl.h>

#include <string>

namespace courier::transport {

/// Whether any TLS flag is set for a listener.
bool wantsTls(const HttpListenOptions &listen);

/// What must hold of a listener's TLS settings before it binds: --tls-cert and --tls-key
/// both or neither, --tls-client-ca only with them, no TLS on a unix socket (its 0600 file
/// mode is its guard), and beyond loopback either TLS or --insecure-plaintext.
llvm::Error checkListenTls(const HttpListenOptions &listen);

/// Sets up a server's context: TLS 1.2 or later, the certificate chain and key of `listen`
/// (which must match), and with a client CA, a certificate signed by it required of every
/// client at the handshake. Errors name the flag and the file and say what is wrong.
llvm::Error configureServerContext(SSL_CTX &ctx, const HttpListenOptions &listen);

/// `options` with each empty setting taken from the environment: COURIER_TLS_CA,
/// COURIER_TLS_CLIENT_CERT and COURIER_TLS_CLIENT_KEY.
TlsClientOptions withTlsEnvironment(TlsClientOptions options);

/// Checks that the files of `options` can serve a client: the CA file holds certificates,
/// the client certificate and key (both or neither) load and match.
llvm::Error checkClientFiles(const TlsClientOptions &options);

/// Installs, on a client's context, a note of whether the server asked for a client
/// certificate the client did not have; askedForMissingCertificate() reads it.
void watchCertificateRequests(SSL_CTX &ctx);
bool askedForMissingCertificate(const SSL_CTX &ctx);

/// Words for a failed certificate check, from OpenSSL's verify result (X509_V_*): an unknown
/// CA, an expired certificate, and so on; X509_V_OK means the certificate does not name
/// `host`.
std::string describeVerifyFailure(long verifyResult, const std::string &host);

/// The reason OpenSSL recorded for the calling thread's last failure, or "" (and clears it).
std::string takeOpenSslReason();

} // namespace courier::transport

#endif // COURIER_TRANSPORT_TLS_H
