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

/// Writes `text` with each control character escaped as JSON escapes it (`\n`, `\u001b`),
/// DEL and the C1 controls (U+0080 to U+009F, which terminals also obey) included, and with
/// quotes and backslashes escaped too when it goes between quotes; bytes that are not UTF-8
/// become U+FFFD first, so none is read as a lone C1 control either.
void writeEscaped(llvm::raw_ostream &os, llvm::StringRef text, bool quoted) {
  std::string fixed;
  if (!llvm::json::isUTF8(text)) {
    fixed = llvm::json::fixUTF8(text);
    text = fixed;
  }
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = text[i];
    unsigned control = c;
    if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      // UTF-8 lead bytes continue with 0x80 and above: this is U+0080 to U+009F.
      control = static_cast<unsigned char>(text[++i]);
    } else if (c >= 0x20 && c != 0x7f) {
      if (quoted && (c == '"' || c == '\\'))
        os << '\\';
      os << c;
      continue;
    }
    switch (control) {
    case '\n':
      os << "\\n";
      break;
    case '\r':
      os << "\\r";
      break;
    case '\t':
      os << "\\t";
      break;
    default:
      os << llvm::format("\\u%04x", control);
    }
  }
}

void writeTextValue(llvm::raw_ostream &os, llvm::StringRef value, LogQuoting quoting) {
  bool bare =
      quoting == LogQuoting::WhenNeeded && !value.empty() && llvm::all_of(value, [](char c) {
        return c > ' ' && c < 0x7f && c != '"' && c != '=' && c != '\\';
      });
  if (bare) {
    os << value;
    return;
  }
  os << '"';
  writeEscaped(os, value, /*quoted=*/true);
  os << '"';
}

/// llvm::json escapes C0 controls in strings but writes DEL and C1 as they are: escaped here,
/// where they can only stand inside a string (everything else of a line is ASCII we wrote).
void escapeDelAndC1(std::string &line) {
  auto isControl = [&](size_t i) {
    unsigned char c = line[i];
    return c == 0x7f ||
           (c == 0xc2 && i + 1 < line.size() && static_cast<unsigned char>(line[i + 1]) <= 0x9f);
  };
  size_t i = 0;
  while (i < line.size() && !isControl(i))
    ++i;
  if (i == line.size())
    return;
  std::string escaped = line.substr(0, i);
  llvm::raw_string_ostream os(escaped);
  for (; i < line.size(); ++i) {
    if (!isControl(i)) {
      os << line[i];
      continue;
    }
    unsigned control = static_cast<unsigned char>(line[i]);
    if (control == 0xc2)
      control = static_cast<unsigned char>(line[++i]);
    os << llvm::format("\\u%04x", control);
  }
  line = std::move(escaped);
}

} // namespace

std::string textLogValue(llvm::StringRef value, LogQuoting quoting) {
  std::string text;
  llvm::raw_string_ostream os(text);
  writeTextValue(os, value, quoting);
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
    os.flush();
    escapeDelAndC1(line);
  } else {
    // One event, one line, whatever the message holds.
    os << time << ' ' << logLevelName(level) << ' ';
    writeEscaped(os, message, /*quoted=*/false);
    for (const LogField &field : fields) {
      os << ' ' << field.key << '=';
      std::visit(
          [&](auto value) {
            if constexpr (std::is_same_v<decltype(value), llvm::StringRef>)
              writeTextValue(os, value, LogQuoting::WhenNeeded);
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
