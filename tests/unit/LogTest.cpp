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
  std::string line = formatLogLine(LogFormat::Text, "T", LogLevel::Info, "first\nsecond\r",
                                   {{"file", llvm::StringRef("my models/a.mlir")},
                                    {"quote", llvm::StringRef("say \"hi\"")},
                                    {"equals", llvm::StringRef("a=b")},
                                    {"empty", llvm::StringRef("")},
                                    {"tab", llvm::StringRef("a\tb")}});
  CHECK(line == "T info first second  file=\"my models/a.mlir\" quote=\"say \\\"hi\\\"\" "
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
