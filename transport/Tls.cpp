// Loading and checking certificates and keys, and describing TLS failures (see Tls.h).
#include "transport/Tls.h"

#include "llvm/Support/MemoryBuffer.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <cstdlib>
#include <memory>
#include <vector>

namespace courier::transport {

namespace {

struct BioFree {
  void operator()(BIO *bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509 *cert) const { X509_free(cert); }
};
struct KeyFree {
  void operator()(EVP_PKEY *key) const { EVP_PKEY_free(key); }
};
using Certificate = std::unique_ptr<X509, X509Free>;
using PrivateKey = std::unique_ptr<EVP_PKEY, KeyFree>;

/// An encrypted key is refused rather than asked about on the terminal.
int noPassphrase(char *, int, int, void *) { return 0; }

/// A file's bytes; `what` names it in the error ("--tls-cert '/etc/x.pem'").
llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> readFile(const std::string &what,
                                                             const std::string &path) {
  auto file = llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!file)
    return llvm::createStringError("cannot read " + what + ": " + file.getError().message());
  return std::move(*file);
}

std::unique_ptr<BIO, BioFree> memoryBio(const llvm::MemoryBuffer &file) {
  return std::unique_ptr<BIO, BioFree>(
      BIO_new_mem_buf(file.getBufferStart(), static_cast<int>(file.getBufferSize())));
}

llvm::Error problem(const std::string &what, const std::string &wrong) {
  std::string reason = takeOpenSslReason();
  return llvm::createStringError(what + " " + wrong + (reason.empty() ? "" : " (" + reason + ")"));
}

/// Every certificate in a PEM file, the first one first; at least one.
llvm::Expected<std::vector<Certificate>> loadCertificates(const std::string &what,
                                                          const std::string &path) {
  auto file = readFile(what, path);
  if (!file)
    return file.takeError();
  auto bio = memoryBio(**file);
  std::vector<Certificate> certificates;
  while (X509 *cert = PEM_read_bio_X509(bio.get(), nullptr, noPassphrase, nullptr))
    certificates.emplace_back(cert);
  // Reading stops at the end of the file with a "no start line" error: not a failure.
  ERR_clear_error();
  if (certificates.empty())
    return problem(what, "holds no PEM certificate");
  return std::move(certificates);
}

llvm::Expected<PrivateKey> loadKey(const std::string &what, const std::string &path) {
  auto file = readFile(what, path);
  if (!file)
    return file.takeError();
  auto bio = memoryBio(**file);
  PrivateKey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, noPassphrase, nullptr));
  if (!key)
    return problem(what, "holds no unencrypted PEM private key");
  return std::move(key);
}

/// A certificate chain and the key of its first certificate, each loaded from its file;
/// `certWhat` and `keyWhat` name the files in errors.
struct CertifiedKey {
  std::vector<Certificate> chain;
  PrivateKey key;
};

llvm::Expected<CertifiedKey> loadCertifiedKey(const std::string &certWhat,
                                              const std::string &certPath,
                                              const std::string &keyWhat,
                                              const std::string &keyPath) {
  auto chain = loadCertificates(certWhat, certPath);
  if (!chain)
    return chain.takeError();
  auto key = loadKey(keyWhat, keyPath);
  if (!key)
    return key.takeError();
  if (X509_check_private_key(chain->front().get(), key->get()) != 1) {
    ERR_clear_error();
    return llvm::createStringError(keyWhat + " is not the key of the certificate in " + certWhat);
  }
  return CertifiedKey{std::move(*chain), std::move(*key)};
}

std::string quoted(const char *flag, const std::string &path) {
  return std::string(flag) + " '" + path + "'";
}

/// The index of the note watchCertificateRequests() keeps on a client's context.
int certificateRequestIndex() {
  static int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

/// Called by OpenSSL when a server asks for a certificate the client has none of.
int noteCertificateRequest(SSL *ssl, X509 **, EVP_PKEY **) {
  static char asked;
  SSL_CTX_set_ex_data(SSL_get_SSL_CTX(ssl), certificateRequestIndex(), &asked);
  return 0; // Go on without one; the server decides.
}

} // namespace

bool wantsTls(const HttpListenOptions &listen) {
  return !listen.tlsCertFile.empty() || !listen.tlsKeyFile.empty() ||
         !listen.tlsClientCaFile.empty();
}

llvm::Error checkListenTls(const HttpListenOptions &listen) {
  if (!wantsTls(listen)) {
    if (isLoopbackHost(listen.host) || !listen.socketPath.empty() || listen.insecurePlaintext)
      return llvm::Error::success();
    return llvm::createStringError(
        "refusing to listen on '" + listen.host +
        "' without TLS: give --tls-cert and --tls-key, or --insecure-plaintext when something "
        "in front (a TLS-terminating proxy) protects the traffic");
  }
  if (listen.tlsCertFile.empty() || listen.tlsKeyFile.empty())
    return llvm::createStringError(listen.tlsCertFile.empty() && listen.tlsKeyFile.empty()
                                       ? "--tls-client-ca needs --tls-cert and --tls-key"
                                       : "--tls-cert and --tls-key go together: give both");
  if (listen.insecurePlaintext)
    return llvm::createStringError("--insecure-plaintext contradicts --tls-cert: give one");
  if (!listen.socketPath.empty())
    return llvm::createStringError(
        "TLS is for TCP listeners: unix:" + listen.socketPath +
        " is guarded by its 0600 file mode; drop --tls-cert and --tls-key or listen on HOST:PORT");
  return llvm::Error::success();
}

llvm::Error configureServerContext(SSL_CTX &ctx, const HttpListenOptions &listen) {
  SSL_CTX_set_options(&ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION |
                                SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  // TLS 1.3's suites, AES-128-GCM first: as safe as the others, and the cheapest per byte
  // where tensors are what crosses (OpenSSL would pick AES-256-GCM).
  SSL_CTX_set_ciphersuites(
      &ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256");
  SSL_CTX_set_default_passwd_cb(&ctx, noPassphrase);

  std::string certWhat = quoted("--tls-cert", listen.tlsCertFile);
  std::string keyWhat = quoted("--tls-key", listen.tlsKeyFile);
  auto pair = loadCertifiedKey(certWhat, listen.tlsCertFile, keyWhat, listen.tlsKeyFile);
  if (!pair)
    return pair.takeError();
  const std::vector<Certificate> &chain = pair->chain;
  if (SSL_CTX_use_certificate(&ctx, chain.front().get()) != 1)
    return problem(certWhat, "cannot be used");
  for (size_t i = 1; i < chain.size(); ++i) {
    // add1 takes a reference of its own.
    if (SSL_CTX_add1_chain_cert(&ctx, chain[i].get()) != 1)
      return problem(certWhat, "has an intermediate certificate that cannot be used");
  }
  if (SSL_CTX_use_PrivateKey(&ctx, pair->key.get()) != 1)
    return problem(keyWhat, "cannot be used");

  if (listen.tlsClientCaFile.empty())
    return llvm::Error::success();
  std::string caWhat = quoted("--tls-client-ca", listen.tlsClientCaFile);
  auto authorities = loadCertificates(caWhat, listen.tlsClientCaFile);
  if (!authorities)
    return authorities.takeError();
  X509_STORE *store = SSL_CTX_get_cert_store(&ctx);
  STACK_OF(X509_NAME) *names = sk_X509_NAME_new_null();
  for (const Certificate &authority : *authorities) {
    X509_STORE_add_cert(store, authority.get());
    sk_X509_NAME_push(names, X509_NAME_dup(X509_get_subject_name(authority.get())));
  }
  // The names of the accepted CAs go to clients in the certificate request.
  SSL_CTX_set_client_CA_list(&ctx, names);
  SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  // A session verified a client's certificate: OpenSSL resumes it only within the context it
  // was made in, and without one set it fails a resuming client's handshake with an
  // "internal error" alert.
  static const unsigned char kSessionContext[] = "courier-server";
  if (SSL_CTX_set_session_id_context(&ctx, kSessionContext, sizeof(kSessionContext) - 1) != 1)
    return problem(caWhat, "cannot be used: the TLS session context could not be set");
  return llvm::Error::success();
}

TlsClientOptions withTlsEnvironment(TlsClientOptions options) {
  auto fill = [](std::string &setting, const char *name) {
    if (setting.empty())
      if (const char *value = std::getenv(name))
        setting = value;
  };
  fill(options.caFile, "COURIER_TLS_CA");
  fill(options.certFile, "COURIER_TLS_CLIENT_CERT");
  fill(options.keyFile, "COURIER_TLS_CLIENT_KEY");
  return options;
}

llvm::Error checkClientFiles(const TlsClientOptions &options) {
  if (!options.caFile.empty())
    if (auto authorities =
            loadCertificates("the TLS CA file '" + options.caFile + "'", options.caFile);
        !authorities)
      return authorities.takeError();
  if (options.certFile.empty() && options.keyFile.empty())
    return llvm::Error::success();
  if (options.certFile.empty() || options.keyFile.empty())
    return llvm::createStringError(
        "a TLS client certificate needs its key: give both --tls-client-cert and "
        "--tls-client-key (or COURIER_TLS_CLIENT_CERT and COURIER_TLS_CLIENT_KEY)");
  std::string certWhat = "the TLS client certificate '" + options.certFile + "'";
  std::string keyWhat = "the TLS client key '" + options.keyFile + "'";
  return loadCertifiedKey(certWhat, options.certFile, keyWhat, options.keyFile).takeError();
}

void watchCertificateRequests(SSL_CTX &ctx) {
  SSL_CTX_set_client_cert_cb(&ctx, noteCertificateRequest);
}

bool askedForMissingCertificate(const SSL_CTX &ctx) {
  SSL_CTX &mutableCtx = const_cast<SSL_CTX &>(ctx);
  bool asked = SSL_CTX_get_ex_data(&mutableCtx, certificateRequestIndex()) != nullptr;
  SSL_CTX_set_ex_data(&mutableCtx, certificateRequestIndex(), nullptr);
  return asked;
}

std::string describeVerifyFailure(long verifyResult, const std::string &host) {
  switch (verifyResult) {
  case X509_V_OK:
    return "the server's certificate does not name '" + host +
           "' (its subjectAltName must list the host or IP address the client uses)";
  case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
  case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
  case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
  case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
  case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    return std::string("certificate verify failed: unknown CA (") +
           X509_verify_cert_error_string(verifyResult) +
           "); give the CA that signed the server's certificate with --tls-ca or COURIER_TLS_CA";
  case X509_V_ERR_CERT_HAS_EXPIRED:
    return "certificate verify failed: the server's certificate has expired";
  case X509_V_ERR_CERT_NOT_YET_VALID:
    return "certificate verify failed: the server's certificate is not valid yet";
  default:
    return std::string("certificate verify failed: ") + X509_verify_cert_error_string(verifyResult);
  }
}

std::string takeOpenSslReason() {
  unsigned long code = ERR_peek_last_error();
  ERR_clear_error();
  if (code == 0)
    return "";
  const char *reason = ERR_reason_error_string(code);
  return reason ? reason : "";
}

} // namespace courier::transport
