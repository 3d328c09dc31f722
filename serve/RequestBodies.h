// Reading courier-serve's request bodies: module submissions, JSON invokes and a frame
// invoke's header line. Bytes in, what they ask for (or a ServeError naming what is wrong)
// out, with no HTTP type, so that each reading can be fuzzed on its own (tests/fuzz).
#ifndef COURIER_SERVE_REQUESTBODIES_H
#define COURIER_SERVE_REQUESTBODIES_H

#include "serve/ModuleStore.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace courier::serve {

/// A module as POST /v1/modules or PUT /v1/modules/{name} submits it.
struct ModuleRequest {
  std::string name;
  std::string mlir;
  std::optional<ModuleOptions> options; ///< Absent when the body gives none.
};

/// POST /v1/modules: {"name": string, "mlir": string, "options": {...}}.
llvm::Expected<ModuleRequest> readCreateBody(llvm::StringRef body);
/// PUT /v1/modules/{name}: the MLIR text itself when `plainText` (a text/plain body), else
/// {"mlir": string, "options": {...}} with an optional "name" that must be `name`.
llvm::Expected<ModuleRequest> readReplaceBody(llvm::StringRef name, std::string body,
                                              bool plainText);

/// An invoke's JSON body {"inputs": [tensor, ...]} for `entry`: read on demand when that
/// reading takes it (JsonInputs.h), else with llvm::json. `allocated`: as for readInputsFast.
llvm::Expected<std::vector<Tensor>>
readInvokeBody(llvm::StringRef body, const EntrySignature &entry, size_t allocated = 0);
/// The llvm::json reading alone: every body readInputsFast takes, with the same tensors, and
/// every other, with the error naming what is wrong.
llvm::Expected<std::vector<Tensor>> inputsFromJSON(llvm::StringRef body,
                                                   const EntrySignature &entry);

/// A frame invoke's inputs, as its header line declares them.
struct FrameInputs {
  /// Each input's dtype and shape; the bytes are not allocated yet.
  std::vector<Tensor> inputs;
  /// The payload bytes the inputs take, packed in order.
  uint64_t payloadBytes = 0;
};
/// A frame invoke's header line {"inputs": [{"dtype", "shape", "bytes"?, "offset"?}, ...]},
/// whose inputs may take at most `maxBytes`.
llvm::Expected<FrameInputs> readFrameHeader(llvm::StringRef line, uint64_t maxBytes);

/// An error of the body and frame readers shared with the executor (transport's CodedError)
/// as a ServeError: the same message, payload_too_large kept, any other code bad_request.
llvm::Error frameError(llvm::Error error);

} // namespace courier::serve

#endif // COURIER_SERVE_REQUESTBODIES_H
