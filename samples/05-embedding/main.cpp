// Embeds the engine: compiles the program in a file (square.mlir, or the path given), whose
// kernel runs on the in-process executor, and calls it with a buffer of the application's
// own, read in place. README.md walks through it.
#include <courier/Engine.h>
#include <courier/Version.h>

#include <cstdio>
#include <vector>

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "square.mlir";
  std::printf("%s\n", courier::versionText("embedding").c_str());

  courier::Engine engine;
  // A compile error comes back as a CompileError whose text is every diagnostic as mlir-opt
  // prints it, each naming `path`.
  llvm::Expected<std::shared_ptr<courier::Module>> module = engine.compileFile(path);
  if (!module) {
    std::fprintf(stderr, "%s\n", llvm::toString(module.takeError()).c_str());
    return 1;
  }

  std::vector<float> x = {1.5f, 2, 3};
  // A TensorRef borrows `x`: no copy is made, and `x` must outlive the call.
  auto outputs = (*module)->invoke("main", {courier::TensorRef::of<float>({3}, x)});
  if (!outputs) {
    llvm::handleAllErrors(
        outputs.takeError(),
        [](const courier::EngineError &e) {
          std::fprintf(stderr, "invoke failed (%s): %s\n", courier::toString(e.kind).str().c_str(),
                       e.message.c_str());
        },
        [](const llvm::ErrorInfoBase &e) {
          std::fprintf(stderr, "invoke failed: %s\n", e.message().c_str());
        });
    return 1;
  }
  // Results are Tensors the application owns; view<float>() reads them as floats.
  llvm::ArrayRef<float> y = (*outputs)[0].view<float>();
  std::printf("square([1.5, 2, 3]) = [%g, %g, %g]\n", y[0], y[1], y[2]);
  return 0;
}
