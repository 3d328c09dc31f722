// Fuzzes the reading of tensors from JSON (jit/Engine.h's parseJSON and tensorFromJSON, as
// courier-run --arg and courier-serve's invoke use them) and courier-serve's on-demand reading
// of an invoke body (serve/JsonInputs.h) against it. The input's first line declares the
// entry's inputs (EntrySpecs.h); the rest is the body.
#include "tests/fuzz/EntrySpecs.h"
#include "tests/fuzz/FuzzSupport.h"

#include "jit/Engine.h"
#include "serve/JsonInputs.h"
#include "serve/RequestBodies.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <optional>
#include <vector>

using namespace courier;
using namespace courier::fuzz;

namespace {

/// Equal dtypes, shapes and elements. Float elements compare as values: JSON carries "NaN"
/// without its payload (writeTensorJSON's promise is the same value, not the same bits). With
/// `signedZeros`, -0 and 0 differ: what writeTensorJSON writes keeps the sign, but the text
/// "-0" is the integer 0 to llvm::json and negative zero to simdjson.
bool sameTensor(const Tensor &a, const Tensor &b, bool signedZeros) {
  if (a.dtype != b.dtype || a.shape != b.shape || a.bytes.size() != b.bytes.size())
    return false;
  if (!isFloatDType(a.dtype))
    return a.bytes == b.bytes;
  for (int64_t i = 0; i < a.numElements(); ++i) {
    double x = a.at(i), y = b.at(i);
    bool same = x == y && (!signedZeros || std::signbit(x) == std::signbit(y));
    if (!(same || (std::isnan(x) && std::isnan(y))))
      return false;
  }
  return true;
}

/// The tensor as writeTensorJSON writes it, for messages.
std::string describe(const Tensor &t) {
  std::string text;
  llvm::raw_string_ostream os(text);
  writeTensorJSON(os, t);
  return text;
}

/// What a tensor read from JSON promises: as many bytes as its shape takes, and a reading
/// back of what writeTensorJSON writes of it that gives it again. Its dtype and shape follow
/// the JSON ({"dtype": ...} overrides the spec's); invoke checks both against the entry.
void checkTensor(const Tensor &t, const TensorSpec &spec) {
  std::optional<int64_t> count = checkedElementCount(t.shape, dtypeSize(t.dtype));
  if (!count || uint64_t(*count) * dtypeSize(t.dtype) != t.bytes.size())
    broken("a tensor whose bytes do not match its shape");
  std::string text;
  llvm::raw_string_ostream os(text);
  writeTensorJSON(os, t);
  os.flush();
  llvm::Expected<llvm::json::Value> written = parseJSON(text);
  if (!written)
    broken("writeTensorJSON wrote text parseJSON refuses: " + llvm::toString(written.takeError()));
  llvm::Expected<Tensor> back = tensorFromJSON(*written, spec);
  if (!back)
    broken("a tensor that does not read back from its own JSON (" + text +
           "): " + llvm::toString(back.takeError()));
  if (!sameTensor(t, *back, /*signedZeros=*/true))
    broken("a tensor that reads back from its own JSON as another: " + text);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef rest = bytesOf(data, size);
  std::optional<EntrySignature> declared = entryOf(takeWords(rest));
  if (!declared)
    return -1; // Not an input this fuzzer can use: kept out of the corpus.
  const EntrySignature &entry = *declared;

  // The whole body as one tensor of the first spec, as courier-run --arg reads it.
  if (!entry.inputs.empty()) {
    if (llvm::Expected<llvm::json::Value> value = parseJSON(rest)) {
      if (llvm::Expected<Tensor> tensor = tensorFromJSON(*value, entry.inputs[0]))
        checkTensor(*tensor, entry.inputs[0]);
      else
        refused(tensor.takeError());
    } else {
      refused(value.takeError());
    }
  }

  // An invoke body both ways: the on-demand reading may decline a body, never disagree.
  std::optional<std::vector<Tensor>> fast = serve::readInputsFast(rest, entry);
  llvm::Expected<std::vector<Tensor>> slow = serve::inputsFromJSON(rest, entry);
  if (!slow) {
    std::string why = llvm::toString(slow.takeError());
    if (fast)
      broken("an invoke body the on-demand reading takes and llvm::json refuses: " + why);
    return 0;
  }
  if (slow->size() != entry.inputs.size())
    broken("an invoke body read into another number of inputs than the entry takes");
  for (size_t i = 0; i < slow->size(); ++i)
    checkTensor((*slow)[i], entry.inputs[i]);
  if (fast) {
    if (fast->size() != slow->size())
      broken("the two readings of an invoke body give different numbers of inputs");
    for (size_t i = 0; i < fast->size(); ++i) {
      checkTensor((*fast)[i], entry.inputs[i]);
      if (!sameTensor((*fast)[i], (*slow)[i], /*signedZeros=*/false))
        broken("the two readings of an invoke body give different input " + llvm::Twine(i) + ": " +
               describe((*fast)[i]) + " on demand, " + describe((*slow)[i]) + " with llvm::json");
    }
  }
  return 0;
}
