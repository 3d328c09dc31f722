// The fast reading of an invoke's JSON inputs: one on-demand pass over the body, each number
// stored straight into the tensor of its entry input's dtype.
#pragma once

#include "jit/Engine.h"

#include "llvm/ADT/StringRef.h"

#include <optional>
#include <vector>

namespace courier::serve {

/// The tensors of `{"inputs": [tensor, ...]}` for `entry`, read as tensorFromJSON reads each
/// one, or nullopt when the body holds anything that reading would refuse or that this one
/// leaves to it (a dtype other than the entry's, a number like 2.0 for an integer dtype, a key
/// besides "inputs", a duplicate key, ...). A nullopt is never an answer: the caller reads the
/// body again with llvm::json, which accepts the same bodies and names what is wrong.
/// `allocated` is how many bytes from body.data() may be read (a std::string's capacity): with
/// 64 to spare past the body it is read in place, else from a padded copy.
std::optional<std::vector<Tensor>> readInputsFast(llvm::StringRef body, const EntrySignature &entry,
                                                  size_t allocated = 0);

} // namespace courier::serve
