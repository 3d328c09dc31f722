// courier-serve's JSON replies.
#include "serve/JsonReplies.h"

#include "transport/Wire.h"

#include "llvm/Support/raw_ostream.h"

namespace courier::serve {

std::string utf8(llvm::StringRef text) {
  return llvm::json::isUTF8(text) ? text.str() : llvm::json::fixUTF8(text);
}

std::string dump(const llvm::json::Value &value) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << value;
  return text;
}

void sendJson(httplib::Response &res, int status, const llvm::json::Value &body) {
  res.status = status;
  res.set_content(dump(body) + "\n", transport::wire::kJsonContentType);
}

} // namespace courier::serve
