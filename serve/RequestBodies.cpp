// The reading of courier-serve's request bodies, apart from the HTTP layer that receives them.
#include "serve/RequestBodies.h"
#include "serve/JsonInputs.h"

#include "jit/Tensor.h"

#include "transport/HostPort.h"
#include "transport/Wire.h"

#include "llvm/Support/JSON.h"

namespace courier::serve {

namespace json = llvm::json;
namespace wire = courier::transport::wire;

namespace {

llvm::Expected<json::Object> parseObject(llvm::StringRef body, llvm::StringRef what) {
  // Bounded nesting, as the executor bounds its JSON: llvm::json parses recursively, on the
  // stack of the thread serving.
  llvm::Expected<json::Value> parsed = parseJSON(body, wire::kMaxJsonDepth);
  if (!parsed)
    return makeServeError(ErrorCode::BadRequest,
                          what + " is not JSON: " + llvm::toString(parsed.takeError()));
  json::Object *object = parsed->getAsObject();
  if (!object)
    return makeServeError(ErrorCode::BadRequest, what + " must be a JSON object");
  return std::move(*object);
}

/// {"optLevel": 0-3, "executor": "local" | "host:port"}; unknown keys are refused so a typo
/// does not go unnoticed.
llvm::Expected<ModuleOptions> parseOptions(const json::Value &value) {
  const json::Object *object = value.getAsObject();
  if (!object)
    return makeServeError(ErrorCode::BadRequest, "'options' must be an object");
  ModuleOptions options;
  for (const auto &[key, field] : *object) {
    if (key == "optLevel") {
      std::optional<uint64_t> level = jsonCount(field);
      if (!level || *level > 3)
        return makeServeError(ErrorCode::BadRequest,
                              "'options.optLevel' must be an integer from 0 to 3");
      options.optLevel = static_cast<unsigned>(*level);
    } else if (key == "executor") {
      std::optional<llvm::StringRef> executor = field.getAsString();
      if (!executor)
        return makeServeError(ErrorCode::BadRequest,
                              "'options.executor' must be \"local\", \"host:port\", "
                              "\"https://host:port\" or \"unix:PATH\"");
      if (*executor != "local") {
        llvm::Expected<transport::HostPort> parsed = transport::parseHostPort(*executor);
        if (!parsed)
          return makeServeError(ErrorCode::BadRequest,
                                "'options.executor' must be \"local\", \"host:port\", "
                                "\"https://host:port\" or \"unix:PATH\": " +
                                    llvm::toString(parsed.takeError()));
      }
      options.executor = executor->str();
    } else {
      return makeServeError(ErrorCode::BadRequest,
                            "unknown option '" + key.str() + "' (known: optLevel, executor)");
    }
  }
  return options;
}

/// The body's "options", parsed, or none when the body has none.
llvm::Expected<std::optional<ModuleOptions>> optionsOf(const json::Object &request) {
  const json::Value *given = request.get("options");
  if (!given)
    return std::nullopt;
  llvm::Expected<ModuleOptions> parsed = parseOptions(*given);
  if (!parsed)
    return parsed.takeError();
  return std::optional<ModuleOptions>(std::move(*parsed));
}

/// A frame input's optional `bytes` or `offset`. A key that is present but not a
/// non-negative integer (a fraction, a string, a number beyond uint64) is refused rather
/// than taken as absent: skipping it would let the client believe its check was made.
llvm::Expected<std::optional<uint64_t>> optionalCount(const json::Object &item, llvm::StringRef key,
                                                      size_t input) {
  const json::Value *value = item.get(key);
  if (!value)
    return std::nullopt;
  // 32.0 is a JSON spelling of 32, as "shape" accepts it.
  if (std::optional<uint64_t> count = jsonCount(*value))
    return count;
  return makeServeError(ErrorCode::BadRequest, "frame input " + llvm::Twine(input) + ": \"" + key +
                                                   "\" must be a non-negative integer");
}

/// Input `i` of a frame header, which starts at byte `offset` of the payload; its bytes are
/// not yet allocated.
llvm::Expected<Tensor> frameInput(const json::Value &given, size_t i, uint64_t offset) {
  const json::Object *item = given.getAsObject();
  std::optional<llvm::StringRef> dtypeName = item ? item->getString("dtype") : std::nullopt;
  const json::Array *shape = item ? item->getArray("shape") : nullptr;
  if (!dtypeName || !shape)
    return makeServeError(ErrorCode::BadRequest,
                          "frame input " + llvm::Twine(i) +
                              " must be {\"dtype\": string, \"shape\": [...]}");
  std::optional<DType> dtype = parseDType(*dtypeName);
  if (!dtype)
    return makeServeError(ErrorCode::InvalidInput,
                          "frame input " + llvm::Twine(i) + ": unknown dtype '" + *dtypeName + "'");
  Tensor tensor;
  tensor.dtype = *dtype;
  for (const json::Value &d : *shape) {
    std::optional<uint64_t> size = jsonCount(d);
    if (!size || *size > uint64_t(INT64_MAX))
      return makeServeError(ErrorCode::BadRequest,
                            "frame input " + llvm::Twine(i) +
                                ": \"shape\" must hold non-negative integers");
    tensor.shape.push_back(static_cast<int64_t>(*size));
  }
  llvm::Expected<uint64_t> bytes =
      wire::packedBytes(static_cast<int64_t>(dtypeSize(*dtype)), tensor.shape);
  if (!bytes)
    return frameError(bytes.takeError());
  llvm::Expected<std::optional<uint64_t>> declared = optionalCount(*item, "bytes", i);
  if (!declared)
    return declared.takeError();
  if (*declared && **declared != *bytes)
    return makeServeError(ErrorCode::BadRequest,
                          "frame input " + llvm::Twine(i) + " declares " + llvm::Twine(**declared) +
                              " bytes, its shape needs " + llvm::Twine(*bytes));
  llvm::Expected<std::optional<uint64_t>> start = optionalCount(*item, "offset", i);
  if (!start)
    return start.takeError();
  if (*start && **start != offset)
    return makeServeError(ErrorCode::BadRequest, "frame input " + llvm::Twine(i) +
                                                     " must start at offset " +
                                                     llvm::Twine(offset));
  return tensor;
}

} // namespace

llvm::Expected<ModuleRequest> readCreateBody(llvm::StringRef body) {
  llvm::Expected<json::Object> request = parseObject(body, "the request body");
  if (!request)
    return request.takeError();
  std::optional<llvm::StringRef> name = request->getString("name");
  std::optional<llvm::StringRef> mlir = request->getString("mlir");
  if (!name || !mlir)
    return makeServeError(ErrorCode::BadRequest,
                          "expected {\"name\": string, \"mlir\": string, \"options\": {...}}");
  llvm::Expected<std::optional<ModuleOptions>> options = optionsOf(*request);
  if (!options)
    return options.takeError();
  return ModuleRequest{name->str(), mlir->str(), std::move(*options)};
}

llvm::Expected<ModuleRequest> readReplaceBody(llvm::StringRef name, std::string body,
                                              bool plainText) {
  // Plain MLIR text is accepted too, so `curl --data-binary @file.mlir` replaces a module.
  if (plainText)
    return ModuleRequest{name.str(), std::move(body), std::nullopt};
  llvm::Expected<json::Object> request = parseObject(body, "the request body");
  if (!request)
    return request.takeError();
  std::optional<llvm::StringRef> text = request->getString("mlir");
  if (!text)
    return makeServeError(ErrorCode::BadRequest, "expected {\"mlir\": string, \"options\": {...}}");
  if (std::optional<llvm::StringRef> bodyName = request->getString("name"))
    if (*bodyName != name)
      return makeServeError(ErrorCode::BadRequest,
                            "the body names module '" + *bodyName + "', the path '" + name + "'");
  llvm::Expected<std::optional<ModuleOptions>> options = optionsOf(*request);
  if (!options)
    return options.takeError();
  return ModuleRequest{name.str(), text->str(), std::move(*options)};
}

llvm::Expected<std::vector<Tensor>> readInvokeBody(llvm::StringRef body,
                                                   const EntrySignature &entry, size_t allocated) {
  if (std::optional<std::vector<Tensor>> fast = readInputsFast(body, entry, allocated))
    return std::move(*fast);
  return inputsFromJSON(body, entry);
}

llvm::Expected<std::vector<Tensor>> inputsFromJSON(llvm::StringRef body,
                                                   const EntrySignature &entry) {
  llvm::Expected<json::Object> request = parseObject(body, "the request body");
  if (!request)
    return request.takeError();
  const json::Array *given = request->getArray("inputs");
  if (!given)
    return makeServeError(ErrorCode::BadRequest, "expected {\"inputs\": [tensor, ...]}");
  if (given->size() != entry.inputs.size())
    return makeServeError(ErrorCode::InvalidInput,
                          "entry '" + entry.name + "' takes " + llvm::Twine(entry.inputs.size()) +
                              " inputs, got " + llvm::Twine(given->size()));
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < given->size(); ++i) {
    llvm::Expected<Tensor> tensor = tensorFromJSON((*given)[i], entry.inputs[i]);
    if (!tensor)
      return makeServeError(ErrorCode::InvalidInput,
                            "input " + llvm::Twine(i) + ": " + llvm::toString(tensor.takeError()));
    inputs.push_back(std::move(*tensor));
  }
  return std::move(inputs);
}

llvm::Expected<FrameInputs> readFrameHeader(llvm::StringRef line, uint64_t maxBytes) {
  llvm::Expected<json::Object> header = parseObject(line, "the frame header");
  if (!header)
    return header.takeError();
  const json::Array *given = header->getArray("inputs");
  if (!given)
    return makeServeError(ErrorCode::BadRequest, "expected a frame header {\"inputs\": "
                                                 "[{\"dtype\", \"shape\"}, ...]}");
  FrameInputs frame;
  for (size_t i = 0; i < given->size(); ++i) {
    llvm::Expected<Tensor> tensor = frameInput((*given)[i], i, frame.payloadBytes);
    if (!tensor)
      return tensor.takeError();
    frame.payloadBytes += static_cast<uint64_t>(tensor->numElements()) * dtypeSize(tensor->dtype);
    if (frame.payloadBytes > maxBytes)
      return makeServeError(ErrorCode::PayloadTooLarge,
                            "frame inputs exceed the server's limit of " + llvm::Twine(maxBytes) +
                                " bytes");
    frame.inputs.push_back(std::move(*tensor));
  }
  return std::move(frame);
}

llvm::Error frameError(llvm::Error error) {
  return llvm::handleErrors(std::move(error), [](const transport::CodedError &e) {
    return makeServeError(e.kind == ErrorCode::PayloadTooLarge ? ErrorCode::PayloadTooLarge
                                                               : ErrorCode::BadRequest,
                          e.message);
  });
}

} // namespace courier::serve
