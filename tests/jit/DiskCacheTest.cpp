// The disk cache trusts nothing it has not checked: objects are re-hashed before use, the
// directory must be this user's alone, --no-disk-cache leaves it untouched, and its size
// stays under the bound with the least recently used files evicted first.
#include "jit/DiskCache.h"
#include "jit/Engine.h"

#include "abi/ContentHash.h"
#include "tests/jit/TestSupport.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <fcntl.h>
#include <map>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace courier;
using namespace courier::testing;

namespace {

/// Sets or clears an environment variable for one scope.
struct ScopedEnv {
  ScopedEnv(const char *name, const char *value) : name(name) {
    if (const char *old = std::getenv(name))
      previous = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (previous)
      ::setenv(name, previous->c_str(), 1);
    else
      ::unsetenv(name);
  }
  const char *name;
  std::optional<std::string> previous;
};

/// A kernel module adding `value` to its input.
std::string kernelAdding(const std::string &value) {
  return scaleProgram("local",
                      "%c = arith.constant dense<" + value +
                          "> : tensor<4xf64>\n      %r = arith.addf %x, %c : tensor<4xf64>");
}

std::vector<double> run(const Module &module) {
  auto out = module.invoke("main", {Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4})});
  REQUIRE(ok(out));
  std::vector<double> v;
  for (int64_t i = 0; i < (*out)[0].numElements(); ++i)
    v.push_back((*out)[0].at(i));
  return v;
}

/// Everything under `dir` (recursively), by path, with size and modification time: what a
/// read (which marks files used) or a write would change.
std::map<std::string, std::pair<uint64_t, int64_t>> snapshot(const std::string &dir) {
  std::map<std::string, std::pair<uint64_t, int64_t>> files;
  std::error_code ec;
  for (llvm::sys::fs::recursive_directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec)) {
    struct stat st;
    if (::lstat(it->path().c_str(), &st) == 0)
      files[it->path()] = {static_cast<uint64_t>(st.st_size),
                           int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  }
  return files;
}

/// The total size of the regular files under `dir`: what the bound counts.
uint64_t sizeOf(const std::string &dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (llvm::sys::fs::recursive_directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec)) {
    struct stat st;
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode))
      total += static_cast<uint64_t>(st.st_size);
  }
  return total;
}

/// The paths of the target objects in cache `dir`.
std::vector<std::string> objectsIn(const std::string &dir) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir + "/objects", ec), end; it != end && !ec;
       it.increment(ec))
    if (llvm::StringRef(it->path()).ends_with(".o"))
      paths.push_back(it->path());
  return paths;
}

void writeFile(const std::string &path, llvm::StringRef bytes) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  REQUIRE(!ec);
  os << bytes;
}

bool holdsItsHash(const std::string &path) {
  return sha256Hex(readFile(path)) == claimedContentHash(path);
}

std::string compileError(Engine &engine, const std::string &text) {
  auto module = engine.compile(text, "refused");
  REQUIRE(!module);
  return llvm::toString(module.takeError());
}

std::string hexKey(char c) { return std::string(64, c); }

/// Fills cache `dir` with `text` compiled as "app", by an engine gone once this returns.
void compileInto(const TempDir &dir, const std::string &text) {
  Engine engine(optionsIn(dir.path));
  REQUIRE(ok(engine.compile(text, "app")));
}

/// Sets the modification time of every file of host entry `key` to `secondsAgo` ago.
void age(const std::string &dir, const std::string &key, int secondsAgo) {
  struct timespec times[2];
  ::clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= secondsAgo;
  times[1] = times[0];
  for (const char *extension : {".o", ".manifest"})
    REQUIRE(::utimensat(AT_FDCWD, (dir + "/host/" + key + extension).c_str(), times, 0) == 0);
}

} // namespace

TEST_CASE("a target object whose bytes do not match its name is never run, and is rebuilt",
          "[cache]") {
  TempDir dir, other;
  std::string text = kernelAdding("1.0");
  {
    Engine engine(optionsIn(dir.path));
    auto module = engine.compile(text, "app");
    REQUIRE(ok(module));
    CHECK(run(**module) == std::vector<double>{2, 3, 4, 5});
  }
  // A real object, but another program's, planted under the first one's name.
  {
    Engine engine(optionsIn(other.path));
    REQUIRE(ok(engine.compile(kernelAdding("666.0"), "planted")));
  }
  std::vector<std::string> objects = objectsIn(dir.path), planted = objectsIn(other.path);
  REQUIRE(objects.size() == 1);
  REQUIRE(planted.size() == 1);
  writeFile(objects[0], readFile(planted[0]));

  Engine engine(optionsIn(dir.path));
  auto module = engine.compile(text, "app");
  REQUIRE(ok(module));
  CHECK(!(*module)->compileTimes().cacheHit);
  CHECK(run(**module) == std::vector<double>{2, 3, 4, 5});
  CHECK(holdsItsHash(objects[0]));
}

TEST_CASE("a truncated target object is rebuilt, not left to break the module", "[cache]") {
  TempDir dir;
  std::string text = kernelAdding("1.0");
  compileInto(dir, text);
  std::vector<std::string> objects = objectsIn(dir.path);
  REQUIRE(objects.size() == 1);
  REQUIRE(::truncate(objects[0].c_str(), 64) == 0);

  for (int attempt = 0; attempt < 2; ++attempt) {
    Engine engine(optionsIn(dir.path));
    auto module = engine.compile(text, "app");
    REQUIRE(ok(module));
    // Rebuilt once, then served from the cache again.
    CHECK((*module)->compileTimes().cacheHit == (attempt == 1));
    CHECK(run(**module) == std::vector<double>{2, 3, 4, 5});
  }
  CHECK(holdsItsHash(objects[0]));
}

TEST_CASE("a host object that no longer matches its manifest is recompiled", "[cache]") {
  TempDir dir;
  std::string text = kernelAdding("1.0");
  compileInto(dir, text);
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir.sub("host"), ec), end; it != end && !ec;
       it.increment(ec))
    if (llvm::StringRef(it->path()).ends_with(".o")) {
      std::string bytes = readFile(it->path());
      bytes[bytes.size() / 2] ^= 0x5a;
      writeFile(it->path(), bytes);
    }
  Engine engine(optionsIn(dir.path));
  auto module = engine.compile(text, "app");
  REQUIRE(ok(module));
  CHECK(!(*module)->compileTimes().cacheHit);
  CHECK(run(**module) == std::vector<double>{2, 3, 4, 5});
}

TEST_CASE("without the disk cache the cache directory is neither read nor written", "[cache]") {
  TempDir dir;
  std::string text = kernelAdding("1.0");
  {
    Engine engine(optionsIn(dir.path));
    REQUIRE(ok(engine.compile(text, "app")));
    REQUIRE(ok(engine.compile(kernelAdding("2.0"), "other")));
  }
  auto before = snapshot(dir.path);
  REQUIRE(!before.empty());

  EngineOptions options = optionsIn(dir.path);
  options.diskCache = false;
  Engine engine(options);
  auto module = engine.compile(text, "app");
  REQUIRE(ok(module));
  CHECK(!(*module)->compileTimes().cacheHit);
  CHECK(run(**module) == std::vector<double>{2, 3, 4, 5});
  auto fresh = engine.compile(kernelAdding("3.0"), "fresh");
  REQUIRE(ok(fresh));
  CHECK(run(**fresh) == std::vector<double>{4, 5, 6, 7});
  // Reads mark files used, so an untouched listing means nothing was read either.
  CHECK(snapshot(dir.path) == before);

  // A directory that does not exist is not created.
  EngineOptions absent = optionsIn(dir.sub("absent"));
  absent.diskCache = false;
  Engine another(absent);
  REQUIRE(ok(another.compile(kernelAdding("4.0"), "absent")));
  CHECK(!llvm::sys::fs::exists(dir.sub("absent")));
}

TEST_CASE("a cache directory is created private", "[cache]") {
  TempDir dir;
  Engine engine(optionsIn(dir.sub("cache")));
  REQUIRE(ok(engine.compile(kernelAdding("1.0"), "app")));
  for (const char *sub : {"", "/host", "/objects"}) {
    struct stat st;
    REQUIRE(::lstat((dir.sub("cache") + sub).c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
  }
}

TEST_CASE("a cache directory group or others can write is refused, saying why", "[cache]") {
  TempDir dir;
  std::string cache = dir.sub("cache");
  Engine engine(optionsIn(cache));
  REQUIRE(ok(engine.compile(kernelAdding("1.0"), "app")));

  REQUIRE(::chmod(cache.c_str(), 0777) == 0);
  std::string refused = compileError(engine, kernelAdding("2.0"));
  CHECK_THAT(refused, Catch::Contains("refusing cache directory '" + cache + "'") &&
                          Catch::Contains("writable by group or others (mode 0777)"));

  REQUIRE(::chmod(cache.c_str(), 0700) == 0);
  REQUIRE(::chmod((cache + "/objects").c_str(), 0720) == 0);
  CHECK_THAT(compileError(engine, kernelAdding("2.0")),
             Catch::Contains("refusing cache directory '" + cache + "/objects'") &&
                 Catch::Contains("(mode 0720)"));
  REQUIRE(::chmod((cache + "/objects").c_str(), 0700) == 0);
  REQUIRE(ok(engine.compile(kernelAdding("2.0"), "app")));
}

TEST_CASE("a symbolic link planted in place of the cache directory is not followed", "[cache]") {
  TempDir dir;
  std::string elsewhere = dir.sub("elsewhere"), cache = dir.sub("cache");
  REQUIRE(::mkdir(elsewhere.c_str(), 0700) == 0);
  REQUIRE(::symlink(elsewhere.c_str(), cache.c_str()) == 0);
  Engine engine(optionsIn(cache));
  CHECK_THAT(compileError(engine, kernelAdding("1.0")),
             Catch::Contains("refusing cache directory '" + cache + "': it is a symbolic link"));
  CHECK(snapshot(elsewhere).empty());
  // Nor one planted in place of a subdirectory.
  REQUIRE(::unlink(cache.c_str()) == 0);
  REQUIRE(::mkdir(cache.c_str(), 0700) == 0);
  REQUIRE(::symlink(elsewhere.c_str(), (cache + "/objects").c_str()) == 0);
  CHECK_THAT(compileError(engine, kernelAdding("1.0")),
             Catch::Contains("'" + cache + "/objects': it is a symbolic link"));
  CHECK(snapshot(elsewhere).empty());
}

TEST_CASE("a cache directory another user owns is refused", "[cache]") {
  if (::geteuid() != 0) {
    WARN("only root can give a directory to another user; not checked");
    return;
  }
  TempDir dir;
  std::string cache = dir.sub("cache");
  REQUIRE(::mkdir(cache.c_str(), 0755) == 0);
  REQUIRE(::chown(cache.c_str(), 65534, 65534) == 0);
  Engine engine(optionsIn(cache));
  CHECK_THAT(compileError(engine, kernelAdding("1.0")),
             Catch::Contains("refusing cache directory '" + cache +
                             "': it is owned by uid 65534, not by this user (uid 0)"));
  CHECK(snapshot(cache).empty());
}

TEST_CASE("without HOME and XDG_CACHE_HOME there is no disk cache, and nothing goes to TMPDIR",
          "[cache]") {
  TempDir tmp;
  ScopedEnv home("HOME", nullptr), xdg("XDG_CACHE_HOME", nullptr),
      tmpdir("TMPDIR", tmp.path.c_str());
  CHECK(defaultCacheDir().empty());
  Engine engine;
  auto module = engine.compile(kernelAdding("1.0"), "app");
  REQUIRE(ok(module));
  CHECK(run(**module) == std::vector<double>{2, 3, 4, 5});
  CHECK(snapshot(tmp.path).empty());
}

TEST_CASE("the cache stays under its bound, the most recently used entries kept", "[cache]") {
  TempDir dir;
  std::string cache = dir.sub("cache");
  // Each entry: a 3000-byte host object, a 1000-byte target object and a small manifest.
  auto entry = [](char c) {
    std::string target(1000, c);
    return std::make_pair(std::string(3000, c), CachedObject{sha256Hex(target), target});
  };
  auto opened = DiskCache::open(cache, 10000);
  REQUIRE(ok(opened));
  DiskCache &store = **opened;
  for (char c : {'a', 'b'}) {
    auto [host, target] = entry(c);
    store.storeHost(hexKey(c), host, {target});
  }
  age(cache, hexKey('a'), 300);
  age(cache, hexKey('b'), 200);
  // Using the older entry makes it the more recent.
  REQUIRE(store.loadHost(hexKey('a')));
  auto [host, target] = entry('c');
  store.storeHost(hexKey('c'), host, {target});
  CHECK(store.totalBytes() <= 10000);
  CHECK(store.loadHost(hexKey('c')));
  CHECK(store.loadHost(hexKey('a')));
  CHECK(!store.loadHost(hexKey('b')));

  // An entry larger than the whole bound is not stored (it would only evict the rest).
  std::string huge(20000, 'h');
  store.storeHost(hexKey('d'), huge, {});
  CHECK(!store.loadHost(hexKey('d')));
  CHECK(store.loadHost(hexKey('c')));
}

TEST_CASE("compiling several modules under a small bound keeps the newest", "[cache]") {
  TempDir dir;
  EngineOptions options = optionsIn(dir.path);
  // Room for about two modules (a host object and a target object each).
  options.cacheMaxBytes = 0;
  uint64_t perModule = 0;
  {
    Engine engine(options);
    REQUIRE(ok(engine.compile(kernelAdding("0.5"), "measure")));
    perModule = sizeOf(dir.path);
  }
  REQUIRE(perModule > 0);
  llvm::sys::fs::remove_directories(dir.path);
  options.cacheMaxBytes = perModule * 5 / 2;
  Engine engine(options);
  for (int i = 1; i <= 6; ++i) {
    REQUIRE(ok(engine.compile(kernelAdding(std::to_string(i) + ".0"), "m")));
    CHECK(sizeOf(dir.path) <= options.cacheMaxBytes);
  }
  // The last module is still cached: a new engine loads it without compiling.
  Engine fresh(options);
  auto last = fresh.compile(kernelAdding("6.0"), "m");
  REQUIRE(ok(last));
  CHECK((*last)->compileTimes().cacheHit);
  auto first = fresh.compile(kernelAdding("1.0"), "m");
  REQUIRE(ok(first));
  CHECK(!(*first)->compileTimes().cacheHit);
}

TEST_CASE("processes sharing a cache see an evicted file as a miss, never an error", "[cache]") {
  TempDir dir;
  std::string cache = dir.sub("cache");
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      // A cache of its own per thread, as separate processes would have.
      auto opened = DiskCache::open(cache, 12000);
      if (!opened) {
        llvm::consumeError(opened.takeError());
        ++wrong;
        return;
      }
      for (int i = 0; i < 200; ++i) {
        char c = static_cast<char>('a' + (i + t) % 6);
        std::string target(1500, c), host(2000 + c, c);
        (*opened)->storeHost(hexKey(c), host, {{sha256Hex(target), target}});
        if (auto hit = (*opened)->loadHost(hexKey(static_cast<char>('a' + (i * 7 + t) % 6))))
          if (hit->object.size() != size_t(2000 + hit->object[0]) || hit->targets.size() != 1 ||
              hit->targets[0].bytes != std::string(1500, hit->object[0]))
            ++wrong;
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  CHECK(wrong == 0);
  auto opened = DiskCache::open(cache, 12000);
  REQUIRE(ok(opened));
  CHECK((*opened)->totalBytes() <= 12000);
}

TEST_CASE("a target module's cached object is re-hashed before use, and one damaged is rebuilt",
          "[cache][incremental]") {
  TempDir dir;
  compileInto(dir, kernelAdding("1.0"));
  // Same size, other bytes: what a name or a size cannot tell.
  std::vector<std::string> objects = objectsIn(dir.path);
  REQUIRE(objects.size() == 1);
  std::string bytes = readFile(objects[0]);
  bytes[bytes.size() / 2] ^= 0x5a;
  writeFile(objects[0], bytes);
  // Another text with the same kernel: the whole-text entry misses, the module's is found
  // by its fingerprint, and its object fails its hash.
  std::string moved = "// moved\n" + kernelAdding("1.0");
  Engine engine(optionsIn(dir.path));
  auto module = engine.compile(moved, "app");
  REQUIRE(ok(module));
  CHECK((*module)->compileTimes().targetsCompiled == 1);
  CHECK((*module)->compileTimes().targetsReused == 0);
  CHECK(run(**module) == std::vector<double>{2, 3, 4, 5});
  CHECK(holdsItsHash(objects[0]));

  // A record that names no object is a miss, and goes.
  std::error_code ec;
  std::vector<std::string> records;
  for (llvm::sys::fs::directory_iterator it(dir.sub("targets"), ec), end; it != end && !ec;
       it.increment(ec))
    records.push_back(it->path());
  REQUIRE(records.size() == 1);
  writeFile(records[0], "nonsense\n");
  Engine fresh(optionsIn(dir.path));
  auto again = fresh.compile("// again\n" + kernelAdding("1.0"), "app");
  REQUIRE(ok(again));
  CHECK((*again)->compileTimes().targetsCompiled == 1);
  CHECK(run(**again) == std::vector<double>{2, 3, 4, 5});
  CHECK(readFile(records[0]).rfind("sha256 ", 0) == 0);
}
