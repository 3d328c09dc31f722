// The host CPU as health reports it: LLVM's name for it and its enabled features by LLVM's
// names, with what 64-bit ARM Linux says when LLVM's own reading finds nothing.
#ifndef COURIER_EXECUTOR_HOSTCPU_H
#define COURIER_EXECUTOR_HOSTCPU_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace courier::executor {

struct HostCpu {
  std::string name;                  ///< llvm::sys::getHostCPUName(): "znver3", "generic".
  std::vector<std::string> features; ///< Enabled features, sorted: "avx2", "neon".
};

/// This machine's CPU. On aarch64 Linux, LLVM reads the features from the "Features" line of
/// /proc/cpuinfo, which the kernel writes from the hardware capability words it also puts in
/// every process's auxiliary vector; under qemu-user the file is the emulating machine's and
/// has no such line, so when LLVM finds no feature the words themselves are read.
HostCpu describeHostCpu();

/// The features of `required` (LLVM names, as an object's features record lists them,
/// abi/KernelABI.h) that this machine's CPU lacks, in their order. The CPU has a feature when
/// describeHostCpu finds it, or LLVM's model of the CPU by that name and those features has
/// it (a feature another implies, say, or one no probe reports, such as "nopl" on x86-64): the
/// same reading code compiled for this CPU in process is generated from.
std::vector<std::string> missingHostFeatures(const std::vector<std::string> &required);

/// `unsupported_cpu` for an object whose features record (abi/KernelABI.h) names a feature this
/// machine's CPU lacks: its code would die of an illegal instruction at the first launch that
/// reached it; `invalid_object` for a record that cannot be read.
llvm::Error checkObjectCpu(llvm::StringRef sha256, llvm::StringRef bytes);

/// The LLVM features that LLVM 22 reads from a /proc/cpuinfo "Features" line the kernel writes
/// for these AT_HWCAP and AT_HWCAP2 words (asm/hwcap.h): "asimd" is neon, "aes" with "pmull"
/// is aes, and so on. Sorted. Defined on every host, for its tests.
std::vector<std::string> aarch64FeaturesFromHwcaps(uint64_t hwcap, uint64_t hwcap2);

} // namespace courier::executor

#endif // COURIER_EXECUTOR_HOSTCPU_H
