// The host CPU's name and features for health reports (executor/HostCpu.h).
#include "executor/HostCpu.h"

#include "executor/ElfValidation.h"
#include "transport/ErrorCode.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

#include <algorithm>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace courier::executor {

namespace {

// Bits of the kernel's AT_HWCAP and AT_HWCAP2 words (arch/arm64/include/uapi/asm/hwcap.h),
// spelled out so that the table below compiles, and is tested, on any host.
constexpr uint64_t kHwcapFp = 1 << 0, kHwcapAsimd = 1 << 1, kHwcapAes = 1 << 3,
                   kHwcapPmull = 1 << 4, kHwcapSha1 = 1 << 5, kHwcapSha2 = 1 << 6,
                   kHwcapCrc32 = 1 << 7, kHwcapAtomics = 1 << 8, kHwcapSha3 = 1 << 17,
                   kHwcapSm4 = 1 << 19, kHwcapSve = 1 << 22;
constexpr uint64_t kHwcap2Sve2 = 1 << 1, kHwcap2SveAes = 1 << 2, kHwcap2SveSha3 = 1 << 5,
                   kHwcap2SveSm4 = 1 << 6, kHwcap2Rng = 1 << 16;

#if defined(__aarch64__) && defined(__linux__)
// Where the C library's <bits/hwcap.h> is at hand, the two spellings must agree.
static_assert(kHwcapFp == HWCAP_FP && kHwcapAsimd == HWCAP_ASIMD && kHwcapAes == HWCAP_AES &&
              kHwcapPmull == HWCAP_PMULL && kHwcapSha1 == HWCAP_SHA1 && kHwcapSha2 == HWCAP_SHA2 &&
              kHwcapCrc32 == HWCAP_CRC32 && kHwcapAtomics == HWCAP_ATOMICS &&
              kHwcapSha3 == HWCAP_SHA3 && kHwcapSm4 == HWCAP_SM4 && kHwcapSve == HWCAP_SVE);
static_assert(kHwcap2Sve2 == HWCAP2_SVE2 && kHwcap2SveAes == HWCAP2_SVEAES &&
              kHwcap2SveSha3 == HWCAP2_SVESHA3 && kHwcap2SveSm4 == HWCAP2_SVESM4 &&
              kHwcap2Rng == HWCAP2_RNG);
#endif

struct FeatureBits {
  uint64_t hwcap, hwcap2; ///< Every bit must be set.
  const char *llvmName;
};

// The words of the Features line LLVM 22 maps to features, by the bits the kernel prints
// them for; LLVM needs both halves of each crypto pair.
constexpr FeatureBits kFeatures[] = {
    {kHwcapFp, 0, "fp-armv8"},
    {kHwcapAsimd, 0, "neon"},
    {kHwcapAes | kHwcapPmull, 0, "aes"},
    {kHwcapSha1 | kHwcapSha2, 0, "sha2"},
    {kHwcapCrc32, 0, "crc"},
    {kHwcapAtomics, 0, "lse"},
    {kHwcapSha3, 0, "sha3"},
    {kHwcapSm4, 0, "sm4"},
    {kHwcapSve, 0, "sve"},
    {0, kHwcap2Sve2, "sve2"},
    {0, kHwcap2SveAes, "sve-aes"},
    {0, kHwcap2SveSha3, "sve-sha3"},
    {0, kHwcap2SveSm4, "sve-sm4"},
    {0, kHwcap2Rng, "rand"},
};

/// Every feature this machine's CPU has: describeHostCpu's, and those LLVM's model of the CPU
/// by its name and features sets (the features LLVM found absent stay off).
llvm::StringSet<> hostFeatureSet() {
  llvm::StringSet<> features;
  HostCpu cpu = describeHostCpu();
  for (const std::string &feature : cpu.features)
    features.insert(feature);
  // Every target's description, not the native one's: an executor cross-built with another
  // machine's LLVM headers would name that machine's target as native.
  llvm::InitializeAllTargetInfos();
  llvm::InitializeAllTargetMCs();
  llvm::Triple triple(llvm::sys::getProcessTriple());
  std::string error;
  const llvm::Target *backend = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!backend)
    return features;
  std::unique_ptr<llvm::MCSubtargetInfo> names(backend->createMCSubtargetInfo(triple, "", ""));
  if (!names)
    return features;
  llvm::StringSet<> known;
  for (const llvm::SubtargetFeatureKV &feature : names->getAllProcessorFeatures())
    known.insert(feature.Key);
  std::string given;
  auto give = [&](llvm::StringRef feature, bool on) {
    if (known.contains(feature))
      given += (given.empty() ? "" : ",") + std::string(on ? "+" : "-") + feature.str();
  };
  // Under qemu-user LLVM finds nothing on aarch64, and describeHostCpu read the hwcaps.
  llvm::StringMap<bool> probed = llvm::sys::getHostCPUFeatures();
  if (llvm::none_of(probed, [](const auto &feature) { return feature.getValue(); }))
    for (const std::string &feature : cpu.features)
      give(feature, true);
  for (const auto &feature : probed)
    give(feature.getKey(), feature.getValue());
  if (!names->isCPUStringValid(cpu.name))
    cpu.name = "generic";
  std::unique_ptr<llvm::MCSubtargetInfo> model(
      backend->createMCSubtargetInfo(triple, cpu.name, given));
  if (!model)
    return features;
  for (const llvm::SubtargetFeatureKV &feature : model->getAllProcessorFeatures())
    if (model->getFeatureBits().test(feature.Value))
      features.insert(feature.Key);
  return features;
}

} // namespace

llvm::Error checkObjectCpu(llvm::StringRef sha256, llvm::StringRef bytes) {
  using transport::ErrorCode;
  llvm::Expected<std::vector<std::string>> required = readRequiredFeatures(sha256, bytes);
  if (!required)
    return transport::makeCodedError(ErrorCode::InvalidObject,
                                     llvm::toString(required.takeError()));
  std::vector<std::string> missing = missingHostFeatures(*required);
  if (missing.empty())
    return llvm::Error::success();
  return transport::makeCodedError(
      ErrorCode::UnsupportedCpu,
      llvm::formatv("object {0} needs CPU feature{1} {2}, which this executor's CPU ({3}) lacks: "
                    "compile it for this executor's CPU (its /v1/health names the CPU and "
                    "features) or send it to one that has them",
                    sha256, missing.size() == 1 ? "" : "s", llvm::join(missing, ", "),
                    describeHostCpu().name));
}

std::vector<std::string> missingHostFeatures(const std::vector<std::string> &required) {
  static const llvm::StringSet<> host = hostFeatureSet();
  std::vector<std::string> missing;
  for (const std::string &feature : required)
    if (!host.contains(feature))
      missing.push_back(feature);
  return missing;
}

std::vector<std::string> aarch64FeaturesFromHwcaps(uint64_t hwcap, uint64_t hwcap2) {
  std::vector<std::string> features;
  for (const FeatureBits &f : kFeatures)
    if ((hwcap & f.hwcap) == f.hwcap && (hwcap2 & f.hwcap2) == f.hwcap2)
      features.push_back(f.llvmName);
  std::sort(features.begin(), features.end());
  return features;
}

HostCpu describeHostCpu() {
  HostCpu cpu;
  cpu.name = llvm::sys::getHostCPUName().str();
  for (const auto &feature : llvm::sys::getHostCPUFeatures())
    if (feature.second)
      cpu.features.push_back(feature.first().str());
#if defined(__aarch64__) && defined(__linux__)
  if (cpu.features.empty())
    cpu.features = aarch64FeaturesFromHwcaps(getauxval(AT_HWCAP), getauxval(AT_HWCAP2));
#endif
  std::sort(cpu.features.begin(), cpu.features.end());
  return cpu;
}

} // namespace courier::executor
