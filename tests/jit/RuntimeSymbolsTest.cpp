// The calls the default lowering can emit and the symbols Courier gives kernels and host code
// (executor/RuntimeSymbols.c) agree: every external symbol of every object the pipeline
// makes of every math and complex op (and of the conversions that need helpers) is in the
// table, and every libm function and helper in the table is one the pipeline calls.
#include "TestSupport.h"

#include "dialect/Dialects.h"
#include "executor/RuntimeSymbols.h"
#include "passes/Passes.h"
#include "runtime/Runtime.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

#include <set>
#include <string>

using namespace courier;

namespace {

constexpr const char *kUnary[] = {
    "absf", "acos",  "acosh", "asin", "asinh", "atan",      "atanh", "cbrt", "ceil",  "cos",
    "cosh", "erf",   "erfc",  "exp",  "exp2",  "expm1",     "floor", "log",  "log10", "log1p",
    "log2", "round", "rsqrt", "sin",  "sinh",  "roundeven", "sqrt",  "tan",  "tanh",  "trunc"};
constexpr const char *kBinary[] = {"atan2", "copysign", "powf"};
constexpr const char *kPredicates[] = {"isfinite", "isinf", "isnan", "isnormal"};
constexpr const char *kIntegerUnary[] = {"absi", "ctlz", "cttz", "ctpop"};
constexpr const char *kComplexUnary[] = {"abs",   "angle", "conj",  "cos", "exp",
                                         "expm1", "log",   "log1p", "neg", "rsqrt",
                                         "sign",  "sin",   "sqrt",  "tan", "tanh"};
constexpr const char *kComplexBinary[] = {"add", "sub", "mul", "div", "pow", "atan2", "eq", "neq"};

/// One public function per op and type, elementwise on tensor<5x...> (ops on tensors become
/// linalg and are vectorized, as users' are); complex ops, which take scalars only, inside a
/// linalg.generic.
std::string corpus() {
  std::string text;
  int n = 0;
  auto function = [&](const std::string &params, const std::string &results,
                      const std::string &body) {
    text += "func.func public @f" + std::to_string(n++) + "(" + params + ") -> (" + results +
            ") {\n" + body + "}\n";
  };
  for (std::string type : {"f32", "f64", "f16", "bf16"}) {
    std::string t = "tensor<5x" + type + ">", b = "tensor<5xi1>", i = "tensor<5xi32>";
    for (const char *op : kUnary)
      function("%x: " + t, t,
               "%r = math." + std::string(op) + " %x : " + t + "\nreturn %r : " + t + "\n");
    for (const char *op : kBinary)
      function("%x: " + t + ", %y: " + t, t,
               "%r = math." + std::string(op) + " %x, %y : " + t + "\nreturn %r : " + t + "\n");
    for (const char *op : kPredicates)
      function("%x: " + t, b,
               "%r = math." + std::string(op) + " %x : " + t + "\nreturn %r : " + b + "\n");
    function("%x: " + t + ", %y: " + t, t,
             "%r = math.fma %x, %y, %y : " + t + "\nreturn %r : " + t + "\n");
    function("%x: " + t + ", %y: " + t, t,
             "%r = math.clampf %x to [%y, %y] : " + t + "\nreturn %r : " + t + "\n");
    function("%x: " + t + ", %n: " + i, t,
             "%r = math.fpowi %x, %n : " + t + ", " + i + "\nreturn %r : " + t + "\n");
    function("%x: " + t, t + ", " + t,
             "%s, %c = math.sincos %x : " + t + "\nreturn %s, %c : " + t + ", " + t + "\n");
    function("%x: " + t + ", %y: " + t, t,
             "%r = arith.remf %x, %y : " + t + "\nreturn %r : " + t + "\n");
    // Conversions to and from every other float type, which is where helpers are called.
    for (std::string other : {"f32", "f64", "f16", "bf16"}) {
      // f16 and bf16 have the same width: neither converts to the other directly.
      bool sameWidth = (type == "f16" && other == "bf16") || (type == "bf16" && other == "f16");
      if (other == type || sameWidth)
        continue;
      std::string o = "tensor<5x" + other + ">";
      bool wider = (other == "f64") || (other == "f32" && type != "f64");
      function("%x: " + t, o,
               "%r = arith." + std::string(wider ? "extf" : "truncf") + " %x : " + t + " to " + o +
                   "\nreturn %r : " + o + "\n");
    }
    for (std::string integer : {"i32", "i64"}) {
      std::string it = "tensor<5x" + integer + ">";
      function("%x: " + t, it,
               "%r = arith.fptosi %x : " + t + " to " + it + "\nreturn %r : " + it + "\n");
      function("%x: " + it, t,
               "%r = arith.sitofp %x : " + it + " to " + t + "\nreturn %r : " + t + "\n");
    }
  }
  for (std::string type : {"i8", "i32", "i64"}) {
    std::string t = "tensor<5x" + type + ">";
    function("%x: " + t + ", %n: " + t, t,
             "%r = math.ipowi %x, %n : " + t + "\nreturn %r : " + t + "\n");
    for (const char *op : kIntegerUnary)
      function("%x: " + t, t,
               "%r = math." + std::string(op) + " %x : " + t + "\nreturn %r : " + t + "\n");
  }
  for (std::string type : {"f32", "f64"}) {
    std::string t = "tensor<5x" + type + ">", c = "complex<" + type + ">";
    auto generic = [&](const std::string &body, const std::string &resultType) {
      std::string r = "tensor<5x" + resultType + ">";
      function("%a: " + t + ", %b: " + t, r,
               "%e = tensor.empty() : " + r +
                   "\n%r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, "
                   "affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = "
                   "[\"parallel\"]} ins(%a, %b : " +
                   t + ", " + t + ") outs(%e : " + r + ") {\n^bb0(%x: " + type + ", %y: " + type +
                   ", %o: " + resultType + "):\n%z = complex.create %x, %y : " + c +
                   "\n%w = complex.create %y, %x : " + c + "\n" + body + "} -> " + r +
                   "\nreturn %r : " + r + "\n");
    };
    auto yieldReal = "%re = complex.re %v : " + c + "\nlinalg.yield %re : " + type + "\n";
    for (const char *op : kComplexUnary) {
      std::string name = op;
      if (name == "abs" || name == "angle")
        generic("%v = complex." + name + " %z : " + c + "\nlinalg.yield %v : " + type + "\n", type);
      else
        generic("%v = complex." + name + " %z : " + c + "\n" + yieldReal, type);
    }
    for (const char *op : kComplexBinary) {
      std::string name = op;
      if (name == "eq" || name == "neq")
        generic("%v = complex." + name + " %z, %w : " + c + "\nlinalg.yield %v : i1\n", "i1");
      else
        generic("%v = complex." + name + " %z, %w : " + c + "\n" + yieldReal, type);
    }
    generic("%three = arith.constant 3 : i32\n%v = complex.powi %z, %three : " + c + ", i32\n" +
                yieldReal,
            type);
  }
  return text;
}

/// The undefined symbols of an ELF object.
std::set<std::string> imports(llvm::StringRef bytes) {
  std::set<std::string> names;
  auto object = llvm::object::ObjectFile::createObjectFile(llvm::MemoryBufferRef(bytes, "object"));
  REQUIRE(testing::ok(object));
  for (const llvm::object::SymbolRef &symbol : (*object)->symbols()) {
    llvm::Expected<uint32_t> flags = symbol.getFlags();
    REQUIRE(testing::ok(flags));
    if (!(*flags & llvm::object::SymbolRef::SF_Undefined))
      continue;
    llvm::Expected<llvm::StringRef> name = symbol.getName();
    REQUIRE(testing::ok(name));
    if (!name->empty())
      names.insert(name->str());
  }
  return names;
}

struct Lowered {
  std::set<std::string> kernel, host;
};

/// Lowers the corpus as a target module for `cpu` on x86-64 and as host code for the same CPU,
/// and collects what each object imports.
Lowered lowerCorpus(const std::string &cpu) {
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  registerCourierDialects(registry);
  mlir::MLIRContext context(registry);
  std::string functions = corpus();
  std::string text = "module @host {\n" + functions +
                     "module @dev attributes {catalyst.target = {triple = "
                     "\"x86_64-unknown-linux-gnu\", cpu = \"" +
                     cpu + "\"}, catalyst.dispatch = {address = \"local\"}} {\n" + functions +
                     "}\n}\n";
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, &context);
  REQUIRE(module);

  Lowered lowered;
  PipelineOptions options;
  options.hooks.sink = [&](const TargetSlot &, llvm::StringRef sha256,
                           llvm::StringRef object) -> llvm::Expected<std::string> {
    std::set<std::string> names = imports(object);
    lowered.kernel.insert(names.begin(), names.end());
    return sha256.str();
  };
  mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
  buildCourierPipeline(pm, options);
  REQUIRE(mlir::succeeded(pm.run(*module)));

  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule = mlir::translateModuleToLLVMIR(*module, llvmContext);
  REQUIRE(llvmModule);
  llvm::Triple triple("x86_64-unknown-linux-gnu");
  std::string error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  REQUIRE(target);
  std::unique_ptr<llvm::TargetMachine> machine(
      target->createTargetMachine(triple, cpu, "", {}, llvm::Reloc::PIC_));
  llvmModule->setTargetTriple(triple);
  llvmModule->setDataLayout(machine->createDataLayout());
  llvm::SmallVector<char, 0> object;
  llvm::Error emitted = emitObjectFile(*llvmModule, *machine, 2, object);
  REQUIRE(!emitted);
  lowered.host = imports(llvm::StringRef(object.data(), object.size()));
  return lowered;
}

} // namespace

#if defined(__x86_64__)
TEST_CASE("every call the default lowering emits is a runtime symbol, and every libm function "
          "and helper in the table is one it emits",
          "[jit][runtime-symbols]") {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  std::set<std::string> table, emittable;
  for (const CourierRuntimeSymbol *symbol = courierRuntimeSymbols; symbol->name; ++symbol) {
    table.insert(symbol->name);
    if (symbol->kind == COURIER_SYMBOL_LIBM || symbol->kind == COURIER_SYMBOL_HELPER)
      emittable.insert(symbol->name);
  }
  std::set<std::string> abi;
  for (const runtime::AbiSymbol &symbol : runtime::abiSymbols())
    abi.insert(symbol.name);

  std::set<std::string> emitted;
  // A CPU without F16C or AVX-512 (the most helpers) and this machine's (the fewest).
  for (std::string cpu : {"x86-64", "native"}) {
    Lowered lowered = lowerCorpus(cpu == "native" ? llvm::sys::getHostCPUName().str() : cpu);
    for (const std::string &name : lowered.kernel) {
      INFO("a kernel for " << cpu << " imports " << name);
      CHECK(table.count(name));
    }
    for (const std::string &name : lowered.host) {
      INFO("host code for " << cpu << " imports " << name);
      CHECK((table.count(name) || abi.count(name)));
    }
    emitted.insert(lowered.kernel.begin(), lowered.kernel.end());
    emitted.insert(lowered.host.begin(), lowered.host.end());
  }
  for (const std::string &name : emittable) {
    INFO(name << " is in the table but nothing the default lowering emits calls it");
    CHECK(emitted.count(name));
  }
}
#endif
