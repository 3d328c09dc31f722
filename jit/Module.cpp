// A loaded module: typed invocation through its packed entry wrappers, and unloading.
#include "jit/Internal.h"
#include "jit/ShapeChecks.h"

#include "abi/MemRef.h"
#include "executor/ResultBlocks.h"

#include "llvm/Support/FormatVariadic.h"

#include <cstdlib>
#include <cstring>

namespace courier {

llvm::Error engineError(ErrorCode kind, std::string message, std::optional<ErrorCode> cause) {
  return llvm::make_error<EngineError>(kind, std::move(message), cause);
}

/// An executor that could not be reached (the client's `unavailable`), not over TLS
/// (`tls_failed`), that died with a launch in hand (`executor_lost`), or could not start a
/// worker for the session (`worker_unavailable`) is unavailable; any other failure is the
/// executor's. The cause's text, code included, becomes the message, and its code the
/// error's `cause`.
llvm::Error executorError(llvm::Twine context, llvm::Error cause) {
  ErrorCode kind = ErrorCode::ExecutorFailed;
  std::optional<ErrorCode> causeCode;
  llvm::Error kept = llvm::handleErrors(
      std::move(cause), [&](std::unique_ptr<transport::CodedError> coded) -> llvm::Error {
        causeCode = coded->kind;
        if (llvm::is_contained({ErrorCode::Unavailable, ErrorCode::WorkerUnavailable,
                                ErrorCode::TlsFailed, ErrorCode::ExecutorLost},
                               coded->kind))
          kind = ErrorCode::ExecutorUnavailable;
        return llvm::Error(std::move(coded));
      });
  return engineError(kind, (context + ": " + llvm::toString(std::move(kept))).str(), causeCode);
}

Module::Module(std::unique_ptr<Impl> impl) : impl(std::move(impl)) {}
Invocable::~Invocable() = default;

Module::~Module() = default;
Module::Impl::Impl() = default;
Module::Impl::~Impl() = default;
ModuleCode::~ModuleCode() = default;

LocalCode::~LocalCode() {
  if (teardown) {
    runtime::ModuleScope::Entered entered(*scope);
    runtime::clearError();
    teardown();
    llvm::consumeError(runtime::takeError());
  }
  // Sessions close before the code that used them is unmapped.
  scope.reset();
  jit.reset();
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

WorkerState Module::workerState() const { return impl->code->workerState(); }

void Module::terminate() const { impl->code->terminate(); }

void *Module::rawEntry(llvm::StringRef entry) const {
  const LocalCode *local = impl->code->local();
  if (!local)
    return nullptr;
  auto it = local->functions.find(entry);
  return it == local->functions.end() ? nullptr : it->second.ciface;
}

namespace {

llvm::Error checkInput(const EntrySignature &entry, size_t index, const TensorSpec &spec,
                       const TensorRef &input) {
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
  if (input.size != needed)
    return fail("holds " + llvm::Twine(input.size) + " bytes, its shape needs " +
                llvm::Twine(needed));
  return llvm::Error::success();
}

/// Storage for a ranked memref descriptor (abi/MemRef.h).
struct Descriptor {
  explicit Descriptor(size_t rank) : words(abi::descriptorWords(rank), 0), rank(rank) {}
  std::vector<int64_t> words;
  size_t rank;

  abi::MemRefView view() const { return {words.data(), rank}; }
  abi::MutableMemRefView view() { return {words.data(), rank}; }
  void *allocated() const { return view().allocated(); }
};

/// The result a descriptor describes.
ResultRef resultOf(const Descriptor &desc, DType dtype) {
  abi::MemRefView view = desc.view();
  ResultRef r{dtype, {}, {}, static_cast<const uint8_t *>(view.data(dtypeSize(dtype)))};
  r.shape.assign(view.sizes().begin(), view.sizes().end());
  r.strides.assign(view.strides().begin(), view.strides().end());
  return r;
}

} // namespace

size_t ResultRef::packedBytes() const {
  size_t n = dtypeSize(dtype);
  for (int64_t d : shape)
    n *= static_cast<size_t>(d);
  return n;
}

bool ResultRef::isRowMajor() const { return abi::isRowMajor(shape, strides); }

void ResultRef::pack(uint8_t *out) const {
  abi::copyRowMajor(data, dtypeSize(dtype), shape, strides, out);
}

namespace {
/// The signature of `entry` of a module in this process, once `inputs` are checked against it.
llvm::Expected<const EntrySignature *> checkedEntry(const Module::Impl &impl, const LocalCode &code,
                                                    llvm::StringRef entry,
                                                    llvm::ArrayRef<TensorRef> inputs) {
  const EntrySignature *signature = nullptr;
  for (const EntrySignature &e : impl.entries)
    if (e.name == entry)
      signature = &e;
  if (auto it = impl.unsupported.find(entry); it != impl.unsupported.end())
    return engineError(
        ErrorCode::UnknownEntry,
        llvm::formatv("entry '{0}' of module '{1}' cannot be invoked: {2}; invoke passes ranked "
                      "tensors, identity-layout memrefs and scalars of {3} and index",
                      entry, impl.name, it->second, dtypeNames(", ")));
  if (!signature || !code.functions.count(entry)) {
    std::string known;
    for (const EntrySignature &e : impl.entries)
      known += (known.empty() ? "" : ", ") + e.name;
    return engineError(ErrorCode::UnknownEntry,
                       llvm::formatv("module '{0}' has no entry '{1}' (entries: {2})", impl.name,
                                     entry, known.empty() ? "none" : known));
  }
  if (inputs.size() != signature->inputs.size())
    return engineError(ErrorCode::InvalidInput,
                       llvm::formatv("entry '{0}' takes {1} inputs, got {2}", signature->name,
                                     signature->inputs.size(), inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i)
    if (llvm::Error error = checkInput(*signature, i, signature->inputs[i], inputs[i]))
      return std::move(error);
  if (!signature->dimEqualities.empty()) {
    llvm::SmallVector<llvm::ArrayRef<int64_t>, 8> shapes;
    for (const TensorRef &input : inputs)
      shapes.push_back(input.shape);
    if (llvm::Error error = checkDimEqualities(*signature, shapes))
      return std::move(error);
  }
  return signature;
}
} // namespace

namespace {
/// The results of a call of the entry `signature` describes, from its output descriptors
/// and scalar slots: each allocation the results use, once (`allocations`), and those a
/// result alone uses, packed row-major, offered as that result's bytes (`offered`).
void collectResults(const EntrySignature &signature, llvm::ArrayRef<Descriptor> outputDescs,
                    llvm::ArrayRef<int64_t> scalars, llvm::SmallVectorImpl<ResultRef> &results,
                    llvm::SmallVectorImpl<void *> &allocations,
                    llvm::SmallVectorImpl<void *> &offered) {
  size_t next = 0;
  for (size_t j = 0; j < signature.outputs.size(); ++j) {
    const TensorSpec &spec = signature.outputs[j];
    if (spec.isScalar) {
      results.push_back(
          ResultRef{spec.dtype, {}, {}, reinterpret_cast<const uint8_t *>(&scalars[j])});
      continue;
    }
    const Descriptor &desc = outputDescs[next++];
    results.push_back(resultOf(desc, spec.dtype));
    // Two results may share one allocation; free it once.
    if (desc.allocated())
      if (!llvm::is_contained(allocations, desc.allocated()))
        allocations.push_back(desc.allocated());
  }
  // A result alone in its allocation and packed row-major can become its tensor's bytes.
  for (size_t j = 0, k = 0; j < signature.outputs.size(); ++j) {
    if (signature.outputs[j].isScalar)
      continue;
    void *allocation = outputDescs[k++].allocated();
    size_t sharing = llvm::count_if(
        outputDescs, [&](const Descriptor &desc) { return desc.allocated() == allocation; });
    if (allocation && sharing == 1 && results[j].isRowMajor()) {
      results[j].allocation = allocation;
      offered.push_back(allocation);
    }
  }
}
} // namespace

llvm::Error invokeInProcess(const Module::Impl &impl, llvm::StringRef entry,
                            llvm::ArrayRef<TensorRef> inputs,
                            llvm::function_ref<void(llvm::MutableArrayRef<ResultRef>)> consume) {
  const LocalCode *code = impl.code ? impl.code->local() : nullptr;
  if (!code)
    return engineError(ErrorCode::Internal, "module '" + impl.name + "' runs in a worker");
  llvm::Expected<const EntrySignature *> checked = checkedEntry(impl, *code, entry, inputs);
  if (!checked)
    return checked.takeError();
  const EntrySignature *signature = *checked;
  auto fns = code->functions.find(entry);

  size_t numInputs = inputs.size(), numOutputs = signature->outputs.size();
  std::vector<void *> args(numInputs + numOutputs);
  std::vector<Descriptor> inputDescs, outputDescs;
  std::vector<int64_t> scalars(numInputs + numOutputs, 0);
  inputDescs.reserve(numInputs);
  outputDescs.reserve(numOutputs);
  for (size_t i = 0; i < numInputs; ++i) {
    const TensorRef &input = inputs[i];
    if (signature->inputs[i].isScalar) {
      std::memcpy(&scalars[i], input.data, input.size);
      args[i] = &scalars[i];
      continue;
    }
    Descriptor &desc = inputDescs.emplace_back(input.shape.size());
    void *data = const_cast<void *>(static_cast<const void *>(input.data));
    desc.view().fill(data, data, 0, input.shape, abi::rowMajorStrides(input.shape));
    args[i] = desc.words.data();
  }
  for (size_t j = 0; j < numOutputs; ++j) {
    const TensorSpec &spec = signature->outputs[j];
    args[numInputs + j] = spec.isScalar ? static_cast<void *>(&scalars[numInputs + j])
                                        : outputDescs.emplace_back(spec.shape.size()).words.data();
  }

  // Kernel launches re-open their sessions; the scope applies the module's options to them.
  runtime::ModuleScope::Entered entered(*code->scope);
  runtime::clearError();
  fns->second.packed(args.data());
  llvm::Error failure = runtime::takeError();

  llvm::SmallVector<ResultRef, 4> results;
  llvm::SmallVector<void *, 4> allocations, offered;
  collectResults(*signature, outputDescs, llvm::ArrayRef<int64_t>(scalars).drop_front(numInputs),
                 results, allocations, offered);
  if (!failure)
    consume(results);
  // Large buffers go back to be reused by the next call (see executor/ResultBlocks.h).
  for (void *allocation : allocations) {
    bool taken =
        llvm::is_contained(offered, allocation) &&
        !llvm::any_of(results, [&](const ResultRef &r) { return r.allocation == allocation; });
    if (!taken)
      executor::giveBlock(allocation);
  }
  if (failure)
    return executorError("invoking '" + signature->name + "' of module '" + impl.name + "'",
                         std::move(failure));
  return llvm::Error::success();
}

namespace {

llvm::Error outputError(llvm::StringRef entry, size_t index, const llvm::Twine &what) {
  return engineError(ErrorCode::InvalidInput,
                     llvm::formatv("output {0} of '{1}' {2}", index, entry, what.str()));
}

std::string shapeText(llvm::ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d)
    text += (d ? ", " : "") + std::to_string(shape[d]);
  return text + "]";
}

/// Checks the outputs the caller passed against what the signature says of the results,
/// before the call: their count, and each one's dtype, rank, static dimensions and size.
llvm::Error checkOutputs(const EntrySignature &signature, llvm::ArrayRef<OutputRef> outputs) {
  if (outputs.empty())
    return llvm::Error::success();
  if (outputs.size() != signature.outputs.size())
    return engineError(ErrorCode::InvalidInput,
                       llvm::formatv("entry '{0}' has {1} results, got {2} outputs", signature.name,
                                     signature.outputs.size(), outputs.size()));
  for (size_t j = 0; j < outputs.size(); ++j) {
    const OutputRef &out = outputs[j];
    const TensorSpec &spec = signature.outputs[j];
    if (!out.data)
      continue;
    if (out.dtype != spec.dtype)
      return outputError(signature.name, j,
                         "must be " + dtypeName(spec.dtype) + ", got " + dtypeName(out.dtype));
    if (out.shape.size() != spec.shape.size())
      return outputError(signature.name, j,
                         "must have rank " + llvm::Twine(spec.shape.size()) + ", got rank " +
                             llvm::Twine(out.shape.size()));
    for (size_t d = 0; d < spec.shape.size(); ++d)
      if (out.shape[d] < 0 || (spec.shape[d] >= 0 && spec.shape[d] != out.shape[d]))
        return outputError(signature.name, j,
                           "must have shape " + spec.str() + ", got " + shapeText(out.shape));
    std::optional<int64_t> count = checkedElementCount(out.shape, dtypeSize(out.dtype));
    if (!count || out.size != static_cast<size_t>(*count) * dtypeSize(out.dtype))
      return outputError(signature.name, j,
                         "holds " + llvm::Twine(out.size) + " bytes, its shape " +
                             shapeText(out.shape) + " needs another size");
  }
  return llvm::Error::success();
}

/// A result's shape, checked against the output it is to be written into.
llvm::Error checkResultFits(llvm::StringRef entry, size_t index, const OutputRef &out,
                            llvm::ArrayRef<int64_t> shape) {
  if (llvm::ArrayRef<int64_t>(out.shape) == shape)
    return llvm::Error::success();
  return outputError(entry, index,
                     "has shape " + shapeText(out.shape) + ", the result has shape " +
                         shapeText(shape));
}

} // namespace

llvm::Error writeIntoOutputs(llvm::StringRef entry, std::vector<Tensor> &results,
                             llvm::ArrayRef<OutputRef> outputs) {
  for (size_t j = 0; j < results.size() && j < outputs.size(); ++j)
    if (outputs[j].data)
      if (llvm::Error error = checkResultFits(entry, j, outputs[j], results[j].shape))
        return error;
  for (size_t j = 0; j < results.size() && j < outputs.size(); ++j) {
    Tensor &t = results[j];
    if (!outputs[j].data)
      continue;
    if (!t.bytes.empty())
      std::memcpy(outputs[j].data, t.bytes.data(), t.bytes.size());
    t.bytes = TensorBytes();
  }
  return llvm::Error::success();
}

llvm::Expected<std::vector<Tensor>> Module::invoke(llvm::StringRef entry,
                                                   llvm::ArrayRef<Tensor> inputs,
                                                   const InvokeOptions &options) const {
  llvm::SmallVector<TensorRef, 4> refs;
  for (const Tensor &t : inputs)
    refs.push_back(t.ref());
  return invoke(entry, refs, options);
}

llvm::Expected<std::vector<Tensor>> Module::invoke(llvm::StringRef entry,
                                                   llvm::ArrayRef<TensorRef> inputs,
                                                   const InvokeOptions &options) const {
  if (!options.outputs.empty())
    if (const EntrySignature *signature = findEntry(entry))
      if (llvm::Error error = checkOutputs(*signature, options.outputs))
        return std::move(error);
  if (options.queued)
    *options.queued = std::chrono::nanoseconds(0); // An isolated call says how long it waited.
  return impl->code->invoke(*impl, entry, inputs, options);
}

llvm::Expected<std::vector<Tensor>> LocalCode::invoke(const Module::Impl &module,
                                                      llvm::StringRef entry,
                                                      llvm::ArrayRef<TensorRef> inputs,
                                                      const InvokeOptions &options) const {
  llvm::ArrayRef<OutputRef> outs = options.outputs;
  std::vector<Tensor> outputs;
  // The first output whose result has another shape, and that shape.
  std::optional<size_t> unfit;
  llvm::SmallVector<int64_t, 4> unfitShape;
  llvm::Error error =
      invokeInProcess(module, entry, inputs, [&](llvm::MutableArrayRef<ResultRef> results) {
        // Every output is checked before any is written: a failed call writes none.
        for (size_t j = 0; j < outs.size() && j < results.size(); ++j)
          if (outs[j].data &&
              llvm::ArrayRef<int64_t>(outs[j].shape) != llvm::ArrayRef<int64_t>(results[j].shape)) {
            unfit = j;
            unfitShape = results[j].shape;
            return;
          }
        for (size_t j = 0; j < results.size(); ++j) {
          ResultRef &r = results[j];
          Tensor t{r.dtype, {r.shape.begin(), r.shape.end()}, {}};
          if (j < outs.size() && outs[j].data) {
            r.pack(outs[j].data);
          } else if (r.allocation) {
            // The kernel's buffer becomes the tensor's: no copy, and it goes back for reuse
            // when the tensor is done with it.
            t.bytes = TensorBytes::adopt(std::exchange(r.allocation, nullptr),
                                         const_cast<uint8_t *>(r.data), r.packedBytes(),
                                         executor::giveBlock);
          } else {
            t.bytes = TensorBytes::uninitialized(r.packedBytes());
            r.pack(t.bytes.data());
          }
          outputs.push_back(std::move(t));
        }
      });
  if (error)
    return std::move(error);
  if (unfit)
    return checkResultFits(entry, *unfit, outs[*unfit], unfitShape);
  return outputs;
}

} // namespace courier
