// Fuzzes the intake of MLIR text as the engine performs it before any pass runs
// (jit/Engine.cpp, Engine::Impl::compile): the nesting guard's scan of the text
// (jit/ParseGuard.h), the parse with every dialect the engine registers, the guard's bound on
// what aliases build, and the verifier, all on the compile stack, with each diagnostic
// rendered as the engine renders it. Hostile text must end in an error, never in a crash or
// an exhausted stack.
#include "tests/fuzz/FuzzSupport.h"

#include "dialect/Dialects.h"
#include "jit/ParseGuard.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"

#include <string>

using namespace courier;
using namespace courier::fuzz;

namespace {

const mlir::DialectRegistry &registry() {
  static const mlir::DialectRegistry instance = [] {
    mlir::DialectRegistry dialects;
    mlir::registerAllDialects(dialects);
    mlir::registerAllExtensions(dialects);
    mlir::registerAllToLLVMIRTranslations(dialects);
    registerCourierDialects(dialects);
    return dialects;
  }();
  return instance;
}

void intake(llvm::StringRef text) {
  std::optional<ParseRefusal> refusal = findParseRefusal(text);
  if (refusal) {
    if (refusal->offset > text.size() || refusal->line == 0 || refusal->column == 0)
      broken("a refusal placed outside the text");
    return;
  }
  mlir::MLIRContext context(registry(), mlir::MLIRContext::Threading::DISABLED);
  context.printOpOnDiagnostic(false);
  std::string rendered;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diagnostic) {
    llvm::raw_string_ostream os(rendered);
    os << diagnostic.getLocation() << ": " << diagnostic << "\n";
    for (const mlir::Diagnostic &note : diagnostic.getNotes())
      os << note.getLocation() << ": " << note << "\n";
    return mlir::success();
  });
  mlir::ParserConfig config(&context, /*verifyAfterParse=*/false);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, config, "fuzz.mlir");
  if (!module || mlir::failed(checkIRNesting(*module, "fuzz.mlir", text.size())))
    return;
  (void)mlir::verify(*module);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // A string, as every caller of the engine holds its text: MLIR's lexer reads the NUL that
  // follows it as the end of the buffer.
  std::string text = bytesOf(data, size).str();
  runOnCompileStack([&] { intake(text); });
  return 0;
}
