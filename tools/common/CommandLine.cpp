// The unknown-option and missing-value checks and the version printer (CommandLine.h).
#include "tools/common/CommandLine.h"

#include "Version.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

namespace courier::tools {

namespace cl = llvm::cl;

void setVersionPrinter(llvm::StringRef tool) {
  static std::string name;
  name = tool.str();
  cl::SetVersionPrinter([](llvm::raw_ostream &os) { os << versionText(name) << "\n"; });
}

void addShortHelp() {
  auto &options = cl::getRegisteredOptions();
  auto help = options.find("help");
  if (help == options.end() || options.count("h"))
    return;
  static cl::alias shortHelp("h", cl::desc("Alias for --help"), cl::aliasopt(*help->second),
                             cl::NotHidden);
  // Listed with --help's own options, whatever category the tool shows.
  shortHelp.addCategory(help->second->Categories.front() ? *help->second->Categories.front()
                                                         : cl::getGeneralCategory());
}

bool printUsageIfNoArguments(int argc, llvm::StringRef usage) {
  if (argc > 1)
    return false;
  llvm::errs() << usage;
  return true;
}

namespace {

bool takesItsValueAttached(const cl::Option &option) {
  return option.getFormattingFlag() == cl::Prefix ||
         option.getFormattingFlag() == cl::AlwaysPrefix || (option.getMiscFlags() & cl::Grouping);
}

} // namespace

llvm::Error checkOptions(int argc, char **argv) {
  auto &options = cl::getRegisteredOptions();
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (arg == "--")
      break;
    if (arg.size() < 2 || arg[0] != '-')
      continue; // a positional argument, or "-" for standard input
    llvm::StringRef spelled = arg.split('=').first;
    llvm::StringRef name = spelled.drop_front(spelled.starts_with("--") ? 2 : 1);
    auto exact = options.find(name);
    if (exact != options.end()) {
      cl::Option &option = *exact->second;
      if (option.getValueExpectedFlag() == cl::ValueRequired && !arg.contains('=')) {
        if (i + 1 >= argc)
          return llvm::createStringError("option '" + spelled + "' needs a value");
        ++i; // cl takes the next argument as the value, whatever it looks like.
      }
      continue;
    }
    // As cl does: the longest registered name the argument starts with, if that option
    // takes its value attached (-O2) or groups single letters.
    bool found = false;
    for (llvm::StringRef prefix = name.drop_back(); !prefix.empty() && !found;
         prefix = prefix.drop_back()) {
      auto candidate = options.find(prefix);
      found = candidate != options.end() && takesItsValueAttached(*candidate->second);
    }
    if (!found)
      return llvm::createStringError("unknown option '" + spelled + "' (see --help)");
  }
  return llvm::Error::success();
}

} // namespace courier::tools
