// What every kernel host shares: the same-host channel's answers for a host that cannot
// serve one. See executor/KernelHost.h.
#include "executor/KernelHost.h"

#include "executor/ObjectHost.h"

#include "transport/ErrorCode.h"

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
