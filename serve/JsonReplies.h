// courier-serve's replies, shared by its /v1 and KServe v2 routes: text made valid UTF-8, a
// value's compact text, a reply carrying it, and a frame sent from output tensors in place.
#ifndef COURIER_SERVE_JSONREPLIES_H
#define COURIER_SERVE_JSONREPLIES_H

#include "jit/Tensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include <httplib.h>

#include <string>
#include <vector>

namespace courier::serve {

/// `text` as llvm::json takes it: valid UTF-8 as it is, anything else with its bad bytes
/// replaced (messages may quote arbitrary source text or symbol names).
std::string utf8(llvm::StringRef text);

/// The compact text of `value`.
std::string dump(const llvm::json::Value &value);

/// Answers `status` with `body` as JSON, ended by a newline (it keeps consecutive curl outputs
/// on lines of their own).
void sendJson(httplib::Response &res, int status, const llvm::json::Value &body);

/// Sends a frame (transport/Wire.h): the header line `header`, then the packed bytes of
/// `tensors[i]` for each index in `which`, streamed from the tensors, which are held until
/// the reply is sent.
void sendTensorFrame(httplib::Response &res, std::string header, std::vector<Tensor> tensors,
                     llvm::ArrayRef<size_t> which);

} // namespace courier::serve

#endif // COURIER_SERVE_JSONREPLIES_H
