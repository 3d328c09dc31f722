// How the object host's failures become wire codes, in one place for the worker process and
// for the in-process executor.
#ifndef COURIER_EXECUTOR_HOSTERRORS_H
#define COURIER_EXECUTOR_HOSTERRORS_H

#include "transport/ErrorCode.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

namespace courier::executor {

/// A host failure as a CodedError: a CodedError keeps its own code (the object host names
/// unknown objects, entries and symbols so), a symbol ORC could not resolve is `missingCode`,
/// and anything else is `failureCode`. Kinds come from types, never from message text. The
/// message is prefixed with `context` unless it is empty.
llvm::Error classifyHostError(llvm::Error error, transport::ErrorCode missingCode,
                              transport::ErrorCode failureCode, const llvm::Twine &context);

} // namespace courier::executor

#endif // COURIER_EXECUTOR_HOSTERRORS_H
