// courier-serve as a ServerProcess, caching under the fixture's scratch directory.
#include "tests/serve/ServeProcess.h"

#include <csignal>

namespace courier::testing {

namespace {

ServerSpec serveSpec(ServeConfig config) {
  std::vector<std::string> args = {"--cache-dir", "{dir}/cache"};
  args.insert(args.end(), config.extraArgs.begin(), config.extraArgs.end());
  return ServerSpec{COURIER_SERVE_PATH, "courier-serve", 0, std::move(config.token),
                    std::move(args)};
}

} // namespace

ServeProcess::ServeProcess(ServeConfig config) : ServerProcess(serveSpec(std::move(config))) {}

int ServeProcess::terminate() {
  return ServerProcess::terminate(SIGTERM, std::chrono::seconds(15));
}

std::pair<int, std::string> runServeToExit(const std::vector<std::string> &args) {
  return runServerToExit(COURIER_SERVE_PATH, args);
}

} // namespace courier::testing
