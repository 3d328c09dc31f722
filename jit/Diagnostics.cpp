// Diagnostics as mlir-opt prints them, and the source lines they point into.
#include "jit/Engine.h"
#include "jit/Internal.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

namespace courier {

namespace {

llvm::SourceMgr::DiagKind diagKind(llvm::StringRef severity) {
  if (severity == "warning")
    return llvm::SourceMgr::DK_Warning;
  if (severity == "note")
    return llvm::SourceMgr::DK_Note;
  if (severity == "remark")
    return llvm::SourceMgr::DK_Remark;
  return llvm::SourceMgr::DK_Error;
}

} // namespace

// The three shapes are those of mlir::SourceMgrDiagnosticHandler: with the source line, with
// a location only, and with none; llvm::SMDiagnostic prints each, so the text is the same.
std::string Diagnostic::render() const {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::SourceMgr::DiagKind kind = diagKind(severity);
  llvm::SourceMgr none;
  if (file.empty()) {
    llvm::SMDiagnostic(none, llvm::SMLoc(), "<unknown>", 0, -1, kind, message, "", {})
        .print(nullptr, os, /*ShowColors=*/false);
  } else if (!sourceLine) {
    std::string where = file + ":" + std::to_string(line) + ":" + std::to_string(column);
    llvm::SMDiagnostic(where, kind, message).print(nullptr, os, /*ShowColors=*/false);
  } else {
    llvm::SMDiagnostic(none, llvm::SMLoc(), file, static_cast<int>(line),
                       static_cast<int>(column) - 1, kind, message, *sourceLine, {})
        .print(nullptr, os, /*ShowColors=*/false);
  }
  return text;
}

std::string renderDiagnostics(llvm::ArrayRef<Diagnostic> diagnostics) {
  std::string text;
  for (const Diagnostic &d : diagnostics)
    text += d.render();
  return text;
}

llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> readSourceFile(llvm::StringRef path) {
  // Not a memory map: an editor rewriting the file in place would change the text under the
  // compile.
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file = llvm::MemoryBuffer::getFile(
      path, /*IsText=*/false, /*RequiresNullTerminator=*/false, /*IsVolatile=*/true);
  if (!file)
    return llvm::make_error<CompileError>(
        ("cannot read '" + path + "': " + file.getError().message()).str(),
        std::vector<Diagnostic>{});
  return std::move(*file);
}

SourceLines::SourceLines(llvm::StringRef name, llvm::StringRef text)
    : name(name.str()), text(text) {}

void SourceLines::attach(Diagnostic &d) {
  if (d.file != name || d.line == 0)
    return;
  if (starts.empty()) {
    starts.push_back(0);
    for (size_t i = 0; i < text.size(); ++i)
      if (text[i] == '\n')
        starts.push_back(i + 1);
  }
  if (d.line > starts.size())
    return;
  llvm::StringRef rest = text.substr(starts[d.line - 1]);
  llvm::StringRef lineText = rest.take_until([](char c) { return c == '\n'; });
  if (lineText.ends_with("\r"))
    lineText = lineText.drop_back();
  if (lineText.size() <= Diagnostic::kMaxSourceLineBytes)
    d.sourceLine = lineText.str();
}

} // namespace courier
