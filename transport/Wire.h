// The byte-level contract between the HTTP client and courier-executor: names of routes and
// headers, error codes, and the launch frame (one line of JSON, '\n', raw tensor bytes).
// Shared by HttpBackend.cpp and the executor's server; see docs/protocol.md for the prose
// version. The codes themselves are transport/ErrorCode.h's.
#ifndef COURIER_TRANSPORT_WIRE_H
#define COURIER_TRANSPORT_WIRE_H

#include "abi/ContentHash.h"
#include "transport/Backend.h"
#include "transport/ErrorCode.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace courier::transport::wire {

inline constexpr const char *kFrameContentType = "application/x-courier-frame";
inline constexpr const char *kJsonContentType = "application/json";
inline constexpr const char *kBytesContentType = "application/octet-stream";
/// Carries the session id on every session-scoped request so a load balancer can hash on it.
inline constexpr const char *kSessionHeader = "X-Courier-Session";
/// Number of reply bytes a `call` expects; the server checks the symbol produced exactly that.
inline constexpr const char *kOutputSizeHeader = "X-Courier-Output-Size";
/// Milliseconds a launch, call, async launch or await may take; the executor ends the work
/// (and its worker) past it. Bounded by the executor's own --launch-timeout-ms.
inline constexpr const char *kDeadlineHeader = "X-Courier-Deadline-Ms";
/// The longest deadline a request may ask for (milliseconds; longer is read as this): the
/// server's own still bounds it, and no clock arithmetic overflows.
inline constexpr uint64_t kLongestDeadlineMs = uint64_t(1) << 40;
/// Upper bound on a frame's JSON line; a longer one is a malformed frame.
inline constexpr size_t kMaxFrameHeaderBytes = 1 << 20;
/// Most inputs, or results, a launch frame may declare, and the highest rank of a tensor in
/// one: generous bounds that keep a header from making a receiver size descriptor areas
/// from absurd numbers.
inline constexpr size_t kMaxFrameTensors = 4096;
inline constexpr size_t kMaxFrameRank = 64;

using transport::ErrorCodeInfo;
/// Every error code the executor sends, with its HTTP status: the rows of ErrorCode.h's table
/// marked kSentByExecutor. The table in docs/protocol.md lists the same pairs;
/// tests/transport checks the two agree.
inline constexpr auto kErrorCodes = codesSentBy<kSentByExecutor>();
/// Async launches a session may have started and not yet awaited; one more is
/// `too_many_launches`. Each holds its outcome until awaited, so an unbounded number would
/// let one client grow the executor without limit.
inline constexpr size_t kMaxPendingLaunches = 64;
/// The deepest arrays and objects may nest in JSON a peer sends: a request body or frame
/// header the executor reads, a reply the HTTP client reads, a body courier-serve reads.
/// Deeper JSON is refused before it is parsed: a parser builds a value (or a stack frame) per
/// bracket, so 20 MB of '[' would otherwise take gigabytes.
inline constexpr unsigned kMaxJsonDepth = 128;
/// The offset at which `text` first nests `openers` deeper than `maxDepth`, or npos. Text in
/// double-quoted strings (with backslash escapes) never counts; with `lineComments`, neither
/// does text from "//" to the end of the line. The parsers downstream recurse per level.
size_t findExcessNesting(llvm::StringRef text, unsigned maxDepth, llvm::StringRef openers,
                         llvm::StringRef closers, bool lineComments);
/// An error of `code` saying that `what` ("the request body") nests JSON deeper than
/// kMaxJsonDepth, if `text` does; success otherwise. Brackets in strings do not count; text
/// that is not JSON is left for the parser to refuse.
llvm::Error checkJsonDepth(llvm::StringRef text, const llvm::Twine &what,
                           ErrorCode code = ErrorCode::BadRequest);
/// The JSON error body: {"error":{"code":...,"message":...}}.
std::string errorBody(ErrorCode code, llvm::StringRef message);

/// One tensor in a frame: packed row-major (strides are implied), `bytes` long, starting
/// `offset` bytes after the frame's newline. Offsets are consecutive, in order.
struct TensorHeader {
  int64_t elemSize = 0;
  std::vector<int64_t> sizes;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

struct LaunchRequest {
  std::string object; ///< SHA-256 of the object holding `entry`.
  std::string entry;
  std::vector<TensorHeader> inputs;
  std::vector<ResultSpec> results;
};

struct LaunchReply {
  std::vector<TensorHeader> results;
};

/// Copies `view` packed row-major into `out`, which holds its packedBytes.
void packInto(const TensorView &view, char *out);

/// Describes `tensors` packed back to back, filling in offsets and byte counts.
std::vector<TensorHeader> describePacked(llvm::ArrayRef<TensorView> tensors);

std::string encodeLaunchRequest(const LaunchRequest &request);
std::string encodeLaunchReply(const LaunchReply &reply);
/// Parse and validate a frame's JSON line; errors are `bad_frame`.
llvm::Expected<LaunchRequest> decodeLaunchRequest(llvm::StringRef line);
llvm::Expected<LaunchReply> decodeLaunchReply(llvm::StringRef line);

/// True for a lowercase hex SHA-256.
bool isSha256(llvm::StringRef text);

/// A fresh session id: 32 random hex digits. Clients choose their sessions' ids (PUT
/// /v1/sessions/{id}) so that a balancer hashing on the id routes the session's first
/// request where its later ones go; ids from different clients do not collide.
std::string randomSessionId();
/// True for a session id a client may choose: 1-64 of [A-Za-z0-9_-].
bool isSessionId(llvm::StringRef text);
/// Lowercase hex SHA-256 of `bytes`: the one implementation, abi/ContentHash.h's.
using ::courier::sha256Hex;

/// Produces a frame (header line, newline, tensors packed) in pieces for a streaming body,
/// reading the tensors in place and gathering non-contiguous strides through a small buffer.
/// The tensors must outlive the writer.
class FrameWriter {
public:
  FrameWriter(std::string headerLine, std::vector<TensorView> tensors);

  uint64_t size() const { return totalBytes; }
  /// Writes the next piece, which starts at `offset` (the bytes written so far); `sink`
  /// returns false when the peer is gone. Returns false if writing failed.
  bool writeNext(uint64_t offset, const std::function<bool(const char *, size_t)> &sink);

private:
  std::string header; ///< Includes the trailing newline.
  std::vector<TensorView> tensors;
  std::vector<uint64_t> starts; ///< Frame offset of each tensor's first byte.
  std::vector<char> scratch;
  uint64_t totalBytes = 0;
};

/// Where one tensor's packed bytes go when a frame is received.
struct Destination {
  char *data;
  uint64_t bytes;
};

/// Consumes a frame arriving in arbitrary pieces: collects the header line, asks `onHeader`
/// where the tensors go, then copies the payload straight into those buffers.
class FrameReader {
public:
  using HeaderHandler = std::function<llvm::Expected<std::vector<Destination>>(llvm::StringRef)>;
  explicit FrameReader(HeaderHandler onHeader) : onHeader(std::move(onHeader)) {}

  llvm::Error feed(const char *data, size_t size);
  /// Checks the frame was complete.
  llvm::Error finish() const;

private:
  HeaderHandler onHeader;
  std::string header;
  bool inPayload = false;
  std::vector<Destination> destinations;
  size_t current = 0;  ///< Index of the destination being filled.
  uint64_t filled = 0; ///< Bytes written into destinations[current].
};

/// Bytes of room a request body read by the transport keeps past its end, for parsers that
/// read ahead (simdjson's padding).
constexpr size_t kBodyPadding = 64;

/// Asks that the 2 MiB pages wholly inside [data, data + size) be backed by huge pages. Only
/// worth it before they are first touched: a fresh 4 KiB page costs a fault each (measured on
/// a VM here: 44 MiB took 70 ms in 4 KiB pages, 16 ms in 2 MiB ones). Advice only: the kernel
/// may decline, and a range holding no whole huge page is left alone.
void adviseHugePages(void *data, size_t size);

/// Resizes `bytes` to `size` zeroed bytes, a large buffer asked to be backed by huge pages
/// before it is touched (see adviseHugePages).
void resizeFresh(std::vector<uint8_t> &bytes, size_t size);
/// Reserves room for `capacity` bytes in `text`, a large fresh buffer asked to be backed by
/// huge pages before the text is copied into it.
void reserveFresh(std::string &text, size_t capacity);

/// Allocates a tensor buffer released with std::free (at least one byte). Large buffers are
/// 2 MiB-aligned and asked to be backed by huge pages: a fresh 64 MiB buffer otherwise costs
/// 16k page faults, as much time as receiving its bytes.
void *allocateTensorBuffer(uint64_t bytes);

/// Row-major strides (in elements) of a packed tensor of `sizes` (abi::rowMajorStrides).
std::vector<int64_t> packedStrides(llvm::ArrayRef<int64_t> sizes);
/// Number of bytes a packed tensor needs, or an error if the shape is negative or overflows.
llvm::Expected<uint64_t> packedBytes(int64_t elemSize, llvm::ArrayRef<int64_t> sizes);

} // namespace courier::transport::wire

#endif // COURIER_TRANSPORT_WIRE_H
