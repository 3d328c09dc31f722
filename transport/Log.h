// The servers' log: one line per event on stderr, as text for people or as JSON lines for a
// log pipeline (--log-format=text|json on courier-executor and courier-serve). Every line has
// a UTC timestamp and a level; request lines (HttpService) add the request id, method, route,
// path, status, duration and the session or module they concern.
#ifndef COURIER_TRANSPORT_LOG_H
#define COURIER_TRANSPORT_LOG_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <variant>

namespace courier::transport {

enum class LogFormat { Text, Json };
enum class LogLevel { Info, Warn, Error };

/// "text" or "json"; anything else is an error naming both.
llvm::Expected<LogFormat> parseLogFormat(llvm::StringRef name);
/// The format of every line this process logs from now on; Text until set. Set once, by a
/// server's main(), before its threads start.
void setLogFormat(LogFormat format);
LogFormat logFormat();

/// "info", "warn", "error".
llvm::StringRef logLevelName(LogLevel level);

/// One field of a log line beyond the time, level and message.
struct LogField {
  llvm::StringRef key;
  std::variant<llvm::StringRef, int64_t, uint64_t, double> value;
};

/// Formats one line, ending in a newline: in text, "<time> <level> <message>" then
/// " key=value" per field (values with spaces quoted); in JSON, {"time", "level", "msg",
/// then the fields in order}. `time` is "2026-12-01T07:10:03.123Z".
std::string formatLogLine(LogFormat format, llvm::StringRef time, LogLevel level,
                          llvm::StringRef message, llvm::ArrayRef<LogField> fields);

/// `value` as a text line writes a field's value: bare when it has no space, quote, `=` or
/// control character, else quoted with JSON's escapes. For text a client chose that goes into
/// a message (a request's path), so that it cannot pass for a field of its own.
std::string textLogValue(llvm::StringRef value);

/// The current UTC time as log lines give it, to the millisecond.
std::string logTimestamp();

/// Writes one line in the process's format to stderr, whole: lines of threads logging at once
/// never interleave.
void logEvent(LogLevel level, llvm::StringRef message, llvm::ArrayRef<LogField> fields = {});

/// Writes an already formatted line (ending in a newline) to stderr the same way.
void writeLogLine(llvm::StringRef line);

} // namespace courier::transport

#endif // COURIER_TRANSPORT_LOG_H
