// courier-serve's KServe v2 routes. Like RestService.cpp, a file of the tool that touches
// cpp-httplib: handlers translate a request into ModuleStore calls and the answer back. Every
// handler's failure (a ServeError, with its /v1 code) becomes {"error": "<message>"} here,
// with the code's status and the code in X-Courier-Error-Code, so HttpService's wrapper never
// sees one and no /v1-shaped error leaves a v2 route.
#include "serve/KServeV2.h"
#include "serve/JsonReplies.h"
#include "serve/KServeRequest.h"
#include "serve/RequestBodies.h"

#include "transport/Wire.h"

#include "Version.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

namespace courier::serve {

namespace json = llvm::json;
namespace wire = courier::transport::wire;
using Clock = std::chrono::steady_clock;
using transport::HttpService;
using namespace courier::serve::v2;

namespace {

/// The header carrying a v2 error's /v1 code (docs/rest.md's table).
constexpr const char *kErrorCodeHeader = "X-Courier-Error-Code";
/// The most shared-memory regions registered at once.
constexpr size_t kMaxRegions = 64;

/// The status a v2 client expects for `code`: the protocol names 400 for a request that is
/// wrong, 404 for a model it does not find and 5xx for the server's failures; codes whose /v1
/// status is none of those (409, 422, 507) are mapped to the nearest one.
int v2Status(ErrorCode code) {
  switch (code) {
  case ErrorCode::ModuleExists:
  case ErrorCode::CompileFailed:
    return 400;
  case ErrorCode::ExecutorFailed:
  case ErrorCode::TooManyModules:
    return 500;
  default:
    return transport::httpStatus(code);
  }
}

void sendV2Error(httplib::Response &res, ErrorCode code, llvm::StringRef message) {
  res.set_header(kErrorCodeHeader, transport::errorCodeName(code).str());
  sendJson(res, v2Status(code), json::Object{{"error", utf8(message)}});
}

void reportV2Failure(httplib::Response &res, llvm::Error error) {
  llvm::handleAllErrors(
      std::move(error),
      [&](const ServeError &e) {
        std::string message = e.message;
        // A compile's diagnostics are its message here: the v2 error has no room for a list.
        for (const Diagnostic &d : e.diagnostics)
          if (d.severity == "error") {
            message += ": " + d.str();
            break;
          }
        sendV2Error(res, e.kind, message);
      },
      [&](const transport::CodedError &e) { sendV2Error(res, e.kind, e.message); },
      [&](const llvm::ErrorInfoBase &e) { sendV2Error(res, ErrorCode::Internal, e.message()); });
}

llvm::Error notFound(const llvm::Twine &message) {
  return makeServeError(ErrorCode::NotFound, message);
}

json::Array shapeJson(llvm::ArrayRef<int64_t> shape) {
  json::Array list;
  for (int64_t d : shape)
    list.push_back(d);
  return list;
}

json::Array tensorsMetadata(const std::vector<TensorSpec> &specs,
                            const std::vector<std::string> &names) {
  json::Array list;
  for (size_t i = 0; i < specs.size(); ++i)
    list.push_back(
        json::Object{{"name", names[i]},
                     {"datatype", datatypeName(specs[i].dtype)},
                     {"shape", specs[i].isScalar ? json::Array() : shapeJson(specs[i].shape)}});
  return list;
}

/// The entry model `{module}` calls: its main entry, or its only public one.
const EntrySignature *defaultEntry(const Module &module) {
  if (const EntrySignature *main = module.findEntry("main"))
    return main;
  return module.entries().size() == 1 ? &module.entries().front() : nullptr;
}

/// Every model a module is: `{module}` for its default entry, `{module}.{entry}` for others.
std::vector<std::pair<std::string, const EntrySignature *>> modelsOf(const std::string &name,
                                                                     const Module &module) {
  std::vector<std::pair<std::string, const EntrySignature *>> models;
  const EntrySignature *main = defaultEntry(module);
  for (const EntrySignature &entry : module.entries())
    models.emplace_back(&entry == main ? name : name + "." + entry.name, &entry);
  return models;
}

/// A region of a client's POSIX shared memory, opened read-write as the client named it. Read
/// and written through its descriptor (pread, pwrite) rather than mapped: the client may
/// shrink its object at any time, and a mapping would then fault the server where a short
/// read or write is an error.
struct Region {
  std::string name, key;
  uint64_t offset = 0, bytes = 0;
  int fd = -1;

  Region() = default;
  Region(const Region &) = delete;
  Region &operator=(const Region &) = delete;
  ~Region() {
    if (fd >= 0)
      ::close(fd);
  }

  /// Copies `size` bytes at region offset `at` into `out` (pread), or out of `in` (pwrite).
  llvm::Error transfer(uint64_t at, uint8_t *out, const uint8_t *in, uint64_t size) const {
    uint64_t done = 0;
    while (done < size) {
      off_t position = static_cast<off_t>(offset + at + done);
      size_t chunk = static_cast<size_t>(std::min<uint64_t>(size - done, 1 << 30));
      ssize_t n =
          out ? ::pread(fd, out + done, chunk, position) : ::pwrite(fd, in + done, chunk, position);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return makeServeError(ErrorCode::BadRequest,
                              "shared-memory region '" + name + "' (" + key +
                                  ") no longer holds its registered bytes" +
                                  (n < 0 ? ": " + std::string(std::strerror(errno)) : ""));
      done += static_cast<uint64_t>(n);
    }
    return llvm::Error::success();
  }
};

/// Where a request's binary inputs go, in the order the request listed them, which is the
/// order of their offsets in the body.
std::vector<wire::Destination> binaryDestinations(InferRequest &request) {
  std::vector<std::pair<uint64_t, size_t>> order;
  for (size_t i = 0; i < request.inputs.size(); ++i)
    if (request.sources[i].kind == InputSource::Kind::Binary)
      order.emplace_back(request.sources[i].tailOffset, i);
  llvm::sort(order);
  std::vector<wire::Destination> destinations;
  for (auto [offset, i] : order)
    destinations.push_back({reinterpret_cast<char *>(request.inputs[i].bytes.data()),
                            static_cast<uint64_t>(request.inputs[i].bytes.size())});
  return destinations;
}

/// The error of a body the server stopped reading: past its limit, or broken off. The
/// connection closes after the reply, the rest of the body unread.
llvm::Error unreadBody(httplib::Response &res, bool overLimit, uint64_t limit) {
  res.set_header("Connection", "close");
  if (overLimit || res.status == 413)
    return makeServeError(ErrorCode::PayloadTooLarge,
                          "request body exceeds the server's limit of " + llvm::Twine(limit) +
                              " bytes");
  return makeServeError(ErrorCode::BadRequest, "request body could not be read");
}

/// Whether the body carried the binary input bytes its JSON declares.
llvm::Error checkTailBytes(uint64_t declared, uint64_t got) {
  if (got == declared)
    return llvm::Error::success();
  return makeServeError(ErrorCode::BadRequest, "the JSON declares " + llvm::Twine(declared) +
                                                   " bytes of binary inputs, the body carries " +
                                                   llvm::Twine(got));
}

/// The error of a body with more bytes after its JSON than its binary inputs take.
llvm::Error excessTailBytes(uint64_t declared) {
  return makeServeError(ErrorCode::BadRequest,
                        "the body carries more bytes after its JSON than the binary inputs take (" +
                            llvm::Twine(declared) + ")");
}

/// Fills destinations one after another from a body's bytes as they arrive.
struct TailWriter {
  std::vector<wire::Destination> destinations;
  size_t current = 0;
  uint64_t filled = 0;

  /// Copies what fits of `data` (advancing it, and `size` down); false when the bytes
  /// outrun the destinations.
  bool write(const char *&data, size_t &size) {
    while (size > 0) {
      while (current < destinations.size() && filled == destinations[current].bytes) {
        ++current;
        filled = 0;
      }
      if (current == destinations.size())
        return false;
      size_t take =
          static_cast<size_t>(std::min<uint64_t>(size, destinations[current].bytes - filled));
      std::memcpy(destinations[current].data + filled, data, take);
      filled += take;
      data += take;
      size -= take;
    }
    return true;
  }
  uint64_t written() const {
    uint64_t got = 0;
    for (size_t i = 0; i < destinations.size(); ++i)
      got += i < current ? destinations[i].bytes : i == current ? filled : 0;
    return got;
  }
};

} // namespace

bool isKServePath(llvm::StringRef path) { return path == "/v2" || path.starts_with("/v2/"); }

void sendKServeError(httplib::Response &res, ErrorCode code, llvm::StringRef message) {
  sendV2Error(res, code, message);
}

struct KServeV2::Impl {
  KServeContext context;
  ModuleStore &store;

  /// Modules unloaded through the repository extension that a load can bring back: those
  /// read from a file, with the options they had.
  struct Unloaded {
    std::string origin;
    ModuleOptions options;
  };
  std::mutex unloadedMutex;
  std::map<std::string, Unloaded> unloaded;

  /// Registered regions, by name. A call holds the regions it uses until it returns.
  std::mutex regionsMutex;
  std::map<std::string, std::shared_ptr<Region>> regions;

  explicit Impl(KServeContext contextIn) : context(std::move(contextIn)), store(context.store) {}

  /// A model resolved to the module version that serves it and its entry.
  struct Model {
    std::string name;
    Pinned pinned;
    const EntrySignature *entry = nullptr;
  };
  llvm::Expected<Model> resolve(llvm::StringRef name, const std::string *version = nullptr);
  /// The model a route's path names: group 1, and group 2 when the route has a version.
  llvm::Expected<Model> resolve(const httplib::Request &req) {
    if (req.matches.size() > 2 && req.matches[2].matched) {
      std::string version = req.matches[2];
      return resolve(req.matches[1].str(), &version);
    }
    return resolve(req.matches[1].str());
  }

  llvm::Error live(const httplib::Request &, httplib::Response &res);
  llvm::Error ready(const httplib::Request &, httplib::Response &res);
  llvm::Error serverMetadata(const httplib::Request &, httplib::Response &res);
  llvm::Error modelMetadata(const httplib::Request &req, httplib::Response &res);
  llvm::Error modelReady(const httplib::Request &req, httplib::Response &res);
  llvm::Error infer(const httplib::Request &req, httplib::Response &res,
                    const httplib::ContentReader &reader);
  llvm::Error modelStats(const httplib::Request &req, httplib::Response &res);
  llvm::Error allStats(const httplib::Request &req, httplib::Response &res);
  llvm::Error repositoryIndex(const httplib::Request &req, httplib::Response &res);
  llvm::Error load(const httplib::Request &req, httplib::Response &res);
  llvm::Error unload(const httplib::Request &req, httplib::Response &res);
  llvm::Error shmStatus(const httplib::Request &req, httplib::Response &res);
  llvm::Error shmRegister(const httplib::Request &req, httplib::Response &res);
  llvm::Error shmUnregister(const httplib::Request &req, httplib::Response &res);
  llvm::Error unknownRoute(const httplib::Request &req, httplib::Response &res);

  /// Reads an infer body into `request`: all JSON, or with Inference-Header-Content-Length
  /// its JSON then the binary inputs' bytes, copied from the socket into their tensors.
  /// An infer request without a header-length header: its whole body JSON.
  llvm::Error readWholeInfer(const httplib::Request &req, httplib::Response &res,
                             const httplib::ContentReader &reader, const EntrySignature &entry,
                             InferRequest &request);
  llvm::Error readInfer(const httplib::Request &req, httplib::Response &res,
                        const httplib::ContentReader &reader, const EntrySignature &entry,
                        InferRequest &request);
  /// Copies the shared-memory inputs in from their regions; keeps the regions in `held`.
  llvm::Error fillSharedInputs(const EntrySignature &entry, InferRequest &request,
                               std::vector<std::shared_ptr<Region>> &held);
  llvm::Expected<std::shared_ptr<Region>> region(const SharedMemoryRef &ref,
                                                 const llvm::Twine &what);
  llvm::Error sendInferReply(httplib::Response &res, const Model &model,
                             const InferRequest &request, std::vector<Tensor> outputs);
  llvm::Error refuseWithoutSharedMemory() {
    if (context.allowSharedMemory)
      return llvm::Error::success();
    return makeServeError(ErrorCode::BadRequest,
                          "this server does not take tensors in shared memory: start it with "
                          "--allow-shared-memory");
  }
  json::Value statsJson(const Model &model, const EntryCallStats &stats);
};

KServeV2::KServeV2(KServeContext context) : impl(std::make_unique<Impl>(std::move(context))) {}

KServeV2::~KServeV2() = default;

llvm::Expected<KServeV2::Impl::Model> KServeV2::Impl::resolve(llvm::StringRef name,
                                                              const std::string *version) {
  std::optional<Model> model;
  if (store.holds(name)) {
    llvm::Expected<Pinned> pinned = store.pin(name);
    if (!pinned)
      return pinned.takeError();
    const EntrySignature *entry = defaultEntry(*pinned->module);
    if (!entry) {
      std::string known;
      for (const auto &[model, entry] : modelsOf(pinned->name, *pinned->module))
        known += (known.empty() ? "" : ", ") + model;
      return notFound("module '" + name +
                      "' has no main entry and more than one other: its models are " +
                      (known.empty() ? "none" : known));
    }
    model = Model{name.str(), std::move(*pinned), entry};
  } else {
    // {module}.{entry}: module names may hold dots too, so each split is tried, longest first.
    for (size_t dot = name.rfind('.'); dot != llvm::StringRef::npos && dot > 0;
         dot = name.substr(0, dot).rfind('.')) {
      llvm::StringRef module = name.substr(0, dot), entryName = name.substr(dot + 1);
      if (!store.holds(module))
        continue;
      llvm::Expected<Pinned> pinned = store.pin(module);
      if (!pinned)
        return pinned.takeError();
      llvm::Expected<const EntrySignature *> entry = store.entry(*pinned, entryName);
      if (!entry)
        return makeServeError(ErrorCode::NotFound,
                              "no model '" + name + "': " + llvm::toString(entry.takeError()));
      model = Model{name.str(), std::move(*pinned), *entry};
      break;
    }
    if (!model)
      return makeServeError(ErrorCode::UnknownModule,
                            "no model '" + name +
                                "' (GET /v1/modules lists the modules; a "
                                "module's entries are models {module}.{entry})");
  }
  if (version) {
    uint64_t asked = 0;
    if (llvm::StringRef(*version).getAsInteger(10, asked) || asked != model->pinned.version)
      return notFound("model '" + name + "' has no version '" + *version +
                      "': the server holds version " + llvm::Twine(model->pinned.version) +
                      " only");
  }
  return std::move(*model);
}

llvm::Error KServeV2::Impl::live(const httplib::Request &, httplib::Response &res) {
  sendJson(res, 200, json::Object{{"live", true}});
  return llvm::Error::success();
}

llvm::Error KServeV2::Impl::ready(const httplib::Request &, httplib::Response &res) {
  if (llvm::Error error = context.readiness())
    return error;
  sendJson(res, 200, json::Object{{"ready", true}});
  return llvm::Error::success();
}

llvm::Error KServeV2::Impl::serverMetadata(const httplib::Request &, httplib::Response &res) {
  json::Array extensions{"binary_tensor_data", "model_repository", "statistics"};
  if (context.allowSharedMemory)
    extensions.push_back("system_shared_memory");
  sendJson(res, 200,
           json::Object{{"name", "courier-serve"},
                        {"version", COURIER_VERSION},
                        {"extensions", std::move(extensions)}});
  return llvm::Error::success();
}

llvm::Error KServeV2::Impl::modelMetadata(const httplib::Request &req, httplib::Response &res) {
  llvm::Expected<Model> model = resolve(req);
  if (!model)
    return model.takeError();
  const EntrySignature &entry = *model->entry;
  sendJson(res, 200,
           json::Object{
               {"name", model->name},
               {"versions", json::Array{std::to_string(model->pinned.version)}},
               {"platform", "courier"},
               {"inputs", tensorsMetadata(entry.inputs, inputNames(entry))},
               {"outputs", tensorsMetadata(entry.outputs, outputNames(entry))},
           });
  return llvm::Error::success();
}

llvm::Error KServeV2::Impl::modelReady(const httplib::Request &req, httplib::Response &res) {
  llvm::Expected<Model> model = resolve(req);
  if (!model)
    return model.takeError();
  sendJson(res, 200, json::Object{{"name", model->name}, {"ready", true}});
  return llvm::Error::success();
}

llvm::Error KServeV2::Impl::readWholeInfer(const httplib::Request &req, httplib::Response &res,
                                           const httplib::ContentReader &reader,
                                           const EntrySignature &entry, InferRequest &request) {
  std::string body;
  if (llvm::Error error = context.service.readBody(req, res, reader, body))
    return frameError(std::move(error));
  llvm::Expected<InferRequest> read =
      readInferHeader(body, entry, context.maxBodyBytes, context.allowSharedMemory);
  if (!read)
    return read.takeError();
  if (read->tailBytes)
    return makeServeError(ErrorCode::BadRequest, "the request gives binary_data_size but no " +
                                                     llvm::Twine(kHeaderLengthHeader) +
                                                     " header saying where its JSON ends");
  request = std::move(*read);
  return llvm::Error::success();
}

llvm::Error KServeV2::Impl::readInfer(const httplib::Request &req, httplib::Response &res,
                                      const httplib::ContentReader &reader,
                                      const EntrySignature &entry, InferRequest &request) {
  std::optional<uint64_t> declared;
  if (req.has_header("Content-Length"))
    declared = transport::contentLength(req);
  if (!req.has_header(kHeaderLengthHeader))
    return readWholeInfer(req, res, reader, entry, request);
  llvm::Expected<uint64_t> headerLength =
      parseHeaderLength(req.get_header_value(kHeaderLengthHeader), declared);
  if (!headerLength) {
    transport::discardBody(reader, res);
    return headerLength.takeError();
  }
  // The JSON is collected, read, and the binary inputs' buffers allocated only then, once the
  // Content-Length (when there is one) is seen to carry them: then the rest of the body goes
  // from the socket straight into those buffers.
  uint64_t limit = context.maxBodyBytes, received = 0;
  std::string header;
  header.reserve(static_cast<size_t>(std::min<uint64_t>(*headerLength, 1 << 20)));
  bool inTail = false, overLimit = false;
  llvm::Error failure = llvm::Error::success();
  bool failed = false;
  TailWriter tail;
  auto fail = [&](llvm::Error error) {
    failure = std::move(error);
    failed = true;
  };
  auto startTail = [&] {
    inTail = true;
    llvm::Expected<InferRequest> read =
        readInferHeader(header, entry, context.maxBodyBytes, context.allowSharedMemory);
    if (!read)
      return fail(read.takeError());
    if (declared)
      if (llvm::Error error = checkTailBytes(read->tailBytes, *declared - *headerLength))
        return fail(std::move(error));
    request = std::move(*read);
    allocateBinaryInputs(request);
    tail.destinations = binaryDestinations(request);
  };
  if (*headerLength == 0)
    startTail();
  bool read = reader([&](const char *data, size_t size) {
    received += size;
    if (received > limit) {
      overLimit = true;
      return false;
    }
    while (size > 0 && !failed) {
      if (!inTail) {
        size_t take = static_cast<size_t>(std::min<uint64_t>(size, *headerLength - header.size()));
        header.append(data, take);
        data += take;
        size -= take;
        if (header.size() == *headerLength)
          startTail();
        continue;
      }
      if (!tail.write(data, size)) {
        fail(excessTailBytes(request.tailBytes));
        break;
      }
    }
    return true;
  });
  if (!read) {
    llvm::consumeError(std::move(failure));
    return unreadBody(res, overLimit, limit);
  }
  if (failed)
    return failure;
  if (!inTail)
    return makeServeError(ErrorCode::BadRequest,
                          llvm::Twine(kHeaderLengthHeader) + " is " + llvm::Twine(*headerLength) +
                              " bytes, the body only " + llvm::Twine(header.size()));
  return checkTailBytes(request.tailBytes, tail.written());
}

llvm::Expected<std::shared_ptr<Region>> KServeV2::Impl::region(const SharedMemoryRef &ref,
                                                               const llvm::Twine &what) {
  std::shared_ptr<Region> found;
  {
    std::lock_guard<std::mutex> lock(regionsMutex);
    auto it = regions.find(ref.region);
    if (it != regions.end())
      found = it->second;
  }
  if (!found)
    return makeServeError(ErrorCode::BadRequest,
                          what + ": no shared-memory region '" + ref.region + "' is registered");
  if (ref.offset > found->bytes || ref.bytes > found->bytes - ref.offset)
    return makeServeError(ErrorCode::BadRequest, what + ": " + llvm::Twine(ref.bytes) +
                                                     " bytes at offset " + llvm::Twine(ref.offset) +
                                                     " do not fit region '" + ref.region + "' of " +
                                                     llvm::Twine(found->bytes) + " bytes");
  return found;
}

llvm::Error KServeV2::Impl::fillSharedInputs(const EntrySignature &entry, InferRequest &request,
                                             std::vector<std::shared_ptr<Region>> &held) {
  std::vector<std::string> names;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const InputSource &source = request.sources[i];
    if (source.kind != InputSource::Kind::SharedMemory)
      continue;
    if (names.empty())
      names = inputNames(entry);
    llvm::Expected<std::shared_ptr<Region>> found =
        region(source.shared, "input '" + names[i] + "'");
    if (!found)
      return found.takeError();
    Tensor &input = request.inputs[i];
    input.bytes = TensorBytes::uninitialized(static_cast<size_t>(source.shared.bytes));
    if (llvm::Error error = (*found)->transfer(source.shared.offset, input.bytes.data(), nullptr,
                                               source.shared.bytes))
      return error;
    held.push_back(std::move(*found));
  }
  return llvm::Error::success();
}

llvm::Error KServeV2::Impl::sendInferReply(httplib::Response &res, const Model &model,
                                           const InferRequest &request,
                                           std::vector<Tensor> outputs) {
  std::vector<std::string> names = outputNames(*model.entry);
  std::string text = "{\"model_name\":" + dump(json::Value(model.name)) + ",\"model_version\":\"" +
                     std::to_string(model.pinned.version) + "\"";
  if (request.id)
    text += ",\"id\":" + dump(json::Value(utf8(*request.id)));
  text += ",\"outputs\":[";
  std::vector<size_t> binary;
  for (size_t k = 0; k < request.outputs.size(); ++k) {
    const OutputRequest &asked = request.outputs[k];
    const Tensor &tensor = outputs[asked.index];
    text += (k ? ",{" : "{");
    text += "\"name\":" + dump(json::Value(names[asked.index])) + ",\"datatype\":\"" +
            datatypeName(tensor.dtype).str() + "\",\"shape\":" + dump(shapeJson(tensor.shape));
    if (asked.shared) {
      llvm::Expected<std::shared_ptr<Region>> found =
          region(*asked.shared, "output '" + names[asked.index] + "'");
      if (!found)
        return found.takeError();
      if (asked.shared->bytes < tensor.bytes.size())
        return makeServeError(ErrorCode::BadRequest, "output '" + names[asked.index] + "' takes " +
                                                         llvm::Twine(tensor.bytes.size()) +
                                                         " bytes, shared_memory_byte_size gives " +
                                                         llvm::Twine(asked.shared->bytes));
      if (llvm::Error error = (*found)->transfer(asked.shared->offset, nullptr, tensor.bytes.data(),
                                                 tensor.bytes.size()))
        return error;
      text +=
          ",\"parameters\":{\"shared_memory_region\":" + dump(json::Value(asked.shared->region)) +
          ",\"shared_memory_byte_size\":" + std::to_string(tensor.bytes.size()) + "}}";
    } else if (asked.binary) {
      text += ",\"parameters\":{\"binary_data_size\":" + std::to_string(tensor.bytes.size()) + "}}";
      binary.push_back(asked.index);
    } else {
      text += ",\"data\":";
      appendJsonData(text, tensor);
      text += "}";
    }
  }
  text += "]}\n";
  res.status = 200;
  if (binary.empty()) {
    res.body = std::move(text);
    res.set_header("Content-Type", wire::kJsonContentType);
    return llvm::Error::success();
  }
  // The JSON (its newline included in the length), then the binary outputs' bytes, sent from
  // the output tensors in place: a FrameWriter's header line and packed tensors are exactly
  // that.
  res.set_header(kHeaderLengthHeader, std::to_string(text.size()));
  text.pop_back(); // FrameWriter ends the header with its own newline.
  sendTensorFrame(res, std::move(text), std::move(outputs), binary);
  res.headers.erase("Content-Type");
  res.set_header("Content-Type", wire::kBytesContentType);
  return llvm::Error::success();
}

llvm::Error KServeV2::Impl::infer(const httplib::Request &req, httplib::Response &res,
                                  const httplib::ContentReader &reader) {
  llvm::Expected<Model> model = resolve(req);
  if (!model) {
    transport::discardBody(reader, res);
    return model.takeError();
  }
  res.set_header("X-Courier-Module-Version", std::to_string(model->pinned.version));
  auto started = Clock::now();
  InferRequest request;
  std::vector<std::shared_ptr<Region>> held;
  llvm::Error error = readInfer(req, res, reader, *model->entry, request);
  if (!error)
    error = fillSharedInputs(*model->entry, request, held);
  if (error) {
    // A request the engine never saw is still a failed call of the model, as on /v1.
    return llvm::handleErrors(std::move(error), [&](std::unique_ptr<ServeError> e) -> llvm::Error {
      store.recordCallFailure(model->pinned, e->kind, e->message, model->entry->name);
      return llvm::Error(std::move(e));
    });
  }
  auto decoded = Clock::now();
  bool called = false;
  llvm::Expected<std::vector<Tensor>> outputs =
      context.call(model->pinned, *model->entry, request.inputs, called);
  if (!outputs)
    return outputs.takeError();
  request.inputs.clear();
  auto computed = Clock::now();
  if (llvm::Error error = sendInferReply(res, *model, request, std::move(*outputs)))
    return error;
  store.recordCallPhases(model->pinned, model->entry->name, decoded - started,
                         Clock::now() - computed);
  return llvm::Error::success();
}

json::Value KServeV2::Impl::statsJson(const Model &model, const EntryCallStats &s) {
  auto duration = [](uint64_t count, uint64_t ns) {
    return json::Object{{"count", static_cast<int64_t>(count)}, {"ns", static_cast<int64_t>(ns)}};
  };
  uint64_t lastMs =
      s.successes + s.failures == 0
          ? 0
          : static_cast<uint64_t>(
                std::chrono::duration_cast<std::chrono::milliseconds>(s.last.time_since_epoch())
                    .count());
  return json::Object{
      {"name", model.name},
      {"version", std::to_string(model.pinned.version)},
      {"last_inference", static_cast<int64_t>(lastMs)},
      {"inference_count", static_cast<int64_t>(s.successes)},
      {"execution_count", static_cast<int64_t>(s.successes)},
      {"inference_stats",
       json::Object{
           {"success",
            duration(s.successes, s.queueNanos + s.inputNanos + s.inferNanos + s.outputNanos)},
           {"fail", duration(s.failures, s.failureNanos)},
           {"queue", duration(s.successes, s.queueNanos)},
           {"compute_input", duration(s.successes, s.inputNanos)},
           {"compute_infer", duration(s.successes, s.inferNanos)},
           {"compute_output", duration(s.successes, s.outputNanos)},
           {"cache_hit", duration(0, 0)},
           {"cache_miss", duration(0, 0)},
       }},
      {"batch_stats", json::Array{}},
  };
}

llvm::Error KServeV2::Impl::modelStats(const httplib::Request &req, httplib::Response &res) {
  llvm::Expected<Model> model = resolve(req);
  if (!model)
    return model.takeError();
  llvm::Expected<std::map<std::string, EntryCallStats>> stats = store.callStats(model->pinned.name);
  if (!stats)
    return stats.takeError();
  auto it = stats->find(model->entry->name);
  sendJson(res, 200,
           json::Object{
               {"model_stats", json::Array{statsJson(*model, it == stats->end() ? EntryCallStats()
                                                                                : it->second)}}});
  return llvm::Error::success();
}

llvm::Error KServeV2::Impl::allStats(const httplib::Request &, httplib::Response &res) {
  json::Array list;
  for (const ModuleInfo &info : store.list()) {
    llvm::Expected<Pinned> pinned = store.pin(info.name);
    llvm::Expected<std::map<std::string, EntryCallStats>> stats = store.callStats(info.name);
    if (!pinned || !stats) {
      // Removed since it was listed.
      llvm::consumeError(pinned.takeError());
      llvm::consumeError(stats.takeError());
      continue;
    }
    for (const auto &[name, entry] : modelsOf(pinned->name, *pinned->module)) {
      auto it = stats->find(entry->name);
      list.push_back(statsJson(Model{name, *pinned, entry},
                               it == stats->end() ? EntryCallStats() : it->second));
    }
  }
  sendJson(res, 200, json::Object{{"model_stats", std::move(list)}});
  return llvm::Error::success();
}

llvm::Error KServeV2::Impl::repositoryIndex(const httplib::Request &req, httplib::Response &res) {
  bool readyOnly = false;
  if (!req.body.empty()) {
    llvm::Expected<json::Value> parsed = parseJSON(req.body, wire::kMaxJsonDepth);
    if (!parsed)
      return makeServeError(ErrorCode::BadRequest,
                            "the request is not JSON: " + llvm::toString(parsed.takeError()));
    const json::Object *object = parsed->getAsObject();
    if (!object)
      return makeServeError(ErrorCode::BadRequest, "the request must be a JSON object");
    if (const json::Value *ready = object->get("ready")) {
      if (!ready->getAsBoolean())
        return makeServeError(ErrorCode::BadRequest, "\"ready\" must be true or false");
      readyOnly = *ready->getAsBoolean();
    }
  }
  json::Array list;
  std::set<std::string> held;
  for (const ModuleInfo &info : store.list()) {
    held.insert(info.name);
    llvm::Expected<Pinned> pinned = store.pin(info.name);
    if (!pinned) {
      llvm::consumeError(pinned.takeError());
      continue;
    }
    for (const auto &[name, entry] : modelsOf(pinned->name, *pinned->module))
      list.push_back(json::Object{{"name", name},
                                  {"version", std::to_string(pinned->version)},
                                  {"state", "READY"},
                                  {"reason", ""}});
  }
  if (!readyOnly) {
    std::lock_guard<std::mutex> lock(unloadedMutex);
    for (const auto &[name, module] : unloaded)
      if (!held.count(name))
        list.push_back(
            json::Object{{"name", name}, {"state", "UNAVAILABLE"}, {"reason", "unloaded"}});
  }
  sendJson(res, 200, std::move(list));
  return llvm::Error::success();
}

llvm::Error KServeV2::Impl::load(const httplib::Request &req, httplib::Response &res) {
  if (context.service.draining())
    return makeServeError(ErrorCode::Draining, "courier-serve is draining before it exits");
  std::string name = req.matches[1];
  // Models are loaded and unloaded by module: {module}.{entry} names the module it is part of.
  std::string origin;
  std::optional<ModuleOptions> options;
  if (llvm::Expected<ModuleInfo> info = store.info(name)) {
    origin = info->origin;
    options = info->options;
  } else {
    llvm::consumeError(info.takeError());
    std::lock_guard<std::mutex> lock(unloadedMutex);
    auto it = unloaded.find(name);
    if (it == unloaded.end())
      return makeServeError(ErrorCode::UnknownModule,
                            "no module '" + name +
                                "' to load: the server loads only modules it holds or "
                                "unloaded, from their files; submit a new one with POST "
                                "/v1/modules");
    origin = it->second.origin;
    options = it->second.options;
  }
  if (origin == "api") {
    // Its source came in a request and is not kept: it is loaded when it is held.
    if (store.holds(name)) {
      res.status = 200;
      return llvm::Error::success();
    }
    return makeServeError(ErrorCode::UnknownModule,
                          "module '" + name +
                              "' came through the API and its source is not "
                              "kept: submit it again with POST /v1/modules");
  }
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file = llvm::MemoryBuffer::getFile(origin);
  if (!file)
    return makeServeError(ErrorCode::NotFound, "cannot read '" + origin + "', module '" + name +
                                                   "''s file: " + file.getError().message());
  llvm::Expected<LoadResult> loaded =
      store.load(name, (*file)->getBuffer(), options, ModuleStore::Mode::Upsert, origin);
  if (!loaded)
    return loaded.takeError();
  {
    std::lock_guard<std::mutex> lock(unloadedMutex);
    unloaded.erase(name);
  }
  res.status = 200;
  return llvm::Error::success();
}

llvm::Error KServeV2::Impl::unload(const httplib::Request &req, httplib::Response &res) {
  std::string name = req.matches[1];
  llvm::Expected<ModuleInfo> info = store.info(name);
  if (!info)
    return info.takeError();
  if (llvm::Error error = store.remove(name))
    return error;
  context.forget(name);
  if (info->origin != "api") {
    std::lock_guard<std::mutex> lock(unloadedMutex);
    unloaded[name] = Unloaded{info->origin, info->options};
  }
  res.status = 200;
  return llvm::Error::success();
}

llvm::Error KServeV2::Impl::shmStatus(const httplib::Request &req, httplib::Response &res) {
  if (llvm::Error error = refuseWithoutSharedMemory())
    return error;
  std::string only = req.matches.size() > 1 ? req.matches[1].str() : std::string();
  json::Array list;
  std::lock_guard<std::mutex> lock(regionsMutex);
  if (!only.empty() && !regions.count(only))
    return notFound("no shared-memory region '" + only + "' is registered");
  for (const auto &[name, region] : regions)
    if (only.empty() || name == only)
      list.push_back(json::Object{{"name", name},
                                  {"key", region->key},
                                  {"offset", static_cast<int64_t>(region->offset)},
                                  {"byte_size", static_cast<int64_t>(region->bytes)}});
  sendJson(res, 200, std::move(list));
  return llvm::Error::success();
}

llvm::Error KServeV2::Impl::shmRegister(const httplib::Request &req, httplib::Response &res) {
  if (llvm::Error error = refuseWithoutSharedMemory())
    return error;
  std::string name = req.matches[1];
  llvm::Expected<json::Value> parsed = parseJSON(req.body, wire::kMaxJsonDepth);
  if (!parsed)
    return makeServeError(ErrorCode::BadRequest,
                          "the request is not JSON: " + llvm::toString(parsed.takeError()));
  const json::Object *body = parsed->getAsObject();
  std::optional<llvm::StringRef> key = body ? body->getString("key") : std::nullopt;
  std::optional<uint64_t> bytes, offset = uint64_t(0);
  if (body && body->get("byte_size"))
    bytes = jsonCount(*body->get("byte_size"));
  if (body && body->get("offset"))
    offset = jsonCount(*body->get("offset"));
  if (!key || !bytes || !offset)
    return makeServeError(ErrorCode::BadRequest,
                          "expected {\"key\": string, \"offset\": integer, \"byte_size\": "
                          "integer}");
  // A POSIX shared-memory name: one leading slash, no other.
  if (key->size() < 2 || key->size() > 255 || key->front() != '/' ||
      key->drop_front().contains('/'))
    return makeServeError(ErrorCode::BadRequest,
                          "\"key\" must be a POSIX shared-memory name such as \"/input0\"");
  if (*bytes == 0 || *bytes > context.maxBodyBytes)
    return makeServeError(ErrorCode::BadRequest,
                          "\"byte_size\" must be from 1 to the server's body limit of " +
                              llvm::Twine(context.maxBodyBytes) + " bytes");
  {
    std::lock_guard<std::mutex> lock(regionsMutex);
    if (regions.count(name))
      return makeServeError(ErrorCode::BadRequest,
                            "shared-memory region '" + name +
                                "' is already registered: unregister it first");
    if (regions.size() >= kMaxRegions)
      return makeServeError(ErrorCode::BadRequest,
                            "the server holds its limit of " + llvm::Twine(kMaxRegions) +
                                " shared-memory regions: unregister one first");
  }
  int fd = ::shm_open(key->str().c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0)
    return makeServeError(ErrorCode::BadRequest,
                          "cannot open shared memory '" + *key + "': " + std::strerror(errno));
  struct stat status;
  bool fits = ::fstat(fd, &status) == 0 && S_ISREG(status.st_mode) && status.st_size >= 0 &&
              *offset <= static_cast<uint64_t>(status.st_size) &&
              *bytes <= static_cast<uint64_t>(status.st_size) - *offset;
  if (!fits) {
    ::close(fd);
    return makeServeError(ErrorCode::BadRequest, "shared memory '" + *key + "' of " +
                                                     llvm::Twine(status.st_size) +
                                                     " bytes does not hold " + llvm::Twine(*bytes) +
                                                     " bytes at offset " + llvm::Twine(*offset));
  }
  auto region = std::make_shared<Region>();
  region->fd = fd;
  region->name = name;
  region->key = key->str();
  region->offset = *offset;
  region->bytes = *bytes;
  std::lock_guard<std::mutex> lock(regionsMutex);
  if (!regions.emplace(name, std::move(region)).second)
    return makeServeError(ErrorCode::BadRequest,
                          "shared-memory region '" + name + "' is already registered");
  res.status = 200;
  return llvm::Error::success();
}

llvm::Error KServeV2::Impl::shmUnregister(const httplib::Request &req, httplib::Response &res) {
  if (llvm::Error error = refuseWithoutSharedMemory())
    return error;
  std::string only = req.matches.size() > 1 ? req.matches[1].str() : std::string();
  std::lock_guard<std::mutex> lock(regionsMutex);
  if (only.empty())
    regions.clear();
  else
    regions.erase(only); // Unregistering a region not registered is no error, as in Triton.
  res.status = 200;
  return llvm::Error::success();
}

llvm::Error KServeV2::Impl::unknownRoute(const httplib::Request &req, httplib::Response &) {
  return notFound("no route for " + req.method + " " + req.path);
}

std::vector<HttpService::Route> KServeV2::routes() {
  using Method = HttpService::Route::Method;
  // Module names, then '.' and an entry's name: the characters of both.
  const std::string model = R"(/v2/models/([A-Za-z0-9_][A-Za-z0-9_.$-]{0,320}))";
  const std::string version = R"((?:/versions/([0-9]{1,20}))?)";
  const std::string module = R"(/v2/repository/models/([A-Za-z0-9_][A-Za-z0-9_.-]{0,63}))";
  const std::string region = R"(/v2/systemsharedmemory/region/([A-Za-z0-9_.-]{1,64}))";
  Impl *self = impl.get();
  // Each handler's failure is answered here, in the v2 shape.
  auto to = [self](llvm::Error (Impl::*fn)(const httplib::Request &, httplib::Response &)) {
    return HttpService::Handler(
        [self, fn](const httplib::Request &req, httplib::Response &res) -> llvm::Error {
          if (llvm::Error error = (self->*fn)(req, res))
            reportV2Failure(res, std::move(error));
          return llvm::Error::success();
        });
  };
  auto toReader = [self](llvm::Error (Impl::*fn)(const httplib::Request &, httplib::Response &,
                                                 const httplib::ContentReader &)) {
    return HttpService::ReaderHandler(
        [self, fn](const httplib::Request &req, httplib::Response &res,
                   const httplib::ContentReader &reader) -> llvm::Error {
          if (llvm::Error error = (self->*fn)(req, res, reader))
            reportV2Failure(res, std::move(error));
          return llvm::Error::success();
        });
  };
  return {
      {Method::Get, "/v2/health/live", "GET /v2/health/live", to(&Impl::live)},
      {Method::Get, "/v2/health/ready", "GET /v2/health/ready", to(&Impl::ready)},
      {Method::Get, "/v2/?", "GET /v2", to(&Impl::serverMetadata)},
      {Method::Get, "/v2/models/stats", "GET /v2/models/stats", to(&Impl::allStats)},
      {Method::Get, model + version, "GET /v2/models/{name}", to(&Impl::modelMetadata)},
      {Method::Get, model + version + "/ready", "GET /v2/models/{name}/ready",
       to(&Impl::modelReady)},
      {Method::Get, model + version + "/stats", "GET /v2/models/{name}/stats",
       to(&Impl::modelStats)},
      {Method::Post, model + version + "/infer", "POST /v2/models/{name}/infer",
       toReader(&Impl::infer)},
      {Method::Post, "/v2/repository/index", "POST /v2/repository/index",
       to(&Impl::repositoryIndex)},
      {Method::Post, module + "/load", "POST /v2/repository/models/{name}/load", to(&Impl::load)},
      {Method::Post, module + "/unload", "POST /v2/repository/models/{name}/unload",
       to(&Impl::unload)},
      {Method::Get, "/v2/systemsharedmemory/status", "GET /v2/systemsharedmemory/status",
       to(&Impl::shmStatus)},
      {Method::Get, region + "/status", "GET /v2/systemsharedmemory/region/{region}/status",
       to(&Impl::shmStatus)},
      {Method::Post, region + "/register", "POST /v2/systemsharedmemory/region/{region}/register",
       to(&Impl::shmRegister)},
      {Method::Post, "/v2/systemsharedmemory/unregister", "POST /v2/systemsharedmemory/unregister",
       to(&Impl::shmUnregister)},
      {Method::Post, region + "/unregister",
       "POST /v2/systemsharedmemory/region/{region}/unregister", to(&Impl::shmUnregister)},
      {Method::Get, "/v2/.*", "GET /v2/{unknown}", to(&Impl::unknownRoute)},
      {Method::Post, "/v2/.*", "POST /v2/{unknown}", to(&Impl::unknownRoute)},
  };
}

} // namespace courier::serve
