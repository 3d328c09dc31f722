// RAII fixture: a pool of courier-executors or courier-serve instances behind nginx, as
// scripts/pool.sh runs it, with clients for the front door and for each server past it.
#ifndef COURIER_TESTS_DEPLOY_POOLPROCESS_H
#define COURIER_TESTS_DEPLOY_POOLPROCESS_H

#include "tests/support/ServerProcess.h"

#include <httplib.h>

#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

namespace courier::testing {

enum class PoolKind { Executors, Serve };

/// A front door that terminates TLS: pool.sh's --tls-cert and --tls-key, and the CA its
/// clients trust.
struct PoolTls {
  std::string cert, key, ca;
};

/// `scripts/pool.sh --executors N` (with `--serve` for courier-serve) on a free loopback
/// port, its run directory inside the fixture's scratch directory; stopped with SIGTERM.
/// With a `token`, every server requires it (pool.sh's --token-file) and front() sends it.
class PoolProcess {
public:
  PoolProcess(PoolKind kind, int servers, std::vector<std::string> serverArgs = {},
              PoolTls tls = {}, std::string token = {});

  int port() const { return process.port(); }
  /// "127.0.0.1:PORT" (with TLS "https://127.0.0.1:PORT"), as clients name the front door.
  const std::string &address() const { return process.address(); }
  int servers() const { return count; }
  std::string runDir() const { return process.directory() + "/run"; }
  /// "executor-1", "serve-2", ... for server `index` (from 0).
  std::string serverName(int index) const;
  /// The unix socket server `index` listens on, behind nginx.
  std::string serverSocket(int index) const;
  /// A keep-alive client of the front door (over TLS, trusting PoolTls::ca, with TLS).
  std::unique_ptr<httplib::Client> front() const;
  /// A client of server `index` itself, over its unix socket.
  std::unique_ptr<httplib::Client> direct(int index) const;
  /// Metric `name` of server `index`, asked directly; -1 when it does not answer or lacks it.
  double serverMetric(int index, const std::string &name) const;
  pid_t serverPid(int index) const;
  pid_t nginxPid() const;

  const PoolKind kind;
  ServerProcess process;

private:
  int count;
};

} // namespace courier::testing

#endif // COURIER_TESTS_DEPLOY_POOLPROCESS_H
