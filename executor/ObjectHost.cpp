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

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/BinaryFormat/Dwarf.h"
#include "llvm/BinaryFormat/ELF.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/Object/ELFObjectFile.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Support/DataExtractor.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>

using namespace llvm;

namespace courier::transport {

namespace {

using EntryFn = void (*)(void *results, void *args);
using CallFn = int32_t (*)(const void *in, uint64_t inSize, void *out, uint64_t outSize);

/// MLIR lowers `memref.get_global` to a descriptor whose allocated pointer is this
/// sentinel: the data lives in the object's constants and must never be freed.
void *const kGlobalSentinel = reinterpret_cast<void *>(uintptr_t{0xdeadbeef});

/// Fills the result area before a launch; no pointer, size, stride or offset a kernel
/// writes has this value in practice.
constexpr int64_t kUnwritten = 0x5a5a5a5a5a5a5a5a;

/// Words after the expected result descriptors that catch a kernel writing more (up to
/// 30 extra dimensions' worth, or a few extra descriptors).
constexpr size_t kResultSlackWords = 64;

/// Replies larger than this are refused rather than attempted: a bogus size from a caller
/// must produce an error, not an allocation failure.
constexpr uint64_t kMaxCallReply = uint64_t{1} << 32;

/// Bounds on what a launch may declare: MLIR ranks are small, and the descriptor area is
/// sized from these numbers before the kernel runs.
constexpr size_t kMaxRank = 64;
constexpr int64_t kMaxTensors = 4096;

Error makeError(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

/// The only process symbols kernels may bind to: the C allocator and memory routines that
/// MLIR's lowering and clang emit calls to, libm, and compiler-rt helpers. Anything else
/// fails at load time with a "symbols not found" message naming the symbol.
const StringSet<> &allowedProcessSymbols() {
  static const StringSet<> allowed = [] {
    StringSet<> names;
    for (const char *name : {"malloc",
                             "free",
                             "calloc",
                             "realloc",
                             "aligned_alloc",
                             "posix_memalign",
                             "memcpy",
                             "memmove",
                             "memset",
                             "memcmp",
                             "abort",
                             "__stack_chk_fail",
                             "__stack_chk_guard",
                             "__powisf2",
                             "__powidf2",
                             "__mulsc3",
                             "__muldc3",
                             "__divsc3",
                             "__divdc3",
                             "__extendhfsf2",
                             "__truncsfhf2",
                             "__truncdfhf2",
                             "__truncsfbf2",
                             "__truncdfbf2"})
      names.insert(name);
    for (const char *math :
         {"sin",       "cos",      "tan",   "asin",      "acos",  "atan",  "atan2",     "sinh",
          "cosh",      "tanh",     "asinh", "acosh",     "atanh", "exp",   "exp2",      "expm1",
          "log",       "log2",     "log10", "log1p",     "pow",   "sqrt",  "cbrt",      "fabs",
          "floor",     "ceil",     "round", "roundeven", "trunc", "rint",  "nearbyint", "fmod",
          "remainder", "copysign", "fmin",  "fmax",      "fma",   "hypot", "erf",       "erfc",
          "tgamma",    "lgamma",   "ldexp", "frexp",     "modf",  "sincos"}) {
      names.insert(math);
      names.insert((Twine(math) + "f").str());
    }
    return names;
  }();
  return allowed;
}

/// Bytes a relocation of `type` patches: JITLink applies fixups without bounds checks in
/// release builds, so an offset is checked against the width it will write.
unsigned relocationWidth(uint16_t machine, uint32_t type) {
  if (machine == ELF::EM_X86_64)
    switch (type) {
    case ELF::R_X86_64_64:
    case ELF::R_X86_64_PC64:
    case ELF::R_X86_64_GOTOFF64:
    case ELF::R_X86_64_GOTPC64:
    case ELF::R_X86_64_GOT64:
    case ELF::R_X86_64_GOTPCREL64:
    case ELF::R_X86_64_PLTOFF64:
    case ELF::R_X86_64_SIZE64:
    case ELF::R_X86_64_DTPMOD64:
    case ELF::R_X86_64_DTPOFF64:
    case ELF::R_X86_64_TPOFF64:
      return 8;
    default:
      return 4;
    }
  if (machine == ELF::EM_AARCH64 && (type == ELF::R_AARCH64_ABS64 || type == ELF::R_AARCH64_PREL64))
    return 8;
  return 4;
}

/// Checks every relocation against the section it patches and the symbol table it names,
/// which the linker itself trusts.
template <class ELFT>
Error checkRelocations(const object::ELFObjectFile<ELFT> &object, StringRef sha256) {
  const object::ELFFile<ELFT> &file = object.getELFFile();
  auto damaged = [&](const Twine &what) {
    return makeError("object " + sha256 + " is damaged: " + what);
  };
  auto sections = file.sections();
  if (!sections)
    return damaged(toString(sections.takeError()));
  uint16_t machine = file.getHeader().e_machine;
  for (size_t index = 0; index < sections->size(); ++index) {
    const auto &section = (*sections)[index];
    bool rela = section.sh_type == ELF::SHT_RELA;
    if (!rela && section.sh_type != ELF::SHT_REL)
      continue;
    if (section.sh_info == 0 || section.sh_info >= sections->size() ||
        section.sh_link >= sections->size())
      return damaged(formatv("relocation section {0} refers to section {1} and symbol table {2}",
                             index, section.sh_info, section.sh_link));
    const auto &target = (*sections)[section.sh_info];
    const auto &symbols = (*sections)[section.sh_link];
    uint64_t symbolCount = symbols.sh_entsize ? symbols.sh_size / symbols.sh_entsize : 0;
    auto check = [&](uint64_t offset, uint32_t type, uint32_t symbol) -> Error {
      unsigned width = relocationWidth(machine, type);
      if (target.sh_type == ELF::SHT_NOBITS || offset > target.sh_size ||
          target.sh_size - offset < width)
        return damaged(formatv("relocation at offset {0:x} of section {1} lies outside it "
                               "({2:x} bytes)",
                               offset, section.sh_info, uint64_t(target.sh_size)));
      if (symbol >= symbolCount)
        return damaged(formatv("relocation at offset {0:x} of section {1} names symbol {2} of "
                               "{3}",
                               offset, section.sh_info, symbol, symbolCount));
      return Error::success();
    };
    if (rela) {
      auto entries = file.relas(section);
      if (!entries)
        return damaged(toString(entries.takeError()));
      for (const auto &entry : *entries)
        if (Error error = check(entry.r_offset, entry.getType(false), entry.getSymbol(false)))
          return error;
    } else {
      auto entries = file.rels(section);
      if (!entries)
        return damaged(toString(entries.takeError()));
      for (const auto &entry : *entries)
        if (Error error = check(entry.r_offset, entry.getType(false), entry.getSymbol(false)))
          return error;
    }
  }
  return Error::success();
}

Error checkRelocations(const object::ELFObjectFileBase &object, StringRef sha256) {
  if (auto *elf = dyn_cast<object::ELF64LEObjectFile>(&object))
    return checkRelocations(*elf, sha256);
  if (auto *elf = dyn_cast<object::ELF64BEObjectFile>(&object))
    return checkRelocations(*elf, sha256);
  if (auto *elf = dyn_cast<object::ELF32LEObjectFile>(&object))
    return checkRelocations(*elf, sha256);
  if (auto *elf = dyn_cast<object::ELF32BEObjectFile>(&object))
    return checkRelocations(*elf, sha256);
  return makeError("object " + sha256 + " has an unknown ELF class");
}

/// Whether JITLink's eh-frame parser handles pointer encoding `encoding` safely: it reads
/// only 4- and 8-byte absolute or pc-relative values and treats anything else it does not
/// reject as unreachable.
bool isSafePointerEncoding(uint8_t encoding) {
  switch (encoding & 0x0f) {
  case dwarf::DW_EH_PE_absptr:
  case dwarf::DW_EH_PE_udata4:
  case dwarf::DW_EH_PE_udata8:
  case dwarf::DW_EH_PE_sdata4:
  case dwarf::DW_EH_PE_sdata8:
    break;
  default:
    return false;
  }
  return (encoding & 0xf0) == dwarf::DW_EH_PE_absptr || (encoding & 0xf0) == dwarf::DW_EH_PE_pcrel;
}

/// Checks the CIEs of an .eh_frame section for what JITLink's parser would trip over
/// instead of reporting: more than three augmentation fields overflow a fixed array, and
/// unexpected pointer encodings reach unreachable code.
Error checkEHFrame(StringRef contents, bool littleEndian, uint8_t pointerSize, StringRef sha256) {
  DataExtractor data(contents, littleEndian, pointerSize);
  uint64_t offset = 0;
  while (offset < contents.size()) {
    uint64_t start = offset;
    auto damaged = [&](const Twine &what) {
      return makeError(formatv("object {0} is damaged: .eh_frame record at {1:x}: {2}", sha256,
                               start, what.str()));
    };
    DataExtractor::Cursor cursor(offset);
    uint64_t length = data.getU32(cursor);
    if (length == 0xffffffff)
      length = data.getU64(cursor);
    if (!cursor)
      return damaged(toString(cursor.takeError()));
    uint64_t body = cursor.tell();
    if (length == 0)
      break;
    if (length > contents.size() - body)
      return damaged("its length runs past the end of the section");
    offset = body + length;
    DataExtractor record(contents.take_front(offset), littleEndian, pointerSize);
    if (record.getU32(cursor) != 0 || !cursor) {
      consumeError(cursor.takeError());
      continue; // An FDE: its fields are read with bounds checks, by its CIE's encodings.
    }
    record.getU8(cursor); // version; an unexpected one is reported by the linker
    StringRef augmentation = record.getCStrRef(cursor);
    if (!cursor)
      return damaged(toString(cursor.takeError()));
    unsigned fields = 0;
    for (size_t i = 0; i < augmentation.size(); ++i) {
      char c = augmentation[i];
      if (c == 'L' || c == 'P' || c == 'R')
        ++fields;
      else if (c == 'e' && i + 1 < augmentation.size() && augmentation[i + 1] == 'h')
        ++i;
      else if (c != 'z')
        return damaged("unsupported augmentation '" + augmentation + "'");
    }
    if (fields > 3)
      return damaged("augmentation '" + augmentation + "' has too many fields");
    if (augmentation.contains("eh"))
      record.skip(cursor, pointerSize);
    record.getULEB128(cursor); // code alignment
    record.getSLEB128(cursor); // data alignment
    record.getU8(cursor);      // return address register
    if (augmentation.starts_with("z")) {
      record.getULEB128(cursor);
      for (char c : augmentation) {
        if (c != 'L' && c != 'P' && c != 'R')
          continue;
        uint8_t encoding = record.getU8(cursor);
        if (!cursor)
          break;
        bool omitted = encoding == dwarf::DW_EH_PE_omit && c != 'R';
        if (!omitted && !isSafePointerEncoding(encoding))
          return damaged(formatv("unsupported pointer encoding {0:x2}", encoding).str());
        if (c == 'P' && !omitted) {
          uint8_t format = encoding & 0x0f;
          record.skip(cursor,
                      format == dwarf::DW_EH_PE_absptr ? pointerSize
                      : (format == dwarf::DW_EH_PE_udata4 || format == dwarf::DW_EH_PE_sdata4) ? 4
                                                                                               : 8);
        }
      }
    }
    if (!cursor)
      return damaged(toString(cursor.takeError()));
  }
  return Error::success();
}

/// Checks that `bytes` is an intact ELF relocatable object for this machine and collects
/// the names of the global functions it defines with default or protected visibility.
Error validateObject(StringRef sha256, StringRef bytes, std::vector<std::string> &exports,
                     std::vector<std::pair<std::string, uint64_t>> &signatureTables) {
  auto parsed = object::ObjectFile::createObjectFile(MemoryBufferRef(bytes, sha256));
  if (!parsed)
    return makeError(formatv("object {0} is not a valid object file: {1}", sha256,
                             toString(parsed.takeError())));
  auto *elf = dyn_cast<object::ELFObjectFileBase>(parsed->get());
  if (!elf)
    return makeError(formatv("object {0} is a {1} file; only ELF relocatable objects load", sha256,
                             (*parsed)->getFileFormatName()));
  if (elf->getEType() != ELF::ET_REL)
    return makeError(formatv("object {0} is not a relocatable object (ELF type {1}); "
                             "shared libraries load as plugins",
                             sha256, elf->getEType()));
  Triple host(sys::getProcessTriple());
  if (elf->getArch() != host.getArch())
    return makeError(formatv("object {0} is for {1} but this executor runs {2}", sha256,
                             Triple::getArchTypeName(elf->getArch()),
                             Triple::getArchTypeName(host.getArch())));
  for (const object::SectionRef &section : elf->sections()) {
    if (section.isBSS())
      continue;
    auto contents = section.getContents();
    if (!contents)
      return makeError(formatv("object {0} is damaged: section {1}: {2}", sha256,
                               section.getIndex(), toString(contents.takeError())));
    auto name = section.getName();
    if (!name)
      return makeError(formatv("object {0} is damaged: section {1}: {2}", sha256,
                               section.getIndex(), toString(name.takeError())));
    if (*name == ".eh_frame")
      if (Error error =
              checkEHFrame(*contents, elf->isLittleEndian(), elf->getBytesInAddress(), sha256))
        return error;
  }
  if (Error error = checkRelocations(*elf, sha256))
    return error;
  for (const object::ELFSymbolRef symbol : elf->symbols()) {
    auto name = symbol.getName();
    if (!name)
      return makeError(
          formatv("object {0} is damaged: symbol table: {1}", sha256, toString(name.takeError())));
    auto flags = symbol.getFlags();
    if (!flags)
      return makeError(formatv("object {0} is damaged: symbol '{1}': {2}", sha256, *name,
                               toString(flags.takeError())));
    if (!(*flags & object::SymbolRef::SF_Global) || (*flags & object::SymbolRef::SF_Undefined) ||
        (*flags & object::SymbolRef::SF_FormatSpecific) || name->empty())
      continue;
    auto type = symbol.getType();
    if (!type)
      return makeError(formatv("object {0} is damaged: symbol '{1}': {2}", sha256, *name,
                               toString(type.takeError())));
    // Only functions are ever called through an entry or `call`; handing out a data
    // symbol's address as code would crash.
    uint8_t visibility = symbol.getOther() & 0x3;
    if (*type == object::SymbolRef::ST_Function &&
        (visibility == ELF::STV_DEFAULT || visibility == ELF::STV_PROTECTED))
      exports.push_back(name->str());
    if (*type == object::SymbolRef::ST_Data && name->starts_with(COURIER_SIGNATURE_PREFIX))
      signatureTables.emplace_back(name->str(), symbol.getSize());
  }
  return Error::success();
}

int64_t elementCount(ArrayRef<int64_t> sizes) {
  int64_t count = 1;
  for (int64_t size : sizes)
    count *= size;
  return count;
}

/// Copies a strided tensor into a fresh row-major malloc'd buffer (at least one byte, so
/// the result is always a real allocation).
void *copyContiguous(const char *data, int64_t elemSize, ArrayRef<int64_t> sizes,
                     ArrayRef<int64_t> strides, int64_t count) {
  char *out = static_cast<char *>(std::malloc(std::max<int64_t>(1, count * elemSize)));
  if (!out || count == 0)
    return out;
  SmallVector<int64_t, 4> index(sizes.size(), 0);
  for (int64_t n = 0; n < count; ++n) {
    int64_t offset = 0;
    for (size_t d = 0; d < sizes.size(); ++d)
      offset += index[d] * strides[d];
    std::memcpy(out + n * elemSize, data + offset * elemSize, elemSize);
    for (size_t d = sizes.size(); d-- > 0;) {
      if (++index[d] < sizes[d])
        break;
      index[d] = 0;
    }
  }
  return out;
}

SmallVector<int64_t, 4> rowMajorStrides(ArrayRef<int64_t> sizes) {
  SmallVector<int64_t, 4> strides(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;)
    strides[d - 1] = strides[d] * std::max<int64_t>(1, sizes[d]);
  return strides;
}

/// Held by the host while the object is loaded and by each launch or call running its code,
/// so removing the object never unmaps code that is still executing.
struct LoadedObject {
  orc::JITDylib *dylib = nullptr;
  /// Every exported function, resolved at load time so launches never enter ORC.
  StringMap<void *> symbols;
  /// Entry name -> its signature table (see runtime/ExecutorABI.h), when the object has one.
  StringMap<std::vector<int64_t>> signatures;
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

} // namespace

struct ObjectHost::Impl {
  std::shared_ptr<PluginSet> plugins;
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
  unsigned dylibCounter = 0;
  /// Declared last so it is destroyed first, while the reporter's state is still alive.
  std::unique_ptr<orc::LLJIT> jit;

  std::string takeReported() {
    std::lock_guard<std::mutex> lock(reportMutex);
    return std::exchange(reported, std::string());
  }

  Error link(const ObjectBlob &object, ArrayRef<std::string> exports,
             ArrayRef<std::pair<std::string, uint64_t>> signatureTables);
  Expected<std::vector<OwnedTensor>> adoptResults(StringRef entry, ArrayRef<int64_t> words,
                                                  ArrayRef<TensorView> inputs,
                                                  ArrayRef<ResultSpec> results);
};

Expected<std::unique_ptr<ObjectHost>> ObjectHost::create(std::shared_ptr<PluginSet> plugins) {
  static std::once_flag targetsReady;
  std::call_once(targetsReady, [] {
    InitializeNativeTarget();
    InitializeNativeTargetAsmPrinter();
  });

  auto impl = std::make_unique<Impl>();
  impl->plugins = std::move(plugins);
  // No platform and no implicit process symbols: kernels see only the allow-listed C
  // runtime below, and the inactive platform needs no ORC runtime library.
  auto jit = orc::LLJITBuilder()
                 .setLinkProcessSymbolsByDefault(false)
                 .setPlatformSetUp(orc::setUpInactivePlatform)
                 .create();
  if (!jit)
    return makeError("creating the object host's JIT: " + toString(jit.takeError()));
  impl->jit = std::move(*jit);
  Impl *raw = impl.get();
  impl->jit->getExecutionSession().setErrorReporter([raw](Error error) {
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
  auto generator = orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      impl->jit->getDataLayout().getGlobalPrefix(),
      [](const orc::SymbolStringPtr &name) { return allowedProcessSymbols().contains(*name); });
  if (!generator)
    return makeError("exposing C runtime symbols to kernels: " + toString(generator.takeError()));
  runtime->addGenerator(std::move(*generator));
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

Error ObjectHost::Impl::link(const ObjectBlob &object, ArrayRef<std::string> exports,
                             ArrayRef<std::pair<std::string, uint64_t>> signatureTables) {
  orc::ExecutionSession &session = jit->getExecutionSession();
  auto dylib = jit->createJITDylib(
      formatv("object-{0}-{1}", StringRef(object.sha256).take_front(16), dylibCounter++).str());
  if (!dylib)
    return makeError(
        formatv("loading object {0}: {1}", object.sha256, toString(dylib.takeError())));
  dylib->addToLinkOrder(*runtime);

  auto discard = [&](Error cause) -> Error {
    // ORC reports the root cause (e.g. "Symbols not found: [ foo ]") out of band and
    // returns a generic "failed to materialize"; lead with the cause.
    std::string message = toString(std::move(cause));
    std::string reported = takeReported();
    if (!reported.empty())
      message = reported + " (" + message + ")";
    if (Error removal = session.removeJITDylib(*dylib))
      message += "; unloading it also failed: " + toString(std::move(removal));
    takeReported();
    return makeError(formatv("loading object {0}: {1}", object.sha256, message));
  };

  takeReported();
  if (Error error =
          jit->addObjectFile(*dylib, MemoryBuffer::getMemBufferCopy(*object.bytes, object.sha256)))
    return discard(std::move(error));

  // Resolving every export now links the object eagerly, so a missing symbol is reported
  // when the object is shipped rather than at its first launch.
  orc::SymbolLookupSet lookupSet;
  for (const std::string &name : exports)
    lookupSet.add(session.intern(name));
  for (const auto &table : signatureTables)
    lookupSet.add(session.intern(table.first));
  auto resolved = session.lookup(orc::makeJITDylibSearchOrder({&*dylib}), std::move(lookupSet));
  if (!resolved)
    return discard(resolved.takeError());

  auto loaded = std::make_shared<LoadedObject>();
  loaded->dylib = &*dylib;
  for (const std::string &name : exports)
    loaded->symbols[name] = (*resolved)[session.intern(name)].getAddress().toPtr<void *>();
  for (const auto &[name, size] : signatureTables) {
    // {version, inputs, results, (rank, element bytes) per input and result}.
    const auto *words = (*resolved)[session.intern(name)].getAddress().toPtr<const int64_t *>();
    size_t count = size / sizeof(int64_t);
    bool wellFormed = size % sizeof(int64_t) == 0 && count >= 3 &&
                      words[0] == COURIER_SIGNATURE_VERSION && words[1] >= 0 && words[2] >= 0 &&
                      words[1] <= kMaxTensors && words[2] <= kMaxTensors &&
                      count == static_cast<size_t>(3 + 2 * (words[1] + words[2]));
    if (!wellFormed)
      return discard(makeError(formatv("signature table '{0}' is malformed", name)));
    std::string entry =
        COURIER_ENTRY_PREFIX + StringRef(name).drop_front(strlen(COURIER_SIGNATURE_PREFIX)).str();
    loaded->signatures[entry].assign(words, words + count);
  }
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
  std::vector<std::string> exports;
  std::vector<std::pair<std::string, uint64_t>> signatureTables;
  if (Error error = validateObject(object.sha256, *object.bytes, exports, signatureTables))
    return error;
  return impl->link(object, exports, signatureTables);
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

Expected<std::vector<OwnedTensor>> ObjectHost::Impl::adoptResults(StringRef entry,
                                                                  ArrayRef<int64_t> words,
                                                                  ArrayRef<TensorView> inputs,
                                                                  ArrayRef<ResultSpec> results) {
  // First pass: check every descriptor before taking any buffer, so a bad one leaves
  // nothing half-adopted.
  size_t pos = 0;
  std::string problem;
  for (size_t i = 0; i < results.size() && problem.empty(); ++i) {
    const int64_t *d = words.data() + pos;
    int64_t rank = results[i].rank;
    ArrayRef<int64_t> sizes(d + 3, rank);
    for (int64_t size : sizes)
      if (size < 0)
        problem = formatv("result {0} has a negative size {1}", i, size).str();
    if (problem.empty() && d[1] == 0 && elementCount(sizes) > 0)
      problem = formatv("result {0} has a null data pointer", i).str();
    pos += 3 + 2 * rank;
  }

  auto isBorrowed = [&](void *allocated, ArrayRef<void *> taken) {
    if (!allocated || allocated == kGlobalSentinel || llvm::is_contained(taken, allocated))
      return true;
    for (const TensorView &input : inputs)
      if (allocated == input.data)
        return true;
    return false;
  };

  std::vector<OwnedTensor> tensors;
  tensors.reserve(results.size());
  SmallVector<void *, 8> taken;
  pos = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const int64_t *d = words.data() + pos;
    int64_t rank = results[i].rank;
    int64_t elemSize = results[i].elemSize;
    pos += 3 + 2 * rank;
    void *allocated = reinterpret_cast<void *>(d[0]);
    char *data = reinterpret_cast<char *>(d[1]) + d[2] * elemSize;
    std::vector<int64_t> sizes(d + 3, d + 3 + rank);
    std::vector<int64_t> strides(d + 3 + rank, d + 3 + 2 * rank);
    bool borrowed = isBorrowed(allocated, taken);
    if (!problem.empty()) {
      // Free what the kernel allocated for us; borrowed memory is not ours to free.
      if (!borrowed) {
        taken.push_back(allocated);
        std::free(allocated);
      }
      continue;
    }
    if (!borrowed) {
      taken.push_back(allocated);
      tensors.emplace_back(allocated, data, elemSize, std::move(sizes), std::move(strides));
      continue;
    }
    // The kernel returned memory it does not own (an input, a constant, or a buffer already
    // returned as another result): hand over a private copy instead.
    int64_t count = elementCount(sizes);
    void *copy = copyContiguous(data, elemSize, sizes, strides, count);
    if (!copy) {
      problem = formatv("out of memory copying result {0}", i).str();
      continue;
    }
    auto contiguous = rowMajorStrides(sizes);
    tensors.emplace_back(copy, copy, elemSize, std::move(sizes),
                         std::vector<int64_t>(contiguous.begin(), contiguous.end()));
  }
  if (!problem.empty())
    return makeError(formatv("entry '{0}' returned a bad descriptor: {1}", entry, problem));
  return std::move(tensors);
}

namespace {

/// Checks a launch against the entry's signature table. Objects without one (written by
/// hand) still get plausible element sizes and bounded ranks, so sizes a caller declares
/// never make the host read far past a kernel's buffers.
Error checkSignature(const LoadedObject &object, StringRef entry, ArrayRef<TensorView> inputs,
                     ArrayRef<ResultSpec> results) {
  auto plausible = [](int64_t elemSize) {
    return elemSize == 1 || elemSize == 2 || elemSize == 4 || elemSize == 8 || elemSize == 16;
  };
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].sizes.size() > kMaxRank || !plausible(inputs[i].elemSize))
      return makeError(formatv("input {0} of '{1}' has rank {2} and element size {3} (ranks "
                               "go up to {4}; element sizes are 1, 2, 4, 8 or 16)",
                               i, entry, inputs[i].sizes.size(), inputs[i].elemSize, kMaxRank));
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].rank < 0 || results[i].rank > static_cast<int64_t>(kMaxRank) ||
        !plausible(results[i].elemSize))
      return makeError(formatv("result {0} of '{1}' has rank {2} and element size {3} (ranks "
                               "go up to {4}; element sizes are 1, 2, 4, 8 or 16)",
                               i, entry, results[i].rank, results[i].elemSize, kMaxRank));
  auto table = object.signatures.find(entry);
  if (table == object.signatures.end())
    return Error::success();
  ArrayRef<int64_t> words = table->second;
  auto describe = [&](size_t first, size_t count) {
    std::string text;
    for (size_t k = 0; k < count; ++k)
      text += formatv("{0}(rank {1}, {2}-byte elements)", k ? ", " : "", words[first + 2 * k],
                      words[first + 2 * k + 1]);
    return "[" + text + "]";
  };
  auto numInputs = static_cast<size_t>(words[1]), numResults = static_cast<size_t>(words[2]);
  bool matches = inputs.size() == numInputs && results.size() == numResults;
  for (size_t i = 0; matches && i < numInputs; ++i)
    matches = static_cast<int64_t>(inputs[i].sizes.size()) == words[3 + 2 * i] &&
              inputs[i].elemSize == words[4 + 2 * i];
  for (size_t i = 0; matches && i < numResults; ++i)
    matches = results[i].rank == words[3 + 2 * (numInputs + i)] &&
              results[i].elemSize == words[4 + 2 * (numInputs + i)];
  if (matches)
    return Error::success();
  return makeError(formatv("'{0}' takes {1} and returns {2}; the launch does not match", entry,
                           describe(3, numInputs), describe(3 + 2 * numInputs, numResults)));
}

} // namespace

Expected<std::vector<OwnedTensor>> ObjectHost::launch(StringRef sha256, StringRef entry,
                                                      ArrayRef<TensorView> inputs,
                                                      ArrayRef<ResultSpec> results) {
  EntryFn function = nullptr;
  // Keeps the object's code loaded until the launch returns, even if it is removed meanwhile.
  std::shared_ptr<LoadedObject> running;
  {
    std::shared_lock<std::shared_mutex> lock(impl->mutex);
    auto object = impl->objects.find(sha256);
    if (object == impl->objects.end())
      return makeError(formatv("object {0} is not loaded", sha256));
    auto symbol = object->second->symbols.find(entry);
    if (symbol == object->second->symbols.end())
      return makeError(formatv("unknown entry '{0}' in object {1}", entry, sha256));
    function = reinterpret_cast<EntryFn>(symbol->second);
    running = object->second;
  }
  if (Error error = checkSignature(*running, entry, inputs, results))
    return std::move(error);

  size_t inWords = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorView &input = inputs[i];
    if (input.sizes.size() != input.strides.size())
      return makeError(formatv("input {0} of '{1}' has {2} sizes but {3} strides", i, entry,
                               input.sizes.size(), input.strides.size()));
    if (input.elemSize <= 0)
      return makeError(
          formatv("input {0} of '{1}' has element size {2}", i, entry, input.elemSize));
    inWords += 3 + 2 * input.sizes.size();
  }
  size_t outWords = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].rank < 0 || results[i].elemSize <= 0)
      return makeError(formatv("result {0} of '{1}' has rank {2} and element size {3}", i, entry,
                               results[i].rank, results[i].elemSize));
    outWords += 3 + 2 * results[i].rank;
  }

  // Descriptors are rebuilt from the views without copying tensor data: allocated and
  // aligned both point at the caller's element [0, ..., 0].
  SmallVector<int64_t, 64> inBuffer(std::max<size_t>(1, inWords));
  SmallVector<void *, 8> arguments(std::max<size_t>(1, inputs.size()));
  size_t pos = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorView &input = inputs[i];
    int64_t *d = inBuffer.data() + pos;
    arguments[i] = d;
    d[0] = d[1] = static_cast<int64_t>(reinterpret_cast<intptr_t>(input.data));
    d[2] = 0;
    size_t rank = input.sizes.size();
    std::copy(input.sizes.begin(), input.sizes.end(), d + 3);
    std::copy(input.strides.begin(), input.strides.end(), d + 3 + rank);
    pos += 3 + 2 * rank;
  }
  // The result area is pre-filled with a pattern and followed by slack, so a kernel whose
  // results differ from what the caller expects (count or ranks) shows up as words it left
  // unwritten or wrote past the end, instead of being read as garbage descriptors.
  SmallVector<int64_t, 160> outBuffer(outWords + kResultSlackWords, kUnwritten);

  function(outBuffer.data(), arguments.data());

  auto expectedRanks = [&] {
    std::string text;
    for (const ResultSpec &spec : results)
      text += (text.empty() ? "" : ", ") + std::to_string(spec.rank);
    return "[" + text + "]";
  };
  for (size_t w = outWords; w < outBuffer.size(); ++w)
    if (outBuffer[w] != kUnwritten)
      return makeError(formatv("entry '{0}' wrote more result descriptors than {1} result(s) "
                               "of rank(s) {2}: its results do not match the caller's",
                               entry, results.size(), expectedRanks()));
  for (size_t w = 0; w < outWords; ++w)
    if (outBuffer[w] == kUnwritten)
      return makeError(formatv("entry '{0}' wrote fewer result descriptors than {1} result(s) "
                               "of rank(s) {2}: its results do not match the caller's",
                               entry, results.size(), expectedRanks()));
  return impl->adoptResults(entry, ArrayRef<int64_t>(outBuffer).take_front(outWords), inputs,
                            results);
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
    return makeError(
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

} // namespace courier::transport
