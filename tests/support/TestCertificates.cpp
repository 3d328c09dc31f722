// Makes the test CA, certificates and keys with the openssl command (see TestCertificates.h).
#include "tests/support/TestCertificates.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace courier::testing {

namespace {

void run(const std::string &dir, const std::string &command) {
  std::string line = "cd '" + dir + "' && " + command + " >>openssl.log 2>&1";
  if (std::system(line.c_str()) != 0)
    throw std::runtime_error("making test certificates failed: " + command);
}

constexpr const char *kNewKey = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";

/// A self-signed CA named `name`, as NAME.crt and NAME.key.
void makeCa(const std::string &dir, const std::string &name) {
  run(dir, std::string("openssl req -x509 ") + kNewKey + " -keyout " + name + ".key -out " + name +
               ".crt -subj '/CN=Courier " + name + "' -days 2" +
               " -addext basicConstraints=critical,CA:TRUE" +
               " -addext keyUsage=critical,keyCertSign,cRLSign");
}

/// A key NAME.key and a certificate NAME.crt for `subject`, signed by CA `ca`, with the
/// extensions in file `extensions`, valid for `days` (-1: expired since yesterday).
void makeSigned(const std::string &dir, const std::string &name, const std::string &subject,
                const std::string &ca, const std::string &extensions, int days, int serial) {
  if (!std::filesystem::exists(dir + "/" + name + ".key"))
    run(dir, std::string("openssl req ") + kNewKey + " -keyout " + name + ".key -out " + name +
                 ".csr -subj '/CN=" + subject + "'");
  run(dir, "openssl x509 -req -in " + name + ".csr -CA " + ca + ".crt -CAkey " + ca +
               ".key -set_serial " + std::to_string(serial) + " -days " + std::to_string(days) +
               " -extfile " + extensions + " -out " + name + ".crt");
}

} // namespace

TestCertificates::TestCertificates() {
  std::string pattern = "/tmp/courier-tls-test-XXXXXX";
  if (!mkdtemp(pattern.data()))
    throw std::runtime_error("cannot create a temporary directory");
  dir = pattern;
  std::ofstream(dir + "/server.ext")
      << "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n";
  std::ofstream(dir + "/client.ext") << "extendedKeyUsage=clientAuth\n";
  std::ofstream(dir + "/not-pem.txt") << "this is not a certificate\n";
  makeCa(dir, "ca");
  makeCa(dir, "other-ca");
  makeSigned(dir, "server", "localhost", "ca", "server.ext", 2, 2);
  // The same request and key again, with a validity that ended before it began.
  std::filesystem::copy_file(dir + "/server.key", dir + "/expired.key");
  std::filesystem::copy_file(dir + "/server.csr", dir + "/expired.csr");
  makeSigned(dir, "expired", "localhost", "ca", "server.ext", -1, 3);
  makeSigned(dir, "client", "courier-test-client", "ca", "client.ext", 2, 4);
  makeSigned(dir, "stranger", "courier-test-stranger", "other-ca", "client.ext", 2, 5);
  caCert = dir + "/ca.crt";
  otherCaCert = dir + "/other-ca.crt";
  serverCert = dir + "/server.crt";
  serverKey = dir + "/server.key";
  expiredServerCert = dir + "/expired.crt";
  clientCert = dir + "/client.crt";
  clientKey = dir + "/client.key";
  strangerCert = dir + "/stranger.crt";
  strangerKey = dir + "/stranger.key";
  notPem = dir + "/not-pem.txt";
}

TestCertificates::~TestCertificates() {
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

} // namespace courier::testing
