// Value types shared by every backend: owned result tensors and content-addressed objects.
#include "transport/Backend.h"

#include "abi/ContentHash.h"
#include "transport/ErrorCode.h"

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
  ObjectBlob blob;
  blob.sha256 = sha256Hex(bytes);
  blob.bytes = std::make_shared<const std::string>(std::move(bytes));
  return blob;
}

Backend::~Backend() = default;

llvm::Expected<SharedMemory> parseSharedMemory(llvm::StringRef text) {
  if (text == "auto")
    return SharedMemory::Auto;
  if (text == "on")
    return SharedMemory::On;
  if (text == "off")
    return SharedMemory::Off;
  return makeCodedError(ErrorCode::BadRequest,
                        "shared memory is auto, on or off, not '" + text + "'");
}

} // namespace courier::transport
