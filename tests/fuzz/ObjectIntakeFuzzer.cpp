// Fuzzes object intake as an executor performs it: its features record read
// (executor/ElfValidation.h), then as a session's host does (executor/ObjectHost.h): an object's
// bytes are validated (executor/ElfValidation.h), linked with ORC and unloaded again. The
// seeds are the test kernels; a mutant JITLink would trip over must be refused by the
// validation, with an error, before it is linked. Nothing of a linked object is run.
#include "tests/fuzz/FuzzSupport.h"

#include "executor/ElfValidation.h"
#include "executor/ObjectHost.h"

#include "abi/KernelABI.h"
#include "transport/Backend.h"

#include <memory>

using namespace courier;
using namespace courier::fuzz;
using courier::executor::ObjectHost;
using courier::executor::ObjectHostOptions;
using courier::executor::ObjectInfo;
using courier::executor::readRequiredFeatures;
using namespace courier::transport;

namespace {

/// One host for the whole run, as a session's worker keeps one for all its objects. It
/// takes objects without signature tables too, as a worker of an executor started with
/// --allow-unsigned-objects does, so that more mutants reach the linker.
ObjectHost &host() {
  static std::unique_ptr<ObjectHost> instance = [] {
    ObjectHostOptions options;
    options.allowUnsignedObjects = true;
    llvm::Expected<std::unique_ptr<ObjectHost>> created = ObjectHost::create(nullptr, options);
    if (!created)
      broken("creating the object host: " + llvm::toString(created.takeError()));
    return std::move(*created);
  }();
  return *instance;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ObjectBlob object = ObjectBlob::fromBytes(bytesOf(data, size).str());
  // The executor reads an object's features record in its main process, before any sandbox
  // (executor/ExecutorCore.cpp, storeObject): every mutant is read or refused with an error.
  llvm::Expected<std::vector<std::string>> required =
      readRequiredFeatures(object.sha256, *object.bytes, /*anyMachine=*/true);
  if (!required)
    llvm::consumeError(required.takeError());
  ObjectHost &objects = host();
  if (llvm::Error error = objects.addObject(object))
    return refused(std::move(error)), 0;
  std::optional<ObjectInfo> info = objects.describe(object.sha256);
  if (!info)
    broken("a loaded object the host cannot describe");
  for (const std::string &entry : info->entries) {
    if (!llvm::StringRef(entry).starts_with(COURIER_ENTRY_PREFIX))
      broken("an entry without the entry prefix: " + entry);
    if (!objects.hasEntry(object.sha256, entry))
      broken("a described entry the host does not have: " + entry);
  }
  for (const auto &[entry, table] : info->signatures)
    if (!info->hasEntry(entry))
      broken("a signature table for an entry the object does not export: " + entry);
  if (llvm::Error error = objects.removeObject(object.sha256))
    broken("unloading a loaded object: " + llvm::toString(std::move(error)));
  if (objects.hasObject(object.sha256))
    broken("an object still loaded after its removal");
  return 0;
}
