/* The contract between a shipped kernel object and whatever runs it: the names of its entries
 * and the layout of the signature table beside each. Plain C with no includes, so the
 * compiler that emits objects (passes/), the executors that run them (executor/) and the
 * runtime that names them (runtime/) agree without depending on one another. Bump
 * COURIER_SIGNATURE_VERSION whenever the table's layout changes.
 *
 * Entry: for each public kernel function <fn> an object defines
 *
 *     void _catalyst_pyface_<fn>(void *results, void *args);
 *
 * `args` points to a struct of pointers, one per input, each to a ranked memref descriptor
 * {allocated, aligned, offset, sizes[rank], strides[rank]}; `results` points to where the
 * result descriptor(s) are stored. Result buffers are allocated by the kernel.
 *
 * Signature table: beside each entry a constant array of int64 named
 * `_catalyst_signature_<fn>`:
 *
 *     word 0            COURIER_SIGNATURE_VERSION
 *     word 1            number of inputs  (N)
 *     word 2            number of results (M)
 *     words 3 ..        (rank, element size in bytes) for each of the N inputs, in order,
 *                       then for each of the M results, in order
 *
 * so the table is 3 + 2 * (N + M) words long. Executors check each launch against it: a launch
 * that disagrees would make the kernel read or write past its buffers.
 *
 * Features record: an object whose code needs CPU features beyond what every CPU of its
 * architecture has (LLVM's "generic" CPU for its triple) names them in one ELF note, in a
 * section of type SHT_NOTE named COURIER_FEATURES_SECTION that is not allocated (no loader
 * maps it, and no symbol or relocation refers to it):
 *
 *     namesz            sizeof(COURIER_NOTE_NAME), 8
 *     descsz            length of the list below, without padding
 *     type              COURIER_NOTE_FEATURES
 *     name              COURIER_NOTE_NAME, NUL-terminated, padded with NULs to 4 bytes
 *     desc              the features' LLVM names ("avx2", "fma", "neon"), without '+',
 *                       sorted and separated by ',', padded with NULs to 4 bytes
 *
 * in the object's byte order. The names are the instruction-set features the code was
 * compiled with, those its CPU implies included, tuning features excluded. An object without
 * the section needs nothing beyond its triple (objects from before the record read so too);
 * an executor whose CPU lacks a named feature refuses the object (`unsupported_cpu`) rather
 * than have it die of an illegal instruction. Records are added to, never changed: a reader
 * skips notes of other names or types.
 */
#ifndef COURIER_ABI_KERNELABI_H
#define COURIER_ABI_KERNELABI_H

/** Prefix of every kernel entry symbol. */
#define COURIER_ENTRY_PREFIX "_catalyst_pyface_"

/** Prefix of every signature table symbol. */
#define COURIER_SIGNATURE_PREFIX "_catalyst_signature_"

/** Layout version of the signature table, its first word. */
#define COURIER_SIGNATURE_VERSION 1

/** The section of the features record. */
#define COURIER_FEATURES_SECTION ".note.courier.features"

/** The name of the features note, its owner in ELF's terms. */
#define COURIER_NOTE_NAME "Courier"

/** The type of the features note. */
#define COURIER_NOTE_FEATURES 1

#endif /* COURIER_ABI_KERNELABI_H */
