// Fuzzes courier-serve's reading of a KServe v2 infer request (serve/
// KServeRequest.h): the input's first line declares the model's entry and how the body is
// framed, the rest is the body, JSON then (with a header length) the binary inputs' bytes.
//   infer LENGTH|- [shm] SPEC...   LENGTH is the Inference-Header-Content-Length ('-': none);
//                                  with "shm", tensors may name shared-memory regions;
//                                  SPECs as EntrySpecs.h reads them, the entry's outputs the same
#include "tests/fuzz/EntrySpecs.h"
#include "tests/fuzz/FuzzSupport.h"

#include "serve/KServeRequest.h"

#include <cstring>
#include <optional>
#include <set>

using namespace courier;
using namespace courier::fuzz;
namespace v2 = courier::serve::v2;

namespace {

/// courier-serve's default body limit.
constexpr uint64_t kMaxBody = uint64_t(256) << 20;

bool fits(const Tensor &t, const TensorSpec &spec) {
  if (spec.isScalar)
    return t.shape.empty();
  if (t.shape.size() != spec.shape.size())
    return false;
  for (size_t d = 0; d < t.shape.size(); ++d)
    if (spec.shape[d] >= 0 && spec.shape[d] != t.shape[d])
      return false;
  return true;
}

void checkRequest(const v2::InferRequest &request, const EntrySignature &entry,
                  llvm::StringRef tail, bool whole) {
  if (request.inputs.size() != entry.inputs.size() || request.sources.size() != entry.inputs.size())
    broken("a request read into another number of inputs than the entry takes");
  uint64_t binary = 0;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const Tensor &t = request.inputs[i];
    const v2::InputSource &source = request.sources[i];
    if (t.dtype != entry.inputs[i].dtype)
      broken("an input read with another datatype than the entry's");
    if (!fits(t, entry.inputs[i]))
      broken("an input read with a shape the entry does not take");
    std::optional<int64_t> count = checkedElementCount(t.shape, dtypeSize(t.dtype));
    if (!count)
      broken("an input whose shape does not fit 63 bits");
    uint64_t bytes = uint64_t(*count) * dtypeSize(t.dtype);
    switch (source.kind) {
    case v2::InputSource::Kind::Json:
      if (t.bytes.size() != bytes)
        broken("a JSON input without the bytes its shape needs");
      break;
    case v2::InputSource::Kind::Binary:
      if (source.tailOffset != binary)
        broken("binary inputs that are not packed in the order listed");
      binary += bytes;
      if (whole) {
        if (t.bytes.size() != bytes)
          broken("a binary input without the bytes its shape needs");
        if (bytes && std::memcmp(t.bytes.data(), tail.data() + source.tailOffset, bytes) != 0)
          broken("a binary input whose bytes are not the tail's at its offset");
      } else if (!t.bytes.empty()) {
        broken("a binary input allocated from the JSON alone");
      }
      break;
    case v2::InputSource::Kind::SharedMemory:
      if (source.shared.bytes != bytes || source.shared.region.empty())
        broken("a shared-memory input whose region size is not its shape's bytes");
      if (!t.bytes.empty())
        broken("a shared-memory input allocated before its region was looked up");
      break;
    }
  }
  if (binary != request.tailBytes || binary > kMaxBody)
    broken("binary inputs that do not add up to the tail, within the limit");
  if (whole && request.tailBytes != tail.size())
    broken("a body accepted with a tail other than the binary inputs' bytes");
  std::set<size_t> asked;
  for (const v2::OutputRequest &output : request.outputs)
    if (output.index >= entry.outputs.size() || !asked.insert(output.index).second)
      broken("an output asked for that the entry lacks, or twice");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef body = bytesOf(data, size);
  llvm::SmallVector<llvm::StringRef, 6> words = takeWords(body);
  if (words.size() < 2 || words[0] != "infer")
    return -1;
  std::optional<uint64_t> length;
  if (words[1] != "-") {
    uint64_t n = 0;
    if (words[1].getAsInteger(10, n))
      return -1;
    length = n;
  }
  size_t first = 2;
  bool shared = words.size() > 2 && words[2] == "shm";
  if (shared)
    ++first;
  std::optional<EntrySignature> entry = entryOf(llvm::ArrayRef(words).drop_front(first));
  if (!entry)
    return -1;
  entry->outputs = entry->inputs;
  if (shared) {
    llvm::Expected<v2::InferRequest> header = v2::readInferHeader(body, *entry, kMaxBody, true);
    if (!header)
      return refused(header.takeError()), 0;
    checkRequest(*header, *entry, {}, /*whole=*/false);
    return 0;
  }
  llvm::Expected<v2::InferRequest> request = v2::readInferBody(body, length, *entry, kMaxBody);
  if (!request)
    return refused(request.takeError()), 0;
  checkRequest(*request, *entry, body.drop_front(length.value_or(body.size())), /*whole=*/true);
  // What the server writes of an output reads back as the same tensor: JSON data of a JSON
  // input, round-tripped through appendJsonData.
  for (size_t i = 0; i < request->inputs.size(); ++i) {
    const Tensor &t = request->inputs[i];
    if (request->sources[i].kind != v2::InputSource::Kind::Json || t.numElements() > 4096)
      continue;
    std::string again = "{\"inputs\":[{\"name\":\"input0\",\"datatype\":\"" +
                        v2::datatypeName(t.dtype).str() + "\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d)
      again += (d ? "," : "") + std::to_string(t.shape[d]);
    again += "],\"data\":";
    v2::appendJsonData(again, t);
    again += "}]}";
    EntrySignature one{"g", {entry->inputs[i]}, {}, {}, {}, {}};
    llvm::Expected<v2::InferRequest> read = v2::readInferBody(again, std::nullopt, one, kMaxBody);
    if (!read)
      broken("written output data does not read back: " + llvm::toString(read.takeError()));
    if (read->inputs[0].bytes != t.bytes || read->inputs[0].shape != t.shape)
      broken("written output data reads back as another tensor");
  }
  return 0;
}
