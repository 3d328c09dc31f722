// courier-serve's JSON replies.
#include "serve/JsonReplies.h"

#include "transport/HttpService.h"
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

void sendTensorFrame(httplib::Response &res, std::string header, std::vector<Tensor> tensors,
                     llvm::ArrayRef<size_t> which) {
  namespace wire = transport::wire;
  struct Reply {
    std::vector<Tensor> tensors;
    std::unique_ptr<wire::FrameWriter> writer;
  };
  auto reply = std::make_shared<Reply>();
  reply->tensors = std::move(tensors);
  std::vector<transport::TensorView> views;
  for (size_t index : which) {
    const Tensor &t = reply->tensors[index];
    views.push_back(transport::TensorView{t.bytes.data(), static_cast<int64_t>(dtypeSize(t.dtype)),
                                          t.shape, wire::packedStrides(t.shape)});
  }
  reply->writer = std::make_unique<wire::FrameWriter>(std::move(header), std::move(views));
  transport::sendFrame(res, std::shared_ptr<wire::FrameWriter>(reply, reply->writer.get()));
}

} // namespace courier::serve
