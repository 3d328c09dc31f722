// REST invoke overhead and the cost of module workers: the same entries called through two
// courier-serve processes alive at once, one isolated (each module in its worker, the
// default) and one with --isolation none, as JSON tensors and as raw-bytes frames, and
// through Module::invoke in this process (in-process and isolated engines), for a 16-byte and
// a 16 MiB tensor; the 16 MiB tensor as JSON each way, beside courier-serve's reading and
// printing of it in this process and their floors (a bare simdjson walk, a bare std::to_chars
// loop); then hot reload latency (save -> first answer from the new version) of
// the two servers in watch mode. First, the KServe v2 infer beside the /v1 invoke on each
// server (`courier-serve-bench v2` runs only that). Paths alternate so outside load falls on
// all of them alike.
// Prints each path's times, its ratio to the in-process call and the isolated/none ratios
// (see docs/performance.md).
#include "bench/BenchSupport.h"
#include "jit/Engine.h"
#include "serve/JsonInputs.h"
#include "tests/support/ServerProcess.h"

#include "llvm/Support/JSON.h"

#include <httplib.h>
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <sys/wait.h>
#include <thread>
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
  func.func public @absorb(%x: tensor<4194304xf32>) -> tensor<1xf32> {
    %y = tensor.extract_slice %x[0] [1] [1] : tensor<4194304xf32> to tensor<1xf32>
    return %y : tensor<1xf32>
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
  Server(const std::string &cacheDir, std::vector<std::string> extra) {
    int out[2];
    if (pipe(out) != 0)
      die("pipe failed");
    // Every client is the benchmark, from one address: no per-client limit.
    std::vector<std::string> args = {COURIER_SERVE_PATH,
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--quiet",
                                     "--max-body-bytes",
                                     "1073741824",
                                     "--cache-dir",
                                     cacheDir,
                                     "--max-connections-per-client",
                                     "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid = fork();
    if (pid == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      std::vector<char *> argv;
      for (std::string &arg : args)
        argv.push_back(arg.data());
      argv.push_back(nullptr);
      execv(COURIER_SERVE_PATH, argv.data());
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
  pid_t processId() const { return pid; }
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

/// Posts `body` with `headers` through a content provider (so the client does not copy it
/// again) and returns the response body; dies on anything but 200.
std::string postWith(httplib::Client &http, const std::string &path,
                     const httplib::Headers &headers, const std::string &body, const char *type) {
  httplib::Result res = http.Post(
      path.c_str(), headers, body.size(),
      [&](size_t offset, size_t length, httplib::DataSink &sink) {
        return sink.write(body.data() + offset, std::min<size_t>(length, 1 << 20));
      },
      type);
  if (!res || res->status != 200)
    die("POST " + path + " failed: " + (res ? res->body : httplib::to_string(res.error())));
  return std::move(res->body);
}

/// postWith() without headers of its own.
std::string post(httplib::Client &http, const std::string &path, const std::string &body,
                 const char *type) {
  return postWith(http, path, {}, body, type);
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

/// Runs `rounds` rounds; in each, every path runs `perRound` calls, one path after another,
/// starting from a different path each round. Keeps each round's p50 per path.
void measure(std::vector<Path> &paths, int rounds, int perRound,
             std::vector<std::vector<double>> &roundP50s) {
  for (Path &path : paths) // Warm up connections, caches and page faults.
    path.call();
  roundP50s.assign(paths.size(), {});
  for (int round = 0; round < rounds; ++round)
    for (size_t k = 0; k < paths.size(); ++k) {
      size_t p = (k + round) % paths.size();
      Path &path = paths[p];
      std::vector<double> samples;
      for (int i = 0; i < perRound; ++i) {
        auto start = Clock::now();
        path.call();
        samples.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      }
      roundP50s[p].push_back(percentile(samples, 0.5));
      path.seconds.insert(path.seconds.end(), samples.begin(), samples.end());
    }
}

/// The median over rounds of path `a`'s round p50 over path `b`'s.
double roundRatio(const std::vector<std::vector<double>> &roundP50s, size_t a, size_t b) {
  std::vector<double> ratios;
  for (size_t r = 0; r < roundP50s[a].size(); ++r)
    ratios.push_back(roundP50s[a][r] / roundP50s[b][r]);
  return percentile(ratios, 0.5);
}

void report(const char *title, std::vector<Path> &paths,
            const std::vector<std::vector<double>> &roundP50s,
            const std::vector<std::pair<size_t, size_t>> &pairs) {
  std::printf("\n%s\n", title);
  std::printf("| path | p50 | p90 | p50 / in-process |\n|---|---|---|---|\n");
  double base = percentile(paths[0].seconds, 0.5);
  for (Path &path : paths) {
    double p50 = percentile(path.seconds, 0.5);
    std::printf("| %s | %s | %s | %.1f× |\n", path.name, microseconds(p50).c_str(),
                microseconds(percentile(path.seconds, 0.9)).c_str(), p50 / base);
  }
  for (auto [a, b] : pairs)
    std::printf("%s / %s: p50 %.3f×, median of round ratios %.3f×\n", paths[a].name, paths[b].name,
                percentile(paths[a].seconds, 0.5) / percentile(paths[b].seconds, 0.5),
                roundRatio(roundP50s, a, b));
  std::fflush(stdout);
}

/// The KServe v2 infer against the /v1 invoke it stands beside, on one server: a small tensor
/// as JSON each way (/v2 JSON tensors against a /v1 JSON invoke), and the 16 MiB tensor as
/// binary data in and out (Triton's binary tensor data extension) against a /v1 frame.
void kserve(httplib::Client &http, const char *server, const Tensor &small, const Tensor &big,
            bool smoke) {
  std::string smallJson = jsonBody(small), bigFrame = frameBody(big);
  std::string smallV2 = "{\"inputs\":[{\"name\":\"input0\",\"datatype\":\"FP32\",\"shape\":[4],"
                        "\"data\":[1,2,3,4]}]}";
  std::string header = "{\"inputs\":[{\"name\":\"input0\",\"datatype\":\"FP32\",\"shape\":[" +
                       std::to_string(big.shape[0]) + "],\"parameters\":{\"binary_data_size\":" +
                       std::to_string(big.bytes.size()) +
                       "}}],\"parameters\":{\"binary_data_output\":true}}";
  std::string bigV2 = header;
  bigV2.append(reinterpret_cast<const char *>(big.bytes.data()), big.bytes.size());
  httplib::Headers binary = {{"Inference-Header-Content-Length", std::to_string(header.size())}};
  // The replies carry the same numbers, each its own way.
  std::string v1Reply =
      post(http, "/v1/modules/bench/invoke/big", bigFrame, "application/x-courier-frame");
  std::string v2Reply =
      postWith(http, "/v2/models/bench.big/infer", binary, bigV2, "application/octet-stream");
  if (v1Reply.size() < big.bytes.size() || v2Reply.size() < big.bytes.size() ||
      std::memcmp(v1Reply.data() + v1Reply.size() - big.bytes.size(),
                  v2Reply.data() + v2Reply.size() - big.bytes.size(), big.bytes.size()) != 0)
    die("the /v2 binary reply's tensor is not the /v1 frame's");
  std::vector<std::vector<double>> roundP50s;
  std::vector<Path> smallPaths = {
      {"/v1 invoke, JSON",
       [&] { post(http, "/v1/modules/bench/invoke/small", smallJson, "application/json"); },
       {}},
      {"/v2 infer, JSON",
       [&] { post(http, "/v2/models/bench.small/infer", smallV2, "application/json"); },
       {}},
  };
  measure(smallPaths, smoke ? 1 : 20, smoke ? 10 : 500, roundP50s);
  std::string title = std::string("KServe v2 beside /v1, ") + server + ": small tensor (16 B)";
  report(title.c_str(), smallPaths, roundP50s, {{1, 0}});
  std::vector<Path> bigPaths = {
      {"/v1 invoke, frame",
       [&] { post(http, "/v1/modules/bench/invoke/big", bigFrame, "application/x-courier-frame"); },
       {}},
      {"/v2 infer, binary data",
       [&] {
         postWith(http, "/v2/models/bench.big/infer", binary, bigV2, "application/octet-stream");
       },
       {}},
  };
  measure(bigPaths, smoke ? 1 : 11, smoke ? 1 : 3, roundP50s);
  title = std::string("KServe v2 beside /v1, ") + server + ": 16 MiB tensor (16 MiB in and out)";
  report(title.c_str(), bigPaths, roundP50s, {{1, 0}});
  std::printf("throughput /v2 binary / /v1 frame: %.3f (median of round ratios)\n",
              roundRatio(roundP50s, 0, 1));
}

/// A program whose answer tells its version: `main` returns x * factor.
std::string reloadModule(int factor) {
  return "module {\n  func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
         "    %f = arith.constant dense<" +
         std::to_string(factor) +
         ".0> : tensor<4xf32>\n"
         "    %y = arith.mulf %x, %f : tensor<4xf32>\n"
         "    return %y : tensor<4xf32>\n  }\n}\n";
}

/// Saves `text` as editors do (a new file renamed over the old) and returns when the server
/// first answers with `expected` as main's first output element; the seconds it took.
double reloadOnce(httplib::Client &http, const std::string &dir, const std::string &text,
                  double expected) {
  std::string path = dir + "/reload.mlir";
  std::ofstream(path + ".tmp") << text;
  auto start = Clock::now();
  std::rename((path + ".tmp").c_str(), path.c_str());
  std::string want = "\"data\":[" + std::to_string(static_cast<int>(expected));
  while (Clock::now() - start < std::chrono::seconds(60)) {
    httplib::Result res = http.Post("/v1/modules/reload/invoke/main",
                                    R"({"inputs": [[1, 2, 3, 4]]})", "application/json");
    if (res && res->status == 200 && res->body.find(want) != std::string::npos)
      return std::chrono::duration<double>(Clock::now() - start).count();
  }
  die("a reload did not land within 60 s");
}

/// Invoke throughput and latency of one courier-serve (module workers, the default; the
/// module in `workers` of them) for 1 to 256 concurrent keep-alive clients, each calling
/// `small` with a JSON tensor: how throughput grows with clients, and whether any is starved.
void clients(const std::string &dir, unsigned workers) {
  Server server(dir + "/serve-clients-" + std::to_string(workers),
                {"--workers-per-module", std::to_string(workers)});
  std::string body;
  llvm::raw_string_ostream os(body);
  os << llvm::json::Value(llvm::json::Object{{"name", "bench"}, {"mlir", kModule}});
  auto connect = [&] {
    auto http = std::make_unique<httplib::Client>("127.0.0.1", server.port);
    http->set_tcp_nodelay(true);
    http->set_keep_alive(true);
    http->set_read_timeout(std::chrono::seconds(60));
    return http;
  };
  httplib::Result created = connect()->Post("/v1/modules", body, "application/json");
  if (!created || created->status != 201)
    die("creating the module: " + (created ? created->body : httplib::to_string(created.error())));
  std::string input = jsonBody(Tensor::fromDoubles(DType::F32, {4}, {1, 2, 3, 4}));
  std::printf("== invokes of a tensor<4xf32> entry (JSON) from N concurrent keep-alive "
              "clients, --workers-per-module %u\n",
              workers);
  bench::ClientsBenchmark benchmark;
  benchmark.calls = "invokes";
  std::vector<std::unique_ptr<httplib::Client>> https;
  benchmark.connect = [&](int n) {
    https.clear();
    for (int c = 0; c < n; ++c)
      https.push_back(connect());
    return [&](int c) {
      post(*https[c], "/v1/modules/bench/invoke/small", input, "application/json");
    };
  };
  benchmark.serverCpuSeconds = [&] { return testing::cpuSecondsOfTree(server.processId()); };
  benchmark.port = server.port;
  benchmark.rawRequest = [&](int) {
    return "POST /v1/modules/bench/invoke/small HTTP/1.1\r\nHost: 127.0.0.1:" +
           std::to_string(server.port) +
           "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(input.size()) +
           "\r\n\r\n" + input;
  };
  bench::runClientsBenchmark(std::move(benchmark));
}

/// What the tables share: the module compiled in this process and in a worker, two servers
/// holding it (isolated and --isolation none, each watching a folder of its own for the
/// reload table), clients of both, and the two input tensors.
struct Fixture {
  explicit Fixture(const std::string &dir);
  /// `entry` of `target` called in this process on `input`.
  static std::function<void()> local(const std::shared_ptr<Module> &target, const char *entry,
                                     const Tensor &input) {
    return [&target, &input, entry] {
      llvm::Expected<std::vector<Tensor>> out = target->invoke(entry, input);
      if (!out)
        die(llvm::toString(out.takeError()));
    };
  }
  /// `entry` invoked through `http` with `body` of content type `type`.
  static std::function<void()> rest(httplib::Client &http, const char *entry,
                                    const std::string &body, const char *type) {
    std::string path = std::string("/v1/modules/bench/invoke/") + entry;
    return [&http, &body, path, type] { post(http, path, body, type); };
  }

  std::string dir;
  Engine engine, isolatedEngine;
  std::shared_ptr<Module> module, isolatedModule;
  std::string isolatedWatch, noneWatch;
  std::unique_ptr<Server> isolated, none;
  std::unique_ptr<httplib::Client> isolatedHttp, noneHttp;
  Tensor small, big;
};

EngineOptions engineOptions(const std::string &dir, Isolation isolation) {
  EngineOptions options;
  options.cacheDir = dir + "/engine";
  options.isolation = isolation;
  return options;
}

std::shared_ptr<Module> compileOrDie(Engine &engine, const char *what) {
  llvm::Expected<std::shared_ptr<Module>> module = engine.compile(kModule, "bench");
  if (!module)
    die(std::string(what) + ": " + llvm::toString(module.takeError()));
  return *module;
}

/// A client of `server` holding the module "bench".
std::unique_ptr<httplib::Client> connect(const Server &server) {
  auto http = std::make_unique<httplib::Client>("127.0.0.1", server.port);
  http->set_tcp_nodelay(true);
  http->set_keep_alive(true);
  http->set_read_timeout(std::chrono::seconds(300));
  http->set_write_timeout(std::chrono::seconds(300));
  std::string body;
  llvm::raw_string_ostream os(body);
  os << llvm::json::Value(llvm::json::Object{{"name", "bench"}, {"mlir", kModule}});
  httplib::Result res = http->Post("/v1/modules", body, "application/json");
  if (!res || res->status != 201)
    die("creating the module: " + (res ? res->body : httplib::to_string(res.error())));
  return http;
}

Fixture::Fixture(const std::string &dir)
    : dir(dir), engine(engineOptions(dir, Isolation::InProcess)),
      isolatedEngine(engineOptions(dir, Isolation::Process)),
      module(compileOrDie(engine, "compiling")),
      isolatedModule(compileOrDie(isolatedEngine, "compiling in a worker")),
      isolatedWatch(dir + "/watch-isolated"), noneWatch(dir + "/watch-none") {
  std::filesystem::create_directories(isolatedWatch);
  std::filesystem::create_directories(noneWatch);
  std::ofstream(isolatedWatch + "/reload.mlir") << reloadModule(1);
  std::ofstream(noneWatch + "/reload.mlir") << reloadModule(1);
  isolated = std::make_unique<Server>(dir + "/serve-isolated",
                                      std::vector<std::string>{"--watch", isolatedWatch});
  none = std::make_unique<Server>(
      dir + "/serve-none", std::vector<std::string>{"--isolation", "none", "--watch", noneWatch});
  isolatedHttp = connect(*isolated);
  noneHttp = connect(*none);
  std::vector<double> values(kBigElements);
  for (int64_t i = 0; i < kBigElements; ++i)
    values[i] = static_cast<double>(i % 1000) * 0.5;
  small = Tensor::fromDoubles(DType::F32, {4}, {1, 2, 3, 4});
  big = Tensor::fromDoubles(DType::F32, {kBigElements}, values);
}

constexpr const char *kJson = "application/json", *kFrame = "application/x-courier-frame";

/// The request bodies of the tables: each of the fixture's tensors as JSON and as a frame.
struct Bodies {
  explicit Bodies(const Fixture &f)
      : smallJson(jsonBody(f.small)), smallFrame(frameBody(f.small)), bigJson(jsonBody(f.big)),
        bigFrame(frameBody(f.big)) {
    // Room past the end, as the server's body has: simdjson reads up to 64 bytes beyond it.
    bigJson.reserve(bigJson.size() + simdjson::SIMDJSON_PADDING);
  }
  std::string smallJson, smallFrame, bigJson, bigFrame;
};

/// The small and the 16 MiB tensor through every path, JSON and frames.
void pathTables(Fixture &f, const Bodies &bodies, bool smoke) {
  const std::string &smallJson = bodies.smallJson, &smallFrame = bodies.smallFrame,
                    &bigFrame = bodies.bigFrame;
  // Rows 2-5: none then isolated, JSON then frame; the pairs compare each isolated row with
  // its none row.
  const std::vector<std::pair<size_t, size_t>> pairs = {{1, 0}, {3, 2}, {5, 4}};
  std::vector<std::vector<double>> roundP50s;
  std::vector<Path> smallPaths = {
      {"Module::invoke (in-process)", Fixture::local(f.module, "small", f.small), {}},
      {"Module::invoke (isolated)", Fixture::local(f.isolatedModule, "small", f.small), {}},
      {"REST none, JSON", Fixture::rest(*f.noneHttp, "small", smallJson, kJson), {}},
      {"REST isolated, JSON", Fixture::rest(*f.isolatedHttp, "small", smallJson, kJson), {}},
      {"REST none, frame", Fixture::rest(*f.noneHttp, "small", smallFrame, kFrame), {}},
      {"REST isolated, frame", Fixture::rest(*f.isolatedHttp, "small", smallFrame, kFrame), {}},
  };
  measure(smallPaths, smoke ? 1 : 20, smoke ? 10 : 500, roundP50s);
  report("small tensor (16 B in, 16 B out)", smallPaths, roundP50s, pairs);

  // JSON says nothing about workers: frames only here, JSON in its own table below.
  std::vector<Path> bigPaths = {
      {"Module::invoke (in-process)", Fixture::local(f.module, "big", f.big), {}},
      {"Module::invoke (isolated)", Fixture::local(f.isolatedModule, "big", f.big), {}},
      {"REST none, frame", Fixture::rest(*f.noneHttp, "big", bigFrame, kFrame), {}},
      {"REST isolated, frame", Fixture::rest(*f.isolatedHttp, "big", bigFrame, kFrame), {}},
  };
  measure(bigPaths, smoke ? 1 : 11, 1, roundP50s);
  report("16 MiB tensor (16 MiB in, 16 MiB out)", bigPaths, roundP50s, {{1, 0}, {3, 2}});
  std::printf("throughput isolated / none (REST frame): %.3f (median of round ratios)\n",
              roundRatio(roundP50s, 2, 3));
}

/// Prints `tensor` as JSON, setting `bytes` to the text's size.
std::function<void()> printing(const Tensor &tensor, size_t &bytes) {
  return [&tensor, &bytes] {
    std::string text;
    writeTensorJSON(text, tensor);
    bytes = text.size();
  };
}

/// The floor of printing `tensor`'s kBigElements f32s: a bare std::to_chars loop into `text`.
std::function<void()> toCharsLoop(const Tensor &tensor, std::vector<char> &text) {
  return [&tensor, &text] {
    char *p = text.data(), *end = p + text.size();
    for (int64_t i = 0; i < kBigElements; ++i) {
      float v;
      std::memcpy(&v, tensor.bytes.data() + i * sizeof(float), sizeof(v));
      p = std::to_chars(p, end, v).ptr;
      *p++ = ',';
    }
  };
}

/// The floor of reading `body`: a bare simdjson walk of its first input's data into `floats`.
std::function<void()> bareWalk(simdjson::ondemand::parser &parser, const std::string &body,
                               std::vector<float> &floats) {
  return [&parser, &body, &floats] {
    simdjson::ondemand::document doc;
    simdjson::ondemand::array data;
    if (parser.iterate(body.data(), body.size(), body.capacity()).get(doc) ||
        doc["inputs"].at(0)["data"].get_array().get(data))
      die("the bare simdjson walk could not read the body");
    size_t k = 0;
    for (auto element : data) {
      double v;
      if (element.get_double().get(v) || k == floats.size())
        die("the bare simdjson walk found no number");
      floats[k++] = static_cast<float>(v);
    }
  };
}

/// JSON at 16 MiB: the whole call, and one that reads the same JSON but answers a single
/// element, so the time of each way can be told apart; beside them the frame path, and the
/// pieces of the server's work done in this process (its reading and its printing), each next
/// to its floor: a bare simdjson walk of the same body and a bare std::to_chars loop over the
/// same numbers. The results of `big` are whole numbers, so the printing is measured on
/// random floats in [0, 1) (nine significant digits) too.
void jsonTable(Fixture &f, const std::string &bigJson, const std::string &bigFrame, bool smoke) {
  std::string bigReply = post(*f.noneHttp, "/v1/modules/bench/invoke/big", bigJson, kJson);
  const EntrySignature *bigEntry = f.module->findEntry("big");
  llvm::Expected<std::vector<Tensor>> bigOut = f.module->invoke("big", f.big);
  if (!bigEntry || !bigOut)
    die("calling big in this process");
  std::vector<double> fractions(kBigElements);
  std::mt19937 random(1);
  std::uniform_real_distribution<float> unit(0, 1);
  for (double &v : fractions)
    v = unit(random);
  Tensor results = std::move(bigOut->front());
  Tensor randomFloats = Tensor::fromDoubles(DType::F32, {kBigElements}, fractions);
  std::vector<char> toCharsText(static_cast<size_t>(kBigElements) * 16 + 64);
  size_t resultsTextBytes = 0, randomTextBytes = 0;
  simdjson::ondemand::parser bareParser;
  std::vector<float> bareFloats(kBigElements);
  auto serverReading = [&] {
    if (!serve::readInputsFast(bigJson, *bigEntry, bigJson.capacity()))
      die("courier-serve's reading did not take the body");
  };
  std::vector<Path> jsonPaths = {
      {"Module::invoke (in-process)", Fixture::local(f.module, "big", f.big), {}},
      {"REST none, JSON", Fixture::rest(*f.noneHttp, "big", bigJson, kJson), {}},
      {"REST none, JSON in, one element out",
       Fixture::rest(*f.noneHttp, "absorb", bigJson, kJson),
       {}},
      {"REST none, frame", Fixture::rest(*f.noneHttp, "big", bigFrame, kFrame), {}},
      {"in-process: courier-serve's reading of the body", serverReading, {}},
      {"in-process: bare simdjson walk of the body", bareWalk(bareParser, bigJson, bareFloats), {}},
      {"in-process: writeTensorJSON of the results", printing(results, resultsTextBytes), {}},
      {"in-process: std::to_chars loop over the results", toCharsLoop(results, toCharsText), {}},
      {"in-process: writeTensorJSON of random floats", printing(randomFloats, randomTextBytes), {}},
      {"in-process: std::to_chars loop over random floats",
       toCharsLoop(randomFloats, toCharsText),
       {}},
  };
  std::vector<std::vector<double>> roundP50s;
  measure(jsonPaths, smoke ? 1 : 7, 1, roundP50s);
  report("16 MiB tensor as JSON", jsonPaths, roundP50s, {});
  auto p50 = [&](size_t i) { return percentile(jsonPaths[i].seconds, 0.5); };
  auto rate = [](size_t bytes, double seconds) { return bytes / 1e6 / seconds; };
  double whole = p50(1), in = p50(2);
  std::printf("JSON in: %.1f MB in %s, %.0f MB/s; JSON out: %.1f MB in %s (the difference), "
              "%.0f MB/s\n",
              bigJson.size() / 1e6, microseconds(in).c_str(), rate(bigJson.size(), in),
              bigReply.size() / 1e6, microseconds(whole - in).c_str(),
              rate(bigReply.size(), whole - in));
  std::printf("in-process, reading %.1f MB: courier-serve's %.0f MB/s, bare simdjson walk "
              "%.0f MB/s\n",
              bigJson.size() / 1e6, rate(bigJson.size(), p50(4)), rate(bigJson.size(), p50(5)));
  std::printf("in-process, printing the results (%.1f MB): writeTensorJSON %.0f MB/s, "
              "std::to_chars %.0f MB/s; random floats (%.1f MB): %.0f and %.0f MB/s\n",
              resultsTextBytes / 1e6, rate(resultsTextBytes, p50(6)),
              rate(resultsTextBytes, p50(7)), randomTextBytes / 1e6, rate(randomTextBytes, p50(8)),
              rate(randomTextBytes, p50(9)));
}

/// Hot reload, alternating servers; each save changes the answer.
void reloadTable(Fixture &f, bool smoke) {
  std::vector<double> reloadIsolated, reloadNone;
  int reloads = smoke ? 2 : 15;
  for (int i = 0; i < reloads; ++i) {
    int factor = 2 + i;
    bool isolatedFirst = i % 2 == 0;
    for (int k = 0; k < 2; ++k) {
      bool doIsolated = (k == 0) == isolatedFirst;
      double seconds =
          reloadOnce(doIsolated ? *f.isolatedHttp : *f.noneHttp,
                     doIsolated ? f.isolatedWatch : f.noneWatch, reloadModule(factor), factor);
      (doIsolated ? reloadIsolated : reloadNone).push_back(seconds);
    }
  }
  std::vector<double> ratios;
  for (size_t i = 0; i < reloadIsolated.size(); ++i)
    ratios.push_back(reloadIsolated[i] / reloadNone[i]);
  std::printf("\nhot reload in watch mode (save -> first answer from the new version), %d each\n"
              "| server | p50 | p90 |\n|---|---|---|\n| isolated | %s | %s |\n| none | %s | %s |\n"
              "isolated / none: p50 %.3f×, median of pair ratios %.3f×\n",
              reloads, microseconds(percentile(reloadIsolated, 0.5)).c_str(),
              microseconds(percentile(reloadIsolated, 0.9)).c_str(),
              microseconds(percentile(reloadNone, 0.5)).c_str(),
              microseconds(percentile(reloadNone, 0.9)).c_str(),
              percentile(reloadIsolated, 0.5) / percentile(reloadNone, 0.5),
              percentile(ratios, 0.5));
}

/// Every table but the many-clients one; with `v2Only`, only the KServe v2 one.
void tables(const std::string &dir, bool smoke, bool v2Only) {
  Fixture f(dir);
  kserve(*f.isolatedHttp, "isolated", f.small, f.big, smoke);
  kserve(*f.noneHttp, "none", f.small, f.big, smoke);
  if (v2Only)
    return;
  Bodies bodies(f);
  std::printf("courier-serve-bench: small = tensor<4xf32> (16 B), big = tensor<%lldxf32> "
              "(16 MiB; %.1f MB as JSON)\n",
              static_cast<long long>(kBigElements), bodies.bigJson.size() / 1e6);
  pathTables(f, bodies, smoke);
  jsonTable(f, bodies.bigJson, bodies.bigFrame, smoke);
  reloadTable(f, smoke);
}

} // namespace

int main(int argc, char **argv) {
  llvm::StringRef mode = argc > 1 ? argv[1] : "";
  std::signal(SIGPIPE, SIG_IGN);
  char pattern[] = "/tmp/courier-serve-bench-XXXXXX";
  if (!mkdtemp(pattern))
    die("cannot create a temporary directory");
  std::string dir = pattern;
  if (mode == "clients") {
    // The module in one worker, then in two, in one run.
    for (unsigned workers : {1u, 2u})
      clients(dir, workers);
  } else {
    tables(dir, mode == "smoke", mode == "v2");
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return 0;
}
