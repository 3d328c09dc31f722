// A loaded module: typed invocation through its packed entry wrappers, and unloading.
#include "jit/Internal.h"

#include "llvm/Support/FormatVariadic.h"

#include <cstdlib>
#include <cstring>
#include <set>

namespace courier {

llvm::Error engineError(ErrorCode kind, std::string message) {
  return llvm::make_error<EngineError>(kind, std::move(message));
}

/// An executor that could not be reached (the client's `unavailable`) or could not start a
/// worker for the session (`worker_unavailable`) is unavailable; any other failure is the
/// executor's. The cause's text, code included, becomes the message.
llvm::Error executorError(llvm::Twine context, llvm::Error cause) {
  ErrorCode kind = ErrorCode::ExecutorFailed;
  llvm::Error kept = llvm::handleErrors(
      std::move(cause), [&](std::unique_ptr<transport::CodedError> coded) -> llvm::Error {
        if (coded->kind == ErrorCode::Unavailable || coded->kind == ErrorCode::WorkerUnavailable)
          kind = ErrorCode::ExecutorUnavailable;
        return llvm::Error(std::move(coded));
      });
  return engineError(kind, (context + ": " + llvm::toString(std::move(kept))).str());
}

Module::Module(std::unique_ptr<Impl> impl) : impl(std::move(impl)) {}

Module::~Module() {
  if (impl->teardown) {
    runtime::ModuleScope::Entered entered(*impl->scope);
    runtime::clearError();
    impl->teardown();
    llvm::consumeError(runtime::takeError());
  }
  // Sessions close before the code that used them is unmapped.
  impl->scope.reset();
  impl->jit.reset();
}

const std::string &Module::name() const { return impl->name; }
const std::vector<EntrySignature> &Module::entries() const { return impl->entries; }
const PhaseTimes &Module::compileTimes() const { return impl->times; }

const EntrySignature *Module::findEntry(llvm::StringRef entry) const {
  for (const EntrySignature &signature : impl->entries)
    if (signature.name == entry)
      return &signature;
  return nullptr;
}

void *Module::rawEntry(llvm::StringRef entry) const {
  auto it = impl->functions.find(entry);
  return it == impl->functions.end() ? nullptr : it->second.ciface;
}

namespace {

llvm::Error checkInput(const EntrySignature &entry, size_t index, const TensorSpec &spec,
                       const Tensor &input) {
  auto fail = [&](const llvm::Twine &what) {
    return engineError(ErrorCode::InvalidInput,
                       llvm::formatv("input {0} of '{1}' {2}", index, entry.name, what.str()));
  };
  if (input.dtype != spec.dtype)
    return fail("must be " + dtypeName(spec.dtype) + ", got " + dtypeName(input.dtype));
  if (spec.isScalar) {
    if (!input.shape.empty())
      return fail("is a scalar, got a tensor of rank " + llvm::Twine(input.shape.size()));
  } else {
    if (input.shape.size() != spec.shape.size())
      return fail("must have rank " + llvm::Twine(spec.shape.size()) + ", got rank " +
                  llvm::Twine(input.shape.size()));
    for (size_t d = 0; d < spec.shape.size(); ++d) {
      if (input.shape[d] < 0)
        return fail("has a negative dimension");
      if (spec.shape[d] >= 0 && spec.shape[d] != input.shape[d])
        return fail("must have shape " + spec.str() + ", got dimension " + llvm::Twine(d) +
                    " of size " + llvm::Twine(input.shape[d]));
    }
  }
  std::optional<int64_t> count = checkedElementCount(input.shape, dtypeSize(input.dtype));
  if (!count)
    return fail("has a shape whose size overflows");
  size_t needed = static_cast<size_t>(*count) * dtypeSize(input.dtype);
  if (input.bytes.size() != needed)
    return fail("holds " + llvm::Twine(input.bytes.size()) + " bytes, its shape needs " +
                llvm::Twine(needed));
  return llvm::Error::success();
}

/// Storage for a ranked memref descriptor: {allocated, aligned, offset, sizes, strides}.
struct Descriptor {
  explicit Descriptor(size_t rank) : words(3 + 2 * rank, 0), rank(rank) {}
  std::vector<int64_t> words;
  size_t rank;

  void *allocated() const { return reinterpret_cast<void *>(words[0]); }
  const uint8_t *aligned() const { return reinterpret_cast<const uint8_t *>(words[1]); }
  int64_t offset() const { return words[2]; }
  int64_t size(size_t d) const { return words[3 + d]; }
  int64_t stride(size_t d) const { return words[3 + rank + d]; }
};

/// Copies a strided result into a contiguous tensor.
Tensor gather(const Descriptor &desc, DType dtype) {
  Tensor t{dtype, {}, {}};
  for (size_t d = 0; d < desc.rank; ++d)
    t.shape.push_back(desc.size(d));
  size_t elem = dtypeSize(dtype);
  int64_t n = t.numElements();
  t.bytes.resize(n * elem);
  if (n == 0)
    return t;
  const uint8_t *base = desc.aligned() + desc.offset() * elem;
  bool contiguous = true;
  for (int64_t d = desc.rank, stride = 1; d-- > 0; stride *= desc.size(d))
    contiguous &= desc.size(d) == 1 || desc.stride(d) == stride;
  if (contiguous) {
    std::memcpy(t.bytes.data(), base, t.bytes.size());
    return t;
  }
  std::vector<int64_t> index(desc.rank, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t offset = 0;
    for (size_t d = 0; d < desc.rank; ++d)
      offset += index[d] * desc.stride(d);
    std::memcpy(t.bytes.data() + i * elem, base + offset * elem, elem);
    for (size_t d = desc.rank; d-- > 0;) {
      if (++index[d] < desc.size(d))
        break;
      index[d] = 0;
    }
  }
  return t;
}

} // namespace

llvm::Expected<std::vector<Tensor>> Module::invoke(llvm::StringRef entry,
                                                   llvm::ArrayRef<Tensor> inputs) const {
  const EntrySignature *signature = findEntry(entry);
  auto fns = impl->functions.find(entry);
  if (auto it = impl->unsupported.find(entry); it != impl->unsupported.end())
    return engineError(
        ErrorCode::UnknownEntry,
        llvm::formatv("entry '{0}' of module '{1}' cannot be invoked: {2}; invoke passes ranked "
                      "tensors, identity-layout memrefs and scalars of f16, f32, f64, i1, i8, "
                      "i16, i32, i64 and index",
                      entry, impl->name, it->second));
  if (!signature || fns == impl->functions.end()) {
    std::string known;
    for (const EntrySignature &e : impl->entries)
      known += (known.empty() ? "" : ", ") + e.name;
    return engineError(ErrorCode::UnknownEntry,
                       llvm::formatv("module '{0}' has no entry '{1}' (entries: {2})", impl->name,
                                     entry, known.empty() ? "none" : known));
  }
  if (inputs.size() != signature->inputs.size())
    return engineError(ErrorCode::InvalidInput,
                       llvm::formatv("entry '{0}' takes {1} inputs, got {2}", signature->name,
                                     signature->inputs.size(), inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i)
    if (llvm::Error error = checkInput(*signature, i, signature->inputs[i], inputs[i]))
      return std::move(error);

  size_t numInputs = inputs.size(), numOutputs = signature->outputs.size();
  std::vector<void *> args(numInputs + numOutputs);
  std::vector<Descriptor> inputDescs, outputDescs;
  std::vector<int64_t> scalars(numInputs + numOutputs, 0);
  inputDescs.reserve(numInputs);
  outputDescs.reserve(numOutputs);
  for (size_t i = 0; i < numInputs; ++i) {
    const Tensor &input = inputs[i];
    if (signature->inputs[i].isScalar) {
      std::memcpy(&scalars[i], input.bytes.data(), input.bytes.size());
      args[i] = &scalars[i];
      continue;
    }
    Descriptor &desc = inputDescs.emplace_back(input.shape.size());
    auto data = reinterpret_cast<int64_t>(input.bytes.data());
    desc.words[0] = desc.words[1] = data;
    int64_t stride = 1;
    for (size_t d = input.shape.size(); d-- > 0;) {
      desc.words[3 + d] = input.shape[d];
      desc.words[3 + desc.rank + d] = stride;
      stride *= input.shape[d];
    }
    args[i] = desc.words.data();
  }
  for (size_t j = 0; j < numOutputs; ++j) {
    const TensorSpec &spec = signature->outputs[j];
    args[numInputs + j] = spec.isScalar ? static_cast<void *>(&scalars[numInputs + j])
                                        : outputDescs.emplace_back(spec.shape.size()).words.data();
  }

  // Kernel launches re-open their sessions; the scope applies the module's options to them.
  runtime::ModuleScope::Entered entered(*impl->scope);
  runtime::clearError();
  fns->second.packed(args.data());
  llvm::Error failure = runtime::takeError();

  std::vector<Tensor> outputs;
  std::set<void *> freed;
  size_t next = 0;
  for (size_t j = 0; j < numOutputs; ++j) {
    const TensorSpec &spec = signature->outputs[j];
    if (spec.isScalar) {
      Tensor t{spec.dtype, {}, std::vector<uint8_t>(dtypeSize(spec.dtype))};
      std::memcpy(t.bytes.data(), &scalars[numInputs + j], t.bytes.size());
      outputs.push_back(std::move(t));
      continue;
    }
    const Descriptor &desc = outputDescs[next++];
    if (!failure)
      outputs.push_back(gather(desc, spec.dtype));
    // Two results may share one allocation; free it once.
    if (desc.allocated() && freed.insert(desc.allocated()).second)
      std::free(desc.allocated());
  }
  if (failure)
    return executorError("invoking '" + signature->name + "' of module '" + impl->name + "'",
                         std::move(failure));
  return outputs;
}

} // namespace courier
