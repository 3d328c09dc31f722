// The reading of KServe v2 infer requests, apart from the HTTP layer that receives them.
#include "serve/KServeRequest.h"

#include "jit/Tensor.h"
#include "transport/Wire.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstring>

namespace courier::serve::v2 {

namespace json = llvm::json;
namespace wire = courier::transport::wire;

namespace {

struct DatatypeName {
  DType dtype;
  const char *name;
};
constexpr DatatypeName kDatatypes[] = {
    {DType::F16, "FP16"},    {DType::F32, "FP32"},    {DType::F64, "FP64"},
    {DType::BF16, "BF16"},   {DType::I1, "BOOL"},     {DType::I8, "INT8"},
    {DType::I16, "INT16"},   {DType::I32, "INT32"},   {DType::I64, "INT64"},
    {DType::UI8, "UINT8"},   {DType::UI16, "UINT16"}, {DType::UI32, "UINT32"},
    {DType::UI64, "UINT64"},
};

bool usableName(llvm::StringRef name) {
  if (name.empty() || name.size() > 64)
    return false;
  for (char c : name)
    if (!llvm::isAlnum(c) && !llvm::StringRef("_.-:/").contains(c))
      return false;
  return true;
}

llvm::Error bad(const llvm::Twine &message) {
  return makeServeError(ErrorCode::BadRequest, message);
}
llvm::Error invalid(const llvm::Twine &message) {
  return makeServeError(ErrorCode::InvalidInput, message);
}

/// "[2, -1]" for messages.
std::string shapeText(llvm::ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

/// The model's shape of `spec`: [] for a scalar, -1 for a dynamic size.
std::vector<int64_t> modelShape(const TensorSpec &spec) {
  return spec.isScalar ? std::vector<int64_t>() : spec.shape;
}

/// Whether a request's `shape` fits `spec`; a scalar also takes [1].
bool shapeFits(llvm::ArrayRef<int64_t> shape, const TensorSpec &spec) {
  if (spec.isScalar)
    return shape.empty() || (shape.size() == 1 && shape[0] == 1);
  if (shape.size() != spec.shape.size())
    return false;
  for (size_t d = 0; d < shape.size(); ++d)
    if (spec.shape[d] >= 0 && spec.shape[d] != shape[d])
      return false;
  return true;
}

/// A non-negative integer field of `parameters`, or nullopt when absent.
llvm::Expected<std::optional<uint64_t>>
countParameter(const json::Object &parameters, llvm::StringRef key, const llvm::Twine &what) {
  const json::Value *value = parameters.get(key);
  if (!value)
    return std::nullopt;
  if (std::optional<uint64_t> count = jsonCount(*value))
    return count;
  return bad(what + ": parameter \"" + key + "\" must be a non-negative integer");
}

llvm::Expected<std::optional<bool>> boolParameter(const json::Object &parameters,
                                                  llvm::StringRef key, const llvm::Twine &what) {
  const json::Value *value = parameters.get(key);
  if (!value)
    return std::nullopt;
  if (std::optional<bool> flag = value->getAsBoolean())
    return flag;
  return bad(what + ": parameter \"" + key + "\" must be true or false");
}

/// The shared-memory parameters of a tensor, when it names a region.
llvm::Expected<std::optional<SharedMemoryRef>>
sharedMemoryOf(const json::Object &parameters, bool allowed, const llvm::Twine &what) {
  const json::Value *region = parameters.get("shared_memory_region");
  if (!region)
    return std::nullopt;
  if (!allowed)
    return bad(what + " names a shared-memory region, and this server does not take tensors in "
                      "shared memory (courier-serve --allow-shared-memory)");
  std::optional<llvm::StringRef> name = region->getAsString();
  if (!name || name->empty())
    return bad(what + ": \"shared_memory_region\" must be a region's name");
  llvm::Expected<std::optional<uint64_t>> size =
      countParameter(parameters, "shared_memory_byte_size", what);
  if (!size)
    return size.takeError();
  if (!*size)
    return bad(what + ": a shared-memory tensor needs \"shared_memory_byte_size\"");
  llvm::Expected<std::optional<uint64_t>> offset =
      countParameter(parameters, "shared_memory_offset", what);
  if (!offset)
    return offset.takeError();
  return SharedMemoryRef{name->str(), offset->value_or(0), **size};
}

const json::Object *parametersOf(const json::Object &tensor, const llvm::Twine &what,
                                 llvm::Error &error) {
  const json::Value *value = tensor.get("parameters");
  if (!value)
    return nullptr;
  const json::Object *object = value->getAsObject();
  if (!object)
    error = bad(what + ": \"parameters\" must be an object");
  return object;
}

/// An input's datatype and shape, checked against the entry's `spec`: into `tensor`, the
/// datatype as the request names it in `datatype`.
llvm::Error readInputShape(const json::Object &given, const TensorSpec &spec,
                           const std::string &what, Tensor &tensor, llvm::StringRef &datatype) {
  std::optional<llvm::StringRef> named = given.getString("datatype");
  if (!named)
    return bad(what + " needs \"datatype\" (a string such as \"FP32\")");
  std::optional<DType> dtype = parseDatatype(*named);
  if (!dtype)
    return invalid(what + ": unknown datatype '" + *named + "' (Courier takes FP16, FP32, " +
                   "FP64, BF16, BOOL, INT8 to INT64 and UINT8 to UINT64)");
  if (*dtype != spec.dtype)
    return invalid(what + " is " + datatypeName(spec.dtype) + ", the request sends " + *named);
  const json::Array *shapeValue = given.getArray("shape");
  if (!shapeValue)
    return bad(what + " needs \"shape\" (a list of sizes)");
  tensor.dtype = *dtype;
  for (const json::Value &d : *shapeValue) {
    std::optional<uint64_t> size = jsonCount(d);
    if (!size || *size > uint64_t(INT64_MAX))
      return bad(what + ": \"shape\" must hold non-negative integers");
    tensor.shape.push_back(static_cast<int64_t>(*size));
  }
  if (tensor.shape.size() > wire::kMaxFrameRank)
    return bad(what + ": \"shape\" has more than " + llvm::Twine(wire::kMaxFrameRank) +
               " dimensions");
  if (!shapeFits(tensor.shape, spec))
    return invalid(what + " has shape " + shapeText(modelShape(spec)) +
                   (spec.isScalar ? " (a scalar; [1] is taken too)" : "") + ", the request sends " +
                   shapeText(tensor.shape));
  if (spec.isScalar)
    tensor.shape.clear();
  datatype = *named;
  return llvm::Error::success();
}

/// An input given as JSON "data", read as the engine reads a tensor (so that numbers are
/// checked as /v1 checks them), of the shape `tensor` has (`bytes` in all): into `tensor`.
llvm::Error readInputData(json::Value data, const TensorSpec &spec, const std::string &what,
                          uint64_t bytes, Tensor &tensor) {
  json::Object object{{"data", std::move(data)}};
  json::Array shape;
  for (int64_t d : tensor.shape)
    shape.push_back(d);
  if (!spec.isScalar)
    object["shape"] = std::move(shape);
  TensorSpec exact = spec;
  exact.shape = tensor.shape;
  llvm::Expected<Tensor> read = tensorFromJSON(json::Value(std::move(object)), exact);
  if (!read)
    return invalid(what + ": " + llvm::toString(read.takeError()));
  if (read->shape != tensor.shape)
    return invalid(what + ": \"data\" holds " + llvm::Twine(read->numElements()) +
                   " elements, shape " + shapeText(tensor.shape) + " takes " +
                   llvm::Twine(bytes / dtypeSize(tensor.dtype)));
  tensor = std::move(*read);
  return llvm::Error::success();
}

/// Reads one input tensor of the request into `request`, as input `index` of the entry.
llvm::Error readInput(json::Object &given, const TensorSpec &spec, llvm::StringRef name,
                      size_t index, InferRequest &request, uint64_t maxBytes, bool sharedMemory) {
  std::string what = "input '" + name.str() + "'";
  Tensor tensor;
  llvm::StringRef datatype;
  if (llvm::Error error = readInputShape(given, spec, what, tensor, datatype))
    return error;
  llvm::Expected<uint64_t> bytes =
      wire::packedBytes(static_cast<int64_t>(dtypeSize(tensor.dtype)), tensor.shape);
  if (!bytes)
    return bad(what + ": \"shape\" is too large");
  llvm::Error failure = llvm::Error::success();
  const json::Object *parameters = parametersOf(given, what, failure);
  if (failure)
    return failure;
  std::optional<uint64_t> binarySize;
  std::optional<SharedMemoryRef> shared;
  if (parameters) {
    llvm::Expected<std::optional<uint64_t>> size =
        countParameter(*parameters, "binary_data_size", what);
    if (!size)
      return size.takeError();
    binarySize = *size;
    llvm::Expected<std::optional<SharedMemoryRef>> region =
        sharedMemoryOf(*parameters, sharedMemory, what);
    if (!region)
      return region.takeError();
    shared = std::move(*region);
  }
  json::Value *data = given.get("data");
  int ways = (data != nullptr) + binarySize.has_value() + shared.has_value();
  if (ways != 1)
    return bad(what + (ways == 0 ? " has no data: give \"data\", or the binary_data_size "
                                   "parameter with its bytes after the JSON"
                                 : " gives its data more than one way (\"data\", "
                                   "binary_data_size, shared_memory_region): give one"));
  InputSource source;
  if (data) {
    if (llvm::Error error = readInputData(std::move(*data), spec, what, *bytes, tensor))
      return error;
  } else if (binarySize) {
    if (*binarySize != *bytes)
      return bad(what + ": binary_data_size is " + llvm::Twine(*binarySize) + " bytes, shape " +
                 shapeText(tensor.shape) + " of " + datatype + " takes " + llvm::Twine(*bytes));
    if (*bytes > maxBytes - std::min(maxBytes, request.tailBytes))
      return makeServeError(ErrorCode::PayloadTooLarge,
                            "binary inputs exceed the server's limit of " + llvm::Twine(maxBytes) +
                                " bytes");
    source.kind = InputSource::Kind::Binary;
    source.tailOffset = request.tailBytes;
    request.tailBytes += *bytes;
    // Allocated (allocateBinaryInputs) once the body is known to carry them.
  } else {
    if (shared->bytes != *bytes)
      return bad(what + ": shared_memory_byte_size is " + llvm::Twine(shared->bytes) +
                 " bytes, shape " + shapeText(tensor.shape) + " of " + datatype + " takes " +
                 llvm::Twine(*bytes));
    if (*bytes > maxBytes)
      return makeServeError(ErrorCode::PayloadTooLarge, what + " exceeds the server's limit of " +
                                                            llvm::Twine(maxBytes) + " bytes");
    source.kind = InputSource::Kind::SharedMemory;
    source.shared = std::move(*shared);
    // Allocated once the region is known to hold them.
  }
  request.inputs[index] = std::move(tensor);
  request.sources[index] = std::move(source);
  return llvm::Error::success();
}

llvm::Error readOutputs(const json::Object &header, const EntrySignature &entry, bool binaryDefault,
                        bool sharedMemory, InferRequest &request) {
  std::vector<std::string> names = outputNames(entry);
  const json::Value *given = header.get("outputs");
  if (!given) {
    for (size_t i = 0; i < names.size(); ++i)
      request.outputs.push_back({i, binaryDefault, std::nullopt});
    return llvm::Error::success();
  }
  const json::Array *list = given->getAsArray();
  if (!list)
    return bad("\"outputs\" must be a list of {\"name\": string, \"parameters\": {...}}");
  llvm::StringSet<> seen;
  for (const json::Value &item : *list) {
    const json::Object *output = item.getAsObject();
    std::optional<llvm::StringRef> name = output ? output->getString("name") : std::nullopt;
    if (!name)
      return bad("each of \"outputs\" must be {\"name\": string, \"parameters\": {...}}");
    auto found = llvm::find(names, *name);
    if (found == names.end()) {
      std::string known;
      for (const std::string &n : names)
        known += (known.empty() ? "" : ", ") + n;
      return bad("the model has no output '" + *name +
                 "' (outputs: " + (known.empty() ? "none" : known) + ")");
    }
    if (!seen.insert(*name).second)
      return bad("output '" + *name + "' is asked for twice");
    std::string what = "output '" + name->str() + "'";
    OutputRequest asked{static_cast<size_t>(found - names.begin()), binaryDefault, std::nullopt};
    llvm::Error failure = llvm::Error::success();
    if (const json::Object *parameters = parametersOf(*output, what, failure)) {
      llvm::Expected<std::optional<bool>> binary = boolParameter(*parameters, "binary_data", what);
      if (!binary)
        return binary.takeError();
      asked.binary = binary->value_or(binaryDefault);
      llvm::Expected<std::optional<SharedMemoryRef>> region =
          sharedMemoryOf(*parameters, sharedMemory, what);
      if (!region)
        return region.takeError();
      asked.shared = std::move(*region);
    }
    if (failure)
      return failure;
    request.outputs.push_back(std::move(asked));
  }
  return llvm::Error::success();
}

} // namespace

llvm::StringRef datatypeName(DType dtype) {
  for (const DatatypeName &d : kDatatypes)
    if (d.dtype == dtype)
      return d.name;
  return "UNKNOWN";
}

std::optional<DType> parseDatatype(llvm::StringRef name) {
  for (const DatatypeName &d : kDatatypes)
    if (name == d.name)
      return d.dtype;
  return std::nullopt;
}

std::vector<std::string> tensorNames(const std::vector<std::string> &given, size_t count,
                                     llvm::StringRef prefix) {
  std::vector<std::string> names;
  llvm::StringSet<> taken;
  for (size_t i = 0; i < count; ++i)
    if (i < given.size() && usableName(given[i]))
      taken.insert(given[i]);
  llvm::StringSet<> used;
  for (size_t i = 0; i < count; ++i) {
    std::string name = i < given.size() ? given[i] : std::string();
    if (!usableName(name) || !used.insert(name).second) {
      // input0, ...; skipping one an attribute took.
      name = prefix.str() + std::to_string(i);
      for (size_t n = count; taken.contains(name) || used.contains(name); ++n)
        name = prefix.str() + std::to_string(n);
      used.insert(name);
    }
    names.push_back(std::move(name));
  }
  return names;
}

std::vector<std::string> inputNames(const EntrySignature &entry) {
  return tensorNames(entry.inputNames, entry.inputs.size(), "input");
}

std::vector<std::string> outputNames(const EntrySignature &entry) {
  return tensorNames(entry.outputNames, entry.outputs.size(), "output");
}

llvm::Expected<InferRequest> readInferHeader(llvm::StringRef text, const EntrySignature &entry,
                                             uint64_t maxBytes, bool sharedMemory) {
  llvm::Expected<json::Value> parsed = parseJSON(text, wire::kMaxJsonDepth);
  if (!parsed)
    return bad("the request is not JSON: " + llvm::toString(parsed.takeError()));
  json::Object *header = parsed->getAsObject();
  if (!header)
    return bad("the request must be a JSON object {\"inputs\": [...], ...}");
  InferRequest request;
  if (json::Value *id = header->get("id")) {
    std::optional<llvm::StringRef> text = id->getAsString();
    if (!text)
      return bad("\"id\" must be a string");
    request.id = text->str();
  }
  bool binaryDefault = false;
  llvm::Error failure = llvm::Error::success();
  if (const json::Object *parameters = parametersOf(*header, "the request", failure)) {
    llvm::Expected<std::optional<bool>> binary =
        boolParameter(*parameters, "binary_data_output", "the request");
    if (!binary)
      return binary.takeError();
    binaryDefault = binary->value_or(false);
  }
  if (failure)
    return std::move(failure);
  json::Array *given = header->getArray("inputs");
  if (!given)
    return bad(
        "the request needs \"inputs\": [{\"name\", \"shape\", \"datatype\", \"data\"}, ...]");
  std::vector<std::string> names = inputNames(entry);
  request.inputs.resize(entry.inputs.size());
  request.sources.resize(entry.inputs.size());
  std::vector<bool> seen(entry.inputs.size(), false);
  for (json::Value &item : *given) {
    json::Object *input = item.getAsObject();
    std::optional<llvm::StringRef> name = input ? input->getString("name") : std::nullopt;
    if (!name)
      return bad("each of \"inputs\" must be {\"name\": string, \"shape\", \"datatype\", ...}");
    auto found = llvm::find(names, *name);
    if (found == names.end()) {
      std::string known;
      for (const std::string &n : names)
        known += (known.empty() ? "" : ", ") + n;
      return invalid("the model has no input '" + *name +
                     "' (inputs: " + (known.empty() ? "none" : known) + ")");
    }
    size_t index = static_cast<size_t>(found - names.begin());
    if (seen[index])
      return invalid("input '" + *name + "' is given twice");
    seen[index] = true;
    if (llvm::Error error =
            readInput(*input, entry.inputs[index], *name, index, request, maxBytes, sharedMemory))
      return std::move(error);
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (!seen[i])
      return invalid("input '" + names[i] + "' is missing (the model takes " +
                     llvm::Twine(names.size()) + ")");
  if (llvm::Error error = readOutputs(*header, entry, binaryDefault, sharedMemory, request))
    return std::move(error);
  return std::move(request);
}

llvm::Expected<uint64_t> parseHeaderLength(llvm::StringRef value,
                                           std::optional<uint64_t> bodyBytes) {
  uint64_t length = 0;
  if (value.trim().getAsInteger(10, length))
    return bad(llvm::Twine(kHeaderLengthHeader) + " must be a whole number of bytes, got '" +
               value + "'");
  if (bodyBytes && length > *bodyBytes)
    return bad(llvm::Twine(kHeaderLengthHeader) + " is " + llvm::Twine(length) +
               " bytes, the body only " + llvm::Twine(*bodyBytes));
  return length;
}

llvm::Expected<InferRequest> readInferBody(llvm::StringRef body,
                                           std::optional<uint64_t> headerLength,
                                           const EntrySignature &entry, uint64_t maxBytes) {
  uint64_t length = headerLength.value_or(body.size());
  if (length > body.size())
    return bad(llvm::Twine(kHeaderLengthHeader) + " is " + llvm::Twine(length) +
               " bytes, the body only " + llvm::Twine(body.size()));
  llvm::Expected<InferRequest> request = readInferHeader(body.take_front(length), entry, maxBytes);
  if (!request)
    return request.takeError();
  llvm::StringRef tail = body.drop_front(length);
  if (tail.size() != request->tailBytes)
    return bad("the JSON declares " + llvm::Twine(request->tailBytes) +
               " bytes of binary inputs, the body carries " + llvm::Twine(tail.size()));
  allocateBinaryInputs(*request);
  for (size_t i = 0; i < request->inputs.size(); ++i)
    if (request->sources[i].kind == InputSource::Kind::Binary && !request->inputs[i].bytes.empty())
      std::memcpy(request->inputs[i].bytes.data(), tail.data() + request->sources[i].tailOffset,
                  request->inputs[i].bytes.size());
  return request;
}

void allocateBinaryInputs(InferRequest &request) {
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    if (request.sources[i].kind != InputSource::Kind::Binary)
      continue;
    Tensor &input = request.inputs[i];
    uint64_t bytes = static_cast<uint64_t>(input.numElements()) * dtypeSize(input.dtype);
    void *buffer = wire::allocateTensorBuffer(bytes);
    input.bytes = TensorBytes::adopt(buffer, static_cast<uint8_t *>(buffer),
                                     static_cast<size_t>(bytes), std::free);
  }
}

void appendJsonData(std::string &out, const Tensor &tensor) {
  // writeTensorJSON's object is {"data":[...],"dtype":...}: its array is kept, the rest cut.
  size_t start = out.size();
  writeTensorJSON(out, tensor);
  size_t tail = out.rfind("],\"dtype\":\"");
  out.resize(tail + 1);
  out.erase(start, std::strlen("{\"data\":"));
}

} // namespace courier::serve::v2
