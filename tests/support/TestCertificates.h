// RAII fixture: a throwaway public-key infrastructure made with the openssl command in a
// temporary directory, for TLS tests against real servers on loopback.
#ifndef COURIER_TESTS_SUPPORT_TESTCERTIFICATES_H
#define COURIER_TESTS_SUPPORT_TESTCERTIFICATES_H

#include "tests/support/ServerProcess.h"

#include <memory>
#include <string>
#include <vector>

namespace courier::testing {

/// PEM files, each a path inside directory(). Keys are EC P-256 and unencrypted.
class TestCertificates {
public:
  /// Makes every file below; throws when the openssl command fails.
  TestCertificates();
  ~TestCertificates();
  TestCertificates(const TestCertificates &) = delete;
  TestCertificates &operator=(const TestCertificates &) = delete;

  const std::string &directory() const { return dir; }

  std::string caCert;                    ///< The test CA, which signs the certificates below.
  std::string serverCert, serverKey;     ///< subjectAltName IP:127.0.0.1 and DNS:localhost.
  std::string expiredServerCert;         ///< The same server and key, valid until yesterday.
  std::string otherCaCert;               ///< A CA unrelated to the first.
  std::string clientCert, clientKey;     ///< A client certificate the test CA signed.
  std::string strangerCert, strangerKey; ///< A client certificate the other CA signed.
  std::string notPem;                    ///< A file that holds no PEM at all.

private:
  std::string dir;
};

/// A server (`program`, named `name`) speaking TLS with `pki`'s server certificate, `extra`
/// after its own flags, whose client() trusts `pki`'s CA.
inline std::unique_ptr<ServerProcess> startTlsServer(const TestCertificates &pki,
                                                     const std::string &program,
                                                     const std::string &name,
                                                     std::vector<std::string> extra = {}) {
  ServerSpec spec{
      program, name, 0, "", {"--quiet", "--tls-cert", pki.serverCert, "--tls-key", pki.serverKey}};
  spec.args.insert(spec.args.end(), extra.begin(), extra.end());
  spec.tlsCaFile = pki.caCert;
  return std::make_unique<ServerProcess>(spec);
}

} // namespace courier::testing

#endif // COURIER_TESTS_SUPPORT_TESTCERTIFICATES_H
