// What a peer cannot make the executor (or its client) hold: JSON nested past
// wire::kMaxJsonDepth on every route that reads JSON, and objects past --max-object-store-mib;
// each against a real courier-executor, whose memory is read from /proc.
#include "tests/kernels/KernelPaths.h"
#include "tests/support/Require.h"
#include "tests/transport/ExecutorProcess.h"
#include "tests/transport/Sessions.h"
#include "transport/Backend.h"
#include "transport/ErrorCode.h"
#include "transport/Wire.h"

#include "llvm/Support/MemoryBuffer.h"

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace courier::transport;
using namespace courier::testing;
using json = nlohmann::json;

namespace {

/// A field of /proc/PID/status in KiB ("VmRSS", "VmHWM": the peak of VmRSS).
long statusKiB(pid_t pid, const std::string &field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(field + ":", 0) == 0)
      return std::stol(line.substr(field.size() + 1));
  FAIL("no " << field << " for process " << pid);
  return 0;
}

struct ErrorReply {
  int status = 0;
  std::string code, message;
};

ErrorReply errorOf(const httplib::Result &res) {
  REQUIRE(res);
  ErrorReply reply{res->status, "", ""};
  json body = json::parse(res->body, nullptr, false);
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    reply.code = body["error"].value("code", "");
    reply.message = body["error"].value("message", "");
  }
  return reply;
}

/// `n` bytes no two calls repeat, as an object's body (the store does not look inside).
std::string uniqueBytes(size_t n) {
  static std::mt19937_64 random(std::random_device{}());
  std::string bytes(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    uint64_t word = random();
    std::memcpy(bytes.data() + i, &word, std::min<size_t>(8, n - i));
  }
  return bytes;
}

/// A loadable object of about `bytes` bytes: scale.o with bytes after its end, which nothing
/// in an ELF file points to; `seed` makes each a different object.
std::string paddedScale(size_t bytes, char seed) {
  auto buffer = llvm::MemoryBuffer::getFile(COURIER_KERNEL_SCALE);
  REQUIRE(buffer);
  std::string object = (*buffer)->getBuffer().str();
  object.resize(std::max(bytes, object.size() + 1), seed);
  return object;
}

httplib::Result putObject(httplib::Client &http, const std::string &bytes) {
  return http.Put("/v1/objects/" + wire::sha256Hex(bytes), bytes, wire::kBytesContentType);
}

int objectStatus(httplib::Client &http, const std::string &bytes) {
  httplib::Result res = http.Get("/v1/objects/" + wire::sha256Hex(bytes));
  REQUIRE(res);
  return res->status;
}

} // namespace

TEST_CASE("JSON nested deeper than 128 levels is refused with 400 on every route that reads "
          "JSON, and the executor's memory stays small",
          "[limits][memory]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--quiet"}});
  auto http = executor.client();
  http->set_read_timeout(std::chrono::seconds(60));
  http->set_write_timeout(std::chrono::seconds(60));
  std::string session = openSession(*http);
  std::string base = "/v1/sessions/" + session;
  long peakBefore = statusKiB(executor.processId(), "VmHWM");

  // Tens of megabytes of '[': parsed, each would take the executor gigabytes.
  const std::string deep(24 << 20, '[');
  struct Route {
    std::string path, body, contentType, code;
  };
  // A launch frame's header line ends at its newline, and is at most 1 MiB.
  std::string deepFrame = std::string(512 << 10, '[') + "\n";
  for (const Route &route :
       {Route{base + "/launch_async", deep, wire::kJsonContentType, "bad_request"},
        Route{base + "/shm", deep, wire::kJsonContentType, "bad_request"},
        Route{base + "/launch", deepFrame, wire::kFrameContentType, "bad_frame"}}) {
    INFO(route.path);
    ErrorReply refused = errorOf(http->Post(route.path, route.body, route.contentType.c_str()));
    CHECK(refused.status == 400);
    CHECK(refused.code == route.code);
    CHECK_THAT(refused.message, Catch::Contains("deeper than 128 levels"));
  }
  // Peaks, not samples: whatever the executor held at any moment of the requests.
  long grownKiB = statusKiB(executor.processId(), "VmHWM") - peakBefore;
  INFO("the executor's peak memory grew by " << grownKiB << " KiB");
  CHECK(grownKiB < (192 << 10));

  // 128 levels are JSON like any other; the body is then refused for what it says.
  std::string nested128 = R"({"object": )" + std::string(127, '[') + std::string(127, ']') + "}";
  ErrorReply shallow = errorOf(http->Post(base + "/launch_async", nested128, "application/json"));
  CHECK(shallow.status == 400);
  CHECK_THAT(shallow.message, Catch::Contains("expected {\"object\""));
  std::string nested129 = R"({"object": )" + std::string(128, '[') + std::string(128, ']') + "}";
  CHECK_THAT(errorOf(http->Post(base + "/launch_async", nested129, "application/json")).message,
             Catch::Contains("deeper than 128 levels"));
  // Brackets in strings are text.
  std::string quoted = R"({"object": ")" + std::string(1000, '[') + R"(", "entry": "e"})";
  CHECK_THAT(errorOf(http->Post(base + "/launch_async", quoted, "application/json")).message,
             Catch::Contains("SHA-256"));
  httplib::Result health = http->Get("/v1/health");
  REQUIRE(health);
  CHECK(health->status == 200);
}

TEST_CASE("the HTTP client refuses an executor's reply or error body nested deeper than 128 "
          "levels without parsing it",
          "[limits]") {
  // A hostile executor: a health reply of 512 KiB of '[', then an error body of the same
  // (under the 1 MiB a reply may be, far past 128 levels).
  httplib::Server hostile;
  std::atomic<int> asked{0};
  const std::string deep(512 << 10, '[');
  hostile.Get("/v1/health", [&](const httplib::Request &, httplib::Response &res) {
    res.status = asked++ == 0 ? 200 : 503;
    res.set_content(deep, "application/json");
  });
  int port = hostile.bind_to_any_port("127.0.0.1");
  REQUIRE(port > 0);
  // Bound and listening: a connection waits in the backlog until the loop accepts it.
  std::thread serving([&] { hostile.listen_after_bind(); });

  std::unique_ptr<Backend> backend = courier::testing::require(
      createBackend("127.0.0.1:" + std::to_string(port), BackendOptions{}));
  for (const char *what : {"the reply", "the error body"}) {
    INFO(what);
    llvm::Expected<Health> health = backend->health();
    REQUIRE(!health);
    std::string message = llvm::toString(health.takeError());
    CHECK_THAT(message, Catch::Contains(what) && Catch::Contains("deeper than 128 levels"));
    CHECK_THAT(message, Catch::Contains("127.0.0.1:" + std::to_string(port)));
  }
  hostile.stop();
  serving.join();
}

TEST_CASE("the HTTP client gives up on an executor's reply or error body larger than 1 MiB, "
          "naming the executor, without reading it all",
          "[limits]") {
  // A hostile executor: a health reply of 256 MiB, made as it is read, then an error body
  // of the same; it counts what it manages to send.
  httplib::Server hostile;
  std::atomic<int> asked{0};
  std::atomic<size_t> sent{0};
  constexpr size_t kHuge = size_t(256) << 20;
  hostile.Get("/v1/health", [&](const httplib::Request &, httplib::Response &res) {
    res.status = asked++ == 0 ? 200 : 503;
    res.set_content_provider(kHuge, "application/json",
                             [&](size_t offset, size_t length, httplib::DataSink &sink) {
                               static const std::string chunk(64 << 10, ' ');
                               size_t n = std::min(length, chunk.size());
                               sent += n;
                               return sink.write(chunk.data(), n);
                             });
  });
  int port = hostile.bind_to_any_port("127.0.0.1");
  REQUIRE(port > 0);
  std::thread serving([&] { hostile.listen_after_bind(); });

  std::unique_ptr<Backend> backend = courier::testing::require(
      createBackend("127.0.0.1:" + std::to_string(port), BackendOptions{}));
  for (int round = 0; round < 2; ++round) {
    INFO((round == 0 ? "the reply" : "the error body"));
    llvm::Expected<Health> health = backend->health();
    REQUIRE(!health);
    std::string message = llvm::toString(health.takeError());
    CHECK_THAT(message, Catch::Contains("larger than 1 MiB") &&
                            Catch::Contains("127.0.0.1:" + std::to_string(port)));
  }
  hostile.stop();
  serving.join();
  // The client stopped reading: the server sent what the sockets' buffers took past 1 MiB
  // each time, far from 256 MiB.
  CHECK(sent.load() < 2 * kHuge / 4);
}

TEST_CASE("uploads past --max-object-store-mib evict the objects no session holds, oldest "
          "first",
          "[limits]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--quiet", "--max-object-store-mib", "4"}});
  auto http = executor.client();
  CHECK(executor.metric("courier_object_store_limit_bytes") == 4 << 20);
  std::vector<std::string> objects;
  for (int i = 0; i < 3; ++i) {
    objects.push_back(uniqueBytes(1536 << 10));
    httplib::Result stored = putObject(*http, objects.back());
    REQUIRE(stored);
    CHECK(stored->status == 201);
  }
  // 4.5 MiB would not fit: the oldest went.
  CHECK(objectStatus(*http, objects[0]) == 404);
  CHECK(objectStatus(*http, objects[1]) == 200);
  CHECK(objectStatus(*http, objects[2]) == 200);
  CHECK(executor.metric("courier_objects_evicted_total") == 1);
  // Uploading one again makes it the newest: the next to go is the other.
  REQUIRE(putObject(*http, objects[1])->status == 200);
  objects.push_back(uniqueBytes(1536 << 10));
  REQUIRE(putObject(*http, objects.back())->status == 201);
  CHECK(objectStatus(*http, objects[1]) == 200);
  CHECK(objectStatus(*http, objects[2]) == 404);
  CHECK(executor.metric("courier_objects_evicted_total") == 2);
  CHECK(executor.metric("courier_object_bytes") <= 4 << 20);
}

TEST_CASE("twenty unattached 8 MiB uploads to a 16 MiB store leave the executor's memory "
          "within the bound",
          "[limits][memory]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--quiet", "--max-object-store-mib", "16"}});
  auto http = executor.client();
  long before = statusKiB(executor.processId(), "VmRSS");
  for (int i = 0; i < 20; ++i)
    REQUIRE(putObject(*http, uniqueBytes(8 << 20))->status == 201);
  CHECK(executor.metric("courier_object_bytes") <= 16 << 20);
  CHECK(executor.metric("courier_objects_evicted_total") == 18);
  // 160 MiB were uploaded; the store holds 16 and a request one body at a time.
  long grownKiB = statusKiB(executor.processId(), "VmRSS") - before;
  INFO("the executor's memory grew by " << grownKiB << " KiB");
  CHECK(grownKiB < (96 << 10));
}

TEST_CASE("with objects sessions hold filling the store, the next upload is refused with 507 "
          "store_full and the executor keeps serving",
          "[limits]") {
  ExecutorProcess executor(ExecutorConfig{0, "", {"--quiet", "--max-object-store-mib", "1"}});
  auto http = executor.client();
  std::string session = openSession(*http);
  std::string held = paddedScale(640 << 10, 'a');
  std::string heldSha = wire::sha256Hex(held);
  REQUIRE(putObject(*http, held)->status == 201);
  httplib::Result attached = http->Post("/v1/sessions/" + session + "/objects/" + heldSha);
  REQUIRE(attached);
  REQUIRE(attached->status == 200);

  std::string next = paddedScale(640 << 10, 'b');
  ErrorReply full = errorOf(putObject(*http, next));
  CHECK(full.status == 507);
  CHECK(full.code == "store_full");
  CHECK_THAT(full.message, Catch::Contains(std::to_string(next.size()) + " bytes") &&
                               Catch::Contains(std::to_string(held.size()) + " bytes") &&
                               Catch::Contains("--max-object-store-mib 1"));
  CHECK(objectStatus(*http, next) == 404);
  // What fits beside the held object is stored, and the held object still launches.
  std::string small = uniqueBytes(64 << 10);
  CHECK(putObject(*http, small)->status == 201);
  std::vector<double> values = {1, 2, 3, 4};
  json header = {{"object", heldSha},
                 {"entry", "_catalyst_pyface_scale"},
                 {"inputs", {{{"elemSize", 8}, {"sizes", {4}}, {"offset", 0}, {"bytes", 32}}}},
                 {"results", {{{"rank", 1}, {"elemSize", 8}}}}};
  std::string frame =
      header.dump() + "\n" + std::string(reinterpret_cast<const char *>(values.data()), 32);
  httplib::Result launched =
      http->Post("/v1/sessions/" + session + "/launch", frame, wire::kFrameContentType);
  REQUIRE(launched);
  CHECK(launched->status == 200);
  // Once released, the held object is evicted like any other.
  REQUIRE(http->Delete("/v1/sessions/" + session + "/objects/" + heldSha)->status == 200);
  CHECK(putObject(*http, next)->status == 201);
  CHECK(objectStatus(*http, held) == 404);
  CHECK(executor.metric("courier_object_bytes") <= 1 << 20);
}
