// The C ABI end to end through the in-process executor: sessions, marshalling, failures,
// scopes, threads and leaks.
#include "runtime/Runtime.h"

#include "abi/ContentHash.h"

#include "tests/runtime/TestSupport.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <malloc.h>

#include <cstring>
#include <optional>
#include <set>
#include <thread>
#include <utility>

using namespace courier;
using namespace courier::runtime;

namespace {

/// Result storage as Courier's lowering prepares it: marked, so its sizes are the shape the
/// reply must have.
void *const kMarker = reinterpret_cast<void *>(COURIER_EXPECTED_SHAPE_MARKER);

template <int Rank> struct Descriptor {
  void *allocated = nullptr;
  void *aligned = kMarker;
  int64_t offset = 0;
  int64_t sizes[Rank] = {};
  int64_t strides[Rank] = {};
};

struct Descriptor0 {
  void *allocated = nullptr;
  void *aligned = kMarker;
  int64_t offset = 0;
};

template <int Rank, typename T>
Descriptor<Rank> describe(T *data, std::array<int64_t, Rank> sizes,
                          std::array<int64_t, Rank> strides, int64_t offset = 0) {
  Descriptor<Rank> d;
  d.allocated = d.aligned = data;
  d.offset = offset;
  for (int k = 0; k < Rank; ++k) {
    d.sizes[k] = sizes[k];
    d.strides[k] = strides[k];
  }
  return d;
}

/// Writes `bytes` to the file at `path`, replacing it.
void writeBytes(llvm::StringRef path, llvm::StringRef bytes) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  REQUIRE(!ec);
  os << bytes;
}

/// A message launch() took from the thread, kept for takeMessage().
std::optional<std::string> pendingMessage;

/// Takes the calling thread's error as text ("" when there is none).
std::string takeMessage() {
  if (pendingMessage)
    return std::exchange(pendingMessage, std::nullopt).value();
  return test::messageOf(takeError());
}

/// Launches through the ABI, which returns nothing as Catalyst's does, and returns 1 when the
/// launch recorded an error (kept for takeMessage()), as the engine reads it, else 0.
int launch(int64_t session, const char *entry, const char *object, size_t nIn, void *const *inDescs,
           const size_t *inRanks, const size_t *inSizes, size_t nOut, void *const *outDescs,
           const size_t *outRanks, const size_t *outSizes) {
  __catalyst__executor__launch(session, entry, object, nIn, inDescs, inRanks, inSizes, nOut,
                               outDescs, outRanks, outSizes);
  std::string message = test::messageOf(takeError());
  if (message.empty())
    return 0;
  pendingMessage = message;
  return 1;
}

/// A session on "local" that is closed at the end of the test, so tests stay independent
/// when they share one process.
struct LocalSession {
  LocalSession() {
    clearError();
    handle = __catalyst__executor__open("local");
    REQUIRE(handle != 0);
  }
  ~LocalSession() { __catalyst__executor__close(handle); }
  int64_t handle;
};

/// Runs scale on `x` through the ABI and returns the doubled values.
std::vector<double> scale(int64_t session, std::vector<double> &x) {
  auto in = describe<1>(x.data(), {int64_t(x.size())}, {1});
  Descriptor<1> out;
  out.sizes[0] = -1;
  void *ins[] = {&in};
  void *outs[] = {&out};
  size_t ranks[] = {1}, sizes[] = {8};
  if (launch(session, "_catalyst_pyface_scale", COURIER_KERNEL_SCALE, 1, ins, ranks, sizes, 1, outs,
             ranks, sizes) != 0)
    FAIL(takeMessage());
  auto *data = static_cast<double *>(out.aligned) + out.offset;
  std::vector<double> result(data, data + out.sizes[0]);
  std::free(out.allocated);
  return result;
}

} // namespace

TEST_CASE("a second open of the same address returns the same session", "[runtime]") {
  LocalSession session;
  CHECK(__catalyst__executor__open("local") == session.handle);
  CHECK(takeMessage() == "");
}

TEST_CASE("threads opening one address at once share one session", "[runtime]") {
  ScopeOptions options;
  options.addressOverride = "local";
  ModuleScope scope(options);
  std::vector<int64_t> handles(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      ModuleScope::Entered entered(scope);
      handles[t] = __catalyst__executor__open("203.0.113.5:7000");
    });
  for (auto &thread : threads)
    thread.join();
  CHECK(handles[0] != 0);
  CHECK(std::set<int64_t>(handles.begin(), handles.end()).size() == 1);
}

TEST_CASE("a malformed address fails to open with a message naming it", "[runtime]") {
  clearError();
  CHECK(__catalyst__executor__open("no-port-here") == 0);
  CHECK_THAT(takeMessage(),
             Catch::Contains("open 'no-port-here'") && Catch::Contains("bad executor address"));
  CHECK(takeMessage() == "");
}

TEST_CASE("a launch through the C ABI returns the kernel's numbers", "[runtime]") {
  LocalSession session;
  REQUIRE(__catalyst__executor__send_binary(session.handle, COURIER_KERNEL_SCALE,
                                            COURIER_BINARY_FORMAT_OBJECT) == 0);
  std::vector<double> x{1, 2, 3, 4};
  CHECK(scale(session.handle, x) == std::vector<double>{2, 4, 6, 8});
}

TEST_CASE("a launch of an object never sent ships it implicitly", "[runtime]") {
  LocalSession session;
  std::vector<double> x{0.5};
  CHECK(scale(session.handle, x) == std::vector<double>{1});
}

TEST_CASE("the C ABI marshals ranks 0 to 3, offsets, strides and several results", "[runtime]") {
  LocalSession session;
  const char *shapes = COURIER_KERNEL_SHAPES;

  SECTION("rank 0") {
    double x = 4;
    Descriptor0 in{&x, &x, 0}, out;
    void *ins[] = {&in}, *outs[] = {&out};
    size_t ranks[] = {0}, sizes[] = {8};
    REQUIRE(launch(session.handle, "_catalyst_pyface_square0", shapes, 1, ins, ranks, sizes, 1,
                   outs, ranks, sizes) == 0);
    CHECK(*static_cast<double *>(out.aligned) == 16);
    std::free(out.allocated);
  }
  SECTION("rank 2 with a column-major input") {
    std::vector<float> m{1, 2, 3, 4, 5, 6};
    auto in = describe<2>(m.data(), {2, 3}, {1, 2});
    Descriptor<2> out;
    out.sizes[0] = 3;
    out.sizes[1] = 2;
    void *ins[] = {&in}, *outs[] = {&out};
    size_t ranks[] = {2}, sizes[] = {4};
    REQUIRE(launch(session.handle, "_catalyst_pyface_transpose2", shapes, 1, ins, ranks, sizes, 1,
                   outs, ranks, sizes) == 0);
    auto *data = static_cast<float *>(out.aligned);
    CHECK(std::vector<float>(data, data + 6) == std::vector<float>{1, 2, 3, 4, 5, 6});
    CHECK(out.strides[0] == 2);
    std::free(out.allocated);
  }
  SECTION("rank 3 with an offset and a stride") {
    std::vector<int64_t> cube(17);
    for (int64_t i = 0; i < 17; ++i)
      cube[i] = i - 1;
    // Skips the first element through the offset, then takes every other element.
    auto in = describe<3>(cube.data(), {2, 2, 2}, {8, 4, 2}, 1);
    Descriptor<3> out;
    for (int64_t &size : out.sizes)
      size = 2;
    void *ins[] = {&in}, *outs[] = {&out};
    size_t ranks[] = {3}, sizes[] = {8};
    REQUIRE(launch(session.handle, "_catalyst_pyface_negate3", shapes, 1, ins, ranks, sizes, 1,
                   outs, ranks, sizes) == 0);
    auto *data = static_cast<int64_t *>(out.aligned);
    CHECK(std::vector<int64_t>(data, data + 8) ==
          std::vector<int64_t>{0, -2, -4, -6, -8, -10, -12, -14});
    std::free(out.allocated);
  }
  SECTION("two results of different ranks") {
    std::vector<double> x{1, 2, 3};
    auto in = describe<1>(x.data(), {3}, {1});
    Descriptor0 sum;
    Descriptor<1> prefix;
    prefix.sizes[0] = -1;
    void *ins[] = {&in}, *outs[] = {&sum, &prefix};
    size_t inRanks[] = {1}, inSizes[] = {8}, outRanks[] = {0, 1}, outSizes[] = {8, 8};
    REQUIRE(launch(session.handle, "_catalyst_pyface_stats", shapes, 1, ins, inRanks, inSizes, 2,
                   outs, outRanks, outSizes) == 0);
    CHECK(*static_cast<double *>(sum.aligned) == 6);
    auto *data = static_cast<double *>(prefix.aligned);
    CHECK(std::vector<double>(data, data + 3) == std::vector<double>{1, 3, 6});
    std::free(sum.allocated);
    std::free(prefix.allocated);
  }
  SECTION("a strided result arrives contiguous") {
    Descriptor<2> out;
    out.sizes[0] = 2;
    out.sizes[1] = 3;
    void *outs[] = {&out};
    size_t ranks[] = {2}, sizes[] = {8};
    REQUIRE(launch(session.handle, "_catalyst_pyface_column_major", shapes, 0, nullptr, nullptr,
                   nullptr, 1, outs, ranks, sizes) == 0);
    CHECK(out.strides[0] == 3);
    CHECK(out.strides[1] == 1);
    auto *data = static_cast<double *>(out.aligned);
    CHECK(std::vector<double>(data, data + 6) == std::vector<double>{0, 1, 2, 10, 11, 12});
    std::free(out.allocated);
  }
  SECTION("an integer add with a bare entry name") {
    std::vector<int32_t> a{1, 2}, b{40, 50};
    auto da = describe<1>(a.data(), {2}, {1}), db = describe<1>(b.data(), {2}, {1});
    Descriptor<1> out;
    out.sizes[0] = 2;
    void *ins[] = {&da, &db}, *outs[] = {&out};
    size_t inRanks[] = {1, 1}, inSizes[] = {4, 4}, outRanks[] = {1}, outSizes[] = {4};
    REQUIRE(launch(session.handle, "add", COURIER_KERNEL_ADD, 2, ins, inRanks, inSizes, 1, outs,
                   outRanks, outSizes) == 0);
    auto *data = static_cast<int32_t *>(out.aligned);
    CHECK(std::vector<int32_t>(data, data + 2) == std::vector<int32_t>{41, 52});
    std::free(out.allocated);
  }
}

TEST_CASE("two objects with the same entry name run their own code in one session", "[runtime]") {
  LocalSession session;
  REQUIRE(__catalyst__executor__send_binary(session.handle, COURIER_KERNEL_SCALE,
                                            COURIER_BINARY_FORMAT_OBJECT) == 0);
  REQUIRE(__catalyst__executor__send_binary(session.handle, COURIER_KERNEL_SCALE3,
                                            COURIER_BINARY_FORMAT_OBJECT) == 0);
  double x = 1;
  for (auto [path, expected] :
       {std::pair{COURIER_KERNEL_SCALE, 2.0}, std::pair{COURIER_KERNEL_SCALE3, 3.0}}) {
    auto in = describe<1>(&x, {1}, {1});
    Descriptor<1> out;
    out.sizes[0] = 1;
    void *ins[] = {&in}, *outs[] = {&out};
    size_t ranks[] = {1}, sizes[] = {8};
    REQUIRE(launch(session.handle, "_catalyst_pyface_scale", path, 1, ins, ranks, sizes, 1, outs,
                   ranks, sizes) == 0);
    CHECK(*static_cast<double *>(out.aligned) == expected);
    std::free(out.allocated);
  }
}

TEST_CASE("a failed launch reports why and leaves zero-filled results", "[runtime]") {
  LocalSession session;
  std::vector<double> x{1, 2, 3, 4};
  auto in = describe<1>(x.data(), {4}, {1});
  void *ins[] = {&in};
  size_t ranks[] = {1}, sizes[] = {8};

  SECTION("unknown entry") {
    Descriptor<1> out;
    out.sizes[0] = 3;
    void *outs[] = {&out};
    CHECK(launch(session.handle, "_catalyst_pyface_x", COURIER_KERNEL_SCALE, 1, ins, ranks, sizes,
                 1, outs, ranks, sizes) != 0);
    CHECK_THAT(takeMessage(), Catch::Contains("unknown entry @x in object") &&
                                  Catch::Contains("'local'") &&
                                  !Catch::Contains("_catalyst_pyface_"));
    REQUIRE(out.allocated != nullptr);
    CHECK(out.sizes[0] == 3);
    CHECK(out.strides[0] == 1);
    auto *data = static_cast<double *>(out.aligned);
    CHECK(std::vector<double>(data, data + 3) == std::vector<double>{0, 0, 0});
    std::free(out.allocated);
  }
  SECTION("a result shape the caller does not expect") {
    Descriptor<1> out;
    out.sizes[0] = 5;
    void *outs[] = {&out};
    CHECK(launch(session.handle, "_catalyst_pyface_scale", COURIER_KERNEL_SCALE, 1, ins, ranks,
                 sizes, 1, outs, ranks, sizes) != 0);
    CHECK_THAT(takeMessage(), Catch::Contains("shape [4]") && Catch::Contains("expected [5]"));
    CHECK(out.sizes[0] == 5);
    CHECK(static_cast<double *>(out.aligned)[4] == 0);
    std::free(out.allocated);
  }
  SECTION("bad objects of every kind") {
    llvm::SmallString<128> garbagePath;
    REQUIRE_FALSE(llvm::sys::fs::createTemporaryFile("courier-garbage", "o", garbagePath));
    std::string garbage(garbagePath.str());
    {
      std::ofstream file(garbage);
      file << "not an object";
    }
    for (auto [path, reason] :
         {std::pair{COURIER_KERNEL_SCALE_AARCH64, "is for aarch64"},
          std::pair{COURIER_KERNEL_SCALE_TRUNCATED, "not a valid object file"},
          std::pair{garbage.c_str(), "not a valid object file"},
          std::pair{"/nonexistent/kernel.o", "No such file"},
          std::pair{COURIER_KERNEL_UNRESOLVED, "courier_missing_function"}}) {
      INFO(path);
      Descriptor<1> out;
      out.sizes[0] = -1;
      void *outs[] = {&out};
      CHECK(__catalyst__executor__send_binary(session.handle, path, COURIER_BINARY_FORMAT_OBJECT) !=
            0);
      CHECK_THAT(takeMessage(), Catch::Contains(reason));
      CHECK(launch(session.handle, "_catalyst_pyface_scale", path, 1, ins, ranks, sizes, 1, outs,
                   ranks, sizes) != 0);
      CHECK_THAT(takeMessage(), Catch::Contains(reason));
      CHECK(out.sizes[0] == 0);
      std::free(out.allocated);
    }
    std::remove(garbage.c_str());
  }
  SECTION("an unknown session handle") {
    Descriptor<1> out;
    out.sizes[0] = 4;
    void *outs[] = {&out};
    CHECK(launch(987654, "_catalyst_pyface_scale", COURIER_KERNEL_SCALE, 1, ins, ranks, sizes, 1,
                 outs, ranks, sizes) != 0);
    CHECK_THAT(takeMessage(), Catch::Contains("unknown session handle 987654"));
    std::free(out.allocated);
  }
  SECTION("malformed argument arrays") {
    Descriptor<1> out;
    out.sizes[0] = 2;
    void *outs[] = {&out};
    CHECK(launch(session.handle, "_catalyst_pyface_scale", COURIER_KERNEL_SCALE, -1, ins, ranks,
                 sizes, 1, outs, ranks, sizes) != 0);
    CHECK_THAT(takeMessage(), Catch::Contains("malformed argument arrays"));
    CHECK(out.sizes[0] == 2);
    CHECK(static_cast<double *>(out.aligned)[1] == 0);
    std::free(out.allocated);
    CHECK(launch(session.handle, nullptr, COURIER_KERNEL_SCALE, 1, ins, ranks, sizes, 0, nullptr,
                 nullptr, nullptr) != 0);
    CHECK_THAT(takeMessage(), Catch::Contains("null entry"));
  }
  SECTION("an unsupported binary format") {
    CHECK(__catalyst__executor__send_binary(session.handle, COURIER_KERNEL_SCALE, 7) != 0);
    CHECK_THAT(takeMessage(), Catch::Contains("unknown binary format 7"));
    CHECK(__catalyst__executor__send_binary(session.handle, COURIER_KERNEL_SCALE, 1) != 0);
    CHECK_THAT(takeMessage(), Catch::Contains("format 1 (a data asset) is not supported"));
  }

  // The session still serves.
  CHECK(scale(session.handle, x) == std::vector<double>{2, 4, 6, 8});
}

TEST_CASE("host code that leaves result descriptors unset, as Catalyst's lowering does, gets "
          "results checked by rank",
          "[runtime]") {
  LocalSession session;
  std::vector<double> x{1, 2, 3};
  auto in = describe<1>(x.data(), {3}, {1});
  void *ins[] = {&in};
  size_t ranks[] = {1}, sizes[] = {8};
  // What an uninitialized stack slot may hold.
  Descriptor<1> out;
  out.allocated = reinterpret_cast<void *>(0x1000);
  out.aligned = reinterpret_cast<void *>(0x2000);
  out.sizes[0] = 987654321;
  void *outs[] = {&out};
  REQUIRE(launch(session.handle, "_catalyst_pyface_scale", COURIER_KERNEL_SCALE, 1, ins, ranks,
                 sizes, 1, outs, ranks, sizes) == 0);
  REQUIRE(out.sizes[0] == 3);
  auto *data = static_cast<double *>(out.aligned);
  CHECK(std::vector<double>(data, data + 3) == std::vector<double>{2, 4, 6});
  std::free(out.allocated);

  // A failure cannot know the shape the caller will read: the result reads as zeros from
  // memory it cannot write, and there is nothing to free.
  out.aligned = reinterpret_cast<void *>(0x2000);
  out.sizes[0] = 987654321;
  CHECK(launch(session.handle, "_catalyst_pyface_x", COURIER_KERNEL_SCALE, 1, ins, ranks, sizes, 1,
               outs, ranks, sizes) != 0);
  // The executor's words name the kernel as its host code does (@x), not by its entry symbol.
  CHECK_THAT(takeMessage(), Catch::Contains("unknown entry @x in object"));
  CHECK(out.sizes[0] == 0);
  CHECK(out.allocated == nullptr);
  REQUIRE(out.aligned != nullptr);
  auto *zeros = static_cast<const double *>(out.aligned);
  CHECK(std::vector<double>(zeros, zeros + 1024) == std::vector<double>(1024, 0));
  std::free(out.allocated);
}

TEST_CASE("only the first error since the last clear is kept", "[runtime]") {
  clearError();
  CHECK(__catalyst__executor__close(424242) != 0);
  CHECK(__catalyst__executor__close(434343) != 0);
  CHECK_THAT(takeMessage(), Catch::Contains("424242") && !Catch::Contains("434343"));
  CHECK(__catalyst__executor__close(444444) != 0);
  clearError();
  CHECK(takeMessage() == "");
}

TEST_CASE("an async launch is awaited once through its token", "[runtime]") {
  LocalSession session;
  int64_t token = __catalyst__executor__launch_async(session.handle, "_catalyst_pyface_noop",
                                                     COURIER_KERNEL_SHAPES);
  REQUIRE(token != 0);
  __catalyst__executor__await(token);
  CHECK(takeMessage() == "");
  __catalyst__executor__await(token);
  CHECK_THAT(takeMessage(), Catch::Contains("unknown token"));

  // An entry the object lacks is refused when the launch starts, locally as remotely.
  int64_t failing = __catalyst__executor__launch_async(session.handle, "_catalyst_pyface_nothing",
                                                       COURIER_KERNEL_SHAPES);
  CHECK(failing == 0);
  CHECK_THAT(takeMessage(), Catch::Contains("no entry @nothing in object") &&
                                Catch::Contains("'local'") &&
                                !Catch::Contains("_catalyst_pyface_"));
}

TEST_CASE("call_wrapper returns the callee's bytes or a zeroed buffer", "[runtime]") {
  ScopeOptions options;
  options.addressOverride = "local";
  options.backend.plugins = {COURIER_TEST_PLUGIN};
  ModuleScope scope(options);
  int64_t session;
  {
    ModuleScope::Entered entered(scope);
    session = __catalyst__executor__open("192.0.2.1:7000");
  }
  REQUIRE(session != 0);

  double values[3] = {1, 2, 3.5};
  const char *args = reinterpret_cast<const char *>(values);
  void *out = kMarker;
  size_t outSize = 8;
  REQUIRE(__catalyst__executor__call_wrapper(session, "courier_test_sum", args, 24, &out,
                                             &outSize) == 0);
  CHECK(outSize == 8);
  CHECK(*static_cast<double *>(out) == 6.5);
  __catalyst__executor__free_result(out);

  outSize = 12;
  out = kMarker;
  CHECK(__catalyst__executor__call_wrapper(session, "courier_test_sum", args, 24, &out, &outSize) !=
        0);
  CHECK_THAT(takeMessage(),
             Catch::Contains("call 'courier_test_sum' on 'local'") && Catch::Contains("code 22"));
  REQUIRE(out != nullptr);
  CHECK(outSize == 12);
  CHECK(std::vector<char>(static_cast<char *>(out), static_cast<char *>(out) + 12) ==
        std::vector<char>(12, 0));
  __catalyst__executor__free_result(out);

  outSize = 4;
  out = kMarker;
  CHECK(__catalyst__executor__call_wrapper(session, "courier_unknown", args, 24, &out, &outSize) !=
        0);
  CHECK_THAT(takeMessage(), Catch::Contains("unknown symbol 'courier_unknown'"));
  __catalyst__executor__free_result(out);
  __catalyst__executor__free_result(nullptr);

  // Host code that does not say how big the reply is gets an error, not a guess.
  outSize = 8;
  out = nullptr;
  CHECK(__catalyst__executor__call_wrapper(session, "courier_test_sum", args, 24, &out, &outSize) !=
        0);
  CHECK_THAT(takeMessage(), Catch::Contains("the expected reply size is unknown"));
  CHECK(outSize == 0);
  // What such host code then copies out are zeros.
  REQUIRE(out != nullptr);
  CHECK(std::vector<char>(static_cast<char *>(out), static_cast<char *>(out) + 4096) ==
        std::vector<char>(4096, 0));
  __catalyst__executor__free_result(out);

  // The failures did not disturb the session.
  outSize = 8;
  out = kMarker;
  REQUIRE(__catalyst__executor__call_wrapper(session, "courier_test_sum", args, 16, &out,
                                             &outSize) == 0);
  CHECK(*static_cast<double *>(out) == 3);
  __catalyst__executor__free_result(out);
}

TEST_CASE("a scope's sessions close when the last scope that opened them goes", "[runtime]") {
  ScopeOptions options;
  options.addressOverride = "local";
  auto first = std::make_unique<ModuleScope>(options);
  auto second = std::make_unique<ModuleScope>(options);
  int64_t a, b;
  {
    ModuleScope::Entered entered(*first);
    a = __catalyst__executor__open("198.51.100.7:9000");
  }
  {
    ModuleScope::Entered entered(*second);
    b = __catalyst__executor__open("local");
    // A nested scope takes over for as long as it is entered.
    ModuleScope inner(ScopeOptions{});
    { ModuleScope::Entered nested(inner); }
  }
  REQUIRE(a != 0);
  CHECK(a == b);
  std::vector<double> x{1};
  first.reset();
  CHECK(scale(a, x) == std::vector<double>{2});
  second.reset();
  CHECK(__catalyst__executor__close(a) != 0);
  CHECK_THAT(takeMessage(), Catch::Contains("unknown session handle"));
}

TEST_CASE("a session opened outside any scope outlives the scopes that share it", "[runtime]") {
  LocalSession session;
  {
    ModuleScope scope(ScopeOptions{});
    ModuleScope::Entered entered(scope);
    CHECK(__catalyst__executor__open("local") == session.handle);
  }
  std::vector<double> x{2};
  CHECK(scale(session.handle, x) == std::vector<double>{4});
}

namespace {
/// Calls `courier_object_negate`, which only the add kernel's object exports: whether the
/// session still holds that object. A failure's message is left to takeMessage().
bool negates(int64_t session) {
  int32_t values[2] = {3, -4};
  void *out = kMarker;
  size_t outSize = 8;
  int32_t status = __catalyst__executor__call_wrapper(
      session, "courier_object_negate", reinterpret_cast<const char *>(values), 8, &out, &outSize);
  bool negated = status == 0 && static_cast<int32_t *>(out)[0] == -3;
  __catalyst__executor__free_result(out);
  return negated;
}
} // namespace

TEST_CASE("an object two scopes shipped stays until the second scope goes", "[runtime]") {
  LocalSession session;
  auto first = std::make_unique<ModuleScope>(ScopeOptions{});
  auto second = std::make_unique<ModuleScope>(ScopeOptions{});
  for (ModuleScope *scope : {first.get(), second.get()}) {
    ModuleScope::Entered entered(*scope);
    REQUIRE(__catalyst__executor__send_binary(session.handle, COURIER_KERNEL_ADD,
                                              COURIER_BINARY_FORMAT_OBJECT) == 0);
  }
  REQUIRE(negates(session.handle));
  first.reset();
  CHECK(negates(session.handle));
  second.reset();
  CHECK_FALSE(negates(session.handle));
  CHECK_THAT(takeMessage(), Catch::Contains("unknown symbol 'courier_object_negate'"));

  // The session itself stays open, and the object can be shipped to it again.
  std::vector<double> x{1};
  CHECK(scale(session.handle, x) == std::vector<double>{2});
  REQUIRE(__catalyst__executor__send_binary(session.handle, COURIER_KERNEL_ADD,
                                            COURIER_BINARY_FORMAT_OBJECT) == 0);
  CHECK(negates(session.handle));
}

TEST_CASE("an object shipped with no scope active outlives the scopes that shipped it too",
          "[runtime]") {
  LocalSession session;
  REQUIRE(__catalyst__executor__send_binary(session.handle, COURIER_KERNEL_ADD,
                                            COURIER_BINARY_FORMAT_OBJECT) == 0);
  {
    ModuleScope scope(ScopeOptions{});
    ModuleScope::Entered entered(scope);
    REQUIRE(__catalyst__executor__send_binary(session.handle, COURIER_KERNEL_ADD,
                                              COURIER_BINARY_FORMAT_OBJECT) == 0);
  }
  CHECK(negates(session.handle));
}

TEST_CASE("a scope that launches an object another scope shipped keeps it loaded", "[runtime]") {
  LocalSession session;
  auto shipper = std::make_unique<ModuleScope>(ScopeOptions{});
  ModuleScope launcher(ScopeOptions{});
  {
    ModuleScope::Entered entered(*shipper);
    REQUIRE(__catalyst__executor__send_binary(session.handle, COURIER_KERNEL_ADD,
                                              COURIER_BINARY_FORMAT_OBJECT) == 0);
  }
  {
    // The add kernel's entry is launched by path, as lowered code names objects.
    ModuleScope::Entered entered(launcher);
    int32_t a[2] = {1, 2}, b[2] = {10, 20};
    auto da = describe<1>(a, {2}, {1});
    auto db = describe<1>(b, {2}, {1});
    Descriptor<1> out;
    out.sizes[0] = 2;
    void *ins[] = {&da, &db}, *outs[] = {&out};
    size_t ranks[] = {1, 1}, sizes[] = {4, 4};
    REQUIRE(launch(session.handle, "add", COURIER_KERNEL_ADD, 2, ins, ranks, sizes, 1, outs, ranks,
                   sizes) == 0);
    CHECK(static_cast<int32_t *>(out.aligned)[1] == 22);
    std::free(out.allocated);
  }
  shipper.reset();
  CHECK(negates(session.handle));
}

TEST_CASE("eight threads launching on one session all get their own results", "[runtime]") {
  LocalSession session;
  REQUIRE(__catalyst__executor__send_binary(session.handle, COURIER_KERNEL_SCALE,
                                            COURIER_BINARY_FORMAT_OBJECT) == 0);
  std::vector<int> wrong(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        double x[3] = {double(t), double(i), double(t * 1000 + i)};
        Descriptor<1> in, out;
        in.allocated = in.aligned = x;
        in.sizes[0] = 3;
        in.strides[0] = 1;
        out.sizes[0] = 3;
        void *ins[] = {&in}, *outs[] = {&out};
        size_t ranks[] = {1}, sizes[] = {8};
        if (launch(session.handle, "_catalyst_pyface_scale", COURIER_KERNEL_SCALE, 1, ins, ranks,
                   sizes, 1, outs, ranks, sizes) != 0) {
          ++wrong[t];
          continue;
        }
        auto *y = static_cast<double *>(out.aligned);
        if (y[0] != 2.0 * t || y[1] != 2.0 * i || y[2] != 2.0 * (t * 1000 + i))
          ++wrong[t];
        std::free(out.allocated);
      }
    });
  for (auto &thread : threads)
    thread.join();
  CHECK(wrong == std::vector<int>(8, 0));
}

TEST_CASE("a hundred thousand launches do not leak", "[runtime][leak]") {
  LocalSession session;
  double x[4] = {1, 2, 3, 4};
  auto in = describe<1>(x, {4}, {1});
  void *ins[] = {&in};
  size_t ranks[] = {1}, sizes[] = {8};
  auto launchMany = [&](int count) {
    int failures = 0;
    for (int i = 0; i < count; ++i) {
      Descriptor<1> out;
      out.sizes[0] = 4;
      void *outs[] = {&out};
      failures += launch(session.handle, "_catalyst_pyface_scale", COURIER_KERNEL_SCALE, 1, ins,
                         ranks, sizes, 1, outs, ranks, sizes) != 0;
      std::free(out.allocated);
    }
    return failures;
  };
  REQUIRE(launchMany(1000) == 0);
  size_t before = mallinfo2().uordblks;
  REQUIRE(launchMany(100000) == 0);
  size_t after = mallinfo2().uordblks;
  // A leak of even one 32-byte result per launch would be 3 MB.
  CHECK(after < before + 256 * 1024);
}

TEST_CASE("the ABI symbol table lists every entry point once", "[runtime]") {
  std::set<std::string> names;
  for (const AbiSymbol &symbol : abiSymbols()) {
    CHECK(symbol.address != nullptr);
    names.insert(symbol.name);
  }
  CHECK(names.size() == 8);
  CHECK(names.count("__catalyst__executor__call_wrapper") == 1);
}

TEST_CASE("a file named by a hash its bytes do not have is refused, not shipped", "[runtime]") {
  LocalSession session;
  auto scale = llvm::MemoryBuffer::getFile(COURIER_KERNEL_SCALE);
  REQUIRE(scale);
  llvm::SmallString<128> dir;
  REQUIRE(!llvm::sys::fs::createUniqueDirectory("courier-runtime-named", dir));
  // The right bytes under their own hash are shipped; other bytes under that name are not.
  std::string named = (dir + "/" + courier::sha256Hex((*scale)->getBuffer()) + ".o").str();
  writeBytes(named, (*scale)->getBuffer());
  CHECK(__catalyst__executor__send_binary(session.handle, named.c_str(),
                                          COURIER_BINARY_FORMAT_OBJECT) == 0);
  std::string replaced = (dir + "/replaced").str();
  REQUIRE(!llvm::sys::fs::create_directory(replaced));
  replaced += "/" + courier::sha256Hex((*scale)->getBuffer()) + ".o";
  auto scale3 = llvm::MemoryBuffer::getFile(COURIER_KERNEL_SCALE3);
  REQUIRE(scale3);
  writeBytes(replaced, (*scale3)->getBuffer());
  CHECK(__catalyst__executor__send_binary(session.handle, replaced.c_str(),
                                          COURIER_BINARY_FORMAT_OBJECT) != 0);
  CHECK_THAT(takeMessage(), Catch::Contains(replaced) && Catch::Contains("refusing a replaced"));
  llvm::sys::fs::remove_directories(dir);
}

TEST_CASE("a content-addressed path sent again over a session is a lookup, not a read",
          "[runtime]") {
  LocalSession session;
  auto scale = llvm::MemoryBuffer::getFile(COURIER_KERNEL_SCALE);
  REQUIRE(scale);
  llvm::SmallString<128> dir;
  REQUIRE(!llvm::sys::fs::createUniqueDirectory("courier-resent", dir));
  std::string path = (dir + "/" + courier::sha256Hex((*scale)->getBuffer()) + ".o").str();
  writeBytes(path, (*scale)->getBuffer());
  REQUIRE(__catalyst__executor__send_binary(session.handle, path.c_str(),
                                            COURIER_BINARY_FORMAT_OBJECT) == 0);
  // Gone from disk: a second send (as lowered code does at every launching function's top)
  // and launches still find the object the session holds.
  llvm::sys::fs::remove_directories(dir);
  CHECK(__catalyst__executor__send_binary(session.handle, path.c_str(),
                                          COURIER_BINARY_FORMAT_OBJECT) == 0);
  CHECK(takeMessage() == "");
  double x = 2;
  auto in = describe<1>(&x, {1}, {1});
  Descriptor<1> out;
  out.sizes[0] = 1;
  void *ins[] = {&in}, *outs[] = {&out};
  size_t ranks[] = {1}, sizes[] = {8};
  REQUIRE(launch(session.handle, "_catalyst_pyface_scale", path.c_str(), 1, ins, ranks, sizes, 1,
                 outs, ranks, sizes) == 0);
  CHECK(*static_cast<double *>(out.aligned) == 4);
  std::free(out.allocated);
}

TEST_CASE("an object rebuilt at a fixed path is read and shipped again when sent", "[runtime]") {
  LocalSession session;
  llvm::SmallString<128> path;
  REQUIRE(!llvm::sys::fs::createTemporaryFile("courier-rebuilt", "o", path));
  double x = 1;
  for (auto [source, expected] :
       {std::pair{COURIER_KERNEL_SCALE, 2.0}, std::pair{COURIER_KERNEL_SCALE3, 3.0}}) {
    auto bytes = llvm::MemoryBuffer::getFile(source);
    REQUIRE(bytes);
    writeBytes(path, (*bytes)->getBuffer());
    REQUIRE(__catalyst__executor__send_binary(session.handle, path.c_str(),
                                              COURIER_BINARY_FORMAT_OBJECT) == 0);
    auto in = describe<1>(&x, {1}, {1});
    Descriptor<1> out;
    out.sizes[0] = 1;
    void *ins[] = {&in}, *outs[] = {&out};
    size_t ranks[] = {1}, sizes[] = {8};
    REQUIRE(launch(session.handle, "_catalyst_pyface_scale", path.c_str(), 1, ins, ranks, sizes, 1,
                   outs, ranks, sizes) == 0);
    CHECK(*static_cast<double *>(out.aligned) == expected);
    std::free(out.allocated);
  }
  llvm::sys::fs::remove(path);
}

TEST_CASE("an input descriptor with a negative or overflowing shape is refused", "[runtime]") {
  LocalSession session;
  double x[4] = {1, 2, 3, 4};
  for (int64_t bad : {int64_t(-1), int64_t(1) << 62}) {
    auto in = describe<1>(x, {bad}, {1});
    Descriptor<1> out;
    out.sizes[0] = -1;
    void *ins[] = {&in}, *outs[] = {&out};
    size_t ranks[] = {1}, sizes[] = {8};
    CHECK(launch(session.handle, "_catalyst_pyface_scale", COURIER_KERNEL_SCALE, 1, ins, ranks,
                 sizes, 1, outs, ranks, sizes) != 0);
    CHECK_THAT(takeMessage(), Catch::Contains("input 0 has shape"));
    std::free(out.allocated);
  }
}

TEST_CASE("a scope's objects are shipped from memory, never read from a file", "[runtime]") {
  auto scale = llvm::MemoryBuffer::getFile(COURIER_KERNEL_SCALE);
  REQUIRE(scale);
  ScopeOptions options;
  std::string name = "memory:" + courier::sha256Hex((*scale)->getBuffer()) + ".o";
  options.objects[name] = (*scale)->getBuffer().str();
  ModuleScope scope(options);
  ModuleScope::Entered entered(scope);
  LocalSession session;
  REQUIRE(__catalyst__executor__send_binary(session.handle, name.c_str(),
                                            COURIER_BINARY_FORMAT_OBJECT) == 0);
  std::vector<double> x{1, 2};
  auto in = describe<1>(x.data(), {2}, {1});
  Descriptor<1> out;
  void *ins[] = {&in};
  void *outs[] = {&out};
  size_t ranks[] = {1}, sizes[] = {8};
  out.sizes[0] = -1;
  if (launch(session.handle, "_catalyst_pyface_scale", name.c_str(), 1, ins, ranks, sizes, 1, outs,
             ranks, sizes) != 0)
    FAIL(takeMessage());
  auto *data = static_cast<double *>(out.aligned) + out.offset;
  CHECK(std::vector<double>(data, data + out.sizes[0]) == std::vector<double>{2, 4});
  std::free(out.allocated);
}

TEST_CASE("two scopes naming different objects alike each launch their own", "[runtime]") {
  // Two versions of one module, both loaded: each names its kernel "target:0-dev".
  auto scale = llvm::MemoryBuffer::getFile(COURIER_KERNEL_SCALE);
  auto scale3 = llvm::MemoryBuffer::getFile(COURIER_KERNEL_SCALE3);
  REQUIRE(scale);
  REQUIRE(scale3);
  const char *name = "target:0-dev";
  ScopeOptions first, second;
  first.objects[name] = (*scale)->getBuffer().str();
  second.objects[name] = (*scale3)->getBuffer().str();
  ModuleScope one(first), two(second);
  LocalSession session;
  auto run = [&](ModuleScope &scope) {
    ModuleScope::Entered entered(scope);
    REQUIRE(__catalyst__executor__send_binary(session.handle, name, COURIER_BINARY_FORMAT_OBJECT) ==
            0);
    double x = 1;
    auto in = describe<1>(&x, {1}, {1});
    Descriptor<1> out;
    out.sizes[0] = 1;
    void *ins[] = {&in}, *outs[] = {&out};
    size_t ranks[] = {1}, sizes[] = {8};
    if (launch(session.handle, "_catalyst_pyface_scale", name, 1, ins, ranks, sizes, 1, outs, ranks,
               sizes) != 0)
      FAIL(takeMessage());
    double result = *static_cast<double *>(out.aligned);
    std::free(out.allocated);
    return result;
  };
  // Interleaved, as calls into both versions are during a reload.
  CHECK(run(one) == 2.0);
  CHECK(run(two) == 3.0);
  CHECK(run(one) == 2.0);
  CHECK(run(two) == 3.0);
}
