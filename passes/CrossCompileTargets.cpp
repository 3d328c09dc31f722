// cross-compile-targets: each nested `catalyst.target` module is lowered on its own and
// emitted as an object file for its triple, named by the SHA-256 of its bytes; code
// generation runs on a pool of threads, and a cache may supply objects it already holds.
#include "abi/ContentHash.h"
#include "passes/CompilePool.h"
#include "passes/Passes.h"
#include "passes/TargetModules.h"

#include "mlir/Dialect/OpenMP/OpenMPDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/OpenMP/OpenMPToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/GlobalVariable.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/Transforms/Utils/ModuleUtils.h"

#include <limits>
#include <map>
#include <mutex>
#include <tuple>

namespace courier {
#define GEN_PASS_DEF_CROSSCOMPILETARGETS
#include "passes/Passes.h.inc"
} // namespace courier

using namespace mlir;

namespace courier {
namespace {

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
  SmallVector<int64_t> table = {dialect::executor::kSignatureVersion,
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
                         LLVM::Linkage::External, dialect::executor::signatureSymbol(kernel.name),
                         values);
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
  auto entry =
      LLVM::LLVMFuncOp::create(builder, loc, dialect::executor::entrySymbol(kernel.name), type);
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

/// Adds the features record (abi/KernelABI.h) naming `required`, unless it is empty: an
/// unallocated note section, which the object's code never refers to.
void addFeaturesRecord(llvm::Module &module, const llvm::Triple &triple,
                       ArrayRef<std::string> required) {
  if (required.empty())
    return;
  std::string list = llvm::join(required, ",");
  llvm::endianness order =
      triple.isLittleEndian() ? llvm::endianness::little : llvm::endianness::big;
  std::string note;
  auto word = [&](uint32_t value) {
    char bytes[4];
    llvm::support::endian::write32(bytes, value, order);
    note.append(bytes, sizeof(bytes));
  };
  auto padded = [&](StringRef text) {
    note += text;
    note.append(llvm::alignTo(text.size(), 4) - text.size(), '\0');
  };
  word(sizeof(COURIER_NOTE_NAME));
  word(static_cast<uint32_t>(list.size()));
  word(COURIER_NOTE_FEATURES);
  padded(StringRef(COURIER_NOTE_NAME, sizeof(COURIER_NOTE_NAME)));
  padded(list);
  llvm::Constant *bytes =
      llvm::ConstantDataArray::getString(module.getContext(), note, /*AddNull=*/false);
  auto *record =
      new llvm::GlobalVariable(module, bytes->getType(), /*isConstant=*/true,
                               llvm::GlobalValue::PrivateLinkage, bytes, "courier.features");
  record->setSection(COURIER_FEATURES_SECTION);
  record->setAlignment(llvm::Align(4));
  // Excluded from the image: the section is neither allocated nor loaded.
  record->setMetadata(llvm::LLVMContext::MD_exclude, llvm::MDNode::get(module.getContext(), {}));
  llvm::appendToCompilerUsed(module, {record});
}

/// Bumped whenever what this pass makes of a module changes in a way its fingerprint does
/// not see (the default lowering, the entries it adds, the features record), so older cached
/// objects are not used.
constexpr llvm::StringLiteral kFingerprintFormat = "courier-target-v2";

/// A triple, CPU and features checked once per run, for every module that names them.
struct TargetConfig {
  llvm::Triple triple;
  std::string cpu, features;
  /// What objects for them record they need (getRequiredFeatures).
  std::vector<std::string> required;
  const llvm::Target *backend = nullptr;
  /// Why the three are refused (the diagnostic each module naming them gets); empty if not.
  std::string refusal;
};

/// One target module on its way to an object.
struct TargetJob {
  /// Valid during the pass only: a deferred finish (CrossCompileHooks::defer) runs after
  /// dispatch-executor-targets erased it, and uses what is kept below.
  ModuleOp target;
  unsigned index = 0; ///< Among the host's target modules.
  std::optional<Location> loc;
  std::string symbol;      ///< Empty if the module has none.
  std::string description; ///< "'builtin.module' @dev", for messages.
  const TargetConfig *config = nullptr;
  std::string fingerprint;
  /// Set when the cache holds the object: the name to annotate the module with.
  std::optional<std::string> cachedName;
  /// The module in LLVM IR, in a context of its own, for the code generation task.
  std::unique_ptr<llvm::LLVMContext> llvmContext;
  std::unique_ptr<llvm::Module> llvmModule;
  /// What the code generation task made: the object, or why there is none.
  SmallString<0> object;
  std::string failure;
};

/// What a run leaves behind for its finish, which may run after the pass (see
/// CrossCompileHooks::defer): the jobs, the configurations their code generation reads, and
/// the batch generating it (destroyed first, waiting for its tasks).
struct TargetResults {
  std::map<std::tuple<std::string, std::string, std::string>, TargetConfig> configs;
  std::vector<TargetJob> jobs;
  uint64_t maxObjectBytes = 0;
  ObjectSink sink;
  std::string dir; ///< The workspace, without a sink.
  std::unique_ptr<CompilePool> ownPool;
  std::unique_ptr<CompileBatch> batch;

  /// Reports what code generation made of `job`, at its module, and hands its object to the
  /// sink (or the workspace); returns the name the module is annotated with.
  FailureOr<std::string> finish(TargetJob &job);

  /// Waits for code generation, then finishes every job not failed already, in order.
  LogicalResult finishAll(llvm::ArrayRef<bool> failed) {
    batch->wait();
    bool ok = true;
    for (size_t i = 0; i < jobs.size(); ++i)
      if (!(i < failed.size() && failed[i]))
        ok &= succeeded(finish(jobs[i]));
    return success(ok);
  }
};

struct CrossCompileTargets : impl::CrossCompileTargetsBase<CrossCompileTargets> {
  using Base::Base;

  void getDependentDialects(DialectRegistry &registry) const override {
    OpPassManager lowering(ModuleOp::getOperationName());
    buildBufferizeAndLowerToLLVM(lowering);
    lowering.getDependentDialects(registry);
    registerBuiltinDialectTranslation(registry);
    registerLLVMDialectTranslation(registry);
    // Kernels' parallel loops (courier-parallelize-kernels) become calls of the OpenMP runtime.
    registerOpenMPDialectTranslation(registry);
  }

  /// Set by the engine: where objects go and come from, and where code generation runs.
  CrossCompileHooks hooks;

  struct Lowering {
    std::unique_ptr<PassManager> pm;
    std::string error; ///< Why the pipeline does not parse, when `pm` is null.
  };
  /// Set during runOnOperation (members, so the pass stays copyable): what the run makes,
  /// and the lowering pass managers it builds once.
  TargetResults *results = nullptr;
  std::map<std::string, Lowering> *lowerings = nullptr;

  void runOnOperation() override {
    initializeTargets();
    auto state = std::make_shared<TargetResults>();
    state->maxObjectBytes = maxObjectBytes;
    state->sink = hooks.sink;
    state->dir = hooks.sink || !workspace.empty() ? std::string(workspace) : defaultWorkspace();
    std::vector<TargetJob> &jobs = state->jobs;
    for (ModuleOp target : getTargetModules(getOperation())) {
      if (!target->hasAttr(dialect::catalyst::CatalystDialect::kTargetAttrName))
        continue;
      TargetJob &job = jobs.emplace_back();
      job.target = target;
      job.index = static_cast<unsigned>(jobs.size() - 1);
      job.loc = target.getLoc();
      job.symbol = target.getSymName().value_or("").str();
      job.description = ("'" + target->getName().getStringRef() + "'" +
                         (job.symbol.empty() ? "" : " @") + job.symbol)
                            .str();
    }
    if (jobs.empty())
      return;
    std::map<std::string, Lowering> lowered;
    results = state.get();
    lowerings = &lowered;

    CompilePool *pool = hooks.pool;
    unsigned threads = this->jobs ? this->jobs : defaultCompileJobs();
    if (!pool && threads > 1 && jobs.size() > 1)
      pool = (state->ownPool = std::make_unique<CompilePool>(
                  std::min<size_t>(threads, jobs.size()) - 1, /*stackBytes=*/0))
                 .get();
    state->batch = std::make_unique<CompileBatch>(pool);

    std::vector<bool> failed(jobs.size(), false);
    {
      // Diagnostics come out in the order of the modules, whichever step raised them: a
      // module's lowering runs before the code generation of one above it has finished.
      ParallelDiagnosticHandler ordered(&getContext());
      for (size_t i = 0; i < jobs.size(); ++i) {
        ordered.setOrderIDForThread(i);
        TargetJob &job = jobs[i];
        failed[i] = mlir::failed(prepare(job));
        if (!failed[i] && job.llvmModule)
          state->batch->add([&job, level = unsigned(optLevel)] { generate(job, level); });
        ordered.eraseOrderIDForThread();
      }
      lowerings = nullptr;
      results = nullptr;
      if (hooks.defer && hooks.name && !llvm::is_contained(failed, true)) {
        // Names that do not wait for the objects: host code compiles while they are made.
        for (TargetJob &job : jobs)
          job.target->setAttr(dialect::catalyst::CatalystDialect::kObjectFileAttrName,
                              StringAttr::get(&getContext(), job.cachedName
                                                                 ? *job.cachedName
                                                                 : hooks.name(slotOf(job))));
        hooks.defer([state] { return state->finishAll({}); });
        return;
      }
      state->batch->wait();
      for (size_t i = 0; i < jobs.size(); ++i) {
        if (failed[i])
          continue;
        ordered.setOrderIDForThread(i);
        FailureOr<std::string> name = state->finish(jobs[i]);
        if (mlir::failed(name))
          failed[i] = true;
        else
          jobs[i].target->setAttr(dialect::catalyst::CatalystDialect::kObjectFileAttrName,
                                  StringAttr::get(&getContext(), *name));
        ordered.eraseOrderIDForThread();
      }
    }
    if (llvm::is_contained(failed, true))
      signalPassFailure();
  }

  /// The triple, CPU and features `target` is compiled for (getTargetCpu), checked (once per
  /// run for each three).
  const TargetConfig &configFor(ModuleOp target) {
    TargetCpu chosen = getTargetCpu(target, localRunsHere);
    std::string tripleName = chosen.triple, cpu = chosen.cpu, features = chosen.features;
    auto [it, inserted] = results->configs.try_emplace({tripleName, cpu, features});
    TargetConfig &config = it->second;
    if (!inserted)
      return config;
    config.triple = llvm::Triple(tripleName);
    config.cpu = cpu;
    config.features = features;
    llvm::raw_string_ostream refusal(config.refusal);
    const llvm::Triple &triple = config.triple;
    std::string lookupError;
    config.backend = llvm::TargetRegistry::lookupTarget(triple, lookupError);
    if (!config.backend) {
      refusal << "unknown target triple '" << triple.str() << "': " << lookupError;
      return config;
    }
    // An unknown CPU or feature makes LLVM abort deep in code generation; refuse it here.
    std::unique_ptr<llvm::MCSubtargetInfo> subtarget(
        config.backend->createMCSubtargetInfo(triple, "", ""));
    if (!subtarget || !subtarget->isCPUStringValid(cpu)) {
      refusal << "unknown CPU '" << cpu << "' for '" << triple.str() << "'";
      return config;
    }
    for (StringRef feature : llvm::split(features, ',')) {
      feature = feature.trim();
      if (feature.empty())
        continue;
      StringRef name = feature.drop_front();
      if ((!feature.starts_with("+") && !feature.starts_with("-")) ||
          llvm::none_of(subtarget->getAllProcessorFeatures(),
                        [&](const llvm::SubtargetFeatureKV &kv) { return name == kv.Key; })) {
        refusal << "unknown feature '" << feature << "' for '" << triple.str()
                << "' (features are +name or -name, comma-separated)";
        return config;
      }
    }
    config.required = getRequiredFeatures(chosen);
    return config;
  }

  /// The pass manager that lowers modules by `pipeline` (empty: the default), built once per
  /// run; null, with an error at `target`, if `pipeline` does not parse.
  PassManager *loweringFor(ModuleOp target, StringRef pipeline) {
    auto [it, inserted] = lowerings->try_emplace(pipeline.str());
    Lowering &lowering = it->second;
    if (inserted) {
      lowering.pm = std::make_unique<PassManager>(&getContext(), ModuleOp::getOperationName());
      if (pipeline.empty()) {
        buildBufferizeAndLowerToLLVM(*lowering.pm);
        // Verified once, after the whole lowering (prepare): between its passes the
        // verifier cost a tenth of a small module's lowering. A named pipeline's passes are
        // the user's choice, and checked one by one.
        lowering.pm->enableVerifier(false);
      } else {
        registerPassesForParsing();
        std::string why;
        llvm::raw_string_ostream os(why);
        if (failed(parsePassPipeline(pipeline, *lowering.pm, os))) {
          // The parser's first line says what is wrong; the rest repeats the text.
          StringRef first = StringRef(why).split('\n').first;
          size_t at = first.find("error: ");
          lowering.error =
              ("'catalyst.target' pipeline '" + pipeline +
               "' is not a pass pipeline: " + first.substr(at == StringRef::npos ? 0 : at + 7))
                  .str();
          lowering.pm.reset();
        }
      }
    }
    if (!lowering.pm)
      target.emitError(lowering.error);
    return lowering.pm.get();
  }

  /// The public functions of a target module's copy, each marked for a C interface and
  /// its tensor arguments read-only, with what its entry and signature table need.
  LogicalResult collectKernels(ModuleOp copy, SmallVectorImpl<Kernel> &kernels) {
    for (auto fn : copy.getOps<func::FuncOp>()) {
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
    return success();
  }

  /// Checks that `pipeline` lowered the copy wholly to the LLVM dialect (OpenMP's ops aside)
  /// and kept the C interface of every kernel.
  LogicalResult checkLowered(ModuleOp target, ModuleOp copy, StringRef pipeline,
                             ArrayRef<Kernel> kernels) {
    // A named pipeline may stop short of the LLVM dialect, or drop the C interfaces the
    // entries call.
    std::string lowering =
        pipeline.empty() ? "the default pipeline" : ("pipeline '" + pipeline + "'").str();
    WalkResult unlowered = copy.walk([&](Operation *op) {
      // OpenMP's ops (the default pipeline's parallel loops) translate to runtime calls.
      if (op == copy.getOperation() || isa<LLVM::LLVMDialect, omp::OpenMPDialect>(op->getDialect()))
        return WalkResult::advance();
      target.emitError("lowering by ")
          << lowering << " left '" << op->getName()
          << "' in the module; the pipeline must lower it to the LLVM dialect";
      return WalkResult::interrupt();
    });
    if (unlowered.wasInterrupted())
      return failure();
    for (const Kernel &kernel : kernels)
      if (!copy.lookupSymbol<LLVM::LLVMFuncOp>("_mlir_ciface_" + kernel.name))
        return target.emitError("lowering by ")
               << lowering << " left no '_mlir_ciface_" << kernel.name
               << "'; the pipeline must keep llvm.emit_c_interface when it lowers func.func";
    return success();
  }

  /// Checks a target module and, unless the cache holds its object, lowers a copy of it to
  /// LLVM IR for code generation.
  LogicalResult prepare(TargetJob &job) {
    ModuleOp target = job.target;
    job.config = &configFor(target);
    if (!job.config->refusal.empty())
      return target.emitError(job.config->refusal);
    auto spec =
        target->getAttrOfType<DictionaryAttr>(dialect::catalyst::CatalystDialect::kTargetAttrName);
    auto pipelineAttr = spec.getAs<StringAttr>("pipeline");
    StringRef pipeline = pipelineAttr ? pipelineAttr.getValue() : StringRef();

    // Lower a detached copy, so the host keeps the original for later passes.
    OwningOpRef<ModuleOp> copy = cast<ModuleOp>(target->clone());
    for (StringRef name : {dialect::catalyst::CatalystDialect::kTargetAttrName,
                           dialect::catalyst::CatalystDialect::kDispatchAttrName,
                           dialect::catalyst::CatalystDialect::kObjectFileAttrName})
      (*copy)->removeAttr(name);
    // Kernels run on their own: they cannot reach further executors themselves.
    WalkResult nested = copy->walk([](Operation *op) {
      if (!isa<dialect::catalyst::CatalystDialect, dialect::executor::ExecutorDialect>(
              op->getDialect()))
        return WalkResult::advance();
      op->emitOpError("is not supported inside a target module");
      return WalkResult::interrupt();
    });
    if (nested.wasInterrupted())
      return failure();
    job.fingerprint = fingerprint(*copy, *job.config, pipeline);

    SmallVector<Kernel> kernels;
    if (failed(collectKernels(*copy, kernels)))
      return failure();
    if (kernels.empty())
      return target.emitError("target module has no public function to launch");
    if (hooks.lookup)
      if ((job.cachedName = hooks.lookup(slotOf(job))))
        return success();

    // A `pipeline` key (Catalyst's) names the passes that lower this module instead.
    PassManager *pm = loweringFor(target, pipeline);
    if (!pm)
      return failure();
    if (failed(pm->run(*copy)) || failed(verify(*copy)))
      return target.emitError("lowering the target module to LLVM failed");
    if (failed(checkLowered(target, *copy, pipeline, kernels)))
      return failure();
    for (const Kernel &kernel : kernels) {
      addPyfaceEntry(*copy, kernel);
      addSignatureTable(*copy, kernel);
    }

    // Translated here, where the MLIR context is used by one thread only; code generation
    // needs nothing of it.
    job.llvmContext = std::make_unique<llvm::LLVMContext>();
    job.llvmModule =
        translateModuleToLLVMIR(*copy, *job.llvmContext, target.getSymName().value_or("target"));
    if (!job.llvmModule)
      return target.emitError("translating the target module to LLVM IR failed");
    job.llvmModule->setTargetTriple(job.config->triple);
    addFeaturesRecord(*job.llvmModule, job.config->triple, job.config->required);
    return success();
  }

  static TargetSlot slotOf(const TargetJob &job) {
    return {job.index, job.symbol, job.fingerprint};
  }

  /// The fingerprint of `copy` (see TargetSlot).
  std::string fingerprint(ModuleOp copy, const TargetConfig &config, StringRef pipeline) {
    Sha256Stream hash;
    hash << kFingerprintFormat << '\0' << LLVM_VERSION_STRING << '\0' << config.triple.str() << '\0'
         << config.cpu << '\0' << config.features << '\0' << pipeline << '\0' << optLevel << '\0';
    printForFingerprint(copy, hash);
    return hash.hex();
  }

  /// Optimises and emits one module's object, on a thread of the pool: the module, its
  /// context and its target machine are the task's alone.
  static void generate(TargetJob &job, unsigned optLevel) {
    const TargetConfig &config = *job.config;
    std::unique_ptr<llvm::TargetMachine> machine(config.backend->createTargetMachine(
        config.triple, config.cpu, config.features, llvm::TargetOptions(), llvm::Reloc::PIC_,
        std::nullopt,
        optLevel >= 2 ? llvm::CodeGenOptLevel::Default : llvm::CodeGenOptLevel::None));
    if (!machine) {
      job.failure = "cannot create a code generator for '" + config.triple.str() + "'";
    } else {
      job.llvmModule->setDataLayout(machine->createDataLayout());
      if (llvm::Error error = emitObjectFile(*job.llvmModule, *machine, optLevel, job.object))
        job.failure = "emitting the object for '" + config.triple.str() +
                      "' failed: " + llvm::toString(std::move(error));
    }
    job.llvmModule.reset();
    job.llvmContext.reset();
  }
};

/// Writes the object as <dir>/<sha256>.o, atomically: a concurrent writer of the same bytes,
/// or a reader, never sees a torn file. A file already there is kept only if it holds these
/// bytes: its name is no proof of its content. Errors are reported at `loc`.
FailureOr<std::string> writeObject(Location loc, StringRef dir, StringRef object) {
  std::string hash = sha256Hex(object);
  SmallString<256> path(dir);
  llvm::sys::path::append(path, hash + ".o");
  if (llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> existing =
          llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
      existing && (*existing)->getBuffer() == object)
    return std::string(path);
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return emitError(loc, "cannot create workspace '") << dir << "': " << ec.message();
  // writeToOutput writes a temporary file and renames it into place.
  if (llvm::Error error = llvm::writeToOutput(path, [&](llvm::raw_ostream &os) {
        os << object;
        return llvm::Error::success();
      }))
    return emitError(loc, "writing '") << path << "' failed: " << toString(std::move(error));
  return std::string(path);
}

FailureOr<std::string> TargetResults::finish(TargetJob &job) {
  if (job.cachedName)
    return *job.cachedName;
  Location loc = *job.loc;
  if (!job.failure.empty())
    return emitError(loc, job.failure);
  StringRef object = job.object;
  // Refused before it is written: the workspace is a cache that outlives this compile.
  if (maxObjectBytes && object.size() > maxObjectBytes)
    return emitError(loc) << job.description << " compiled to an object of " << object.size()
                          << " bytes, more than the limit of " << maxObjectBytes
                          << " (max-object-bytes)";
  if (!sink)
    return writeObject(loc, dir, object);
  llvm::Expected<std::string> name =
      sink({job.index, job.symbol, job.fingerprint}, sha256Hex(object), object);
  if (!name)
    return emitError(loc, "storing the object for '")
           << job.config->triple.str() << "' failed: " << llvm::toString(name.takeError());
  return *name;
}

} // namespace

void printForFingerprint(Operation *op, llvm::raw_ostream &os) {
  // Set one by one: the defaults follow the command line (--mlir-elide-elementsattrs-if-
  // larger, say), and a fingerprint that left anything out could name another object.
  OpPrintingFlags flags;
  flags.enableDebugInfo(false)
      .printGenericOpForm()
      .skipRegions(false)
      .elideLargeElementsAttrs(std::numeric_limits<int64_t>::max())
      .elideLargeResourceString(std::numeric_limits<int64_t>::max())
      .printNameLocAsPrefix(false)
      .printValueUsers(false);
  op->print(os, flags);
}

std::unique_ptr<Pass> createCrossCompileTargets(const CrossCompileTargetsOptions &options,
                                                CrossCompileHooks hooks) {
  auto pass = std::make_unique<CrossCompileTargets>(options);
  pass->hooks = std::move(hooks);
  return pass;
}

} // namespace courier
