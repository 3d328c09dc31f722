// courier-serve's metrics by module: a duration histogram with one series per module the
// store holds, labelled module="<name>", and one without the label for requests that left
// no module behind (a create that failed). A module's series goes when the module does, so
// a family never has more than --max-modules + 1 series, whatever names clients send.
#ifndef COURIER_SERVE_MODULEMETRICS_H
#define COURIER_SERVE_MODULEMETRICS_H

#include "llvm/ADT/StringRef.h"

#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace courier::serve {

class ModuleHistogram {
public:
  /// `holds` says whether the store holds a module now; only those get a series.
  ModuleHistogram(std::string name, std::string help, std::function<bool(llvm::StringRef)> holds);

  /// Counts `seconds` under `module` if the store holds it, else under no module.
  void observe(llvm::StringRef module, double seconds);
  /// Drops the series of a module the store no longer holds; call after removing it.
  void forget(llvm::StringRef module);
  /// The family as /metrics shows it, its series by module name.
  prometheus::MetricFamily collect() const;

private:
  std::string name, help;
  std::function<bool(llvm::StringRef)> holds;
  /// Guards `series`; held while a series is chosen so that forget() cannot race with an
  /// observation adding back the series of a module just removed.
  mutable std::mutex mutex;
  std::map<std::string, std::shared_ptr<prometheus::Histogram>, std::less<>> series;
  prometheus::Histogram unlabelled;
};

} // namespace courier::serve

#endif // COURIER_SERVE_MODULEMETRICS_H
