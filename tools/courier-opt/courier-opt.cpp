// courier-opt: mlir-opt with Courier's dialects, passes and pipelines added. --help-courier
// lists Courier's own alone; --help lists everything mlir-opt has besides.
#include "dialect/Dialects.h"
#include "passes/Passes.h"
#include "tools/common/CommandLine.h"

#include "mlir/Debug/Counter.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/Timing.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace {

constexpr const char *kOverview = "Courier optimizer driver";
constexpr llvm::StringRef kCourierPipelines[] = {"courier-pipeline", "courier-lower-to-llvm"};

/// Courier's pipelines, passes and dialects, and nothing of upstream's. Called before any
/// upstream pass is registered, so the registry lists Courier's alone.
int printCourierHelp() {
  courier::registerCourierPassesAndPipelines();
  mlir::DialectRegistry courierDialects;
  courier::registerCourierDialects(courierDialects);
  llvm::outs() << "OVERVIEW: " << kOverview << ": Courier's pipelines, passes and dialects\n\n"
               << "USAGE: courier-opt [options] <input file>\n\n"
               << "Courier's dialects: ";
  llvm::interleaveComma(courierDialects.getDialectNames(), llvm::outs());
  llvm::outs() << "\n\nPass Pipelines:\n";
  // MLIR lists registered pipelines only inside --help, so they are named here (a test
  // checks each is registered and listed).
  for (llvm::StringRef name : kCourierPipelines) {
    const mlir::PassPipelineInfo *pipeline = mlir::PassPipelineInfo::lookup(name);
    if (!pipeline) {
      llvm::errs() << "courier-opt: error: pipeline '" << name << "' is not registered\n";
      return 1;
    }
    pipeline->printHelpStr(/*indent=*/2, /*descIndent=*/35);
  }
  mlir::printRegisteredPasses();
  llvm::outs() << "\nEvery mlir-opt option, upstream pass and dialect works as well: --help "
                  "lists them all.\n";
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (llvm::any_of(llvm::ArrayRef(argv + 1, argv + argc), [](llvm::StringRef arg) {
        return arg == "--help-courier" || arg == "-help-courier";
      }))
    return printCourierHelp();

  mlir::registerAllPasses();
  courier::registerCourierPassesAndPipelines();
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  courier::registerCourierDialects(registry);

  // What mlir::registerAndParseCLIOptions registers, so the arguments can be checked between
  // registering and parsing (a test holds this list to mlir-opt's).
  static cl::opt<std::string> inputFilename(cl::Positional, cl::desc("<input file>"),
                                            cl::init("-"));
  static cl::opt<std::string> outputFilename("o", cl::desc("Output filename"),
                                             cl::value_desc("filename"), cl::init("-"));
  static cl::opt<bool> helpCourier("help-courier",
                                   cl::desc("List Courier's pipelines, passes and dialects alone"));
  mlir::MlirOptMainConfig::registerCLOptions(registry);
  mlir::registerAsmPrinterCLOptions();
  mlir::registerMLIRContextCLOptions();
  mlir::registerPassManagerCLOptions();
  mlir::registerDefaultTimingManagerCLOptions();
  mlir::tracing::DebugCounter::registerCLOptions();
  courier::tools::setVersionPrinter("courier-opt");
  courier::tools::addShortHelp();
  if (llvm::Error error = courier::tools::checkOptions(argc, argv)) {
    llvm::errs() << "courier-opt: error: " << llvm::toString(std::move(error)) << "\n";
    return 1;
  }

  std::string helpHeader = std::string(kOverview) +
                           " (--help-courier lists Courier's passes alone)\nAvailable Dialects: ";
  {
    llvm::raw_string_ostream os(helpHeader);
    llvm::interleaveComma(registry.getDialectNames(), os);
  }
  cl::ParseCommandLineOptions(argc, argv, helpHeader);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, inputFilename, outputFilename, registry));
}
