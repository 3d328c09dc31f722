// Reading the Prometheus text a server's /metrics returns, for tests that check its shape
// rather than one value.
#ifndef COURIER_TESTS_SUPPORT_PROMETHEUSTEXT_H
#define COURIER_TESTS_SUPPORT_PROMETHEUSTEXT_H

#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace courier::testing {

/// The samples of one histogram: its buckets as (le, cumulative count) in the order written,
/// its _count and its _sum (-1 when missing).
struct HistogramSamples {
  std::vector<std::pair<std::string, double>> buckets;
  double count = -1, sum = -1;
};

inline HistogramSamples histogramSamples(const std::string &text, const std::string &name) {
  HistogramSamples samples;
  std::istringstream lines(text);
  std::string line;
  const std::string bucket = name + "_bucket{le=\"";
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    double value = std::stod(line.substr(line.rfind(' ') + 1));
    if (line.compare(0, bucket.size(), bucket) == 0)
      samples.buckets.emplace_back(
          line.substr(bucket.size(), line.find('"', bucket.size()) - bucket.size()), value);
    else if (line.compare(0, name.size() + 7, name + "_count ") == 0)
      samples.count = value;
    else if (line.compare(0, name.size() + 5, name + "_sum ") == 0)
      samples.sum = value;
  }
  return samples;
}

/// The sample lines of `text` whose metric is not the family of the # TYPE line above them
/// (a histogram's family owning its _bucket, _sum and _count): none in well-formed text.
inline std::vector<std::string> samplesOutsideTheirFamily(const std::string &text) {
  std::vector<std::string> strays;
  std::istringstream lines(text);
  std::string line, family, type;
  while (std::getline(lines, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      words >> family >> type;
      continue;
    }
    if (line.empty() || line[0] == '#')
      continue;
    std::string metric = line.substr(0, line.find_first_of("{ "));
    bool own = metric == family;
    if (type == "histogram")
      for (const char *suffix : {"_bucket", "_sum", "_count"})
        own = own || metric == family + suffix;
    if (!own)
      strays.push_back(line);
  }
  return strays;
}

} // namespace courier::testing

#endif // COURIER_TESTS_SUPPORT_PROMETHEUSTEXT_H
