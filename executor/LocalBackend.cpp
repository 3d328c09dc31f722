// The in-process executor: a Backend over the executor core without isolation, so a launch
// is a direct call into the kernel on the calling thread, reading the caller's inputs in
// place and handing over the kernel's result buffers without a copy.
#include "executor/LocalBackend.h"

#include "executor/ExecutorCore.h"
#include "executor/ResultBlocks.h"
#include "transport/ErrorCode.h"

#include "llvm/Support/FormatVariadic.h"

#include <atomic>

using namespace llvm;

namespace courier::executor {

using transport::Backend;
using transport::BackendOptions;
using transport::CodedError;
using transport::ErrorCode;
using transport::Health;
using transport::withContext;

namespace {

/// Far enough never to matter: in process, nothing can end a kernel, so nothing times out.
constexpr std::chrono::hours kForever(24 * 365 * 10);

class LocalBackend final : public Backend {
public:
  explicit LocalBackend(std::unique_ptr<executor::ExecutorCore> core) : core(std::move(core)) {}

  const std::string &address() const override { return name; }

  Expected<Health> health() override {
    executor::HealthReport report = core->health();
    Health health;
    health.version = report.version;
    health.triple = report.triple;
    health.cpu = report.cpu;
    health.features = std::move(report.features);
    return health;
  }

  Expected<std::string> openSession() override {
    std::string id = formatv("local-{0}", nextSession++).str();
    bool created = false;
    Expected<executor::SessionRef> session = core->openSession(id, created);
    if (!session)
      return withContext("local: opening a session", session.takeError());
    return id;
  }

  Error closeSession(StringRef id) override {
    return withContext(formatv("local: closing session '{0}'", id), core->closeSession(id));
  }

  Error shipObject(StringRef id, const ObjectBlob &object) override {
    Expected<executor::SessionRef> session = find(id, "shipping an object");
    if (!session)
      return session.takeError();
    return withContext(formatv("local: shipping an object to session '{0}'", id),
                       ship(**session, object));
  }

  Error releaseObject(StringRef id, StringRef sha256) override {
    Expected<executor::SessionRef> session = find(id, "releasing an object");
    if (!session)
      return session.takeError();
    // Releasing what the session does not hold is no error.
    core->detach(**session, sha256);
    return Error::success();
  }

  Expected<std::vector<OwnedTensor>> launch(StringRef id, const ObjectBlob &object, StringRef entry,
                                            ArrayRef<TensorView> inputs,
                                            ArrayRef<ResultSpec> results) override {
    Expected<executor::SessionRef> session = find(id, "launching");
    if (!session)
      return session.takeError();
    // An object already attached costs one lookup; one never shipped is shipped now.
    if (Error error = ship(**session, object))
      return withContext(formatv("local: launching '{0}'", entry), std::move(error));
    // In process nothing can end a kernel, so there is no deadline to compute.
    Expected<executor::LaunchResults> launched =
        core->launch(**session, object.sha256, entry, /*area=*/nullptr, inputs, results,
                     executor::Clock::time_point::max());
    if (!launched)
      return withContext(formatv("local: launching '{0}'", entry), launched.takeError());
    // Without isolation the results are the kernel's own buffers: handed over as they are.
    return std::move(*launched->owned);
  }

  Expected<uint64_t> launchAsync(StringRef id, const ObjectBlob &object, StringRef entry) override {
    Expected<executor::SessionRef> session = find(id, "starting an async launch");
    if (!session)
      return session.takeError();
    std::string context = formatv("local: starting '{0}'", entry).str();
    if (Error error = ship(**session, object))
      return withContext(context, std::move(error));
    Expected<uint64_t> launchId =
        core->launchAsync(*session, object.sha256, entry, core->deadline(std::nullopt));
    if (!launchId)
      return withContext(context, launchId.takeError());
    return launchId;
  }

  Error await(StringRef id, uint64_t launchId) override {
    Expected<executor::SessionRef> session = find(id, "awaiting a launch");
    if (!session)
      return session.takeError();
    return withContext(formatv("local: launch {0}", launchId),
                       core->await(**session, launchId, core->deadline(std::nullopt)));
  }

  Expected<std::string> call(StringRef id, StringRef symbol, StringRef input,
                             uint64_t outputSize) override {
    Expected<executor::SessionRef> session = find(id, "calling");
    if (!session)
      return session.takeError();
    Expected<std::string> reply =
        core->call(**session, symbol, input, outputSize, core->deadline(std::nullopt));
    if (!reply)
      return withContext("local", reply.takeError());
    return reply;
  }

private:
  Expected<executor::SessionRef> find(StringRef id, StringRef operation) {
    Expected<executor::SessionRef> session = core->findSession(id);
    if (!session)
      return withContext(formatv("local: {0}", operation), session.takeError());
    return session;
  }

  /// Stores the object's bytes (shared, not copied) and attaches it to the session.
  Error ship(executor::Session &session, const ObjectBlob &object) {
    Error attached = core->attach(session, object.sha256);
    if (!attached)
      return Error::success();
    bool missing = false;
    Error other = handleErrors(std::move(attached), [&](const CodedError &e) -> Error {
      if (e.kind == ErrorCode::UnknownObject) {
        missing = true;
        return Error::success();
      }
      return makeCodedError(e.kind, e.message);
    });
    if (other || !missing)
      return other;
    Expected<bool> stored = core->storeObject(object);
    if (!stored)
      return stored.takeError();
    return core->attach(session, object.sha256);
  }

  const std::string name = "local";
  std::unique_ptr<executor::ExecutorCore> core;
  std::atomic<uint64_t> nextSession{1};
};

} // namespace

Expected<std::unique_ptr<Backend>> createLocalBackend(const BackendOptions &options) {
  executor::CoreOptions core;
  core.plugins = options.plugins;
  core.isolation = transport::Isolation::InProcess;
  core.idleTimeout = std::chrono::seconds(0); // Its caller closes its sessions.
  core.launchTimeout = kForever;
  core.asyncThreads = 64;
  core.timeLaunches = false;
  // The application's own objects, each attached as it is stored: no bound but its memory.
  core.maxStoreBytes = UINT64_MAX;
  Expected<std::unique_ptr<executor::ExecutorCore>> created =
      executor::ExecutorCore::create(std::move(core));
  if (!created)
    return withContext("local", created.takeError());
  // Kernels here run again and again in one process: their large buffers are kept, faulted
  // in, for the next launch (executor/ResultBlocks.h).
  enableBlockReuse();
  return std::make_unique<LocalBackend>(std::move(*created));
}

} // namespace courier::executor

// Registers "local" with transport::createBackend when this object is linked. Nothing calls
// into this file by name: the executor library's CMake target and courier.pc ask the linker
// for this symbol, so every program that links the library links it, and a program that
// links the runtime alone has no in-process executor (and none of its dependencies).
extern "C" const int courier_in_process_executor =
    (courier::transport::registerBackend("local", courier::executor::createLocalBackend), 1);
