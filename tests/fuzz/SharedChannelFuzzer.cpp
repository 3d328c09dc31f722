// Fuzzes the same-host channel's messages (transport/SharedChannel.h) as each end reads them
// from the control page the other wrote: the executor a launch request, the client a reply.
// The input's first byte picks which and the region size the message is checked against;
// the rest is the message.
#include "tests/fuzz/FuzzSupport.h"

#include "transport/SharedChannel.h"

#include <string>

using namespace courier;
using namespace courier::fuzz;
namespace shm = courier::transport::shm;
namespace wire = courier::transport::wire;

namespace {

/// A request that decodes keeps every promise the executor relies on before it reads the
/// input region, and survives a round trip.
void checkRequest(llvm::StringRef bytes, uint64_t region) {
  llvm::Expected<shm::LaunchRequest> request = shm::decodeLaunchRequest(bytes, region);
  if (!request)
    return refused(request.takeError());
  const wire::LaunchRequest &launch = request->launch;
  if (!wire::isSha256(launch.object))
    broken("an object that is not a SHA-256");
  if (launch.inputs.size() > wire::kMaxFrameTensors ||
      launch.results.size() > wire::kMaxFrameTensors)
    broken("more tensors than kMaxFrameTensors");
  for (const wire::TensorHeader &t : launch.inputs) {
    if (t.sizes.size() > wire::kMaxFrameRank)
      broken("an input above kMaxFrameRank");
    llvm::Expected<uint64_t> need = wire::packedBytes(t.elemSize, t.sizes);
    if (!need || *need != t.bytes)
      broken("an input whose byte count its shape does not need");
    if (t.offset % shm::kAlignment || t.offset > region || region - t.offset < t.bytes)
      broken("an input outside the input region");
  }
  for (const transport::ResultSpec &r : launch.results)
    if (r.rank < 0 || r.rank > int64_t(wire::kMaxFrameRank) || r.elemSize <= 0)
      broken("a result of impossible rank or element size");
  if (shm::replyBytes(launch.results) > shm::kSlotBytes)
    broken("a request whose reply would overflow the reply slot");
  llvm::Expected<shm::LaunchRequest> again =
      shm::decodeLaunchRequest(shm::encodeLaunchRequest(*request), region);
  if (!again)
    broken("an encoded request that does not decode: " + llvm::toString(again.takeError()));
  if (again->launch.object != launch.object || again->launch.entry != launch.entry ||
      again->deadlineMs != request->deadlineMs ||
      again->launch.inputs.size() != launch.inputs.size() ||
      again->launch.results.size() != launch.results.size())
    broken("a request that changes in a round trip");
}

/// A reply that decodes puts every result inside the region it names.
void checkReply(llvm::StringRef bytes, uint64_t region) {
  llvm::Expected<shm::LaunchReply> reply = shm::decodeLaunchReply(bytes, region);
  if (!reply)
    return refused(reply.takeError());
  if (reply->failure || reply->redirect)
    return;
  if (!shm::checkPlaced(*reply, region))
    broken("a result outside its region");
  for (const wire::TensorHeader &t : reply->results) {
    llvm::Expected<uint64_t> need = wire::packedBytes(t.elemSize, t.sizes);
    if (!need || *need != t.bytes)
      broken("a result whose byte count its shape does not need");
  }
  llvm::Expected<shm::LaunchReply> again =
      shm::decodeLaunchReply(shm::encodeLaunchReply(*reply), region);
  if (!again || again->results.size() != reply->results.size())
    broken("a reply that changes in a round trip");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  uint8_t how = data[0];
  // Regions from empty to 1 TiB, as --shm-arena-mib allows.
  uint64_t region = (how & 0x7f) == 0 ? 0 : uint64_t(1) << ((how & 0x7f) % 41);
  llvm::StringRef bytes = bytesOf(data + 1, size - 1);
  if (how & 0x80)
    checkReply(bytes, region);
  else
    checkRequest(bytes, region);
  return 0;
}
