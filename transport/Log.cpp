// The servers' log lines (Log.h).
#include "transport/Log.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <mutex>
#include <unistd.h>

namespace courier::transport {

namespace {

std::atomic<LogFormat> currentFormat{LogFormat::Text};

/// A text value as it can be read back off the line: bare when it has no space, quote or
/// control character, else in double quotes with those escaped as JSON escapes them.
void writeTextValue(llvm::raw_ostream &os, llvm::StringRef value) {
  bool bare = !value.empty() && llvm::none_of(value, [](char c) {
    return c == ' ' || c == '"' || c == '=' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
  if (bare) {
    os << value;
    return;
  }
  os << llvm::json::Value(llvm::json::fixUTF8(value));
}

} // namespace

std::string textLogValue(llvm::StringRef value) {
  std::string text;
  llvm::raw_string_ostream os(text);
  writeTextValue(os, value);
  return text;
}

llvm::Expected<LogFormat> parseLogFormat(llvm::StringRef name) {
  if (name == "text")
    return LogFormat::Text;
  if (name == "json")
    return LogFormat::Json;
  return llvm::createStringError("--log-format expects 'text' or 'json', got '" + name + "'");
}

void setLogFormat(LogFormat format) { currentFormat = format; }

LogFormat logFormat() { return currentFormat; }

llvm::StringRef logLevelName(LogLevel level) {
  switch (level) {
  case LogLevel::Info:
    return "info";
  case LogLevel::Warn:
    return "warn";
  case LogLevel::Error:
    return "error";
  }
  return "info";
}

std::string formatLogLine(LogFormat format, llvm::StringRef time, LogLevel level,
                          llvm::StringRef message, llvm::ArrayRef<LogField> fields) {
  std::string line;
  llvm::raw_string_ostream os(line);
  if (format == LogFormat::Json) {
    llvm::json::OStream json(os);
    json.object([&] {
      json.attribute("time", time);
      json.attribute("level", logLevelName(level));
      json.attribute("msg", llvm::json::fixUTF8(message));
      for (const LogField &field : fields)
        std::visit(
            [&](auto value) {
              if constexpr (std::is_same_v<decltype(value), llvm::StringRef>)
                json.attribute(field.key, llvm::json::fixUTF8(value));
              else
                json.attribute(field.key, value);
            },
            field.value);
    });
  } else {
    // One event, one line, whatever the message holds.
    os << time << ' ' << logLevelName(level) << ' ';
    for (char c : message)
      os << (c == '\n' || c == '\r' ? ' ' : c);
    for (const LogField &field : fields) {
      os << ' ' << field.key << '=';
      std::visit(
          [&](auto value) {
            if constexpr (std::is_same_v<decltype(value), llvm::StringRef>)
              writeTextValue(os, value);
            else if constexpr (std::is_same_v<decltype(value), double>)
              os << llvm::format("%.3f", value);
            else
              os << value;
          },
          field.value);
    }
  }
  os << '\n';
  return line;
}

std::string logTimestamp() {
  auto now = std::chrono::system_clock::now();
  std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  size_t length = std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + length, sizeof(text) - length, ".%03dZ", static_cast<int>(millis.count()));
  return text;
}

void writeLogLine(llvm::StringRef line) {
  // One write is whole only up to PIPE_BUF on a pipe, and a relayed worker line may be longer:
  // lines of different threads go out one after another.
  static std::mutex writing;
  std::lock_guard<std::mutex> lock(writing);
  const char *data = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t written = ::write(STDERR_FILENO, data, left);
    if (written < 0 && errno == EINTR)
      continue;
    if (written <= 0)
      return;
    data += written;
    left -= static_cast<size_t>(written);
  }
}

void logEvent(LogLevel level, llvm::StringRef message, llvm::ArrayRef<LogField> fields) {
  writeLogLine(formatLogLine(logFormat(), logTimestamp(), level, message, fields));
}

} // namespace courier::transport
