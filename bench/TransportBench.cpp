// Transport benchmarks, each against its own floor measured in the same run: HTTP launch
// latency vs a raw TCP ping-pong, 64 MiB launches vs raw sockets and bare cpp-httplib
// streaming, local launches vs a direct call, and the same-host shared-memory channel vs
// raw TCP; and, with the aarch64 executor of cmake/Aarch64Executor.cmake, the same launches on
// it under qemu-user beside the native executor's. Prints figures and ratios (see
// docs/performance.md).
#include "bench/BenchSupport.h"
#include "executor/LocalBackend.h"
#include "tests/kernels/KernelPaths.h"
#include "tests/transport/ExecutorProcess.h"
#include "transport/Backend.h"
#include "transport/HttpBackend.h"
#include "transport/Wire.h"

#include "llvm/Support/MemoryBuffer.h"

#include <httplib.h>

#include <algorithm>
#include <arpa/inet.h>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <tuple>
#include <unistd.h>
#include <vector>

using namespace courier::transport;
using courier::testing::cpuSecondsOfTree;
using courier::testing::ExecutorProcess;
using courier::testing::ServerProcess;
using courier::testing::ServerSpec;
using Clock = std::chrono::steady_clock;
using courier::bench::check;
using courier::bench::ClientsBenchmark;
using courier::bench::die;
using courier::bench::loadObject;
using courier::bench::measure;
using courier::bench::median;
using courier::bench::Percentiles;
using courier::bench::percentiles;
using courier::bench::runClientsBenchmark;
using courier::bench::secondsOf;

namespace {

/// A connected loopback TCP pair with TCP_NODELAY, as a tuned raw socket would be.
std::pair<int, int> loopbackPair() {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr *>(&addr), len) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr *>(&addr), &len) != 0)
    die("cannot listen on loopback");
  int client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(client, reinterpret_cast<sockaddr *>(&addr), len) != 0)
    die("cannot connect on loopback");
  int server = accept(listener, nullptr, nullptr);
  close(listener);
  int one = 1;
  setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return {client, server};
}

bool sendAll(int fd, const char *data, size_t size) {
  while (size > 0) {
    ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0)
      return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool recvAll(int fd, char *data, size_t size) {
  while (size > 0) {
    ssize_t n = recv(fd, data, size, 0);
    if (n <= 0)
      return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

/// A launch of tests/kernels/scale.c's `scale` on `view`, a 1-D f64 tensor, checked for size.
void launchScale(Backend &backend, const std::string &session, const ObjectBlob &scale,
                 const TensorView &view) {
  auto r = check(backend.launch(session, scale, "_catalyst_pyface_scale", {view}, {{1, 8}}),
                 "launching");
  if (r[0].sizes[0] != view.sizes[0])
    die("scale returned the wrong size");
}

/// A courier-executor process, as deployed, on a free loopback port.
courier::testing::ExecutorConfig executorConfig(std::vector<std::string> extra = {}) {
  // One client address, the benchmark's, for every client (and the idle ones of the
  // clients benchmark): no per-client limit.
  std::vector<std::string> flags = {"--quiet", "--max-connections-per-client", "0"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return courier::testing::ExecutorConfig{0, "", flags};
}

ExecutorProcess startExecutor() { return ExecutorProcess(executorConfig()); }

/// A client that keeps HTTP: on loopback the default takes the same-host channel, and these
/// sections measure the HTTP path.
BackendOptions overHttp() {
  BackendOptions options;
  options.sharedMemory = SharedMemory::Off;
  return options;
}

/// A loopback TCP pair (loopbackPair) whose server end a thread serves until the client end
/// shuts down.
struct Echo {
  int client = -1, server = -1;
  std::thread thread;
};

/// Connects a loopback pair and serves its server end with `serve(fd)` on a thread.
Echo startEcho(std::function<void(int fd)> serve) {
  Echo echo;
  std::tie(echo.client, echo.server) = loopbackPair();
  echo.thread = std::thread([serve = std::move(serve), fd = echo.server] { serve(fd); });
  return echo;
}

/// Shuts the client end down, which ends the serving thread, and closes both ends.
void stopEcho(Echo &echo) {
  shutdown(echo.client, SHUT_RDWR);
  echo.thread.join();
  close(echo.client);
  close(echo.server);
}

/// A bare cpp-httplib server on a free loopback port, serving on its own thread, and a
/// keep-alive client of it; TCP_NODELAY on both.
struct BareHttp {
  /// `configure` sets the server's limits and routes before it binds.
  explicit BareHttp(const std::function<void(httplib::Server &)> &configure)
      : port(bindServer(server, configure)), client("127.0.0.1", port) {
    serving = std::thread([this] { server.listen_after_bind(); });
    client.set_tcp_nodelay(true);
    client.set_keep_alive(true);
  }

  /// Binds `server`, configured by `configure`, to a free loopback port; returns the port.
  static int bindServer(httplib::Server &server,
                        const std::function<void(httplib::Server &)> &configure) {
    server.set_tcp_nodelay(true);
    configure(server);
    return server.bind_to_any_port("127.0.0.1");
  }

  /// Stops the client and the server, and joins the serving thread.
  void stop() {
    client.stop(); // Close the keep-alive connection, or the server waits it out.
    server.stop();
    serving.join();
  }

  httplib::Server server;
  int port;
  httplib::Client client;
  std::thread serving;
};

/// Times `n` calls of each of `paths` (after `block` untimed calls of each) in blocks of
/// `block` that take turns; the microseconds of each call, one vector per path.
std::vector<std::vector<double>>
interleavedBlocks(int n, int block, const std::vector<std::function<void()>> &paths) {
  std::vector<std::vector<double>> us(paths.size());
  for (size_t i = 0; i < paths.size(); ++i)
    measure(block, 0, paths[i], us[i]);
  for (int done = 0; done < n; done += block)
    for (size_t i = 0; i < paths.size(); ++i)
      measure(0, block, paths[i], us[i]);
  return us;
}

/// A noop launch of tests/kernels' shapes object `shapes` in `session`.
void launchNoop(Backend &backend, const std::string &session, const ObjectBlob &shapes) {
  check(backend.launch(session, shapes, "_catalyst_pyface_noop", {}, {}), "launching");
}

/// An executor of the latency section, with a session holding the shapes object.
struct Launcher {
  std::unique_ptr<ExecutorProcess> executor;
  std::unique_ptr<Backend> backend;
  std::string session;
};

/// Starts an executor with `flags`, connects to it with `options` and ships `shapes`.
Launcher startLauncher(const ObjectBlob &shapes, std::vector<std::string> flags,
                       BackendOptions options) {
  Launcher l{std::make_unique<ExecutorProcess>(executorConfig(std::move(flags))), nullptr, ""};
  l.backend = check(createHttpBackend(l.executor->address(), options), "connecting");
  l.session = check(l.backend->openSession(), "opening a session");
  check(l.backend->shipObject(l.session, shapes), "shipping");
  return l;
}

/// Prints the latency section's figures from the microseconds of its paths, in the order raw
/// TCP, bare httplib, launch, launch with --isolation none, launch by the default path.
void printLatency(const std::vector<std::vector<double>> &us) {
  Percentiles raw = percentiles(us[0]), bare = percentiles(us[1]), courier = percentiles(us[2]),
              local = percentiles(us[3]), channel = percentiles(us[4]);
  std::printf("  raw TCP ping-pong        p50 %7.1f us  p99 %7.1f us\n", raw.p50, raw.p99);
  std::printf("  bare httplib 64 B echo   p50 %7.1f us  p99 %7.1f us\n", bare.p50, bare.p99);
  std::printf("  courier noop launch      p50 %7.1f us  p99 %7.1f us  (HTTP)\n", courier.p50,
              courier.p99);
  std::printf("  the same, --isolation none p50 %5.1f us  p99 %7.1f us  (HTTP)\n", local.p50,
              local.p99);
  std::printf("  the same, default path   p50 %7.1f us  p99 %7.1f us  (same-host channel)\n",
              channel.p50, channel.p99);
  std::printf("  ratio launch/raw p50 %.2fx (target <= 2.0x), p99 %.2fx; launch/bare-httplib "
              "p50 %.2fx, --isolation none %.2fx, default path %.2fx\n",
              courier.p50 / raw.p50, courier.p99 / raw.p99, courier.p50 / bare.p50,
              local.p50 / bare.p50, channel.p50 / bare.p50);
}

/// Noop launch round trips, as deployed, in process and by the default path, against a raw
/// TCP ping-pong and a bare cpp-httplib echo.
void latency(int n) {
  std::printf("== noop launch round trip (keep-alive) vs raw TCP 64-byte ping-pong, %d each, "
              "interleaved in blocks of %d\n",
              n, std::min(n, 1000));
  Echo raw = startEcho([](int fd) {
    char buf[64];
    while (recvAll(fd, buf, sizeof(buf)) && sendAll(fd, buf, sizeof(buf))) {
    }
  });
  char buf[64] = {};
  auto rawOnce = [&, fd = raw.client] {
    sendAll(fd, buf, sizeof(buf));
    recvAll(fd, buf, sizeof(buf));
  };

  BareHttp bare([](httplib::Server &server) {
    server.set_keep_alive_max_count(1 << 30);
    server.Post("/echo", [](const httplib::Request &req, httplib::Response &res) {
      res.set_content(req.body, "application/octet-stream");
    });
  });
  std::string body(64, 'x');
  auto bareOnce = [&] {
    if (!bare.client.Post("/echo", body, "application/octet-stream"))
      die("bare httplib echo failed");
  };

  // The executor as deployed (each session's kernels in a sandboxed worker), and one that
  // runs them in its own process, which shows what the hop to the worker costs; both over
  // HTTP, and the deployed one by a client's default path on its host too (the same-host
  // channel).
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  Launcher isolated = startLauncher(shapes, {}, overHttp());
  Launcher inProcess = startLauncher(shapes, {"--isolation", "none"}, overHttp());
  Launcher sameHost = startLauncher(shapes, {}, {});
  auto noopOn = [&shapes](Launcher &l) {
    return [&shapes, &l] { launchNoop(*l.backend, l.session, shapes); };
  };

  // Blocks alternate the paths, so load from elsewhere on the machine falls on all of them
  // alike.
  int block = std::min(n, 1000);
  std::vector<std::vector<double>> us = interleavedBlocks(
      n, block, {rawOnce, bareOnce, noopOn(isolated), noopOn(inProcess), noopOn(sameHost)});
  if (sameHost.executor->metric("courier_shm_launches_total") < 2.0 * block)
    die("the default path's noop launches did not cross the same-host channel");

  stopEcho(raw);
  bare.stop();
  printLatency(us);
}

/// Serves POST /echo on `server` by streaming: a content reader into `received`, whose size
/// is the payload's, and a content provider back out of it.
void serveStreamedEcho(httplib::Server &server, std::vector<char> &received) {
  const size_t bytes = received.size();
  server.set_payload_max_length(bytes * 2);
  server.Post("/echo", [&received, bytes](const httplib::Request &, httplib::Response &res,
                                          const httplib::ContentReader &reader) {
    size_t at = 0;
    reader([&](const char *data, size_t size) {
      std::memcpy(received.data() + at, data, std::min(size, bytes - at));
      at += size;
      return true;
    });
    res.set_content_provider(bytes, "application/octet-stream",
                             [&received](size_t offset, size_t length, httplib::DataSink &sink) {
                               return sink.write(received.data() + offset, length);
                             });
  });
}

/// POSTs `input` to /echo through a content provider and receives the echo into `output`, of
/// the same size, through a content receiver.
void streamEcho(httplib::Client &client, const std::vector<char> &input,
                std::vector<char> &output) {
  const size_t bytes = output.size();
  httplib::Request req;
  req.method = "POST";
  req.path = "/echo";
  req.set_header("Content-Type", "application/octet-stream");
  req.content_length_ = bytes;
  req.content_provider_ = [&](size_t offset, size_t length, httplib::DataSink &sink) {
    return sink.write(input.data() + offset, length);
  };
  size_t at = 0;
  req.content_receiver = [&](const char *data, size_t size, uint64_t, uint64_t) {
    std::memcpy(output.data() + at, data, std::min(size, bytes - at));
    at += size;
    return true;
  };
  httplib::Response res;
  httplib::Error error;
  if (!client.send(req, res, error) || res.status != 200 || at != bytes)
    die("bare httplib transfer failed");
}

/// A session over HTTP holding the object of tests/kernels/scale.c.
struct ScaleSession {
  std::unique_ptr<Backend> backend;
  std::string session;
  ObjectBlob scale;
};

/// Connects to `executor` over HTTP and opens a session holding the scale object.
ScaleSession openScaleSession(const ExecutorProcess &executor) {
  ScaleSession s;
  s.backend = check(createHttpBackend(executor.address(), overHttp()), "connecting");
  s.session = check(s.backend->openSession(), "opening a session");
  s.scale = loadObject(COURIER_KERNEL_SCALE);
  check(s.backend->shipObject(s.session, s.scale), "shipping");
  return s;
}

/// The bandwidth section's seconds per round of each path, and the mean seconds of a launch
/// the executor spent inside the kernel.
struct BandwidthTimes {
  std::vector<double> raws, bares, couriers;
  double kernel = 0;
};

/// Prints the bandwidth section's medians, rates and ratios for `bytes` each way.
void printBandwidth(size_t bytes, const BandwidthTimes &times) {
  double raw = median(times.raws), bare = median(times.bares), courier = median(times.couriers);
  double kernel = times.kernel;
  auto rate = [&](double s) { return 2.0 * double(bytes) / s / 1e9; };
  std::printf("  raw loopback socket      %7.1f ms  %5.2f GB/s\n", raw * 1e3, rate(raw));
  std::printf("  bare httplib streamed    %7.1f ms  %5.2f GB/s\n", bare * 1e3, rate(bare));
  std::printf("  courier scale launch     %7.1f ms  %5.2f GB/s\n", courier * 1e3, rate(courier));
  std::printf("    of which in the kernel %7.1f ms (mean, from the executor's metrics)\n",
              kernel * 1e3);
  std::printf("  launch throughput = %.0f%% of bare httplib (target >= 90%%), %.0f%% of raw\n",
              100 * bare / courier, 100 * raw / courier);
  std::printf("  transport alone (launch minus kernel time) = %.0f%% of bare httplib\n",
              100 * bare / (courier - kernel));
}

/// `mib` MiB in and out by a scale launch against a raw loopback socket echo and a bare
/// cpp-httplib streamed echo.
void bandwidth(int mib, int reps) {
  const size_t bytes = size_t(mib) << 20;
  std::printf("== %d MiB in + %d MiB out, median of %d interleaved rounds\n", mib, mib, reps);
  std::vector<char> input(bytes, 1), output(bytes);

  // Raw: the client thread sends while the main thread receives the echo.
  Echo raw = startEcho([bytes](int fd) {
    std::vector<char> buf(bytes);
    while (recvAll(fd, buf.data(), bytes) && sendAll(fd, buf.data(), bytes)) {
    }
  });
  auto rawOnce = [&, fd = raw.client] {
    std::thread sender([&] { sendAll(fd, input.data(), bytes); });
    recvAll(fd, output.data(), bytes);
    sender.join();
  };

  // Bare cpp-httplib: content provider -> content reader into a pre-sized buffer, and back.
  std::vector<char> received(bytes);
  BareHttp bare([&](httplib::Server &server) { serveStreamedEcho(server, received); });
  auto bareOnce = [&] { streamEcho(bare.client, input, output); };

  // Courier: a launch of `scale` on a courier-executor process.
  ExecutorProcess executor = startExecutor();
  ScaleSession courier = openScaleSession(executor);
  int64_t n = static_cast<int64_t>(bytes / 8);
  TensorView view{input.data(), 8, {n}, {1}};
  auto courierOnce = [&] { launchScale(*courier.backend, courier.session, courier.scale, view); };

  // Rounds alternate the three paths, so load from elsewhere on the machine falls on all
  // of them alike.
  rawOnce();
  bareOnce();
  courierOnce();
  double kernelBefore = executor.metric("courier_launch_duration_seconds_sum");
  BandwidthTimes times;
  for (int i = 0; i < reps; ++i) {
    times.raws.push_back(secondsOf(rawOnce));
    times.bares.push_back(secondsOf(bareOnce));
    times.couriers.push_back(secondsOf(courierOnce));
  }
  // The executor's own account of time spent inside the kernel (allocating its result and
  // computing), which the bare transfers do not do.
  times.kernel =
      (executor.metric("courier_launch_duration_seconds_sum") - kernelBefore) / double(reps);

  stopEcho(raw);
  bare.stop();
  printBandwidth(bytes, times);
}

/// Serves `fd` as the shared-memory section's raw peer: each exchange starts with its length
/// (64 bytes for the ping-pong, the whole tensor for the bandwidth rounds), at most
/// `capacity`, and is echoed back.
void echoFramed(int fd, size_t capacity) {
  std::vector<char> buf(capacity);
  char header[8];
  while (recvAll(fd, header, sizeof(header))) {
    uint64_t length;
    std::memcpy(&length, header, sizeof(length));
    if (length > buf.size() || !recvAll(fd, buf.data(), length) || !sendAll(fd, buf.data(), length))
      break;
  }
}

/// The shared-memory section's executor, started with `args`, and its three clients, each
/// with a session holding the shapes object: through shared memory (its session holding the
/// scale object too), the same as a client of the first control page version, and over
/// HTTP; and the raw TCP echo they are measured against.
struct SharedPaths {
  explicit SharedPaths(const std::vector<std::string> &args)
      : executor(courier::testing::ExecutorConfig{0, "", args}) {
    BackendOptions sharedOptions, firstPageOptions, httpOptions;
    sharedOptions.sharedMemory = SharedMemory::On;
    // A client of the first control page version, which rings with a system call every time:
    // what the sleep flags of the newest one save.
    firstPageOptions.sharedMemory = SharedMemory::On;
    firstPageOptions.sharedMemoryPageVersion = 1;
    httpOptions.sharedMemory = SharedMemory::Off;
    backend = check(createHttpBackend(executor.address(), sharedOptions), "connecting");
    firstPage = check(createHttpBackend(executor.address(), firstPageOptions), "connecting");
    http = check(createHttpBackend(executor.address(), httpOptions), "connecting");
    session = check(backend->openSession(), "opening a session");
    firstPageSession = check(firstPage->openSession(), "opening a session");
    httpSession = check(http->openSession(), "opening a session");
    shapes = loadObject(COURIER_KERNEL_SHAPES);
    scale = loadObject(COURIER_KERNEL_SCALE);
    check(backend->shipObject(session, shapes), "shipping");
    check(backend->shipObject(session, scale), "shipping");
    check(firstPage->shipObject(firstPageSession, shapes), "shipping");
    check(http->shipObject(httpSession, shapes), "shipping");
  }

  ExecutorProcess executor;
  std::unique_ptr<Backend> backend, firstPage, http;
  std::string session, firstPageSession, httpSession;
  ObjectBlob shapes, scale;
  Echo raw;
};

/// The percentiles of the shared-memory section's noop round trips, in microseconds.
struct SharedNoops {
  Percentiles raw, shm, firstPage, http;
};

/// Times `n` noop round trips on each path, interleaved in blocks, and checks that those on
/// shared memory crossed it.
SharedNoops timeSharedNoops(SharedPaths &p, int n) {
  char ping[8 + 64] = {};
  uint64_t pingLength = 64;
  std::memcpy(ping, &pingLength, 8);
  auto rawOnce = [&, fd = p.raw.client] {
    sendAll(fd, ping, sizeof(ping));
    recvAll(fd, ping + 8, 64);
  };
  auto shmOnce = [&] { launchNoop(*p.backend, p.session, p.shapes); };
  auto firstPageOnce = [&] { launchNoop(*p.firstPage, p.firstPageSession, p.shapes); };
  auto httpOnce = [&] { launchNoop(*p.http, p.httpSession, p.shapes); };

  double launchesBefore = p.executor.metric("courier_shm_launches_total");
  int block = std::min(n, 1000);
  std::vector<std::vector<double>> us =
      interleavedBlocks(n, block, {rawOnce, shmOnce, firstPageOnce, httpOnce});
  if (p.executor.metric("courier_shm_launches_total") - launchesBefore <
      2.0 * (block + ((n + block - 1) / block) * block))
    die("the noop launches did not all cross shared memory");
  return {percentiles(us[0]), percentiles(us[1]), percentiles(us[2]), percentiles(us[3])};
}

/// The shared-memory section's bulk rounds: seconds of each, the mean seconds of a launch
/// the executor spent inside the kernel, and the launches that crossed shared memory.
struct SharedBulk {
  std::vector<double> rawTimes, shmTimes;
  double kernel = 0, overShm = 0;
};

/// Times `reps` rounds of `mib` MiB echoed over the raw socket, alternating with a scale
/// launch of as many through shared memory.
SharedBulk timeSharedBulk(SharedPaths &p, int mib, int reps) {
  const size_t bytes = size_t(mib) << 20;
  std::vector<char> input(bytes + 8, 1), output(bytes);
  uint64_t length = bytes;
  std::memcpy(input.data(), &length, 8);
  auto rawBulk = [&, fd = p.raw.client] {
    std::thread sender([&] { sendAll(fd, input.data(), input.size()); });
    recvAll(fd, output.data(), bytes);
    sender.join();
  };
  int64_t elements = static_cast<int64_t>(bytes / 8);
  TensorView view{input.data() + 8, 8, {elements}, {1}};
  auto shmBulk = [&] { launchScale(*p.backend, p.session, p.scale, view); };
  rawBulk();
  shmBulk();
  double kernelBefore = p.executor.metric("courier_launch_duration_seconds_sum");
  double launchesBefore = p.executor.metric("courier_shm_launches_total");
  SharedBulk bulk;
  for (int i = 0; i < reps; ++i) {
    bulk.rawTimes.push_back(secondsOf(rawBulk));
    bulk.shmTimes.push_back(secondsOf(shmBulk));
  }
  bulk.kernel =
      (p.executor.metric("courier_launch_duration_seconds_sum") - kernelBefore) / double(reps);
  bulk.overShm = p.executor.metric("courier_shm_launches_total") - launchesBefore;
  return bulk;
}

/// Prints the shared-memory section's figures and its ratios against raw TCP.
void printShared(const SharedNoops &noops, const SharedBulk &bulk, int mib) {
  const size_t bytes = size_t(mib) << 20;
  const Percentiles &raw = noops.raw, &shm = noops.shm, &http = noops.http;
  double rawBulkTime = median(bulk.rawTimes), shmBulkTime = median(bulk.shmTimes);
  auto rate = [&](double s) { return 2.0 * double(bytes) / s / 1e9; };
  std::printf("  raw TCP ping-pong        p50 %7.1f us  p99 %7.1f us\n", raw.p50, raw.p99);
  std::printf("  shm noop launch          p50 %7.1f us  p99 %7.1f us\n", shm.p50, shm.p99);
  std::printf("    page version 1 client  p50 %7.1f us  p99 %7.1f us (rings with a system call)\n",
              noops.firstPage.p50, noops.firstPage.p99);
  std::printf("  HTTP noop launch (unix)  p50 %7.1f us  p99 %7.1f us\n", http.p50, http.p99);
  std::printf("  raw TCP %d MiB echo      %7.1f ms  %5.2f GB/s\n", mib, rawBulkTime * 1e3,
              rate(rawBulkTime));
  std::printf("  shm scale launch         %7.1f ms  %5.2f GB/s\n", shmBulkTime * 1e3,
              rate(shmBulkTime));
  std::printf("    of which in the kernel %7.1f ms (mean, from the executor's metrics)\n",
              bulk.kernel * 1e3);
  std::printf("ratio shm-launch/raw-tcp p50 %.2fx (target <= 0.50x)\n", shm.p50 / raw.p50);
  std::printf("ratio shm-bandwidth/raw-tcp %.2fx (target >= 1.50x)\n", rawBulkTime / shmBulkTime);
}

/// The same-host channel against the socket it replaces: a noop launch through shared memory
/// against a raw loopback TCP 64-byte ping-pong, and a 64 MiB scale launch (64 MiB in, 64 MiB
/// out) against 64 MiB sent over loopback TCP and echoed back. The executor is a real
/// courier-executor process on a unix socket, sessions in sandboxed workers as deployed.
void shared(int n, int mib, int reps, bool isolated) {
  std::printf("== same-host shared memory: noop launch vs raw TCP 64-byte ping-pong, %d each, "
              "interleaved in blocks of %d; %d MiB in + out, median of %d rounds\n",
              n, std::min(n, 1000), mib, reps);
  std::vector<std::string> args = {"--quiet", "--listen", "unix:{dir}/executor.sock"};
  if (!isolated)
    args.insert(args.end(), {"--isolation", "none"});
  std::printf("  executor with --isolation %s\n", isolated ? "process" : "none");
  SharedPaths paths(args);
  paths.raw = startEcho([mib](int fd) { echoFramed(fd, size_t(mib) << 20); });
  SharedNoops noops = timeSharedNoops(paths, n);
  SharedBulk bulk = timeSharedBulk(paths, mib, reps);
  stopEcho(paths.raw);
  if (bulk.overShm != reps)
    die("the bandwidth launches did not all cross shared memory");
  printShared(noops, bulk, mib);
}

#ifdef COURIER_AARCH64_EXECUTOR
/// One executor of the emulation comparison, with a session holding its machine's objects.
struct EmulationSide {
  std::unique_ptr<ServerProcess> executor;
  std::unique_ptr<Backend> backend;
  std::string session;
  ObjectBlob shapes, scale;
};

EmulationSide startSide(const std::string &program, const std::string &name, const char *shapesPath,
                        const char *scalePath) {
  EmulationSide side;
  // --no-sandbox on both sides: qemu-user cannot load the seccomp filter, and the comparison
  // is of the machines, not of the filter.
  side.executor = std::make_unique<ServerProcess>(
      ServerSpec{program, name, 0, "", {"--quiet", "--no-sandbox"}});
  side.backend = check(createHttpBackend(side.executor->address(), overHttp()), "connecting");
  side.session = check(side.backend->openSession(), "opening a session");
  side.shapes = loadObject(shapesPath);
  side.scale = loadObject(scalePath);
  check(side.backend->shipObject(side.session, side.shapes), "shipping");
  check(side.backend->shipObject(side.session, side.scale), "shipping");
  return side;
}

/// The aarch64 executor under qemu-user against the native x86-64 one, in the same run: a
/// noop launch round trip and a 64 MiB scale launch (64 MiB in, 64 MiB out) on each, over
/// loopback TCP, each in a worker process as deployed.
void emulated(int n, int mib, int reps) {
  std::printf("== aarch64 executor under qemu-user vs the native one, both --no-sandbox: noop "
              "launch round trip, %d each, interleaved in blocks of %d; %d MiB in + %d MiB out, "
              "median of %d interleaved rounds\n",
              n, std::min(n, 200), mib, mib, reps);
  EmulationSide native = startSide(COURIER_EXECUTOR_PATH, "courier-executor", COURIER_KERNEL_SHAPES,
                                   COURIER_KERNEL_SCALE);
  EmulationSide arm = startSide(COURIER_AARCH64_EXECUTOR, "courier-executor-aarch64",
                                COURIER_KERNEL_SHAPES_AARCH64, COURIER_KERNEL_SCALE_AARCH64);
  auto noop = [](EmulationSide &side) {
    return [&side] {
      check(side.backend->launch(side.session, side.shapes, "_catalyst_pyface_noop", {}, {}),
            "launching");
    };
  };
  std::function<void()> nativeNoop = noop(native), armNoop = noop(arm);
  std::vector<double> nativeTimes, armTimes;
  int block = std::min(n, 200);
  measure(block, 0, nativeNoop, nativeTimes);
  measure(block, 0, armNoop, armTimes);
  for (int done = 0; done < n; done += block) {
    measure(0, block, nativeNoop, nativeTimes);
    measure(0, block, armNoop, armTimes);
  }
  Percentiles nativeLaunch = percentiles(nativeTimes), armLaunch = percentiles(armTimes);

  const size_t bytes = size_t(mib) << 20;
  std::vector<char> input(bytes, 1);
  int64_t elements = static_cast<int64_t>(bytes / 8);
  TensorView view{input.data(), 8, {elements}, {1}};
  auto scale = [&](EmulationSide &side) {
    launchScale(*side.backend, side.session, side.scale, view);
  };
  scale(native);
  scale(arm);
  auto kernelSum = [](EmulationSide &side) {
    return side.executor->metric("courier_launch_duration_seconds_sum");
  };
  double nativeKernelBefore = kernelSum(native), armKernelBefore = kernelSum(arm);
  std::vector<double> nativeBulk, armBulk;
  for (int i = 0; i < reps; ++i) {
    nativeBulk.push_back(secondsOf([&] { scale(native); }));
    armBulk.push_back(secondsOf([&] { scale(arm); }));
  }
  double nativeKernel = (kernelSum(native) - nativeKernelBefore) / double(reps);
  double armKernel = (kernelSum(arm) - armKernelBefore) / double(reps);

  double nativeBulkTime = median(nativeBulk), armBulkTime = median(armBulk);
  auto rate = [&](double s) { return 2.0 * double(bytes) / s / 1e9; };
  std::printf("  native noop launch       p50 %8.1f us  p99 %8.1f us\n", nativeLaunch.p50,
              nativeLaunch.p99);
  std::printf("  emulated noop launch     p50 %8.1f us  p99 %8.1f us\n", armLaunch.p50,
              armLaunch.p99);
  std::printf("  native %d MiB scale      %8.1f ms  %5.2f GB/s  (kernel %.1f ms)\n", mib,
              nativeBulkTime * 1e3, rate(nativeBulkTime), nativeKernel * 1e3);
  std::printf("  emulated %d MiB scale    %8.1f ms  %5.2f GB/s  (kernel %.1f ms)\n", mib,
              armBulkTime * 1e3, rate(armBulkTime), armKernel * 1e3);
  std::printf("  ratio emulated/native: noop launch p50 %.1fx, %d MiB launch %.1fx, its kernel "
              "%.1fx\n",
              armLaunch.p50 / nativeLaunch.p50, mib, armBulkTime / nativeBulkTime,
              armKernel / nativeKernel);
}
#endif

void noopFunction(void *, void *) {}

void local(int n) {
  std::printf("== local backend noop launch vs direct call, %d each\n", n);
  void (*volatile direct)(void *, void *) = noopFunction;
  std::vector<double> callTimes;
  measure(
      10000, n, [&] { direct(nullptr, nullptr); }, callTimes);
  Percentiles call = percentiles(std::move(callTimes));
  // Per-call timing is at the clock's resolution for a direct call: time a batch instead.
  auto start = Clock::now();
  for (int i = 0; i < n; ++i)
    direct(nullptr, nullptr);
  double directNs = std::chrono::duration<double, std::nano>(Clock::now() - start).count() / n;

  auto backend = check(courier::executor::createLocalBackend({}), "creating the local backend");
  std::string session = check(backend->openSession(), "opening a session");
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  check(backend->shipObject(session, shapes), "shipping");
  std::vector<double> launchTimes;
  measure(
      10000, n,
      [&] {
        check(backend->launch(session, shapes, "_catalyst_pyface_noop", {}, {}), "launching");
      },
      launchTimes);
  Percentiles launch = percentiles(std::move(launchTimes));
  start = Clock::now();
  for (int i = 0; i < n; ++i)
    check(backend->launch(session, shapes, "_catalyst_pyface_noop", {}, {}), "launching");
  double launchNs = std::chrono::duration<double, std::nano>(Clock::now() - start).count() / n;
  std::printf("  direct call              %8.1f ns/call (p50 of single timings %.3f us)\n",
              directNs, call.p50);
  std::printf("  local noop launch        %8.1f ns/call (p50 %.3f us, p99 %.3f us)\n", launchNs,
              launch.p50, launch.p99);
  std::printf("  overhead %.0f ns per launch\n", launchNs - directNs);
}

} // namespace

/// Noop-launch throughput and latency for 1 to 256 concurrent clients of one executor, each
/// a runtime HTTP backend of its own (keep-alive, as a host process's), sharing 16 sessions:
/// how throughput grows with clients, and whether any is starved. First closed loops (each
/// client launches again as soon as it is answered: throughput), then the same clients paced
/// at half the peak between them (latency at a load the executor carries).
void clients(bool smoke) {
  ClientsBenchmark benchmark;
  benchmark.calls = "launches";
  if (smoke) {
    benchmark.run.warmup = std::chrono::milliseconds(20);
    benchmark.run.window = std::chrono::milliseconds(100);
  }
  std::printf("== noop launches from N concurrent clients (each its own HTTP backend, 16 "
              "sessions)\n");
  ExecutorProcess executor = startExecutor();
  auto setup = check(createHttpBackend(executor.address(), overHttp()), "connecting");
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  std::vector<std::string> sessions;
  for (int i = 0; i < 16; ++i) {
    sessions.push_back(check(setup->openSession(), "opening a session"));
    check(setup->shipObject(sessions.back(), shapes), "shipping");
  }
  std::vector<std::unique_ptr<Backend>> backends;
  benchmark.connect = [&](int n) {
    backends.clear();
    for (int c = 0; c < n; ++c)
      backends.push_back(check(createHttpBackend(executor.address(), overHttp()), "connecting"));
    return [&](int c) {
      check(backends[c]->launch(sessions[c % sessions.size()], shapes, "_catalyst_pyface_noop", {},
                                {}),
            "launching");
    };
  };
  benchmark.serverCpuSeconds = [&] { return cpuSecondsOfTree(executor.processId()); };
  // The bytes the runtime's HTTP backend sends for the launch, for the connections two
  // threads drive.
  wire::LaunchRequest header;
  header.object = shapes.sha256;
  header.entry = "_catalyst_pyface_noop";
  std::string body = wire::encodeLaunchRequest(header) + "\n";
  benchmark.port = executor.port();
  benchmark.rawRequest = [&](int c) {
    const std::string &session = sessions[c % sessions.size()];
    return "POST /v1/sessions/" + session + "/launch HTTP/1.1\r\nHost: " + executor.address() +
           "\r\nContent-Type: " + wire::kFrameContentType + "\r\n" + wire::kSessionHeader + ": " +
           session + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  runClientsBenchmark(std::move(benchmark));
}

int main(int argc, char **argv) {
  std::signal(SIGPIPE, SIG_IGN);
  std::string which = argc > 1 ? argv[1] : "all";
  // "smoke" runs every section briefly, so ctest notices when the benchmark stops working.
  bool smoke = which == "smoke";
  if (which == "all" || which == "latency" || smoke)
    latency(smoke ? 200 : 20000);
  if (which == "all" || which == "bandwidth" || smoke)
    bandwidth(smoke ? 4 : 64, smoke ? 1 : 9);
  if (which == "all" || which == "local" || smoke)
    local(smoke ? 10000 : 1000000);
  if (which == "all" || which == "clients" || smoke)
    clients(smoke);
  if (which == "all" || which == "shm" || smoke)
    // "shm none": the executor runs kernels in its own process, for the channel's cost alone.
    shared(smoke ? 200 : 20000, smoke ? 4 : 64, smoke ? 1 : 9,
           !(argc > 2 && std::string(argv[2]) == "none"));
  // Not in "all" or "smoke": only a build with the aarch64 executor has it ("emulated-smoke"
  // is its own ctest).
  if (which == "emulated" || which == "emulated-smoke") {
#ifdef COURIER_AARCH64_EXECUTOR
    bool brief = which == "emulated-smoke";
    emulated(brief ? 50 : 2000, brief ? 4 : 64, brief ? 1 : 5);
#else
    die("this build has no aarch64 executor: scripts/install-deps.sh --aarch64 installs what "
        "it needs, then configure again");
#endif
  }
  return 0;
}
