// LLVM IR -> optimised relocatable object, shared by cross-compile-targets and the engine.
#include "passes/Passes.h"

#include "llvm/IR/DiagnosticInfo.h"
#include "llvm/IR/DiagnosticPrinter.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"

namespace courier {

llvm::Error emitObjectFile(llvm::Module &module, llvm::TargetMachine &machine, unsigned optLevel,
                           llvm::SmallVectorImpl<char> &object) {
  // LLVM's default handler exits the process on a code generation error (for example a
  // call the target cannot lower); collect errors and report them instead.
  struct Errors {
    std::string first;
    unsigned count = 0;
  } errors;
  module.getContext().setDiagnosticHandlerCallBack(
      [](const llvm::DiagnosticInfo *info, void *context) {
        if (info->getSeverity() != llvm::DS_Error)
          return;
        auto &errors = *static_cast<Errors *>(context);
        if (errors.count++ == 0) {
          llvm::raw_string_ostream os(errors.first);
          llvm::DiagnosticPrinterRawOStream printer(os);
          info->print(printer);
        }
      },
      &errors);
  if (optLevel > 0) {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder builder(&machine);
    builder.registerModuleAnalyses(mam);
    builder.registerCGSCCAnalyses(cgam);
    builder.registerFunctionAnalyses(fam);
    builder.registerLoopAnalyses(lam);
    builder.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::OptimizationLevel level = optLevel == 1   ? llvm::OptimizationLevel::O1
                                    : optLevel == 2 ? llvm::OptimizationLevel::O2
                                                    : llvm::OptimizationLevel::O3;
    builder.buildPerModuleDefaultPipeline(level).run(module, mam);
  }
  llvm::raw_svector_ostream os(object);
  llvm::legacy::PassManager codegen;
  if (machine.addPassesToEmitFile(codegen, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    return llvm::createStringError("the target cannot emit object files");
  codegen.run(module);
  if (errors.count == 1)
    return llvm::createStringError(errors.first);
  if (errors.count > 1)
    return llvm::createStringError("%s (and %u more errors)", errors.first.c_str(),
                                   errors.count - 1);
  return llvm::Error::success();
}

} // namespace courier
