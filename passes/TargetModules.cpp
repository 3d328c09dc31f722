// Helpers the dispatch passes share.
#include "passes/TargetModules.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Host.h"

#include <mutex>

using namespace mlir;

namespace courier {

SmallVector<ModuleOp> getTargetModules(ModuleOp host) {
  SmallVector<ModuleOp> targets;
  for (auto nested : host.getBody()->getOps<ModuleOp>())
    if (nested->hasAttr(dialect::catalyst::CatalystDialect::kTargetAttrName) ||
        nested->hasAttr(dialect::catalyst::CatalystDialect::kDispatchAttrName))
      targets.push_back(nested);
  return targets;
}

std::string getDispatchAddress(ModuleOp target) {
  auto dispatch =
      target->getAttrOfType<DictionaryAttr>(dialect::catalyst::CatalystDialect::kDispatchAttrName);
  if (dispatch)
    if (auto address = dispatch.getAs<StringAttr>("address"); address && !address.empty())
      return address.str();
  return kLocalAddress.str();
}

SmallVector<std::string> getProgramExecutors(ModuleOp host) {
  SmallVector<std::string> addresses;
  for (ModuleOp target : getTargetModules(host))
    if (target->hasAttr(dialect::catalyst::CatalystDialect::kDispatchAttrName))
      if (std::string address = getDispatchAddress(target); !llvm::is_contained(addresses, address))
        addresses.push_back(std::move(address));
  return addresses;
}

void initializeTargets() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
  });
}

namespace {

/// This machine's features as a feature string: "+avx2,+fma,-avx512f,...".
const std::string &hostFeatures() {
  static const std::string features = [] {
    std::string text;
    for (const auto &feature : llvm::sys::getHostCPUFeatures()) {
      if (!text.empty())
        text += ',';
      text += (feature.getValue() ? "+" : "-") + feature.getKey().str();
    }
    return text;
  }();
  return features;
}

/// The instruction-set features enabled for `cpu` and `features` on `triple`: the feature bits
/// LLVM sets for them less the tuning ones the CPU's model sets (which say how to schedule, not
/// which instructions exist). Empty when LLVM cannot describe the subtarget.
llvm::StringSet<> enabledIsaFeatures(const llvm::Target &backend, const llvm::Triple &triple,
                                     StringRef cpu, StringRef features) {
  llvm::StringSet<> enabled;
  std::unique_ptr<llvm::MCSubtargetInfo> subtarget(
      backend.createMCSubtargetInfo(triple, cpu, features));
  if (!subtarget)
    return enabled;
  llvm::FeatureBitset tuning;
  for (const llvm::SubtargetSubTypeKV &model : subtarget->getAllProcessorDescriptions())
    if (cpu == model.Key)
      tuning = model.TuneImplies.getAsBitset();
  const llvm::FeatureBitset &bits = subtarget->getFeatureBits();
  for (const llvm::SubtargetFeatureKV &feature : subtarget->getAllProcessorFeatures())
    if (bits.test(feature.Value) && !tuning.test(feature.Value))
      enabled.insert(feature.Key);
  return enabled;
}

const llvm::Target *lookupBackend(const llvm::Triple &triple) {
  initializeTargets();
  std::string error;
  return llvm::TargetRegistry::lookupTarget(triple, error);
}

} // namespace

TargetCpu getReportedTargetCpu(StringRef triple, StringRef cpu, ArrayRef<std::string> features) {
  TargetCpu chosen{triple.str(), "generic", ""};
  llvm::Triple parsed(triple);
  const llvm::Target *backend = lookupBackend(parsed);
  if (!backend)
    return chosen;
  std::unique_ptr<llvm::MCSubtargetInfo> subtarget(backend->createMCSubtargetInfo(parsed, "", ""));
  if (!subtarget)
    return chosen;
  if (!cpu.empty() && subtarget->isCPUStringValid(cpu))
    chosen.cpu = cpu.str();
  llvm::StringSet<> known;
  for (const llvm::SubtargetFeatureKV &feature : subtarget->getAllProcessorFeatures())
    known.insert(feature.Key);
  // A name this build does not know is one it would not generate code for anyway.
  std::string reported;
  for (const std::string &feature : features)
    if (known.contains(feature))
      reported += (reported.empty() ? "+" : ",+") + feature;
  llvm::StringSet<> given = enabledIsaFeatures(*backend, parsed, "generic", reported);
  llvm::StringSet<> baseline = enabledIsaFeatures(*backend, parsed, "generic", "");
  std::vector<std::string> hidden;
  for (const auto &feature : enabledIsaFeatures(*backend, parsed, chosen.cpu, ""))
    if (!given.contains(feature.getKey()) && !baseline.contains(feature.getKey()))
      hidden.push_back(feature.getKey().str());
  llvm::sort(hidden);
  chosen.features = reported;
  for (const std::string &feature : hidden)
    chosen.features += (chosen.features.empty() ? "-" : ",-") + feature;
  return chosen;
}

std::vector<std::string> getRequiredFeatures(const TargetCpu &cpu) {
  llvm::Triple triple(cpu.triple);
  const llvm::Target *backend = lookupBackend(triple);
  if (!backend)
    return {};
  llvm::StringSet<> baseline = enabledIsaFeatures(*backend, triple, "generic", "");
  std::vector<std::string> required;
  for (const auto &feature : enabledIsaFeatures(*backend, triple, cpu.cpu, cpu.features))
    if (!baseline.contains(feature.getKey()))
      required.push_back(feature.getKey().str());
  llvm::sort(required);
  return required;
}

TargetCpu getTargetCpu(ModuleOp target, bool localRunsHere) {
  TargetCpu chosen;
  auto spec =
      target->getAttrOfType<DictionaryAttr>(dialect::catalyst::CatalystDialect::kTargetAttrName);
  auto text = [&](StringRef key) -> std::optional<std::string> {
    if (spec)
      if (auto attr = spec.getAs<StringAttr>(key))
        return attr.str();
    return std::nullopt;
  };
  std::string processTriple = llvm::sys::getProcessTriple();
  chosen.triple = text("triple").value_or("");
  if (chosen.triple.empty())
    chosen.triple = processTriple;
  std::optional<std::string> cpu = text("cpu");
  bool here = llvm::Triple(chosen.triple).getArch() == llvm::Triple(processTriple).getArch();
  // "native", as clang's -march=native, is the CPU the code will run on: this one in
  // process; for an executor, the engine puts the CPU it reports in its place, and one that
  // could not be asked (or runs another architecture) gets its triple's generic CPU, as
  // when no cpu is named.
  bool native = cpu && *cpu == "native";
  bool inProcess = !spec || (localRunsHere && getDispatchAddress(target) == kLocalAddress);
  if (native && !(here && inProcess))
    cpu.reset();
  if (here && inProcess && (native || !cpu)) {
    chosen.cpu = llvm::sys::getHostCPUName().str();
    chosen.features = hostFeatures();
    if (std::optional<std::string> extra = text("features"); extra && !extra->empty())
      chosen.features += "," + *extra;
    return chosen;
  }
  chosen.cpu = cpu.value_or("generic");
  chosen.features = text("features").value_or("");
  return chosen;
}

namespace {

/// LLVM's model of an x86 `cpu` with its features, or null where the triple is not x86 or the
/// CPU or a feature is one this build does not know (cross-compile-targets reports those).
std::unique_ptr<llvm::MCSubtargetInfo> x86Subtarget(const TargetCpu &cpu) {
  llvm::Triple triple(cpu.triple);
  if (!triple.isX86())
    return nullptr;
  initializeTargets();
  std::string error;
  const llvm::Target *backend = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!backend)
    return nullptr;
  std::unique_ptr<llvm::MCSubtargetInfo> plain(backend->createMCSubtargetInfo(triple, "", ""));
  if (!plain || !plain->isCPUStringValid(cpu.cpu))
    return nullptr;
  for (StringRef feature : llvm::split(cpu.features, ',')) {
    StringRef name = feature.trim().drop_front();
    if (!name.empty() &&
        llvm::none_of(plain->getAllProcessorFeatures(),
                      [&](const llvm::SubtargetFeatureKV &known) { return name == known.Key; }))
      return nullptr;
  }
  return std::unique_ptr<llvm::MCSubtargetInfo>(
      backend->createMCSubtargetInfo(triple, cpu.cpu, cpu.features));
}

} // namespace

namespace {

/// The vector widths of `cpu`: what getVectorBits and getPairDotBits answer.
struct VectorWidths {
  unsigned vector = 128, pairDot = 0;
};

/// Asks LLVM's model of `cpu` once per process: each model is built anew (some milliseconds),
/// and every function of every compile asks.
VectorWidths vectorWidths(const TargetCpu &cpu) {
  static std::mutex mutex;
  static llvm::StringMap<VectorWidths> known;
  std::string key = cpu.triple + '\0' + cpu.cpu + '\0' + cpu.features;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = known.find(key);
    if (it != known.end())
      return it->second;
  }
  VectorWidths widths;
  if (std::unique_ptr<llvm::MCSubtargetInfo> subtarget = x86Subtarget(cpu)) {
    widths.vector = subtarget->checkFeatures("+avx512f") ? 512
                    : subtarget->checkFeatures("+avx")   ? 256
                                                         : 128;
    widths.pairDot = subtarget->checkFeatures("+avx512bw") ? 512
                     : subtarget->checkFeatures("+avx2")   ? 256
                                                           : 128;
  }
  std::lock_guard<std::mutex> lock(mutex);
  known.try_emplace(key, widths);
  return widths;
}

} // namespace

unsigned getVectorBits(const TargetCpu &cpu) { return vectorWidths(cpu).vector; }

unsigned getPairDotBits(const TargetCpu &cpu) { return vectorWidths(cpu).pairDot; }

Value SessionCache::get(Operation *user, StringRef address) {
  auto function = user->getParentOfType<FunctionOpInterface>();
  auto key = std::make_pair(function.getOperation(), StringAttr::get(user->getContext(), address));
  if (Value session = sessions.lookup(key))
    return session;
  OpBuilder builder(user->getContext());
  builder.setInsertionPointToStart(&function.getFunctionBody().front());
  Value session = dialect::executor::OpenOp::create(
      builder, function.getLoc(), dialect::executor::SessionType::get(user->getContext()), address);
  sessions[key] = session;
  return session;
}

} // namespace courier
