// The one content hash every layer names objects by.
#include "abi/ContentHash.h"

#include <catch2/catch.hpp>

#include <string>

TEST_CASE("sha256Hex gives the standard digests in lowercase hex", "[abi]") {
  // FIPS 180-2, appendix B.1, and the digest of no bytes.
  CHECK(courier::sha256Hex("abc") ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(courier::sha256Hex("") ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  // Bytes past a NUL count: objects are binary.
  CHECK(courier::sha256Hex(llvm::StringRef("a\0b", 3)) != courier::sha256Hex("a"));
}

TEST_CASE("a hashing stream gives the digest of everything written to it", "[abi]") {
  std::string text;
  courier::Sha256Stream stream;
  for (int i = 0; i < 1000; ++i) {
    std::string piece = std::to_string(i) + (i % 7 ? "," : std::string(1, '\0'));
    stream << piece;
    text += piece;
  }
  CHECK(stream.hex() == courier::sha256Hex(text));
  courier::Sha256Stream empty;
  CHECK(empty.hex() == courier::sha256Hex(""));
}

TEST_CASE("an object's name claims a hash only when it is <64 lowercase hex>.o", "[abi]") {
  std::string hash = courier::sha256Hex("abc");
  CHECK(courier::claimedContentHash("/c/objects/" + hash + ".o") == hash);
  CHECK(courier::claimedContentHash(hash + ".o") == hash);
  CHECK(courier::claimedContentHash("memory:" + hash + ".o") == hash);
  CHECK(courier::claimedContentHash("/c/objects/" + hash + ".obj").empty());
  CHECK(courier::claimedContentHash("/c/objects/" + hash.substr(1) + ".o").empty());
  std::string upper = hash;
  upper[0] = 'B';
  CHECK(courier::claimedContentHash(upper + ".o").empty());
  CHECK(courier::claimedContentHash("/w/kernel.o").empty());
}
