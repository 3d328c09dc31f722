// What the tests of refused raw requests check of every reply (tests/support/HostileRequests.h),
// in one place.
#ifndef COURIER_TESTS_SUPPORT_REFUSEDREPLIES_H
#define COURIER_TESTS_SUPPORT_REFUSEDREPLIES_H

#include "tests/support/HostileRequests.h"

#include <catch2/catch.hpp>

#include <string>

namespace courier::testing {

/// Checks that `reply` is a refusal with `status` that closes its connection and that nothing
/// after it ran as a request; with `code` its error code is that, with `message` its message
/// holds that.
inline void checkRefusedAlone(const RawReply &reply, int status, const std::string &code = "",
                              const std::string &message = "") {
  CHECK(reply.status == status);
  if (!code.empty())
    CHECK(reply.code == code);
  if (!message.empty())
    CHECK_THAT(reply.message, Catch::Contains(message));
  CHECK(reply.saysClose);
  CHECK(reply.responses == 1);
}

} // namespace courier::testing

#endif // COURIER_TESTS_SUPPORT_REFUSEDREPLIES_H
