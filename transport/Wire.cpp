// Encoding and decoding of the launch frame and error bodies shared by client and server.
#include "transport/Wire.h"

#include "abi/MemRef.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#include <openssl/rand.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>

using json = nlohmann::json;
// Encoders keep keys in the documented order, so a frame's first line reads like
// docs/protocol.md; decoders do not care about order.
using ordered = nlohmann::ordered_json;

namespace courier::transport::wire {

size_t findExcessNesting(llvm::StringRef text, unsigned maxDepth, llvm::StringRef openers,
                         llvm::StringRef closers, bool lineComments) {
  unsigned depth = 0;
  bool inString = false, escaped = false, inComment = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inComment) {
      inComment = c != '\n';
    } else if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (lineComments && c == '/' && text.substr(i + 1).starts_with("/")) {
      inComment = true;
    } else if (openers.contains(c)) {
      if (++depth > maxDepth)
        return i;
    } else if (closers.contains(c) && depth > 0) {
      --depth;
    }
  }
  return llvm::StringRef::npos;
}

llvm::Error checkJsonDepth(llvm::StringRef text, const llvm::Twine &what, ErrorCode code) {
  size_t at = findExcessNesting(text, kMaxJsonDepth, "[{", "]}", /*lineComments=*/false);
  if (at == llvm::StringRef::npos)
    return llvm::Error::success();
  return makeCodedError(code, what + " nests JSON arrays and objects deeper than " +
                                  llvm::Twine(kMaxJsonDepth) + " levels (at byte " +
                                  llvm::Twine(at) + "); at most " + llvm::Twine(kMaxJsonDepth) +
                                  " are accepted");
}

std::string errorBody(ErrorCode code, llvm::StringRef message) {
  ordered body = {{"error", {{"code", errorCodeName(code).str()}, {"message", message.str()}}}};
  // Replace rather than throw on invalid UTF-8: messages may quote arbitrary symbol names.
  return body.dump(-1, ' ', false, ordered::error_handler_t::replace);
}

namespace {
constexpr uintptr_t kHugePage = uintptr_t(2) << 20;
} // namespace

void adviseHugePages(void *data, size_t size) {
  auto begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
  auto end = (reinterpret_cast<uintptr_t>(data) + size) & ~(kHugePage - 1);
  if (end > begin)
    madvise(reinterpret_cast<void *>(begin), end - begin, MADV_HUGEPAGE);
}

namespace {
/// Reserves `capacity` in `buffer` (a vector or string); a large one in a fresh buffer
/// advised before its contents are copied in.
template <typename Buffer> void reserveAdvised(Buffer &buffer, size_t capacity) {
  if (capacity <= buffer.capacity())
    return;
  if (capacity < 2 * kHugePage) {
    buffer.reserve(capacity);
    return;
  }
  Buffer fresh;
  fresh.reserve(capacity);
  adviseHugePages(fresh.data(), fresh.capacity());
  fresh.insert(fresh.end(), buffer.begin(), buffer.end());
  buffer = std::move(fresh);
}
} // namespace

void resizeFresh(std::vector<uint8_t> &bytes, size_t size) {
  reserveAdvised(bytes, size);
  bytes.resize(size);
}

void reserveFresh(std::string &text, size_t capacity) { reserveAdvised(text, capacity); }

void *allocateTensorBuffer(uint64_t bytes) {
  if (bytes < 2 * kHugePage)
    return std::malloc(std::max<uint64_t>(bytes, 1));
  uint64_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void *data = std::aligned_alloc(kHugePage, rounded);
  if (data)
    adviseHugePages(data, rounded);
  return data;
}

bool isSha256(llvm::StringRef text) {
  return text.size() == 64 && llvm::all_of(text, [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string randomSessionId() {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    // Session ids name sessions, they do not guard them (the token does): any source will do.
    std::random_device device;
    for (unsigned char &b : bytes)
      b = static_cast<unsigned char>(device());
  }
  return llvm::toHex(llvm::ArrayRef<uint8_t>(bytes, sizeof(bytes)), /*LowerCase=*/true);
}

bool isSessionId(llvm::StringRef text) {
  return !text.empty() && text.size() <= 64 &&
         llvm::all_of(text, [](char c) { return llvm::isAlnum(c) || c == '_' || c == '-'; });
}

std::vector<int64_t> packedStrides(llvm::ArrayRef<int64_t> sizes) {
  std::vector<int64_t> strides(sizes.size());
  abi::rowMajorStrides(sizes, strides);
  return strides;
}

llvm::Expected<uint64_t> packedBytes(int64_t elemSize, llvm::ArrayRef<int64_t> sizes) {
  if (elemSize <= 0)
    return makeCodedError(ErrorCode::BadFrame,
                          "element size must be positive, got " + llvm::Twine(elemSize));
  uint64_t total = static_cast<uint64_t>(elemSize);
  for (int64_t size : sizes) {
    if (size < 0)
      return makeCodedError(ErrorCode::BadFrame, "negative dimension " + llvm::Twine(size));
    if (size != 0 && total > UINT64_MAX / 2 / static_cast<uint64_t>(size))
      return makeCodedError(ErrorCode::PayloadTooLarge, "tensor shape overflows 64 bits");
    total *= static_cast<uint64_t>(size);
  }
  return total;
}

void packInto(const TensorView &view, char *out) {
  abi::copyRowMajor(view.data, view.elemSize, view.sizes, view.strides, out);
}

std::vector<TensorHeader> describePacked(llvm::ArrayRef<TensorView> tensors) {
  std::vector<TensorHeader> headers;
  uint64_t offset = 0;
  for (const TensorView &t : tensors) {
    TensorHeader h;
    h.elemSize = t.elemSize;
    h.sizes = t.sizes;
    h.offset = offset;
    h.bytes = static_cast<uint64_t>(t.elemSize);
    for (int64_t s : t.sizes)
      h.bytes *= static_cast<uint64_t>(s);
    offset += h.bytes;
    headers.push_back(std::move(h));
  }
  return headers;
}

static ordered tensorsToJson(const std::vector<TensorHeader> &tensors) {
  ordered list = ordered::array();
  for (const TensorHeader &t : tensors)
    list.push_back(
        {{"elemSize", t.elemSize}, {"sizes", t.sizes}, {"offset", t.offset}, {"bytes", t.bytes}});
  return list;
}

std::string encodeLaunchRequest(const LaunchRequest &request) {
  ordered results = ordered::array();
  for (const ResultSpec &r : request.results)
    results.push_back({{"rank", r.rank}, {"elemSize", r.elemSize}});
  ordered header = {{"object", request.object},
                    {"entry", request.entry},
                    {"inputs", tensorsToJson(request.inputs)},
                    {"results", results}};
  return header.dump(-1, ' ', false, ordered::error_handler_t::replace);
}

std::string encodeLaunchReply(const LaunchReply &reply) {
  ordered header = {{"results", tensorsToJson(reply.results)}};
  return header.dump();
}

// The decoders check every field's type before reading it, so nlohmann never throws; the
// catch is a backstop that keeps a decoder bug from escaping as an exception.
namespace {
struct Decoder {
  std::string problem;
  /// A header is a bad frame, unless a check says otherwise (a shape whose byte count
  /// overflows is too large, not malformed).
  ErrorCode code = ErrorCode::BadFrame;

  bool fail(std::string text) {
    if (problem.empty())
      problem = std::move(text);
    return false;
  }

  /// What the problem is prefixed with: a too-large tensor is well-formed.
  std::string context(const char *what) const {
    return (code == ErrorCode::BadFrame ? "malformed " : "") + std::string(what) + ": ";
  }

  /// Takes over a CodedError's code and message, without the "[code]" its text form adds.
  bool fail(llvm::Error error) {
    auto [errorCode, text] = takeCodeAndMessage(std::move(error), code);
    if (problem.empty())
      code = errorCode;
    return fail(std::move(text));
  }

  /// An integer that fits int64; nlohmann keeps larger ones unsigned, and reading those as
  /// int64 would turn 2^64-1 into -1.
  static bool fitsInt64(const json &value) {
    return value.is_number_integer() && !(value.is_number_unsigned() &&
                                          value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX));
  }

  bool getInt(const json &object, const char *key, int64_t &out) {
    auto it = object.find(key);
    if (it == object.end() || !it->is_number_integer())
      return fail(std::string("'") + key + "' must be an integer");
    if (!fitsInt64(*it))
      return fail(std::string("'") + key + "' is out of range: " + it->dump());
    out = it->get<int64_t>();
    return true;
  }

  bool getString(const json &object, const char *key, std::string &out) {
    auto it = object.find(key);
    if (it == object.end() || !it->is_string())
      return fail(std::string("'") + key + "' must be a string");
    out = it->get<std::string>();
    return true;
  }

  bool getTensors(const json &object, const char *key, std::vector<TensorHeader> &out) {
    auto it = object.find(key);
    if (it == object.end() || !it->is_array())
      return fail(std::string("'") + key + "' must be an array");
    if (it->size() > kMaxFrameTensors)
      return fail(std::string("'") + key + "' holds " + std::to_string(it->size()) +
                  " tensors; at most " + std::to_string(kMaxFrameTensors));
    uint64_t expectedOffset = 0;
    for (const json &item : *it) {
      if (!item.is_object())
        return fail(std::string("each of '") + key + "' must be an object");
      TensorHeader t;
      int64_t offset = 0, bytes = 0;
      if (!getInt(item, "elemSize", t.elemSize) || !getInt(item, "offset", offset) ||
          !getInt(item, "bytes", bytes))
        return false;
      auto sizes = item.find("sizes");
      if (sizes == item.end() || !sizes->is_array())
        return fail("'sizes' must be an array");
      if (sizes->size() > kMaxFrameRank)
        return fail("a tensor of rank " + std::to_string(sizes->size()) + "; ranks go up to " +
                    std::to_string(kMaxFrameRank));
      for (const json &s : *sizes) {
        if (!s.is_number_integer())
          return fail("'sizes' must hold integers");
        if (!fitsInt64(s)) {
          code = ErrorCode::PayloadTooLarge;
          return fail("dimension " + s.dump() + " is too large");
        }
        t.sizes.push_back(s.get<int64_t>());
      }
      llvm::Expected<uint64_t> need = packedBytes(t.elemSize, t.sizes);
      if (!need)
        return fail(need.takeError());
      if (bytes < 0 || static_cast<uint64_t>(bytes) != *need)
        return fail("tensor of " + std::to_string(t.sizes.size()) + " dimensions needs " +
                    std::to_string(*need) + " bytes, header says " + std::to_string(bytes));
      if (offset < 0 || static_cast<uint64_t>(offset) != expectedOffset)
        return fail("tensor offsets must be consecutive: expected " +
                    std::to_string(expectedOffset) + ", got " + std::to_string(offset));
      t.offset = static_cast<uint64_t>(offset);
      t.bytes = static_cast<uint64_t>(bytes);
      expectedOffset += t.bytes;
      out.push_back(std::move(t));
    }
    return true;
  }
};

llvm::Expected<json> parseLine(llvm::StringRef line) {
  if (llvm::Error error = checkJsonDepth(line, "the frame header", ErrorCode::BadFrame))
    return std::move(error);
  json parsed = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object())
    return makeCodedError(ErrorCode::BadFrame, "frame header is not a JSON object");
  return parsed;
}
} // namespace

llvm::Expected<LaunchRequest> decodeLaunchRequest(llvm::StringRef line) {
  llvm::Expected<json> parsed = parseLine(line);
  if (!parsed)
    return parsed.takeError();
  try {
    Decoder d;
    LaunchRequest request;
    bool ok = d.getString(*parsed, "object", request.object) &&
              d.getString(*parsed, "entry", request.entry) &&
              d.getTensors(*parsed, "inputs", request.inputs);
    auto results = parsed->find("results");
    if (ok && (results == parsed->end() || !results->is_array()))
      ok = d.fail("'results' must be an array");
    if (ok && results->size() > kMaxFrameTensors)
      ok = d.fail("'results' holds " + std::to_string(results->size()) + " results; at most " +
                  std::to_string(kMaxFrameTensors));
    if (ok) {
      for (const json &r : *results) {
        ResultSpec spec;
        if (!r.is_object()) {
          ok = d.fail("each of 'results' must be an object");
          break;
        }
        if (!d.getInt(r, "rank", spec.rank) || !d.getInt(r, "elemSize", spec.elemSize)) {
          ok = false;
          break;
        }
        if (spec.rank < 0 || spec.rank > static_cast<int64_t>(kMaxFrameRank) ||
            spec.elemSize <= 0) {
          ok = d.fail("result rank must be 0 to " + std::to_string(kMaxFrameRank) +
                      " and elemSize > 0");
          break;
        }
        request.results.push_back(spec);
      }
    }
    if (ok && !isSha256(request.object))
      ok = d.fail("'object' must be a lowercase hex SHA-256");
    if (!ok)
      return makeCodedError(d.code, d.context("launch header") + d.problem);
    return request;
  } catch (const std::exception &e) {
    return makeCodedError(ErrorCode::BadFrame, llvm::Twine("malformed launch header: ") + e.what());
  }
}

llvm::Expected<LaunchReply> decodeLaunchReply(llvm::StringRef line) {
  llvm::Expected<json> parsed = parseLine(line);
  if (!parsed)
    return parsed.takeError();
  try {
    Decoder d;
    LaunchReply reply;
    if (!d.getTensors(*parsed, "results", reply.results))
      return makeCodedError(d.code, d.context("launch reply") + d.problem);
    return reply;
  } catch (const std::exception &e) {
    return makeCodedError(ErrorCode::BadFrame, llvm::Twine("malformed launch reply: ") + e.what());
  }
}

static bool isPacked(const TensorView &t) { return abi::isRowMajor(t.sizes, t.strides); }

FrameWriter::FrameWriter(std::string headerLine, std::vector<TensorView> tensorList)
    : header(std::move(headerLine)), tensors(std::move(tensorList)) {
  header.push_back('\n');
  totalBytes = header.size();
  for (const TensorView &t : tensors) {
    starts.push_back(totalBytes);
    uint64_t bytes = static_cast<uint64_t>(t.elemSize);
    for (int64_t s : t.sizes)
      bytes *= static_cast<uint64_t>(s);
    totalBytes += bytes;
  }
}

bool FrameWriter::writeNext(uint64_t offset,
                            const std::function<bool(const char *, size_t)> &sink) {
  if (offset < header.size())
    return sink(header.data() + offset, header.size() - offset);
  // The tensor holding `offset`: the last one starting at or before it.
  size_t index = std::upper_bound(starts.begin(), starts.end(), offset) - starts.begin() - 1;
  const TensorView &t = tensors[index];
  uint64_t begin = offset - starts[index];
  uint64_t end = (index + 1 < starts.size() ? starts[index + 1] : totalBytes) - starts[index];
  if (isPacked(t))
    return sink(static_cast<const char *>(t.data) + begin, end - begin);

  // Gather at most this many bytes per piece: large enough to amortise a send, small
  // enough not to double the memory of a big tensor.
  constexpr uint64_t kGatherBytes = 1 << 20;
  uint64_t elemSize = static_cast<uint64_t>(t.elemSize);
  uint64_t firstElem = begin / elemSize;
  uint64_t count =
      std::min<uint64_t>((end - begin) / elemSize, std::max<uint64_t>(1, kGatherBytes / elemSize));
  scratch.resize(count * elemSize);
  size_t rank = t.sizes.size();
  int64_t rowLen = rank ? t.sizes[rank - 1] : 1;
  int64_t innerStride = rank ? t.strides[rank - 1] : 1;
  const char *base = static_cast<const char *>(t.data);
  uint64_t produced = 0;
  while (produced < count) {
    uint64_t e = firstElem + produced;
    uint64_t row = e / static_cast<uint64_t>(rowLen);
    uint64_t col = e % static_cast<uint64_t>(rowLen);
    int64_t elemOffset = static_cast<int64_t>(col) * innerStride;
    for (size_t d = rank >= 1 ? rank - 1 : 0; d-- > 0;) {
      uint64_t size = static_cast<uint64_t>(t.sizes[d]);
      elemOffset += static_cast<int64_t>(row % size) * t.strides[d];
      row /= size;
    }
    uint64_t run = std::min<uint64_t>(static_cast<uint64_t>(rowLen) - col, count - produced);
    char *out = scratch.data() + produced * elemSize;
    const char *in = base + elemOffset * t.elemSize;
    if (innerStride == 1) {
      std::memcpy(out, in, run * elemSize);
    } else {
      for (uint64_t i = 0; i < run; ++i)
        std::memcpy(out + i * elemSize, in + static_cast<int64_t>(i) * innerStride * t.elemSize,
                    elemSize);
    }
    produced += run;
  }
  return sink(scratch.data(), scratch.size());
}

llvm::Error FrameReader::feed(const char *data, size_t size) {
  while (size > 0) {
    if (!inPayload) {
      const char *newline = static_cast<const char *>(std::memchr(data, '\n', size));
      size_t take = newline ? static_cast<size_t>(newline - data) : size;
      if (header.size() + take > kMaxFrameHeaderBytes)
        return makeCodedError(ErrorCode::BadFrame, "frame header line longer than " +
                                                       llvm::Twine(kMaxFrameHeaderBytes) +
                                                       " bytes");
      header.append(data, take);
      if (!newline)
        return llvm::Error::success();
      data += take + 1;
      size -= take + 1;
      llvm::Expected<std::vector<Destination>> dests = onHeader(header);
      if (!dests)
        return dests.takeError();
      destinations = std::move(*dests);
      inPayload = true;
      continue;
    }
    while (current < destinations.size() && filled == destinations[current].bytes) {
      ++current;
      filled = 0;
    }
    if (current == destinations.size())
      return makeCodedError(ErrorCode::BadFrame,
                            "frame carries more bytes than its header declares");
    Destination &d = destinations[current];
    uint64_t take = std::min<uint64_t>(size, d.bytes - filled);
    std::memcpy(d.data + filled, data, take);
    filled += take;
    data += take;
    size -= take;
  }
  return llvm::Error::success();
}

llvm::Error FrameReader::finish() const {
  if (!inPayload)
    return makeCodedError(ErrorCode::BadFrame, "frame ended before the header line's newline");
  size_t index = current;
  uint64_t have = filled;
  while (index < destinations.size() && have == destinations[index].bytes) {
    ++index;
    have = 0;
  }
  if (index != destinations.size())
    return makeCodedError(ErrorCode::BadFrame, "frame ended before all tensor bytes arrived");
  return llvm::Error::success();
}

} // namespace courier::transport::wire
