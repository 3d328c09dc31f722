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
/// " key=value" per field (values as textLogValue writes them); in JSON, {"time", "level",
/// "msg", then the fields in order}. `time` is "2026-12-01T07:10:03.123Z". Either way no byte
/// of the message or a value can end the line or reach a terminal as a control character:
/// text escapes the message's control characters (C0, DEL and C1, as `\n`, `\u001b`, ...)
/// and writes values through textLogValue; JSON escapes them in its strings, DEL and C1
/// included. Bytes that are not UTF-8 become U+FFFD.
std::string formatLogLine(LogFormat format, llvm::StringRef time, LogLevel level,
                          llvm::StringRef message, llvm::ArrayRef<LogField> fields);

enum class LogQuoting { WhenNeeded, Always };

/// `value` as a text line writes it: bare when it is printable ASCII without a space, quote,
/// backslash or `=` (and `quoting` is WhenNeeded), else in double quotes with quotes,
/// backslashes and control characters (C0, DEL, C1) escaped as JSON escapes them and bytes
/// that are not UTF-8 as U+FFFD. The one escaping of text that a peer chose (a request's path,
/// a line a worker wrote), wherever it goes into a text line: quoted, it can neither break
/// its line nor pass for a field, a server's message or a terminal's command.
std::string textLogValue(llvm::StringRef value, LogQuoting quoting = LogQuoting::WhenNeeded);

/// The current UTC time as log lines give it, to the millisecond.
std::string logTimestamp();

/// Writes one line in the process's format to stderr, whole: lines of threads logging at once
/// never interleave.
void logEvent(LogLevel level, llvm::StringRef message, llvm::ArrayRef<LogField> fields = {});

/// Writes an already formatted line (ending in a newline) to stderr the same way.
void writeLogLine(llvm::StringRef line);

} // namespace courier::transport

#endif // COURIER_TRANSPORT_LOG_H
