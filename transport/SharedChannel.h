// The same-host channel between a client and courier-executor: launches whose requests,
// replies and tensors cross shared memory instead of HTTP. The client asks for it over HTTP
// (POST /v1/sessions/{id}/shm), connects to the unix socket the reply names, presents the
// reply's token and receives three memfds: a control page (one request slot, one reply slot,
// a futex word each) and two data regions, for inputs and for results, which the session's
// worker maps too. Inputs are written once into the input region and read there by the
// kernel; results come back in the result region (or, larger than it, in a memfd sent on the
// connection). The connection stays open: either side closing it ends the channel.
// docs/protocol.md describes the exchange; each side treats what the other wrote as untrusted.
#ifndef COURIER_TRANSPORT_SHAREDCHANNEL_H
#define COURIER_TRANSPORT_SHAREDCHANNEL_H

#include "transport/Backend.h"
#include "transport/SharedMemory.h"
#include "transport/Wire.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace courier::transport::shm {

/// Bytes of each slot of the control page: a launch request or reply with kMaxFrameTensors
/// tensors of high rank would not fit, and goes over HTTP instead.
inline constexpr uint32_t kSlotBytes = 64 * 1024;

/// The control page. The client writes a request into `requestSlot`, stores its size and
/// bumps `request`; the executor answers in `replySlot` and sets `reply` to `request`'s value.
/// Either side sets `closed` when it ends the channel (and rings both words).
///
/// Version 1 is everything up to the slots. Version 2 adds a flag per waiter that says it may
/// be asleep (doorbell::sleep with a flag), so that ringing a peer that polls awake costs no
/// system call (doorbell::set); both sides must speak it, so the client asks for it when it
/// asks for the channel and the executor says which version the channel uses.
struct ControlPage {
  std::atomic<uint32_t> request;
  std::atomic<uint32_t> reply;
  std::atomic<uint32_t> requestBytes;
  std::atomic<uint32_t> replyBytes;
  std::atomic<uint32_t> closed;
  char requestSlot[kSlotBytes];
  char replySlot[kSlotBytes];
  // Version 2.
  std::atomic<uint32_t> executorSleeping; ///< Set while the executor may sleep on `request`.
  std::atomic<uint32_t> clientSleeping;   ///< Set while the client may sleep on `reply`.
};

/// Version 3 has version 2's page; what changes is who answers. The session's worker maps the
/// page and the regions and answers launches itself, so a launch wakes two processes instead
/// of three; the executor watches from the side (the launch's deadline, the worker's death,
/// which it answers for) and is on no launch's path. Its grant says which version it gave
/// (3 only to a session whose kernels run in a worker) and adds a socket whose other end the
/// worker holds, for results larger than the result region. A launch of an object the worker
/// has not loaded is answered Redirect: the client sends it over HTTP, which loads it.
///
/// The newest control page version this build speaks, and the bytes each version maps.
inline constexpr uint32_t kPageVersion = 3;
inline constexpr uint64_t kPageBytesV1 = offsetof(ControlPage, executorSleeping);
inline uint64_t pageBytes(uint32_t version) {
  return version >= 2 ? sizeof(ControlPage) : kPageBytesV1;
}

/// Tensors start at this alignment in the data regions.
inline constexpr uint64_t kAlignment = 64;
inline uint64_t align(uint64_t n) { return (n + kAlignment - 1) & ~(kAlignment - 1); }

/// What the executor sends on the connection once the token checks out: the control page,
/// the input region and the result region, with their sizes.
struct Layout {
  uint64_t inputBytes = 0;
  uint64_t resultBytes = 0;
};

enum class ReplyKind : uint8_t { Done = 1, Failed = 2, Redirect = 3 };
/// Where a Done reply's results are.
enum class Placement : uint8_t { ResultRegion = 0, SentBuffer = 1 };

/// A launch as it crosses the control page: the HTTP frame header's fields, with input
/// offsets into the input region and the deadline the client asks for (0: the executor's).
struct LaunchRequest {
  wire::LaunchRequest launch;
  uint64_t deadlineMs = 0;

  /// The deadline asked for, bounded as X-Courier-Deadline-Ms is read; nothing for the
  /// executor's own (which a request may shorten, never lengthen).
  std::optional<std::chrono::milliseconds> askedDeadline() const {
    if (!deadlineMs)
      return std::nullopt;
    return std::chrono::milliseconds(std::min(deadlineMs, wire::kLongestDeadlineMs));
  }
};

std::string encodeLaunchRequest(const LaunchRequest &request);
/// Decodes and checks a request against an input region of `inputBytes`: the same limits and
/// error codes as an HTTP launch frame's header (`bad_frame`).
llvm::Expected<LaunchRequest> decodeLaunchRequest(llvm::StringRef bytes, uint64_t inputBytes);

struct LaunchReply {
  std::vector<wire::TensorHeader> results; ///< Offsets into where `placement` says.
  Placement placement = Placement::ResultRegion;
  /// A Failed reply: the executor's code (an unknown one is `internal`) and message.
  std::optional<std::pair<ErrorCode, std::string>> failure;
  /// A Redirect reply (version 3): nothing ran; the launch is to go over HTTP.
  bool redirect = false;
};

/// What a version 3 worker counts of the launches it answers, in a page only it and the
/// executor map: the executor adds what changed to its metrics (a worker that is replaced
/// goes on counting in the same page). A launch is counted as started before its kernel
/// runs, so one that kills the worker still counts.
struct WorkerCounts {
  std::atomic<uint64_t> started;
  /// Launches whose kernel returned (or failed), counted before the reply: `started` minus
  /// this is the launch running now. The executor sets it to `started` when it answers for
  /// a worker that died.
  std::atomic<uint64_t> finished;
  std::atomic<uint64_t> failed;
  std::atomic<uint64_t> timed; ///< Launches with a duration below, in `nanoseconds`.
  std::atomic<uint64_t> nanoseconds;
  /// Timed launches per bucket of transport::durationBuckets(), and one past the last.
  std::atomic<uint64_t> buckets[32];
};

std::string encodeRedirect();

std::string encodeLaunchReply(const LaunchReply &reply);
/// Bytes of the request for a launch of `entry` with `inputs` and `results` results, and of
/// its Done reply: neither may exceed kSlotBytes.
uint64_t requestBytes(llvm::StringRef entry, llvm::ArrayRef<wire::TensorHeader> inputs,
                      size_t results);
uint64_t replyBytes(llvm::ArrayRef<ResultSpec> results);
std::string encodeFailure(ErrorCode code, llvm::StringRef message);
/// A Failed reply for `error`: a CodedError keeps its code and message, any other is
/// `fallback`.
std::string encodeFailure(llvm::Error error, ErrorCode fallback);
/// The launch in `page`'s request slot, copied out of the page first (the client may go on
/// writing there) and decoded as decodeLaunchRequest does; one that claims more than its slot
/// is `bad_frame`.
llvm::Expected<LaunchRequest> readRequest(const ControlPage &page, uint64_t inputBytes);
/// Puts `reply` in `page`'s reply slot (one larger than the slot becomes `payload_too_large`)
/// and answers request `ticket`, waking a client of `pageVersion` that may sleep.
void answer(ControlPage &page, uint32_t ticket, std::string reply, uint32_t pageVersion);
/// Decodes a Done or Failed reply (`bad_frame` if it is neither) and checks the results lie
/// in a region of `regionBytes`.
llvm::Expected<LaunchReply> decodeLaunchReply(llvm::StringRef bytes, uint64_t regionBytes);
/// True if every result of `reply` lies in a region of `regionBytes`.
bool checkPlaced(const LaunchReply &reply, uint64_t regionBytes);

/// This host and network namespace: the boot id and the netns inode. Equal on both sides
/// means an abstract unix socket of one is reachable by the other.
std::string hostIdentity();

/// The client's end of a channel. Thread-safe: one launch runs at a time, and a launch that
/// finds the channel busy is told so (the caller sends it over HTTP instead).
class Client {
public:
  ~Client();

  /// Connects to `socketName` (an abstract unix socket, "@name"), presents `token` and maps
  /// what the executor sends back, a control page of `pageVersion` (1 to kPageVersion: what
  /// the offer said). Errors are `unavailable`: the caller uses HTTP.
  static llvm::Expected<std::unique_ptr<Client>> connect(llvm::StringRef socketName,
                                                         llvm::StringRef token,
                                                         std::chrono::milliseconds timeout,
                                                         uint32_t pageVersion);

  /// Whether a launch of `entry` with these inputs and results can go over the channel (the
  /// inputs fit its input region, the request and its reply their slots); otherwise it goes
  /// over HTTP.
  bool fits(llvm::StringRef entry, llvm::ArrayRef<TensorView> inputs,
            llvm::ArrayRef<ResultSpec> results) const;

  /// Runs a launch through the channel. Nothing when the channel is busy with another
  /// launch, the executor has ended it, or the worker redirected it (its object is not loaded
  /// there yet). Failures carry the executor's code; a channel that broke
  /// is `executor_lost` (the launch may have run) and stays broken. `where` prefixes every message.
  std::optional<llvm::Expected<std::vector<OwnedTensor>>>
  launch(const std::string &sha256, llvm::StringRef entry, llvm::ArrayRef<TensorView> inputs,
         llvm::ArrayRef<ResultSpec> results, std::chrono::milliseconds timeout,
         const std::string &where);

  /// False once the executor ended the channel or a launch found it broken.
  bool usable() const { return !broken.load(); }
  uint64_t inputCapacity() const { return layout.inputBytes; }
  uint32_t pageVersion() const { return version; }

private:
  Client() = default;
  llvm::Expected<std::vector<OwnedTensor>>
  launchLocked(const std::string &sha256, llvm::StringRef entry, llvm::ArrayRef<TensorView> inputs,
               llvm::ArrayRef<ResultSpec> results, std::chrono::milliseconds timeout,
               const std::string &where);
  /// Marks the channel broken: an `executor_lost` error saying `what`.
  llvm::Error lost(const std::string &where, const llvm::Twine &what);
  /// Writes the inputs into the input region and the request into the control page, and
  /// rings the executor; the request's ticket.
  llvm::Expected<uint32_t> ring(const std::string &sha256, llvm::StringRef entry,
                                llvm::ArrayRef<TensorView> inputs,
                                llvm::ArrayRef<ResultSpec> results,
                                std::chrono::milliseconds timeout, const std::string &where);
  /// Reads and checks the reply in the control page against `results`: a Done reply, or the
  /// error it (or its being malformed) stands for.
  llvm::Expected<LaunchReply> readReply(llvm::ArrayRef<ResultSpec> results,
                                        const std::string &where);
  /// Copies a Done reply's results out of the result region, or out of the buffer sent for
  /// launch `sent` when they did not fit it.
  llvm::Expected<std::vector<OwnedTensor>> takeResults(LaunchReply &reply, uint32_t sent,
                                                       const std::string &where);
  /// Waits for the reply to request `ticket`; false if the channel broke or `until` passed.
  bool awaitReply(uint32_t ticket, std::chrono::steady_clock::time_point until);
  /// Drops the result buffers waiting on the socket after a failed launch: one sent before
  /// the launch failed (its worker ended after sending it, or its reply did not fit the
  /// slot) is nobody's, and while it waits the next buffer would be refused.
  void dropUnclaimedBuffers();

  UniqueFd connection;
  /// Version 3: the socket the session's worker sends results too large for the region on.
  UniqueFd workerSocket;
  SharedBuffer control, inputs, results;
  ControlPage *page = nullptr;
  Layout layout;
  uint32_t version = 1;
  std::mutex busy;
  uint32_t ticket = 0;
  bool redirected = false; ///< The launch under `busy` was answered Redirect.
  /// A launch wakes the client and one process (not an executor thread and a worker too).
  bool twoProcesses = false;
  std::atomic<bool> broken{false};
};

} // namespace courier::transport::shm

#endif // COURIER_TRANSPORT_SHAREDCHANNEL_H
