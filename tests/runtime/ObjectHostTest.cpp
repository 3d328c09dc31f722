// Object host: validation of shipped objects, the pyface entry ABI, `call`, and unloading.
#include "executor/ObjectHost.h"

#include "tests/runtime/TestSupport.h"

#include <atomic>
#include <cmath>
#include <random>
#include <thread>
#include <unistd.h>

using namespace courier;
using namespace courier::test;
using transport::ObjectHost;
using transport::OwnedTensor;
using transport::ResultSpec;

namespace {

std::unique_ptr<ObjectHost> makeHost(std::vector<std::string> plugins = {}) {
  auto set = transport::PluginSet::load(plugins);
  REQUIRE(bool(set));
  auto host = ObjectHost::create(std::move(*set));
  REQUIRE(bool(host));
  return std::move(*host);
}

std::vector<OwnedTensor> launch(ObjectHost &host, const transport::ObjectBlob &object,
                                const char *entry, llvm::ArrayRef<transport::TensorView> inputs,
                                llvm::ArrayRef<ResultSpec> results) {
  auto tensors = host.launch(object.sha256, entry, inputs, results);
  if (!tensors)
    FAIL(llvm::toString(tensors.takeError()));
  return std::move(*tensors);
}

} // namespace

TEST_CASE("a blob's content address is the sha-256 of its bytes", "[objecthost]") {
  CHECK(transport::ObjectBlob::fromBytes("abc").sha256 ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("a float kernel doubles a contiguous and a strided vector", "[objecthost]") {
  auto host = makeHost();
  auto scale = kernel(COURIER_KERNEL_SCALE);
  REQUIRE_OK(host->addObject(scale));
  CHECK(host->hasObject(scale.sha256));

  std::vector<double> x{1, 2, 3, 4};
  auto out = launch(*host, scale, "_catalyst_pyface_scale", {view(x, {4}, {1})}, {{1, 8}});
  REQUIRE(out.size() == 1);
  CHECK(out[0].sizes == std::vector<int64_t>{4});
  CHECK(elements<double>(out[0]) == std::vector<double>{2, 4, 6, 8});

  auto every2nd = launch(*host, scale, "_catalyst_pyface_scale", {view(x, {2}, {2})}, {{1, 8}});
  CHECK(elements<double>(every2nd[0]) == std::vector<double>{2, 6});
}

TEST_CASE("an integer kernel adds two vectors", "[objecthost]") {
  auto host = makeHost();
  auto add = kernel(COURIER_KERNEL_ADD);
  REQUIRE_OK(host->addObject(add));
  std::vector<int32_t> a{1, -2, 3}, b{10, 20, -30};
  auto out =
      launch(*host, add, "_catalyst_pyface_add", {view(a, {3}, {1}), view(b, {3}, {1})}, {{1, 4}});
  CHECK(elements<int32_t>(out[0]) == std::vector<int32_t>{11, 18, -27});
}

TEST_CASE("kernels of rank 0 to 3 read strided inputs and return their results", "[objecthost]") {
  auto host = makeHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  REQUIRE_OK(host->addObject(shapes));

  std::vector<double> three{3};
  auto square = launch(*host, shapes, "_catalyst_pyface_square0", {view(three, {}, {})}, {{0, 8}});
  CHECK(square[0].sizes.empty());
  CHECK(elements<double>(square[0]) == std::vector<double>{9});

  // A column-major [2, 3] view of {1..6}: element (i, j) is at i + 2 j.
  std::vector<float> m{1, 2, 3, 4, 5, 6};
  auto transposed =
      launch(*host, shapes, "_catalyst_pyface_transpose2", {view(m, {2, 3}, {1, 2})}, {{2, 4}});
  CHECK(transposed[0].sizes == std::vector<int64_t>{3, 2});
  CHECK(elements<float>(transposed[0]) == std::vector<float>{1, 2, 3, 4, 5, 6});

  // Every other element along the last axis of a [2, 2, 4] tensor.
  std::vector<int64_t> cube(16);
  for (int64_t i = 0; i < 16; ++i)
    cube[i] = i;
  auto negated = launch(*host, shapes, "_catalyst_pyface_negate3",
                        {view(cube, {2, 2, 2}, {8, 4, 2})}, {{3, 8}});
  CHECK(negated[0].sizes == std::vector<int64_t>{2, 2, 2});
  CHECK(elements<int64_t>(negated[0]) == std::vector<int64_t>{0, -2, -4, -6, -8, -10, -12, -14});
}

TEST_CASE("a kernel with two results of different ranks fills both", "[objecthost]") {
  auto host = makeHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  REQUIRE_OK(host->addObject(shapes));
  std::vector<double> x{1, 2, 3};
  auto out = launch(*host, shapes, "_catalyst_pyface_stats", {view(x, {3}, {1})}, {{0, 8}, {1, 8}});
  REQUIRE(out.size() == 2);
  CHECK(elements<double>(out[0]) == std::vector<double>{6});
  CHECK(elements<double>(out[1]) == std::vector<double>{1, 3, 6});
}

TEST_CASE("results the kernel does not own are handed over as private copies", "[objecthost]") {
  auto host = makeHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  REQUIRE_OK(host->addObject(shapes));

  std::vector<double> x{5, 6, 7, 8};
  auto same = launch(*host, shapes, "_catalyst_pyface_identity", {view(x, {2}, {2})}, {{1, 8}});
  CHECK(same[0].allocated != x.data());
  CHECK(elements<double>(same[0]) == std::vector<double>{5, 7});

  auto constant = launch(*host, shapes, "_catalyst_pyface_constant", {}, {{1, 4}});
  CHECK(elements<int32_t>(constant[0]) == std::vector<int32_t>{7, 11, 13, 17});
}

TEST_CASE("a buffer returned as two results is handed over once and copied once", "[objecthost]") {
  auto host = makeHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  REQUIRE_OK(host->addObject(shapes));
  auto out = launch(*host, shapes, "_catalyst_pyface_twice", {}, {{1, 8}, {1, 8}});
  REQUIRE(out.size() == 2);
  CHECK(out[0].allocated != out[1].allocated);
  CHECK(elements<double>(out[0]) == std::vector<double>{1, 2});
  CHECK(elements<double>(out[1]) == std::vector<double>{1, 2});
}

TEST_CASE("a result descriptor with a negative size is an error", "[objecthost]") {
  auto host = makeHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  REQUIRE_OK(host->addObject(shapes));
  CHECK_THAT(failure(host->launch(shapes.sha256, "_catalyst_pyface_negative", {}, {{1, 8}})),
             Catch::Contains("'_catalyst_pyface_negative'") && Catch::Contains("negative size -3"));
}

TEST_CASE("results that do not match the kernel's count or ranks are an error", "[objecthost]") {
  auto host = makeHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  REQUIRE_OK(host->addObject(shapes));
  std::vector<double> x{1, 2, 3};
  auto input = view(x, {3}, {1});
  CHECK_THAT(failure(host->launch(shapes.sha256, "_catalyst_pyface_stats", {input}, {{0, 8}})),
             Catch::Contains("'_catalyst_pyface_stats' wrote more") &&
                 Catch::Contains("rank(s) [0]"));
  CHECK_THAT(
      failure(host->launch(shapes.sha256, "_catalyst_pyface_stats", {input}, {{1, 8}, {2, 8}})),
      Catch::Contains("wrote fewer"));
  CHECK_THAT(failure(host->launch(shapes.sha256, "_catalyst_pyface_exp", {input}, {{2, 8}})),
             Catch::Contains("wrote fewer"));
  auto out = launch(*host, shapes, "_catalyst_pyface_stats", {input}, {{0, 8}, {1, 8}});
  CHECK(elements<double>(out[1]) == std::vector<double>{1, 3, 6});
}

TEST_CASE("kernels reach libm through the object host", "[objecthost]") {
  auto host = makeHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  REQUIRE_OK(host->addObject(shapes));
  std::vector<double> x{0, 1};
  auto out = launch(*host, shapes, "_catalyst_pyface_exp", {view(x, {2}, {1})}, {{1, 8}});
  auto values = elements<double>(out[0]);
  CHECK(values[0] == 1.0);
  CHECK(values[1] == Approx(std::exp(1.0)));
}

TEST_CASE("kernels reach the C memory functions and nothing else of the process", "[objecthost]") {
  auto host = makeHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  REQUIRE_OK(host->addObject(shapes));
  std::vector<double> x{4, 5};
  auto out = launch(*host, shapes, "_catalyst_pyface_pad", {view(x, {2}, {1})}, {{1, 8}});
  CHECK(elements<double>(out[0]) == std::vector<double>{0, 4, 5, 0});

  auto forbidden = kernel(COURIER_KERNEL_FORBIDDEN);
  CHECK_THAT(failure(host->addObject(forbidden)),
             Catch::Contains("Symbols not found") && Catch::Contains("getenv"));
}

TEST_CASE("two objects exporting the same entry keep their own code", "[objecthost]") {
  auto host = makeHost();
  auto twice = kernel(COURIER_KERNEL_SCALE);
  auto thrice = kernel(COURIER_KERNEL_SCALE3);
  REQUIRE(twice.sha256 != thrice.sha256);
  REQUIRE_OK(host->addObject(twice));
  REQUIRE_OK(host->addObject(thrice));
  std::vector<double> x{1};
  auto a = launch(*host, twice, "_catalyst_pyface_scale", {view(x, {1}, {1})}, {{1, 8}});
  auto b = launch(*host, thrice, "_catalyst_pyface_scale", {view(x, {1}, {1})}, {{1, 8}});
  CHECK(elements<double>(a[0]) == std::vector<double>{2});
  CHECK(elements<double>(b[0]) == std::vector<double>{3});
}

TEST_CASE("adding the same object twice is a no-op", "[objecthost]") {
  auto host = makeHost();
  auto scale = kernel(COURIER_KERNEL_SCALE);
  REQUIRE_OK(host->addObject(scale));
  REQUIRE_OK(host->addObject(scale));
}

TEST_CASE("bad objects are rejected with a message saying what is wrong", "[objecthost]") {
  auto host = makeHost();
  auto arm = kernel(COURIER_KERNEL_SCALE_AARCH64);
  auto message = failure(host->addObject(arm));
  CHECK_THAT(message, Catch::Contains(arm.sha256) && Catch::Contains("is for aarch64") &&
                          Catch::Contains("x86_64"));

  auto truncated = kernel(COURIER_KERNEL_SCALE_TRUNCATED);
  CHECK_THAT(failure(host->addObject(truncated)),
             Catch::Contains(truncated.sha256) && Catch::Contains("not a valid object file"));

  auto text = transport::ObjectBlob::fromBytes("this is not an object file");
  CHECK_THAT(failure(host->addObject(text)), Catch::Contains("not a valid object file"));

  auto empty = transport::ObjectBlob::fromBytes("");
  CHECK_THAT(failure(host->addObject(empty)), Catch::Contains(empty.sha256));

  auto shared = transport::ObjectBlob::fromBytes(readFile(COURIER_TEST_PLUGIN));
  CHECK_THAT(failure(host->addObject(shared)), Catch::Contains("not a relocatable object"));

  auto unresolved = kernel(COURIER_KERNEL_UNRESOLVED);
  CHECK_THAT(failure(host->addObject(unresolved)),
             Catch::Contains(unresolved.sha256) && Catch::Contains("courier_missing_function"));
  CHECK_FALSE(host->hasObject(unresolved.sha256));

  // None of this disturbed the host.
  auto scale = kernel(COURIER_KERNEL_SCALE);
  REQUIRE_OK(host->addObject(scale));
  std::vector<double> x{1};
  auto out = launch(*host, scale, "_catalyst_pyface_scale", {view(x, {1}, {1})}, {{1, 8}});
  CHECK(elements<double>(out[0]) == std::vector<double>{2});
}

TEST_CASE("randomly damaged objects are loaded or rejected, never crash the host", "[objecthost]") {
  // Seeds 42 and 109 once crashed the linker: a relocation outside .eh_frame and a CIE with
  // too many augmentation fields.
  auto host = makeHost();
  std::string original = readFile(COURIER_KERNEL_SHAPES);
  for (unsigned seed = 0; seed < 200; ++seed) {
    std::mt19937 random(seed);
    std::string bytes = original;
    for (unsigned flips = 1 + random() % 4; flips > 0; --flips) {
      char value = char(random());
      bytes[random() % bytes.size()] = value;
    }
    auto damaged = transport::ObjectBlob::fromBytes(bytes);
    if (llvm::Error error = host->addObject(damaged)) {
      INFO("seed " << seed);
      CHECK_THAT(llvm::toString(std::move(error)), Catch::Contains(damaged.sha256));
    }
  }
  auto scale = kernel(COURIER_KERNEL_SCALE);
  REQUIRE_OK(host->addObject(scale));
}

TEST_CASE("an unknown entry or object is an error naming it", "[objecthost]") {
  auto host = makeHost();
  auto scale = kernel(COURIER_KERNEL_SCALE);
  REQUIRE_OK(host->addObject(scale));
  CHECK(failure(host->launch(scale.sha256, "_catalyst_pyface_x", {}, {})) ==
        "unknown entry '_catalyst_pyface_x' in object " + scale.sha256);
  CHECK_THAT(failure(host->launch("feed", "_catalyst_pyface_scale", {}, {})),
             Catch::Contains("object feed is not loaded"));
}

TEST_CASE("call reaches plugin and object symbols and reports their failures", "[objecthost]") {
  auto host = makeHost({COURIER_TEST_PLUGIN});
  std::vector<double> values{1.5, 2.5, 4};
  llvm::StringRef input(reinterpret_cast<const char *>(values.data()), 24);
  auto sum = host->call("courier_test_sum", input, 8);
  REQUIRE(bool(sum));
  double total;
  std::memcpy(&total, sum->data(), 8);
  CHECK(total == 8);

  CHECK_THAT(failure(host->call("courier_test_sum", input, 4)),
             Catch::Contains("'courier_test_sum'") && Catch::Contains("code 22"));
  CHECK_THAT(failure(host->call("courier_test_fail", "", 0)), Catch::Contains("code 7"));
  CHECK_THAT(failure(host->call("courier_nowhere", "", 0)),
             Catch::Contains("unknown symbol 'courier_nowhere'"));

  auto add = kernel(COURIER_KERNEL_ADD);
  REQUIRE_OK(host->addObject(add));
  std::vector<int32_t> ints{3, -4};
  auto negated = host->call("courier_object_negate",
                            llvm::StringRef(reinterpret_cast<const char *>(ints.data()), 8), 8);
  REQUIRE(bool(negated));
  int32_t back[2];
  std::memcpy(back, negated->data(), 8);
  CHECK(back[0] == -3);
  CHECK(back[1] == 4);
}

TEST_CASE("call reaches what a plugin defines, never what it depends on", "[objecthost]") {
  auto host = makeHost({COURIER_TEST_PLUGIN});
  // The plugin links libc; system() and abort() are reachable through it with dlsym.
  for (const char *symbol : {"system", "abort", "getpid"})
    CHECK_THAT(failure(host->call(symbol, "", 0)),
               Catch::Contains(std::string("unknown symbol '") + symbol + "'"));
  auto nothing = host->call("courier_test_nothing", "", 0);
  REQUIRE(bool(nothing));
  CHECK(nothing->empty());
}

TEST_CASE("a launch that disagrees with the entry's signature table is refused", "[objecthost]") {
  auto host = makeHost();
  auto scale = kernel(COURIER_KERNEL_SCALE);
  REQUIRE_OK(host->addObject(scale));
  std::vector<double> x{1, 2, 3, 4};
  std::vector<float> narrow{1, 2, 3, 4};
  std::vector<double> square{1, 2, 3, 4};
  auto refused = [&](llvm::ArrayRef<transport::TensorView> inputs,
                     llvm::ArrayRef<ResultSpec> results) {
    return failure(host->launch(scale.sha256, "_catalyst_pyface_scale", inputs, results));
  };
  auto expected = Catch::Contains("'_catalyst_pyface_scale' takes [(rank 1, 8-byte elements)] "
                                  "and returns [(rank 1, 8-byte elements)]");
  CHECK_THAT(refused({view(narrow, {4}, {1})}, {{1, 8}}), expected);
  CHECK_THAT(refused({view(x, {4}, {1})}, {{1, 4}}), expected);
  CHECK_THAT(refused({view(square, {2, 2}, {2, 1})}, {{1, 8}}), expected);
  CHECK_THAT(refused({view(x, {4}, {1}), view(x, {4}, {1})}, {{1, 8}}), expected);
  CHECK_THAT(refused({view(x, {4}, {1})}, {}), expected);
  // The matching launch still works.
  auto out = launch(*host, scale, "_catalyst_pyface_scale", {view(x, {4}, {1})}, {{1, 8}});
  CHECK(elements<double>(out[0]) == std::vector<double>{2, 4, 6, 8});
}

TEST_CASE("declared ranks and element sizes are bounded without a signature table",
          "[objecthost]") {
  auto host = makeHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  REQUIRE_OK(host->addObject(shapes));
  auto refused = [&](llvm::ArrayRef<ResultSpec> results) {
    return failure(host->launch(shapes.sha256, "_catalyst_pyface_noop", {}, results));
  };
  CHECK_THAT(refused({{int64_t{1} << 31, 8}}), Catch::Contains("has rank 2147483648"));
  CHECK_THAT(refused({{(int64_t{1} << 62), 8}}), Catch::Contains("ranks go up to 64"));
  CHECK_THAT(refused({{2, int64_t{1} << 24}}), Catch::Contains("element size 16777216"));
  CHECK_THAT(refused({{1, 64}}), Catch::Contains("element sizes are 1, 2, 4, 8 or 16"));
}

TEST_CASE("a plugin that does not exist fails to load with its path", "[objecthost]") {
  auto set = transport::PluginSet::load({"/nonexistent/libnothing.so"});
  CHECK_THAT(failure(std::move(set)), Catch::Contains("/nonexistent/libnothing.so"));
}

TEST_CASE("threads shipping and launching on one host concurrently each get their results",
          "[objecthost]") {
  auto host = makeHost();
  std::vector<std::pair<transport::ObjectBlob, double>> objects = {
      {kernel(COURIER_KERNEL_SCALE), 2.0}, {kernel(COURIER_KERNEL_SCALE3), 3.0}};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      const auto &[object, factor] = objects[t % 2];
      for (int i = 0; i < 200; ++i) {
        if (llvm::Error error = host->addObject(object)) {
          llvm::consumeError(std::move(error));
          ++wrong;
          continue;
        }
        std::vector<double> x{double(t), double(i)};
        auto out =
            host->launch(object.sha256, "_catalyst_pyface_scale", {view(x, {2}, {1})}, {{1, 8}});
        if (!out) {
          llvm::consumeError(out.takeError());
          ++wrong;
          continue;
        }
        auto *y = static_cast<const double *>((*out)[0].data);
        if (y[0] != factor * t || y[1] != factor * i)
          ++wrong;
      }
    });
  for (auto &thread : threads)
    thread.join();
  CHECK(wrong == 0);
}

TEST_CASE("a removed object is unloaded and another in the same host keeps working",
          "[objecthost]") {
  auto host = makeHost();
  auto twice = kernel(COURIER_KERNEL_SCALE);
  auto thrice = kernel(COURIER_KERNEL_SCALE3);
  auto add = kernel(COURIER_KERNEL_ADD);
  REQUIRE_OK(host->addObject(twice));
  REQUIRE_OK(host->addObject(thrice));
  REQUIRE_OK(host->addObject(add));
  std::vector<double> x{1};

  REQUIRE_OK(host->removeObject(twice.sha256));
  CHECK_FALSE(host->hasObject(twice.sha256));
  CHECK(failure(host->launch(twice.sha256, "_catalyst_pyface_scale", {view(x, {1}, {1})},
                             {{1, 8}})) == "object " + twice.sha256 + " is not loaded");
  auto b = launch(*host, thrice, "_catalyst_pyface_scale", {view(x, {1}, {1})}, {{1, 8}});
  CHECK(elements<double>(b[0]) == std::vector<double>{3});

  // A removed object's symbols are gone for `call` as well.
  std::vector<int32_t> ints{3, -4};
  llvm::StringRef input(reinterpret_cast<const char *>(ints.data()), 8);
  REQUIRE(bool(host->call("courier_object_negate", input, 8)));
  REQUIRE_OK(host->removeObject(add.sha256));
  CHECK_THAT(failure(host->call("courier_object_negate", input, 8)),
             Catch::Contains("unknown symbol 'courier_object_negate'"));

  // Removing again is a no-op, and the object can be loaded anew.
  REQUIRE_OK(host->removeObject(twice.sha256));
  REQUIRE_OK(host->addObject(twice));
  auto a = launch(*host, twice, "_catalyst_pyface_scale", {view(x, {1}, {1})}, {{1, 8}});
  CHECK(elements<double>(a[0]) == std::vector<double>{2});
}

TEST_CASE("objects removed and re-added while others launch on other threads disturb no launch",
          "[objecthost]") {
  auto host = makeHost();
  auto twice = kernel(COURIER_KERNEL_SCALE);
  auto thrice = kernel(COURIER_KERNEL_SCALE3);
  REQUIRE_OK(host->addObject(thrice));
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0}, ran{0}, missing{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      // Thread 0 launches the object being removed: it either runs intact or is not loaded.
      const auto &object = t == 0 ? twice : thrice;
      double factor = t == 0 ? 2 : 3;
      for (int i = 0; !stop; ++i) {
        std::vector<double> x{double(t), double(i)};
        auto out =
            host->launch(object.sha256, "_catalyst_pyface_scale", {view(x, {2}, {1})}, {{1, 8}});
        if (!out) {
          std::string message = llvm::toString(out.takeError());
          if (t == 0 && message == "object " + twice.sha256 + " is not loaded")
            ++missing;
          else
            ++wrong;
          continue;
        }
        ++ran;
        auto *y = static_cast<const double *>((*out)[0].data);
        if (y[0] != factor * t || y[1] != factor * i)
          ++wrong;
      }
    });
  for (int cycle = 0; cycle < 200; ++cycle) {
    REQUIRE_OK(host->addObject(twice));
    REQUIRE_OK(host->removeObject(twice.sha256));
  }
  stop = true;
  for (auto &thread : threads)
    thread.join();
  CHECK(wrong == 0);
  CHECK(ran > 0);
}

namespace {
/// This process's resident set in bytes.
size_t residentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * size_t(sysconf(_SC_PAGESIZE));
}
} // namespace

TEST_CASE("a thousand add and remove cycles do not grow the resident set", "[objecthost][leak]") {
  auto host = makeHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  auto cycle = [&](int count) {
    for (int i = 0; i < count; ++i) {
      REQUIRE_OK(host->addObject(shapes));
      REQUIRE_OK(host->removeObject(shapes.sha256));
    }
  };
  cycle(100);
  size_t before = residentBytes();
  cycle(1000);
  size_t after = residentBytes();
  INFO("resident set grew by " << (after > before ? after - before : 0) << " bytes");
  // Each cycle maps the object's code and data afresh; keeping them grows the resident set
  // by about 16 MiB over these cycles.
  CHECK(after < before + 4 * 1024 * 1024);
}
