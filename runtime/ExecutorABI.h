// The C ABI that lowered host code calls to reach executors: Catalyst's ExecutorCAPI.h,
// name for name and type for type, so host code lowered by Catalyst's compiler or by
// Courier's `convert-executor-to-llvm` links against this runtime. The pass emits
// declarations of exactly these functions and tests/unit/AbiTest.cpp fails if the two, or
// this header and Catalyst's prototypes, disagree.
//
// Handles are 64-bit integers (0 means "none"), so a stale or forged handle is an error,
// never a dangling pointer. No function throws or aborts: a failure returns a non-zero
// status or a 0 handle, or nothing where Catalyst's signature returns nothing, and its
// message is recorded for the calling thread, where the engine picks it up after the call
// (see runtime/Runtime.h). Entry names and signature tables of the objects these functions
// ship and launch are abi/KernelABI.h's.
#ifndef COURIER_RUNTIME_EXECUTORABI_H
#define COURIER_RUNTIME_EXECUTORABI_H

#include "abi/KernelABI.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Marks what Courier's lowering fills in before a call, which Catalyst's leaves unset: the
/// `aligned` field of a result descriptor (its `allocated` field null), followed by the
/// result's expected shape, and `*out_buf` of call_wrapper, whose `*out_size` is then the
/// expected reply size. Not a user-space address on any supported target.
#define COURIER_EXPECTED_SHAPE_MARKER INT64_C(0x436F75726965722E)

/// `format` of __catalyst__executor__send_binary for a relocatable ELF object, the one
/// container executors load (Catalyst's 1, a data asset, is refused).
#define COURIER_BINARY_FORMAT_OBJECT 0u

/// Opens (or returns the already open) session with the executor at `address`
/// ("host:port", or "local" for the in-process executor). Returns 0 on failure.
int64_t __catalyst__executor__open(const char *address);

/// Makes the object file at `path` available to the session's executor. Content-addressed:
/// an object the executor already holds is not uploaded again, and a path already sent over
/// the session is a lookup, not a read. Returns 0 on success.
int64_t __catalyst__executor__send_binary(int64_t session, const char *path, uint32_t format);

/// Runs `entry` (a `_catalyst_pyface_<fn>` symbol) of the object shipped from `object` and
/// waits for its results.
///
/// `input_descs[i]` points to a ranked memref descriptor
/// `{allocated, aligned, offset, sizes[rank], strides[rank]}` of rank `input_ranks[i]` whose
/// elements are `input_elem_sizes[i]` bytes wide. `output_descs[i]` points to caller-owned
/// storage for a descriptor of rank `output_ranks[i]`. When it carries
/// COURIER_EXPECTED_SHAPE_MARKER its `sizes` hold the static shape (-1 for a dynamic
/// dimension), which the executor's reply must match; otherwise only ranks and element
/// sizes are checked. On return the descriptor owns a malloc'd buffer the caller frees with
/// free(). On failure each result is still a valid zero-filled buffer (dynamic and unknown
/// dimensions 0), so host code never reads garbage.
void __catalyst__executor__launch(int64_t session, const char *entry, const char *object,
                                  size_t num_inputs, void *const *input_descs,
                                  const size_t *input_ranks, const size_t *input_elem_sizes,
                                  size_t num_outputs, void *const *output_descs,
                                  const size_t *output_ranks, const size_t *output_elem_sizes);

/// Starts `entry` (no arguments, no results) without waiting. Returns a token for
/// __catalyst__executor__await, or 0 on failure.
int64_t __catalyst__executor__launch_async(int64_t session, const char *entry, const char *object);

/// Waits for the launch behind `token` to finish; a token is awaited at most once.
void __catalyst__executor__await(int64_t token);

/// Calls `symbol` on the executor with the flat wire layout of `executor.call`: `args_buf`
/// holds the inputs packed in order (`args_size` bytes). When `*out_buf` carries
/// COURIER_EXPECTED_SHAPE_MARKER on entry, `*out_size` is the number of reply bytes the caller
/// expects; otherwise the call fails, the reply size being unknown. On success `*out_buf`
/// receives a buffer of exactly that many bytes (the outputs packed in order), released with
/// __catalyst__executor__free_result. On failure `*out_buf` is a zero-filled buffer of
/// `*out_size` bytes (0 when unknown), still to be released. Returns 0 on success.
int32_t __catalyst__executor__call_wrapper(int64_t session, const char *symbol,
                                           const char *args_buf, size_t args_size, void **out_buf,
                                           size_t *out_size);

/// Releases a reply buffer from __catalyst__executor__call_wrapper. Null is ignored.
void __catalyst__executor__free_result(void *buf);

/// Closes the session. Sessions still open at process exit are closed by the runtime.
/// Returns 0 on success.
int64_t __catalyst__executor__close(int64_t session);

#ifdef __cplusplus
}
#endif

#endif // COURIER_RUNTIME_EXECUTORABI_H
