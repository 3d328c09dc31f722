// requireServedThroughFlood: the check every server's flood test makes (ConnectionFlood.h).
#include "tests/support/ConnectionFlood.h"
#include "tests/support/ServerProcess.h"

#include <catch2/catch.hpp>

namespace courier::testing {

void requireServedThroughFlood(const ServerProcess &server, const std::string &tlsCaFile,
                               const std::string &metrics, const ServedCheck &served) {
  using namespace std::chrono_literals;
  served(server, 10s); // Warmed up: what the work needs is loaded before memory is measured.
  long before = residentKiB(server.processId());
  ConnectionFlood flood(server.port(), {2000, 200, 0, tlsCaFile});
  REQUIRE(flood.opened() == 2200);
  served(server, 1000ms);
  // Most of the flood is still open (none has reached the 5 s keep-alive timeout of a quick
  // plaintext flood; a TLS one takes a few seconds to make).
  double open = server.metric(metrics + "_connections_open");
  INFO("open: " << open << ", closed by the server: " << flood.closedByServer());
  CHECK(open >= (tlsCaFile.empty() ? 2000 : 1000));
  // The half-sent heads wait without a thread each.
  CHECK(server.metric(metrics + "_connections_parked{state=\"head\"}") >= 190);
  CHECK(server.metric(metrics + "_request_threads") <= 64 + 8);
  long after = residentKiB(server.processId());
  INFO("resident before the flood: " << before << " KiB, during it: " << after << " KiB");
  CHECK(after - before < 64 * 1024);
}

} // namespace courier::testing
