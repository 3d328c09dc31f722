// The in-process executor: one ObjectHost per session, launches run on the calling thread
// and async launches on their own thread.
#include "executor/LocalBackend.h"

#include "executor/ObjectHost.h"
#include "transport/ErrorCode.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/TargetParser/Host.h"

#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>

using namespace llvm;

#ifndef COURIER_VERSION
#define COURIER_VERSION "unknown"
#endif

namespace courier::transport {

namespace {

Error makeError(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

/// How an async launch ended: its failure's code (when it had one) and message, kept as
/// values because an unawaited llvm::Error could not be dropped with its session.
struct LaunchOutcome {
  bool failed = false;
  std::optional<ErrorCode> code;
  std::string message;

  static LaunchOutcome of(Error error) {
    LaunchOutcome outcome;
    handleAllErrors(
        std::move(error),
        [&](const CodedError &e) {
          outcome.failed = true;
          outcome.code = e.kind;
          outcome.message = e.message;
        },
        [&](const ErrorInfoBase &e) {
          outcome.failed = true;
          outcome.message = e.message();
        });
    return outcome;
  }
  Error toError() const {
    if (!failed)
      return Error::success();
    if (code)
      return makeCodedError(*code, message);
    return makeError(message);
  }
};

struct LocalSession {
  std::shared_ptr<ObjectHost> host;
  std::mutex asyncMutex;
  uint64_t nextLaunch = 1;
  /// Pending async launches. Destroying a future from std::async waits for its launch, so
  /// closing a session never abandons a running kernel.
  std::map<uint64_t, std::future<LaunchOutcome>> pending;
};

class LocalBackend final : public Backend {
public:
  explicit LocalBackend(std::shared_ptr<PluginSet> plugins) : plugins(std::move(plugins)) {}
  ~LocalBackend() override = default;

  const std::string &address() const override { return name; }

  Expected<Health> health() override {
    Health health;
    health.version = COURIER_VERSION;
    health.triple = sys::getProcessTriple();
    health.cpu = sys::getHostCPUName().str();
    for (const auto &feature : sys::getHostCPUFeatures())
      if (feature.second)
        health.features.push_back(feature.first().str());
    std::sort(health.features.begin(), health.features.end());
    return health;
  }

  Expected<std::string> openSession() override {
    auto host = ObjectHost::create(plugins);
    if (!host)
      return withContext("local: opening a session", host.takeError());
    auto session = std::make_shared<LocalSession>();
    session->host = std::move(*host);
    std::unique_lock<std::shared_mutex> lock(mutex);
    std::string id = formatv("local-{0}", nextSession++).str();
    sessions[id] = std::move(session);
    return id;
  }

  Error closeSession(StringRef id) override {
    std::shared_ptr<LocalSession> session;
    {
      std::unique_lock<std::shared_mutex> lock(mutex);
      auto found = sessions.find(id);
      if (found == sessions.end())
        return makeError(formatv("local: closing session '{0}': no such session", id));
      session = std::move(found->second);
      sessions.erase(found);
    }
    // Launches still running hold their own reference; the host goes when the last ends.
    std::lock_guard<std::mutex> lock(session->asyncMutex);
    session->pending.clear();
    return Error::success();
  }

  Error shipObject(StringRef id, const ObjectBlob &object) override {
    auto session = find(id, "shipping an object");
    if (!session)
      return session.takeError();
    if (Error error = (*session)->host->addObject(object))
      return withContext("local: shipping an object", std::move(error));
    return Error::success();
  }

  Error releaseObject(StringRef id, StringRef sha256) override {
    auto session = find(id, "releasing an object");
    if (!session)
      return session.takeError();
    if (Error error = (*session)->host->removeObject(sha256))
      return withContext("local: releasing an object", std::move(error));
    return Error::success();
  }

  Expected<std::vector<OwnedTensor>> launch(StringRef id, const ObjectBlob &object, StringRef entry,
                                            ArrayRef<TensorView> inputs,
                                            ArrayRef<ResultSpec> results) override {
    auto session = find(id, "launching");
    if (!session)
      return session.takeError();
    ObjectHost &host = *(*session)->host;
    auto tensors = host.launch(object.sha256, entry, inputs, results);
    // Loading on a miss rather than checking first keeps the common path to one lookup.
    if (!tensors && !host.hasObject(object.sha256)) {
      consumeError(tensors.takeError());
      if (Error error = host.addObject(object))
        return withContext(formatv("local: launching '{0}'", entry), std::move(error));
      tensors = host.launch(object.sha256, entry, inputs, results);
    }
    if (!tensors)
      return withContext(formatv("local: launching '{0}'", entry), tensors.takeError());
    return tensors;
  }

  Expected<uint64_t> launchAsync(StringRef id, const ObjectBlob &object, StringRef entry) override {
    auto found = find(id, "starting an async launch");
    if (!found)
      return found.takeError();
    std::shared_ptr<LocalSession> session = std::move(*found);
    std::shared_ptr<ObjectHost> host = session->host;
    if (!host->hasObject(object.sha256))
      if (Error error = host->addObject(object))
        return withContext(formatv("local: starting '{0}'", entry), std::move(error));
    std::string sha = object.sha256;
    std::string name = entry.str();
    auto future = std::async(std::launch::async, [host, sha, name]() -> LaunchOutcome {
      auto results = host->launch(sha, name, {}, {});
      return LaunchOutcome::of(results ? Error::success() : results.takeError());
    });
    std::lock_guard<std::mutex> lock(session->asyncMutex);
    uint64_t launchId = session->nextLaunch++;
    session->pending.emplace(launchId, std::move(future));
    return launchId;
  }

  Error await(StringRef id, uint64_t launchId) override {
    auto found = find(id, "awaiting a launch");
    if (!found)
      return found.takeError();
    std::future<LaunchOutcome> future;
    {
      std::lock_guard<std::mutex> lock((*found)->asyncMutex);
      auto pending = (*found)->pending.find(launchId);
      if (pending == (*found)->pending.end())
        return makeError(
            formatv("local: awaiting launch {0}: unknown or already awaited", launchId));
      future = std::move(pending->second);
      (*found)->pending.erase(pending);
    }
    return withContext(formatv("local: launch {0} failed", launchId), future.get().toError());
  }

  Expected<std::string> call(StringRef id, StringRef symbol, StringRef input,
                             uint64_t outputSize) override {
    auto session = find(id, "calling");
    if (!session)
      return session.takeError();
    auto reply = (*session)->host->call(symbol, input, outputSize);
    if (!reply)
      return withContext("local", reply.takeError());
    return reply;
  }

private:
  Expected<std::shared_ptr<LocalSession>> find(StringRef id, StringRef operation) {
    std::shared_lock<std::shared_mutex> lock(mutex);
    auto found = sessions.find(id);
    if (found == sessions.end())
      return makeError(formatv("local: {0}: no session '{1}'", operation, id));
    return found->second;
  }

  const std::string name = "local";
  std::shared_ptr<PluginSet> plugins;
  std::shared_mutex mutex;
  uint64_t nextSession = 1;
  StringMap<std::shared_ptr<LocalSession>> sessions;
};

} // namespace

Expected<std::unique_ptr<Backend>> createLocalBackend(const BackendOptions &options) {
  auto plugins = PluginSet::load(options.plugins);
  if (!plugins)
    return withContext("local", plugins.takeError());
  return std::make_unique<LocalBackend>(std::move(*plugins));
}

} // namespace courier::transport
