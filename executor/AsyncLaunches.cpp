#include "executor/AsyncLaunches.h"

#include "transport/Wire.h"

#include "llvm/Support/FormatVariadic.h"

namespace courier::executor {

using transport::ErrorCode;
using transport::makeCodedError;

llvm::Expected<uint64_t> AsyncLaunches::start(KernelHost &host, llvm::StringRef object,
                                              llvm::StringRef entry, Clock::time_point deadline,
                                              std::atomic<uint64_t> &failures) {
  auto outcome = std::make_shared<std::promise<Outcome>>();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (launches.size() >= transport::wire::kMaxPendingLaunches)
      return makeCodedError(
          ErrorCode::TooManyLaunches,
          llvm::formatv("session '{0}' has {1} async launches not yet awaited; await some first",
                        session, transport::wire::kMaxPendingLaunches));
    id = next++;
    launches.emplace(id, outcome->get_future().share());
  }
  host.launchAsync(object.str(), entry.str(), deadline,
                   [failures = &failures, outcome](llvm::Error error) {
                     if (!error) {
                       outcome->set_value({});
                       return;
                     }
                     ++*failures;
                     auto [code, message] =
                         transport::takeCodeAndMessage(std::move(error), ErrorCode::LaunchFailed);
                     outcome->set_value({code, std::move(message)});
                   });
  return id;
}

llvm::Error AsyncLaunches::await(KernelHost &host, uint64_t id, Clock::time_point deadline) {
  std::shared_future<Outcome> done;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = launches.find(id);
    if (it == launches.end())
      return makeCodedError(ErrorCode::UnknownLaunch, "no pending launch " + llvm::Twine(id) +
                                                          " in session '" + session +
                                                          "' (unknown, or already awaited)");
    done = std::move(it->second);
    launches.erase(it);
  }
  if (done.wait_until(deadline) != std::future_status::ready) {
    // Ending the host's kernels (its worker) ends the launch; its task then reports how it
    // ended. Nothing ends a kernel in this process.
    if (!host.endKernels(EndReason::Deadline))
      return makeCodedError(ErrorCode::DeadlineExceeded,
                            llvm::formatv("launch {0} is still running; without isolation the "
                                          "executor cannot end it",
                                          id));
    if (done.wait_for(std::chrono::seconds(2)) != std::future_status::ready)
      return makeCodedError(ErrorCode::DeadlineExceeded,
                            llvm::formatv("launch {0} ran past its deadline", id));
  }
  const Outcome &outcome = done.get();
  if (outcome.code)
    return makeCodedError(*outcome.code, outcome.message);
  return llvm::Error::success();
}

size_t AsyncLaunches::pending() {
  std::lock_guard<std::mutex> lock(mutex);
  return launches.size();
}

} // namespace courier::executor
