// courier-serve's KServe v2 routes against real processes, through a small client of the
// protocol written here (JSON tensors, and Triton's binary tensor data extension framed as
// its client frames it): every route and extension, every datatype both ways, the errors,
// versions across reloads, and reloads under a loop of infers.
#include "tests/serve/RestClient.h"
#include "tests/serve/ServeProcess.h"
#include "tests/support/RawConnection.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

using namespace courier::testing;

namespace {

// -- The client ---------------------------------------------------------------------------

/// A tensor as the protocol carries it: its bytes are those of a packed row-major buffer.
struct V2Tensor {
  std::string name, datatype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

/// An infer reply: its JSON, and the binary outputs cut from the tail by their sizes.
struct InferReply {
  int status = 0;
  json body;
  std::string raw;
  httplib::Headers headers;
  std::map<std::string, std::vector<uint8_t>> binary;

  std::string error() const {
    return body.is_object() && body.contains("error") && body["error"].is_string()
               ? body["error"].get<std::string>()
               : "<no v2 error in: " + raw + ">";
  }
};

/// POSTs an infer request: `header` as the JSON, each of `binary` after it (binary_data_size
/// must already be in `header`), with Inference-Header-Content-Length when there are any.
InferReply infer(httplib::Client &http, const std::string &path, const json &header,
                 const std::vector<std::vector<uint8_t>> &binary = {}) {
  std::string body = header.dump();
  httplib::Headers headers;
  if (!binary.empty()) {
    headers.emplace("Inference-Header-Content-Length", std::to_string(body.size()));
    for (const std::vector<uint8_t> &bytes : binary)
      body.append(reinterpret_cast<const char *>(bytes.data()), bytes.size());
  }
  httplib::Result res = http.Post(path.c_str(), headers, body,
                                  binary.empty() ? "application/json" : "application/octet-stream");
  REQUIRE(res);
  InferReply reply{res->status, json(), res->body, res->headers, {}};
  size_t jsonLength = res->body.size();
  if (res->has_header("Inference-Header-Content-Length"))
    jsonLength = std::stoull(res->get_header_value("Inference-Header-Content-Length"));
  REQUIRE(jsonLength <= res->body.size());
  reply.body = json::parse(res->body.substr(0, jsonLength), nullptr, false);
  size_t offset = jsonLength;
  if (reply.body.is_object() && reply.body.contains("outputs"))
    for (const json &output : reply.body["outputs"])
      if (output.contains("parameters") && output["parameters"].contains("binary_data_size")) {
        size_t size = output["parameters"]["binary_data_size"];
        REQUIRE(offset + size <= res->body.size());
        reply.binary[output["name"]] =
            std::vector<uint8_t>(res->body.begin() + static_cast<long>(offset),
                                 res->body.begin() + static_cast<long>(offset + size));
        offset += size;
      }
  CHECK(offset == res->body.size());
  return reply;
}

/// The JSON of an input carried as binary data.
json binaryInput(const V2Tensor &t) {
  return {{"name", t.name},
          {"datatype", t.datatype},
          {"shape", t.shape},
          {"parameters", {{"binary_data_size", t.bytes.size()}}}};
}

std::string v2Error(const Reply &reply) {
  return reply.body.is_object() && reply.body.contains("error") && reply.body["error"].is_string()
             ? reply.body["error"].get<std::string>()
             : "<no v2 error in: " + reply.raw + ">";
}

/// Polls /v2/health/ready until it answers 200 (or 20 s pass): the watched modules loaded.
void awaitReady(httplib::Client &http) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (get(http, "/v2/health/ready").status != 200 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// -- Element types ------------------------------------------------------------------------

/// One datatype: its MLIR spelling, the signless type its kernel computes on, and what the
/// kernel does (adds a value to itself, adds one, or flips a boolean).
struct TypeCase {
  const char *datatype, *mlir, *kernel;
  size_t size;
};
const TypeCase kTypes[] = {
    {"FP16", "f16", "f16", 2},    {"FP32", "f32", "f32", 4},    {"FP64", "f64", "f64", 8},
    {"BF16", "bf16", "bf16", 2},  {"BOOL", "i1", "i1", 1},      {"INT8", "i8", "i8", 1},
    {"INT16", "i16", "i16", 2},   {"INT32", "i32", "i32", 4},   {"INT64", "i64", "i64", 8},
    {"UINT8", "ui8", "i8", 1},    {"UINT16", "ui16", "i16", 2}, {"UINT32", "ui32", "i32", 4},
    {"UINT64", "ui64", "i64", 8},
};

bool isFloat(const TypeCase &t) { return t.mlir[0] == 'f' || t.mlir[0] == 'b'; }

/// An entry `{mlir}` per datatype on tensor<?x2x{type}>, its kernel on the executor in
/// process: floats doubled, integers plus one, booleans flipped.
std::string allTypesModule() {
  std::ostringstream host, dev;
  for (const TypeCase &t : kTypes) {
    std::string type = std::string("tensor<?x2x") + t.mlir + ">";
    std::string ktype = std::string("tensor<?x2x") + t.kernel + ">";
    host << "  func.func public @" << t.mlir << "(%x: " << type << ") -> " << type << " {\n"
         << "    %y = catalyst.launch_kernel @dev::@" << t.mlir << "(%x) : (" << type << ") -> "
         << type << "\n    return %y : " << type << "\n  }\n";
    dev << "    func.func public @" << t.mlir << "(%x: " << ktype << ") -> " << ktype << " {\n";
    if (isFloat(t)) {
      dev << "      %y = arith.addf %x, %x : " << ktype << "\n";
    } else {
      dev << "      %c0 = arith.constant 0 : index\n"
          << "      %n = tensor.dim %x, %c0 : " << ktype << "\n"
          << "      %one = arith.constant "
          << (std::string(t.kernel) == "i1" ? std::string("true") : std::string("1 : ") + t.kernel)
          << "\n"
          << "      %e = tensor.empty(%n) : " << ktype << "\n"
          << "      %ones = linalg.fill ins(%one : " << t.kernel << ") outs(%e : " << ktype
          << ") -> " << ktype << "\n"
          << "      %y = " << (std::string(t.kernel) == "i1" ? "arith.xori" : "arith.addi")
          << " %x, %ones : " << ktype << "\n";
    }
    dev << "      return %y : " << ktype << "\n    }\n";
  }
  return "module @types {\n" + host.str() +
         "  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "
         "\"local\"}} {\n" +
         dev.str() + "  }\n}\n";
}

/// Six values of `t` (a 3x2 tensor) that cover its range: extremes, negatives where it has
/// them, fractions for floats.
json sampleValues(const TypeCase &t) {
  std::string name = t.datatype;
  if (name == "BOOL")
    return json::array({true, false, false, true, true, false});
  if (name == "FP16" || name == "BF16")
    return json::array({1.5, -2.25, 0.0, 1024.0, -0.125, 3.0});
  if (name == "FP32")
    return json::array({0.1f, -1.7e38f, 1e-38f, 2.5f, -0.5f, 16777216.0f});
  if (name == "FP64")
    return json::array({0.1, -8e307, 5e-324, 2.5, 1.0 / 3, 9007199254740992.0});
  if (name[0] == 'U') {
    uint64_t max = name == "UINT8"    ? 0xff
                   : name == "UINT16" ? 0xffff
                   : name == "UINT32" ? 0xffffffffull
                                      : std::numeric_limits<uint64_t>::max();
    return json::array({uint64_t(0), uint64_t(1), max - 1, max / 2, uint64_t(7), uint64_t(200)});
  }
  int bits = static_cast<int>(t.size) * 8;
  int64_t max = bits == 64 ? std::numeric_limits<int64_t>::max() : (int64_t(1) << (bits - 1)) - 1;
  return json::array({int64_t(0), -max - 1, max - 1, int64_t(-1), int64_t(5), int64_t(-100)});
}

/// Little-endian bytes of `values` as elements of `t`.
uint16_t halfBits(double value, bool bf16) {
  float f = static_cast<float>(value);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (bf16)
    return static_cast<uint16_t>(bits >> 16); // The samples are exact in bf16.
  // The samples are exact in f16: sign, rebias the exponent, keep the top 10 mantissa bits.
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  int exponent = static_cast<int>((bits >> 23) & 0xff);
  if (exponent == 0)
    return sign;
  return static_cast<uint16_t>(sign | ((exponent - 127 + 15) << 10) | ((bits >> 13) & 0x3ff));
}

std::vector<uint8_t> bytesOf(const TypeCase &t, const json &values) {
  std::vector<uint8_t> bytes(values.size() * t.size);
  std::string name = t.datatype;
  for (size_t i = 0; i < values.size(); ++i) {
    uint8_t *at = bytes.data() + i * t.size;
    if (name == "BOOL") {
      at[0] = values[i].get<bool>() ? 1 : 0;
    } else if (name == "FP16" || name == "BF16") {
      uint16_t h = halfBits(values[i].get<double>(), name == "BF16");
      std::memcpy(at, &h, 2);
    } else if (name == "FP32") {
      float f = values[i].get<float>();
      std::memcpy(at, &f, 4);
    } else if (name == "FP64") {
      double d = values[i].get<double>();
      std::memcpy(at, &d, 8);
    } else if (name[0] == 'U') {
      uint64_t v = values[i].get<uint64_t>();
      std::memcpy(at, &v, t.size);
    } else {
      int64_t v = values[i].get<int64_t>();
      std::memcpy(at, &v, t.size);
    }
  }
  return bytes;
}

/// What the kernel of `t` makes of `values`, as bytes.
std::vector<uint8_t> expectedBytes(const TypeCase &t, const json &values) {
  json out = json::array();
  std::string name = t.datatype;
  for (const json &v : values) {
    if (name == "BOOL")
      out.push_back(!v.get<bool>());
    else if (name == "FP32")
      out.push_back(v.get<float>() + v.get<float>());
    else if (isFloat(t))
      out.push_back(v.get<double>() * 2);
    else if (name[0] == 'U')
      out.push_back(v.get<uint64_t>() + 1);
    else
      out.push_back(v.get<int64_t>() + 1);
  }
  return bytesOf(t, out);
}

/// `values` nested as rows of two.
json nested(const json &values) {
  json rows = json::array();
  for (size_t i = 0; i < values.size(); i += 2)
    rows.push_back(json::array({values[i], values[i + 1]}));
  return rows;
}

// -- Modules ------------------------------------------------------------------------------

/// main names its tensors; scale does not; both take any length.
const std::string kNamed = R"mlir(
module {
  func.func public @main(%x: tensor<?xf32> {courier.name = "x"}, %y: tensor<?xf32>)
      -> (tensor<?xf32> {courier.name = "sum"}, tensor<?xf32>) {
    %s = arith.addf %x, %y : tensor<?xf32>
    %d = arith.subf %x, %y : tensor<?xf32>
    return %s, %d : tensor<?xf32>, tensor<?xf32>
  }
  func.func public @scale(%x: tensor<2x2xf64>, %k: f64) -> tensor<2x2xf64> {
    %e = tensor.empty() : tensor<2x2xf64>
    %b = linalg.fill ins(%k : f64) outs(%e : tensor<2x2xf64>) -> tensor<2x2xf64>
    %y = arith.mulf %x, %b : tensor<2x2xf64>
    return %y : tensor<2x2xf64>
  }
}
)mlir";

/// Two entries, neither main.
const std::string kNoMain = R"mlir(
module {
  func.func public @a(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = arith.addf %x, %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func public @b(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = arith.mulf %x, %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
}
)mlir";

/// x * factor, on four f64s.
std::string scaled(int factor) {
  return "module {\n  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {\n"
         "    %f = arith.constant dense<" +
         std::to_string(factor) +
         ".0> : tensor<4xf64>\n"
         "    %y = arith.mulf %x, %f : tensor<4xf64>\n    return %y : tensor<4xf64>\n  }\n}\n";
}

const json kFourOnes = {
    {"inputs",
     {{{"name", "input0"}, {"datatype", "FP64"}, {"shape", {4}}, {"data", {1, 1, 1, 1}}}}}};

} // namespace

TEST_CASE("v2 health, readiness and server metadata answer as the protocol says", "[serve][v2]") {
  ServeProcess serve;
  auto http = serve.client();
  Reply live = get(*http, "/v2/health/live");
  CHECK(live.status == 200);
  Reply ready = get(*http, "/v2/health/ready");
  CHECK(ready.status == 200);
  Reply server = get(*http, "/v2");
  REQUIRE(server.status == 200);
  CHECK(server.body["name"] == "courier-serve");
  CHECK(server.body["version"].is_string());
  // Shared memory is off unless asked for.
  CHECK(server.body["extensions"] ==
        json::array({"binary_tensor_data", "model_repository", "statistics"}));

  Reply unknown = get(*http, "/v2/nothing/here");
  CHECK(unknown.status == 404);
  CHECK(v2Error(unknown) == "no route for GET /v2/nothing/here");
  CHECK(unknown.headers.find("X-Courier-Error-Code")->second == "not_found");
}

TEST_CASE("v2 model metadata names a module's entries as models, their tensors and versions",
          "[serve][v2]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "named", kNamed);
  requireCreated(*http, "pair", kNoMain);

  Reply main = get(*http, "/v2/models/named");
  INFO(main.raw);
  REQUIRE(main.status == 200);
  CHECK(main.body["name"] == "named");
  CHECK(main.body["versions"] == json::array({"1"}));
  CHECK(main.body["platform"] == "courier");
  CHECK(main.body["inputs"] == json::parse(R"([
      {"name": "x", "datatype": "FP32", "shape": [-1]},
      {"name": "input1", "datatype": "FP32", "shape": [-1]}])"));
  CHECK(main.body["outputs"] == json::parse(R"([
      {"name": "sum", "datatype": "FP32", "shape": [-1]},
      {"name": "output1", "datatype": "FP32", "shape": [-1]}])"));
  // {module}.{entry} for the others; main by its own name too.
  Reply scale = get(*http, "/v2/models/named.scale");
  INFO(scale.raw);
  REQUIRE(scale.status == 200);
  CHECK(scale.body["inputs"] == json::parse(R"([
      {"name": "input0", "datatype": "FP64", "shape": [2, 2]},
      {"name": "input1", "datatype": "FP64", "shape": []}])"));
  CHECK(get(*http, "/v2/models/named.main").body["inputs"] == main.body["inputs"]);
  CHECK(get(*http, "/v2/models/named/versions/1").status == 200);
  CHECK(get(*http, "/v2/models/named/ready").status == 200);
  CHECK(get(*http, "/v2/models/named.scale/versions/1/ready").status == 200);

  // A module without main and with more than one entry is no model by its own name.
  Reply pair = get(*http, "/v2/models/pair");
  CHECK(pair.status == 404);
  CHECK(v2Error(pair) ==
        "module 'pair' has no main entry and more than one other: its models are pair.a, pair.b");
  CHECK(get(*http, "/v2/models/pair.b").status == 200);

  Reply none = get(*http, "/v2/models/absent");
  CHECK(none.status == 404);
  CHECK(v2Error(none).find("no model 'absent'") == 0);
  CHECK(none.headers.find("X-Courier-Error-Code")->second == "unknown_module");
  Reply noEntry = get(*http, "/v2/models/named.nope/ready");
  CHECK(noEntry.status == 404);
  CHECK(v2Error(noEntry).find("has no entry 'nope' (entries: main, scale)") != std::string::npos);
  Reply badVersion = get(*http, "/v2/models/named/versions/7");
  CHECK(badVersion.status == 404);
  CHECK(v2Error(badVersion) == "model 'named' has no version '7': the server holds version 1 only");
}

TEST_CASE("v2 JSON infer takes flat and nested data, echoes the id, returns what is asked",
          "[serve][v2]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "named", kNamed);

  json request = json::parse(R"({
      "id": "request-7",
      "inputs": [
        {"name": "input1", "datatype": "FP32", "shape": [3], "data": [1, 2, 3]},
        {"name": "x", "datatype": "FP32", "shape": [3], "data": [10.5, 20, 30]}]})");
  InferReply all = infer(*http, "/v2/models/named/infer", request);
  INFO(all.raw);
  REQUIRE(all.status == 200);
  CHECK(all.body["model_name"] == "named");
  CHECK(all.body["model_version"] == "1");
  CHECK(all.body["id"] == "request-7");
  CHECK(all.body["outputs"] == json::parse(R"([
      {"name": "sum", "datatype": "FP32", "shape": [3], "data": [11.5, 22, 33]},
      {"name": "output1", "datatype": "FP32", "shape": [3], "data": [9.5, 18, 27]}])"));

  // Only the outputs asked for, in the order asked.
  request["outputs"] = json::parse(R"([{"name": "output1"}])");
  InferReply one = infer(*http, "/v2/models/named/infer", request);
  REQUIRE(one.status == 200);
  REQUIRE(one.body["outputs"].size() == 1);
  CHECK(one.body["outputs"][0]["name"] == "output1");

  // Nested data, and a scalar given as shape [] or [1].
  json scale = json::parse(R"({"inputs": [
      {"name": "input0", "datatype": "FP64", "shape": [2, 2], "data": [[1, 2], [3, 4]]},
      {"name": "input1", "datatype": "FP64", "shape": [], "data": [0.5]}]})");
  InferReply scaledReply = infer(*http, "/v2/models/named.scale/versions/1/infer", scale);
  INFO(scaledReply.raw);
  REQUIRE(scaledReply.status == 200);
  CHECK(scaledReply.body["outputs"][0]["shape"] == json::array({2, 2}));
  CHECK(scaledReply.body["outputs"][0]["data"] == json::array({0.5, 1, 1.5, 2}));
  scale["inputs"][1]["shape"] = {1};
  CHECK(infer(*http, "/v2/models/named.scale/infer", scale).status == 200);
}

TEST_CASE("every datatype goes in and out as JSON and as binary data, bit for bit the same",
          "[serve][v2][dtypes]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "types", allTypesModule());
  for (const TypeCase &t : kTypes) {
    INFO(t.datatype);
    std::string path = std::string("/v2/models/types.") + t.mlir + "/infer";
    json values = sampleValues(t);
    std::vector<uint8_t> expected = expectedBytes(t, values);
    V2Tensor input{"input0", t.datatype, {3, 2}, bytesOf(t, values)};

    Reply meta = get(*http, std::string("/v2/models/types.") + t.mlir);
    CHECK(meta.body["inputs"][0]["datatype"] == t.datatype);
    CHECK(meta.body["inputs"][0]["shape"] == json::array({-1, 2}));

    // JSON in (flat, then nested), binary out.
    json flat = {
        {"inputs",
         {{{"name", "input0"}, {"datatype", t.datatype}, {"shape", {3, 2}}, {"data", values}}}},
        {"parameters", {{"binary_data_output", true}}}};
    InferReply jsonIn = infer(*http, path, flat);
    INFO(jsonIn.raw.substr(0, 400));
    REQUIRE(jsonIn.status == 200);
    CHECK(jsonIn.headers.find("Content-Type")->second == "application/octet-stream");
    CHECK(jsonIn.body["outputs"][0]["datatype"] == t.datatype);
    CHECK(jsonIn.body["outputs"][0]["shape"] == json::array({3, 2}));
    CHECK(jsonIn.binary["output0"] == expected);
    json nestedRequest = flat;
    nestedRequest["inputs"][0]["data"] = nested(values);
    CHECK(infer(*http, path, nestedRequest).binary["output0"] == expected);

    // Binary in, JSON out: the numbers read back as the same bits.
    json header = {{"inputs", {binaryInput(input)}}};
    InferReply binaryIn = infer(*http, path, header, {input.bytes});
    INFO(binaryIn.raw.substr(0, 400));
    REQUIRE(binaryIn.status == 200);
    const json &data = binaryIn.body["outputs"][0]["data"];
    json readBack = json::array();
    for (const json &v : data)
      readBack.push_back(std::string(t.datatype) == "BOOL" ? json(v != 0 && v != false) : v);
    CHECK(bytesOf(t, readBack) == expected);

    // Binary in, binary out, asked for per output.
    header["outputs"] = {{{"name", "output0"}, {"parameters", {{"binary_data", true}}}}};
    CHECK(infer(*http, path, header, {input.bytes}).binary["output0"] == expected);
  }
}

TEST_CASE("wrong v2 requests are each a clear error in the protocol's shape, and the server "
          "keeps serving",
          "[serve][v2]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "named", kNamed);
  const std::string path = "/v2/models/named.scale/infer";
  json good = json::parse(R"({"inputs": [
      {"name": "input0", "datatype": "FP64", "shape": [2, 2], "data": [1, 2, 3, 4]},
      {"name": "input1", "datatype": "FP64", "shape": [], "data": [2]}]})");
  struct Case {
    const char *what;
    std::function<void(json &)> change;
    int status;
    const char *message;
  };
  std::vector<Case> cases = {
      {"an unknown input name", [](json &r) { r["inputs"][0]["name"] = "nope"; }, 400,
       "the model has no input 'nope' (inputs: input0, input1)"},
      {"an input twice", [](json &r) { r["inputs"][1] = r["inputs"][0]; }, 400,
       "input 'input0' is given twice"},
      {"a missing input", [](json &r) { r["inputs"].erase(1); }, 400,
       "input 'input1' is missing (the model takes 2)"},
      {"a wrong datatype", [](json &r) { r["inputs"][0]["datatype"] = "FP32"; }, 400,
       "input 'input0' is FP64, the request sends FP32"},
      {"an unknown datatype", [](json &r) { r["inputs"][0]["datatype"] = "BYTES"; }, 400,
       "input 'input0': unknown datatype 'BYTES' (Courier takes FP16, FP32, FP64, BF16, BOOL, "
       "INT8 to INT64 and UINT8 to UINT64)"},
      {"a wrong shape", [](json &r) { r["inputs"][0]["shape"] = {4}; }, 400,
       "input 'input0' has shape [2, 2], the request sends [4]"},
      {"a scalar's wrong shape", [](json &r) { r["inputs"][1]["shape"] = {2}; }, 400,
       "input 'input1' has shape [] (a scalar; [1] is taken too), the request sends [2]"},
      {"too little data",
       [](json &r) {
         r["inputs"][0]["data"] = {1, 2, 3};
       },
       400, "input 'input0': \"shape\" holds 4 elements but \"data\" has 3"},
      {"a string for a number", [](json &r) { r["inputs"][0]["data"][2] = "x"; }, 400, nullptr},
      {"no data", [](json &r) { r["inputs"][0].erase("data"); }, 400,
       "input 'input0' has no data: give \"data\", or the binary_data_size parameter with its "
       "bytes after the JSON"},
      {"an unknown output",
       [](json &r) {
         r["outputs"] = {{{"name", "out"}}};
       },
       400, "the model has no output 'out' (outputs: output0)"},
      {"a non-string id", [](json &r) { r["id"] = 5; }, 400, "\"id\" must be a string"},
      {"binary data without its header",
       [](json &r) {
         r["inputs"][0].erase("data");
         r["inputs"][0]["parameters"] = {{"binary_data_size", 32}};
       },
       400,
       "the request gives binary_data_size but no Inference-Header-Content-Length header saying "
       "where its JSON ends"},
      {"shared memory on a server without it",
       [](json &r) {
         r["inputs"][0].erase("data");
         r["inputs"][0]["parameters"] = {{"shared_memory_region", "r"},
                                         {"shared_memory_byte_size", 32}};
       },
       400, nullptr},
  };
  for (const Case &c : cases) {
    INFO(c.what);
    json request = good;
    c.change(request);
    InferReply reply = infer(*http, path, request);
    INFO(reply.raw);
    CHECK(reply.status == c.status);
    REQUIRE(reply.body.is_object());
    REQUIRE(reply.body["error"].is_string());
    if (c.message)
      CHECK(reply.error() == c.message);
    CHECK(reply.headers.count("X-Courier-Error-Code") == 1);
  }
  Reply notJson = toReply(http->Post(path.c_str(), "{", "application/json"));
  CHECK(notJson.status == 400);
  CHECK(v2Error(notJson).find("the request is not JSON") == 0);

  // Binary data that does not add up.
  std::vector<uint8_t> four(32, 0), scalar(8, 0);
  json binary = json::parse(R"({"inputs": [
      {"name": "input0", "datatype": "FP64", "shape": [2, 2],
       "parameters": {"binary_data_size": 32}},
      {"name": "input1", "datatype": "FP64", "shape": [],
       "parameters": {"binary_data_size": 8}}]})");
  CHECK(infer(*http, path, binary, {four, scalar}).status == 200);
  InferReply shortTail = infer(*http, path, binary, {four});
  CHECK(shortTail.status == 400);
  CHECK(shortTail.error() == "the JSON declares 40 bytes of binary inputs, the body carries 32");
  InferReply longTail = infer(*http, path, binary, {four, scalar, scalar});
  CHECK(longTail.status == 400);
  json wrongSize = binary;
  wrongSize["inputs"][0]["parameters"]["binary_data_size"] = 24;
  InferReply sized = infer(*http, path, wrongSize, {std::vector<uint8_t>(24), scalar});
  CHECK(sized.status == 400);
  CHECK(sized.error() ==
        "input 'input0': binary_data_size is 24 bytes, shape [2, 2] of FP64 takes 32");
  httplib::Headers overlong = {{"Inference-Header-Content-Length", "999"}};
  Reply beyond = toReply(http->Post(path.c_str(), overlong, "{}", "application/octet-stream"));
  CHECK(beyond.status == 400);
  CHECK(v2Error(beyond) == "Inference-Header-Content-Length is 999 bytes, the body only 2");
  httplib::Headers garbled = {{"Inference-Header-Content-Length", "ten"}};
  CHECK(toReply(http->Post(path.c_str(), garbled, "{}", "application/octet-stream")).status == 400);

  // Unknown models on every model route.
  for (const char *route : {"/v2/models/ghost", "/v2/models/ghost/ready", "/v2/models/ghost/stats"})
    CHECK(get(*http, route).status == 404);
  InferReply ghost = infer(*http, "/v2/models/ghost/infer", good);
  CHECK(ghost.status == 404);
  CHECK(ghost.error().find("no model 'ghost'") == 0);

  // Still serving, and the refusals counted against the model.
  CHECK(infer(*http, path, good).status == 200);
}

TEST_CASE("a v2 version the server no longer holds is a 404 once the module is replaced",
          "[serve][v2]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "m", scaled(2));
  InferReply first = infer(*http, "/v2/models/m/versions/1/infer", kFourOnes);
  REQUIRE(first.status == 200);
  CHECK(first.body["outputs"][0]["data"] == json::array({2, 2, 2, 2}));
  Reply replaced = put(*http, "/v1/modules/m", json({{"mlir", scaled(3)}}).dump());
  REQUIRE(replaced.status == 200);

  InferReply gone = infer(*http, "/v2/models/m/versions/1/infer", kFourOnes);
  CHECK(gone.status == 404);
  CHECK(gone.error() == "model 'm' has no version '1': the server holds version 2 only");
  CHECK(get(*http, "/v2/models/m/versions/1").status == 404);
  CHECK(get(*http, "/v2/models/m/versions/2/ready").status == 200);
  InferReply second = infer(*http, "/v2/models/m/versions/2/infer", kFourOnes);
  CHECK(second.body["model_version"] == "2");
  CHECK(second.body["outputs"][0]["data"] == json::array({3, 3, 3, 3}));
}

TEST_CASE("replacing a module during a loop of v2 infers fails none of them", "[serve][v2]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "m", scaled(1));
  auto connect = [&] { return serve.client(); };
  std::atomic<bool> done{false};
  std::atomic<int> calls{0}, failures{0}, wrong{0};
  std::string firstFailure;
  std::mutex mutex;
  std::vector<std::thread> clients;
  for (int c = 0; c < 3; ++c)
    clients.emplace_back([&] {
      auto client = connect();
      while (!done) {
        httplib::Result res =
            client->Post("/v2/models/m/infer", kFourOnes.dump(), "application/json");
        calls++;
        if (!res || res->status != 200) {
          std::lock_guard<std::mutex> lock(mutex);
          if (firstFailure.empty())
            firstFailure = res ? res->body : httplib::to_string(res.error());
          failures++;
          continue;
        }
        json reply = json::parse(res->body);
        // Version v multiplies by v: a reply never mixes one version's number with another's.
        int version = std::stoi(reply["model_version"].get<std::string>());
        if (reply["outputs"][0]["data"] != json::array({version, version, version, version}))
          wrong++;
      }
    });
  for (int v = 2; v <= 5; ++v) {
    Reply replaced = put(*http, "/v1/modules/m", json({{"mlir", scaled(v)}}).dump());
    CHECK(replaced.status == 200);
  }
  done = true;
  for (std::thread &t : clients)
    t.join();
  INFO(firstFailure);
  CHECK(calls > 0);
  CHECK(failures == 0);
  CHECK(wrong == 0);
}

TEST_CASE("the v2 repository lists modules and unloads and loads watched ones", "[serve][v2]") {
  TempDir watched;
  { std::ofstream(watched.path + "/w.mlir") << scaled(2); }
  ServeProcess serve({"", {"--watch", watched.path}});
  auto http = serve.client();
  awaitReady(*http);
  requireCreated(*http, "api", kNoMain);

  Reply index = post(*http, "/v2/repository/index", "");
  INFO(index.raw);
  REQUIRE(index.status == 200);
  CHECK(index.body == json::parse(R"([
      {"name": "api.a", "version": "1", "state": "READY", "reason": ""},
      {"name": "api.b", "version": "1", "state": "READY", "reason": ""},
      {"name": "w", "version": "1", "state": "READY", "reason": ""}])"));

  CHECK(post(*http, "/v2/repository/models/w/unload", "").status == 200);
  CHECK(get(*http, "/v2/models/w/ready").status == 404);
  CHECK(infer(*http, "/v2/models/w/infer", kFourOnes).status == 404);
  Reply after = post(*http, "/v2/repository/index", "");
  CHECK(after.body.back() == json::parse(R"({"name": "w", "state": "UNAVAILABLE",
                                              "reason": "unloaded"})"));
  CHECK(post(*http, "/v2/repository/index", R"({"ready": true})").body.size() == 2);

  // Load reads the file again.
  { std::ofstream(watched.path + "/w.mlir") << scaled(5); }
  Reply loaded = post(*http, "/v2/repository/models/w/load", "");
  INFO(loaded.raw);
  CHECK(loaded.status == 200);
  InferReply reply = infer(*http, "/v2/models/w/infer", kFourOnes);
  CHECK(reply.status == 200);
  CHECK(reply.body["outputs"][0]["data"] == json::array({5, 5, 5, 5}));

  // A module the API made has no source kept: unloaded, it is gone.
  CHECK(post(*http, "/v2/repository/models/api/load", "").status == 200);
  CHECK(post(*http, "/v2/repository/models/api/unload", "").status == 200);
  Reply noSource = post(*http, "/v2/repository/models/api/load", "");
  CHECK(noSource.status == 404);
  CHECK(v2Error(noSource).find("submit a new one with POST /v1/modules") != std::string::npos);
  CHECK(post(*http, "/v2/repository/models/never/unload", "").status == 404);
}

TEST_CASE("a v2 load of an unloaded watched module whose file just changed succeeds while the "
          "watcher brings it back too",
          "[serve][v2]") {
  TempDir watched;
  { std::ofstream(watched.path + "/w.mlir") << scaled(2); }
  ServeProcess serve({"", {"--watch", watched.path}});
  auto http = serve.client();
  awaitReady(*http);
  // The watcher and the load both create the module from the file: whichever comes second
  // waits for the first and replaces its module, so the load answers 200 either way.
  for (int factor = 3; factor <= 5; ++factor) {
    REQUIRE(post(*http, "/v2/repository/models/w/unload", "").status == 200);
    { std::ofstream(watched.path + "/w.mlir") << scaled(factor); }
    Reply loaded = post(*http, "/v2/repository/models/w/load", "");
    INFO(loaded.raw);
    CHECK(loaded.status == 200);
    InferReply reply = infer(*http, "/v2/models/w/infer", kFourOnes);
    CHECK(reply.body["outputs"][0]["data"] == json::array({factor, factor, factor, factor}));
  }
}

TEST_CASE("v2 statistics count each model's successes and failures, and the time they took",
          "[serve][v2]") {
  ServeProcess serve;
  auto http = serve.client();
  requireCreated(*http, "named", kNamed);
  json good = json::parse(R"({"inputs": [
      {"name": "x", "datatype": "FP32", "shape": [1], "data": [1]},
      {"name": "input1", "datatype": "FP32", "shape": [1], "data": [2]}]})");
  for (int i = 0; i < 3; ++i)
    REQUIRE(infer(*http, "/v2/models/named/infer", good).status == 200);
  json bad = good;
  bad["inputs"][0]["datatype"] = "INT8";
  REQUIRE(infer(*http, "/v2/models/named/infer", bad).status == 400);
  // A /v1 invoke is a call of the same model.
  REQUIRE(post(*http, "/v1/modules/named/invoke/main", R"({"inputs": [[1], [2]]})").status == 200);

  Reply stats = get(*http, "/v2/models/named/stats");
  INFO(stats.raw);
  REQUIRE(stats.status == 200);
  REQUIRE(stats.body["model_stats"].size() == 1);
  const json &model = stats.body["model_stats"][0];
  CHECK(model["name"] == "named");
  CHECK(model["version"] == "1");
  CHECK(model["inference_count"] == 4);
  CHECK(model["execution_count"] == 4);
  const json &s = model["inference_stats"];
  CHECK(s["success"]["count"] == 4);
  CHECK(s["fail"]["count"] == 1);
  CHECK(s["compute_infer"]["count"] == 4);
  CHECK(s["compute_infer"]["ns"].get<int64_t>() > 0);
  CHECK(s["compute_input"]["ns"].get<int64_t>() > 0);
  CHECK(s["success"]["ns"].get<int64_t>() >= s["compute_infer"]["ns"].get<int64_t>());
  CHECK(model["last_inference"].get<int64_t>() > 1700000000000);

  Reply all = get(*http, "/v2/models/stats");
  REQUIRE(all.status == 200);
  REQUIRE(all.body["model_stats"].size() == 2);
  CHECK(all.body["model_stats"][1]["name"] == "named.scale");
  CHECK(all.body["model_stats"][1]["inference_count"] == 0);
}

TEST_CASE("the bearer token guards the v2 routes", "[serve][v2]") {
  ServeProcess serve({"s3cret", {}});
  httplib::Client anonymous("127.0.0.1", serve.port());
  for (const char *path : {"/v2", "/v2/health/live", "/v2/models/m"}) {
    INFO(path);
    Reply refused = toReply(anonymous.Get(path));
    CHECK(refused.status == 401);
    // In the v2 shape, as every refusal of a v2 path is, even before routing.
    CHECK(v2Error(refused) == "missing or wrong bearer token");
    CHECK(refused.headers.find("X-Courier-Error-Code")->second == "unauthorized");
  }
  Reply refused =
      toReply(anonymous.Post("/v2/models/m/infer", kFourOnes.dump(), "application/json"));
  CHECK(refused.status == 401);
  CHECK(v2Error(refused) == "missing or wrong bearer token");
  // /v1 keeps its own shape.
  CHECK(toReply(anonymous.Get("/v1/modules")).body["error"]["code"] == "unauthorized");
  auto http = serve.client();
  requireCreated(*http, "m", scaled(2));
  CHECK(get(*http, "/v2/health/live").status == 200);
  CHECK(infer(*http, "/v2/models/m/infer", kFourOnes).status == 200);
}

namespace {

/// A POSIX shared-memory object of `size` bytes, mapped here, unlinked when it goes.
struct ShmObject {
  std::string key;
  size_t size;
  uint8_t *data = nullptr;
  ShmObject(std::string keyIn, size_t sizeIn) : key(std::move(keyIn)), size(sizeIn) {
    int fd = ::shm_open(key.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(size)) == 0);
    void *mapped = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(mapped != MAP_FAILED);
    data = static_cast<uint8_t *>(mapped);
  }
  ~ShmObject() {
    ::munmap(data, size);
    ::shm_unlink(key.c_str());
  }
};

} // namespace

TEST_CASE("system shared memory is refused unless enabled, enabled, tensors go through "
          "registered regions",
          "[serve][v2]") {
  std::string key = "/courier-v2-test-" + std::to_string(::getpid());
  ShmObject shm(key, 4096);
  json registration = {{"key", key}, {"offset", 64}, {"byte_size", 128}};
  {
    ServeProcess plain;
    auto http = plain.client();
    Reply refused = post(*http, "/v2/systemsharedmemory/region/r/register", registration.dump());
    CHECK(refused.status == 400);
    CHECK(v2Error(refused) == "this server does not take tensors in shared memory: start it "
                              "with --allow-shared-memory");
  }
  ServeProcess serve({"", {"--allow-shared-memory"}});
  auto http = serve.client();
  CHECK(get(*http, "/v2").body["extensions"].back() == "system_shared_memory");
  requireCreated(*http, "m", scaled(3));
  Reply registered = post(*http, "/v2/systemsharedmemory/region/r/register", registration.dump());
  INFO(registered.raw);
  REQUIRE(registered.status == 200);
  CHECK(post(*http, "/v2/systemsharedmemory/region/r/register", registration.dump()).status == 400);
  Reply status = get(*http, "/v2/systemsharedmemory/status");
  CHECK(status.body ==
        json::array({{{"name", "r"}, {"key", key}, {"offset", 64}, {"byte_size", 128}}}));

  // The input at region offset 0 (object offset 64), the output at region offset 32.
  double ones[4] = {1, 2, 3, 4};
  std::memcpy(shm.data + 64, ones, sizeof(ones));
  json request = {
      {"inputs",
       {{{"name", "input0"},
         {"datatype", "FP64"},
         {"shape", {4}},
         {"parameters", {{"shared_memory_region", "r"}, {"shared_memory_byte_size", 32}}}}}},
      {"outputs",
       {{{"name", "output0"},
         {"parameters",
          {{"shared_memory_region", "r"},
           {"shared_memory_byte_size", 32},
           {"shared_memory_offset", 32}}}}}}};
  InferReply reply = infer(*http, "/v2/models/m/infer", request);
  INFO(reply.raw);
  REQUIRE(reply.status == 200);
  CHECK(reply.body["outputs"][0]["parameters"]["shared_memory_region"] == "r");
  double out[4];
  std::memcpy(out, shm.data + 96, sizeof(out));
  CHECK(std::vector<double>(out, out + 4) == std::vector<double>{3, 6, 9, 12});

  // Bounded by the region as registered.
  json beyond = request;
  beyond["outputs"][0]["parameters"]["shared_memory_offset"] = 120;
  InferReply outside = infer(*http, "/v2/models/m/infer", beyond);
  CHECK(outside.status == 400);
  CHECK(outside.error() ==
        "output 'output0': 32 bytes at offset 120 do not fit region 'r' of 128 bytes");
  Reply tooBig = post(*http, "/v2/systemsharedmemory/region/big/register",
                      json({{"key", key}, {"offset", 0}, {"byte_size", 8192}}).dump());
  CHECK(tooBig.status == 400);
  Reply missing = post(*http, "/v2/systemsharedmemory/region/x/register",
                       json({{"key", "/courier-no-such-object"}, {"byte_size", 8}}).dump());
  CHECK(missing.status == 400);

  // The client may shrink its object under a registered region: an error, and the server
  // keeps serving.
  {
    int fd = ::shm_open(key.c_str(), O_RDWR, 0);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, 16) == 0);
    ::close(fd);
  }
  InferReply shrunk = infer(*http, "/v2/models/m/infer", request);
  CHECK(shrunk.status == 400);
  CHECK(shrunk.error() ==
        "shared-memory region 'r' (" + key + ") no longer holds its registered bytes");
  CHECK(get(*http, "/v2/health/live").status == 200);

  CHECK(post(*http, "/v2/systemsharedmemory/region/r/unregister", "").status == 200);
  CHECK(get(*http, "/v2/systemsharedmemory/status").body == json::array());
  InferReply unregistered = infer(*http, "/v2/models/m/infer", request);
  CHECK(unregistered.status == 400);
  CHECK(unregistered.error() == "input 'input0': no shared-memory region 'r' is registered");
}

namespace {

/// How many descriptors `server` and the processes it started (those whose descriptors this
/// process may read) hold open on the POSIX shared-memory object `key`.
int openDescriptorsOf(pid_t server, const std::string &key) {
  // Workers are children of whichever of the server's threads started them.
  std::vector<pid_t> processes = {server};
  std::string tasks = "/proc/" + std::to_string(server) + "/task";
  if (DIR *threads = ::opendir(tasks.c_str())) {
    while (const dirent *thread = ::readdir(threads)) {
      std::ifstream children(tasks + "/" + thread->d_name + "/children");
      for (pid_t child; children >> child;)
        processes.push_back(child);
    }
    ::closedir(threads);
  }
  int count = 0;
  for (pid_t pid : processes) {
    std::string dir = "/proc/" + std::to_string(pid) + "/fd";
    DIR *fds = ::opendir(dir.c_str());
    if (!fds)
      continue; // The process is gone.
    while (const dirent *entry = ::readdir(fds)) {
      char target[4096];
      ssize_t n = ::readlinkat(::dirfd(fds), entry->d_name, target, sizeof target - 1);
      if (n > 0 && std::string(target, static_cast<size_t>(n)).rfind("/dev/shm" + key, 0) == 0)
        ++count;
    }
    ::closedir(fds);
  }
  return count;
}

} // namespace

TEST_CASE("a shared-memory region is the server's, as in Triton: it outlives the modules that "
          "used it, and unregistering it closes its only descriptor",
          "[serve][v2]") {
  std::string key = "/courier-v2-region-" + std::to_string(::getpid());
  ShmObject shm(key, 4096);
  ServeProcess serve({"", {"--allow-shared-memory"}});
  auto http = serve.client();
  requireCreated(*http, "m", scaled(3));
  REQUIRE(post(*http, "/v2/systemsharedmemory/region/r/register",
               json({{"key", key}, {"offset", 0}, {"byte_size", 64}}).dump())
              .status == 200);
  CHECK(openDescriptorsOf(serve.processId(), key) == 1);

  double values[4] = {1, 2, 3, 4};
  std::memcpy(shm.data, values, sizeof(values));
  json request = {
      {"inputs",
       {{{"name", "input0"},
         {"datatype", "FP64"},
         {"shape", {4}},
         {"parameters", {{"shared_memory_region", "r"}, {"shared_memory_byte_size", 32}}}}}},
      {"outputs",
       {{{"name", "output0"},
         {"parameters",
          {{"shared_memory_region", "r"},
           {"shared_memory_byte_size", 32},
           {"shared_memory_offset", 32}}}}}}};
  auto output = [&] {
    double out[4];
    std::memcpy(out, shm.data + 32, sizeof(out));
    return std::vector<double>(out, out + 4);
  };
  REQUIRE(infer(*http, "/v2/models/m/infer", request).status == 200);
  CHECK(output() == std::vector<double>{3, 6, 9, 12});

  // Deleting the module that used the region leaves it registered, held once, by the server.
  auto deleted = http->Delete("/v1/modules/m");
  REQUIRE(deleted);
  CHECK(deleted->status == 204);
  Reply status = get(*http, "/v2/systemsharedmemory/status");
  CHECK(status.body ==
        json::array({{{"name", "r"}, {"key", key}, {"offset", 0}, {"byte_size", 64}}}));
  CHECK(openDescriptorsOf(serve.processId(), key) == 1);

  // The next module uses it as it is; unloading through the repository leaves it too.
  requireCreated(*http, "m", scaled(5));
  InferReply again = infer(*http, "/v2/models/m/infer", request);
  INFO(again.raw);
  REQUIRE(again.status == 200);
  CHECK(output() == std::vector<double>{5, 10, 15, 20});
  REQUIRE(post(*http, "/v2/repository/models/m/unload", "").status == 200);
  CHECK(get(*http, "/v2/systemsharedmemory/region/r/status").status == 200);
  CHECK(openDescriptorsOf(serve.processId(), key) == 1);

  CHECK(post(*http, "/v2/systemsharedmemory/region/r/unregister", "").status == 200);
  CHECK(openDescriptorsOf(serve.processId(), key) == 0);
  CHECK(get(*http, "/v2/systemsharedmemory/status").body == json::array());
  // Regions of CUDA memory are not taken at all.
  CHECK(get(*http, "/v2/cudasharedmemory/status").status == 404);
}

TEST_CASE("after SIGTERM /v2/health/ready answers 503 while an infer in flight completes",
          "[serve][v2][drain]") {
  ServeProcess serve;
  auto http = serve.client();
  REQUIRE(get(*http, "/v2/health/ready").status == 200);
  requireCreated(*http, "m", scaled(2));

  // An infer whose body has not all arrived is in flight.
  std::string body = kFourOnes.dump();
  std::unique_ptr<RawConnection> inFlight = serve.postInFlight("/v2/models/m/infer", body);

  serve.signal(SIGTERM);
  auto probe = serve.client();
  Reply ready = get(*probe, "/v2/health/ready");
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       ready.status == 200 && std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(10)))
    ready = get(*probe, "/v2/health/ready");
  CHECK(ready.status == 503);
  CHECK(v2Error(ready) == "courier-serve is draining before it exits");
  CHECK(ready.headers.find("X-Courier-Error-Code")->second == "draining");
  CHECK(get(*probe, "/v2/health/live").status == 200);
  CHECK(post(*probe, "/v2/repository/models/m/load", "").status == 503);

  inFlight->send(body.substr(10));
  std::string reply = inFlight->readAll();
  INFO(reply);
  CHECK(reply.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(reply.find("\"data\":[2,2,2,2]") != std::string::npos);
  int status = serve.terminate();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
