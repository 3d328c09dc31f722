// cross-compile-targets: each nested `catalyst.target` module is lowered on its own and
// emitted as an object file for its triple, named by the SHA-256 of its bytes.
#include "abi/ContentHash.h"
#include "passes/Passes.h"
#include "passes/TargetModules.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"

#include <mutex>

namespace courier {
#define GEN_PASS_DEF_CROSSCOMPILETARGETS
#include "passes/Passes.h.inc"
} // namespace courier

using namespace mlir;

namespace courier {
namespace {

void initializeAllTargets() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
  });
}

/// A public kernel function, and whether its C interface returns results through a pointer.
struct Kernel {
  std::string name;
  bool hasResults;
  /// The signature table: version, input count, result count, then (rank, element bytes)
  /// for each input and each result.
  SmallVector<int64_t> signature;
};

/// Describes `fn`'s buffers for executors, which check launches against it (a launch that
/// disagrees would read or write past the kernel's buffers).
SmallVector<int64_t> signatureOf(func::FuncOp fn) {
  SmallVector<int64_t> table = {executor::kSignatureVersion,
                                static_cast<int64_t>(fn.getNumArguments()),
                                static_cast<int64_t>(fn.getNumResults())};
  for (Type type : llvm::concat<const Type>(fn.getArgumentTypes(), fn.getResultTypes())) {
    auto shaped = cast<ShapedType>(type);
    Type element = shaped.getElementType();
    table.push_back(shaped.getRank());
    table.push_back(element.isIndex() ? 8 : (element.getIntOrFloatBitWidth() + 7) / 8);
  }
  return table;
}

/// Adds the constant `_catalyst_signature_<fn>` holding `kernel.signature`.
void addSignatureTable(ModuleOp module, const Kernel &kernel) {
  OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
  auto type = LLVM::LLVMArrayType::get(builder.getI64Type(), kernel.signature.size());
  auto values = DenseElementsAttr::get(
      RankedTensorType::get({static_cast<int64_t>(kernel.signature.size())}, builder.getI64Type()),
      ArrayRef<int64_t>(kernel.signature));
  LLVM::GlobalOp::create(builder, module.getLoc(), type, /*isConstant=*/true,
                         LLVM::Linkage::External, executor::signatureSymbol(kernel.name), values);
}

/// Adds `_catalyst_pyface_<fn>(results, args)` forwarding to `_mlir_ciface_<fn>`: `args`
/// is an array of pointers to the input descriptors.
void addPyfaceEntry(ModuleOp module, const Kernel &kernel) {
  auto ciface = module.lookupSymbol<LLVM::LLVMFuncOp>("_mlir_ciface_" + kernel.name);
  MLIRContext *ctx = module.getContext();
  auto ptr = LLVM::LLVMPointerType::get(ctx);
  OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
  Location loc = ciface.getLoc();
  auto type = LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), {ptr, ptr});
  auto entry = LLVM::LLVMFuncOp::create(builder, loc, executor::entrySymbol(kernel.name), type);
  Block *body = entry.addEntryBlock(builder);
  builder.setInsertionPointToStart(body);
  SmallVector<Value> operands;
  if (kernel.hasResults)
    operands.push_back(body->getArgument(0));
  unsigned numInputs = ciface.getNumArguments() - operands.size();
  for (unsigned i = 0; i < numInputs; ++i) {
    Value slot = LLVM::GEPOp::create(builder, loc, ptr, ptr, body->getArgument(1),
                                     ArrayRef<LLVM::GEPArg>{static_cast<int32_t>(i)});
    operands.push_back(LLVM::LoadOp::create(builder, loc, ptr, slot));
  }
  LLVM::CallOp::create(builder, loc, ciface, operands);
  LLVM::ReturnOp::create(builder, loc, ValueRange());
}

struct CrossCompileTargets : impl::CrossCompileTargetsBase<CrossCompileTargets> {
  using Base::Base;

  void getDependentDialects(DialectRegistry &registry) const override {
    OpPassManager lowering(ModuleOp::getOperationName());
    buildBufferizeAndLowerToLLVM(lowering);
    lowering.getDependentDialects(registry);
    registerBuiltinDialectTranslation(registry);
    registerLLVMDialectTranslation(registry);
  }

  /// Set by the engine: objects go to it rather than to the workspace.
  ObjectSink sink;

  void runOnOperation() override {
    initializeAllTargets();
    std::string dir = sink || !workspace.empty() ? std::string(workspace) : defaultWorkspace();
    for (ModuleOp target : getTargetModules(getOperation())) {
      if (!target->hasAttr(catalyst::CatalystDialect::kTargetAttrName))
        continue;
      FailureOr<std::string> path = compile(target, dir);
      if (failed(path))
        return signalPassFailure();
      target->setAttr(catalyst::CatalystDialect::kObjectFileAttrName,
                      StringAttr::get(&getContext(), *path));
    }
  }

  /// Lowers, optimises and emits one target module; returns the object's path.
  FailureOr<std::string> compile(ModuleOp target, StringRef dir) {
    auto spec = target->getAttrOfType<DictionaryAttr>(catalyst::CatalystDialect::kTargetAttrName);
    auto tripleAttr = spec.getAs<StringAttr>("triple");
    llvm::Triple triple(tripleAttr && !tripleAttr.empty() ? tripleAttr.str()
                                                          : llvm::sys::getProcessTriple());
    std::string cpu = "generic", features;
    if (auto attr = spec.getAs<StringAttr>("cpu"))
      cpu = attr.str();
    if (auto attr = spec.getAs<StringAttr>("features"))
      features = attr.str();

    std::string lookupError;
    const llvm::Target *backend = llvm::TargetRegistry::lookupTarget(triple, lookupError);
    if (!backend)
      return target.emitError("unknown target triple '") << triple.str() << "': " << lookupError;
    // An unknown CPU or feature makes LLVM abort deep in code generation; refuse it here.
    std::unique_ptr<llvm::MCSubtargetInfo> subtarget(
        backend->createMCSubtargetInfo(triple, "", ""));
    if (!subtarget || !subtarget->isCPUStringValid(cpu))
      return target.emitError("unknown CPU '") << cpu << "' for '" << triple.str() << "'";
    for (StringRef feature : llvm::split(features, ',')) {
      feature = feature.trim();
      if (feature.empty())
        continue;
      StringRef name = feature.drop_front();
      if ((!feature.starts_with("+") && !feature.starts_with("-")) ||
          llvm::none_of(subtarget->getAllProcessorFeatures(),
                        [&](const llvm::SubtargetFeatureKV &kv) { return name == kv.Key; }))
        return target.emitError("unknown feature '")
               << feature << "' for '" << triple.str()
               << "' (features are +name or -name, comma-separated)";
    }
    std::unique_ptr<llvm::TargetMachine> machine(backend->createTargetMachine(
        triple, cpu, features, llvm::TargetOptions(), llvm::Reloc::PIC_, std::nullopt,
        optLevel >= 2 ? llvm::CodeGenOptLevel::Default : llvm::CodeGenOptLevel::None));
    if (!machine)
      return target.emitError("cannot create a code generator for '") << triple.str() << "'";

    // Lower a detached copy, so the host keeps the original for later passes.
    OwningOpRef<ModuleOp> copy = cast<ModuleOp>(target->clone());
    for (StringRef name :
         {catalyst::CatalystDialect::kTargetAttrName, catalyst::CatalystDialect::kDispatchAttrName,
          catalyst::CatalystDialect::kObjectFileAttrName})
      (*copy)->removeAttr(name);
    // Kernels run on their own: they cannot reach further executors themselves.
    WalkResult nested = copy->walk([](Operation *op) {
      if (!isa<catalyst::CatalystDialect, executor::ExecutorDialect>(op->getDialect()))
        return WalkResult::advance();
      op->emitOpError("is not supported inside a target module");
      return WalkResult::interrupt();
    });
    if (nested.wasInterrupted())
      return failure();
    SmallVector<Kernel> kernels;
    for (auto fn : copy->getOps<func::FuncOp>()) {
      if (!fn.isPublic() || fn.isExternal())
        continue;
      for (Type type : llvm::concat<const Type>(fn.getArgumentTypes(), fn.getResultTypes()))
        if (!isa<RankedTensorType, MemRefType>(type))
          return fn.emitError("kernel '")
                 << fn.getName() << "' takes or returns " << type
                 << "; kernel arguments and results must be ranked tensors or memrefs";
      fn->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(), UnitAttr::get(&getContext()));
      // A kernel reads its tensor arguments and never writes them: on the in-process
      // executor they are the caller's own buffers.
      for (unsigned i = 0; i < fn.getNumArguments(); ++i)
        if (isa<TensorType>(fn.getArgumentTypes()[i]))
          fn.setArgAttr(i, "bufferization.writable", BoolAttr::get(&getContext(), false));
      for (Type type : llvm::concat<const Type>(fn.getArgumentTypes(), fn.getResultTypes()))
        if (Type element = cast<ShapedType>(type).getElementType();
            !element.isIntOrFloat() && !element.isIndex())
          return fn.emitError("kernel '") << fn.getName() << "' has elements of type " << element
                                          << "; kernels take integers, floats and index";
      kernels.push_back({fn.getName().str(), fn.getNumResults() > 0, signatureOf(fn)});
    }
    if (kernels.empty())
      return target.emitError("target module has no public function to launch");

    // A `pipeline` key (Catalyst's) names the passes that lower this module instead.
    PassManager pm(&getContext(), ModuleOp::getOperationName());
    auto pipeline = spec.getAs<StringAttr>("pipeline");
    if (pipeline && !pipeline.empty()) {
      registerPassesForParsing();
      std::string why;
      llvm::raw_string_ostream os(why);
      if (failed(parsePassPipeline(pipeline.getValue(), pm, os))) {
        // The parser's first line says what is wrong; the rest repeats the text.
        StringRef first = StringRef(why).split('\n').first;
        return target.emitError("'catalyst.target' pipeline '")
               << pipeline.getValue() << "' is not a pass pipeline: "
               << first.substr(
                      first.find("error: ") == StringRef::npos ? 0 : first.find("error: ") + 7);
      }
    } else {
      buildBufferizeAndLowerToLLVM(pm);
    }
    if (failed(pm.run(*copy)))
      return target.emitError("lowering the target module to LLVM failed");
    // A named pipeline may stop short of the LLVM dialect, or drop the C interfaces the
    // entries call.
    StringRef lowering = pipeline && !pipeline.empty() ? pipeline.getValue() : "the default";
    WalkResult unlowered = copy->walk([&](Operation *op) {
      if (op == copy->getOperation() || isa<LLVM::LLVMDialect>(op->getDialect()))
        return WalkResult::advance();
      target.emitError("lowering by '")
          << lowering << "' left '" << op->getName()
          << "' in the module; the pipeline must lower it to the LLVM dialect";
      return WalkResult::interrupt();
    });
    if (unlowered.wasInterrupted())
      return failure();
    for (const Kernel &kernel : kernels)
      if (!copy->lookupSymbol<LLVM::LLVMFuncOp>("_mlir_ciface_" + kernel.name))
        return target.emitError("lowering by '")
               << lowering << "' left no '_mlir_ciface_" << kernel.name
               << "'; the pipeline must keep llvm.emit_c_interface when it lowers func.func";
    for (const Kernel &kernel : kernels) {
      addPyfaceEntry(*copy, kernel);
      addSignatureTable(*copy, kernel);
    }

    llvm::LLVMContext llvmContext;
    std::unique_ptr<llvm::Module> module =
        translateModuleToLLVMIR(*copy, llvmContext, target.getSymName().value_or("target"));
    if (!module)
      return target.emitError("translating the target module to LLVM IR failed");
    module->setTargetTriple(triple);
    module->setDataLayout(machine->createDataLayout());
    SmallString<0> object;
    if (llvm::Error error = emitObjectFile(*module, *machine, optLevel, object))
      return target.emitError("emitting the object for '")
             << triple.str() << "' failed: " << llvm::toString(std::move(error));
    // Refused before it is written: the workspace is a cache that outlives this compile.
    if (maxObjectBytes && object.size() > maxObjectBytes)
      return target.emitError("'")
             << target->getName() << "'" << (target.getSymName() ? " @" : "")
             << target.getSymName().value_or("") << " compiled to an object of " << object.size()
             << " bytes, more than the limit of " << uint64_t(maxObjectBytes)
             << " (max-object-bytes)";
    if (!sink)
      return write(target, dir, object);
    llvm::Expected<std::string> name = sink(sha256Hex(object), object);
    if (!name)
      return target.emitError("storing the object for '")
             << triple.str() << "' failed: " << llvm::toString(name.takeError());
    return *name;
  }

  /// Writes the object as <dir>/<sha256>.o, atomically: a concurrent writer of the same
  /// bytes, or a reader, never sees a torn file. A file already there is kept only if it
  /// holds these bytes: its name is no proof of its content.
  FailureOr<std::string> write(ModuleOp target, StringRef dir, StringRef object) {
    std::string hash = sha256Hex(object);
    SmallString<256> path(dir);
    llvm::sys::path::append(path, hash + ".o");
    if (llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> existing =
            llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
        existing && (*existing)->getBuffer() == object)
      return std::string(path);
    if (std::error_code ec = llvm::sys::fs::create_directories(dir))
      return target.emitError("cannot create workspace '") << dir << "': " << ec.message();
    // writeToOutput writes a temporary file and renames it into place.
    if (llvm::Error error = llvm::writeToOutput(path, [&](llvm::raw_ostream &os) {
          os << object;
          return llvm::Error::success();
        }))
      return target.emitError("writing '") << path << "' failed: " << toString(std::move(error));
    return std::string(path);
  }
};

} // namespace

std::unique_ptr<Pass> createCrossCompileTargets(const CrossCompileTargetsOptions &options,
                                                ObjectSink sink) {
  auto pass = std::make_unique<CrossCompileTargets>(options);
  pass->sink = std::move(sink);
  return pass;
}

} // namespace courier
