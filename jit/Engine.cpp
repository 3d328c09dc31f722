// The engine: parse, run the dispatch pipeline, emit and link the host object with ORC,
// run setup(), and call entries through generated packed wrappers.
#include "jit/Engine.h"
#include "jit/DiskCache.h"
#include "jit/Internal.h"
#include "jit/ParseGuard.h"
#include "jit/ShapeChecks.h"

#include "abi/ContentHash.h"
#include "dialect/Dialects.h"
#include "executor/KernelThreads.h"
#include "executor/RuntimeSymbols.h"
#include "passes/CompilePool.h"
#include "passes/Passes.h"
#include "passes/TargetModules.h"
#include "runtime/Runtime.h"
#include "transport/HttpBackend.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/ExecutionEngine/Orc/AbsoluteSymbols.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Host.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

namespace courier {

namespace {

using Clock = std::chrono::steady_clock;

/// How long a compile waits to learn an executor's CPU (Engine::Impl::executorCpu): a connect
/// and one small reply on a network that answers. Past it, code is for the generic CPU.
constexpr std::chrono::milliseconds kExecutorCpuConnectTimeout{1000};
constexpr std::chrono::milliseconds kExecutorCpuTimeout{2000};

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

/// Bumped whenever the compiled form changes, so stale disk-cache entries are not used (v5:
/// kernels vectorized, run on kernel threads, integer matmuls in pairs).
constexpr llvm::StringLiteral kCacheFormat = "courier-host-v5";

/// Code generation threads of the engines in this process that ask for `jobs`: a compile
/// runs on its own thread and jobs - 1 of these. Shared, so that engines with one option set
/// each (courier-serve's) do not each keep threads of their own.
std::shared_ptr<CompilePool> sharedCompilePool(unsigned jobs) {
  static std::mutex mutex;
  static std::map<unsigned, std::weak_ptr<CompilePool>> pools;
  std::lock_guard<std::mutex> lock(mutex);
  std::weak_ptr<CompilePool> &shared = pools[jobs];
  std::shared_ptr<CompilePool> pool = shared.lock();
  if (!pool) {
    pool = std::make_shared<CompilePool>(jobs - 1, kMinCompileStackBytes);
    shared = pool;
  }
  return pool;
}

/// Drops the entries of `cache` whose objects no live module holds.
template <typename Map> void dropExpired(Map &cache) {
  for (auto it = cache.begin(); it != cache.end();)
    it = it->second.expired() ? cache.erase(it) : std::next(it);
}

/// The DType of an element type: the one named by the type's MLIR spelling (the dtype table
/// in jit/Tensor.cpp is the only list). An index is an i64; a signed si8 holds what i8 does.
std::optional<DType> dtypeOf(mlir::Type type) {
  if (type.isIndex())
    return DType::I64;
  if (auto integer = mlir::dyn_cast<mlir::IntegerType>(type); integer && integer.isSigned())
    type = mlir::IntegerType::get(type.getContext(), integer.getWidth());
  std::string spelling;
  llvm::raw_string_ostream(spelling) << type;
  return parseDType(spelling);
}

std::optional<TensorSpec> specOf(mlir::Type type) {
  if (auto shaped = mlir::dyn_cast<mlir::ShapedType>(type)) {
    if (!mlir::isa<mlir::RankedTensorType, mlir::MemRefType>(type))
      return std::nullopt;
    if (auto memref = mlir::dyn_cast<mlir::MemRefType>(type);
        memref && !memref.getLayout().isIdentity())
      return std::nullopt;
    std::optional<DType> dtype = dtypeOf(shaped.getElementType());
    if (!dtype)
      return std::nullopt;
    TensorSpec spec{*dtype, {}, false};
    for (int64_t d : shaped.getShape())
      spec.shape.push_back(mlir::ShapedType::isDynamic(d) ? -1 : d);
    return spec;
  }
  std::optional<DType> dtype = dtypeOf(type);
  if (!dtype)
    return std::nullopt;
  return TensorSpec{*dtype, {}, true};
}

/// A diagnostic at the first place where `text` would make the parser recurse deeper than
/// kMaxParseDepth.
std::optional<Diagnostic> checkParseDepth(llvm::StringRef text, llvm::StringRef name) {
  std::optional<ParseRefusal> refused = findParseRefusal(text);
  if (!refused)
    return std::nullopt;
  Diagnostic d{name.str(), refused->line, refused->column, "error", refused->message, {}};
  SourceLines(name, text).attach(d);
  return d;
}

bool isLifecycleFunction(llvm::StringRef name) { return name == "setup" || name == "teardown"; }

/// The public functions of the host module that invoke can call, marked for a C interface
/// with read-only tensor arguments (inputs belong to the caller). Public functions invoke
/// cannot call are listed in `unsupported` with the reason.
std::vector<EntrySignature> prepareEntries(mlir::ModuleOp module,
                                           llvm::StringMap<std::string> &unsupported) {
  std::vector<EntrySignature> entries;
  for (auto fn : module.getOps<mlir::func::FuncOp>()) {
    if (!fn.isPublic() || fn.isExternal() || isLifecycleFunction(fn.getName()))
      continue;
    EntrySignature signature;
    signature.name = fn.getName().str();
    std::string reason;
    auto collect = [&](mlir::TypeRange types, llvm::StringRef what,
                       std::vector<TensorSpec> &specs) {
      for (auto [index, type] : llvm::enumerate(types)) {
        if (std::optional<TensorSpec> spec = specOf(type)) {
          specs.push_back(*spec);
        } else if (reason.empty()) {
          llvm::raw_string_ostream os(reason);
          os << what << " " << index << " has type '" << type << "'";
        }
      }
    };
    collect(fn.getArgumentTypes(), "argument", signature.inputs);
    collect(fn.getResultTypes(), "result", signature.outputs);
    for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
      auto name = fn.getArgAttrOfType<mlir::StringAttr>(i, "courier.name");
      signature.inputNames.push_back(name ? name.getValue().str() : std::string());
    }
    for (unsigned i = 0; i < fn.getNumResults(); ++i) {
      auto name = fn.getResultAttrOfType<mlir::StringAttr>(i, "courier.name");
      signature.outputNames.push_back(name ? name.getValue().str() : std::string());
    }
    if (!reason.empty()) {
      unsupported[fn.getName()] = reason;
      continue;
    }
    signature.dimEqualities = findDimEqualities(fn, module, signature.inputs);
    fn->setAttr(mlir::LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                mlir::UnitAttr::get(module.getContext()));
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      if (mlir::isa<mlir::TensorType>(fn.getArgumentTypes()[i]))
        fn.setArgAttr(i, "bufferization.writable", mlir::BoolAttr::get(module.getContext(), false));
    entries.push_back(std::move(signature));
  }
  return entries;
}

/// Adds `_courier_packed_<entry>(void **args)`: args[i] points to input i (a memref
/// descriptor, or the scalar's value), args[n_in + j] to storage for result j.
void addPackedWrapper(llvm::Module &module, const EntrySignature &entry) {
  llvm::Function *ciface = module.getFunction("_mlir_ciface_" + entry.name);
  llvm::Function *original = module.getFunction(entry.name);
  if (!ciface || !original)
    return;
  llvm::LLVMContext &ctx = module.getContext();
  auto *ptr = llvm::PointerType::getUnqual(ctx);
  auto *type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr}, false);
  auto *wrapper = llvm::Function::Create(type, llvm::Function::ExternalLinkage,
                                         kPackedPrefix + entry.name, module);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", wrapper));
  llvm::Value *args = wrapper->getArg(0);
  size_t numInputs = entry.inputs.size();
  auto slot = [&](size_t i) { return b.CreateLoad(ptr, b.CreateConstGEP1_64(ptr, args, i)); };

  llvm::SmallVector<llvm::Value *> params;
  llvm::Value *resultSlot = nullptr;
  llvm::Type *resultType = original->getReturnType();
  if (ciface->arg_size() == numInputs + 1) {
    resultSlot = b.CreateAlloca(resultType);
    params.push_back(resultSlot);
  }
  for (size_t i = 0; i < numInputs; ++i) {
    llvm::Value *p = slot(i);
    llvm::Type *paramType = ciface->getArg(params.size())->getType();
    params.push_back(entry.inputs[i].isScalar ? b.CreateLoad(paramType, p) : p);
  }
  llvm::Value *returned = b.CreateCall(ciface, params);
  if (resultSlot) {
    llvm::Value *value = b.CreateLoad(resultType, resultSlot);
    if (entry.outputs.size() == 1)
      b.CreateStore(value, slot(numInputs));
    else
      for (size_t j = 0; j < entry.outputs.size(); ++j)
        b.CreateStore(b.CreateExtractValue(value, j), slot(numInputs + j));
  } else if (!returned->getType()->isVoidTy()) {
    b.CreateStore(returned, slot(numInputs));
  }
  b.CreateRetVoid();
}

/// Collects diagnostics with their locations and the source lines they point into (in `text`
/// alone: a location naming another file never makes the engine read that file), and
/// forwards them to the user's sink.
class DiagnosticCollector {
public:
  DiagnosticCollector(mlir::MLIRContext &ctx, const std::function<void(const Diagnostic &)> &sink,
                      llvm::StringRef name, llvm::StringRef text)
      : ctx(ctx), sink(sink), lines(name, text) {
    id = ctx.getDiagEngine().registerHandler([this](mlir::Diagnostic &diag) {
      record(diag);
      for (mlir::Diagnostic &note : diag.getNotes())
        record(note);
      return mlir::success();
    });
  }
  ~DiagnosticCollector() { ctx.getDiagEngine().eraseHandler(id); }

  llvm::Error error(llvm::StringRef summary) {
    return llvm::make_error<CompileError>(summary.str(), std::move(diagnostics));
  }

  /// The module as its user named it (Engine::compile's `name`), not its MLIR symbol, for
  /// the summaries of failures.
  std::string moduleName;

  /// `failure` with the diagnostics recorded since error() made it, when it is a compile
  /// error (one found while other work was still reporting).
  llvm::Error withLater(llvm::Error failure) {
    return llvm::handleErrors(std::move(failure),
                              [&](std::unique_ptr<CompileError> e) -> llvm::Error {
                                for (Diagnostic &d : diagnostics)
                                  e->diagnostics.push_back(std::move(d));
                                diagnostics.clear();
                                return llvm::Error(std::move(e));
                              });
  }

private:
  void record(mlir::Diagnostic &diag) {
    Diagnostic d;
    diag.getLocation()->walk([&](mlir::Location loc) {
      if (auto file = mlir::dyn_cast<mlir::FileLineColLoc>(loc)) {
        d.file = file.getFilename().str();
        d.line = file.getLine();
        d.column = file.getColumn();
        return mlir::WalkResult::interrupt();
      }
      return mlir::WalkResult::advance();
    });
    switch (diag.getSeverity()) {
    case mlir::DiagnosticSeverity::Error:
      d.severity = "error";
      break;
    case mlir::DiagnosticSeverity::Warning:
      d.severity = "warning";
      break;
    case mlir::DiagnosticSeverity::Note:
      d.severity = "note";
      break;
    case mlir::DiagnosticSeverity::Remark:
      d.severity = "remark";
      break;
    }
    d.message = diag.str();
    lines.attach(d);
    if (sink)
      sink(d);
    diagnostics.push_back(std::move(d));
  }

  mlir::MLIRContext &ctx;
  const std::function<void(const Diagnostic &)> &sink;
  SourceLines lines;
  mlir::DiagnosticEngine::HandlerID id;
  std::vector<Diagnostic> diagnostics;
};

/// Times the passes, cross-compile-targets apart.
class PipelineObserver : public mlir::PassInstrumentation {
public:
  explicit PipelineObserver(PhaseTimes &times) : times(times) {}
  void runBeforePass(mlir::Pass *, mlir::Operation *) override { start = Clock::now(); }
  void runAfterPass(mlir::Pass *pass, mlir::Operation *) override {
    double ms = msSince(start);
    if (pass->getArgument() == "cross-compile-targets")
      times.crossCompile += ms;
    else
      times.passes += ms;
  }
  void runAfterPassFailed(mlir::Pass *pass, mlir::Operation *op) override {
    times.passes += msSince(start);
  }

private:
  PhaseTimes &times;
  Clock::time_point start;
};

/// Prints the IR after every pass of `pm` to stderr, the whole module each time.
void enablePrinting(mlir::PassManager &pm) {
  pm.enableIRPrinting(
      /*shouldPrintBeforePass=*/nullptr,
      /*shouldPrintAfterPass=*/[](mlir::Pass *, mlir::Operation *) { return true; },
      /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false);
}

mlir::DialectRegistry makeRegistry() {
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  registerCourierDialects(registry);
  return registry;
}

/// See setBeforeModuleCode.
std::atomic<void (*)(bool)> beforeModuleCode{nullptr};

/// What the ORC session of a module's host code reports while the module links (see
/// Engine::Impl::link), and the error a failed link becomes.
struct LinkReports {
  std::mutex mutex;
  bool linking = true;
  std::vector<std::string> missing; ///< Symbols the code needs that nothing defines.
  std::vector<std::string> other;

  /// The error of a link of module `name` that failed with `error`: which functions the code
  /// calls that nothing defines, by the names the IR gave them (`_mlir_ciface_f` is @f),
  /// when the session reported them, else `error` after what else it reported.
  llvm::Error failure(llvm::StringRef name, llvm::Error error) {
    std::lock_guard<std::mutex> lock(mutex);
    linking = false;
    if (missing.empty()) {
      std::string context = "linking '" + name.str() + "'";
      for (const std::string &reported : other)
        context += ": " + reported;
      return llvm::createStringError(context + ": " + llvm::toString(std::move(error)));
    }
    llvm::consumeError(std::move(error));
    std::vector<std::string> called;
    for (llvm::StringRef symbol : missing) {
      symbol.consume_front("_mlir_ciface_");
      std::string named = "@" + symbol.str();
      if (!llvm::is_contained(called, named))
        called.push_back(named);
    }
    return llvm::createStringError(
        "linking '" + name.str() + "': its host code calls " + llvm::join(called, ", ") +
        ", which nothing defines: not the module, nor what host code links against (Courier's "
        "runtime, libm, the compiler-runtime helpers, this process's libraries; "
        "docs/writing.md)");
  }

  /// Ends the link: an error if the session reported a symbol nothing defines.
  llvm::Error finish(llvm::StringRef name) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (missing.empty()) {
        linking = false;
        return llvm::Error::success();
      }
    }
    return failure(name, llvm::Error::success());
  }
};

} // namespace

void setBeforeModuleCode(void (*hook)(bool)) { beforeModuleCode = hook; }

namespace {
/// The engine calls setup() and teardown() as void(void): an error at either when it is
/// something else.
mlir::LogicalResult checkLifecycleFunctions(mlir::ModuleOp module) {
  for (llvm::StringRef lifecycle : {"setup", "teardown"}) {
    mlir::Operation *symbol = module.lookupSymbol(lifecycle);
    auto fn = llvm::dyn_cast_or_null<mlir::func::FuncOp>(symbol);
    if (symbol && (!fn || fn.getNumArguments() != 0 || fn.getNumResults() != 0)) {
      symbol->emitError() << "'" << lifecycle
                          << "' must be a func.func taking and returning nothing: the engine "
                             "calls it when the module is "
                          << (lifecycle == "setup" ? "loaded" : "unloaded");
      return mlir::failure();
    }
  }
  return mlir::success();
}
} // namespace

struct Engine::Impl {
  EngineOptions options;
  mlir::DialectRegistry registry = makeRegistry();
  std::mutex mutex;
  std::unordered_map<std::string, std::weak_ptr<Module>> memoryCache;
  /// The objects of live modules by fingerprint: target objects by their module's, host
  /// objects by hostKey. Guarded by `mutex`.
  std::unordered_map<std::string, std::weak_ptr<const CachedObject>> targetObjects;
  std::unordered_map<std::string, std::weak_ptr<const std::string>> hostObjects;
  /// Set on first use when jobs > 1.
  std::shared_ptr<CompilePool> compilePool;
  /// The host's code generation settings, detected once: they key caches and build JITs.
  std::optional<llvm::orc::JITTargetMachineBuilder> host;
  std::string hostError;
  /// With Isolation::Process: compiles modules in workers instead of here.
  std::unique_ptr<WorkerLauncher> launcher;
  /// The CPU each executor address reported when this engine first compiled for it (nullopt:
  /// it could not be asked), so that each is asked once.
  std::mutex executorCpusMutex;
  std::map<std::string, std::optional<transport::ExecutorCpu>> executorCpus;

  /// The CPU the executor at `address` reports, asked the first time only; nullopt when it
  /// cannot be asked (unreachable, too old to say, or no network here).
  std::optional<transport::ExecutorCpu> executorCpu(const std::string &address) {
    std::lock_guard<std::mutex> lock(executorCpusMutex);
    auto [it, inserted] = executorCpus.try_emplace(address);
    if (!inserted)
      return it->second;
    const transport::BackendOptions &backend = options.executors;
    llvm::Expected<transport::ExecutorCpu> asked = transport::askExecutorCpu(
        address, backend, kExecutorCpuConnectTimeout, kExecutorCpuTimeout);
    if (asked)
      it->second = std::move(*asked);
    else
      llvm::consumeError(asked.takeError()); // Code for the triple's generic CPU runs there.
    return it->second;
  }

  /// Gives every target module of `module` that names no CPU (or "native") and is sent to an
  /// executor (its address, or options.executorOverride) the CPU and features that executor
  /// reports, in its `catalyst.target`, so code for it is generated for them
  /// (getReportedTargetCpu); its own features come after them. A module whose executor cannot be
  /// asked, or runs another architecture, is left for the generic CPU of its triple. Returns what
  /// it set, which keys the disk cache beside the text.
  std::string setExecutorCpus(mlir::ModuleOp module) {
    std::string chosen;
    mlir::MLIRContext *ctx = module.getContext();
    for (mlir::ModuleOp target : getTargetModules(module)) {
      auto spec = target->getAttrOfType<mlir::DictionaryAttr>(
          dialect::catalyst::CatalystDialect::kTargetAttrName);
      auto named = spec ? spec.getAs<mlir::StringAttr>("cpu") : nullptr;
      if (!spec || (spec.contains("cpu") && !(named && named.getValue() == "native")))
        continue;
      std::string address =
          options.executorOverride.empty() ? getDispatchAddress(target) : options.executorOverride;
      if (address == kLocalAddress)
        continue;
      std::optional<transport::ExecutorCpu> reported = executorCpu(address);
      if (!reported)
        continue;
      std::string triple = llvm::sys::getProcessTriple();
      if (auto named = spec.getAs<mlir::StringAttr>("triple"); named && !named.empty())
        triple = named.str();
      if (llvm::Triple(triple).getArch() != llvm::Triple(reported->triple).getArch())
        continue;
      TargetCpu cpu = getReportedTargetCpu(triple, reported->cpu, reported->features);
      if (auto own = spec.getAs<mlir::StringAttr>("features"); own && !own.empty())
        cpu.features += (cpu.features.empty() ? "" : ",") + own.str();
      mlir::NamedAttrList entries(spec);
      entries.set("cpu", mlir::StringAttr::get(ctx, cpu.cpu));
      entries.set("features", mlir::StringAttr::get(ctx, cpu.features));
      target->setAttr(dialect::catalyst::CatalystDialect::kTargetAttrName,
                      entries.getDictionary(ctx));
      chosen += address + '\0' + cpu.cpu + '\0' + cpu.features + '\0';
    }
    return chosen;
  }

  /// The disk cache's directory; empty when there is none (disabled, or no default).
  std::string cacheDir() const {
    if (!options.diskCache)
      return "";
    return options.cacheDir.empty() ? defaultCacheDir() : options.cacheDir;
  }

  /// The key of a whole program: its text and the options that change its code.
  std::string cacheKey(llvm::StringRef text, llvm::StringRef cpu) const {
    Sha256Stream key;
    key << kCacheFormat << '\0' << llvm::sys::getProcessTriple() << '\0' << cpu << '\0'
        << options.optLevel << '\0' << options.extraPipeline << '\0' << text;
    return key.hex();
  }

  /// The key of host code once its target modules are compiled and dispatched (shipped by
  /// names that do not change with their objects, see targetObjectName): the module as
  /// printForFingerprint prints it, its entries, and the options that change its code.
  std::string hostKey(mlir::ModuleOp module, const std::vector<EntrySignature> &entries,
                      llvm::StringRef cpu) const {
    Sha256Stream key;
    key << kCacheFormat << "-host" << '\0' << LLVM_VERSION_STRING << '\0'
        << llvm::sys::getProcessTriple() << '\0' << cpu << '\0' << options.optLevel << '\0';
    for (const EntrySignature &entry : entries) {
      key << entry.name << '(';
      for (const TensorSpec &spec : entry.inputs)
        key << spec.str() << ',';
      key << ")->(";
      for (const TensorSpec &spec : entry.outputs)
        key << spec.str() << ',';
      key << ')';
    }
    key << '\0';
    printForFingerprint(module, key);
    return key.hex();
  }

  /// The object compiled from the target module with `fingerprint`: a live module's, else
  /// the disk cache's (checked, and kept in memory while this compile's module lives).
  std::shared_ptr<const CachedObject> findTarget(llvm::StringRef fingerprint, DiskCache *cache) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = targetObjects.find(fingerprint.str());
      if (it != targetObjects.end())
        if (std::shared_ptr<const CachedObject> live = it->second.lock())
          return live;
    }
    std::optional<CachedObject> stored = cache ? cache->loadTarget(fingerprint) : std::nullopt;
    if (!stored)
      return nullptr;
    auto object = std::make_shared<const CachedObject>(std::move(*stored));
    std::lock_guard<std::mutex> lock(mutex);
    targetObjects[fingerprint.str()] = object;
    return object;
  }

  /// The host object stored under `key`, as findTarget finds target objects.
  std::shared_ptr<const std::string> findHost(const std::string &key, DiskCache *cache) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = hostObjects.find(key);
      if (it != hostObjects.end())
        if (std::shared_ptr<const std::string> live = it->second.lock())
          return live;
    }
    std::optional<DiskCache::HostEntry> stored = cache ? cache->loadHost(key) : std::nullopt;
    if (!stored || !stored->targets.empty())
      return nullptr;
    auto object = std::make_shared<const std::string>(std::move(stored->object));
    std::lock_guard<std::mutex> lock(mutex);
    hostObjects[key] = object;
    return object;
  }

  /// What a compile keeps for the module it makes: the objects it ships, by name, and the
  /// objects the memory caches find while the module lives.
  struct Objects {
    std::vector<CachedObject> targets; ///< Each with its name.
    std::vector<std::shared_ptr<const void>> retained;
  };

  llvm::Expected<std::shared_ptr<Module>> compile(llvm::StringRef text, llvm::StringRef name,
                                                  const CompileOptions &compileOptions);
  /// A compile's deadline in a worker: the compile's own, else the engine's; none for 0.
  std::optional<std::chrono::milliseconds>
  compileTimeout(const CompileOptions &compileOptions) const;
  /// The host object of the parsed `module`: from the disk cache by `key`, else lowered
  /// (its target objects in `objects`) and stored there.
  llvm::Expected<std::string> compiledObject(const std::string &key, mlir::ModuleOp module,
                                             llvm::orc::JITTargetMachineBuilder &jtmb,
                                             const std::vector<EntrySignature> &entries,
                                             PhaseTimes &times, Objects &objects,
                                             DiagnosticCollector &diagnostics);
  /// Adds EngineOptions::extraPipeline's passes to `pm` (an error when it does not parse).
  llvm::Error addExtraPipeline(mlir::PassManager &pm) const;
  llvm::Expected<std::string> lower(mlir::ModuleOp module, llvm::orc::JITTargetMachineBuilder &jtmb,
                                    const std::vector<EntrySignature> &entries, PhaseTimes &times,
                                    DiskCache *cache, Objects &objects,
                                    DiagnosticCollector &diagnostics);
  /// The host code's object: found by hostKey, else compiled (lowerHost) and stored.
  llvm::Expected<std::string> hostObject(mlir::ModuleOp module,
                                         llvm::orc::JITTargetMachineBuilder &jtmb,
                                         const std::vector<EntrySignature> &entries,
                                         PhaseTimes &times, DiskCache *cache, Objects &objects,
                                         DiagnosticCollector &diagnostics);
  llvm::Expected<std::string> lowerHost(mlir::ModuleOp module,
                                        llvm::orc::JITTargetMachineBuilder &jtmb,
                                        const std::vector<EntrySignature> &entries,
                                        PhaseTimes &times, DiagnosticCollector &diagnostics);
  llvm::Expected<std::shared_ptr<Module>>
  link(std::string name, std::string object, llvm::orc::JITTargetMachineBuilder jtmb,
       std::vector<EntrySignature> entries, llvm::StringMap<std::string> unsupported,
       std::map<std::string, std::string> targetObjects,
       std::vector<std::shared_ptr<const void>> retained, PhaseTimes times);
};

Engine::Engine(EngineOptions options) : impl(std::make_unique<Impl>()) {
  impl->options = std::move(options);
  if (impl->options.kernelThreads)
    executor::setKernelThreads(impl->options.kernelThreads);
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
  if (llvm::Expected<llvm::orc::JITTargetMachineBuilder> detected =
          llvm::orc::JITTargetMachineBuilder::detectHost())
    impl->host = std::move(*detected);
  else
    impl->hostError = llvm::toString(detected.takeError());
  if (impl->options.isolation == Isolation::Process)
    impl->launcher = std::make_unique<WorkerLauncher>(impl->options);
}

Engine::~Engine() = default;

const EngineOptions &Engine::options() const { return impl->options; }

llvm::Expected<std::shared_ptr<Module>> Engine::compile(llvm::StringRef text, llvm::StringRef name,
                                                        const CompileOptions &compileOptions) {
  // An isolated module compiles in its worker, which runs the rest of this on such a stack.
  if (impl->launcher)
    return impl->compile(text, name, compileOptions);
  // Parsing, passes, translation and code generation recurse with the IR's depth: they run
  // on a stack sized for what checkParseDepth lets through, not on the caller's.
  std::optional<llvm::Expected<std::shared_ptr<Module>>> compiled;
  runOnCompileStack([&] { compiled.emplace(impl->compile(text, name, compileOptions)); });
  return std::move(*compiled);
}

llvm::Expected<std::shared_ptr<Module>>
Engine::compileFile(llvm::StringRef path, llvm::StringRef name, CompileOptions compileOptions) {
  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> file = readSourceFile(path);
  if (!file)
    return file.takeError();
  compileOptions.sourceName = path.str();
  return compile((*file)->getBuffer(), name.empty() ? llvm::sys::path::stem(path) : name,
                 compileOptions);
}

std::optional<std::chrono::milliseconds>
Engine::Impl::compileTimeout(const CompileOptions &compileOptions) const {
  std::optional<std::chrono::milliseconds> timeout = compileOptions.timeout;
  if (!timeout && options.compileTimeout.count() > 0)
    timeout = options.compileTimeout;
  if (timeout && timeout->count() <= 0)
    timeout.reset();
  return timeout;
}

llvm::Expected<std::string> Engine::Impl::compiledObject(const std::string &key,
                                                         mlir::ModuleOp module,
                                                         llvm::orc::JITTargetMachineBuilder &jtmb,
                                                         const std::vector<EntrySignature> &entries,
                                                         PhaseTimes &times, Objects &objects,
                                                         DiagnosticCollector &diagnostics) {
  // Opened, and its directory checked, by every compile that may use it: a directory
  // swapped since the last compile is refused like any other.
  std::unique_ptr<DiskCache> cache;
  if (std::string dir = cacheDir(); !dir.empty()) {
    llvm::Expected<std::unique_ptr<DiskCache>> opened = DiskCache::open(dir, options.cacheMaxBytes);
    if (!opened)
      return opened.takeError();
    cache = std::move(*opened);
  }
  if (std::optional<DiskCache::HostEntry> cached = cache ? cache->loadHost(key) : std::nullopt) {
    objects.targets = std::move(cached->targets);
    times.cacheHit = true;
    return std::move(cached->object);
  }
  llvm::Expected<std::string> lowered =
      lower(module, jtmb, entries, times, cache.get(), objects, diagnostics);
  if (lowered && cache)
    cache->storeHost(key, *lowered, objects.targets);
  return lowered;
}

llvm::Expected<std::shared_ptr<Module>>
Engine::Impl::compile(llvm::StringRef text, llvm::StringRef name,
                      const CompileOptions &compileOptions) {
  if (!host)
    return llvm::createStringError("detecting the host for code generation: %s", hostError.c_str());
  std::optional<llvm::orc::JITTargetMachineBuilder> jtmb = host;
  std::string key = cacheKey(text, jtmb->getCPU() + jtmb->getFeatures().getString());
  // A loaded module carries its name (in errors, in setup's diagnostics): the memory cache
  // keys on it too. The disk cache does not need to: the name changes no code.
  std::string memoryKey = key + '\0' + name.str();
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = memoryCache.find(memoryKey);
    if (it != memoryCache.end())
      if (std::shared_ptr<Module> cached = it->second.lock();
          cached && !ModuleInternals::impl(*cached).code->terminated())
        return cached;
  }
  auto remember = [&](llvm::Expected<std::shared_ptr<Module>> loaded) {
    if (!loaded)
      return loaded;
    std::lock_guard<std::mutex> lock(mutex);
    // Entries of unloaded modules are dropped here, so the map tracks live modules only.
    for (auto it = memoryCache.begin(); it != memoryCache.end();)
      it = it->second.expired() ? memoryCache.erase(it) : std::next(it);
    memoryCache[memoryKey] = *loaded;
    return loaded;
  };
  if (launcher)
    return remember(launcher->compile(options, text, name, compileOptions.sourceName,
                                      compileTimeout(compileOptions)));

  // Diagnostics name the text's file when the caller knows it, and say so in the summary.
  llvm::StringRef source = compileOptions.sourceName.empty() ? name : compileOptions.sourceName;
  if (std::optional<Diagnostic> tooDeep = checkParseDepth(text, source)) {
    if (options.diagnosticSink)
      options.diagnosticSink(*tooDeep);
    return llvm::make_error<CompileError>(("parsing '" + source + "' failed").str(),
                                          std::vector<Diagnostic>{*tooDeep});
  }
  PhaseTimes times;
  auto start = Clock::now();
  mlir::MLIRContext ctx(registry, mlir::MLIRContext::Threading::DISABLED);
  ctx.printOpOnDiagnostic(false);
  DiagnosticCollector diagnostics(ctx, options.diagnosticSink, source, text);
  diagnostics.moduleName = name.str();
  // Verified once the nesting of what aliases built is known to be bounded: verifiers
  // recurse on it.
  mlir::ParserConfig config(&ctx, /*verifyAfterParse=*/false);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, config, source);
  if (!module || mlir::failed(checkIRNesting(*module, source, text.size())) ||
      mlir::failed(mlir::verify(*module)))
    return diagnostics.error(("parsing '" + source + "' failed").str());
  if (mlir::failed(checkConstantSizes(*module, options.maxConstantBytes)))
    return diagnostics.error(("compiling '" + source + "' failed").str());
  if (mlir::failed(checkLifecycleFunctions(*module)))
    return diagnostics.error(("compiling '" + source + "' failed").str());
  // The executors' CPUs are part of what a program compiles to: the disk cache keys on them.
  if (std::string executorCpus = setExecutorCpus(*module); !executorCpus.empty())
    key = cacheKey(text, jtmb->getCPU() + jtmb->getFeatures().getString() + '\0' + executorCpus);
  llvm::StringMap<std::string> unsupported;
  std::vector<EntrySignature> entries = prepareEntries(*module, unsupported);
  times.parse = msSince(start);

  Objects objects;
  llvm::Expected<std::string> object =
      compiledObject(key, *module, *jtmb, entries, times, objects, diagnostics);
  if (!object)
    return object.takeError();
  // The module ships the bytes checked or built here, never what a file holds later.
  std::map<std::string, std::string> shipped;
  for (CachedObject &target : objects.targets)
    shipped[target.name] = std::move(target.bytes);

  return remember(link(name.str(), std::move(*object), std::move(*jtmb), std::move(entries),
                       std::move(unsupported), std::move(shipped), std::move(objects.retained),
                       times));
}

llvm::Error Engine::Impl::addExtraPipeline(mlir::PassManager &pm) const {
  if (options.extraPipeline.empty())
    return llvm::Error::success();
  registerPassesForParsing();
  std::string parseError;
  llvm::raw_string_ostream os(parseError);
  if (mlir::failed(mlir::parsePassPipeline(options.extraPipeline, pm, os)))
    return llvm::createStringError("invalid extra pass pipeline '%s': %s",
                                   options.extraPipeline.c_str(), parseError.c_str());
  return llvm::Error::success();
}

llvm::Expected<std::string>
Engine::Impl::lower(mlir::ModuleOp module, llvm::orc::JITTargetMachineBuilder &jtmb,
                    const std::vector<EntrySignature> &entries, PhaseTimes &times, DiskCache *cache,
                    Objects &objects, DiagnosticCollector &diagnostics) {
  mlir::MLIRContext &ctx = *module.getContext();
  mlir::PassManager pm(&ctx, mlir::ModuleOp::getOperationName());
  if (options.printIRAfterAll)
    enablePrinting(pm);
  if (llvm::Error error = addExtraPipeline(pm))
    return std::move(error);
  // A target module whose fingerprint a live module or the disk cache knows is not compiled;
  // one that is compiled is stored at once, so a later compile finds it even if this one
  // fails elsewhere.
  bool stored = false;
  auto use = [&](const TargetSlot &slot, std::shared_ptr<const CachedObject> object) {
    std::string name = targetObjectName(slot.index, slot.symbol);
    objects.targets.push_back({object->sha256, object->bytes, name});
    objects.retained.push_back(std::move(object));
    return name;
  };
  CrossCompileHooks hooks;
  hooks.lookup = [&](const TargetSlot &slot) -> std::optional<std::string> {
    std::shared_ptr<const CachedObject> found = findTarget(slot.fingerprint, cache);
    // One over the limit is compiled again, to be refused where the pass refuses objects.
    if (!found || (options.maxObjectBytes && found->bytes.size() > options.maxObjectBytes))
      return std::nullopt;
    times.targetsReused++;
    return use(slot, std::move(found));
  };
  hooks.sink = [&](const TargetSlot &slot, llvm::StringRef sha256,
                   llvm::StringRef bytes) -> llvm::Expected<std::string> {
    auto object = std::make_shared<const CachedObject>(CachedObject{sha256.str(), bytes.str()});
    if (cache) {
      cache->storeTarget(slot.fingerprint, *object);
      stored = true;
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      dropExpired(targetObjects);
      targetObjects[slot.fingerprint.str()] = object;
    }
    times.targetsCompiled++;
    return use(slot, std::move(object));
  };
  unsigned jobs =
      std::min(options.jobs ? options.jobs : defaultCompileJobs(), EngineOptions::kMaxJobs);
  if (jobs > 1) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!compilePool)
      compilePool = sharedCompilePool(jobs);
    hooks.pool = compilePool.get();
  }
  // Target objects are named before they exist, so host code compiles while their code is
  // generated; `deferred` then waits for them.
  std::function<mlir::LogicalResult()> deferred;
  hooks.name = [](const TargetSlot &slot) { return targetObjectName(slot.index, slot.symbol); };
  hooks.defer = [&](std::function<mlir::LogicalResult()> finish) { deferred = std::move(finish); };
  // Targets sent to an executor whatever their IR says are not compiled for this machine.
  buildDispatchPipeline(pm, {"", options.optLevel, options.maxObjectBytes, jobs, std::move(hooks),
                             /*localRunsHere=*/options.executorOverride.empty()});
  pm.addInstrumentation(std::make_unique<PipelineObserver>(times));
  mlir::LogicalResult dispatched = pm.run(module);
  llvm::Expected<std::string> object =
      mlir::succeeded(dispatched)
          ? hostObject(module, jtmb, entries, times, cache, objects, diagnostics)
          : diagnostics.error("lowering '" + diagnostics.moduleName + "' failed");
  mlir::LogicalResult generated = mlir::success();
  if (deferred) {
    auto start = Clock::now();
    generated = deferred();
    times.crossCompile += msSince(start);
  }
  if (stored)
    cache->evict();
  if (!object)
    return diagnostics.withLater(object.takeError());
  if (mlir::failed(generated))
    return diagnostics.error("compiling the target modules of '" + diagnostics.moduleName +
                             "' failed");
  return object;
}

llvm::Expected<std::string>
Engine::Impl::hostObject(mlir::ModuleOp module, llvm::orc::JITTargetMachineBuilder &jtmb,
                         const std::vector<EntrySignature> &entries, PhaseTimes &times,
                         DiskCache *cache, Objects &objects, DiagnosticCollector &diagnostics) {
  // What is left is host code, whose object an edit of a kernel does not change.
  std::string key = hostKey(module, entries, jtmb.getCPU() + jtmb.getFeatures().getString());
  if (std::shared_ptr<const std::string> found = findHost(key, cache);
      found && !(options.maxObjectBytes && found->size() > options.maxObjectBytes)) {
    times.hostReused = true;
    std::string object = *found;
    objects.retained.push_back(std::move(found));
    return object;
  }
  llvm::Expected<std::string> object = lowerHost(module, jtmb, entries, times, diagnostics);
  if (!object)
    return object.takeError();
  auto kept = std::make_shared<const std::string>(*object);
  {
    std::lock_guard<std::mutex> lock(mutex);
    dropExpired(hostObjects);
    hostObjects[key] = kept;
  }
  objects.retained.push_back(std::move(kept));
  if (cache)
    cache->storeHost(key, *object, {});
  return object;
}

llvm::Expected<std::string> Engine::Impl::lowerHost(mlir::ModuleOp module,
                                                    llvm::orc::JITTargetMachineBuilder &jtmb,
                                                    const std::vector<EntrySignature> &entries,
                                                    PhaseTimes &times,
                                                    DiagnosticCollector &diagnostics) {
  mlir::PassManager pm(module.getContext(), mlir::ModuleOp::getOperationName());
  if (options.printIRAfterAll)
    enablePrinting(pm);
  buildHostLowering(pm);
  pm.addInstrumentation(std::make_unique<PipelineObserver>(times));
  if (mlir::failed(pm.run(module)))
    return diagnostics.error("lowering '" + diagnostics.moduleName + "' failed");

  auto start = Clock::now();
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule = mlir::translateModuleToLLVMIR(module, llvmContext);
  if (!llvmModule)
    return diagnostics.error("translating the host module to LLVM IR failed");
  for (const EntrySignature &entry : entries)
    addPackedWrapper(*llvmModule, entry);
  llvm::Expected<std::unique_ptr<llvm::TargetMachine>> machine = jtmb.createTargetMachine();
  if (!machine)
    return machine.takeError();
  llvmModule->setTargetTriple((*machine)->getTargetTriple());
  llvmModule->setDataLayout((*machine)->createDataLayout());
  llvm::SmallString<0> object;
  if (llvm::Error error = emitObjectFile(*llvmModule, **machine, options.optLevel, object))
    return std::move(error);
  if (mlir::failed(checkHostObjectSize(module, object.size(), options.maxObjectBytes)))
    return diagnostics.error("compiling '" + diagnostics.moduleName + "' failed");
  times.link += msSince(start);
  return std::string(object);
}

namespace {

/// Makes `code`'s JIT (its session's errors go to `reportTo`) and links the host `object` of
/// module `name` into it: the runtime ABI,
/// libm and the compiler-runtime helpers resolve to those Courier links in (the same ones
/// kernels get), anything else to the process's libraries. Then finds each entry's packed
/// wrapper and C interface, and setup() and teardown() where the module has them.
llvm::Error linkHostObject(LocalCode &code, const std::string &name, const std::string &object,
                           llvm::orc::JITTargetMachineBuilder jtmb,
                           llvm::ArrayRef<EntrySignature> entries, LinkReports &reports,
                           void (*&setup)(), void (*&teardown)(),
                           llvm::orc::ExecutionSession::ErrorReporter reportTo) {
  llvm::Expected<std::unique_ptr<llvm::orc::LLJIT>> made =
      llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(jtmb)).create();
  if (!made)
    return made.takeError();
  code.jit = std::move(*made);
  llvm::orc::LLJIT &jit = *code.jit;
  jit.getExecutionSession().setErrorReporter(std::move(reportTo));
  auto linkFailure = [&](llvm::Error error) { return reports.failure(name, std::move(error)); };
  llvm::orc::JITDylib &main = jit.getMainJITDylib();
  llvm::orc::SymbolMap runtimeSymbols;
  for (const runtime::AbiSymbol &symbol : runtime::abiSymbols())
    runtimeSymbols[jit.mangleAndIntern(symbol.name)] = {
        llvm::orc::ExecutorAddr::fromPtr(symbol.address), llvm::JITSymbolFlags::Exported};
  for (const CourierRuntimeSymbol *symbol = courierRuntimeSymbols; symbol->name; ++symbol)
    if (symbol->address)
      runtimeSymbols.try_emplace(jit.mangleAndIntern(symbol->name),
                                 llvm::orc::ExecutorAddr::fromPtr(symbol->address),
                                 llvm::JITSymbolFlags::Exported);
  if (llvm::Error error = main.define(llvm::orc::absoluteSymbols(std::move(runtimeSymbols))))
    return error;
  llvm::Expected<std::unique_ptr<llvm::orc::DynamicLibrarySearchGenerator>> process =
      llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
          jit.getDataLayout().getGlobalPrefix());
  if (!process)
    return process.takeError();
  main.addGenerator(std::move(*process));
  if (llvm::Error error =
          jit.addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(object, name + ".o")))
    return linkFailure(std::move(error));
  for (const EntrySignature &entry : entries) {
    llvm::Expected<llvm::orc::ExecutorAddr> packed = jit.lookup((kPackedPrefix + entry.name).str());
    if (!packed)
      return linkFailure(packed.takeError());
    llvm::Expected<llvm::orc::ExecutorAddr> ciface = jit.lookup("_mlir_ciface_" + entry.name);
    if (!ciface)
      return linkFailure(ciface.takeError());
    code.functions[entry.name] = {packed->toPtr<void (*)(void **)>(), ciface->toPtr<void *>()};
  }
  for (auto [symbol, slot] : {std::pair{"setup", &setup}, std::pair{"teardown", &teardown}}) {
    if (llvm::Expected<llvm::orc::ExecutorAddr> addr = jit.lookup(symbol))
      *slot = addr->toPtr<void (*)()>();
    else
      llvm::consumeError(addr.takeError());
  }
  // A module without entries fails no lookup above, yet its code may still need what nothing
  // defines (setup's lookup failing for it reads as having no setup).
  return reports.finish(name);
}

} // namespace

llvm::Expected<std::shared_ptr<Module>>
Engine::Impl::link(std::string name, std::string object, llvm::orc::JITTargetMachineBuilder jtmb,
                   std::vector<EntrySignature> entries, llvm::StringMap<std::string> unsupported,
                   std::map<std::string, std::string> targetObjects,
                   std::vector<std::shared_ptr<const void>> retained, PhaseTimes times) {
  auto start = Clock::now();
  auto impl = std::make_unique<Module::Impl>();
  impl->name = std::move(name);
  impl->retained = std::move(retained);
  impl->entries = std::move(entries);
  impl->unsupported = std::move(unsupported);
  auto code = std::make_unique<LocalCode>();
  // A symbol the host code needs and nothing defines is reported to the session, not returned
  // by the lookup that fails for it (which says only that the entry's symbols could not be
  // made): while linking, the report is kept to say which function the code called.
  auto reports = std::make_shared<LinkReports>();
  auto reportTo = [reports](llvm::Error error) {
    std::lock_guard<std::mutex> lock(reports->mutex);
    if (!reports->linking) {
      llvm::logAllUnhandledErrors(std::move(error), llvm::errs(), "JIT session error: ");
      return;
    }
    llvm::handleAllErrors(
        std::move(error),
        [&](const llvm::orc::SymbolsNotFound &e) {
          for (const llvm::orc::SymbolStringPtr &symbol : e.getSymbols())
            reports->missing.push_back((*symbol).str());
        },
        [&](const llvm::ErrorInfoBase &e) { reports->other.push_back(e.message()); });
  };
  void (*setup)() = nullptr;
  // Set on the code once setup() ran: a module whose setup failed is not torn down.
  void (*teardown)() = nullptr;
  if (llvm::Error error = linkHostObject(*code, impl->name, object, std::move(jtmb), impl->entries,
                                         *reports, setup, teardown, reportTo))
    return std::move(error);
  times.link += msSince(start);

  runtime::ScopeOptions scopeOptions;
  scopeOptions.addressOverride = options.executorOverride;
  scopeOptions.backend = options.executors;
  scopeOptions.objects = std::move(targetObjects);
  code->scope = std::make_unique<runtime::ModuleScope>(scopeOptions);
  if (void (*hook)(bool) = beforeModuleCode.load())
    hook(setup != nullptr);
  if (setup) {
    start = Clock::now();
    runtime::ModuleScope::Entered entered(*code->scope);
    runtime::clearError();
    setup();
    if (llvm::Error error = runtime::takeError())
      return executorError("setup() of '" + impl->name + "' failed", std::move(error));
    times.ship = msSince(start);
  }
  code->teardown = teardown;
  impl->times = times;
  impl->code = std::move(code);
  return std::shared_ptr<Module>(new Module(std::move(impl)));
}

} // namespace courier
