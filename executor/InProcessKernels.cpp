// A session's kernels in this process, their failures as wire codes.
#include "executor/InProcessKernels.h"

#include "executor/HostErrors.h"
#include "executor/KernelHost.h"

#include "llvm/Support/FormatVariadic.h"

namespace courier::executor {

using transport::ErrorCode;
using transport::makeCodedError;

llvm::Expected<std::shared_ptr<InProcessKernels>>
InProcessKernels::create(std::shared_ptr<PluginSet> plugins, ObjectHostOptions options) {
  llvm::Expected<std::unique_ptr<ObjectHost>> objects =
      ObjectHost::create(std::move(plugins), options);
  if (!objects)
    return makeCodedError(ErrorCode::Internal,
                          "creating an object host: " + llvm::toString(objects.takeError()));
  return std::make_shared<InProcessKernels>(std::move(*objects));
}

InProcessKernels::InProcessKernels(std::unique_ptr<ObjectHost> objects)
    : objects(std::move(objects)) {}

llvm::Error InProcessKernels::attach(const transport::ObjectBlob &blob) {
  // A no-op once loaded (ObjectHost::addObject). The object host's message names the object;
  // its own codes (unsigned_object) stay.
  if (llvm::Error error = objects->addObject(blob))
    return classifyHostError(std::move(error), ErrorCode::InvalidObject, ErrorCode::InvalidObject,
                             "");
  return llvm::Error::success();
}

void InProcessKernels::detach(llvm::StringRef sha) {
  // Unloading cannot fail in a way the client could act on.
  llvm::consumeError(objects->removeObject(sha));
}

bool InProcessKernels::attached(llvm::StringRef sha) const { return objects->hasObject(sha); }

std::optional<ObjectInfo> InProcessKernels::describe(llvm::StringRef sha) const {
  return objects->describe(sha);
}

llvm::Error InProcessKernels::checkAsyncEntry(llvm::StringRef sha, llvm::StringRef entry) const {
  return objects->checkInfo(
      sha, [&](const ObjectInfo *info) { return checkAsyncLaunch(info, sha, entry); });
}

llvm::Expected<std::vector<transport::OwnedTensor>> InProcessKernels::launch(
    llvm::StringRef object, llvm::StringRef entry, llvm::ArrayRef<transport::TensorView> inputs,
    llvm::ArrayRef<transport::ResultSpec> results, llvm::MutableArrayRef<char> resultArena) {
  llvm::Expected<std::vector<transport::OwnedTensor>> produced =
      objects->launch(object, entry, inputs, results, resultArena);
  if (!produced)
    return classifyHostError(produced.takeError(), ErrorCode::UnknownEntry, ErrorCode::LaunchFailed,
                             "launching '" + entry + "'");
  if (produced->size() != results.size())
    return makeCodedError(ErrorCode::LaunchFailed,
                          llvm::formatv("'{0}' returned {1} results, expected {2}", entry,
                                        produced->size(), results.size()));
  return produced;
}

llvm::Expected<std::string> InProcessKernels::call(llvm::StringRef symbol, llvm::StringRef input,
                                                   uint64_t outputSize) {
  llvm::Expected<std::string> produced = objects->call(symbol, input, outputSize);
  if (!produced)
    return classifyHostError(produced.takeError(), ErrorCode::UnknownSymbol, ErrorCode::CallFailed,
                             "calling '" + symbol + "'");
  return produced;
}

} // namespace courier::executor
