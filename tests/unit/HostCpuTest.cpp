// What an aarch64 executor reports as its CPU's features when only the kernel's hardware
// capability words say (under qemu-user): the names LLVM gives the same /proc/cpuinfo words.
#include "executor/HostCpu.h"

#include <catch2/catch.hpp>

#include <algorithm>

using courier::executor::aarch64FeaturesFromHwcaps;
using courier::executor::describeHostCpu;

namespace {
using Names = std::vector<std::string>;
}

TEST_CASE("hardware capability words name LLVM's aarch64 features", "[unit][cpu]") {
  CHECK(aarch64FeaturesFromHwcaps(0, 0).empty());
  // fp and asimd: every Armv8-A CPU with floating point.
  CHECK(aarch64FeaturesFromHwcaps(0x3, 0) == Names{"fp-armv8", "neon"});
  // crc32 (bit 7), atomics (8), sha3 (17), sm4 (19), sve (22); bit 2 (evtstrm) names none.
  CHECK(
      aarch64FeaturesFromHwcaps((1 << 2) | (1 << 7) | (1 << 8) | (1 << 17) | (1 << 19) | (1 << 22),
                                0) == Names{"crc", "lse", "sha3", "sm4", "sve"});
  // sve2 (bit 1 of the second word), sveaes (2), svesha3 (5), svesm4 (6), rng (16).
  CHECK(aarch64FeaturesFromHwcaps(0, (1 << 1) | (1 << 2) | (1 << 5) | (1 << 6) | (1 << 16)) ==
        Names{"rand", "sve-aes", "sve-sha3", "sve-sm4", "sve2"});
}

TEST_CASE("an aarch64 crypto feature needs both of its capability bits", "[unit][cpu]") {
  // aes (bit 3) without pmull (4), sha2 (6) without sha1 (5): neither feature.
  CHECK(aarch64FeaturesFromHwcaps((1 << 3) | (1 << 6), 0).empty());
  CHECK(aarch64FeaturesFromHwcaps((1 << 3) | (1 << 4) | (1 << 5) | (1 << 6), 0) ==
        Names{"aes", "sha2"});
}

TEST_CASE("the host CPU is described with sorted features", "[unit][cpu]") {
  auto cpu = describeHostCpu();
  CHECK(!cpu.name.empty());
  CHECK(!cpu.features.empty());
  CHECK(std::is_sorted(cpu.features.begin(), cpu.features.end()));
}
