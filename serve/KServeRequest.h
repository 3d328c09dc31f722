// Reading KServe v2 (Open Inference Protocol) inference requests: the JSON header of
// POST /v2/models/{model}/infer, with tensors inline as JSON or, by Triton's binary tensor
// data extension, as raw bytes after the header. Bytes in, tensors for the model's entry (or a
// ServeError naming what is wrong) out, with no HTTP type, so that the decoder can be fuzzed
// on its own (tests/fuzz). The routes themselves are KServeV2.cpp's.
#ifndef COURIER_SERVE_KSERVEREQUEST_H
#define COURIER_SERVE_KSERVEREQUEST_H

#include "jit/Engine.h"
#include "serve/ServeError.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace courier::serve::v2 {

/// The request header that says how many leading bytes of a body are its JSON (the binary
/// tensor data extension); the rest are tensors' raw bytes.
inline constexpr const char *kHeaderLengthHeader = "Inference-Header-Content-Length";

/// The protocol's name of `dtype`: "FP32", "BF16", "INT8", "UINT64", "BOOL", ...
llvm::StringRef datatypeName(DType dtype);
/// The DType of a protocol datatype name, or nullopt (BYTES and names Courier has no type for).
std::optional<DType> parseDatatype(llvm::StringRef name);

/// The names a model's inputs (or outputs) go by: each one's `courier.name` attribute when it
/// is a usable name (1 to 64 of [A-Za-z0-9_.-:/], unique among them), else input0, input1, ...
/// (output0, ...).
std::vector<std::string> tensorNames(const std::vector<std::string> &given, size_t count,
                                     llvm::StringRef prefix);
std::vector<std::string> inputNames(const EntrySignature &entry);
std::vector<std::string> outputNames(const EntrySignature &entry);

/// A region of the caller's shared memory a tensor is read from or written to
/// (the system shared-memory extension).
struct SharedMemoryRef {
  std::string region;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

/// Where an input's bytes come from once the header has been read.
struct InputSource {
  enum class Kind { Json, Binary, SharedMemory };
  Kind kind = Kind::Json;
  /// Binary: where its bytes start in the tail after the header.
  uint64_t tailOffset = 0;
  SharedMemoryRef shared;
};

/// One output the request asks for, in the order asked.
struct OutputRequest {
  size_t index = 0; ///< The entry's result it names.
  bool binary = false;
  std::optional<SharedMemoryRef> shared;
};

/// What an infer request's header asks for.
struct InferRequest {
  /// The request's "id", echoed in the reply when given.
  std::optional<std::string> id;
  /// The entry's inputs in its order: JSON ones read, shared-memory ones sized (their bytes
  /// left for the caller to fill), binary ones shaped with no bytes (allocateBinaryInputs).
  std::vector<Tensor> inputs;
  std::vector<InputSource> sources;
  /// Bytes of the tail the binary inputs take, packed in the order the request lists them.
  uint64_t tailBytes = 0;
  /// The outputs to send: those the request names, or every output when it names none.
  std::vector<OutputRequest> outputs;
};

/// Reads the JSON header of an infer request for `entry` (its inputs and outputs called as
/// inputNames/outputNames say): every input named once, with the entry's datatype, a shape its
/// signature takes (-1 takes any size) and either "data" (flat or nested) or
/// "parameters": {"binary_data_size": N} (or, with `sharedMemory`, a
/// "shared_memory_region"). Binary inputs may take at most `maxBytes` together.
llvm::Expected<InferRequest> readInferHeader(llvm::StringRef header, const EntrySignature &entry,
                                             uint64_t maxBytes, bool sharedMemory = false);

/// Gives each binary input of `request` a buffer for its bytes, left for the caller to fill
/// from the tail; done only once the body is known to carry them.
void allocateBinaryInputs(InferRequest &request);

/// Reads a whole infer body: `headerLength` (Inference-Header-Content-Length) bytes of JSON
/// then the binary inputs' bytes, which must be exactly what the header declares, copied into
/// the inputs; without `headerLength`, the body is all JSON.
llvm::Expected<InferRequest> readInferBody(llvm::StringRef body,
                                           std::optional<uint64_t> headerLength,
                                           const EntrySignature &entry, uint64_t maxBytes);

/// The value of an Inference-Header-Content-Length header, which must fit in `bodyBytes`
/// when the body's length is known.
llvm::Expected<uint64_t> parseHeaderLength(llvm::StringRef value,
                                           std::optional<uint64_t> bodyBytes);

/// Appends `tensor`'s elements to `out` as a flat JSON array, each number in the shortest text
/// that reads back as the same value of its element type (writeTensorJSON's numbers).
void appendJsonData(std::string &out, const Tensor &tensor);

} // namespace courier::serve::v2

#endif // COURIER_SERVE_KSERVEREQUEST_H
