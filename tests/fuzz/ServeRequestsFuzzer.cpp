// Fuzzes courier-serve's request bodies (serve/RequestBodies.h) as the server
// reads them: the input's first line names the request, the rest is its body.
//   create               POST /v1/modules
//   replace NAME [text]  PUT /v1/modules/NAME, JSON or (with "text") plain MLIR
//   invoke SPEC...       POST .../invoke/ENTRY with a JSON body, SPECs as EntrySpecs.h reads them
//   frame                the header line of a frame invoke
#include "tests/fuzz/EntrySpecs.h"
#include "tests/fuzz/FuzzSupport.h"

#include "serve/RequestBodies.h"

#include "transport/HostPort.h"

#include <optional>

using namespace courier;
using namespace courier::fuzz;

namespace {

/// courier-serve's default body limit.
constexpr uint64_t kMaxBody = uint64_t(256) << 20;

void checkModule(llvm::Expected<serve::ModuleRequest> request, llvm::StringRef body) {
  if (!request)
    return refused(request.takeError());
  if (request->options) {
    if (request->options->optLevel > 3)
      broken("an optLevel above 3");
    // Empty: the server's own --executor.
    const std::string &executor = request->options->executor;
    if (!executor.empty() && executor != "local") {
      llvm::Expected<transport::HostPort> address = transport::parseHostPort(executor);
      if (!address)
        broken("an executor address parseHostPort refuses: " + llvm::toString(address.takeError()));
    }
  }
  if (request->mlir.size() > body.size())
    broken("MLIR text longer than the body it came in");
}

void checkFrame(llvm::StringRef line) {
  llvm::Expected<serve::FrameInputs> frame = serve::readFrameHeader(line, kMaxBody);
  if (!frame)
    return refused(frame.takeError());
  uint64_t total = 0;
  for (const Tensor &t : frame->inputs) {
    std::optional<int64_t> count = checkedElementCount(t.shape, dtypeSize(t.dtype));
    if (!count)
      broken("a frame input whose shape does not fit 63 bits");
    total += uint64_t(*count) * dtypeSize(t.dtype);
    if (!t.bytes.empty())
      broken("a frame input whose bytes were allocated from its header alone");
  }
  if (total != frame->payloadBytes || total > kMaxBody)
    broken("a frame whose payload size is not its inputs' bytes, within the limit");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef body = bytesOf(data, size);
  llvm::SmallVector<llvm::StringRef, 6> words = takeWords(body);
  if (words.empty())
    return -1;
  if (words[0] == "create" && words.size() == 1) {
    checkModule(serve::readCreateBody(body), body);
  } else if (words[0] == "replace" && (words.size() == 2 || words.size() == 3)) {
    bool plainText = words.size() == 3 && words[2] == "text";
    checkModule(serve::readReplaceBody(words[1], body.str(), plainText), body);
  } else if (words[0] == "invoke") {
    std::optional<EntrySignature> entry = entryOf(llvm::ArrayRef(words).drop_front());
    if (!entry)
      return -1;
    llvm::Expected<std::vector<Tensor>> inputs = serve::readInvokeBody(body, *entry);
    if (!inputs)
      return refused(inputs.takeError()), 0;
    if (inputs->size() != entry->inputs.size())
      broken("an invoke body read into another number of inputs than the entry takes");
  } else if (words[0] == "frame" && words.size() == 1) {
    checkFrame(body.split('\n').first);
  } else {
    return -1;
  }
  return 0;
}
