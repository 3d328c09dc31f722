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
  // The new client was not served by closing the flood: every flood connection is still
  // open, or was closed past its timeout (the 5 s keep-alive of an idle one, which a flood
  // made slowly on a loaded machine reaches), none evicted.
  double open = server.metric(metrics + "_connections_open");
  double timedOut = 0, evicted = 0;
  for (const char *state : {"idle", "head", "handshake"}) {
    std::string label = std::string("{state=\"") + state + "\"}";
    timedOut += server.metric(metrics + "_connections_timed_out_total" + label);
    evicted += server.metric(metrics + "_connections_evicted_total" + label);
  }
  INFO("open: " << open << ", timed out: " << timedOut << ", evicted: " << evicted
                << ", closed by the server: " << flood.closedByServer());
  CHECK(open + timedOut >= 2200);
  CHECK(evicted == 0);
  // The half-sent heads wait without a thread each.
  CHECK(server.metric(metrics + "_connections_parked{state=\"head\"}") >= 190);
  CHECK(server.metric(metrics + "_request_threads") <= 64 + 8);
  long after = residentKiB(server.processId());
  INFO("resident before the flood: " << before << " KiB, during it: " << after << " KiB");
  CHECK(after - before < 64 * 1024);
}

} // namespace courier::testing
