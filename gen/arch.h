/* arch.h: the arches the generator builds for. Names are read by the one
 * arch grammar shared with the runtime (runtime/rt_arch.h); this module adds
 * the table of arches kforge knows, and the predicates the planner and the
 * toolchains ask of a name, each a test on the parsed arch. */
#ifndef KF_ARCH_H
#define KF_ARCH_H

#include "rt_arch.h"

#include <stddef.h>

/* The arches kforge builds for, in the order messages list them,
 * NULL-terminated. A known name is one of these, plus, for a gfx arch, the
 * target features its processor takes (xnack, and sramecc from gfx906 on;
 * none on RDNA) each set on (+) or off (-) once. */
extern const char *const kf_arch_table[];

/* Returns 1 for a name kforge knows (sm_90a, sm_100f, gfx942:xnack-), else 0. */
int kf_arch_known(const char *arch);
/* Returns 0 for a name kforge knows, else -1 with the reason in why (a name
 * outside the grammar or the table, a target feature set twice, or one the
 * processor does not take: gfx1100:xnack+). */
int kf_arch_check(const char *arch, char *why, size_t n);
/* Comma-separated kf_arch_table, for messages; a static string. */
const char *kf_arch_known_list(void);

/* 1 for a gfx arch (built by hipcc, backend "hip"), else 0. */
int kf_arch_is_hip(const char *arch);
/* The NVIDIA compute capability as one integer (90 for sm_90a, 100 for
 * sm_100f), 0 for any other arch. */
int kf_arch_sm(const char *arch);
/* 1 for the arches whose template code takes the matrix-instruction path
 * (NVIDIA sm_80 and later: KF_HAS_MMA_BF16 in kf_portability.cuh), else 0. */
int kf_arch_has_mma(const char *arch);
/* The most shared memory (LDS on AMD) one block may use on an arch, in
 * bytes, opt-in included: 227 KiB on sm_90 and sm_100, 64 KiB on gfx90a and
 * gfx942, 160 KiB on gfx950; 0 for a name outside the grammar. */
long kf_arch_block_shared_max(const char *arch);

/* The first LLVM major version whose AMDGPU backend targets a gfx arch
 * (features ignored): 20 for gfx950, 17 for gfx942; 0 for the older ones,
 * which every supported LLVM targets, and for any other arch. */
int kf_arch_first_llvm(const char *arch);
/* The processor a parser of LLVM major `llvm` preprocesses a gfx arch as:
 * the arch's processor when that LLVM targets it, else an older processor
 * of the same generation that it does (gfx940 for gfx942 and gfx950), whose
 * predefined macros are then replaced by the real compiler's. Returns arch
 * itself or a static string. */
const char *kf_arch_parse_as(const char *arch, int llvm);

#endif /* KF_ARCH_H */
