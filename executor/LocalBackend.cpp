// The in-process executor: a Backend whose sessions are in-process kernel hosts
// (executor/InProcessHost.cpp), so a launch is a direct call into the kernel on the calling
// thread, reading the caller's inputs in place and handing over the kernel's result buffers
// without a copy. It keeps what a program's own sessions need and nothing a server does: no
// object store (every launch brings its object, which its session loads once), no deadlines
// (nothing can end a kernel in this process), no idle expiry (its caller closes its sessions).
#include "executor/LocalBackend.h"

#include "executor/AsyncLaunches.h"
#include "executor/CoreMetrics.h"
#include "executor/ExecutorCore.h"
#include "executor/HostCpu.h"
#include "executor/ObjectHost.h"
#include "executor/ResultBlocks.h"
#include "executor/SessionObjects.h"
#include "transport/ErrorCode.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ThreadPool.h"

#include <atomic>
#include <shared_mutex>
#include <unordered_map>

using namespace llvm;

namespace courier::executor {

using transport::Backend;
using transport::BackendOptions;
using transport::ErrorCode;
using transport::Health;
using transport::withContext;

namespace {

/// What an await waits until: nothing can end a kernel in this process, so this is as good as
/// never (and, unlike time_point::max(), the clock arithmetic of a timed wait on it is exact).
Clock::time_point forever() { return Clock::now() + std::chrono::hours(24 * 365 * 10); }

/// A session: its host, the objects it has loaded and its async launches.
struct LocalSession {
  explicit LocalSession(std::string id, std::shared_ptr<KernelHost> host)
      : host(std::move(host)), attached(id), launches(std::move(id)) {}
  std::shared_ptr<KernelHost> host;
  /// Closed when the session leaves the table: a request that found it before then loads
  /// and starts nothing more on it.
  SessionObjects attached;
  AsyncLaunches launches;
};

class LocalBackend final : public Backend {
public:
  // No store to load an object again from (a host here never loses what it loaded), and
  // never stopping.
  explicit LocalBackend(std::shared_ptr<PluginSet> plugins)
      : asyncPool(llvm::hardware_concurrency(kAsyncThreads)), services{options, std::move(plugins),
                                                                       metrics, asyncPool,
                                                                       noStore, neverStopping} {}

  /// Async launches still queued or running finish first: they count into `metrics`.
  ~LocalBackend() override { asyncPool.wait(); }

  Error start() {
    Expected<std::unique_ptr<HostFactory>> made = makeInProcessHosts(services);
    if (!made)
      return made.takeError();
    hosts = std::move(*made);
    return Error::success();
  }

  const std::string &address() const override { return name; }

  Expected<Health> health() override {
    HealthReport report = describeThisExecutor();
    Health health;
    health.version = report.version;
    health.triple = report.triple;
    health.cpu = report.cpu;
    health.features = std::move(report.features);
    return health;
  }

  Expected<std::string> openSession() override {
    std::string id = formatv("local-{0}", nextSession++).str();
    Expected<std::shared_ptr<KernelHost>> host = hosts->open(id);
    if (!host)
      return withContext("local: opening a session", host.takeError());
    auto session = std::make_shared<LocalSession>(id, std::move(*host));
    std::unique_lock<std::shared_mutex> lock(sessionsMutex);
    sessions.emplace(id, std::move(session));
    return id;
  }

  Error closeSession(StringRef id) override {
    std::shared_ptr<LocalSession> session;
    {
      std::unique_lock<std::shared_mutex> lock(sessionsMutex);
      auto it = sessions.find(id.str());
      if (it == sessions.end())
        return withContext(formatv("local: closing session '{0}'", id), unknownSession(id));
      session = std::move(it->second);
      sessions.erase(it);
    }
    session->attached.close();
    // Async launches still running keep its code until they return (InProcessHost).
    session->host->close();
    return Error::success();
  }

  Error shipObject(StringRef id, const ObjectBlob &object) override {
    Expected<std::shared_ptr<LocalSession>> session = find(id, "shipping an object");
    if (!session)
      return session.takeError();
    return withContext(formatv("local: shipping an object to session '{0}'", id),
                       ship(**session, object));
  }

  Error releaseObject(StringRef id, StringRef sha256) override {
    Expected<std::shared_ptr<LocalSession>> session = find(id, "releasing an object");
    if (!session)
      return session.takeError();
    LocalSession &s = **session;
    // Releasing what the session does not hold is no error.
    s.attached.detach(sha256, [&] { s.host->detach(sha256); });
    return Error::success();
  }

  Expected<std::vector<OwnedTensor>> launch(StringRef id, const ObjectBlob &object, StringRef entry,
                                            ArrayRef<TensorView> inputs,
                                            ArrayRef<ResultSpec> results) override {
    Expected<std::shared_ptr<LocalSession>> session = find(id, "launching");
    if (!session)
      return session.takeError();
    // An object already loaded costs one lookup; one never shipped is shipped now.
    if (Error error = ship(**session, object))
      return withContext(formatv("local: launching '{0}'", entry), std::move(error));
    // Not timed: nothing shows this backend's metrics.
    RunningLaunch running(metrics, /*timed=*/false);
    Expected<LaunchResults> launched = (*session)->host->launch(
        LaunchCall{object.sha256, entry, /*area=*/nullptr, inputs, results, kNoDeadline}, running);
    if (!launched)
      return withContext(formatv("local: launching '{0}'", entry), launched.takeError());
    // In process the results are the kernel's own buffers: handed over as they are.
    return std::move(*launched->owned);
  }

  Expected<uint64_t> launchAsync(StringRef id, const ObjectBlob &object, StringRef entry) override {
    Expected<std::shared_ptr<LocalSession>> session = find(id, "starting an async launch");
    if (!session)
      return session.takeError();
    LocalSession &s = **session;
    std::string context = formatv("local: starting '{0}'", entry).str();
    if (Error error = ship(s, object))
      return withContext(context, std::move(error));
    // Refused now rather than at await: the caller learns of its mistake where it made it.
    if (Error error = s.host->checkAsyncEntry(object.sha256, entry))
      return withContext(context, std::move(error));
    // Not started on a session closed meanwhile: nothing could await it.
    Expected<uint64_t> launchId = s.attached.whileOpen([&] {
      return s.launches.start(*s.host, object.sha256, entry, forever(), metrics.launchFailures);
    });
    if (!launchId)
      return withContext(context, launchId.takeError());
    return launchId;
  }

  Error await(StringRef id, uint64_t launchId) override {
    Expected<std::shared_ptr<LocalSession>> session = find(id, "awaiting a launch");
    if (!session)
      return session.takeError();
    LocalSession &s = **session;
    return withContext(formatv("local: launch {0}", launchId),
                       s.launches.await(*s.host, launchId, forever()));
  }

  Expected<std::string> call(StringRef id, StringRef symbol, StringRef input,
                             uint64_t outputSize) override {
    Expected<std::shared_ptr<LocalSession>> session = find(id, "calling");
    if (!session)
      return session.takeError();
    Expected<std::string> reply = (*session)->host->call(symbol, input, outputSize, kNoDeadline);
    if (!reply)
      return withContext("local", reply.takeError());
    if (Error error = checkCallOutput(symbol, *reply, outputSize))
      return withContext("local", std::move(error));
    return reply;
  }

private:
  static std::optional<ObjectBlob> noStore(StringRef) { return std::nullopt; }
  static bool neverStopping() { return false; }

  /// Async launches run on this many threads; the rest wait their turn.
  static constexpr unsigned kAsyncThreads = 64;
  /// The deadline of a launch or call, which an in-process host has no way to keep.
  static constexpr Clock::time_point kNoDeadline = Clock::time_point::max();

  static Error unknownSession(StringRef id) {
    return makeCodedError(ErrorCode::UnknownSession, "no session '" + id + "' on this executor");
  }

  Expected<std::shared_ptr<LocalSession>> find(StringRef id, StringRef operation) {
    std::shared_lock<std::shared_mutex> lock(sessionsMutex);
    auto it = sessions.find(id.str());
    if (it == sessions.end())
      return withContext(formatv("local: {0}", operation), unknownSession(id));
    return it->second;
  }

  /// Loads `object` into the session once: later ships and launches of it find it loaded.
  /// `unknown_session` once the session was closed.
  Error ship(LocalSession &s, const ObjectBlob &object) {
    auto load = [&]() -> Error {
      if (Error error = checkObjectCpu(object.sha256, *object.bytes))
        return error;
      return s.host->attach(object);
    };
    // The host goes with the closed session: nothing to undo.
    return s.attached.attach(object.sha256, load, [] {});
  }

  const std::string name = "local";
  // No bound on sessions: they are the program's own, in its memory, and each holds at most
  // transport::wire::kMaxPendingLaunches async launches not yet awaited.
  /// What the hosts read of an executor's options: the defaults (no kernel-thread bound of
  /// its own, signed objects only).
  const CoreOptions options;
  CoreMetrics metrics;
  /// Destroyed before `metrics`: its destructor waits for the async launches, which count
  /// into them.
  llvm::StdThreadPool asyncPool;
  const HostServices services;
  std::unique_ptr<HostFactory> hosts;
  std::atomic<uint64_t> nextSession{1};
  std::shared_mutex sessionsMutex;
  std::unordered_map<std::string, std::shared_ptr<LocalSession>> sessions;
};

} // namespace

Expected<std::unique_ptr<Backend>> createLocalBackend(const BackendOptions &options) {
  Expected<std::shared_ptr<PluginSet>> plugins = PluginSet::load(options.plugins);
  if (!plugins)
    return withContext("local", plugins.takeError());
  auto backend = std::make_unique<LocalBackend>(std::move(*plugins));
  if (Error error = backend->start())
    return withContext("local", std::move(error));
  // Kernels here run again and again in one process: their large buffers are kept, faulted
  // in, for the next launch (executor/ResultBlocks.h).
  enableBlockReuse();
  return std::move(backend);
}

} // namespace courier::executor

// Registers "local" with transport::createBackend when this object is linked. Nothing calls
// into this file by name: the executor library's CMake target and courier.pc ask the linker
// for this symbol, so every program that links the library links it, and a program that
// links the runtime alone has no in-process executor (and none of its dependencies).
extern "C" const int courier_in_process_executor =
    (courier::transport::registerBackend("local", courier::executor::createLocalBackend), 1);
