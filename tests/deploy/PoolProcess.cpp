// Starts scripts/pool.sh through ServerProcess, which reads the "listening on" line the
// script prints once every server is ready and nginx answers.
#include "tests/deploy/PoolProcess.h"

#include <fstream>
#include <sstream>
#include <sys/socket.h>

namespace courier::testing {

namespace {

ServerSpec poolSpec(PoolKind kind, int servers, std::vector<std::string> serverArgs,
                    const PoolTls &tls, std::string token) {
  ServerSpec spec;
  // ServerProcess writes it to a file it passes as --token-file, and its client sends it.
  spec.token = std::move(token);
  spec.program = COURIER_POOL_SCRIPT;
  spec.name = kind == PoolKind::Serve ? "serve-pool" : "executor-pool";
  spec.args = {"--executors", std::to_string(servers), "--run-dir", "{dir}/run",
               "--bin-dir",   COURIER_BIN_DIR};
  if (kind == PoolKind::Serve)
    spec.args.push_back("--serve");
  if (!tls.cert.empty()) {
    spec.args.insert(spec.args.end(), {"--tls-cert", tls.cert, "--tls-key", tls.key});
    spec.tlsCaFile = tls.ca;
  }
  spec.args.push_back("--");
  spec.args.insert(spec.args.end(), serverArgs.begin(), serverArgs.end());
  return spec;
}

pid_t readPid(const std::string &path) {
  std::ifstream in(path);
  long pid = -1;
  in >> pid;
  return static_cast<pid_t>(pid);
}

} // namespace

PoolProcess::PoolProcess(PoolKind kind, int servers, std::vector<std::string> serverArgs,
                         PoolTls tls, std::string token)
    : kind(kind), process(poolSpec(kind, servers, std::move(serverArgs), tls, std::move(token))),
      count(servers) {}

std::string PoolProcess::serverName(int index) const {
  return (kind == PoolKind::Serve ? "serve-" : "executor-") + std::to_string(index + 1);
}

std::string PoolProcess::serverSocket(int index) const {
  return runDir() + "/" + serverName(index) + ".sock";
}

std::unique_ptr<httplib::Client> PoolProcess::front() const {
  // ServerProcess's client speaks TLS to an https:// address, trusting the pool's CA.
  return process.client();
}

std::unique_ptr<httplib::Client> PoolProcess::direct(int index) const {
  auto http = std::make_unique<httplib::Client>(serverSocket(index), 80);
  http->set_address_family(AF_UNIX);
  http->set_read_timeout(std::chrono::seconds(60));
  return http;
}

double PoolProcess::serverMetric(int index, const std::string &name) const {
  httplib::Result res = direct(index)->Get("/metrics");
  if (!res || res->status != 200)
    return -1;
  std::istringstream lines(res->body);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(name + " ", 0) == 0)
      return std::stod(line.substr(name.size() + 1));
  return -1;
}

pid_t PoolProcess::serverPid(int index) const {
  return readPid(runDir() + "/" + serverName(index) + ".pid");
}

pid_t PoolProcess::nginxPid() const { return readPid(runDir() + "/nginx.pid"); }

} // namespace courier::testing
