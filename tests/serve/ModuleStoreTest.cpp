// courier-serve's module store as a library, in this process and without HTTP: creating,
// replacing, calling and removing modules, and the codes its refusals carry.
#include "serve/ModuleStore.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <unistd.h>

using namespace courier;
using namespace courier::serve;

namespace {

/// A module whose @main applies `op` to its input and a splat of `value`.
std::string elementwise(const std::string &op, const std::string &value) {
  return R"(module @m {
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    %c = arith.constant dense<)" +
         value + R"(> : tensor<4xf64>
    %y = )" +
         op +
         R"( %x, %c : tensor<4xf64>
    return %y : tensor<4xf64>
  }
})";
}

/// Doubles its input; adds one to it.
const std::string kScale = elementwise("arith.mulf", "2.0");
const std::string kShift = elementwise("arith.addf", "1.0");

/// The code of a store's failure (consumed), or nothing for success.
std::optional<ErrorCode> codeOf(llvm::Error error) {
  std::optional<ErrorCode> code;
  llvm::handleAllErrors(std::move(error), [&](const transport::CodedError &e) { code = e.kind; });
  return code;
}

/// The value of `expected`, or the test fails with its error.
template <typename T> T take(llvm::Expected<T> expected) {
  if (!expected)
    FAIL(llvm::toString(expected.takeError()));
  return std::move(*expected);
}

/// Calls `main` of the module's current version on [1, 2, 3, 4].
std::vector<double> callMain(ModuleStore &store, llvm::StringRef name) {
  Pinned pinned = take(store.pin(name));
  std::vector<Tensor> out =
      take(store.invoke(pinned, "main", {Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4})}));
  llvm::ArrayRef<double> y = out[0].view<double>();
  return {y.begin(), y.end()};
}

/// A store of in-process modules with its cache in a directory of its own.
struct InProcessStore {
  InProcessStore() {
    cache = std::filesystem::temp_directory_path() /
            ("courier-store-test-" + std::to_string(::getpid()));
    StoreOptions options;
    options.engine.cacheDir = cache.string();
    options.engine.isolation = Isolation::InProcess;
    options.engine.jobs = 1;
    store = std::make_unique<ModuleStore>(options);
  }
  ~InProcessStore() {
    store.reset();
    std::error_code ignored;
    std::filesystem::remove_all(cache, ignored);
  }
  std::filesystem::path cache;
  std::unique_ptr<ModuleStore> store;
};

} // namespace

TEST_CASE("the module store creates, calls, replaces and removes modules in process",
          "[serve][store]") {
  InProcessStore fixture;
  ModuleStore &store = *fixture.store;

  LoadResult created =
      take(store.load("m", kScale, std::nullopt, ModuleStore::Mode::Create, "api"));
  CHECK(created.created);
  CHECK(created.info.version == 1);
  CHECK(callMain(store, "m") == std::vector<double>{2, 4, 6, 8});

  // A second create of the name is refused; a replace makes version 2.
  CHECK(
      codeOf(store.load("m", kShift, std::nullopt, ModuleStore::Mode::Create, "api").takeError()) ==
      ErrorCode::ModuleExists);
  LoadResult replaced =
      take(store.load("m", kShift, std::nullopt, ModuleStore::Mode::Replace, "api"));
  CHECK_FALSE(replaced.created);
  CHECK(replaced.info.version == 2);
  CHECK(callMain(store, "m") == std::vector<double>{2, 3, 4, 5});

  // A replacement that does not compile leaves version 2 serving.
  CHECK(codeOf(store
                   .load("m", "module { func.func @broken( }", std::nullopt,
                         ModuleStore::Mode::Replace, "api")
                   .takeError()) == ErrorCode::CompileFailed);
  CHECK(callMain(store, "m") == std::vector<double>{2, 3, 4, 5});
  ModuleInfo info = take(store.info("m"));
  CHECK(info.version == 2);
  CHECK(info.calls == 3); // Since the module was created, over its versions.
  CHECK(info.failedReloads == 1);

  CHECK(codeOf(store.remove("m")) == std::nullopt);
  CHECK_FALSE(store.holds("m"));
  CHECK(codeOf(store.pin("m").takeError()) == ErrorCode::UnknownModule);
  CHECK(codeOf(store.load("other", kScale, std::nullopt, ModuleStore::Mode::Replace, "api")
                   .takeError()) == ErrorCode::UnknownModule);
  CHECK(store.size() == 0);
}

TEST_CASE("the module store refuses bad names and calls by their codes", "[serve][store]") {
  InProcessStore fixture;
  ModuleStore &store = *fixture.store;
  CHECK_FALSE(isModuleName(".hidden"));
  CHECK_FALSE(isModuleName(std::string(65, 'a')));
  CHECK(isModuleName("model-1.v2"));

  take(store.load("m", kScale, std::nullopt, ModuleStore::Mode::Upsert, "api"));
  Pinned pinned = take(store.pin("m"));
  CHECK(codeOf(store.entry(pinned, "absent").takeError()) == ErrorCode::UnknownEntry);
  CHECK(codeOf(store.invoke(pinned, "main", {Tensor::fromDoubles(DType::F64, {3}, {1, 2, 3})})
                   .takeError()) == ErrorCode::InvalidInput);
  ModuleInfo info = take(store.info("m"));
  CHECK(info.failedCalls == 1);
}
