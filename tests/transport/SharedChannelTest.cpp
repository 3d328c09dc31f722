// The same-host channel: a real courier-executor on a unix socket, the HTTP backend choosing
// the channel for its launches, and what the executor's metrics say went over it.
#include "transport/SharedChannel.h"
#include "tests/kernels/KernelPaths.h"
#include "tests/support/Require.h"
#include "tests/support/Sanitized.h"
#include "tests/transport/ExecutorProcess.h"
#include "transport/Backend.h"
#include "transport/ErrorCode.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <vector>

using namespace courier::transport;
using namespace courier::testing;

namespace {

ObjectBlob loadObject(const char *path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  REQUIRE(buffer);
  return ObjectBlob::fromBytes((*buffer)->getBuffer().str());
}

ExecutorConfig onUnixSocket(std::vector<std::string> extra = {}) {
  extra.insert(extra.begin(), {"--listen", "unix:{dir}/executor.sock", "--quiet"});
  return ExecutorConfig{0, "", std::move(extra)};
}

std::unique_ptr<Backend> backendFor(const ExecutorProcess &executor,
                                    SharedMemory mode = SharedMemory::Auto,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  BackendOptions options;
  options.sharedMemory = mode;
  options.requestTimeout = timeout;
  return require(createBackend(executor.address(), options));
}

TensorView view(const std::vector<double> &data) {
  return TensorView{data.data(), 8, {static_cast<int64_t>(data.size())}, {1}};
}

std::vector<double> valuesOf(const OwnedTensor &tensor) {
  const double *data = static_cast<const double *>(tensor.data);
  return std::vector<double>(data, data + tensor.sizes.at(0));
}

std::vector<double> ramp(size_t n) {
  std::vector<double> values(n);
  for (size_t i = 0; i < n; ++i)
    values[i] = 0.5 * static_cast<double>(i) - 3;
  return values;
}

/// Doubles `values` through `_catalyst_pyface_scale` and checks every element.
void requireScaled(Backend &backend, const std::string &session, const ObjectBlob &scale,
                   const std::vector<double> &values) {
  std::vector<OwnedTensor> out =
      require(backend.launch(session, scale, "_catalyst_pyface_scale", {view(values)}, {{1, 8}}));
  REQUIRE(out.size() == 1);
  std::vector<double> got = valuesOf(out[0]);
  REQUIRE(got.size() == values.size());
  for (size_t i = 0; i < values.size(); ++i)
    REQUIRE(got[i] == 2 * values[i]);
}

/// A new session of `backend` with `object` shipped to it.
std::string sessionWith(Backend &backend, const ObjectBlob &object) {
  std::string session = require(backend.openSession());
  requireOk(backend.shipObject(session, object));
  return session;
}

ErrorCode codeOf(llvm::Error error, std::string &message) {
  ErrorCode code = ErrorCode::Internal;
  llvm::handleAllErrors(
      std::move(error),
      [&](const CodedError &e) {
        code = e.kind;
        message = e.message;
      },
      [&](const llvm::ErrorInfoBase &e) { message = e.message(); });
  return code;
}

double shmLaunches(const ExecutorProcess &executor) {
  return executor.metric("courier_shm_launches_total");
}

/// Descriptors and mappings of process `pid` that are shared memory made by Courier.
struct SharedHoldings {
  size_t descriptors = 0, mappings = 0;
};

SharedHoldings sharedHoldingsOf(pid_t pid) {
  SharedHoldings holdings;
  std::string fdDir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR *dir = ::opendir(fdDir.c_str())) {
    while (struct dirent *entry = ::readdir(dir)) {
      char target[256];
      std::string link = fdDir + "/" + entry->d_name;
      ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
      if (n > 0 && std::string(target, n).find("/memfd:courier-shm") == 0)
        holdings.descriptors++;
    }
    ::closedir(dir);
  }
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find("/memfd:courier-shm") != std::string::npos)
      holdings.mappings++;
  return holdings;
}

/// Opens `n` sessions one after another, each launching once over its channel and closing,
/// then checks that every channel ended and that the executor, once their threads are
/// joined, holds at most `left` of Courier's shared-memory descriptors and mappings, and this
/// process none.
void churnSessions(const ExecutorProcess &executor, int n, size_t left) {
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  std::unique_ptr<Backend> backend = backendFor(executor);
  double before = shmLaunches(executor);
  for (int i = 0; i < n; ++i) {
    std::string session = require(backend->openSession());
    requireOk(backend->shipObject(session, shapes));
    require(backend->launch(session, shapes, "_catalyst_pyface_noop", {}, {}));
    requireOk(backend->closeSession(session));
  }
  CHECK(shmLaunches(executor) - before == n);
  // Channels end as their sessions close.
  CHECK(executor.awaitMetricAtMost("courier_shm_channels", 0) == 0);
  // Their threads are joined, and their memory unmapped, just after.
  SharedHoldings server = sharedHoldingsOf(executor.processId());
  for (int i = 0; i < 500 && (server.descriptors > left || server.mappings > left); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    server = sharedHoldingsOf(executor.processId());
  }
  SharedHoldings client = sharedHoldingsOf(::getpid());
  CHECK(server.descriptors <= left);
  CHECK(server.mappings <= left);
  CHECK(client.descriptors == 0);
  CHECK(client.mappings == 0);
}

/// A version 3 channel driven by hand: it writes launches and reads their replies, and
/// receives the result buffers the worker sends only when told to, as a careless or hostile
/// client may never do.
struct HandDrivenChannel {
  HandDrivenChannel(httplib::Client &http, const std::string &session, uint64_t arenaBytes) {
    httplib::Result offered =
        http.Post("/v1/sessions/" + session + "/shm",
                  nlohmann::json{{"page_version", 3}, {"arena_bytes", arenaBytes}}.dump(),
                  "application/json");
    REQUIRE(offered);
    REQUIRE(offered->status == 200);
    nlohmann::json offer = nlohmann::json::parse(offered->body);
    std::string name = offer["socket"];
    std::string token = offer["token"];
    struct sockaddr_un address {};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path + 1, name.data() + 1, name.size() - 1);
    connection.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    REQUIRE(::connect(
                connection.get(), reinterpret_cast<struct sockaddr *>(&address),
                static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) + name.size())) == 0);
    requireOk(sendMessage(connection.get(), token));
    Message grant;
    REQUIRE(require(receiveMessage(connection.get(), grant, 4096,
                                   std::chrono::steady_clock::now() + std::chrono::seconds(10))) ==
            ReceiveStatus::Message);
    ByteReader in(grant.bytes);
    REQUIRE(in.u8() == 1);
    uint64_t inputBytes = in.u64(), resultBytes = in.u64();
    REQUIRE(in.u64() == 3); // The worker answers.
    in.u64();
    REQUIRE(grant.fds.size() == 4);
    control = require(
        SharedBuffer::map(std::move(grant.fds[0]), shm::pageBytes(3), /*requireSealed=*/true));
    inputs = require(SharedBuffer::map(std::move(grant.fds[1]), inputBytes, true));
    resultRegionBytes = resultBytes;
    workerSocket = std::move(grant.fds[3]);
    page = reinterpret_cast<shm::ControlPage *>(control.data());
  }

  /// Runs `entry` of `object` on `values` (one f64 vector in, one out) and returns its reply.
  shm::LaunchReply launch(const ObjectBlob &object, const char *entry,
                          const std::vector<double> &values) {
    shm::LaunchRequest request;
    request.launch.object = object.sha256;
    request.launch.entry = entry;
    wire::TensorHeader input;
    input.elemSize = 8;
    input.sizes = {static_cast<int64_t>(values.size())};
    input.bytes = 8 * values.size();
    REQUIRE(input.bytes <= inputs.size());
    std::memcpy(inputs.data(), values.data(), input.bytes);
    request.launch.inputs.push_back(input);
    request.launch.results.push_back(ResultSpec{1, 8});
    std::string bytes = shm::encodeLaunchRequest(request);
    std::memcpy(page->requestSlot, bytes.data(), bytes.size());
    page->requestBytes.store(static_cast<uint32_t>(bytes.size()), std::memory_order_release);
    uint32_t sent = ++ticket;
    doorbell::set(page->request, sent, page->executorSleeping);
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (uint32_t seen = page->reply.load(); seen != sent;
         seen = page->reply.load(std::memory_order_acquire)) {
      REQUIRE(std::chrono::steady_clock::now() < until);
      doorbell::sleep(page->reply, seen, std::chrono::milliseconds(100), page->clientSleeping);
    }
    std::string reply(page->replySlot, page->replyBytes.load(std::memory_order_acquire));
    return require(shm::decodeLaunchReply(reply, UINT64_MAX));
  }

  /// Receives every result buffer waiting on the worker's socket; returns how many there were.
  size_t receiveWaiting() {
    size_t received = 0;
    Message buffer;
    while (require(receiveMessage(workerSocket.get(), buffer, 64,
                                  std::chrono::steady_clock::now())) == ReceiveStatus::Message)
      ++received;
    return received;
  }

  UniqueFd connection, workerSocket;
  SharedBuffer control, inputs;
  uint64_t resultRegionBytes = 0;
  shm::ControlPage *page = nullptr;
  uint32_t ticket = 0;
};

} // namespace

TEST_CASE("a client that receives no result buffers has one waiting at most: each launch that "
          "needs another gets bad_request until the client takes it",
          "[shm]") {
  ExecutorProcess executor(onUnixSocket());
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  auto http = executor.client();
  httplib::Result opened = http->Post("/v1/sessions");
  REQUIRE(opened);
  std::string session = nlohmann::json::parse(opened->body)["session"];
  REQUIRE(http->Put("/v1/objects/" + shapes.sha256, *shapes.bytes, "application/octet-stream")
              ->status == 201);
  REQUIRE(http->Post("/v1/sessions/" + session + "/objects/" + shapes.sha256)->status == 200);
  // 32 KiB regions: padding 4096 values (32 KiB in) returns 16 bytes more than the result
  // region holds, in a buffer of its own.
  HandDrivenChannel channel(*http, session, 64 << 10);
  REQUIRE(channel.resultRegionBytes == 32 << 10);
  std::vector<double> values = ramp(4096);
  shm::LaunchReply first = channel.launch(shapes, "_catalyst_pyface_pad", values);
  INFO((first.failure ? first.failure->second : std::string()));
  REQUIRE(!first.failure);
  CHECK(first.placement == shm::Placement::SentBuffer);
  for (int i = 0; i < 8; ++i) {
    shm::LaunchReply refused = channel.launch(shapes, "_catalyst_pyface_pad", values);
    REQUIRE(refused.failure);
    CHECK(refused.failure->first == ErrorCode::BadRequest);
    CHECK_THAT(refused.failure->second, Catch::Contains("has not received the previous launch's"));
  }
  // Results that fit the region need no buffer and run meanwhile.
  shm::LaunchReply small = channel.launch(shapes, "_catalyst_pyface_pad", ramp(16));
  REQUIRE(!small.failure);
  CHECK(small.placement == shm::Placement::ResultRegion);
  CHECK(channel.receiveWaiting() == 1);
  // Once the client took it, the next buffer is sent.
  shm::LaunchReply again = channel.launch(shapes, "_catalyst_pyface_pad", values);
  REQUIRE(!again.failure);
  CHECK(again.placement == shm::Placement::SentBuffer);
  CHECK(channel.receiveWaiting() == 1);
  CHECK(http->Get("/v1/health")->status == 200);
}

TEST_CASE("over a unix socket launches cross shared memory and answer as over HTTP", "[shm]") {
  ExecutorProcess executor(onUnixSocket());
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  std::unique_ptr<Backend> shared = backendFor(executor);
  std::unique_ptr<Backend> http = backendFor(executor, SharedMemory::Off);
  std::string a = require(shared->openSession());
  std::string b = require(http->openSession());
  requireOk(shared->shipObject(a, scale));
  requireOk(http->shipObject(b, scale));
  for (size_t n : {size_t(0), size_t(1), size_t(1000), size_t(200000)}) {
    requireScaled(*shared, a, scale, ramp(n));
    requireScaled(*http, b, scale, ramp(n));
  }
  CHECK(shmLaunches(executor) == 4);
  // A strided view is packed into the input region as the HTTP frame packs it.
  std::vector<double> every(20);
  for (size_t i = 0; i < every.size(); ++i)
    every[i] = static_cast<double>(i);
  TensorView evens{every.data(), 8, {10}, {2}};
  std::vector<OwnedTensor> out =
      require(shared->launch(a, scale, "_catalyst_pyface_scale", {evens}, {{1, 8}}));
  for (int64_t i = 0; i < 10; ++i)
    CHECK(valuesOf(out[0])[i] == 4.0 * static_cast<double>(i));
  CHECK(shmLaunches(executor) == 5);
  requireOk(shared->closeSession(a));
  requireOk(http->closeSession(b));
}

TEST_CASE("without isolation the kernel reads the input region in place and results come back "
          "through the result region",
          "[shm]") {
  ExecutorProcess executor(onUnixSocket({"--isolation", "none"}));
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  std::unique_ptr<Backend> backend = backendFor(executor);
  std::string session = require(backend->openSession());
  requireOk(backend->shipObject(session, scale));
  requireOk(backend->shipObject(session, shapes));
  requireScaled(*backend, session, scale, ramp(100000));
  // One buffer returned as both results: each is a copy of its own.
  std::vector<OwnedTensor> twice =
      require(backend->launch(session, shapes, "_catalyst_pyface_twice", {}, {{1, 8}, {1, 8}}));
  REQUIRE(twice.size() == 2);
  CHECK(valuesOf(twice[0]) == std::vector<double>{1, 2});
  CHECK(valuesOf(twice[1]) == std::vector<double>{1, 2});
  CHECK(twice[0].allocated != twice[1].allocated);
  CHECK(shmLaunches(executor) == 2);
}

TEST_CASE("a kernel that crashes over shared memory gets kernel_crashed naming the signal, runs "
          "once however often it crashes, and the next launch works",
          "[shm]") {
  ExecutorProcess executor(onUnixSocket());
  ObjectBlob crashers = loadObject(COURIER_KERNEL_CRASHERS);
  std::unique_ptr<Backend> backend = backendFor(executor);
  std::string session = require(backend->openSession());
  requireOk(backend->shipObject(session, crashers));
  std::vector<double> one{41};
  std::vector<OwnedTensor> before = require(
      backend->launch(session, crashers, "_catalyst_pyface_plus_one", {view(one)}, {{1, 8}}));
  CHECK(valuesOf(before[0]) == std::vector<double>{42});
  // Each crash after the first meets a worker that is just being handed the channel, and
  // takes the launch already rung there: it ran, and must not be sent again.
  constexpr int kCrashes = 5;
  for (int k = 0; k < kCrashes; ++k) {
    llvm::Expected<std::vector<OwnedTensor>> crashed =
        backend->launch(session, crashers, "_catalyst_pyface_null_load", {}, {});
    REQUIRE(!crashed);
    std::string message;
    CHECK(codeOf(crashed.takeError(), message) == ErrorCode::KernelCrashed);
    CHECK_THAT(message, Catch::Contains("SIGSEGV") && Catch::Contains("null_load"));
  }
  CHECK(executor.metric("courier_kernel_crashes_total{signal=\"SIGSEGV\"}") == kCrashes);
  std::vector<OwnedTensor> after = require(
      backend->launch(session, crashers, "_catalyst_pyface_plus_one", {view(one)}, {{1, 8}}));
  CHECK(valuesOf(after[0]) == std::vector<double>{42});
  CHECK(shmLaunches(executor) >= 2);
}

TEST_CASE("a kernel that spins past the deadline over shared memory gets deadline_exceeded",
          "[shm]") {
  ExecutorProcess executor(onUnixSocket({"--launch-timeout-ms", "300"}));
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  std::unique_ptr<Backend> backend = backendFor(executor);
  std::string session = require(backend->openSession());
  requireOk(backend->shipObject(session, shapes));
  llvm::Expected<std::vector<OwnedTensor>> spun =
      backend->launch(session, shapes, "_catalyst_pyface_spin", {}, {});
  REQUIRE(!spun);
  std::string message;
  CHECK(codeOf(spun.takeError(), message) == ErrorCode::DeadlineExceeded);
  CHECK(shmLaunches(executor) == 1);
  std::vector<OwnedTensor> none =
      require(backend->launch(session, shapes, "_catalyst_pyface_noop", {}, {}));
  CHECK(none.empty());
}

TEST_CASE("inputs larger than the input region go over HTTP and results larger than the result "
          "region come in a buffer of their own",
          "[shm]") {
  // 1 MiB: 512 KiB each for inputs and results.
  ExecutorProcess executor(onUnixSocket({"--shm-arena-mib", "1"}));
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  std::unique_ptr<Backend> backend = backendFor(executor);
  std::string session = require(backend->openSession());
  requireOk(backend->shipObject(session, scale));
  requireOk(backend->shipObject(session, shapes));
  requireScaled(*backend, session, scale, ramp(1000));
  CHECK(shmLaunches(executor) == 1);
  requireScaled(*backend, session, scale, ramp(100000)); // 800 KB: over HTTP.
  CHECK(shmLaunches(executor) == 1);
  // 512 KiB in fills the input region; 16 bytes more out do not fit the result region.
  std::vector<double> values = ramp(65536);
  std::vector<OwnedTensor> padded =
      require(backend->launch(session, shapes, "_catalyst_pyface_pad", {view(values)}, {{1, 8}}));
  CHECK(shmLaunches(executor) == 2);
  std::vector<double> got = valuesOf(padded[0]);
  REQUIRE(got.size() == values.size() + 2);
  CHECK(got.front() == 0);
  CHECK(got.back() == 0);
  for (size_t i = 0; i < values.size(); ++i)
    REQUIRE(got[i + 1] == values[i]);
}

TEST_CASE("an executor with --shm-arena-mib 0 or a backend told off keeps launches on HTTP",
          "[shm]") {
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  {
    ExecutorProcess executor(onUnixSocket({"--shm-arena-mib", "0"}));
    std::unique_ptr<Backend> backend = backendFor(executor);
    std::string session = require(backend->openSession());
    requireOk(backend->shipObject(session, scale));
    requireScaled(*backend, session, scale, ramp(10));
    requireScaled(*backend, session, scale, ramp(10));
    CHECK(shmLaunches(executor) == 0);
  }
  ExecutorProcess executor(onUnixSocket());
  std::unique_ptr<Backend> backend = backendFor(executor, SharedMemory::Off);
  std::string session = require(backend->openSession());
  requireOk(backend->shipObject(session, scale));
  requireScaled(*backend, session, scale, ramp(10));
  CHECK(shmLaunches(executor) == 0);
  CHECK(executor.metric("courier_shm_channels_opened_total") == 0);
}

TEST_CASE("a loopback TCP executor's channel is taken by default, after a check of the host",
          "[shm]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--quiet"}});
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  std::unique_ptr<Backend> off = backendFor(executor, SharedMemory::Off);
  std::string a = sessionWith(*off, scale);
  requireScaled(*off, a, scale, ramp(10));
  CHECK(shmLaunches(executor) == 0);
  std::unique_ptr<Backend> automatic = backendFor(executor);
  std::string b = sessionWith(*automatic, scale);
  requireScaled(*automatic, b, scale, ramp(10));
  requireScaled(*automatic, b, scale, ramp(20));
  CHECK(shmLaunches(executor) == 2);
}

TEST_CASE("a request for a channel that came through a proxy is refused, naming the header",
          "[shm]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--quiet"}});
  auto http = executor.client();
  httplib::Result opened = http->Post("/v1/sessions");
  REQUIRE(opened);
  std::string session = nlohmann::json::parse(opened->body)["session"];
  std::string path = "/v1/sessions/" + session + "/shm";
  for (const char *header : {"X-Forwarded-For", "Forwarded", "Via"}) {
    INFO(header);
    httplib::Result refused = http->Post(path, {{header, "127.0.0.1"}}, "", "application/json");
    REQUIRE(refused);
    CHECK(refused->status == 404);
    nlohmann::json error = nlohmann::json::parse(refused->body)["error"];
    CHECK(error["code"] == "not_found");
    CHECK(error["message"].get<std::string>().find(header) != std::string::npos);
  }
  CHECK(executor.metric("courier_shm_channels_opened_total") == 0);
  // Asked directly, the same session gets one.
  httplib::Result offered = http->Post(path);
  REQUIRE(offered);
  CHECK(offered->status == 200);
}

TEST_CASE("the channel socket refuses a wrong or reused token and the executor keeps serving",
          "[shm]") {
  ExecutorProcess executor(onUnixSocket());
  auto http = executor.client();
  httplib::Result opened = http->Post("/v1/sessions");
  REQUIRE(opened);
  std::string session = nlohmann::json::parse(opened->body)["session"];
  httplib::Result offered = http->Post("/v1/sessions/" + session + "/shm");
  REQUIRE(offered);
  REQUIRE(offered->status == 200);
  nlohmann::json offer = nlohmann::json::parse(offered->body);
  std::string socket = offer["socket"];
  std::string token = offer["token"];
  CHECK(offer["host"] == shm::hostIdentity());
  uint32_t version = offer["page_version"];
  for (const std::string &wrong : {std::string("0123"), std::string(), std::string(300, 'x')}) {
    llvm::Expected<std::unique_ptr<shm::Client>> refused =
        shm::Client::connect(socket, wrong, std::chrono::seconds(5), version);
    REQUIRE(!refused);
    std::string message;
    CHECK(codeOf(refused.takeError(), message) == ErrorCode::Unavailable);
  }
  std::unique_ptr<shm::Client> granted =
      require(shm::Client::connect(socket, token, std::chrono::seconds(5), version));
  CHECK(granted->usable());
  CHECK(granted->inputCapacity() == offer["input_bytes"].get<uint64_t>());
  llvm::Expected<std::unique_ptr<shm::Client>> reused =
      shm::Client::connect(socket, token, std::chrono::seconds(5), version);
  REQUIRE(!reused);
  llvm::consumeError(reused.takeError());
  CHECK(executor.metric("courier_shm_channels_refused_total") == 4);
  httplib::Result unknown = http->Post("/v1/sessions/nosuchsession/shm");
  REQUIRE(unknown);
  CHECK(unknown->status == 404);
  httplib::Result malformed =
      http->Post("/v1/sessions/" + session + "/shm", "[1]", "application/json");
  REQUIRE(malformed);
  CHECK(malformed->status == 400);
  CHECK(http->Get("/v1/health")->status == 200);
}

TEST_CASE("the offer names the control page version both sides speak, and clients of either "
          "version launch over the channel",
          "[shm]") {
  ExecutorProcess executor(onUnixSocket());
  auto http = executor.client();
  httplib::Result opened = http->Post("/v1/sessions");
  REQUIRE(opened);
  std::string session = nlohmann::json::parse(opened->body)["session"];
  // A client that names no version speaks the first; one that asks past the newest gets it
  // (3, with the session's worker answering: this executor isolates sessions).
  struct Asked {
    std::string body;
    uint32_t granted;
  };
  for (const Asked &asked : {Asked{"", 1}, Asked{R"({"page_version": 1})", 1},
                             Asked{R"({"page_version": 2})", 2}, Asked{R"({"page_version": 3})", 3},
                             Asked{R"({"page_version": 99, "arena_bytes": 1048576})", 3}}) {
    INFO(asked.body);
    httplib::Result offered =
        http->Post("/v1/sessions/" + session + "/shm", asked.body, "application/json");
    REQUIRE(offered);
    REQUIRE(offered->status == 200);
    CHECK(nlohmann::json::parse(offered->body)["page_version"] == asked.granted);
  }
  for (const char *bad :
       {R"({"page_version": "2"})", R"({"page_version": -1})", R"({"page_version": 1.5})"}) {
    httplib::Result refused =
        http->Post("/v1/sessions/" + session + "/shm", bad, "application/json");
    REQUIRE(refused);
    CHECK(refused->status == 400);
    CHECK_THAT(refused->body, Catch::Contains("page_version"));
  }
  // A client that maps a version-1 page and rings without flags, and one of this build, each
  // launch through the channel, pausing now and then so that both ends go to sleep between.
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  double before = shmLaunches(executor);
  for (uint32_t version : {1u, 2u, 0u}) {
    INFO("page version asked " << version);
    BackendOptions options;
    options.sharedMemoryPageVersion = version;
    std::unique_ptr<Backend> backend = require(createBackend(executor.address(), options));
    std::string s = require(backend->openSession());
    requireOk(backend->shipObject(s, scale));
    for (int i = 0; i < 40; ++i) {
      requireScaled(*backend, s, scale, ramp(static_cast<size_t>(i)));
      if (i % 8 == 7)
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
    requireOk(backend->closeSession(s));
  }
  CHECK(shmLaunches(executor) - before == 120);
}

TEST_CASE("10k sessions (2k sanitized) with a channel each leave no shared-memory descriptors or "
          "mappings behind",
          "[shm][leaks]") {
  ExecutorProcess executor(onUnixSocket({"--isolation", "none"}));
  const int sessions = courier::testing::soakRounds(10000);
  churnSessions(executor, sessions, 3);
  CHECK(executor.metric("courier_shm_channels_opened_total") == sessions);
}

TEST_CASE("sessions whose workers answer their channels leave no shared-memory descriptors or "
          "mappings behind",
          "[shm][leaks]") {
  // Each a worker of its own: fewer than the in-process 10k, the same bookkeeping (the
  // worker's descriptors, its counts page, its socket to the client).
  ExecutorProcess executor(onUnixSocket());
  churnSessions(executor, 60, 0);
}

TEST_CASE("a session that expires takes its channel with it, and the client carries on over a "
          "new one",
          "[shm]") {
  ExecutorProcess executor(onUnixSocket({"--idle-timeout", "1"}));
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  std::unique_ptr<Backend> backend = backendFor(executor);
  std::string session = require(backend->openSession());
  requireOk(backend->shipObject(session, scale));
  requireScaled(*backend, session, scale, ramp(10));
  CHECK(executor.metric("courier_shm_channels") == 1);
  // The reaper runs about once a second; the channel notices within a tenth of that.
  CHECK(executor.awaitMetricAtMost("courier_shm_channels", 0) == 0);
  requireScaled(*backend, session, scale, ramp(10));
  CHECK(shmLaunches(executor) == 2);
  CHECK(executor.metric("courier_shm_channels_opened_total") == 2);
}

TEST_CASE("with isolation the session's worker answers the channel, and a launch of an object it "
          "has not loaded goes over HTTP once, which loads it",
          "[shm]") {
  ExecutorProcess executor(onUnixSocket());
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  std::unique_ptr<Backend> backend = backendFor(executor);
  std::string a = require(backend->openSession());
  std::string b = require(backend->openSession());
  requireOk(backend->shipObject(a, scale));
  // Stored by another session: in the executor's store, not in a's worker.
  requireOk(backend->shipObject(b, shapes));
  requireScaled(*backend, a, scale, ramp(100));
  CHECK(shmLaunches(executor) == 1);
  double launchesBefore = executor.metric("courier_launches_total");
  require(backend->launch(a, shapes, "_catalyst_pyface_noop", {}, {}));
  CHECK(shmLaunches(executor) == 1); // Redirected: over HTTP, which loaded it in a's worker.
  for (int i = 0; i < 5; ++i)
    require(backend->launch(a, shapes, "_catalyst_pyface_noop", {}, {}));
  CHECK(shmLaunches(executor) == 6);
  // What the worker counted reaches the executor's own launch metrics.
  CHECK(executor.metric("courier_launches_total") - launchesBefore == 6);
  CHECK(executor.metric("courier_launch_duration_seconds_count") >= 7);
  // The worker answers, not the executor: with the executor stopped, launches still run.
  REQUIRE(::kill(executor.processId(), SIGSTOP) == 0);
  std::vector<OwnedTensor> twice;
  for (int i = 0; i < 20; ++i)
    twice = require(backend->launch(a, shapes, "_catalyst_pyface_twice", {}, {{1, 8}, {1, 8}}));
  std::vector<double> values = ramp(1000);
  std::vector<OwnedTensor> scaled =
      require(backend->launch(a, scale, "_catalyst_pyface_scale", {view(values)}, {{1, 8}}));
  REQUIRE(::kill(executor.processId(), SIGCONT) == 0);
  REQUIRE(twice.size() == 2);
  CHECK(valuesOf(twice[1]) == std::vector<double>{1, 2});
  CHECK(valuesOf(scaled[0])[999] == 2 * values[999]);
  CHECK(shmLaunches(executor) == 27);
  requireOk(backend->closeSession(a));
  requireOk(backend->closeSession(b));
}

TEST_CASE("a session used only through its channel does not expire while it is used", "[shm]") {
  ExecutorProcess executor(onUnixSocket({"--idle-timeout", "1"}));
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  std::unique_ptr<Backend> backend = backendFor(executor);
  std::string session = require(backend->openSession());
  requireOk(backend->shipObject(session, shapes));
  require(backend->launch(session, shapes, "_catalyst_pyface_noop", {}, {}));
  double opened = executor.metric("courier_shm_channels_opened_total");
  // Three idle timeouts of launches, none of them over HTTP.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  int launches = 1;
  while (std::chrono::steady_clock::now() < until) {
    require(backend->launch(session, shapes, "_catalyst_pyface_noop", {}, {}));
    ++launches;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(shmLaunches(executor) == launches);
  CHECK(executor.metric("courier_shm_channels") == 1);
  CHECK(executor.metric("courier_shm_channels_opened_total") == opened);
  CHECK(executor.metric("courier_sessions_expired_total") == 0);
}

TEST_CASE("a session's new channel is handed to its worker, which lets the old one go", "[shm]") {
  // A launch left unanswered would wait out this deadline and fail.
  ExecutorProcess executor(onUnixSocket({"--launch-timeout-ms", "20000"}));
  ObjectBlob shapes = loadObject(COURIER_KERNEL_SHAPES);
  std::unique_ptr<Backend> first =
      backendFor(executor, SharedMemory::Auto, std::chrono::seconds(5));
  std::unique_ptr<Backend> second =
      backendFor(executor, SharedMemory::Auto, std::chrono::seconds(5));
  std::string session = require(first->openSession());
  requireOk(first->shipObject(session, shapes));
  // Each backend asks for a channel of its own on the same session: each new one replaces the
  // last, and the worker answers on it at once.
  for (int round = 0; round < 3; ++round) {
    for (Backend *backend : {first.get(), second.get()}) {
      std::vector<OwnedTensor> twice =
          require(backend->launch(session, shapes, "_catalyst_pyface_twice", {}, {{1, 8}, {1, 8}}));
      CHECK(valuesOf(twice[0]) == std::vector<double>{1, 2});
    }
  }
  CHECK(shmLaunches(executor) >= 3);
  CHECK(executor.metric("courier_shm_channels") == 1);
  // The worker maps the one channel it answers (its page, two regions, its counts), not the
  // ended ones.
  auto http = executor.client();
  httplib::Result listed = http->Get("/v1/sessions");
  REQUIRE(listed);
  REQUIRE(listed->status == 200);
  nlohmann::json sessions = nlohmann::json::parse(listed->body)["sessions"];
  REQUIRE(sessions.size() == 1); // The one both backends launch on.
  pid_t worker = sessions[0]["worker_pid"].get<pid_t>();
  SharedHoldings holdings = sharedHoldingsOf(worker);
  for (int i = 0; i < 100 && holdings.mappings > 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    holdings = sharedHoldingsOf(worker);
  }
  CHECK(holdings.mappings == 4);
}

TEST_CASE("an executor that stops with sessions on their channels reports no worker death",
          "[shm]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--quiet"}});
  ObjectBlob scale = loadObject(COURIER_KERNEL_SCALE);
  std::vector<std::unique_ptr<Backend>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(backendFor(executor));
    requireScaled(*clients.back(), sessionWith(*clients.back(), scale), scale, ramp(10));
  }
  REQUIRE(shmLaunches(executor) == 3);
  // Its workers end with it (they die with the thread that started them, too): no crash,
  // no restart, nothing said at warn level.
  int status = executor.terminate(SIGTERM, std::chrono::seconds(15));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  for (const std::string &line : executor.logLines()) {
    INFO(line);
    CHECK(line.find(" warn ") == std::string::npos);
    CHECK(line.find("died") == std::string::npos);
  }
}
