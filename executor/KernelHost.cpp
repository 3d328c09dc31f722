// What every kernel host shares: the checks of an async entry and of a call's output, this
// executor's description, and the same-host channel's answers for a host that cannot serve
// one. See executor/KernelHost.h.
#include "executor/KernelHost.h"

#include "executor/HostCpu.h"
#include "executor/ObjectHost.h"

#include "transport/ErrorCode.h"

#include "Version.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/TargetParser/Host.h"

#include <thread>

namespace courier::executor {

llvm::Error checkAsyncLaunch(const ObjectInfo *info, llvm::StringRef sha, llvm::StringRef entry) {
  if (!info || !info->hasEntry(entry))
    return transport::makeCodedError(transport::ErrorCode::UnknownEntry,
                                     "launching '" + entry + "': no entry '" + entry +
                                         "' in object " + sha);
  // An async entry takes nothing and returns nothing; its table must say so.
  return checkLaunch(*info, entry, {}, {});
}

llvm::Error checkCallOutput(llvm::StringRef symbol, llvm::StringRef output, uint64_t outputSize) {
  if (output.size() == outputSize)
    return llvm::Error::success();
  return transport::makeCodedError(transport::ErrorCode::CallFailed,
                                   llvm::formatv("'{0}' produced {1} bytes, the caller expects {2}",
                                                 symbol, output.size(), outputSize));
}

HealthReport describeThisExecutor() {
  HealthReport report;
  report.version = COURIER_VERSION;
  report.triple = llvm::sys::getProcessTriple();
  HostCpu cpu = describeHostCpu();
  report.cpu = std::move(cpu.name);
  report.features = std::move(cpu.features);
  return report;
}

KernelHost::~KernelHost() = default;
HostFactory::~HostFactory() = default;

llvm::Expected<bool> KernelHost::serveDirect(std::shared_ptr<const DirectChannel>,
                                             Clock::time_point, bool, bool) {
  return transport::makeCodedError(transport::ErrorCode::Unavailable,
                                   "kernels run in the executor's own process");
}

void KernelHost::stopDirect(const DirectChannel *) {}

bool KernelHost::watchDirect(const DirectChannel *, Clock::time_point until, int64_t &workerPid) {
  workerPid = 0;
  std::this_thread::sleep_until(until);
  return false;
}

void KernelHost::endDirectLaunch(int64_t) {}

bool KernelHost::held() { return false; }

} // namespace courier::executor
