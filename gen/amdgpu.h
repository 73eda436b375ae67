/* amdgpu.h: the resource figures of an AMD code object read from the object
 * itself: its AMDGPU metadata note (NT_AMDGPU_METADATA), as llvm-readelf
 * prints it, for the kernel of a given symbol. hipcc --genco writes a clang
 * offload bundle; the ELF for the arch is taken out of it first. */
#ifndef KF_AMDGPU_H
#define KF_AMDGPU_H

#include <stddef.h>

#include "cache.h"

/* Where the ELF code object for arch (e.g. "gfx90a", features ignored)
 * lies in bytes: the whole when they are an ELF, else the bundle entry
 * "hip*-amdgcn-amd-amdhsa--<arch>[:features]". Returns 0 with *off and *n
 * set, or -1 when there is none. */
int kf_amdgpu_elf(const char *bytes, size_t len, const char *arch, size_t *off, size_t *n);

/* Lays the figures of kernel `symbol` from llvm-readelf's --notes output
 * over r: registers (.vgpr_count), agprs, sgprs, spilled_registers (VGPR +
 * SGPR spill counts), stack_bytes (.private_segment_fixed_size) and
 * shared_bytes (.group_segment_fixed_size). Returns 0, or -1 when the
 * kernel's entry or one of those figures is not there (r is then left as
 * it was). */
int kf_amdgpu_note_figures(const char *notes, const char *symbol, kf_meta_resources *r);

/* The llvm-readelf to read notes with: $KFORGE_LLVM_READELF, else the one of
 * clang `clang_major`'s install (/usr/lib/llvm-N/bin), else the first on
 * PATH, else /opt/rocm/llvm/bin. NULL when none (caller frees). */
char *kf_amdgpu_find_readelf(int clang_major);

/* Reads the figures of kernel `symbol` from the code object `bytes` for
 * arch, through readelf, with a scratch file in dir (removed again).
 * Returns 0 with the figures laid over r, or -1 with r as it was. */
int kf_amdgpu_object_figures(const char *readelf, const char *dir, const char *bytes, size_t len,
                             const char *arch, const char *symbol, kf_meta_resources *r);

#endif /* KF_AMDGPU_H */
