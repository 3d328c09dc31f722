// Structural checks of shipped ELF objects, before JITLink sees them, and the reading of
// their exports and signature tables.
#include "executor/ElfValidation.h"

#include "runtime/ExecutorABI.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/BinaryFormat/Dwarf.h"
#include "llvm/BinaryFormat/ELF.h"
#include "llvm/Object/ELFObjectFile.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Support/DataExtractor.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

#include <algorithm>
#include <cstring>
#include <optional>

using namespace llvm;

namespace courier::executor {

namespace {

/// Upper bound on the inputs or results a signature table may declare (as for launches).
constexpr int64_t kMaxTableTensors = 4096;

Error makeError(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
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

/// Byte ranges of one section that relocations patch.
using PatchedRanges = std::vector<std::pair<uint64_t, unsigned>>;

/// Why JITLink makes no symbol of `named` (index `index`) for relocations to point at, if it
/// makes none: a relocation naming such a symbol fails the link with an error that crashes the
/// host as it is built. JITLink makes a symbol of an undefined global or weak one, of the null
/// placeholder, of a common one, and of one of these types defined in a section it maps.
template <class ELFT>
std::optional<std::string> unlinkableSymbol(const typename ELFT::Sym &named, unsigned index,
                                            StringRef name, typename ELFT::ShdrRange sections) {
  uint8_t type = named.getType(), binding = named.getBinding();
  unsigned defining = named.st_shndx;
  if (type == ELF::STT_FILE)
    return formatv("symbol {0} is a file symbol", index).str();
  if (defining == ELF::SHN_UNDEF) {
    bool placeholder = binding == ELF::STB_LOCAL && type == ELF::STT_NOTYPE &&
                       named.st_value == 0 && named.st_size == 0 && name.empty();
    if (binding == ELF::STB_GLOBAL || binding == ELF::STB_WEAK || placeholder)
      return std::nullopt;
    return formatv("symbol {0} is undefined with binding {1}, neither global nor weak", index,
                   unsigned(binding))
        .str();
  }
  if (defining == ELF::SHN_COMMON)
    return std::nullopt;
  if (defining >= ELF::SHN_LORESERVE)
    return formatv("symbol {0} lies in the reserved section index {1:x}", index, defining).str();
  if (type != ELF::STT_NOTYPE && type != ELF::STT_FUNC && type != ELF::STT_OBJECT &&
      type != ELF::STT_SECTION && type != ELF::STT_TLS)
    return formatv("symbol {0} has type {1}", index, unsigned(type)).str();
  if (defining >= sections.size())
    return formatv("symbol {0} lies in section {1} of {2}", index, defining, sections.size()).str();
  if (sections[defining].sh_type == ELF::SHT_NULL)
    return formatv("symbol {0} lies in section {1}, of type SHT_NULL", index, defining).str();
  return std::nullopt;
}

/// Checks every relocation against the section it patches and the symbol table it names,
/// which the linker itself trusts, and records where each section is patched. Loaded code
/// or data must not refer to a section the linker does not allocate: JITLink gives such a
/// section no memory in the executing process, so a reference to it would read wherever
/// its placeholder address points. Every relocation must name a symbol JITLink makes, in the
/// symbol table JITLink reads (the object's one SHT_SYMTAB, whatever sh_link says).
/// What checking one object's relocations reads: its sections and the symbol table the
/// linker reads (the object's one SHT_SYMTAB).
template <class ELFT> struct RelocationChecker {
  using File = object::ELFFile<ELFT>;
  using Shdr = typename ELFT::Shdr;

  /// The relocation section being checked and what it patches.
  struct Patch {
    const Shdr &section, &target;
    /// The symbols the relocation section's own table holds, read only for relocations of
    /// allocated sections (the debug sections JITLink skips may name anything).
    typename File::Elf_Sym_Range symbols;
    uint64_t symbolCount;
    bool loaded;
    PatchedRanges &ranges;
  };

  const File &file;
  typename File::Elf_Shdr_Range sections;
  StringRef sha256;
  uint16_t machine;
  typename File::Elf_Sym_Range linkerSymbols;
  StringRef linkerNames;

  Error damaged(const Twine &what) const {
    return makeError("object " + sha256 + " is damaged: " + what);
  }
  std::string sectionName(unsigned index) const {
    auto name = file.getSectionName(sections[index]);
    if (name)
      return name->str();
    consumeError(name.takeError());
    return formatv("{0}", index).str();
  }

  /// The relocation at `offset` of `patch`'s target, of `type`, naming `symbol`.
  Error check(const Patch &patch, uint64_t offset, uint32_t type, uint32_t symbol) const {
    const Shdr &section = patch.section, &target = patch.target;
    unsigned width = relocationWidth(machine, type);
    if (target.sh_type == ELF::SHT_NOBITS || offset > target.sh_size ||
        target.sh_size - offset < width)
      return damaged(formatv("relocation at offset {0:x} of section {1} lies outside it "
                             "({2:x} bytes)",
                             offset, section.sh_info, uint64_t(target.sh_size)));
    if (symbol >= patch.symbolCount)
      return damaged(formatv("relocation at offset {0:x} of section {1} names symbol {2} of "
                             "{3}",
                             offset, section.sh_info, symbol, patch.symbolCount));
    patch.ranges.emplace_back(offset, width);
    if (symbol >= linkerSymbols.size())
      return damaged(formatv("relocation at offset {0:x} of section {1} names symbol {2}, which "
                             "the symbol table the linker reads does not hold",
                             offset, section.sh_info, symbol));
    const auto &named = linkerSymbols[symbol];
    auto name = named.getName(linkerNames);
    if (!name)
      return damaged(toString(name.takeError()));
    if (std::optional<std::string> why = unlinkableSymbol<ELFT>(named, symbol, *name, sections))
      return damaged(formatv("relocation at offset {0:x} of section {1} names a symbol the "
                             "linker gives no address: {2}",
                             offset, section.sh_info, *why));
    if (!patch.loaded || patch.symbols.empty())
      return Error::success();
    unsigned defining = patch.symbols[symbol].st_shndx;
    if (defining == ELF::SHN_UNDEF || defining >= ELF::SHN_LORESERVE)
      return Error::success();
    if (defining >= sections.size())
      return damaged(
          formatv("symbol {0} lies in section {1} of {2}", symbol, defining, sections.size()));
    if (!(sections[defining].sh_flags & ELF::SHF_ALLOC))
      return damaged(formatv("section {0} ({1}) refers to section {2} ({3}), which is not "
                             "allocated (SHF_ALLOC is clear)",
                             section.sh_info, sectionName(section.sh_info), defining,
                             sectionName(defining)));
    return Error::success();
  }

  /// Every relocation of relocation section `index`, its target's patched ranges recorded.
  Error checkSection(size_t index, DenseMap<unsigned, PatchedRanges> &patched) const {
    const Shdr &section = sections[index];
    bool rela = section.sh_type == ELF::SHT_RELA;
    if (section.sh_info == 0 || section.sh_info >= sections.size() ||
        section.sh_link >= sections.size())
      return damaged(formatv("relocation section {0} refers to section {1} and symbol table {2}",
                             index, section.sh_info, section.sh_link));
    const Shdr &target = sections[section.sh_info];
    const Shdr &symbolSection = sections[section.sh_link];
    Patch patch{
        section, target, {}, 0, bool(target.sh_flags & ELF::SHF_ALLOC), patched[section.sh_info]};
    patch.symbolCount =
        symbolSection.sh_entsize ? symbolSection.sh_size / symbolSection.sh_entsize : 0;
    if (patch.loaded && symbolSection.sh_type == ELF::SHT_SYMTAB) {
      auto range = file.symbols(&symbolSection);
      if (!range)
        return damaged(toString(range.takeError()));
      patch.symbols = *range;
      patch.symbolCount = std::min<uint64_t>(patch.symbolCount, patch.symbols.size());
    }
    if (rela) {
      auto entries = file.relas(section);
      if (!entries)
        return damaged(toString(entries.takeError()));
      for (const auto &entry : *entries)
        if (Error error =
                check(patch, entry.r_offset, entry.getType(false), entry.getSymbol(false)))
          return error;
      return Error::success();
    }
    auto entries = file.rels(section);
    if (!entries)
      return damaged(toString(entries.takeError()));
    for (const auto &entry : *entries)
      if (Error error = check(patch, entry.r_offset, entry.getType(false), entry.getSymbol(false)))
        return error;
    return Error::success();
  }
};

/// Checks every relocation against the section it patches and the symbol table it names,
/// which the linker itself trusts, and records where each section is patched. Loaded code
/// or data must not refer to a section the linker does not allocate: JITLink gives such a
/// section no memory in the executing process, so a reference to it would read wherever
/// its placeholder address points. Every relocation must name a symbol JITLink makes, in the
/// symbol table JITLink reads (the object's one SHT_SYMTAB, whatever sh_link says).
template <class ELFT>
Error checkRelocations(const object::ELFObjectFile<ELFT> &object, StringRef sha256,
                       DenseMap<unsigned, PatchedRanges> &patched) {
  const object::ELFFile<ELFT> &file = object.getELFFile();
  auto sections = file.sections();
  if (!sections)
    return makeError("object " + sha256 + " is damaged: " + toString(sections.takeError()));
  RelocationChecker<ELFT> checker{file, *sections, sha256, file.getHeader().e_machine, {}, {}};
  const typename ELFT::Shdr *linkerTable = nullptr;
  for (const auto &section : *sections)
    if (section.sh_type == ELF::SHT_SYMTAB && !linkerTable)
      linkerTable = &section;
  if (linkerTable) {
    auto range = file.symbols(linkerTable);
    if (!range)
      return checker.damaged(toString(range.takeError()));
    auto names = file.getStringTableForSymtab(*linkerTable, *sections);
    if (!names)
      return checker.damaged(toString(names.takeError()));
    checker.linkerSymbols = *range;
    checker.linkerNames = *names;
  }
  for (size_t index = 0; index < sections->size(); ++index) {
    uint32_t type = (*sections)[index].sh_type;
    if (type == ELF::SHT_RELA || type == ELF::SHT_REL)
      if (Error error = checker.checkSection(index, patched))
        return error;
  }
  return Error::success();
}

/// Checks that the sections the linker allocates, each at its alignment, and the common
/// symbols it makes zero-filled blocks of, fit in kMaxObjectMemoryBytes. JITLink maps and
/// zero-fills a `.bss`, or a common symbol, of whatever size its header says, which costs the
/// object nothing in bytes.
template <class ELFT>
Error checkFootprint(const object::ELFObjectFile<ELFT> &object, StringRef sha256) {
  const object::ELFFile<ELFT> &file = object.getELFFile();
  auto sections = file.sections();
  if (!sections)
    return makeError("object " + sha256 + " is damaged: " + toString(sections.takeError()));
  // Saturating, so a damaged size or alignment cannot wrap the sum back under the bound.
  uint64_t footprint = 0;
  // The symbol table JITLink reads: the first SHT_SYMTAB.
  for (const auto &section : *sections) {
    if (section.sh_type != ELF::SHT_SYMTAB)
      continue;
    auto symbols = file.symbols(&section);
    if (!symbols)
      return makeError("object " + sha256 + " is damaged: " + toString(symbols.takeError()));
    for (size_t index = 0; index < symbols->size(); ++index) {
      const auto &symbol = (*symbols)[index];
      // Common as JITLink reads it: in SHN_COMMON, or of type STT_COMMON wherever it lies.
      if (!symbol.isCommon())
        continue;
      // A common symbol's value is its alignment.
      uint64_t alignment = std::max<uint64_t>(symbol.st_value, 1);
      if (!isPowerOf2_64(alignment))
        return makeError(formatv("object {0} is damaged: common symbol {1} is aligned to {2}, "
                                 "which is not a power of two",
                                 sha256, index, alignment));
      footprint = SaturatingAdd(footprint, uint64_t(symbol.st_size), alignment - 1);
      if (footprint > kMaxObjectMemoryBytes)
        return makeError(formatv("object {0} takes more memory than an object may: its common "
                                 "symbols, up to symbol {1} ({2} bytes aligned to {3}), need "
                                 "more than {4} bytes",
                                 sha256, index, uint64_t(symbol.st_size), alignment,
                                 kMaxObjectMemoryBytes));
    }
    break;
  }
  for (size_t index = 0; index < sections->size(); ++index) {
    const auto &section = (*sections)[index];
    if (!(section.sh_flags & ELF::SHF_ALLOC))
      continue;
    uint64_t alignment = std::max<uint64_t>(section.sh_addralign, 1);
    auto name = [&] {
      auto found = file.getSectionName(section);
      if (found)
        return found->str();
      consumeError(found.takeError());
      return std::string();
    };
    if (!isPowerOf2_64(alignment))
      return makeError(formatv("object {0} is damaged: section {1} ({2}) is aligned to {3}, "
                               "which is not a power of two",
                               sha256, index, name(), alignment));
    footprint = SaturatingAdd(footprint, uint64_t(section.sh_size), alignment - 1);
    if (footprint > kMaxObjectMemoryBytes)
      return makeError(formatv("object {0} takes more memory than an object may: its allocated "
                               "sections, up to section {1} ({2}: {3} bytes aligned to {4}), "
                               "need more than {5} bytes",
                               sha256, index, name(), uint64_t(section.sh_size), alignment,
                               kMaxObjectMemoryBytes));
  }
  return Error::success();
}

/// Calls `check` with `object` as the ELF object of its class and byte order.
template <typename Check>
Error withElfType(const object::ELFObjectFileBase &object, StringRef sha256, Check check) {
  if (auto *elf = dyn_cast<object::ELF64LEObjectFile>(&object))
    return check(*elf);
  if (auto *elf = dyn_cast<object::ELF64BEObjectFile>(&object))
    return check(*elf);
  if (auto *elf = dyn_cast<object::ELF32LEObjectFile>(&object))
    return check(*elf);
  if (auto *elf = dyn_cast<object::ELF32BEObjectFile>(&object))
    return check(*elf);
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

/// Checks the records of an .eh_frame section for what JITLink's parser would trip over
/// instead of reporting: more than three augmentation fields overflow a fixed array,
/// unexpected pointer encodings reach unreachable code, and an FDE whose CIE pointer names no
/// CIE before it fails the link with an error that is corrupt by the time it is reported.
/// What a CIE's augmentation string holds that the linker does not read (letters other than
/// z, L, P, R and "eh", or more than three fields), or nothing.
std::optional<std::string> augmentationProblem(StringRef augmentation) {
  unsigned fields = 0;
  for (size_t i = 0; i < augmentation.size(); ++i) {
    char c = augmentation[i];
    if (c == 'L' || c == 'P' || c == 'R')
      ++fields;
    else if (c == 'e' && i + 1 < augmentation.size() && augmentation[i + 1] == 'h')
      ++i;
    else if (c != 'z')
      return ("unsupported augmentation '" + augmentation + "'").str();
  }
  if (fields > 3)
    return ("augmentation '" + augmentation + "' has too many fields").str();
  return std::nullopt;
}

Error checkEHFrame(StringRef contents, bool littleEndian, uint8_t pointerSize, StringRef sha256) {
  DataExtractor data(contents, littleEndian, pointerSize);
  DenseSet<uint64_t> cies; ///< Offsets of the CIEs read so far.
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
    uint64_t idField = cursor.tell();
    uint32_t id = record.getU32(cursor);
    if (!cursor)
      return damaged(toString(cursor.takeError()));
    if (id != 0) {
      // An FDE, whose id is the distance back to its CIE; its other fields are read with
      // bounds checks, by that CIE's encodings.
      if (id > idField || !cies.contains(idField - id))
        return damaged(formatv("its CIE pointer {0:x} names no CIE before it", id).str());
      continue;
    }
    cies.insert(start);
    record.getU8(cursor); // version; an unexpected one is reported by the linker
    StringRef augmentation = record.getCStrRef(cursor);
    if (!cursor)
      return damaged(toString(cursor.takeError()));
    if (std::optional<std::string> wrong = augmentationProblem(augmentation))
      return damaged(*wrong);
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

/// Reads the signature table `name` (`size` bytes at `offset` of `section`) and checks it is
/// well formed: the layout of abi/KernelABI.h, in bounds, and not patched by relocations
/// (its words are read from the file, not from linked memory).
Error readSignatureTable(const object::ELFObjectFileBase &elf, StringRef sha256, StringRef name,
                         const object::SectionRef &section, uint64_t offset, uint64_t size,
                         const PatchedRanges *patched, std::vector<int64_t> &words) {
  auto malformed = [&](const Twine &what) {
    return makeError(
        formatv("object {0} has a malformed signature table '{1}': {2}", sha256, name, what.str()));
  };
  if (section.isBSS())
    return malformed("it has no contents");
  auto contents = section.getContents();
  if (!contents)
    return malformed(toString(contents.takeError()));
  if (offset > contents->size() || size > contents->size() - offset)
    return malformed(
        formatv("its {0} bytes at offset {1:x} lie outside its section", size, offset));
  if (size % sizeof(int64_t) != 0 || size < 3 * sizeof(int64_t))
    return malformed(formatv("{0} bytes is not a whole number of at least 3 words", size));
  if (patched)
    for (const auto &[at, width] : *patched)
      if (at < offset + size && offset < at + width)
        return malformed("a relocation patches it");
  DataExtractor data(contents->substr(offset, size), elf.isLittleEndian(), 8);
  DataExtractor::Cursor cursor(0);
  words.clear();
  for (uint64_t i = 0; i < size / sizeof(int64_t); ++i)
    words.push_back(static_cast<int64_t>(data.getU64(cursor)));
  if (!cursor)
    return malformed(toString(cursor.takeError()));
  if (words[0] != COURIER_SIGNATURE_VERSION)
    return malformed(formatv("version {0}; this executor reads version {1}", words[0],
                             COURIER_SIGNATURE_VERSION));
  int64_t inputs = words[1], results = words[2];
  if (inputs < 0 || results < 0 || inputs > kMaxTableTensors || results > kMaxTableTensors)
    return malformed(formatv("{0} inputs and {1} results (at most {2} each)", inputs, results,
                             kMaxTableTensors));
  if (words.size() != static_cast<size_t>(3 + 2 * (inputs + results)))
    return malformed(formatv("{0} words for {1} inputs and {2} results, which need {3}",
                             words.size(), inputs, results, 3 + 2 * (inputs + results)));
  return Error::success();
}

/// Reads the features notes of the section `contents` (abi/KernelABI.h) into `out`; notes of
/// other names or types are skipped.
Error readFeaturesNotes(StringRef contents, bool littleEndian, StringRef sha256,
                        std::vector<std::string> &out) {
  auto malformed = [&](const Twine &what) {
    return makeError(formatv("object {0} has a malformed features record ({1}): {2}", sha256,
                             COURIER_FEATURES_SECTION, what.str()));
  };
  DataExtractor data(contents, littleEndian, 4);
  uint64_t offset = 0;
  while (offset < contents.size()) {
    if (contents.size() - offset < 12)
      return malformed(formatv("a note at offset {0:x} is cut short", offset));
    DataExtractor::Cursor cursor(offset);
    uint64_t nameSize = data.getU32(cursor), descSize = data.getU32(cursor);
    uint32_t type = data.getU32(cursor);
    if (!cursor)
      return malformed(toString(cursor.takeError()));
    uint64_t name = offset + 12, desc = name + alignTo(nameSize, 4);
    if (nameSize > contents.size() - name || desc > contents.size() ||
        descSize > contents.size() - desc)
      return malformed(
          formatv("the note at offset {0:x} runs past the end of its section", offset));
    offset = std::min<uint64_t>(desc + alignTo(descSize, 4), contents.size());
    if (contents.substr(name, nameSize) !=
            StringRef(COURIER_NOTE_NAME, sizeof(COURIER_NOTE_NAME)) ||
        type != COURIER_NOTE_FEATURES)
      continue;
    for (StringRef feature : split(contents.substr(desc, descSize), ',')) {
      if (feature.empty() ||
          !all_of(feature, [](char c) { return isAlnum(c) || c == '.' || c == '-' || c == '_'; }))
        return malformed(formatv("'{0}' is not a feature name", feature));
      out.push_back(feature.str());
    }
  }
  return Error::success();
}

} // namespace

Expected<std::vector<std::string>> readRequiredFeatures(StringRef sha256, StringRef bytes,
                                                        bool anyMachine) {
  std::vector<std::string> required;
  auto parsed = object::ObjectFile::createObjectFile(MemoryBufferRef(bytes, sha256));
  if (!parsed) {
    consumeError(parsed.takeError());
    return required;
  }
  auto *elf = dyn_cast<object::ELFObjectFileBase>(parsed->get());
  if (!elf || (!anyMachine && elf->getArch() != Triple(sys::getProcessTriple()).getArch()))
    return required;
  for (const object::SectionRef &section : elf->sections()) {
    if (object::ELFSectionRef(section).getType() != ELF::SHT_NOTE)
      continue;
    auto name = section.getName();
    if (!name) {
      consumeError(name.takeError());
      continue;
    }
    if (*name != COURIER_FEATURES_SECTION)
      continue;
    auto contents = section.getContents();
    if (!contents)
      return makeError(formatv("object {0} is damaged: section {1} ({2}): {3}", sha256,
                               section.getIndex(), *name, toString(contents.takeError())));
    if (Error error = readFeaturesNotes(*contents, elf->isLittleEndian(), sha256, required))
      return std::move(error);
  }
  return required;
}

namespace {

/// Refuses an object for another architecture or word size than this process's.
Error checkMachine(const object::ELFObjectFileBase *elf, StringRef sha256) {
  Triple host(sys::getProcessTriple());
  if (elf->getArch() != host.getArch()) {
    std::string machine = elf->getArch() != Triple::UnknownArch
                              ? Triple::getArchTypeName(elf->getArch()).str()
                              : formatv("ELF machine {0}", elf->getEMachine()).str();
    return makeError(formatv("object {0} is for {1} but this executor runs {2}", sha256, machine,
                             Triple::getArchTypeName(host.getArch())));
  }
  // The architecture comes from e_machine alone: an x32 or ILP32 object (ELF32 for a 64-bit
  // machine) has the host's, and JITLink reads every object for such a machine as ELF64.
  unsigned bits = elf->getBytesInAddress() * 8, hostBits = host.isArch64Bit() ? 64 : 32;
  if (bits != hostBits)
    return makeError(formatv("object {0} is a {1}-bit {2} object but this executor runs {3}-bit "
                             "{2} code",
                             sha256, bits, Triple::getArchTypeName(host.getArch()), hostBits));
  return Error::success();
}

/// Refuses sections flagged in ways no compiler emits, and damaged unwind records.
Error checkSections(const object::ELFObjectFileBase *elf, StringRef sha256) {
  for (const object::SectionRef &section : elf->sections()) {
    // Flags the linker maps a section by, in combinations no compiler emits: JITLink skips
    // the relocations of a compressed section (leaving its calls pointing at 0), has no
    // thread-local storage without a platform, and would map writable code.
    uint64_t sectionFlags = object::ELFSectionRef(section).getFlags();
    if (sectionFlags & ELF::SHF_ALLOC) {
      const char *problem = nullptr;
      if (sectionFlags & ELF::SHF_COMPRESSED)
        problem = "is allocated and compressed";
      else if (sectionFlags & ELF::SHF_TLS)
        problem = "holds thread-local storage, which kernels cannot use";
      else if ((sectionFlags & ELF::SHF_WRITE) && (sectionFlags & ELF::SHF_EXECINSTR))
        problem = "is both writable and executable";
      if (problem) {
        auto name = section.getName();
        std::string where = name ? name->str() : "";
        consumeError(name.takeError());
        return makeError(formatv("object {0} is damaged: section {1} ({2}) {3}", sha256,
                                 section.getIndex(), where, problem));
      }
    }
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
    if (*name == ".eh_frame") {
      // Unwind records are registered with the process's unwinder at their linked address.
      if (!(object::ELFSectionRef(section).getFlags() & ELF::SHF_ALLOC))
        return makeError(formatv("object {0} is damaged: section {1} (.eh_frame) is not "
                                 "allocated (SHF_ALLOC is clear)",
                                 sha256, section.getIndex()));
      if (Error error =
              checkEHFrame(*contents, elf->isLittleEndian(), elf->getBytesInAddress(), sha256))
        return error;
    }
  }
  return Error::success();
}

/// The symbol of `elf` an entry or `call` may reach (a global function of default or
/// protected visibility) or a signature table; none for any other symbol.
Expected<std::optional<object::SectionRef>> exportedSection(const object::ELFObjectFileBase *elf,
                                                            const object::ELFSymbolRef &symbol,
                                                            StringRef sha256, StringRef name,
                                                            bool &function) {
  auto flags = symbol.getFlags();
  if (!flags)
    return makeError(formatv("object {0} is damaged: symbol '{1}': {2}", sha256, name,
                             toString(flags.takeError())));
  if (!(*flags & object::SymbolRef::SF_Global) || (*flags & object::SymbolRef::SF_Undefined) ||
      (*flags & object::SymbolRef::SF_FormatSpecific) || name.empty())
    return std::nullopt;
  auto type = symbol.getType();
  if (!type)
    return makeError(formatv("object {0} is damaged: symbol '{1}': {2}", sha256, name,
                             toString(type.takeError())));
  function = *type == object::SymbolRef::ST_Function;
  bool table = *type == object::SymbolRef::ST_Data && name.starts_with(COURIER_SIGNATURE_PREFIX);
  // Only functions are ever called through an entry or `call`; handing out a data
  // symbol's address as code would crash.
  uint8_t visibility = symbol.getOther() & 0x3;
  if (function && visibility != ELF::STV_DEFAULT && visibility != ELF::STV_PROTECTED)
    return std::nullopt;
  if (!function && !table)
    return std::nullopt;
  auto section = symbol.getSection();
  if (!section)
    return makeError(formatv("object {0} is damaged: symbol '{1}': {2}", sha256, name,
                             toString(section.takeError())));
  if (*section == elf->section_end())
    return makeError(
        formatv("object {0} is damaged: symbol '{1}' is defined in no section", sha256, name));
  // JITLink gives a section without SHF_ALLOC no memory here: its symbols' addresses
  // point nowhere.
  if (!(object::ELFSectionRef(**section).getFlags() & ELF::SHF_ALLOC)) {
    auto sectionName = (*section)->getName();
    std::string where = sectionName ? sectionName->str() : "";
    consumeError(sectionName.takeError());
    return makeError(formatv("object {0} is damaged: symbol '{1}' lies in section {2} ({3}), "
                             "which is not allocated (SHF_ALLOC is clear)",
                             sha256, name, (*section)->getIndex(), where));
  }
  if (function && !(object::ELFSectionRef(**section).getFlags() & ELF::SHF_EXECINSTR))
    return makeError(formatv("object {0} is damaged: function '{1}' lies in section {2}, "
                             "which is not executable (SHF_EXECINSTR is clear)",
                             sha256, name, (*section)->getIndex()));
  return **section;
}

/// Collects the functions `elf` exports and its signature tables (by symbol name).
Error collectExports(const object::ELFObjectFileBase *elf, StringRef sha256,
                     const DenseMap<unsigned, PatchedRanges> &patched, ObjectExports &out,
                     std::map<std::string, std::vector<int64_t>> &tables) {
  for (const object::ELFSymbolRef symbol : elf->symbols()) {
    auto name = symbol.getName();
    if (!name)
      return makeError(
          formatv("object {0} is damaged: symbol table: {1}", sha256, toString(name.takeError())));
    bool function = false;
    Expected<std::optional<object::SectionRef>> section =
        exportedSection(elf, symbol, sha256, *name, function);
    if (!section)
      return section.takeError();
    if (!*section)
      continue;
    if (function) {
      out.functions.push_back(name->str());
      continue;
    }
    auto value = symbol.getValue();
    if (!value)
      return makeError(formatv("object {0} is damaged: symbol '{1}': {2}", sha256, *name,
                               toString(value.takeError())));
    auto found = patched.find((*section)->getIndex());
    std::vector<int64_t> words;
    if (Error error = readSignatureTable(*elf, sha256, *name, **section, *value, symbol.getSize(),
                                         found == patched.end() ? nullptr : &found->second, words))
      return error;
    tables[name->str()] = std::move(words);
  }
  return Error::success();
}

} // namespace

Error validateObject(StringRef sha256, StringRef bytes, ObjectExports &out) {
  out = ObjectExports();
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
  if (Error error = checkMachine(elf, sha256))
    return error;
  if (Error error = checkSections(elf, sha256))
    return error;
  if (Error error = withElfType(*elf, sha256,
                                [&](const auto &typed) { return checkFootprint(typed, sha256); }))
    return error;
  DenseMap<unsigned, PatchedRanges> patched;
  if (Error error = withElfType(*elf, sha256, [&](const auto &typed) {
        return checkRelocations(typed, sha256, patched);
      }))
    return error;

  std::map<std::string, std::vector<int64_t>> tables;
  if (Error error = collectExports(elf, sha256, patched, out, tables))
    return error;
  for (auto &[name, words] : tables) {
    std::string entry =
        COURIER_ENTRY_PREFIX + StringRef(name).drop_front(strlen(COURIER_SIGNATURE_PREFIX)).str();
    if (!llvm::is_contained(out.functions, entry))
      return makeError(formatv("object {0} has a signature table '{1}' but no entry '{2}'", sha256,
                               name, entry));
    out.signatures[entry] = std::move(words);
  }
  return Error::success();
}

} // namespace courier::executor
