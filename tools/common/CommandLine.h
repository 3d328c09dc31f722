// Command-line conventions for the tools that parse with llvm::cl (courier-run, courier-opt),
// so that they answer as courier-serve and courier-executor do.
#ifndef COURIER_TOOLS_COMMON_COMMANDLINE_H
#define COURIER_TOOLS_COMMON_COMMANDLINE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace courier::tools {

/// Makes --version print Courier's version for `tool` (versionText in Version.h) rather than
/// LLVM's.
void setVersionPrinter(llvm::StringRef tool);

/// Registers -h as another name of --help, as the servers take it. Call before parsing.
void addShortHelp();

/// For a tool run with no arguments at all: prints `usage` (a few lines: what the tool does,
/// how it is called, where every option is listed) to stderr and returns true, so that
/// main() exits 1, instead of cl's "Not enough positional command line arguments".
bool printUsageIfNoArguments(int argc, llvm::StringRef usage);

/// Checks `argv` against the options registered with llvm::cl before cl parses it, and
/// refuses the first argument no option takes, "unknown option '--x' (see --help)", and an
/// option that needs a value given last without one, "option '--entry' needs a value".
/// Accepts what cl accepts: one or two dashes, "=value" or the next argument as the value,
/// prefix options (-O2), a lone "-" (standard input) and everything after "--".
llvm::Error checkOptions(int argc, char **argv);

} // namespace courier::tools

#endif // COURIER_TOOLS_COMMON_COMMANDLINE_H
