// Duration histograms by module (ModuleMetrics.h).
#include "serve/ModuleMetrics.h"

#include "transport/Metrics.h"

namespace courier::serve {

ModuleHistogram::ModuleHistogram(std::string name, std::string help,
                                 std::function<bool(llvm::StringRef)> holds)
    : name(std::move(name)), help(std::move(help)), holds(std::move(holds)),
      unlabelled(transport::durationBuckets()) {}

void ModuleHistogram::observe(llvm::StringRef module, double seconds) {
  std::shared_ptr<prometheus::Histogram> histogram;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = series.find(module);
    if (it != series.end()) {
      histogram = it->second;
    } else if (holds(module)) {
      histogram = std::make_shared<prometheus::Histogram>(transport::durationBuckets());
      series.emplace(module.str(), histogram);
    }
  }
  (histogram ? *histogram : unlabelled).Observe(seconds);
}

void ModuleHistogram::forget(llvm::StringRef module) {
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = series.find(module); it != series.end() && !holds(module))
    series.erase(it);
}

prometheus::MetricFamily ModuleHistogram::collect() const {
  prometheus::MetricFamily family =
      transport::metricFamily(name, help, prometheus::MetricType::Histogram);
  family.metric.push_back(unlabelled.Collect());
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto &[module, histogram] : series) {
    prometheus::ClientMetric sample = histogram->Collect();
    sample.label.push_back({"module", module});
    family.metric.push_back(std::move(sample));
  }
  return family;
}

} // namespace courier::serve
