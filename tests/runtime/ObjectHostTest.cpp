// Object host: validation of shipped objects, the pyface entry ABI, `call`, and unloading.
#include "executor/ObjectHost.h"
#include "executor/ElfValidation.h"
#include "transport/Wire.h"

#include "tests/runtime/TestSupport.h"

#include "llvm/BinaryFormat/ELF.h"
#include "llvm/Object/ELFObjectFile.h"

#include <atomic>
#include <cmath>
#include <csignal>
#include <functional>
#include <random>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace courier;
using namespace courier::test;
using executor::ObjectHost;
using transport::OwnedTensor;
using transport::ResultSpec;

namespace {

std::unique_ptr<ObjectHost> makeHost(std::vector<std::string> plugins = {},
                                     executor::ObjectHostOptions options = {}) {
  auto set = executor::PluginSet::load(plugins);
  REQUIRE(bool(set));
  auto host = ObjectHost::create(std::move(*set), options);
  REQUIRE(bool(host));
  return std::move(*host);
}

/// A host that also loads objects without signature tables.
std::unique_ptr<ObjectHost> makeLenientHost() {
  executor::ObjectHostOptions options;
  options.allowUnsignedObjects = true;
  return makeHost({}, options);
}

/// The wire code an error carries ("" for none), and its message.
std::pair<std::string, std::string> codeAndMessage(llvm::Error error) {
  REQUIRE(bool(error));
  std::string code, message;
  llvm::handleAllErrors(
      std::move(error),
      [&](const transport::CodedError &e) {
        code = e.code;
        message = e.message;
      },
      [&](const llvm::ErrorInfoBase &e) { message = e.message(); });
  return {code, message};
}

template <typename T> std::pair<std::string, std::string> codeAndMessage(llvm::Expected<T> value) {
  REQUIRE_FALSE(bool(value));
  return codeAndMessage(value.takeError());
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

TEST_CASE("results that do not match an unsigned kernel's count or ranks are an error",
          "[objecthost]") {
  auto host = makeLenientHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES_UNSIGNED);
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

  // x32: an ELF32 object with the host's own machine field, which JITLink would read as ELF64.
  auto x32 = kernel(COURIER_KERNEL_SCALE_X32);
  CHECK_THAT(failure(host->addObject(x32)),
             Catch::Contains(x32.sha256) &&
                 Catch::Contains("is a 32-bit x86_64 object but this executor runs 64-bit "
                                 "x86_64 code"));

  // A machine LLVM has no name for is named by its number.
  std::string alien = readFile(COURIER_KERNEL_SCALE);
  alien[18] = 0x34; // e_machine, little-endian: 0x1234
  alien[19] = 0x12;
  CHECK_THAT(failure(host->addObject(transport::ObjectBlob::fromBytes(alien))),
             Catch::Contains("is for ELF machine 4660 but this executor runs x86_64"));

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
        "unknown entry '_catalyst_pyface_x' in object " + scale.sha256 + " [unknown_entry]");
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
    auto [code, message] =
        codeAndMessage(host->launch(scale.sha256, "_catalyst_pyface_scale", inputs, results));
    CHECK(code == "signature_mismatch");
    return message;
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
  auto host = makeLenientHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES_UNSIGNED);
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
  auto set = executor::PluginSet::load({"/nonexistent/libnothing.so"});
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
  CHECK(failure(
            host->launch(twice.sha256, "_catalyst_pyface_scale", {view(x, {1}, {1})}, {{1, 8}})) ==
        "object " + twice.sha256 + " is not loaded [unknown_object]");
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
          if (t == 0 && message == "object " + twice.sha256 + " is not loaded [unknown_object]")
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

namespace {
/// `bytes` (an ELF64 relocatable object) with `edit` applied to the header of every section
/// named `name`.
template <typename Edit>
std::string editSection(std::string bytes, llvm::StringRef name, Edit edit) {
  llvm::ELF::Elf64_Ehdr header;
  REQUIRE(bytes.size() >= sizeof(header));
  std::memcpy(&header, bytes.data(), sizeof(header));
  auto sectionAt = [&](size_t index) {
    llvm::ELF::Elf64_Shdr section;
    size_t at = header.e_shoff + index * header.e_shentsize;
    REQUIRE(at + sizeof(section) <= bytes.size());
    std::memcpy(&section, bytes.data() + at, sizeof(section));
    return std::make_pair(at, section);
  };
  uint64_t names = sectionAt(header.e_shstrndx).second.sh_offset;
  bool found = false;
  for (size_t i = 0; i < header.e_shnum; ++i) {
    auto [at, section] = sectionAt(i);
    if (llvm::StringRef(bytes.data() + names + section.sh_name) != name)
      continue;
    edit(section);
    std::memcpy(bytes.data() + at, &section, sizeof(section));
    found = true;
  }
  REQUIRE(found);
  return bytes;
}

/// `bytes` with `flag` cleared in the header of every section named `name`.
std::string clearSectionFlag(std::string bytes, llvm::StringRef name, uint64_t flag) {
  return editSection(std::move(bytes), name,
                     [flag](llvm::ELF::Elf64_Shdr &section) { section.sh_flags &= ~flag; });
}
} // namespace

TEST_CASE("an object whose .rodata is not allocated is refused, not linked into a crash",
          "[objecthost]") {
  auto host = makeHost();
  for (const char *path : {COURIER_KERNEL_SHAPES, COURIER_KERNEL_SCALE}) {
    auto patched = transport::ObjectBlob::fromBytes(
        clearSectionFlag(readFile(path), ".rodata", llvm::ELF::SHF_ALLOC));
    INFO(path);
    CHECK_THAT(failure(host->addObject(patched)),
               Catch::Contains(patched.sha256) && Catch::Contains(".rodata"));
    CHECK_FALSE(host->hasObject(patched.sha256));
  }
}

TEST_CASE("clearing SHF_ALLOC of any section leaves an object refused or intact", "[objecthost]") {
  auto host = makeHost();
  std::string original = readFile(COURIER_KERNEL_SHAPES);
  auto object = llvm::object::ObjectFile::createObjectFile(
      llvm::MemoryBufferRef(original, COURIER_KERNEL_SHAPES));
  REQUIRE(bool(object));
  std::vector<std::string> allocated;
  for (const llvm::object::SectionRef &section : (*object)->sections()) {
    auto name = section.getName();
    REQUIRE(bool(name));
    if (llvm::object::ELFSectionRef(section).getFlags() & llvm::ELF::SHF_ALLOC)
      allocated.push_back(name->str());
  }
  REQUIRE(allocated.size() >= 3); // .text, .rodata, .eh_frame at least
  std::vector<double> x{1, 2, 3};
  for (const std::string &name : allocated) {
    INFO("section " << name);
    auto patched =
        transport::ObjectBlob::fromBytes(clearSectionFlag(original, name, llvm::ELF::SHF_ALLOC));
    if (llvm::Error error = host->addObject(patched)) {
      CHECK_THAT(llvm::toString(std::move(error)), Catch::Contains(patched.sha256));
      continue;
    }
    auto out =
        launch(*host, patched, "_catalyst_pyface_stats", {view(x, {3}, {1})}, {{0, 8}, {1, 8}});
    CHECK(elements<double>(out[1]) == std::vector<double>{1, 3, 6});
  }
}

TEST_CASE("an object without signature tables is refused unless the host allows it",
          "[objecthost]") {
  auto unsignedScale = kernel(COURIER_KERNEL_SCALE_UNSIGNED);
  auto strict = makeHost();
  auto [code, message] = codeAndMessage(strict->addObject(unsignedScale));
  CHECK(code == "unsigned_object");
  CHECK_THAT(message, Catch::Contains(unsignedScale.sha256) &&
                          Catch::Contains("'_catalyst_pyface_scale'") &&
                          Catch::Contains("_catalyst_signature_"));
  CHECK_FALSE(strict->hasObject(unsignedScale.sha256));

  auto lenient = makeLenientHost();
  REQUIRE_OK(lenient->addObject(unsignedScale));
  std::vector<double> x{1, 2};
  auto out =
      launch(*lenient, unsignedScale, "_catalyst_pyface_scale", {view(x, {2}, {1})}, {{1, 8}});
  CHECK(elements<double>(out[0]) == std::vector<double>{2, 4});
  // Signed objects load in either host.
  REQUIRE_OK(lenient->addObject(kernel(COURIER_KERNEL_SHAPES)));
}

TEST_CASE("describe reports an object's entries and signature tables", "[objecthost]") {
  auto host = makeLenientHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  auto unsignedScale = kernel(COURIER_KERNEL_SCALE_UNSIGNED);
  CHECK_FALSE(host->describe(shapes.sha256).has_value());
  REQUIRE_OK(host->addObject(shapes));
  REQUIRE_OK(host->addObject(unsignedScale));

  auto info = host->describe(shapes.sha256);
  REQUIRE(info.has_value());
  CHECK(info->sha256 == shapes.sha256);
  CHECK(info->entries.size() == 14);
  CHECK(std::is_sorted(info->entries.begin(), info->entries.end()));
  CHECK(info->hasEntry("_catalyst_pyface_stats"));
  CHECK_FALSE(info->hasEntry("courier_object_negate"));
  CHECK(info->hasTables());
  CHECK(info->signatures.at("_catalyst_pyface_stats") ==
        std::vector<int64_t>{1, 1, 2, 1, 8, 0, 8, 1, 8});
  CHECK(info->signatures.at("_catalyst_pyface_noop") == std::vector<int64_t>{1, 0, 0});

  // The main process checks a launch with the info alone, as the host does.
  using executor::checkLaunch;
  REQUIRE_OK(checkLaunch(*info, "_catalyst_pyface_stats", {{1, 8}}, {{0, 8}, {1, 8}}));
  CHECK(codeAndMessage(checkLaunch(*info, "_catalyst_pyface_stats", {{1, 8}}, {{1, 8}, {0, 8}}))
            .first == "signature_mismatch");
  CHECK(codeAndMessage(checkLaunch(*info, "_catalyst_pyface_stats", {}, {})).first ==
        "signature_mismatch");

  auto plain = host->describe(unsignedScale.sha256);
  REQUIRE(plain.has_value());
  CHECK(plain->entries == std::vector<std::string>{"_catalyst_pyface_scale"});
  CHECK(plain->signatures.empty());
  CHECK_FALSE(plain->hasTables());
  REQUIRE_OK(checkLaunch(*plain, "_catalyst_pyface_scale", {{1, 8}}, {{1, 8}}));
}

TEST_CASE("an async launch of an entry that takes arguments is a signature mismatch",
          "[objecthost]") {
  auto host = makeHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  REQUIRE_OK(host->addObject(shapes));
  auto [code, message] =
      codeAndMessage(host->launch(shapes.sha256, "_catalyst_pyface_stats", {}, {}));
  CHECK(code == "signature_mismatch");
  CHECK_THAT(message, Catch::Contains("an async launch passes no inputs"));
  // One that takes none runs.
  REQUIRE(launch(*host, shapes, "_catalyst_pyface_noop", {}, {}).empty());
}

TEST_CASE("an unsigned entry launched without its inputs faults on a null descriptor",
          "[objecthost]") {
  // The fault would end this process, so the launch runs in a child that reports where it
  // faulted: reading stack contents as a descriptor would fault elsewhere, or not at all.
  int report[2];
  REQUIRE(pipe(report) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    static int out;
    out = report[1];
    struct sigaction action = {};
    action.sa_flags = SA_SIGINFO;
    action.sa_sigaction = [](int, siginfo_t *info, void *) {
      uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
      (void)!write(out, &address, sizeof(address));
      _exit(0);
    };
    sigaction(SIGSEGV, &action, nullptr);
    alarm(60);
    auto set = executor::PluginSet::load({});
    executor::ObjectHostOptions options;
    options.allowUnsignedObjects = true;
    auto host = set ? ObjectHost::create(std::move(*set), options)
                    : llvm::Expected<std::unique_ptr<ObjectHost>>(set.takeError());
    auto scale = kernel(COURIER_KERNEL_SCALE_UNSIGNED);
    if (!host || (*host)->addObject(scale))
      _exit(2);
    auto results = (*host)->launch(scale.sha256, "_catalyst_pyface_scale", {}, {});
    llvm::consumeError(results.takeError());
    _exit(3); // It returned: it never read its input.
  }
  close(report[1]);
  uintptr_t address = ~uintptr_t{0};
  ssize_t got = read(report[0], &address, sizeof(address));
  close(report[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  REQUIRE(got == ssize_t(sizeof(address)));
  INFO("fault address " << address);
  CHECK(address < 4096); // a field of the null descriptor: sizes[0] is at offset 24
}

TEST_CASE("a launch declaring more than the maximum tensors is refused", "[objecthost]") {
  for (bool signedObject : {true, false}) {
    INFO((signedObject ? "signed" : "unsigned"));
    auto host = makeLenientHost();
    auto shapes = kernel(signedObject ? COURIER_KERNEL_SHAPES : COURIER_KERNEL_SHAPES_UNSIGNED);
    REQUIRE_OK(host->addObject(shapes));
    std::vector<double> zero{0};
    std::vector<transport::TensorView> inputs(executor::kMaxLaunchTensors + 1, view(zero, {}, {}));
    CHECK_THAT(failure(host->launch(shapes.sha256, "_catalyst_pyface_square0", inputs, {{0, 8}})),
               Catch::Contains("4097 inputs") && Catch::Contains("at most 4096"));
    std::vector<ResultSpec> results(executor::kMaxLaunchTensors + 1, ResultSpec{0, 8});
    CHECK_THAT(failure(host->launch(shapes.sha256, "_catalyst_pyface_square0", {view(zero, {}, {})},
                                    results)),
               Catch::Contains("4097 results"));
  }
}

TEST_CASE("results declared in another order are refused before any is read", "[objecthost]") {
  std::vector<double> x{1, 2, 3};
  auto input = view(x, {3}, {1});
  // With a table: the declaration does not match it.
  auto host = makeLenientHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  REQUIRE_OK(host->addObject(shapes));
  CHECK(codeAndMessage(
            host->launch(shapes.sha256, "_catalyst_pyface_stats", {input}, {{1, 8}, {0, 8}}))
            .first == "signature_mismatch");
  // Without one the kernel runs: the words it wrote, read in the declared order, give a
  // first result sized by a pointer and a second whose data pointer is the size 3.
  auto unsignedShapes = kernel(COURIER_KERNEL_SHAPES_UNSIGNED);
  REQUIRE_OK(host->addObject(unsignedShapes));
  CHECK_THAT(failure(host->launch(unsignedShapes.sha256, "_catalyst_pyface_stats", {input},
                                  {{1, 8}, {0, 8}})),
             Catch::Contains("'_catalyst_pyface_stats' returned a bad descriptor"));
  // The host is unharmed.
  auto out = launch(*host, unsignedShapes, "_catalyst_pyface_stats", {input}, {{0, 8}, {1, 8}});
  CHECK(elements<double>(out[1]) == std::vector<double>{1, 3, 6});
}

TEST_CASE("a result whose elements lie outside every buffer it could use is refused",
          "[objecthost]") {
  // An unsigned rank-1 kernel declared as returning rank 0 leaves words unread; one declared
  // with a wider element reads past its buffer: refused before reading.
  auto host = makeLenientHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES_UNSIGNED);
  REQUIRE_OK(host->addObject(shapes));
  std::vector<double> x{1, 2, 3, 4};
  CHECK_THAT(
      failure(host->launch(shapes.sha256, "_catalyst_pyface_exp", {view(x, {4}, {1})}, {{1, 16}})),
      Catch::Contains("lie outside the 32-byte buffer the kernel allocated"));
  // The same through a borrowed result: the identity returns its input.
  CHECK_THAT(failure(host->launch(shapes.sha256, "_catalyst_pyface_identity", {view(x, {2}, {2})},
                                  {{1, 16}})),
             Catch::Contains("lie outside every buffer"));
  auto same = launch(*host, shapes, "_catalyst_pyface_identity", {view(x, {2}, {2})}, {{1, 8}});
  CHECK(elements<double>(same[0]) == std::vector<double>{1, 3});
}

TEST_CASE("an input declared narrower than a signed kernel reads is refused", "[objecthost]") {
  auto host = makeHost();
  auto scale = kernel(COURIER_KERNEL_SCALE);
  REQUIRE_OK(host->addObject(scale));
  std::vector<float> narrow{1, 2, 3, 4};
  auto [code, message] = codeAndMessage(
      host->launch(scale.sha256, "_catalyst_pyface_scale", {view(narrow, {4}, {1})}, {{1, 8}}));
  CHECK(code == "signature_mismatch");
  CHECK_THAT(message, Catch::Contains("takes [(rank 1, 8-byte elements)]"));
}

TEST_CASE("an unsigned kernel reading a higher rank than declared sees empty dimensions",
          "[objecthost]") {
  // _catalyst_pyface_stats reads a rank-1 input. Declared rank 0, its size used to be the
  // next descriptor's pointer or stack contents, and its loop ran off into the heap.
  auto host = makeLenientHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES_UNSIGNED);
  REQUIRE_OK(host->addObject(shapes));
  std::vector<double> zero{0};
  for (size_t count : {size_t{1}, size_t{2}, executor::kMaxLaunchTensors}) {
    INFO(count << " rank-0 inputs");
    std::vector<transport::TensorView> inputs(count, view(zero, {}, {}));
    auto out = launch(*host, shapes, "_catalyst_pyface_stats", inputs, {{0, 8}, {1, 8}});
    REQUIRE(out.size() == 2);
    CHECK(elements<double>(out[0]) == std::vector<double>{0});
    CHECK(out[1].sizes == std::vector<int64_t>{0});
  }
}

TEST_CASE("section headers with damaged flags are refused or load intact", "[objecthost]") {
  // The linker reads a section's flags to decide whether and how it is mapped: every
  // combination either fails to load or runs the kernel correctly. Seed 29 once made
  // .text non-executable, and the entry's call faulted.
  auto host = makeHost();
  std::string original = readFile(COURIER_KERNEL_SHAPES);
  llvm::ELF::Elf64_Ehdr header;
  std::memcpy(&header, original.data(), sizeof(header));
  std::vector<double> x{1, 2, 3};
  int loaded = 0;
  for (unsigned seed = 0; seed < 300; ++seed) {
    std::mt19937 random(seed);
    std::string bytes = original;
    for (unsigned damage = 1 + random() % 2; damage > 0; --damage) {
      size_t at = header.e_shoff + (random() % header.e_shnum) * header.e_shentsize +
                  offsetof(llvm::ELF::Elf64_Shdr, sh_flags);
      uint64_t flags;
      std::memcpy(&flags, bytes.data() + at, sizeof(flags));
      flags ^= uint64_t{1} << (random() % 32);
      std::memcpy(bytes.data() + at, &flags, sizeof(flags));
    }
    auto damaged = transport::ObjectBlob::fromBytes(bytes);
    INFO("seed " << seed);
    if (llvm::Error error = host->addObject(damaged)) {
      CHECK_THAT(llvm::toString(std::move(error)), Catch::Contains(damaged.sha256));
      continue;
    }
    ++loaded;
    auto out = host->launch(damaged.sha256, "_catalyst_pyface_stats", {view(x, {3}, {1})},
                            {{0, 8}, {1, 8}});
    if (out) {
      CHECK(elements<double>((*out)[0]) == std::vector<double>{6});
      CHECK(elements<double>((*out)[1]) == std::vector<double>{1, 3, 6});
    } else {
      CHECK_THAT(llvm::toString(out.takeError()), Catch::Contains("_catalyst_pyface_stats"));
    }
    auto constant = host->launch(damaged.sha256, "_catalyst_pyface_constant", {}, {{1, 4}});
    if (constant)
      CHECK(elements<int32_t>((*constant)[0]) == std::vector<int32_t>{7, 11, 13, 17});
    else
      llvm::consumeError(constant.takeError());
    REQUIRE_OK(host->removeObject(damaged.sha256));
  }
  CHECK(loaded > 0);
}

TEST_CASE("section headers with damaged types or alignments never crash the linker",
          "[objecthost]") {
  // A relocation section retyped leaves code unrelocated: that is damaged code, which
  // crashes when it runs (contained by the worker process), not while it is linked.
  auto host = makeHost();
  std::string original = readFile(COURIER_KERNEL_SHAPES);
  llvm::ELF::Elf64_Ehdr header;
  std::memcpy(&header, original.data(), sizeof(header));
  for (unsigned seed = 0; seed < 1000; ++seed) {
    std::mt19937 random(seed);
    std::string bytes = original;
    size_t at = header.e_shoff + (random() % header.e_shnum) * header.e_shentsize;
    if (random() % 2) {
      uint32_t type = random() % 20;
      std::memcpy(bytes.data() + at + offsetof(llvm::ELF::Elf64_Shdr, sh_type), &type, 4);
    } else {
      uint64_t align = random() % 3 == 0 ? random() : uint64_t{1} << (random() % 64);
      std::memcpy(bytes.data() + at + offsetof(llvm::ELF::Elf64_Shdr, sh_addralign), &align, 8);
    }
    auto damaged = transport::ObjectBlob::fromBytes(bytes);
    INFO("seed " << seed);
    if (llvm::Error error = host->addObject(damaged))
      CHECK_THAT(llvm::toString(std::move(error)), Catch::Contains(damaged.sha256));
    else
      REQUIRE_OK(host->removeObject(damaged.sha256));
  }
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  REQUIRE_OK(host->addObject(shapes));
}

TEST_CASE("an unwind record whose CIE pointer names no CIE is refused, not linked into a crash",
          "[objecthost]") {
  // Found by tests/fuzz (object-intake): one byte more in an FDE's CIE pointer failed the
  // link with an error that was corrupt when the host read it.
  auto host = makeHost();
  std::string original = readFile(COURIER_KERNEL_SHAPES);
  auto object = llvm::object::ObjectFile::createObjectFile(
      llvm::MemoryBufferRef(original, COURIER_KERNEL_SHAPES));
  REQUIRE(bool(object));
  uint64_t ehFrame = 0;
  for (const llvm::object::SectionRef &section : (*object)->sections()) {
    auto name = section.getName();
    REQUIRE(bool(name));
    if (*name == ".eh_frame")
      ehFrame = llvm::object::ELFSectionRef(section).getOffset();
  }
  REQUIRE(ehFrame != 0);
  // The first record is the CIE; the second, an FDE, points back to it from its offset 4.
  uint32_t cieLength = 0;
  std::memcpy(&cieLength, original.data() + ehFrame, 4);
  size_t pointerAt = ehFrame + 4 + cieLength + 4;
  uint32_t pointer = 0;
  std::memcpy(&pointer, original.data() + pointerAt, 4);
  REQUIRE(pointer == pointerAt - ehFrame);
  for (uint32_t damaged : {pointer + 1, pointer - 1, pointer + 4096, uint32_t(4)}) {
    INFO("CIE pointer " << damaged);
    std::string bytes = original;
    std::memcpy(bytes.data() + pointerAt, &damaged, 4);
    auto blob = transport::ObjectBlob::fromBytes(bytes);
    CHECK_THAT(failure(host->addObject(blob)), Catch::Contains(blob.sha256) &&
                                                   Catch::Contains(".eh_frame record") &&
                                                   Catch::Contains("names no CIE before it"));
    CHECK_FALSE(host->hasObject(blob.sha256));
  }
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  REQUIRE_OK(host->addObject(shapes));
}

TEST_CASE("a relocation naming a symbol the linker makes nothing of is refused, not linked into a "
          "crash",
          "[objecthost]") {
  // Found by tests/fuzz (object-intake): JITLink makes no symbol of a file symbol, nor of an
  // undefined local one, and failed the link of a relocation naming one with an error that
  // crashed the host as it was built.
  auto host = makeHost();
  std::string original = readFile(COURIER_KERNEL_ADD);
  auto object = llvm::object::ObjectFile::createObjectFile(
      llvm::MemoryBufferRef(original, COURIER_KERNEL_ADD));
  REQUIRE(bool(object));
  uint64_t textRelocations = 0, symbolTable = 0;
  for (const llvm::object::SectionRef &section : (*object)->sections()) {
    auto name = section.getName();
    REQUIRE(bool(name));
    uint64_t offset = llvm::object::ELFSectionRef(section).getOffset();
    if (*name == ".rela.text")
      textRelocations = offset;
    if (*name == ".symtab")
      symbolTable = offset;
  }
  REQUIRE(textRelocations != 0);
  REQUIRE(symbolTable != 0);
  llvm::ELF::Elf64_Rela relocation;
  std::memcpy(&relocation, original.data() + textRelocations, sizeof(relocation));
  uint32_t named = relocation.getSymbol(); // malloc, undefined and global
  struct Damage {
    const char *what;
    std::function<void(std::string &)> apply;
    const char *message;
  };
  std::vector<Damage> damages = {
      {"the relocation names the file symbol",
       [&](std::string &bytes) {
         llvm::ELF::Elf64_Rela changed = relocation;
         changed.setSymbolAndType(1, relocation.getType());
         std::memcpy(bytes.data() + textRelocations, &changed, sizeof(changed));
       },
       "symbol 1 is a file symbol"},
      {"the symbol it names turns local",
       [&](std::string &bytes) {
         llvm::ELF::Elf64_Sym symbol;
         size_t at = symbolTable + named * sizeof(symbol);
         std::memcpy(&symbol, bytes.data() + at, sizeof(symbol));
         symbol.setBinding(llvm::ELF::STB_LOCAL);
         std::memcpy(bytes.data() + at, &symbol, sizeof(symbol));
       },
       "is undefined with binding 0, neither global nor weak"},
  };
  for (const Damage &damage : damages) {
    INFO(damage.what);
    std::string bytes = original;
    damage.apply(bytes);
    auto blob = transport::ObjectBlob::fromBytes(bytes);
    CHECK_THAT(failure(host->addObject(blob)),
               Catch::Contains(blob.sha256) &&
                   Catch::Contains("names a symbol the linker gives no address") &&
                   Catch::Contains(damage.message));
  }
  auto add = kernel(COURIER_KERNEL_ADD);
  REQUIRE_OK(host->addObject(add));
}

TEST_CASE("an object whose sections would take more memory than an object may is refused before "
          "it is mapped",
          "[objecthost]") {
  // Found by tests/fuzz (object-intake): a zero-filled section costs nothing in the object's
  // bytes, and the linker mapped and cleared the gigabytes its header asked for, for seconds.
  auto host = makeHost();
  std::string original = readFile(COURIER_KERNEL_SHAPES);
  auto zeroFilled = [](uint64_t size) {
    return [size](llvm::ELF::Elf64_Shdr &section) {
      section.sh_type = llvm::ELF::SHT_NOBITS;
      section.sh_size = size;
    };
  };
  for (uint64_t size : {executor::kMaxObjectMemoryBytes + 1, uint64_t{1} << 40, ~uint64_t{0}}) {
    INFO("a .rodata of " << size << " zero-filled bytes");
    auto blob =
        transport::ObjectBlob::fromBytes(editSection(original, ".rodata", zeroFilled(size)));
    CHECK_THAT(failure(host->addObject(blob)), Catch::Contains(blob.sha256) &&
                                                   Catch::Contains("(.rodata: ") &&
                                                   Catch::Contains("more than 268435456 bytes"));
    CHECK_FALSE(host->hasObject(blob.sha256));
  }
  // Alignment padding counts, and an alignment that is no power of two is damage.
  auto aligned = [](uint64_t alignment) {
    return [alignment](llvm::ELF::Elf64_Shdr &section) { section.sh_addralign = alignment; };
  };
  auto padded =
      transport::ObjectBlob::fromBytes(editSection(original, ".text", aligned(uint64_t{1} << 62)));
  CHECK_THAT(failure(host->addObject(padded)),
             Catch::Contains(padded.sha256) && Catch::Contains("(.text: "));
  auto odd = transport::ObjectBlob::fromBytes(editSection(original, ".text", aligned(48)));
  CHECK_THAT(failure(host->addObject(odd)),
             Catch::Contains(odd.sha256) && Catch::Contains("aligned to 48, which is not a "
                                                            "power of two"));
  // A common symbol is a zero-filled block of the size its entry gives, aligned to its value.
  auto common = [&](llvm::StringRef name, uint64_t size, uint64_t alignment, bool byType = false) {
    std::string bytes = original;
    llvm::ELF::Elf64_Ehdr header;
    std::memcpy(&header, bytes.data(), sizeof(header));
    for (size_t i = 0; i < header.e_shnum; ++i) {
      llvm::ELF::Elf64_Shdr table, strings;
      std::memcpy(&table, bytes.data() + header.e_shoff + i * header.e_shentsize, sizeof(table));
      if (table.sh_type != llvm::ELF::SHT_SYMTAB)
        continue;
      std::memcpy(&strings, bytes.data() + header.e_shoff + table.sh_link * header.e_shentsize,
                  sizeof(strings));
      for (uint64_t at = table.sh_offset; at < table.sh_offset + table.sh_size;
           at += sizeof(llvm::ELF::Elf64_Sym)) {
        llvm::ELF::Elf64_Sym symbol;
        std::memcpy(&symbol, bytes.data() + at, sizeof(symbol));
        if (llvm::StringRef(bytes.data() + strings.sh_offset + symbol.st_name) != name)
          continue;
        // STT_COMMON makes a symbol common wherever it lies; SHN_COMMON whatever its type.
        if (byType)
          symbol.setBindingAndType(symbol.getBinding(), llvm::ELF::STT_COMMON);
        else
          symbol.st_shndx = llvm::ELF::SHN_COMMON;
        symbol.st_value = alignment;
        symbol.st_size = size;
        std::memcpy(bytes.data() + at, &symbol, sizeof(symbol));
        return transport::ObjectBlob::fromBytes(bytes);
      }
    }
    FAIL("no symbol " << name.str());
    return transport::ObjectBlob();
  };
  auto huge = common("_catalyst_signature_noop", uint64_t{3} << 30, 8);
  CHECK_THAT(failure(host->addObject(huge)), Catch::Contains(huge.sha256) &&
                                                 Catch::Contains("its common symbols") &&
                                                 Catch::Contains("more than 268435456 bytes"));
  auto typed = common("_catalyst_signature_noop", uint64_t{3} << 30, 8, /*byType=*/true);
  CHECK_THAT(failure(host->addObject(typed)),
             Catch::Contains(typed.sha256) && Catch::Contains("its common symbols"));
  auto misaligned = common("_catalyst_signature_noop", 64, 24);
  CHECK_THAT(failure(host->addObject(misaligned)),
             Catch::Contains(misaligned.sha256) &&
                 Catch::Contains("is aligned to 24, which is not a power of two"));

  // A zero-filled section within the bound loads, and the kernel still runs.
  auto within = transport::ObjectBlob::fromBytes(
      editSection(original, ".comment", [](llvm::ELF::Elf64_Shdr &section) {
        section.sh_type = llvm::ELF::SHT_NOBITS;
        section.sh_flags = llvm::ELF::SHF_ALLOC | llvm::ELF::SHF_WRITE;
        section.sh_size = 64 << 20;
      }));
  REQUIRE_OK(host->addObject(within));
  std::vector<double> x{1, 2, 3};
  auto out = launch(*host, within, "_catalyst_pyface_stats", {view(x, {3}, {1})}, {{0, 8}, {1, 8}});
  CHECK(elements<double>(out[1]) == std::vector<double>{1, 3, 6});
}

TEST_CASE("large buffers a kernel allocates go to the launch's result arena, and results there "
          "are handed over in place",
          "[objecthost][arena]") {
  auto host = makeHost();
  auto shapes = kernel(COURIER_KERNEL_SHAPES);
  REQUIRE_OK(host->addObject(shapes));
  // Each buffer is 1 MiB, over kArenaAllocationBytes; the arena holds what earlier launches
  // left there, which calloc must not pass on.
  const int64_t n = 131072;
  std::vector<char> arena(8 << 20, '\x7f');
  auto inArena = [&](const void *pointer) {
    auto *p = static_cast<const char *>(pointer);
    return p >= arena.data() && p < arena.data() + arena.size();
  };
  std::vector<double> x(n);
  for (int64_t i = 0; i < n; ++i)
    x[i] = double(i % 1000) / 4;
  std::vector<double> tripled(n), zeros(n, 0), counting(n);
  for (int64_t i = 0; i < n; ++i) {
    tripled[i] = 3 * x[i];
    counting[i] = double(i);
  }
  zeros[0] = 1;
  std::vector<ResultSpec> four(4, ResultSpec{1, 8});
  for (int round = 0; round < 2; ++round) {
    INFO("launch " << round + 1 << " into the same arena");
    auto out = host->launch(shapes.sha256, "_catalyst_pyface_allocations", {view(x, {n}, {1})},
                            four, llvm::MutableArrayRef<char>(arena));
    REQUIRE_OK(out.takeError());
    CHECK(elements<double>((*out)[0]) == tripled);
    CHECK(elements<double>((*out)[1]) == zeros);
    CHECK(elements<double>((*out)[2]) == counting);
    CHECK(elements<double>((*out)[3]) == x);
    // Packed results stay in the arena and free nothing; the strided view into it is copied.
    for (int r = 0; r < 3; ++r) {
      CHECK(inArena((*out)[r].data));
      CHECK((*out)[r].allocated == nullptr);
    }
    CHECK_FALSE(inArena((*out)[3].data));
    CHECK((*out)[3].allocated != nullptr);
    CHECK((*out)[3].strides == std::vector<int64_t>{1});
  }
  // An arena with room for one buffer: the rest come from the process's allocator.
  std::vector<char> small((1 << 20) + 4096, '\x7f');
  auto out = host->launch(shapes.sha256, "_catalyst_pyface_allocations", {view(x, {n}, {1})}, four,
                          llvm::MutableArrayRef<char>(small));
  REQUIRE_OK(out.takeError());
  CHECK(elements<double>((*out)[0]) == tripled);
  CHECK(elements<double>((*out)[1]) == zeros);
  CHECK(elements<double>((*out)[2]) == counting);
  CHECK(elements<double>((*out)[3]) == x);
  // Nor do those of a kernel without a signature table, which may keep a buffer from one
  // call to the next.
  auto lenient = makeLenientHost();
  auto unsignedScale = kernel(COURIER_KERNEL_SCALE_UNSIGNED);
  REQUIRE_OK(lenient->addObject(unsignedScale));
  auto scaled = lenient->launch(unsignedScale.sha256, "_catalyst_pyface_scale", {view(x, {n}, {1})},
                                {{1, 8}}, llvm::MutableArrayRef<char>(arena));
  REQUIRE_OK(scaled.takeError());
  CHECK_FALSE(inArena((*scaled)[0].data));
  CHECK((*scaled)[0].allocated != nullptr);
  // Small buffers never go there.
  std::vector<double> few{1, 2, 3, 4};
  auto little = host->launch(shapes.sha256, "_catalyst_pyface_allocations", {view(few, {4}, {1})},
                             four, llvm::MutableArrayRef<char>(arena));
  REQUIRE_OK(little.takeError());
  for (const OwnedTensor &t : *little)
    CHECK_FALSE(inArena(t.data));
  CHECK(elements<double>((*little)[2]) == std::vector<double>{0, 1, 2, 3});
}
