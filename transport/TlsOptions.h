// How a client reaches an executor over TLS: the settings the runtime's HTTP backend, the
// engine and the tools share. No dependencies, so the engine's public header can carry it.
#ifndef COURIER_TRANSPORT_TLSOPTIONS_H
#define COURIER_TRANSPORT_TLSOPTIONS_H

#include <string>

namespace courier::transport {

/// How an HTTP backend checks an https:// executor and proves itself to it. The server's
/// certificate is always verified, its host name included; each empty setting is taken from
/// the environment when the backend is created (COURIER_TLS_CA, COURIER_TLS_CLIENT_CERT,
/// COURIER_TLS_CLIENT_KEY), and without a CA file the system's default CA paths are used.
struct TlsClientOptions {
  std::string caFile;   ///< PEM certificates of the CAs the executor's certificate may chain to.
  std::string certFile; ///< PEM client certificate for mutual TLS, with keyFile.
  std::string keyFile;  ///< Its unencrypted PEM private key.
};

} // namespace courier::transport

#endif // COURIER_TRANSPORT_TLSOPTIONS_H
