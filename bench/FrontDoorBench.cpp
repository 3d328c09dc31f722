// The front door's cost and what it buys, side by side in one run: noop and 64 MiB launches
// on a courier-executor reached directly and through nginx (scripts/pool.sh), each in
// plaintext and with TLS, interleaved, and /v1/health while 64 clients send a byte a second,
// through nginx and directly. See docs/performance.md.
#include "bench/BenchSupport.h"
#include "tests/deploy/PoolProcess.h"
#include "tests/kernels/KernelPaths.h"
#include "tests/support/TestCertificates.h"
#include "tests/transport/ExecutorProcess.h"
#include "transport/HttpBackend.h"

#include <httplib.h>

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace courier::transport;
using courier::bench::check;
using courier::bench::die;
using courier::bench::loadObject;
using courier::bench::measure;
using courier::bench::Percentiles;
using courier::bench::percentiles;
using courier::testing::ExecutorProcess;
using courier::testing::PoolKind;
using courier::testing::PoolProcess;

namespace {

/// A session on one executor, reached at `address`, with `object` shipped.
struct Path {
  std::string name;
  std::unique_ptr<Backend> backend;
  std::string session;
};

/// The same executor build four ways: reached directly on loopback TCP or through nginx
/// (scripts/pool.sh, the executor on a unix socket behind it), each in plaintext and with TLS
/// (the executor's own, or nginx terminating it).
struct Executors {
  courier::testing::TestCertificates certificates;
  ExecutorProcess direct{courier::testing::ExecutorConfig{0, "", {"--quiet"}}};
  PoolProcess pool{PoolKind::Executors, 1, {"--quiet"}};
  courier::testing::ServerProcess directTls{tlsSpec(certificates)};
  PoolProcess poolTls{PoolKind::Executors,
                      1,
                      {"--quiet"},
                      {certificates.serverCert, certificates.serverKey, certificates.caCert}};

  static courier::testing::ServerSpec tlsSpec(const courier::testing::TestCertificates &pki) {
    courier::testing::ServerSpec spec{
        COURIER_EXECUTOR_PATH,
        "courier-executor",
        0,
        "",
        {"--quiet", "--tls-cert", pki.serverCert, "--tls-key", pki.serverKey}};
    spec.tlsCaFile = pki.caCert;
    return spec;
  }

  /// In the order the tables print them; the ratios refer to these indices.
  std::vector<Path> open(const ObjectBlob &object) const {
    std::vector<std::pair<std::string, std::string>> where = {
        {"direct", direct.address()},
        {"through nginx", pool.address()},
        {"direct, TLS", directTls.address()},
        {"through nginx, TLS", poolTls.address()}};
    BackendOptions options;
    options.tls.caFile = certificates.caCert;
    // HTTP on every path, the direct ones too (on loopback the default takes the same-host
    // channel there, which nginx's paths are refused).
    options.sharedMemory = SharedMemory::Off;
    std::vector<Path> paths;
    for (auto &[name, address] : where) {
      Path path{name, check(createHttpBackend(address, options), "connecting"), ""};
      path.session = check(path.backend->openSession(), "opening a session");
      check(path.backend->shipObject(path.session, object), "shipping");
      paths.push_back(std::move(path));
    }
    return paths;
  }
};
enum { kDirect, kNginx, kDirectTls, kNginxTls };

void noop(Executors &executors, int n) {
  std::printf("== noop launch round trip, %d each, the paths interleaved in blocks of %d\n", n,
              std::min(n, 500));
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  std::vector<Path> paths = executors.open(shapes);
  std::vector<std::vector<double>> times(paths.size());
  int block = std::min(n, 500);
  for (int done = -block; done < n; done += block) // The first block warms up.
    for (size_t i = 0; i < paths.size(); ++i)
      measure(
          done < 0 ? block : 0, done < 0 ? 0 : block,
          [&] {
            check(
                paths[i].backend->launch(paths[i].session, shapes, "_catalyst_pyface_noop", {}, {}),
                "launching");
          },
          times[i]);
  std::vector<Percentiles> p;
  for (size_t i = 0; i < paths.size(); ++i) {
    p.push_back(percentiles(times[i]));
    std::printf("  %-24s p50 %7.1f us  p99 %7.1f us\n", paths[i].name.c_str(), p[i].p50, p[i].p99);
  }
  std::printf("  through nginx / direct: p50 %.2fx (target <= 2.0x), p99 %.2fx; with TLS p50 "
              "%.2fx\n",
              p[kNginx].p50 / p[kDirect].p50, p[kNginx].p99 / p[kDirect].p99,
              p[kNginxTls].p50 / p[kDirectTls].p50);
  std::printf("  TLS / plaintext p50: direct %.2fx, through nginx %.2fx\n",
              p[kDirectTls].p50 / p[kDirect].p50, p[kNginxTls].p50 / p[kNginx].p50);
}

/// The peak resident set (VmHWM) of the only worker of the nginx master `master`, in KiB.
long nginxWorkerPeakKiB(pid_t master) {
  long peak = 0;
  std::string children =
      "/proc/" + std::to_string(master) + "/task/" + std::to_string(master) + "/children";
  if (FILE *f = std::fopen(children.c_str(), "r")) {
    long worker = 0;
    if (std::fscanf(f, "%ld", &worker) == 1) {
      std::string status = "/proc/" + std::to_string(worker) + "/status";
      if (FILE *s = std::fopen(status.c_str(), "r")) {
        char line[256];
        while (std::fgets(line, sizeof(line), s))
          std::sscanf(line, "VmHWM: %ld kB", &peak);
        std::fclose(s);
      }
    }
    std::fclose(f);
  }
  return peak;
}

void bandwidth(Executors &executors, int mib, int rounds) {
  const size_t bytes = size_t(mib) << 20;
  std::printf("== %d MiB in + %d MiB out (scale launch), median of %d interleaved rounds\n", mib,
              mib, rounds);
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  std::vector<Path> paths = executors.open(scale);
  std::vector<char> input(bytes, 1);
  int64_t n = static_cast<int64_t>(bytes / 8);
  TensorView view{input.data(), 8, {n}, {1}};
  std::vector<std::vector<double>> times(paths.size());
  for (int round = -1; round < rounds; ++round) // Round -1 warms up.
    for (size_t i = 0; i < paths.size(); ++i)
      measure(
          round < 0 ? 1 : 0, round < 0 ? 0 : 1,
          [&] {
            auto r = check(paths[i].backend->launch(paths[i].session, scale,
                                                    "_catalyst_pyface_scale", {view}, {{1, 8}}),
                           "launching");
            if (r[0].sizes[0] != n)
              die("scale returned the wrong size");
          },
          times[i]);
  std::vector<double> s;
  for (size_t i = 0; i < paths.size(); ++i) {
    s.push_back(percentiles(times[i]).p50 / 1e6);
    std::printf("  %-24s %7.1f ms  %5.2f GB/s\n", paths[i].name.c_str(), s[i] * 1e3,
                2.0 * double(bytes) / s[i] / 1e9);
  }
  std::printf("  TLS throughput = %.0f%% of plaintext direct (target >= 70%%), %.0f%% through "
              "nginx\n",
              100 * s[kDirect] / s[kDirectTls], 100 * s[kNginx] / s[kNginxTls]);
  std::printf("  through nginx = %.0f%% of direct throughput (%.0f%% with TLS)\n",
              100 * s[kDirect] / s[kNginx], 100 * s[kDirectTls] / s[kNginxTls]);
  std::printf("  nginx worker peak RSS: %.1f MiB plaintext, %.1f MiB TLS\n",
              double(nginxWorkerPeakKiB(executors.pool.nginxPid())) / 1024,
              double(nginxWorkerPeakKiB(executors.poolTls.nginxPid())) / 1024);
}

/// Connections that send a request's first bytes and then one byte a second.
class SlowClients {
public:
  SlowClients(int port, int count) {
    for (int i = 0; i < count; ++i) {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(static_cast<uint16_t>(port));
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) != 0)
        die("a slow client cannot connect");
      fcntl(fd, F_SETFL, O_NONBLOCK);
      std::string start = "GET /v1/health HTTP/1.1\r\nHost: bench\r\nX-Slow: ";
      ::send(fd, start.data(), start.size(), MSG_NOSIGNAL);
      fds.push_back(fd);
    }
    feeder = std::thread([this] {
      while (!stop) {
        for (int fd : fds)
          ::send(fd, "x", 1, MSG_NOSIGNAL);
        for (int i = 0; i < 100 && !stop; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  ~SlowClients() {
    stop = true;
    feeder.join();
    for (int fd : fds)
      ::close(fd);
  }

private:
  std::vector<int> fds;
  std::atomic<bool> stop{false};
  std::thread feeder;
};

/// `n` health probes, each allowed 2 s; returns their timings (answered ones) and failures.
std::pair<std::vector<double>, int> probeHealth(int port, int n) {
  httplib::Client http("127.0.0.1", port);
  http.set_keep_alive(true);
  http.set_tcp_nodelay(true);
  http.set_connection_timeout(std::chrono::seconds(2));
  http.set_read_timeout(std::chrono::seconds(2));
  std::vector<double> times;
  int failed = 0;
  for (int i = 0; i < n; ++i) {
    auto start = std::chrono::steady_clock::now();
    httplib::Result res = http.Get("/v1/health");
    if (res && res->status == 200)
      times.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
    else
      ++failed;
  }
  return {times, failed};
}

void report(const char *name, const std::pair<std::vector<double>, int> &probes) {
  if (probes.first.empty()) {
    std::printf("  %-34s no probe answered (%d failed)\n", name, probes.second);
    return;
  }
  Percentiles p = percentiles(probes.first);
  std::printf("  %-34s p50 %8.1f us  p99 %8.1f us  (%d failed)\n", name, p.p50, p.p99,
              probes.second);
}

void slowClients(Executors &executors, int n, int directProbes) {
  std::printf("== /v1/health while 64 clients send a byte a second; %d probes, 2 s each\n", n);
  int front = executors.pool.port(), direct = executors.direct.port();
  report("through nginx, quiet", probeHealth(front, n));
  {
    SlowClients slow(front, 64);
    report("through nginx, 64 slow clients", probeHealth(front, n));
  }
  // Each slow connection holds one of the executor's 32 threads (--threads) for as long as
  // it keeps sending; the probes wait behind them.
  report("direct, quiet", probeHealth(direct, n));
  {
    SlowClients slow(direct, 64);
    report("direct, 64 slow clients", probeHealth(direct, directProbes));
  }
}

} // namespace

int main(int argc, char **argv) {
  std::signal(SIGPIPE, SIG_IGN);
  std::string which = argc > 1 ? argv[1] : "all";
  // "smoke" runs every section briefly, so ctest notices when the benchmark stops working.
  bool smoke = which == "smoke";
  if (!smoke && which != "all" && which != "noop" && which != "bandwidth" &&
      which != "slow-clients")
    die("usage: courier-front-door-bench [all|noop|bandwidth|slow-clients|smoke]");
  Executors executors;
  if (smoke || which == "all" || which == "noop")
    noop(executors, smoke ? 100 : 5000);
  if (smoke || which == "all" || which == "bandwidth")
    bandwidth(executors, smoke ? 4 : 64, smoke ? 1 : 7);
  if (smoke || which == "all" || which == "slow-clients")
    slowClients(executors, smoke ? 20 : 2000, smoke ? 1 : 5);
  return 0;
}
