// Value types shared by every backend: owned result tensors and content-addressed objects.
#include "transport/Backend.h"

#include <openssl/evp.h>

#include <cstdlib>

namespace courier::transport {

OwnedTensor &OwnedTensor::operator=(OwnedTensor &&other) noexcept {
  if (this == &other)
    return *this;
  std::free(allocated);
  allocated = other.allocated;
  data = other.data;
  elemSize = other.elemSize;
  sizes = std::move(other.sizes);
  strides = std::move(other.strides);
  other.allocated = nullptr;
  other.data = nullptr;
  return *this;
}

OwnedTensor::~OwnedTensor() { std::free(allocated); }

ObjectBlob ObjectBlob::fromBytes(std::string bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // EVP_Digest only fails on allocation failure; an empty hash then makes every later
  // lookup of this blob fail loudly instead of aliasing another object.
  ObjectBlob blob;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) == 1) {
    static const char hex[] = "0123456789abcdef";
    blob.sha256.reserve(2 * length);
    for (unsigned int i = 0; i < length; ++i) {
      blob.sha256.push_back(hex[digest[i] >> 4]);
      blob.sha256.push_back(hex[digest[i] & 0xf]);
    }
  }
  blob.bytes = std::make_shared<const std::string>(std::move(bytes));
  return blob;
}

Backend::~Backend() = default;

} // namespace courier::transport
