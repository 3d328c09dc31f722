// The C ABI that lowered host code calls to reach executors. The names are Catalyst's; the
// `convert-executor-to-llvm` pass emits declarations of exactly these functions and
// tests/unit/AbiTest.cpp fails if the two disagree.
//
// Handles are 64-bit integers (0 means "none"), so a stale or forged handle is an error,
// never a dangling pointer. No function throws or aborts: a failure returns a non-zero
// status (or a 0 handle), and its message is recorded for the calling thread, where the
// engine picks it up after the call (see runtime/Runtime.h). Entry names and signature
// tables of the objects these functions ship and launch are abi/KernelABI.h's.
#ifndef COURIER_RUNTIME_EXECUTORABI_H
#define COURIER_RUNTIME_EXECUTORABI_H

#include "abi/KernelABI.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Opens (or returns the already open) session with the executor at `address`
/// ("host:port", or "local" for the in-process executor). Returns 0 on failure.
int64_t __catalyst__executor__open(const char *address);

/// Makes the object file at `path` available to the session's executor. `format` names the
/// container ("object" for a relocatable ELF object). Content-addressed: an object the
/// executor already holds is not uploaded again. Returns 0 on success.
int32_t __catalyst__executor__send_binary(int64_t session, const char *path, const char *format);

/// Runs `entry` (a `_catalyst_pyface_<fn>` symbol) of the object shipped from `object` and
/// waits for its results.
///
/// `in_descs[i]` points to a ranked memref descriptor
/// `{allocated, aligned, offset, sizes[rank], strides[rank]}` of rank `in_ranks[i]` whose
/// elements are `in_elem_sizes[i]` bytes wide. `out_descs[i]` points to caller-owned storage
/// for a descriptor of rank `out_ranks[i]`; on entry its `sizes` hold the static shape (-1 for
/// a dynamic dimension), which the executor's reply must match. On return the descriptor
/// owns a malloc'd buffer the caller frees with free(). On failure each result is still a
/// valid zero-filled buffer (dynamic dimensions 0), so host code never reads garbage.
int32_t __catalyst__executor__launch(int64_t session, const char *entry, const char *object,
                                     int64_t n_in, void **in_descs, const int64_t *in_ranks,
                                     const int64_t *in_elem_sizes, int64_t n_out, void **out_descs,
                                     const int64_t *out_ranks, const int64_t *out_elem_sizes);

/// Starts `entry` (no arguments, no results) without waiting. Returns a token for
/// __catalyst__executor__await, or 0 on failure.
int64_t __catalyst__executor__launch_async(int64_t session, const char *entry, const char *object);

/// Waits for the launch behind `token` to finish. Returns 0 on success. A token is awaited
/// at most once.
int32_t __catalyst__executor__await(int64_t token);

/// Calls `sym` on the executor with the flat wire layout of `executor.call`: `args` holds
/// the inputs packed in order (`args_size` bytes). On entry `*out_size` is the number of
/// reply bytes the caller expects; on success `*out` receives a buffer of exactly that many
/// bytes (the outputs packed in order), released with __catalyst__executor__free_result.
/// On failure `*out` is a zero-filled buffer of `*out_size` bytes, still to be released.
int32_t __catalyst__executor__call_wrapper(int64_t session, const char *sym, const void *args,
                                           int64_t args_size, void **out, int64_t *out_size);

/// Releases a reply buffer from __catalyst__executor__call_wrapper. Null is ignored.
void __catalyst__executor__free_result(void *buf);

/// Closes the session. Sessions still open at process exit are closed by the runtime.
int32_t __catalyst__executor__close(int64_t session);

#ifdef __cplusplus
}
#endif

#endif // COURIER_RUNTIME_EXECUTORABI_H
