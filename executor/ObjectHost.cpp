// Loads shipped objects into ORC (one JITDylib each) and runs their pyface entries and
// `call` symbols on behalf of a session.
//
// The `call` callee's C signature (also in docs/protocol.md):
//   int32_t sym(const void *in, uint64_t in_size, void *out, uint64_t out_size);
// `in` holds the packed inputs, `out` is a zero-filled buffer of exactly `out_size` bytes
// the callee fills with the packed outputs. 0 means success; any other value is an error
// code reported to the caller (e.g. when a size does not match what the callee expects).
#include "executor/ObjectHost.h"

#include "abi/KernelABI.h"
#include "abi/MemRef.h"
#include "executor/ElfValidation.h"
#include "executor/KernelThreads.h"
#include "executor/ResultBlocks.h"
#include "executor/RuntimeSymbols.h"
#include "transport/Wire.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ExecutionEngine/JITLink/JITLink.h"
#include "llvm/ExecutionEngine/Orc/AbsoluteSymbols.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>

using namespace llvm;

namespace courier::executor {

using transport::ErrorCode;
using transport::makeCodedError;
using transport::ObjectBlob;
using transport::OwnedTensor;
using transport::ResultSpec;
using transport::TensorView;

namespace {

using EntryFn = void (*)(void *results, void *args);
using CallFn = int32_t (*)(const void *in, uint64_t inSize, void *out, uint64_t outSize);

/// Fills the result area before a launch; no pointer, size, stride or offset a kernel
/// writes has this value in practice.
constexpr int64_t kUnwritten = 0x5a5a5a5a5a5a5a5a;

/// Words after the expected result descriptors that catch a kernel writing more (up to
/// 30 extra dimensions' worth, or a few extra descriptors).
constexpr size_t kResultSlackWords = 64;

/// Replies larger than this are refused rather than attempted: a bogus size from a caller
/// must produce an error, not an allocation failure.
constexpr uint64_t kMaxCallReply = uint64_t{1} << 32;

/// Words of a descriptor of the largest rank a launch may declare.
constexpr size_t kMaxDescriptorWords = abi::descriptorWords(kMaxLaunchRank);

/// Registers the LLVM target of the machine this code runs on. InitializeNativeTarget()
/// reads that machine from llvm-config.h, which names the target of whoever built the
/// headers: a cross build (cmake/aarch64-linux-gnu.cmake) compiles against the build
/// machine's headers and would register x86-64 in an aarch64 executor. The compiler knows.
void initializeHostTarget() {
#if defined(__aarch64__)
  LLVMInitializeAArch64TargetInfo();
  LLVMInitializeAArch64Target();
  LLVMInitializeAArch64TargetMC();
  LLVMInitializeAArch64AsmPrinter();
#elif defined(__x86_64__)
  LLVMInitializeX86TargetInfo();
  LLVMInitializeX86Target();
  LLVMInitializeX86TargetMC();
  LLVMInitializeX86AsmPrinter();
#else
  InitializeNativeTarget();
  InitializeNativeTargetAsmPrinter();
#endif
}

/// Null pointers after the input descriptors' pointers in `args`: a kernel reading more
/// inputs than a launch declared (possible only for an object without signature tables)
/// faults on a null descriptor instead of reading stack contents as one.
constexpr size_t kArgumentSlack = 64;

/// Largest byte span a result may claim: more than a 47-bit user address space holds is a
/// descriptor the kernel did not fill in (or filled in for another layout).
constexpr uint64_t kMaxResultSpan = uint64_t{1} << 47;

Error makeError(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

/// The buffers kernels allocate during one launch, with their sizes, so the host can check
/// that every result it hands over lies inside a buffer it may read.
struct LaunchAllocations {
  DenseMap<void *, uint64_t> live;
  /// The launch's result arena, if it has one: large allocations are placed there, one after
  /// another, while it has room (`used` bytes are taken).
  char *arena = nullptr;
  uint64_t arenaSize = 0, used = 0;

  bool inArena(const void *pointer) const {
    auto *p = static_cast<const char *>(pointer);
    return arena && p >= arena && p < arena + arenaSize;
  }
};

/// The launch running on this thread, if any. Kernels start no threads of their own; their
/// parallel loops run on the kernel-thread team (executor/KernelThreads.h), whose threads
/// have none: what they allocate and free within a loop's iteration goes untracked.
thread_local LaunchAllocations *currentLaunch = nullptr;

void remember(void *pointer, uint64_t size) {
  if (pointer && currentLaunch)
    currentLaunch->live[pointer] = size;
}

/// True if `pointer` was the running launch's own.
bool forget(void *pointer) {
  return pointer && currentLaunch && currentLaunch->live.erase(pointer);
}

/// The arenas rememberArena was told of, as [begin, end) ranges.
struct ArenaRegistry {
  std::mutex mutex;
  std::vector<std::pair<const char *, const char *>> ranges;
  std::atomic<size_t> count{0};
};

ArenaRegistry &arenaRegistry() {
  static ArenaRegistry registry;
  return registry;
}

/// True if `pointer` lies in an arena this process has mapped.
bool inKnownArena(const void *pointer) {
  ArenaRegistry &registry = arenaRegistry();
  if (!pointer || registry.count.load(std::memory_order_acquire) == 0)
    return false;
  auto *p = static_cast<const char *>(pointer);
  std::lock_guard<std::mutex> lock(registry.mutex);
  return llvm::any_of(registry.ranges,
                      [&](const auto &range) { return p >= range.first && p < range.second; });
}

/// `size` bytes at `alignment` (a power of two) in the running launch's result arena, or null
/// when the launch has none, the allocation is small or the arena has no room left. Arena
/// memory is not cleared: it holds what earlier launches of the session left there.
void *fromArena(uint64_t size, uint64_t alignment) {
  LaunchAllocations *launch = currentLaunch;
  if (!launch || !launch->arena || size < kArenaAllocationBytes || alignment > kArenaAlignmentLimit)
    return nullptr;
  uint64_t offset = alignTo(launch->used, std::max<uint64_t>(alignment, kArenaAlignment));
  if (offset > launch->arenaSize || launch->arenaSize - offset < size)
    return nullptr;
  launch->used = offset + size;
  char *pointer = launch->arena + offset;
  launch->live[pointer] = size;
  return pointer;
}

/// Gives back an arena allocation; the arena reclaims it only if it is the last one taken, so
/// a kernel's temporaries freed in reverse order leave room for what follows.
void releaseToArena(LaunchAllocations &launch, void *pointer) {
  auto found = launch.live.find(pointer);
  if (found == launch.live.end())
    return;
  if (static_cast<char *>(pointer) + found->second == launch.arena + launch.used)
    launch.used = static_cast<uint64_t>(static_cast<char *>(pointer) - launch.arena);
  launch.live.erase(found);
}

// The C allocator as kernels see it: the process's, recording what a launch allocates, with
// large buffers in the launch's result arena while it has room.
void *trackedMalloc(size_t size) {
  if (void *pointer = fromArena(size, 1))
    return pointer;
  void *pointer = takeBlock(size);
  if (!pointer)
    pointer = std::malloc(size);
  remember(pointer, size);
  return pointer;
}

void *trackedCalloc(size_t count, size_t size) {
  uint64_t bytes = 0;
  if (!__builtin_mul_overflow(uint64_t(count), uint64_t(size), &bytes))
    if (void *pointer = fromArena(bytes, 1))
      return std::memset(pointer, 0, bytes);
  void *pointer = std::calloc(count, size);
  remember(pointer, bytes); // calloc fails on an overflowing product
  return pointer;
}

void *trackedRealloc(void *old, size_t size) {
  LaunchAllocations *launch = currentLaunch;
  bool inThisArena = launch && launch->inArena(old);
  // From an arena of an earlier launch: its size is not known here, so it cannot be moved.
  if (!inThisArena && inKnownArena(old))
    return nullptr;
  if (inThisArena) {
    auto found = launch->live.find(old);
    uint64_t had = found == launch->live.end() ? 0 : found->second;
    if (found != launch->live.end() && size <= had) {
      found->second = size;
      return old;
    }
    // Taken before the old one is given back: the copy must not overwrite it.
    void *pointer = fromArena(size, 1);
    if (!pointer && (pointer = std::malloc(size)))
      remember(pointer, size);
    if (!pointer)
      return nullptr;
    std::memcpy(pointer, old, had);
    releaseToArena(*launch, old);
    return pointer;
  }
  void *pointer = std::realloc(old, size);
  if (pointer || size == 0)
    forget(old);
  remember(pointer, size);
  return pointer;
}

void trackedFree(void *pointer) {
  if (LaunchAllocations *launch = currentLaunch; launch && launch->inArena(pointer))
    return releaseToArena(*launch, pointer);
  // Arena memory belongs to its arena, whichever launch it came from; what this launch took
  // from the C allocator never lies in one, so only other pointers look at the arenas.
  if (forget(pointer) || !inKnownArena(pointer))
    giveBlock(pointer);
}

void *trackedAlignedAlloc(size_t alignment, size_t size) {
  if (isPowerOf2_64(alignment))
    if (void *pointer = fromArena(size, alignment))
      return pointer;
  void *pointer = isPowerOf2_64(alignment) ? takeBlock(size, alignment) : nullptr;
  if (!pointer)
    pointer = std::aligned_alloc(alignment, size);
  remember(pointer, size);
  return pointer;
}

int trackedPosixMemalign(void **out, size_t alignment, size_t size) {
  if (isPowerOf2_64(alignment) && alignment >= sizeof(void *))
    if (void *pointer = fromArena(size, alignment)) {
      *out = pointer;
      return 0;
    }
  if (isPowerOf2_64(alignment))
    if (void *pointer = takeBlock(size, alignment)) {
      remember(pointer, size);
      *out = pointer;
      return 0;
    }
  int status = posix_memalign(out, alignment, size);
  if (status == 0)
    remember(*out, size);
  return status;
}

/// Frees what a kernel allocated during a launch and still holds, for a launch refused after
/// the kernel ran: none of its results is handed over, so nothing else could free them.
/// Arena allocations need no freeing.
void freeAll(LaunchAllocations &allocations) {
  for (const auto &[pointer, size] : allocations.live)
    if (!allocations.inArena(pointer))
      std::free(pointer);
  allocations.live.clear();
}

/// Tracks the calling thread's allocations while it lives.
class TrackAllocations {
public:
  explicit TrackAllocations(LaunchAllocations &allocations)
      : previous(std::exchange(currentLaunch, &allocations)) {}
  ~TrackAllocations() { currentLaunch = previous; }
  TrackAllocations(const TrackAllocations &) = delete;
  TrackAllocations &operator=(const TrackAllocations &) = delete;

private:
  LaunchAllocations *previous;
};

/// The allocator entry points kernels bind to: the tracking wrappers above.
orc::SymbolMap trackedAllocators(orc::ExecutionSession &session) {
  auto flags = JITSymbolFlags::Exported | JITSymbolFlags::Callable;
  auto symbol = [&](auto *function) {
    return orc::ExecutorSymbolDef(orc::ExecutorAddr::fromPtr(function), flags);
  };
  return {{session.intern("malloc"), symbol(&trackedMalloc)},
          {session.intern("calloc"), symbol(&trackedCalloc)},
          {session.intern("realloc"), symbol(&trackedRealloc)},
          {session.intern("free"), symbol(&trackedFree)},
          {session.intern("aligned_alloc"), symbol(&trackedAlignedAlloc)},
          {session.intern("posix_memalign"), symbol(&trackedPosixMemalign)}};
}

/// A byte range [begin, end) of this process's memory.
struct ByteRange {
  uint64_t begin = 0, end = 0;
  bool contains(const ByteRange &inner) const { return inner.begin >= begin && inner.end <= end; }
};

/// The bytes a strided tensor's elements occupy, relative to its element [0, ..., 0], or
/// nothing if they overflow or span more than kMaxResultSpan. Empty for no elements.
std::optional<std::pair<int64_t, int64_t>> byteExtent(int64_t elemSize, ArrayRef<int64_t> sizes,
                                                      ArrayRef<int64_t> strides) {
  int64_t low = 0, high = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0)
      return std::make_pair(int64_t{0}, int64_t{0});
    int64_t reach;
    if (__builtin_mul_overflow(strides[d], sizes[d] - 1, &reach) ||
        __builtin_add_overflow(reach < 0 ? low : high, reach, reach < 0 ? &low : &high))
      return std::nullopt;
  }
  int64_t first, last;
  if (__builtin_mul_overflow(low, elemSize, &first) ||
      __builtin_add_overflow(high, int64_t{1}, &last) ||
      __builtin_mul_overflow(last, elemSize, &last) ||
      static_cast<uint64_t>(last - first) > kMaxResultSpan)
    return std::nullopt;
  return std::make_pair(first, last);
}

/// The absolute bytes of a tensor whose element [0, ..., 0] is `offset` elements past
/// `base`, or nothing if the address arithmetic overflows.
std::optional<ByteRange> absoluteRange(uint64_t base, int64_t offset, int64_t elemSize,
                                       std::pair<int64_t, int64_t> extent) {
  int64_t shift, first, last;
  if (__builtin_mul_overflow(offset, elemSize, &shift) ||
      __builtin_add_overflow(shift, extent.first, &first) ||
      __builtin_add_overflow(shift, extent.second, &last))
    return std::nullopt;
  ByteRange range;
  if (__builtin_add_overflow(base, static_cast<uint64_t>(first), &range.begin) != (first < 0) ||
      __builtin_add_overflow(base, static_cast<uint64_t>(last), &range.end) != (last < 0))
    return std::nullopt;
  return range;
}

/// Records the memory each linked object's sections occupy, so a result pointing into an
/// object's constants can be bounds-checked before it is copied.
class SectionRecorder : public orc::ObjectLinkingLayer::Plugin {
public:
  void modifyPassConfig(orc::MaterializationResponsibility &responsibility, jitlink::LinkGraph &,
                        jitlink::PassConfiguration &config) override {
    orc::JITDylib *dylib = &responsibility.getTargetJITDylib();
    config.PostFixupPasses.push_back([this, dylib](jitlink::LinkGraph &graph) {
      std::lock_guard<std::mutex> lock(mutex);
      std::vector<ByteRange> &ranges = recorded[dylib];
      for (jitlink::Section &section : graph.sections()) {
        // Only these stay mapped once linking is done.
        if (section.getMemLifetime() != orc::MemLifetime::Standard)
          continue;
        jitlink::SectionRange range(section);
        if (!range.empty())
          ranges.push_back({range.getStart().getValue(), range.getEnd().getValue()});
      }
      return Error::success();
    });
  }
  Error notifyFailed(orc::MaterializationResponsibility &) override { return Error::success(); }
  Error notifyRemovingResources(orc::JITDylib &dylib, orc::ResourceKey) override {
    std::lock_guard<std::mutex> lock(mutex);
    recorded.erase(&dylib);
    return Error::success();
  }
  void notifyTransferringResources(orc::JITDylib &, orc::ResourceKey, orc::ResourceKey) override {}

  /// The ranges recorded for `dylib`'s sections so far, handed over.
  std::vector<ByteRange> take(orc::JITDylib *dylib) {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = recorded.find(dylib);
    if (found == recorded.end())
      return {};
    std::vector<ByteRange> ranges = std::move(found->second);
    recorded.erase(found);
    return ranges;
  }

private:
  std::mutex mutex;
  DenseMap<orc::JITDylib *, std::vector<ByteRange>> recorded;
};

/// Read-only null pointers: the `args` of a launch declaring no inputs, so an entry that
/// reads inputs anyway (possible only without a signature table) faults on a null
/// descriptor, and one writing there faults too.
void *const *nullArguments() {
  static void *const *page = [] {
    void *mapped = mmap(nullptr, kMaxLaunchTensors * sizeof(void *), PROT_READ,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return mapped == MAP_FAILED ? nullptr : static_cast<void *const *>(mapped);
  }();
  return page;
}

/// Held by the host while the object is loaded and by each launch or call running its code,
/// so removing the object never unmaps code that is still executing.
struct LoadedObject {
  orc::JITDylib *dylib = nullptr;
  ObjectInfo info;
  /// Every exported function, resolved at load time so launches never enter ORC.
  StringMap<void *> symbols;
  /// Memory of the object's sections, where results that are constants of it point.
  std::vector<ByteRange> sections;
  /// Set when the object is removed while still running: the last holder unloads it.
  orc::ExecutionSession *unloadFrom = nullptr;

  LoadedObject() = default;
  LoadedObject(const LoadedObject &) = delete;
  LoadedObject &operator=(const LoadedObject &) = delete;
  ~LoadedObject() {
    if (!unloadFrom)
      return;
    // Nobody is left to return a failure to; the host's error reporter gets it.
    if (Error error = unloadFrom->removeJITDylib(*dylib))
      unloadFrom->reportError(std::move(error));
  }
};

std::string describeTensors(ArrayRef<int64_t> words, size_t first, size_t count) {
  std::string text;
  for (size_t k = 0; k < count; ++k)
    text += formatv("{0}(rank {1}, {2}-byte elements)", k ? ", " : "", words[first + 2 * k],
                    words[first + 2 * k + 1]);
  return "[" + text + "]";
}

} // namespace

void rememberArena(const void *base, uint64_t size) {
  ArenaRegistry &registry = arenaRegistry();
  auto *begin = static_cast<const char *>(base);
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.ranges.emplace_back(begin, begin + size);
  registry.count.store(registry.ranges.size(), std::memory_order_release);
}

void forgetArena(const void *base) {
  ArenaRegistry &registry = arenaRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  llvm::erase_if(registry.ranges, [&](const auto &range) { return range.first == base; });
  registry.count.store(registry.ranges.size(), std::memory_order_release);
}

bool ObjectInfo::hasEntry(StringRef entry) const {
  return std::binary_search(entries.begin(), entries.end(), entry,
                            [](StringRef a, StringRef b) { return a < b; });
}

Error checkLaunch(const ObjectInfo &info, StringRef entry, ArrayRef<TensorSignature> inputs,
                  ArrayRef<TensorSignature> results) {
  if (inputs.size() > kMaxLaunchTensors || results.size() > kMaxLaunchTensors)
    return makeError(formatv("a launch of '{0}' declares {1} inputs and {2} results; at most "
                             "{3} of each",
                             entry, inputs.size(), results.size(), kMaxLaunchTensors));
  auto plausible = [](int64_t elemSize) {
    return elemSize == 1 || elemSize == 2 || elemSize == 4 || elemSize == 8 || elemSize == 16;
  };
  auto bounded = [](int64_t rank) {
    return rank >= 0 && rank <= static_cast<int64_t>(kMaxLaunchRank);
  };
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!bounded(inputs[i].rank) || !plausible(inputs[i].elemSize))
      return makeError(formatv("input {0} of '{1}' has rank {2} and element size {3} (ranks "
                               "go up to {4}; element sizes are 1, 2, 4, 8 or 16)",
                               i, entry, inputs[i].rank, inputs[i].elemSize, kMaxLaunchRank));
  for (size_t i = 0; i < results.size(); ++i)
    if (!bounded(results[i].rank) || !plausible(results[i].elemSize))
      return makeError(formatv("result {0} of '{1}' has rank {2} and element size {3} (ranks "
                               "go up to {4}; element sizes are 1, 2, 4, 8 or 16)",
                               i, entry, results[i].rank, results[i].elemSize, kMaxLaunchRank));
  auto table = info.signatures.find(entry);
  if (table == info.signatures.end())
    return Error::success();
  ArrayRef<int64_t> words = table->second;
  auto numInputs = static_cast<size_t>(words[1]), numResults = static_cast<size_t>(words[2]);
  bool matches = inputs.size() == numInputs && results.size() == numResults;
  for (size_t i = 0; matches && i < numInputs; ++i)
    matches = inputs[i].rank == words[3 + 2 * i] && inputs[i].elemSize == words[4 + 2 * i];
  for (size_t i = 0; matches && i < numResults; ++i)
    matches = results[i].rank == words[3 + 2 * (numInputs + i)] &&
              results[i].elemSize == words[4 + 2 * (numInputs + i)];
  if (matches)
    return Error::success();
  bool async = inputs.empty() && results.empty();
  return makeCodedError(ErrorCode::SignatureMismatch,
                        formatv("'{0}' takes {1} and returns {2}; {3}", entry,
                                describeTensors(words, 3, numInputs),
                                describeTensors(words, 3 + 2 * numInputs, numResults),
                                async ? "an async launch passes no inputs and expects no results"
                                      : "the launch does not match"));
}

struct ObjectHost::Impl {
  std::shared_ptr<PluginSet> plugins;
  ObjectHostOptions options;
  /// Serializes loads, so two threads shipping the same object link it once.
  std::mutex loadMutex;
  /// Guards `objects`, `loadOrder`.
  mutable std::shared_mutex mutex;
  StringMap<std::shared_ptr<LoadedObject>> objects;
  std::vector<std::shared_ptr<LoadedObject>> loadOrder;
  /// Link failures ORC reports out of band, collected while a load is in progress.
  std::mutex reportMutex;
  std::string reported;
  orc::JITDylib *runtime = nullptr;
  std::shared_ptr<SectionRecorder> sections;
  unsigned dylibCounter = 0;
  /// Declared last so it is destroyed first, while the reporter's state is still alive.
  std::unique_ptr<orc::LLJIT> jit;

  std::string takeReported() {
    std::lock_guard<std::mutex> lock(reportMutex);
    return std::exchange(reported, std::string());
  }

  Error link(const ObjectBlob &object, ObjectExports exports);
  /// The loaded object `sha256` holding `entry` (kept loaded while the caller holds it) and
  /// the entry's code, once the launch's declared inputs and results are checked against it.
  Expected<std::shared_ptr<LoadedObject>> entryOf(StringRef sha256, StringRef entry,
                                                  ArrayRef<TensorView> inputs,
                                                  ArrayRef<ResultSpec> results, EntryFn &function);
  Expected<std::vector<OwnedTensor>> adoptResults(StringRef entry, ArrayRef<int64_t> words,
                                                  ArrayRef<TensorView> inputs,
                                                  ArrayRef<ResultSpec> results,
                                                  const LoadedObject &object,
                                                  LaunchAllocations &allocations);
};

Expected<std::unique_ptr<ObjectHost>> ObjectHost::create(std::shared_ptr<PluginSet> plugins,
                                                         ObjectHostOptions options) {
  static std::once_flag targetsReady;
  std::call_once(targetsReady, initializeHostTarget);
  if (!nullArguments())
    return makeError("mapping the object host's null arguments failed");

  auto impl = std::make_unique<Impl>();
  impl->plugins = std::move(plugins);
  impl->options = options;
  // No platform and no implicit process symbols: kernels see only the C runtime below, and
  // the inactive platform needs no ORC runtime library.
  auto jit = orc::LLJITBuilder()
                 .setLinkProcessSymbolsByDefault(false)
                 .setPlatformSetUp(orc::setUpInactivePlatform)
                 .create();
  if (!jit)
    return makeError("creating the object host's JIT: " + toString(jit.takeError()));
  impl->jit = std::move(*jit);
  auto *linker = dyn_cast<orc::ObjectLinkingLayer>(&impl->jit->getObjLinkingLayer());
  if (!linker)
    return makeError("creating the object host's JIT: its object layer is not JITLink's");
  impl->sections = std::make_shared<SectionRecorder>();
  linker->addPlugin(impl->sections);
  Impl *raw = impl.get();
  orc::ExecutionSession &session = impl->jit->getExecutionSession();
  session.setErrorReporter([raw](Error error) {
    std::string message = toString(std::move(error));
    std::lock_guard<std::mutex> lock(raw->reportMutex);
    if (!raw->reported.empty())
      raw->reported += "; ";
    raw->reported += message;
  });

  auto runtime = impl->jit->createJITDylib("courier-runtime");
  if (!runtime)
    return makeError("creating the object host's runtime library: " +
                     toString(runtime.takeError()));
  // Kernels bind to the allocator's tracking wrappers and to Courier's table of runtime
  // symbols (executor/RuntimeSymbols.h), never to whatever else the process has loaded:
  // anything else fails at load time with "Symbols not found" naming the symbol.
  orc::SymbolMap symbols = trackedAllocators(session);
  for (const CourierRuntimeSymbol *symbol = courierRuntimeSymbols; symbol->name; ++symbol) {
    orc::SymbolStringPtr name = session.intern(symbol->name);
    if (symbol->address && !symbols.count(name))
      symbols[name] = {orc::ExecutorAddr::fromPtr(symbol->address), JITSymbolFlags::Exported};
  }
  // Parallel loops: the OpenMP runtime's entries (executor/KernelThreads.h).
  for (auto [name, address] : executor::kernelThreadSymbols())
    symbols[session.intern(name)] = {orc::ExecutorAddr::fromPtr(address),
                                     JITSymbolFlags::Exported | JITSymbolFlags::Callable};
  if (Error error = runtime->define(orc::absoluteSymbols(std::move(symbols))))
    return makeError("exposing the C runtime to kernels: " + toString(std::move(error)));
  impl->runtime = &*runtime;
  return std::unique_ptr<ObjectHost>(new ObjectHost(std::move(impl)));
}

ObjectHost::ObjectHost(std::unique_ptr<Impl> impl) : impl(std::move(impl)) {}
ObjectHost::~ObjectHost() = default;

bool ObjectHost::hasObject(StringRef sha256) const {
  std::shared_lock<std::shared_mutex> lock(impl->mutex);
  return impl->objects.count(sha256) != 0;
}

bool ObjectHost::hasEntry(StringRef sha256, StringRef entry) const {
  std::shared_lock<std::shared_mutex> lock(impl->mutex);
  auto object = impl->objects.find(sha256);
  return object != impl->objects.end() && object->second->symbols.count(entry) != 0;
}

std::optional<ObjectInfo> ObjectHost::describe(StringRef sha256) const {
  std::shared_lock<std::shared_mutex> lock(impl->mutex);
  auto object = impl->objects.find(sha256);
  if (object == impl->objects.end())
    return std::nullopt;
  return object->second->info;
}

Error ObjectHost::checkInfo(StringRef sha256, function_ref<Error(const ObjectInfo *)> check) const {
  std::shared_lock<std::shared_mutex> lock(impl->mutex);
  auto object = impl->objects.find(sha256);
  return check(object == impl->objects.end() ? nullptr : &object->second->info);
}

Error ObjectHost::Impl::link(const ObjectBlob &object, ObjectExports exports) {
  orc::ExecutionSession &session = jit->getExecutionSession();
  // Numbered, not named by the hash: ORC puts this name in its messages, and the error that
  // carries them names the object already.
  auto dylib = jit->createJITDylib(formatv("object-{0}", dylibCounter++).str());
  if (!dylib)
    return makeError(
        formatv("loading object {0}: {1}", object.sha256, toString(dylib.takeError())));
  dylib->addToLinkOrder(*runtime);

  auto discard = [&](Error cause) -> Error {
    // ORC reports the root cause (e.g. "Symbols not found: [ foo ]") out of band and
    // returns a generic "failed to materialize" listing the entries; the cause says it all.
    std::string message = toString(std::move(cause));
    std::string reported = takeReported();
    if (!reported.empty())
      message = std::move(reported);
    if (Error removal = session.removeJITDylib(*dylib))
      message += "; unloading it also failed: " + toString(std::move(removal));
    takeReported();
    sections->take(&*dylib);
    return makeError(formatv("loading object {0}: {1}", object.sha256, message));
  };

  takeReported();
  if (Error error =
          jit->addObjectFile(*dylib, MemoryBuffer::getMemBufferCopy(*object.bytes, object.sha256)))
    return discard(std::move(error));

  // Resolving every export now links the object eagerly, so a missing symbol is reported
  // when the object is shipped rather than at its first launch.
  orc::SymbolLookupSet lookupSet;
  for (const std::string &name : exports.functions)
    lookupSet.add(session.intern(name));
  auto resolved = session.lookup(orc::makeJITDylibSearchOrder({&*dylib}), std::move(lookupSet));
  if (!resolved)
    return discard(resolved.takeError());

  auto loaded = std::make_shared<LoadedObject>();
  loaded->dylib = &*dylib;
  loaded->sections = sections->take(&*dylib);
  for (const std::string &name : exports.functions)
    loaded->symbols[name] = (*resolved)[session.intern(name)].getAddress().toPtr<void *>();
  loaded->info.sha256 = object.sha256;
  for (const std::string &name : exports.functions)
    if (StringRef(name).starts_with(COURIER_ENTRY_PREFIX))
      loaded->info.entries.push_back(name);
  llvm::sort(loaded->info.entries);
  loaded->info.signatures.insert(std::make_move_iterator(exports.signatures.begin()),
                                 std::make_move_iterator(exports.signatures.end()));
  std::unique_lock<std::shared_mutex> lock(mutex);
  loadOrder.push_back(loaded);
  objects[object.sha256] = std::move(loaded);
  return Error::success();
}

Error ObjectHost::addObject(const ObjectBlob &object) {
  if (!object.bytes)
    return makeError(formatv("object {0} has no bytes", object.sha256));
  std::lock_guard<std::mutex> load(impl->loadMutex);
  if (hasObject(object.sha256))
    return Error::success();
  ObjectExports exports;
  if (Error error = validateObject(object.sha256, *object.bytes, exports))
    return error;
  if (!impl->options.allowUnsignedObjects) {
    std::vector<std::string> unsigned_;
    for (const std::string &name : exports.functions)
      if (StringRef(name).starts_with(COURIER_ENTRY_PREFIX) && !exports.signatures.count(name))
        unsigned_.push_back(name);
    if (!unsigned_.empty()) {
      llvm::sort(unsigned_);
      return makeCodedError(
          ErrorCode::UnsignedObject,
          formatv(
              "object {0} has no signature table ({1}<fn>) for {2}: this executor loads "
              "only objects whose every entry has one, as cross-compile-targets emits",
              object.sha256, COURIER_SIGNATURE_PREFIX,
              unsigned_.size() == 1
                  ? "'" + unsigned_[0] + "'"
                  : formatv("{0} entries, the first '{1}'", unsigned_.size(), unsigned_[0]).str()));
    }
  }
  return impl->link(object, std::move(exports));
}

Error ObjectHost::removeObject(StringRef sha256) {
  std::shared_ptr<LoadedObject> loaded;
  {
    std::unique_lock<std::shared_mutex> lock(impl->mutex);
    auto found = impl->objects.find(sha256);
    if (found == impl->objects.end())
      return Error::success();
    loaded = std::move(found->second);
    impl->objects.erase(found);
    llvm::erase(impl->loadOrder, loaded);
  }
  // Out of the table, the object gains no new holders: if others remain they are launches
  // or calls still running its code, and the last of them unloads it.
  orc::ExecutionSession &session = impl->jit->getExecutionSession();
  if (loaded.use_count() > 1) {
    loaded->unloadFrom = &session;
    return Error::success();
  }
  if (Error error = session.removeJITDylib(*loaded->dylib))
    return makeError(
        formatv("unloading object {0}: {1}", sha256, toString(std::move(error))).str());
  return Error::success();
}

namespace {

/// What is wrong with result `i`'s descriptor `d`, or nothing: its sizes, its span, and
/// where its elements lie, inside `allocation` (the buffer the kernel allocated that it
/// points at, if any) or else where `borrowable` allows.
std::string checkResultDescriptor(size_t i, const abi::MemRefView &d, int64_t elemSize,
                                  const std::optional<ByteRange> &allocation,
                                  llvm::function_ref<bool(const ByteRange &)> borrowable) {
  ArrayRef<int64_t> sizes = d.sizes(), strides = d.strides();
  for (int64_t size : sizes)
    if (size < 0)
      return formatv("result {0} has a negative size {1}", i, size).str();
  auto extent = byteExtent(elemSize, sizes, strides);
  if (!extent)
    return formatv("result {0}'s sizes and strides span more than {1} bytes", i, kMaxResultSpan)
        .str();
  // No elements: nothing is read, but a buffer the kernel allocated is still ours.
  if (extent->first == extent->second)
    return "";
  if (!d.aligned())
    return formatv("result {0} has a null data pointer", i).str();
  auto range =
      absoluteRange(reinterpret_cast<uint64_t>(d.aligned()), d.offset(), elemSize, *extent);
  if (!range)
    return formatv("result {0}'s offset {1} overflows its address", i, d.offset()).str();
  if (allocation ? allocation->contains(*range) : borrowable(*range))
    return "";
  return formatv("result {0}'s elements (bytes {1:x}-{2:x}) lie outside {3}", i, range->begin,
                 range->end,
                 allocation ? formatv("the {0}-byte buffer the kernel allocated for it",
                                      allocation->end - allocation->begin)
                                  .str()
                            : std::string("every buffer it could use (its own allocations, the "
                                          "inputs, the object's constants)"))
      .str();
}

/// The results' tensors once every descriptor was checked: a result the kernel allocated
/// (`owned`) is taken over, any other copied; all freed again when memory runs out.
Expected<std::vector<OwnedTensor>> takeResults(StringRef entry, ArrayRef<int64_t> words,
                                               ArrayRef<ResultSpec> results, ArrayRef<bool> owned,
                                               LaunchAllocations &allocations) {
  std::vector<OwnedTensor> tensors;
  tensors.reserve(results.size());
  bool outOfMemory = false;
  size_t pos = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    int64_t rank = results[i].rank;
    int64_t elemSize = results[i].elemSize;
    abi::MemRefView d(words.data() + pos, rank);
    pos += abi::descriptorWords(rank);
    void *allocated = d.allocated();
    // A buffer in the result arena belongs to the arena: the tensor points into it and frees
    // nothing.
    bool inArena = allocations.inArena(allocated);
    if (outOfMemory) {
      // Tensors already made free their buffers with `tensors`; these are not made yet.
      if (owned[i] && !inArena)
        std::free(allocated);
      continue;
    }
    char *data = static_cast<char *>(d.data(elemSize));
    std::vector<int64_t> sizes(d.sizes().begin(), d.sizes().end());
    std::vector<int64_t> strides(d.strides().begin(), d.strides().end());
    // In the arena only packed row-major results stay where they are: the caller sends them
    // from there, and packs whatever else it sends after them in the same arena, which must
    // not be where any of its sources lie.
    if (owned[i] && (!inArena || llvm::equal(strides, abi::rowMajorStrides(sizes)))) {
      tensors.emplace_back(inArena ? nullptr : allocated, data, elemSize, std::move(sizes),
                           std::move(strides));
      continue;
    }
    // The kernel returned memory it does not own (an input, a constant, or a buffer already
    // returned as another result), or a strided view into the arena: hand over a private copy
    // instead. At least one byte, so the result is always a real allocation.
    void *copy = std::malloc(std::max<int64_t>(1, abi::elementCount(sizes) * elemSize));
    if (!copy) {
      outOfMemory = true;
      continue;
    }
    abi::copyRowMajor(data, elemSize, sizes, strides, copy);
    auto contiguous = abi::rowMajorStrides(sizes);
    tensors.emplace_back(copy, copy, elemSize, std::move(sizes),
                         std::vector<int64_t>(contiguous.begin(), contiguous.end()));
  }
  if (outOfMemory)
    return makeError(formatv("entry '{0}' returned more than memory holds for copies", entry));
  return std::move(tensors);
}

/// Whether the kernel wrote exactly the result descriptors the caller declared: the first
/// `outWords` words of `outBuffer` all written, and the slack after them untouched.
Error checkResultWords(StringRef entry, ArrayRef<int64_t> outBuffer, size_t outWords,
                       ArrayRef<ResultSpec> results) {
  auto mismatch = [&](const char *howMany) {
    std::string ranks;
    for (const ResultSpec &spec : results)
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(spec.rank);
    return makeError(formatv("entry '{0}' wrote {1} result descriptors than {2} result(s) of "
                             "rank(s) [{3}]: its results do not match the caller's",
                             entry, howMany, results.size(), ranks));
  };
  for (size_t w = outWords; w < outBuffer.size(); ++w)
    if (outBuffer[w] != kUnwritten)
      return mismatch("more");
  for (size_t w = 0; w < outWords; ++w)
    if (outBuffer[w] == kUnwritten)
      return mismatch("fewer");
  return Error::success();
}

} // namespace

Expected<std::vector<OwnedTensor>>
ObjectHost::Impl::adoptResults(StringRef entry, ArrayRef<int64_t> words,
                               ArrayRef<TensorView> inputs, ArrayRef<ResultSpec> results,
                               const LoadedObject &object, LaunchAllocations &allocations) {
  // Where each result's elements may lie: the kernel's own allocations of this launch, the
  // inputs, and the object's sections (MLIR returns a constant global with the allocated
  // pointer 0xdeadbeef and the aligned one into the object's data). Everything is checked before
  // any byte is read or any buffer taken, so a bad descriptor leaves nothing half-adopted.
  SmallVector<ByteRange, 8> inputRanges;
  for (const TensorView &input : inputs) {
    auto extent = byteExtent(input.elemSize, input.sizes, input.strides);
    auto range =
        extent ? absoluteRange(reinterpret_cast<uint64_t>(input.data), 0, input.elemSize, *extent)
               : std::nullopt;
    inputRanges.push_back(range.value_or(ByteRange()));
  }
  auto allocationOf = [&](void *allocated) -> std::optional<ByteRange> {
    auto found = allocations.live.find(allocated);
    if (found == allocations.live.end())
      return std::nullopt;
    uint64_t begin = reinterpret_cast<uint64_t>(allocated);
    return ByteRange{begin, begin + found->second};
  };
  auto borrowable = [&](const ByteRange &range) {
    for (const ByteRange &input : inputRanges)
      if (input.contains(range))
        return true;
    for (const ByteRange &section : object.sections)
      if (section.contains(range))
        return true;
    return false;
  };
  SmallVector<bool, 8> owned(results.size(), false);
  SmallVector<void *, 8> taken;
  size_t pos = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    abi::MemRefView d(words.data() + pos, results[i].rank);
    pos += abi::descriptorWords(results[i].rank);
    std::optional<ByteRange> allocation = allocationOf(d.allocated());
    std::string problem = checkResultDescriptor(i, d, results[i].elemSize, allocation, borrowable);
    if (!problem.empty()) {
      freeAll(allocations);
      return makeError(formatv("entry '{0}' returned a bad descriptor: {1}", entry, problem));
    }
    if (allocation && !llvm::is_contained(taken, d.allocated())) {
      owned[i] = true;
      taken.push_back(d.allocated());
    }
  }
  return takeResults(entry, words, results, owned, allocations);
}

Expected<std::shared_ptr<LoadedObject>> ObjectHost::Impl::entryOf(StringRef sha256, StringRef entry,
                                                                  ArrayRef<TensorView> inputs,
                                                                  ArrayRef<ResultSpec> results,
                                                                  EntryFn &function) {
  std::shared_ptr<LoadedObject> running;
  {
    std::shared_lock<std::shared_mutex> lock(mutex);
    auto object = objects.find(sha256);
    if (object == objects.end())
      return makeCodedError(ErrorCode::UnknownObject, formatv("object {0} is not loaded", sha256));
    auto symbol = object->second->symbols.find(entry);
    if (symbol == object->second->symbols.end())
      return makeCodedError(ErrorCode::UnknownEntry,
                            formatv("unknown entry '{0}' in object {1}", entry, sha256));
    function = reinterpret_cast<EntryFn>(symbol->second);
    running = object->second;
  }
  if (inputs.size() > kMaxLaunchTensors || results.size() > kMaxLaunchTensors)
    return makeError(formatv("a launch of '{0}' declares {1} inputs and {2} results; at most "
                             "{3} of each",
                             entry, inputs.size(), results.size(), kMaxLaunchTensors));
  SmallVector<TensorSignature, 8> declaredInputs, declaredResults;
  for (const TensorView &input : inputs)
    declaredInputs.push_back({static_cast<int64_t>(input.sizes.size()), input.elemSize});
  for (const ResultSpec &result : results)
    declaredResults.push_back({result.rank, result.elemSize});
  if (Error error = checkLaunch(running->info, entry, declaredInputs, declaredResults))
    return std::move(error);
  return running;
}

Expected<std::vector<OwnedTensor>> ObjectHost::launch(StringRef sha256, StringRef entry,
                                                      ArrayRef<TensorView> inputs,
                                                      ArrayRef<ResultSpec> results,
                                                      MutableArrayRef<char> resultArena) {
  EntryFn function = nullptr;
  // Keeps the object's code loaded until the launch returns, even if it is removed meanwhile.
  Expected<std::shared_ptr<LoadedObject>> running =
      impl->entryOf(sha256, entry, inputs, results, function);
  if (!running)
    return running.takeError();

  // Without a table nothing says the kernel reads the ranks the launch declares, so each
  // input descriptor gets a zero-filled slot of the largest rank: a kernel reading a
  // higher rank than declared sees empty dimensions, never the next descriptor's pointers
  // or stack contents, and one writing more result words than declared stays in the slack.
  bool unchecked = !(*running)->info.signatures.count(entry);
  size_t inWords = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorView &input = inputs[i];
    if (input.sizes.size() != input.strides.size())
      return makeError(formatv("input {0} of '{1}' has {2} sizes but {3} strides", i, entry,
                               input.sizes.size(), input.strides.size()));
    inWords += unchecked ? kMaxDescriptorWords : abi::descriptorWords(input.sizes.size());
  }
  size_t outWords = 0;
  for (const ResultSpec &result : results)
    outWords += abi::descriptorWords(result.rank);

  // Descriptors are rebuilt from the views without copying tensor data: allocated and
  // aligned both point at the caller's element [0, ..., 0].
  SmallVector<int64_t, 64> inBuffer(std::max<size_t>(1, inWords), 0);
  SmallVector<void *, 8 + kArgumentSlack> arguments;
  void *const *args = nullArguments();
  if (!inputs.empty()) {
    arguments.assign(inputs.size() + kArgumentSlack, nullptr);
    args = arguments.data();
  }
  size_t pos = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorView &input = inputs[i];
    size_t rank = input.sizes.size();
    void *data = const_cast<void *>(input.data);
    arguments[i] = inBuffer.data() + pos;
    abi::MutableMemRefView(arguments[i], rank).fill(data, data, 0, input.sizes, input.strides);
    pos += unchecked ? kMaxDescriptorWords : abi::descriptorWords(rank);
  }
  // The result area is pre-filled with a pattern and followed by slack, so a kernel whose
  // results differ from what the caller expects (count or ranks) shows up as words it left
  // unwritten or wrote past the end, instead of being read as garbage descriptors.
  SmallVector<int64_t, 160> outBuffer(
      outWords + (unchecked ? kMaxDescriptorWords + kResultSlackWords : kResultSlackWords),
      kUnwritten);

  LaunchAllocations allocations;
  // Hand-written kernels, which have no table, may keep a buffer from one call to the next:
  // theirs come from the C allocator alone.
  if (!unchecked) {
    allocations.arena = resultArena.data();
    allocations.arenaSize = resultArena.size();
  }
  {
    TrackAllocations tracking(allocations);
    executor::prepareKernelLaunch();
    function(outBuffer.data(), const_cast<void **>(args));
    executor::finishKernelLaunch();
  }

  if (Error error = checkResultWords(entry, outBuffer, outWords, results)) {
    freeAll(allocations);
    return std::move(error);
  }
  return impl->adoptResults(entry, ArrayRef<int64_t>(outBuffer).take_front(outWords), inputs,
                            results, **running, allocations);
}

Expected<std::string> ObjectHost::call(StringRef symbol, StringRef input, uint64_t outputSize) {
  void *address = impl->plugins ? impl->plugins->lookup(symbol) : nullptr;
  // As in launch: the callee's object stays loaded until the call returns.
  std::shared_ptr<LoadedObject> running;
  if (!address) {
    std::shared_lock<std::shared_mutex> lock(impl->mutex);
    for (const std::shared_ptr<LoadedObject> &object : impl->loadOrder) {
      auto found = object->symbols.find(symbol);
      if (found != object->symbols.end()) {
        address = found->second;
        running = object;
        break;
      }
    }
  }
  if (!address)
    return makeCodedError(
        ErrorCode::UnknownSymbol,
        formatv("unknown symbol '{0}': no plugin or loaded object exports it", symbol));
  if (outputSize > kMaxCallReply)
    return makeError(formatv("call '{0}': reply size {1} exceeds the limit of {2} bytes", symbol,
                             outputSize, kMaxCallReply));
  std::string output(outputSize, '\0');
  int32_t status =
      reinterpret_cast<CallFn>(address)(input.data(), input.size(), output.data(), outputSize);
  if (status != 0)
    return makeError(formatv("call '{0}' failed with code {1} (input {2} bytes, reply {3} bytes)",
                             symbol, status, input.size(), outputSize));
  return std::move(output);
}

} // namespace courier::executor
