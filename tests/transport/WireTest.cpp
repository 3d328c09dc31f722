// The launch frame on its own: encoding and decoding the JSON line, gathering strided
// tensors, and receiving a frame split at every possible byte.
#include "transport/Wire.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>

using namespace courier::transport;

namespace {

/// Runs a writer to completion, collecting what it produces.
std::string drain(wire::FrameWriter &writer) {
  std::string out;
  while (out.size() < writer.size())
    REQUIRE(writer.writeNext(out.size(), [&](const char *data, size_t size) {
      out.append(data, size);
      return true;
    }));
  REQUIRE(out.size() == writer.size());
  return out;
}

} // namespace

TEST_CASE("a launch header survives an encode/decode round trip", "[wire]") {
  wire::LaunchRequest request;
  request.object = std::string(64, 'c');
  request.entry = "_catalyst_pyface_f";
  std::vector<double> x(6);
  request.inputs = wire::describePacked({TensorView{x.data(), 8, {2, 3}, {3, 1}}});
  request.results = {{0, 4}, {2, 8}};
  std::string line = wire::encodeLaunchRequest(request);
  CHECK(line.find('\n') == std::string::npos);
  auto decoded = wire::decodeLaunchRequest(line);
  REQUIRE(static_cast<bool>(decoded));
  CHECK(decoded->entry == request.entry);
  CHECK(decoded->inputs[0].sizes == std::vector<int64_t>{2, 3});
  CHECK(decoded->inputs[0].bytes == 48);
  CHECK(decoded->results[1].rank == 2);
}

TEST_CASE("malformed launch headers are bad frames, never exceptions", "[wire]") {
  std::string sha(64, 'a');
  for (const char *line : {
           "",
           "[]",
           "{",
           "{\"object\": 1}",
           "{\"object\":\"x\",\"entry\":\"e\",\"inputs\":[],"
           "\"results\":[]}",
           "{\"object\":\"SHA\",\"entry\":\"e\",\"inputs\":[{\"elemSize\":8,\"sizes\":[\"2\"],"
           "\"offset\":0,\"bytes\":16}],\"results\":[]}",
           "{\"object\":\"SHA\",\"entry\":\"e\",\"inputs\":[{\"elemSize\":8,\"sizes\":[2],"
           "\"offset\":8,\"bytes\":16}],\"results\":[]}",
           "{\"object\":\"SHA\",\"entry\":\"e\",\"inputs\":[{\"elemSize\":0,\"sizes\":[2],"
           "\"offset\":0,\"bytes\":0}],\"results\":[]}",
           "{\"object\":\"SHA\",\"entry\":\"e\",\"inputs\":[{\"elemSize\":8,\"sizes\":["
           "4611686018427387904,"
           "4611686018427387904],\"offset\":0,\"bytes\":0}],\"results\":[]}",
           "{\"object\":\"SHA\",\"entry\":\"e\",\"inputs\":[],\"results\":[{\"rank\":-1,"
           "\"elemSize\":8}]}",
       }) {
    std::string text = line;
    size_t at = text.find("SHA");
    if (at != std::string::npos)
      text.replace(at, 3, sha);
    INFO(text);
    auto decoded = wire::decodeLaunchRequest(text);
    REQUIRE(!decoded);
    std::string message = llvm::toString(decoded.takeError());
    CHECK((message.find("[bad_frame]") != std::string::npos ||
           message.find("[payload_too_large]") != std::string::npos));
  }
}

TEST_CASE("a launch header declaring more tensors or higher ranks than the bounds is a bad "
          "frame",
          "[wire]") {
  auto header = [](size_t inputs, size_t inputRank, size_t results, int64_t resultRank) {
    wire::LaunchRequest request;
    request.object = std::string(64, 'a');
    request.entry = "_catalyst_pyface_f";
    std::vector<double> x(1);
    std::vector<TensorView> views(inputs,
                                  TensorView{x.data(), 8, std::vector<int64_t>(inputRank, 1),
                                             std::vector<int64_t>(inputRank, 1)});
    request.inputs = wire::describePacked(views);
    request.results.assign(results, ResultSpec{resultRank, 8});
    return wire::encodeLaunchRequest(request);
  };
  auto refusal = [](const std::string &line) {
    auto decoded = wire::decodeLaunchRequest(line);
    REQUIRE(!decoded);
    return llvm::toString(decoded.takeError());
  };
  size_t most = wire::kMaxFrameTensors, deepest = wire::kMaxFrameRank;
  REQUIRE(bool(wire::decodeLaunchRequest(header(most, deepest, most, int64_t(deepest)))));
  CHECK_THAT(refusal(header(most + 1, 0, 1, 0)),
             Catch::Contains("'inputs' holds 4097 tensors") && Catch::Contains("[bad_frame]"));
  CHECK_THAT(refusal(header(1, deepest + 1, 1, 0)), Catch::Contains("rank 65"));
  CHECK_THAT(refusal(header(1, 0, most + 1, 0)), Catch::Contains("'results' holds 4097"));
  CHECK_THAT(refusal(header(1, 0, 1, int64_t(deepest) + 1)),
             Catch::Contains("result rank must be 0 to 64"));
}

TEST_CASE("a frame writer packs strided tensors row-major", "[wire]") {
  // A [3, 4] int32 view with strides [1, 3] (column-major storage) and a rank-0 tensor.
  std::vector<int32_t> storage(12);
  std::iota(storage.begin(), storage.end(), 0);
  int64_t scalar = 42;
  std::vector<TensorView> tensors = {TensorView{storage.data(), 4, {3, 4}, {1, 3}},
                                     TensorView{&scalar, 8, {}, {}}};
  wire::FrameWriter writer("{}", tensors);
  std::string frame = drain(writer);
  REQUIRE(frame.size() == 3 + 48 + 8);
  std::vector<int32_t> packed(12);
  std::memcpy(packed.data(), frame.data() + 3, 48);
  std::vector<int32_t> expected;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      expected.push_back(storage[i + 3 * j]);
  CHECK(packed == expected);
  int64_t back;
  std::memcpy(&back, frame.data() + 51, 8);
  CHECK(back == 42);
}

TEST_CASE("a frame reader accepts the frame in pieces of any size", "[wire]") {
  std::vector<int16_t> a = {1, 2, 3}, b = {4, 5};
  std::vector<TensorView> tensors = {TensorView{a.data(), 2, {3}, {1}},
                                     TensorView{b.data(), 2, {2}, {1}}};
  wire::FrameWriter writer(R"({"h":1})", tensors);
  std::string frame = drain(writer);
  for (size_t piece : {size_t(1), size_t(2), size_t(7), frame.size()}) {
    INFO("piece size " << piece);
    std::vector<int16_t> outA(3), outB(2);
    std::string header;
    wire::FrameReader reader(
        [&](llvm::StringRef line) -> llvm::Expected<std::vector<wire::Destination>> {
          header = line.str();
          return std::vector<wire::Destination>{{reinterpret_cast<char *>(outA.data()), 6},
                                                {reinterpret_cast<char *>(outB.data()), 4}};
        });
    for (size_t at = 0; at < frame.size(); at += piece)
      REQUIRE(!reader.feed(frame.data() + at, std::min(piece, frame.size() - at)));
    REQUIRE(!reader.finish());
    CHECK(header == R"({"h":1})");
    CHECK(outA == a);
    CHECK(outB == b);
  }
}

TEST_CASE("a frame reader rejects short, long and headerless frames", "[wire]") {
  char sink[4];
  auto handler = [&](llvm::StringRef) -> llvm::Expected<std::vector<wire::Destination>> {
    return std::vector<wire::Destination>{{sink, 4}};
  };
  {
    wire::FrameReader reader(handler);
    REQUIRE(!reader.feed("{}\nabc", 6));
    CHECK_THAT(llvm::toString(reader.finish()), Catch::Contains("before all tensor bytes"));
  }
  {
    wire::FrameReader reader(handler);
    CHECK_THAT(llvm::toString(reader.feed("{}\nabcde", 8)), Catch::Contains("more bytes"));
  }
  {
    wire::FrameReader reader(handler);
    REQUIRE(!reader.feed("{}", 2));
    CHECK_THAT(llvm::toString(reader.finish()), Catch::Contains("newline"));
  }
  {
    wire::FrameReader reader(handler);
    std::string huge(wire::kMaxFrameHeaderBytes + 1, ' ');
    CHECK_THAT(llvm::toString(reader.feed(huge.data(), huge.size())), Catch::Contains("longer"));
  }
}

TEST_CASE("error codes map to their statuses", "[wire]") {
  CHECK(httpStatus(ErrorCode::UnknownObject) == 404);
  CHECK(httpStatus(ErrorCode::PayloadTooLarge) == 413);
  CHECK(wire::errorBody(ErrorCode::BadFrame, "oops") ==
        R"({"error":{"code":"bad_frame","message":"oops"}})");
}
