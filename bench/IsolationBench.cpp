// What running kernels in worker processes costs: two courier-executor processes alive at
// once, one isolating sessions in sandboxed workers (the default) and one with
// `--isolation none`, measured in alternating rounds so load from elsewhere on the machine
// falls on both alike. Noop launch latency, 64 MiB launch throughput, session open with
// warm workers, and the resident set of the executor and its workers as launches add up.
// Prints figures and ratios against issue 8's targets (see docs/performance.md).
#include "bench/BenchSupport.h"
#include "tests/kernels/KernelPaths.h"
#include "tests/transport/ExecutorProcess.h"
#include "transport/Backend.h"
#include "transport/HttpBackend.h"
#include "transport/Wire.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <functional>
#include <iterator>
#include <linux/futex.h>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <sstream>
#include <string>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace courier::transport;
using courier::testing::ExecutorConfig;
using courier::testing::ExecutorProcess;
using Clock = std::chrono::steady_clock;
using courier::bench::check;
using courier::bench::die;
using courier::bench::loadObject;

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

/// The `q`-quantile (0..1) of `values`, nearest rank.
double quantile(std::vector<double> values, double q) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  size_t at = static_cast<size_t>(q * double(values.size() - 1) + 0.5);
  return values[std::min(at, values.size() - 1)];
}
double median(std::vector<double> values) { return quantile(std::move(values), 0.5); }

// ---- processes ----------------------------------------------------------------------------

struct ProcessInfo {
  pid_t parent = 0;
  uint64_t rssKiB = 0;
};

/// Every process's parent and VmRSS, from /proc/<pid>/status.
std::map<pid_t, ProcessInfo> scanProcesses() {
  std::map<pid_t, ProcessInfo> table;
  DIR *proc = opendir("/proc");
  if (!proc)
    die("cannot read /proc");
  while (dirent *entry = readdir(proc)) {
    char *end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || *end != '\0')
      continue;
    std::ifstream status(std::string("/proc/") + entry->d_name + "/status");
    ProcessInfo info;
    bool seen = false;
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("PPid:", 0) == 0) {
        info.parent = static_cast<pid_t>(std::atol(line.c_str() + 5));
        seen = true;
      } else if (line.rfind("VmRSS:", 0) == 0) {
        info.rssKiB = std::strtoull(line.c_str() + 6, nullptr, 10);
      }
    }
    if (seen) // A process that exited meanwhile has no status left.
      table[static_cast<pid_t>(pid)] = info;
  }
  closedir(proc);
  return table;
}

std::set<pid_t> childrenOf(pid_t parent) {
  std::set<pid_t> children;
  for (const auto &[pid, info] : scanProcesses())
    if (info.parent == parent)
      children.insert(pid);
  return children;
}

/// The pages only `pid` maps (Private_Clean + Private_Dirty), in KiB: unlike VmRSS it does
/// not count libLLVM once per worker, and unlike Pss it does not move with whatever else on
/// the machine maps the same libraries.
uint64_t privateKiB(pid_t pid) {
  std::ifstream rollup("/proc/" + std::to_string(pid) + "/smaps_rollup");
  uint64_t total = 0;
  for (std::string line; std::getline(rollup, line);)
    if (line.rfind("Private_", 0) == 0)
      total += std::strtoull(line.c_str() + line.find(':') + 1, nullptr, 10);
  return total;
}

struct TreeMemory {
  double rssMiB = 0;     ///< Sum of VmRSS over the process and its descendants.
  double privateMiB = 0; ///< The same sum of privately mapped pages.
  int processes = 0;
};

TreeMemory treeMemory(pid_t root) {
  std::map<pid_t, ProcessInfo> table = scanProcesses();
  TreeMemory total;
  std::vector<pid_t> pending = {root};
  while (!pending.empty()) {
    pid_t pid = pending.back();
    pending.pop_back();
    auto it = table.find(pid);
    if (it == table.end())
      continue;
    total.rssMiB += double(it->second.rssKiB) / 1024.0;
    total.privateMiB += double(privateKiB(pid)) / 1024.0;
    total.processes++;
    for (const auto &[child, info] : table)
      if (info.parent == pid)
        pending.push_back(child);
  }
  return total;
}

struct Usage {
  double cpuSeconds = 0; ///< User plus system time.
  double minorFaults = 0;
};

/// The CPU time and minor page faults of `root` and of each of its descendants so far, from
/// /proc/<pid>/stat.
std::map<pid_t, Usage> usageOfTree(pid_t root) {
  std::map<pid_t, ProcessInfo> table = scanProcesses();
  std::map<pid_t, Usage> usage;
  const double ticks = double(sysconf(_SC_CLK_TCK));
  std::vector<pid_t> pending = {root};
  while (!pending.empty()) {
    pid_t pid = pending.back();
    pending.pop_back();
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    size_t close = text.rfind(')');
    if (close == std::string::npos)
      continue;
    // Fields after the command's closing parenthesis start at field 3 (state); minflt is
    // field 10, utime and stime 14 and 15.
    std::vector<std::string> fields;
    std::istringstream rest(text.substr(close + 1));
    for (std::string field; rest >> field;)
      fields.push_back(field);
    if (fields.size() < 13)
      continue;
    usage[pid] = {(std::stod(fields[11]) + std::stod(fields[12])) / ticks, std::stod(fields[7])};
    for (const auto &[child, info] : table)
      if (info.parent == pid)
        pending.push_back(child);
  }
  return usage;
}

/// What `root` (first) and its descendants alive at both points (second) used in between.
std::pair<Usage, Usage> usageBetween(pid_t root, const std::map<pid_t, Usage> &before,
                                     const std::map<pid_t, Usage> &after) {
  Usage self, children;
  for (const auto &[pid, now] : after) {
    auto then = before.find(pid);
    if (then == before.end())
      continue;
    Usage &into = pid == root ? self : children;
    into.cpuSeconds += now.cpuSeconds - then->second.cpuSeconds;
    into.minorFaults += now.minorFaults - then->second.minorFaults;
  }
  return {self, children};
}

/// A courier-executor process on a free loopback port, with its pid (for /proc) and an
/// HTTP backend (keep-alive, TCP_NODELAY) connected to it.
class Executor {
public:
  Executor(const char *name, std::vector<std::string> args) : name(name) {
    std::set<pid_t> before = childrenOf(getpid());
    args.insert(args.begin(), "--quiet");
    process = std::make_unique<ExecutorProcess>(ExecutorConfig{0, "", std::move(args)});
    for (pid_t child : childrenOf(getpid()))
      if (!before.count(child))
        processId = child;
    if (processId <= 0)
      die(std::string("cannot find the pid of the ") + name + " executor");
    // HTTP, whose hop this benchmark measures: on loopback the default takes the same-host
    // channel.
    BackendOptions options;
    options.sharedMemory = SharedMemory::Off;
    backend = check(createHttpBackend(process->address(), options), "connecting");
    health = process->client();
  }

  /// The warm worker count /v1/health reports, or -1 without isolation.
  int warmWorkers() {
    httplib::Result res = health->Get("/v1/health");
    if (!res || res->status != 200)
      die(std::string("health of the ") + name + " executor failed");
    llvm::Expected<llvm::json::Value> body = llvm::json::parse(res->body);
    if (!body)
      die("health: " + llvm::toString(body.takeError()));
    const llvm::json::Object *workers = body->getAsObject()->getObject("workers");
    if (!workers)
      return -1;
    return static_cast<int>(workers->getInteger("warm").value_or(-1));
  }

  /// Polls health until the pool holds `warm` workers again (it refills on its own thread).
  void awaitWarm(int warm) {
    auto until = Clock::now() + std::chrono::seconds(20);
    for (int now = warmWorkers(); now >= 0 && now < warm; now = warmWorkers()) {
      if (Clock::now() > until)
        die(std::string("the ") + name + " executor's worker pool did not refill");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  const char *name;
  std::unique_ptr<ExecutorProcess> process;
  pid_t processId = -1;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<httplib::Client> health;
};

/// Both executors, alive at once for the whole run.
struct Pair {
  Executor isolated{"isolated", {}};
  Executor none{"none", {"--isolation", "none"}};
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
};

constexpr int kWarmWorkers = 2; // courier-executor's default --warm-workers.

/// Runs `body(executor, round)` for both executors each round, the order swapping every
/// round, so neither always goes first after the other's work.
void alternate(Pair &pair, int rounds, const std::function<void(Executor &, int)> &body,
               int firstRound = 0) {
  for (int round = firstRound; round < firstRound + rounds; ++round) {
    Executor &first = round % 2 ? pair.none : pair.isolated;
    Executor &second = round % 2 ? pair.isolated : pair.none;
    body(first, round);
    body(second, round);
  }
}

// ---- floors under the worker's share of a launch ------------------------------------------

/// The two words a futex ping-pong rings through a shared mapping.
struct PingPong {
  std::atomic<uint32_t> request{0}, reply{0};
};

/// Sleeps in FUTEX_WAIT while `word` holds `value`.
void futexWait(std::atomic<uint32_t> &word, uint32_t value) {
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(&word), FUTEX_WAIT, value, nullptr, nullptr, 0);
}

/// Wakes one thread sleeping in FUTEX_WAIT on `word`.
void futexWake(std::atomic<uint32_t> &word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(&word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

/// Two child processes that echo 64-byte round trips, and the p50 of each block of
/// `perRound` timed against them: a unix SEQPACKET socketpair (the executor's channel to its
/// workers), and a futex ping-pong through a shared mapping, each side sleeping in
/// FUTEX_WAIT (the shared-memory doorbell the channel could become).
struct Floors {
  int perRound = 0;
  int ends[2] = {-1, -1};
  pid_t echo = -1;
  PingPong *bell = nullptr;
  pid_t bellEcho = -1;
  uint32_t rings = 0;
  std::vector<double> channelP50s, futexP50s;
};

/// Opens the socketpair and forks the child that echoes each packet on its far end.
void startChannelEcho(Floors &floors) {
  int *ends = floors.ends;
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) != 0)
    die("socketpair");
  floors.echo = fork();
  if (floors.echo == 0) {
    close(ends[0]);
    char buf[64];
    while (recv(ends[1], buf, sizeof(buf), 0) > 0 && send(ends[1], buf, sizeof(buf), 0) > 0) {
    }
    _exit(0);
  }
  close(ends[1]);
}

/// Times a block of round trips over the socketpair and records its p50.
void channelBlock(Floors &floors) {
  std::vector<double> us;
  char buf[64] = {};
  for (int i = 0; i < floors.perRound; ++i) {
    auto start = Clock::now();
    if (send(floors.ends[0], buf, sizeof(buf), 0) != sizeof(buf) ||
        recv(floors.ends[0], buf, sizeof(buf), 0) != sizeof(buf))
      die("channel round trip");
    us.push_back(seconds(Clock::now() - start) * 1e6);
  }
  floors.channelP50s.push_back(quantile(us, 0.5));
}

/// Maps the shared doorbell and forks the child that answers each of its rings.
void startFutexEcho(Floors &floors) {
  void *page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED)
    die("mmap");
  PingPong *bell = floors.bell = new (page) PingPong;
  floors.bellEcho = fork();
  if (floors.bellEcho == 0) {
    close(floors.ends[0]); // Else the socket's echo never sees its end.
    uint32_t seen = 0;
    while (true) {
      uint32_t now;
      while ((now = bell->request.load()) == seen)
        futexWait(bell->request, seen);
      seen = now;
      if (seen == UINT32_MAX)
        _exit(0);
      bell->reply.store(seen);
      futexWake(bell->reply);
    }
  }
}

/// Times a block of futex round trips through the doorbell and records its p50.
void futexBlock(Floors &floors) {
  PingPong *bell = floors.bell;
  std::vector<double> us;
  for (int i = 0; i < floors.perRound; ++i) {
    auto start = Clock::now();
    uint32_t ring = ++floors.rings;
    bell->request.store(ring);
    futexWake(bell->request);
    uint32_t answered;
    while ((answered = bell->reply.load()) != ring)
      futexWait(bell->reply, answered);
    us.push_back(seconds(Clock::now() - start) * 1e6);
  }
  floors.futexP50s.push_back(quantile(us, 0.5));
}

/// Starts both echoes, the socket's warmed by one block that is not recorded.
void startFloors(Floors &floors, int perRound) {
  floors.perRound = perRound;
  startChannelEcho(floors);
  channelBlock(floors);
  floors.channelP50s.clear();
  startFutexEcho(floors);
}

/// Ends both echo processes and unmaps the doorbell.
void stopFloors(Floors &floors) {
  close(floors.ends[0]);
  waitpid(floors.echo, nullptr, 0);
  floors.bell->request.store(UINT32_MAX);
  futexWake(floors.bell->request);
  waitpid(floors.bellEcho, nullptr, 0);
  munmap(floors.bell, 4096);
}

// ---- sections -----------------------------------------------------------------------------

/// The executor metric summing the time spent running launches.
const char *const kLaunchSumMetric = "courier_launch_duration_seconds_sum";

/// The noop latency section's sessions and figures, per executor.
struct NoopLatency {
  NoopLatency(Pair &pair, int rounds, int perRound)
      : pair(pair), rounds(rounds), perRound(perRound) {}

  Pair &pair;
  int rounds, perRound;
  std::map<const Executor *, std::string> sessions;
  /// Seconds per launch in the executor's metrics (minus the sum before, until reported).
  std::map<const Executor *, double> inExecutor;
  std::map<const Executor *, std::vector<double>> p50s, p90s;
  std::map<const Executor *, double> meanUs;
};

/// One noop launch on `e`, in its session.
void launchNoop(NoopLatency &run, Executor &e) {
  check(e.backend->launch(run.sessions[&e], run.pair.shapes, "_catalyst_pyface_noop", {}, {}),
        "launching noop");
}

/// Opens a session holding the shapes object on each executor and warms it up untimed.
void openNoopSessions(NoopLatency &run) {
  for (Executor *e : {&run.pair.isolated, &run.pair.none}) {
    run.sessions[e] = check(e->backend->openSession(), "opening a session");
    check(e->backend->shipObject(run.sessions[e], run.pair.shapes), "shipping");
  }
  for (Executor *e : {&run.pair.isolated, &run.pair.none})
    for (int i = 0; i < std::min(run.perRound, 1000); ++i)
      launchNoop(run, *e);
}

/// Times the rounds of noop launches, alternating, with a block of each floor after every
/// isolated block.
void timeNoopRounds(NoopLatency &run, Floors &floors) {
  const int rounds = run.rounds, perRound = run.perRound;
  alternate(run.pair, rounds, [&](Executor &e, int) {
    std::vector<double> us;
    us.reserve(perRound);
    for (int i = 0; i < perRound; ++i) {
      auto start = Clock::now();
      launchNoop(run, e);
      us.push_back(seconds(Clock::now() - start) * 1e6);
      run.meanUs[&e] += us.back() / (rounds * perRound);
    }
    run.p50s[&e].push_back(quantile(us, 0.5));
    run.p90s[&e].push_back(quantile(us, 0.9));
    if (&e == &run.pair.isolated) {
      channelBlock(floors);
      futexBlock(floors);
    }
  });
}

/// Prints each executor's latencies (closing its session), the floors, and the ratios.
void reportNoopLatency(NoopLatency &run, const Floors &floors) {
  Pair &pair = run.pair;
  std::vector<double> ratio50, ratio90;
  for (int r = 0; r < run.rounds; ++r) {
    ratio50.push_back(run.p50s[&pair.isolated][r] / run.p50s[&pair.none][r]);
    ratio90.push_back(run.p90s[&pair.isolated][r] / run.p90s[&pair.none][r]);
  }
  for (Executor *e : {&pair.isolated, &pair.none}) {
    double &inExecutor = run.inExecutor[e];
    inExecutor = (inExecutor + e->process->metric(kLaunchSumMetric)) / (run.rounds * run.perRound);
    const std::vector<double> &p50s = run.p50s[e];
    std::printf("  %-9s p50 %6.1f us  p90 %6.1f us  (medians over rounds; round p50s %.1f-%.1f); "
                "mean %.1f us, of which running the launch %.1f us (executor metrics)\n",
                e->name, median(p50s), median(run.p90s[e]),
                *std::min_element(p50s.begin(), p50s.end()),
                *std::max_element(p50s.begin(), p50s.end()), run.meanUs[e], inExecutor * 1e6);
    check(e->backend->closeSession(run.sessions[e]), "closing");
  }
  std::printf("  floor: 64-byte SEQPACKET round trip to a child process p50 %.1f us (median over "
              "rounds)\n",
              median(floors.channelP50s));
  std::printf("  floor: futex ping-pong through shared memory, both sides sleeping, p50 %.1f us "
              "(median over rounds)\n",
              median(floors.futexP50s));
  std::printf("  ratio isolated/none: p50 %.2fx (target <= 1.10x), p90 %.2fx; median of per-round "
              "ratios (p50 ratios %.2f-%.2f)\n",
              median(ratio50), median(ratio90), *std::min_element(ratio50.begin(), ratio50.end()),
              *std::max_element(ratio50.begin(), ratio50.end()));
}

/// Noop launch latency on both executors, alternating, beside the floors under the worker's
/// share of it.
void latency(Pair &pair, int rounds, int perRound) {
  std::printf("== noop launch (keep-alive), %d rounds x %d launches per executor, alternating\n",
              rounds, perRound);
  NoopLatency run(pair, rounds, perRound);
  openNoopSessions(run);
  for (Executor *e : {&pair.isolated, &pair.none})
    run.inExecutor[e] = -e->process->metric(kLaunchSumMetric);
  // The floors are measured after each isolated block.
  Floors floors;
  startFloors(floors, perRound);
  timeNoopRounds(run, floors);
  stopFloors(floors);
  reportNoopLatency(run, floors);
}

/// What filling one large buffer costs the side that receives into it, measured in this
/// process: a fresh memfd mapping per launch (4 KiB pages, one fault each: shmem gets no
/// transparent huge pages here), the same prefaulted with MAP_POPULATE, a mapping kept from
/// the previous launch, and the huge-page buffer the in-process path receives into.
void sharedMemoryFloors(size_t bytes, int rounds) {
  auto fillFresh = [&](int flags) {
    int fd = memfd_create("courier-bench", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0)
      die("memfd_create");
    void *base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | flags, fd, 0);
    if (base == MAP_FAILED)
      die("mmap");
    std::memset(base, 1, bytes);
    munmap(base, bytes);
    close(fd);
  };
  int kept = memfd_create("courier-bench", MFD_CLOEXEC);
  if (kept < 0 || ftruncate(kept, static_cast<off_t>(bytes)) != 0)
    die("memfd_create");
  void *keptBase = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, kept, 0);
  if (keptBase == MAP_FAILED)
    die("mmap");
  std::memset(keptBase, 0, bytes);
  std::vector<std::pair<const char *, std::function<void()>>> paths = {
      {"fresh memfd, faulted page by page", [&] { fillFresh(0); }},
      {"fresh memfd, MAP_POPULATE", [&] { fillFresh(MAP_POPULATE); }},
      {"memfd mapping kept from before", [&] { std::memset(keptBase, 1, bytes); }},
      {"fresh huge-page malloc buffer",
       [&] {
         void *buffer = wire::allocateTensorBuffer(bytes);
         std::memset(buffer, 1, bytes);
         // Keeps the compiler from dropping a fill nothing reads.
         asm volatile("" : : "r"(buffer) : "memory");
         std::free(buffer);
       }},
  };
  std::vector<std::vector<double>> ms(paths.size());
  for (int round = 0; round < rounds; ++round)
    for (size_t i = 0; i < paths.size(); ++i) {
      auto start = Clock::now();
      paths[i].second();
      ms[i].push_back(seconds(Clock::now() - start) * 1e3);
    }
  munmap(keptBase, bytes);
  close(kept);
  std::printf("  floors in this process, writing %zu MiB once (median of %d):\n", bytes >> 20,
              rounds);
  for (size_t i = 0; i < paths.size(); ++i)
    std::printf("    %-36s %6.1f ms\n", paths[i].first, median(ms[i]));
}

void bandwidth(Pair &pair, int mib, int rounds) {
  const size_t bytes = size_t(mib) << 20;
  const int64_t n = static_cast<int64_t>(bytes / sizeof(double));
  std::printf("== %d MiB in + %d MiB out (scale), %d rounds, alternating\n", mib, mib, rounds);
  std::vector<double> input(static_cast<size_t>(n), 1.5);
  TensorView view{input.data(), 8, {n}, {1}};
  std::map<const Executor *, std::string> sessions;
  for (Executor *e : {&pair.isolated, &pair.none}) {
    sessions[e] = check(e->backend->openSession(), "opening a session");
    check(e->backend->shipObject(sessions[e], pair.scale), "shipping");
  }
  auto once = [&](Executor &e) {
    auto results = check(
        e.backend->launch(sessions[&e], pair.scale, "_catalyst_pyface_scale", {view}, {{1, 8}}),
        "launching scale");
    const double *out = static_cast<const double *>(results[0].data);
    if (results[0].sizes[0] != n || out[0] != 3.0 || out[n - 1] != 3.0)
      die("scale returned the wrong result");
  };
  for (Executor *e : {&pair.isolated, &pair.none})
    once(*e);

  const std::string kernelMetric = "courier_launch_duration_seconds_sum";
  std::map<const Executor *, double> inExecutor;
  std::map<const Executor *, std::map<pid_t, Usage>> usageBefore;
  for (Executor *e : {&pair.isolated, &pair.none}) {
    inExecutor[e] = -e->process->metric(kernelMetric);
    usageBefore[e] = usageOfTree(e->processId);
  }
  std::map<const Executor *, std::vector<double>> times;
  alternate(pair, rounds, [&](Executor &e, int) {
    auto start = Clock::now();
    once(e);
    times[&e].push_back(seconds(Clock::now() - start));
  });
  std::vector<double> ratios;
  for (int r = 0; r < rounds; ++r)
    ratios.push_back(times[&pair.none][r] / times[&pair.isolated][r]);
  for (Executor *e : {&pair.isolated, &pair.none}) {
    inExecutor[e] = (inExecutor[e] + e->process->metric(kernelMetric)) / rounds;
    double t = median(times[e]);
    std::printf("  %-9s %7.1f ms  %5.2f GB/s  (of which running the launch: %.1f ms, mean, "
                "executor metrics)\n",
                e->name, t * 1e3, 2.0 * double(bytes) / t / 1e9, inExecutor[e] * 1e3);
    auto [self, workers] = usageBetween(e->processId, usageBefore[e], usageOfTree(e->processId));
    std::printf("            per launch: executor %.1f ms CPU, %.0f minor faults; workers %.1f ms "
                "CPU, %.0f minor faults\n",
                self.cpuSeconds * 1e3 / rounds, self.minorFaults / rounds,
                workers.cpuSeconds * 1e3 / rounds, workers.minorFaults / rounds);
    check(e->backend->closeSession(sessions[e]), "closing");
  }
  std::printf("  throughput isolated/none %.2f (target >= 0.90); median of per-round ratios "
              "(%.2f-%.2f)\n",
              median(ratios), *std::min_element(ratios.begin(), ratios.end()),
              *std::max_element(ratios.begin(), ratios.end()));
  sharedMemoryFloors(bytes, rounds);
  std::printf("  (\"running the launch\" is the kernel without isolation; with it, the round trip "
              "to the worker: kernel plus result copy into shared memory)\n");
}

void sessionOpen(Pair &pair, int opens, int burst) {
  std::printf("== session open (POST /v1/sessions) with warm workers, %d per executor, "
              "alternating; close timed too\n",
              opens);
  std::map<const Executor *, std::vector<double>> openMs, closeMs;
  alternate(pair, opens, [&](Executor &e, int) {
    e.awaitWarm(kWarmWorkers);
    auto start = Clock::now();
    std::string session = check(e.backend->openSession(), "opening a session");
    openMs[&e].push_back(seconds(Clock::now() - start) * 1e3);
    start = Clock::now();
    check(e.backend->closeSession(session), "closing");
    closeMs[&e].push_back(seconds(Clock::now() - start) * 1e3);
  });
  for (Executor *e : {&pair.isolated, &pair.none})
    std::printf("  %-9s open p50 %6.3f ms  p90 %6.3f ms   close p50 %6.3f ms\n", e->name,
                median(openMs[e]), quantile(openMs[e], 0.9), median(closeMs[e]));
  std::printf("  isolated open p50 %.3f ms (target <= 5 ms)\n", median(openMs[&pair.isolated]));

  // Past the warm workers an open waits for a process start: what a burst of opens sees.
  Executor &e = pair.isolated;
  e.awaitWarm(kWarmWorkers);
  std::vector<double> ms;
  std::vector<std::string> sessions;
  for (int i = 0; i < burst; ++i) {
    auto start = Clock::now();
    sessions.push_back(check(e.backend->openSession(), "opening a session"));
    ms.push_back(seconds(Clock::now() - start) * 1e3);
  }
  for (const std::string &session : sessions)
    check(e.backend->closeSession(session), "closing");
  std::vector<double> cold(ms.begin() + std::min<int>(kWarmWorkers, burst), ms.end());
  std::printf("  isolated, %d opens back to back (pool of %d): first %d %.3f/%.3f ms, the rest "
              "p50 %.1f ms (a worker start each)\n",
              burst, kWarmWorkers, kWarmWorkers, ms[0], burst > 1 ? ms[1] : 0.0, median(cold));
  e.awaitWarm(kWarmWorkers);
}

void residentSet(Pair &pair, int sessionsPer, int early, int late) {
  std::printf("== resident set (sum of VmRSS, executor + descendants) after %d and after %d "
              "launches over %d sessions\n",
              early, late, sessionsPer);
  // Mostly noops; every 10th a small scale (inline payloads) and every 100th one whose
  // input and result travel through shared memory.
  std::vector<double> small(128, 1.0), large(16384, 1.0); // 1 KiB, 128 KiB
  TensorView smallView{small.data(), 8, {int64_t(small.size())}, {1}};
  TensorView largeView{large.data(), 8, {int64_t(large.size())}, {1}};
  std::map<const Executor *, std::vector<std::string>> sessions;
  std::map<const Executor *, int> done;
  for (Executor *e : {&pair.isolated, &pair.none})
    for (int s = 0; s < sessionsPer; ++s) {
      sessions[e].push_back(check(e->backend->openSession(), "opening a session"));
      check(e->backend->shipObject(sessions[e].back(), pair.shapes), "shipping");
      check(e->backend->shipObject(sessions[e].back(), pair.scale), "shipping");
    }
  auto runTo = [&](Executor &e, int count) {
    for (; done[&e] < count; ++done[&e]) {
      int i = done[&e];
      const std::string &session = sessions[&e][static_cast<size_t>(i % sessionsPer)];
      if (i % 100 == 99) {
        auto r = check(
            e.backend->launch(session, pair.scale, "_catalyst_pyface_scale", {largeView}, {{1, 8}}),
            "launching scale");
        if (r[0].sizes[0] != int64_t(large.size()))
          die("scale returned the wrong size");
      } else if (i % 10 == 9) {
        check(
            e.backend->launch(session, pair.scale, "_catalyst_pyface_scale", {smallView}, {{1, 8}}),
            "launching scale");
      } else {
        check(e.backend->launch(session, pair.shapes, "_catalyst_pyface_noop", {}, {}),
              "launching noop");
      }
    }
  };
  std::map<const Executor *, TreeMemory> before, after;
  std::map<const Executor *, double> lateSeconds;
  for (Executor *e : {&pair.isolated, &pair.none}) {
    runTo(*e, early);
    e->awaitWarm(kWarmWorkers);
    before[e] = treeMemory(e->processId);
  }
  // The long stretch alternates in blocks of 1000 launches.
  for (int at = early, block = 0; at < late; ++block) {
    at = std::min(late, at + 1000);
    alternate(
        pair, 1,
        [&](Executor &e, int) {
          auto start = Clock::now();
          runTo(e, at);
          lateSeconds[&e] += seconds(Clock::now() - start);
        },
        block);
  }
  for (Executor *e : {&pair.isolated, &pair.none}) {
    e->awaitWarm(kWarmWorkers);
    after[e] = treeMemory(e->processId);
    auto growth = [](double from, double to) { return 100.0 * (to / from - 1.0); };
    std::printf("  %-9s RSS %7.1f -> %7.1f MiB (%+.2f%%), private %6.1f -> %6.1f MiB (%+.2f%%), "
                "%d -> %d processes  [%.1f s for the last %d launches]\n",
                e->name, before[e].rssMiB, after[e].rssMiB,
                growth(before[e].rssMiB, after[e].rssMiB), before[e].privateMiB,
                after[e].privateMiB, growth(before[e].privateMiB, after[e].privateMiB),
                before[e].processes, after[e].processes, lateSeconds[e], late - early);
    for (const std::string &session : sessions[e])
      check(e->backend->closeSession(session), "closing");
  }
  std::printf("  isolated growth %+.2f%% (target within 5%%)\n",
              100.0 * (after[&pair.isolated].rssMiB / before[&pair.isolated].rssMiB - 1.0));
}

} // namespace

int main(int argc, char **argv) {
  std::signal(SIGPIPE, SIG_IGN);
  std::string which = argc > 1 ? argv[1] : "all";
  // --quick runs every section with small counts, so ctest notices when it stops working.
  bool quick = which == "--quick";
  if (!quick && !llvm::is_contained({"all", "latency", "bandwidth", "open", "rss"}, which)) {
    std::fprintf(stderr, "usage: courier-isolation-bench [--quick | all | latency | bandwidth "
                         "| open | rss]\n");
    return 2;
  }
  auto wants = [&](const char *section) { return quick || which == "all" || which == section; };
  Pair pair;
  std::printf("isolated executor pid %d, none executor pid %d\n", pair.isolated.processId,
              pair.none.processId);
  pair.isolated.awaitWarm(kWarmWorkers);
  if (wants("latency"))
    latency(pair, quick ? 2 : 20, quick ? 200 : 2000);
  if (wants("bandwidth"))
    bandwidth(pair, quick ? 4 : 64, quick ? 2 : 11);
  if (wants("open"))
    sessionOpen(pair, quick ? 4 : 40, quick ? 3 : 6);
  if (wants("rss"))
    residentSet(pair, 10, quick ? 100 : 1000, quick ? 2000 : 100000);
  return 0;
}
