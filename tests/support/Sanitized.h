// What a test knows of the build it runs in: whether the sanitizers instrument it, and how
// many rounds of a soak test to run there.
#ifndef COURIER_TESTS_SUPPORT_SANITIZED_H
#define COURIER_TESTS_SUPPORT_SANITIZED_H

#include <algorithm>

namespace courier::testing {

/// Whether AddressSanitizer instruments this build (test.sh --sanitize): its allocator and
/// shadow memory make heap and resident-set figures meaningless, and its code runs 2-5x slower.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

/// The rounds a soak test runs: all of `rounds` in a release build, a fifth of them (at least
/// one) in a sanitized one. The sanitizers check every round, so a fifth still finds a round's
/// bad access or leak; the release suite's full count is what finds what only builds up.
constexpr int soakRounds(int rounds) { return kSanitized ? std::max(1, rounds / 5) : rounds; }

} // namespace courier::testing

#endif // COURIER_TESTS_SUPPORT_SANITIZED_H
