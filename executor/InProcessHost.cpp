// Kernels in this process: each session's objects linked by InProcessKernels of its own, so
// objects shipped by one client never resolve another's symbols; a launch is a direct call
// on the calling thread, reading inputs where they are and handing over the kernel's own
// result buffers. Nothing contains a kernel here and nothing can end one.
#include "executor/Arena.h"
#include "executor/CoreMetrics.h"
#include "executor/ExecutorCore.h"
#include "executor/InProcessKernels.h"
#include "executor/KernelThreads.h"

#include "llvm/Support/ThreadPool.h"

namespace courier::executor {

using transport::ErrorCode;
using transport::makeCodedError;
namespace wire = transport::wire;

namespace {

class InProcessHost final : public KernelHost {
public:
  InProcessHost(const HostServices &services, std::shared_ptr<InProcessKernels> kernels)
      : services(services), kernels(std::move(kernels)) {}

  llvm::Error attach(const ObjectBlob &blob) override { return kernels->attach(blob); }
  // Launches of the object still running keep its code until they return (ObjectHost).
  void detach(llvm::StringRef sha) override { kernels->detach(sha); }
  llvm::Error checkAsyncEntry(llvm::StringRef sha, llvm::StringRef entry) override {
    return kernels->checkAsyncEntry(sha, entry);
  }

  llvm::Expected<InputArea> inputArea(llvm::ArrayRef<wire::TensorHeader> headers) override {
    InputArea area;
    for (const wire::TensorHeader &t : headers) {
      char *data = static_cast<char *>(wire::allocateTensorBuffer(t.bytes));
      if (!data)
        return makeCodedError(ErrorCode::PayloadTooLarge, "cannot allocate " +
                                                              llvm::Twine(t.bytes) +
                                                              " bytes for a launch input");
      area.impl->buffers.emplace_back(data);
    }
    return std::move(area);
  }

  llvm::Expected<LaunchResults> launch(const LaunchCall &call, RunningLaunch &running) override {
    llvm::ArrayRef<TensorView> inputs = call.inputs;
    std::vector<TensorView> placed;
    if (call.area) {
      placed.assign(inputs.begin(), inputs.end());
      for (size_t i = 0; i < placed.size(); ++i)
        placed[i].data = call.area->input(i);
      inputs = placed;
    }
    llvm::Expected<std::vector<OwnedTensor>> produced =
        kernels->launch(call.object, call.entry, inputs, call.results);
    running.finish();
    if (!produced)
      return produced.takeError();
    if (call.area)
      *call.area = InputArea();
    LaunchResults out;
    auto tensors = std::make_shared<std::vector<OwnedTensor>>(std::move(*produced));
    for (const OwnedTensor &t : *tensors)
      out.views.push_back(TensorView{t.data, t.elemSize, t.sizes, t.strides});
    out.owned = tensors.get();
    out.keepAlive = std::move(tensors);
    return std::move(out);
  }

  void launchAsync(std::string object, std::string entry, Clock::time_point,
                   std::function<void(llvm::Error)> finish) override {
    // The task shares the kernels, not the session: a session that closes or expires
    // meanwhile goes at once (nothing waits for a kernel that may never return), and the
    // code stays until the task is done.
    services.asyncPool.async([kernels = kernels, metrics = &services.metrics, object, entry,
                              finish = std::move(finish)] {
      llvm::Expected<std::vector<OwnedTensor>> results = [&] {
        RunningLaunch running(*metrics, true);
        return kernels->launch(object, entry, {}, {});
      }();
      finish(results.takeError());
    });
  }

  llvm::Expected<std::string> call(llvm::StringRef symbol, llvm::StringRef input,
                                   uint64_t outputSize, Clock::time_point) override {
    return kernels->call(symbol, input, outputSize);
  }

  void close() override {} // Goes with the last launch that holds its code.
  bool endKernels(EndReason) override { return false; }
  int64_t workerPid() override { return 0; }

private:
  const HostServices &services;
  /// Shared with the async launches running on it, so closing the session never waits for
  /// a kernel: the code goes when the last of them returns.
  std::shared_ptr<InProcessKernels> kernels;
};

class InProcessHosts final : public HostFactory {
public:
  explicit InProcessHosts(const HostServices &services) : services(services) {}

  llvm::Expected<std::shared_ptr<KernelHost>> open(const std::string &) override {
    llvm::Expected<std::shared_ptr<InProcessKernels>> kernels =
        InProcessKernels::create(services.plugins, {services.options.allowUnsignedObjects});
    if (!kernels)
      return kernels.takeError();
    return std::make_shared<InProcessHost>(services, std::move(*kernels));
  }
  bool contained() const override { return false; }
  void report(HealthReport &report) override { report.isolated = false; }
  void addMetrics(std::vector<prometheus::MetricFamily> &) override {}
  void stopTaking() override {}
  void shutdown() override {}

private:
  const HostServices &services;
};

} // namespace

llvm::Expected<std::unique_ptr<HostFactory>> makeInProcessHosts(const HostServices &services) {
  // In this process, kernels share the process's one team (executor/KernelThreads.h).
  if (services.options.kernelThreads)
    setKernelThreads(services.options.kernelThreads);
  return std::make_unique<InProcessHosts>(services);
}

} // namespace courier::executor
