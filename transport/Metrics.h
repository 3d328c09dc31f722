// Metrics in prometheus-cpp's model for values counted outside a registry: plain atomics a
// layer without HTTP keeps (the executor core, courier-serve's module store), turned into
// metric families when /metrics is scraped, and the bucket bounds every duration histogram
// shares. HttpService serializes them with its own registry's families.
#ifndef COURIER_TRANSPORT_METRICS_H
#define COURIER_TRANSPORT_METRICS_H

#include <prometheus/client_metric.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>

#include <string>
#include <utility>

namespace courier::transport {

/// The bucket bounds, in seconds, of every duration histogram the servers export.
inline const prometheus::Histogram::BucketBoundaries &durationBuckets() {
  static const prometheus::Histogram::BucketBoundaries bounds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30};
  return bounds;
}

/// A family with no samples yet; addSample() adds them.
inline prometheus::MetricFamily metricFamily(std::string name, std::string help,
                                             prometheus::MetricType type) {
  return prometheus::MetricFamily{std::move(name), std::move(help), type, {}};
}

/// Adds a counter's or a gauge's sample (by the family's type), with one label when
/// `labelName` is given.
inline void addSample(prometheus::MetricFamily &family, double value, std::string labelName = "",
                      std::string labelValue = "") {
  prometheus::ClientMetric sample;
  if (!labelName.empty())
    sample.label.push_back({std::move(labelName), std::move(labelValue)});
  if (family.type == prometheus::MetricType::Counter)
    sample.counter.value = value;
  else
    sample.gauge.value = value;
  family.metric.push_back(std::move(sample));
}

/// A family of one unlabelled counter or gauge sample.
inline prometheus::MetricFamily singleSample(std::string name, std::string help,
                                             prometheus::MetricType type, double value) {
  prometheus::MetricFamily family = metricFamily(std::move(name), std::move(help), type);
  addSample(family, value);
  return family;
}

/// A family of one histogram kept outside a registry.
inline prometheus::MetricFamily histogramFamily(std::string name, std::string help,
                                                const prometheus::Histogram &histogram) {
  prometheus::MetricFamily family =
      metricFamily(std::move(name), std::move(help), prometheus::MetricType::Histogram);
  family.metric.push_back(histogram.Collect());
  return family;
}

} // namespace courier::transport

#endif // COURIER_TRANSPORT_METRICS_H
