// The servers' log lines (transport/Log.h): one line per event in either format, values
// quoted where a reader would misread them, JSON fields in the order given.
#include "transport/Log.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <regex>

using namespace courier::transport;

TEST_CASE("a text log line is the time, the level, the message, then key=value fields", "[log]") {
  std::string line =
      formatLogLine(LogFormat::Text, "2026-12-01T07:10:03.123Z", LogLevel::Warn, "worker died",
                    {{"session", llvm::StringRef("ab12")},
                     {"pid", int64_t(42)},
                     {"bytes", uint64_t(7)},
                     {"duration_ms", 1.23456}});
  CHECK(
      line ==
      "2026-12-01T07:10:03.123Z warn worker died session=ab12 pid=42 bytes=7 duration_ms=1.235\n");
}

TEST_CASE("text values with spaces, quotes or control characters are quoted, and a message "
          "never breaks its line",
          "[log]") {
  std::string line = formatLogLine(LogFormat::Text, "T", LogLevel::Info, "first\nsecond\r\x1b[2J",
                                   {{"file", llvm::StringRef("my models/a.mlir")},
                                    {"quote", llvm::StringRef("say \"hi\"")},
                                    {"equals", llvm::StringRef("a=b")},
                                    {"empty", llvm::StringRef("")},
                                    {"tab", llvm::StringRef("a\tb")}});
  CHECK(line == "T info first\\nsecond\\r\\u001b[2J file=\"my models/a.mlir\" "
                "quote=\"say \\\"hi\\\"\" "
                "equals=\"a=b\" empty=\"\" tab=\"a\\tb\"\n");
  CHECK(line.find('\n') == line.size() - 1);
}

TEST_CASE("a JSON log line is one object: time, level, msg, then the fields in order", "[log]") {
  std::string line =
      formatLogLine(LogFormat::Json, "2026-12-01T07:10:03.123Z", LogLevel::Error, "request",
                    {{"request_id", llvm::StringRef("r1")},
                     {"status", int64_t(503)},
                     {"duration_ms", 0.5},
                     {"path", llvm::StringRef("/v1/a\nb")}});
  CHECK(line ==
        "{\"time\":\"2026-12-01T07:10:03.123Z\",\"level\":\"error\",\"msg\":\"request\","
        "\"request_id\":\"r1\",\"status\":503,\"duration_ms\":0.5,\"path\":\"/v1/a\\nb\"}\n");
  // Bytes that are not UTF-8 are replaced, so the line stays valid JSON.
  std::string bad = formatLogLine(LogFormat::Json, "T", LogLevel::Info, "x",
                                  {{"path", llvm::StringRef("\xff\xfe")}});
  CHECK(nlohmann::json::parse(bad, nullptr, false).is_object());
}

TEST_CASE("a text value is bare only when printable ASCII without a space, quote, backslash "
          "or equals sign",
          "[log]") {
  CHECK(textLogValue("/v1/modules/scale") == "/v1/modules/scale");
  CHECK(textLogValue("") == "\"\"");
  CHECK(textLogValue("a b") == "\"a b\"");
  CHECK(textLogValue("a=b") == "\"a=b\"");
  CHECK(textLogValue("say \"hi\"") == "\"say \\\"hi\\\"\"");
  CHECK(textLogValue("C:\\dir") == "\"C:\\\\dir\"");
  // Printable text beyond ASCII stays as it is, between quotes.
  CHECK(textLogValue("caf\xc3\xa9") == "\"caf\xc3\xa9\"");
  CHECK(textLogValue("plain", LogQuoting::Always) == "\"plain\"");
}

TEST_CASE("a text value escapes every control character: C0, DEL and C1, and bytes that are not "
          "UTF-8 become U+FFFD",
          "[log]") {
  CHECK(textLogValue("a\nb\rc\td") == "\"a\\nb\\rc\\td\"");
  CHECK(textLogValue("\x1b[2J") == "\"\\u001b[2J\"");
  CHECK(textLogValue(llvm::StringRef("nul\0bell\a", 9)) == "\"nul\\u0000bell\\u0007\"");
  CHECK(textLogValue("del\x7f") == "\"del\\u007f\"");
  // U+009B is CSI, the C1 form of ESC [; U+0085 is NEL, a line break to some readers.
  CHECK(textLogValue("csi\xc2\x9b"
                     "2J nel\xc2\x85") == "\"csi\\u009b2J nel\\u0085\"");
  // A lone 0x9b byte (CSI to an 8-bit terminal) is not UTF-8.
  CHECK(textLogValue("raw\x9b"
                     "2J") == "\"raw\xef\xbf\xbd"
                              "2J\"");
  // U+00A0 and beyond are not controls.
  CHECK(textLogValue("nbsp\xc2\xa0") == "\"nbsp\xc2\xa0\"");
}

TEST_CASE("a quoted worker line shaped like a server's line stays one line of the worker's, "
          "with no raw control character",
          "[log]") {
  std::string forged = "\n2026-12-01T07:10:03.123Z info GET /v1/health 200 in=0 out=0 0.100ms "
                       "request=forged\r\n\x1b[2J\x7f\xc2\x9b";
  std::string line =
      formatLogLine(LogFormat::Text, "T", LogLevel::Info, textLogValue(forged, LogQuoting::Always),
                    {{"worker", int64_t(42)}});
  CHECK(line == "T info \"\\n2026-12-01T07:10:03.123Z info GET /v1/health 200 in=0 out=0 "
                "0.100ms request=forged\\r\\n\\u001b[2J\\u007f\\u009b\" worker=42\n");
  CHECK(line.find('\n') == line.size() - 1);
  CHECK(llvm::none_of(llvm::StringRef(line).drop_back(), [](char c) {
    auto byte = static_cast<unsigned char>(c);
    return byte < 0x20 || byte == 0x7f || byte >= 0x80;
  }));
}

TEST_CASE("a JSON line escapes DEL and C1 controls as it escapes C0, and reads back as written",
          "[log]") {
  std::string said = "\nforged\r\x1b[2J\x7f\xc2\x9b\xc2\x85 caf\xc3\xa9";
  std::string line = formatLogLine(LogFormat::Json, "T", LogLevel::Info, said,
                                   {{"worker", int64_t(42)}, {"path", llvm::StringRef(said)}});
  INFO(line);
  CHECK(line.find('\n') == line.size() - 1);
  CHECK(line.find_first_of(std::string("\r\x1b\x7f", 3)) == std::string::npos);
  CHECK(line.find("\xc2\x9b") == std::string::npos);
  CHECK(line.find("\xc2\x85") == std::string::npos);
  CHECK(line.find("\\u007f\\u009b\\u0085 caf\xc3\xa9") != std::string::npos);
  nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
  REQUIRE(event.is_object());
  CHECK(event["msg"] == said);
  CHECK(event["path"] == said);
}

TEST_CASE("log timestamps are UTC to the millisecond", "[log]") {
  CHECK(std::regex_match(logTimestamp(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
}

TEST_CASE("the log format is named text or json", "[log]") {
  CHECK(*parseLogFormat("text") == LogFormat::Text);
  CHECK(*parseLogFormat("json") == LogFormat::Json);
  llvm::Expected<LogFormat> other = parseLogFormat("JSON");
  REQUIRE(!other);
  CHECK(llvm::toString(other.takeError()) == "--log-format expects 'text' or 'json', got 'JSON'");
}
