// REST invoke overhead: the same entries called through courier-serve (JSON tensors and
// raw-bytes frames) and through Module::invoke in this process, for a 16-byte and a 16 MiB
// tensor, alternating between the paths so outside load falls on all of them alike. Prints
// each path's times and its ratio to the in-process call (see docs/performance.md).
#include "jit/Engine.h"

#include "llvm/Support/JSON.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace courier;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kBigElements = int64_t(4) << 20; // f32: 16 MiB

// Both entries double their input, so the work per byte is the same and small.
const char *const kModule = R"(module @bench {
  func.func public @small(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = arith.addf %x, %x : tensor<4xf32>
    return %y : tensor<4xf32>
  }
  func.func public @big(%x: tensor<4194304xf32>) -> tensor<4194304xf32> {
    %y = arith.addf %x, %x : tensor<4194304xf32>
    return %y : tensor<4194304xf32>
  }
}
)";

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "courier-serve-bench: %s\n", message.c_str());
  std::exit(1);
}

/// A courier-serve process on a free loopback port, terminated when this goes away.
class Server {
public:
  explicit Server(const std::string &cacheDir) {
    int out[2];
    if (pipe(out) != 0)
      die("pipe failed");
    pid = fork();
    if (pid == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      execl(COURIER_SERVE_PATH, COURIER_SERVE_PATH, "--listen", "127.0.0.1:0", "--quiet",
            "--max-body-bytes", "1073741824", "--cache-dir", cacheDir.c_str(),
            static_cast<char *>(nullptr));
      _exit(127);
    }
    close(out[1]);
    std::string line;
    char c;
    while (read(out[0], &c, 1) == 1 && c != '\n')
      line.push_back(c);
    close(out[0]);
    if (line.rfind("listening on ", 0) != 0)
      die("courier-serve did not start: " + line);
    port = std::stoi(line.substr(line.rfind(':') + 1));
  }
  ~Server() {
    kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
  }
  int port = 0;

private:
  pid_t pid = -1;
};

double percentile(std::vector<double> samples, double p) {
  std::sort(samples.begin(), samples.end());
  size_t index = std::min(samples.size() - 1, static_cast<size_t>(p * samples.size()));
  return samples[index];
}

std::string microseconds(double seconds) {
  char text[32];
  if (seconds >= 1e-3)
    std::snprintf(text, sizeof(text), "%.1f ms", seconds * 1e3);
  else if (seconds >= 1e-5)
    std::snprintf(text, sizeof(text), "%.1f µs", seconds * 1e6);
  else
    std::snprintf(text, sizeof(text), "%.2f µs", seconds * 1e6);
  return text;
}

/// Posts `body` through a content provider (so the client does not copy it again) and
/// returns the response body; dies on anything but 200.
std::string post(httplib::Client &http, const std::string &path, const std::string &body,
                 const char *type) {
  httplib::Result res = http.Post(
      path.c_str(), body.size(),
      [&](size_t offset, size_t length, httplib::DataSink &sink) {
        return sink.write(body.data() + offset, std::min<size_t>(length, 1 << 20));
      },
      type);
  if (!res || res->status != 200)
    die("POST " + path + " failed: " + (res ? res->body : httplib::to_string(res.error())));
  return std::move(res->body);
}

std::string jsonBody(const Tensor &tensor) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::json::Value(llvm::json::Object{{"inputs", llvm::json::Array{tensorToJSON(tensor)}}});
  return text;
}

std::string frameBody(const Tensor &tensor) {
  std::string text =
      "{\"inputs\":[{\"dtype\":\"f32\",\"shape\":[" + std::to_string(tensor.shape[0]) + "]}]}\n";
  text.append(reinterpret_cast<const char *>(tensor.bytes.data()), tensor.bytes.size());
  return text;
}

struct Path {
  const char *name;
  std::function<void()> call;
  std::vector<double> seconds;
};

/// Runs `rounds` rounds; in each, every path runs `perRound` calls, one path after another.
void measure(std::vector<Path> &paths, int rounds, int perRound) {
  for (Path &path : paths) // Warm up connections, caches and page faults.
    path.call();
  for (int round = 0; round < rounds; ++round)
    for (Path &path : paths)
      for (int i = 0; i < perRound; ++i) {
        auto start = Clock::now();
        path.call();
        path.seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      }
}

void report(const char *title, std::vector<Path> &paths) {
  std::printf("\n%s\n", title);
  std::printf("| path | p50 | p90 | p50 / in-process |\n|---|---|---|---|\n");
  double base = percentile(paths[0].seconds, 0.5);
  for (Path &path : paths) {
    double p50 = percentile(path.seconds, 0.5);
    std::printf("| %s | %s | %s | %.1f× |\n", path.name, microseconds(p50).c_str(),
                microseconds(percentile(path.seconds, 0.9)).c_str(), p50 / base);
  }
  std::fflush(stdout);
}

} // namespace

int main(int argc, char **argv) {
  bool smoke = argc > 1 && std::strcmp(argv[1], "smoke") == 0;
  std::signal(SIGPIPE, SIG_IGN);
  char pattern[] = "/tmp/courier-serve-bench-XXXXXX";
  if (!mkdtemp(pattern))
    die("cannot create a temporary directory");
  std::string dir = pattern;

  EngineOptions options;
  options.cacheDir = dir + "/engine";
  Engine engine(options);
  llvm::Expected<std::shared_ptr<Module>> module = engine.compile(kModule, "bench");
  if (!module)
    die("compiling: " + llvm::toString(module.takeError()));

  Server server(dir + "/serve");
  httplib::Client http("127.0.0.1", server.port);
  http.set_tcp_nodelay(true);
  http.set_keep_alive(true);
  http.set_read_timeout(std::chrono::seconds(300));
  http.set_write_timeout(std::chrono::seconds(300));
  {
    std::string body;
    llvm::raw_string_ostream os(body);
    os << llvm::json::Value(llvm::json::Object{{"name", "bench"}, {"mlir", kModule}});
    httplib::Result res = http.Post("/v1/modules", body, "application/json");
    if (!res || res->status != 201)
      die("creating the module: " + (res ? res->body : httplib::to_string(res.error())));
  }

  std::vector<double> values(kBigElements);
  for (int64_t i = 0; i < kBigElements; ++i)
    values[i] = static_cast<double>(i % 1000) * 0.5;
  Tensor small = Tensor::fromDoubles(DType::F32, {4}, {1, 2, 3, 4});
  Tensor big = Tensor::fromDoubles(DType::F32, {kBigElements}, values);
  std::string smallJson = jsonBody(small), smallFrame = frameBody(small);
  std::string bigJson = jsonBody(big), bigFrame = frameBody(big);
  std::printf("courier-serve-bench: small = tensor<4xf32> (16 B), big = tensor<%lldxf32> "
              "(16 MiB; %.1f MB as JSON)\n",
              static_cast<long long>(kBigElements), bigJson.size() / 1e6);

  auto inProcess = [&](const char *entry, const Tensor &input) {
    return [&, entry] {
      llvm::Expected<std::vector<Tensor>> out = (*module)->invoke(entry, input);
      if (!out)
        die(llvm::toString(out.takeError()));
    };
  };
  auto rest = [&](const char *entry, const std::string &body, const char *type) {
    std::string path = std::string("/v1/modules/bench/invoke/") + entry;
    return [&, path, type] { post(http, path, body, type); };
  };
  const char *json = "application/json", *frame = "application/x-courier-frame";

  std::vector<Path> smallPaths = {
      {"Module::invoke (in-process)", inProcess("small", small), {}},
      {"REST, JSON tensors", rest("small", smallJson, json), {}},
      {"REST, raw-bytes frame", rest("small", smallFrame, frame), {}},
  };
  measure(smallPaths, smoke ? 1 : 20, smoke ? 10 : 500);
  report("small tensor (16 B in, 16 B out)", smallPaths);

  std::vector<Path> bigPaths = {
      {"Module::invoke (in-process)", inProcess("big", big), {}},
      {"REST, JSON tensors", rest("big", bigJson, json), {}},
      {"REST, raw-bytes frame", rest("big", bigFrame, frame), {}},
  };
  measure(bigPaths, smoke ? 1 : 7, 1);
  report("16 MiB tensor (16 MiB in, 16 MiB out)", bigPaths);

  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return 0;
}
