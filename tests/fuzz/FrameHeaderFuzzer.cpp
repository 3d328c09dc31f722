// Fuzzes the launch frame as courier-executor and the HTTP client receive it
// (transport/Wire.h): a request's or a reply's header line, and the whole frame fed to
// FrameReader in pieces. The input's first byte picks which and how large the pieces are;
// the rest is the frame.
#include "tests/fuzz/FuzzSupport.h"

#include "transport/Wire.h"

#include "llvm/ADT/StringExtras.h"

#include <cstring>
#include <string>
#include <vector>

using namespace courier;
using namespace courier::fuzz;
namespace wire = courier::transport::wire;

namespace {

/// A frame whose tensors take more than this is refused before any buffer is sized, as the
/// servers refuse one beyond their body limit.
constexpr uint64_t kMaxPayload = 1 << 20;

/// What a decoded header promises: packed tensors, back to back from offset 0, each as many
/// bytes as its shape needs, all of them within 64 bits.
void checkTensors(const std::vector<wire::TensorHeader> &tensors) {
  if (tensors.size() > wire::kMaxFrameTensors)
    broken("more tensors than kMaxFrameTensors");
  uint64_t offset = 0;
  for (const wire::TensorHeader &t : tensors) {
    if (t.sizes.size() > wire::kMaxFrameRank)
      broken("a rank above kMaxFrameRank");
    if (t.offset != offset)
      broken("offsets that are not consecutive");
    llvm::Expected<uint64_t> need = wire::packedBytes(t.elemSize, t.sizes);
    if (!need)
      broken("a tensor whose shape packedBytes refuses: " + llvm::toString(need.takeError()));
    if (*need != t.bytes)
      broken("a byte count its shape does not need");
    if (t.bytes > UINT64_MAX - offset)
      broken("tensors whose bytes add up past 64 bits");
    offset += t.bytes;
  }
}

bool sameTensors(const std::vector<wire::TensorHeader> &a,
                 const std::vector<wire::TensorHeader> &b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].elemSize != b[i].elemSize || a[i].sizes != b[i].sizes || a[i].offset != b[i].offset ||
        a[i].bytes != b[i].bytes)
      return false;
  return true;
}

/// A request header that decodes re-encodes to one that decodes the same.
void checkRequest(llvm::StringRef line) {
  llvm::Expected<wire::LaunchRequest> request = wire::decodeLaunchRequest(line);
  if (!request)
    return refused(request.takeError());
  checkTensors(request->inputs);
  if (!wire::isSha256(request->object))
    broken("an object that is not a SHA-256");
  for (const transport::ResultSpec &r : request->results)
    if (r.rank < 0 || r.rank > int64_t(wire::kMaxFrameRank) || r.elemSize <= 0)
      broken("a result of impossible rank or element size");
  llvm::Expected<wire::LaunchRequest> again =
      wire::decodeLaunchRequest(wire::encodeLaunchRequest(*request));
  if (!again)
    broken("an encoded request that does not decode: " + llvm::toString(again.takeError()));
  bool sameResults = again->results.size() == request->results.size();
  for (size_t i = 0; sameResults && i < request->results.size(); ++i)
    sameResults = again->results[i].rank == request->results[i].rank &&
                  again->results[i].elemSize == request->results[i].elemSize;
  // Names travel as JSON strings, whose invalid UTF-8 the encoder replaces: only an ASCII
  // name must come back as it was.
  bool ascii = llvm::all_of(request->entry, [](char c) { return llvm::isASCII(c); });
  bool sameEntry = again->entry == request->entry || !ascii;
  if (again->object != request->object || !sameEntry ||
      !sameTensors(again->inputs, request->inputs) || !sameResults)
    broken("a request that changes in a round trip");
}

void checkReply(llvm::StringRef line) {
  llvm::Expected<wire::LaunchReply> reply = wire::decodeLaunchReply(line);
  if (!reply)
    return refused(reply.takeError());
  checkTensors(reply->results);
  llvm::Expected<wire::LaunchReply> again =
      wire::decodeLaunchReply(wire::encodeLaunchReply(*reply));
  if (!again)
    broken("an encoded reply that does not decode: " + llvm::toString(again.takeError()));
  if (!sameTensors(again->results, reply->results))
    broken("a reply that changes in a round trip");
}

/// Feeds `frame` to a FrameReader `piece` bytes at a time into buffers sized as its header
/// says; an accepted frame must land, byte for byte, where the header put each tensor.
void checkFrame(llvm::StringRef frame, size_t piece, bool asRequest) {
  std::vector<std::vector<char>> buffers;
  wire::FrameReader reader(
      [&](llvm::StringRef line) -> llvm::Expected<std::vector<wire::Destination>> {
        std::vector<wire::TensorHeader> tensors;
        if (asRequest) {
          llvm::Expected<wire::LaunchRequest> request = wire::decodeLaunchRequest(line);
          if (!request)
            return request.takeError();
          tensors = std::move(request->inputs);
        } else {
          llvm::Expected<wire::LaunchReply> reply = wire::decodeLaunchReply(line);
          if (!reply)
            return reply.takeError();
          tensors = std::move(reply->results);
        }
        uint64_t total = 0;
        for (const wire::TensorHeader &t : tensors) {
          if (t.bytes > kMaxPayload - total)
            return transport::makeCodedError(transport::ErrorCode::PayloadTooLarge,
                                             "the fuzzer's payload limit");
          total += t.bytes;
        }
        std::vector<wire::Destination> destinations;
        for (const wire::TensorHeader &t : tensors) {
          buffers.emplace_back(t.bytes);
          destinations.push_back({buffers.back().data(), t.bytes});
        }
        return destinations;
      });
  for (size_t at = 0; at < frame.size(); at += piece)
    if (llvm::Error error = reader.feed(frame.data() + at, std::min(piece, frame.size() - at)))
      return refused(std::move(error));
  if (llvm::Error error = reader.finish())
    return refused(std::move(error));
  std::string landed;
  for (const std::vector<char> &buffer : buffers)
    landed.append(buffer.data(), buffer.size());
  if (landed != frame.split('\n').second)
    broken("a frame whose tensor bytes did not land where its header put them");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  uint8_t mode = data[0];
  llvm::StringRef frame = bytesOf(data + 1, size - 1);
  llvm::StringRef line = frame.split('\n').first;
  if (mode & 0x80) {
    checkReply(line);
  } else {
    checkRequest(line);
  }
  // Pieces of 1 to 64 bytes, or the whole frame at once.
  size_t piece = (mode & 0x3f) ? (mode & 0x3f) : frame.size() + 1;
  checkFrame(frame, piece, !(mode & 0x80));
  return 0;
}
