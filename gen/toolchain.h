/* toolchain.h: the compilers kforge drives (nvcc for sm_* arches, hipcc for
 * gfx* arches): finding them, their identity for keys, whether they can target
 * an arch, the compile command, and the flags of their device preprocessing
 * pass (replayed into libclang to find a source's include closure). */
#ifndef KF_TOOLCHAIN_H
#define KF_TOOLCHAIN_H

#include "util.h"

enum { KF_BACKEND_CUDA = 0, KF_BACKEND_HIP = 1 };

typedef struct {
  int backend;
  char *compiler;        /* what is executed: an absolute path, or NULL if not found */
  char *prefix;          /* install prefix; files under it are covered by the identity */
  kf_strv identity;      /* "field=value" lines: version, host compiler, environment */
  char *error;           /* why the toolchain cannot be used, or NULL */
  char *short_name;      /* "CUDA 13.0" / "HIP 5.2.21153-0, clang 15.0.6", for messages */
  char *max_arch_note;   /* for HIP: which gfx targets this clang knows */
  kf_strv arch_cache;    /* "arch=ok" / "arch=reason" */
  kf_strv pass_cache;    /* "args-hash\n<flags>" cached device-pass flag lists */
  char *host_cc;         /* the host compiler the device pass runs (nvcc) */
  kf_strv predefs_cache; /* "flags-hash\n<#defines>" */
  char *readelf;         /* HIP: the llvm-readelf that reads code-object notes, or NULL */
  int plain_clang;       /* HIP: a clang driver, not hipcc: builds with -nogpulib */
} kf_toolchain;

/* The toolchain for a backend, probed once per process (never NULL; check
 * ->error). Honours KFORGE_NVCC / KFORGE_HIPCC, else PATH, else the default
 * install (/usr/local/cuda/bin/nvcc, /usr/bin/hipcc). */
kf_toolchain *kf_toolchain_get(int backend);

/* The toolchain that builds arch: nvcc for an sm_* arch; for a gfx arch the
 * first HIP compiler that can target it, of hipcc (KFORGE_HIPCC, PATH,
 * /opt/rocm/bin) and, unless KFORGE_HIPCC is set, the newest clang-N (17 or
 * later) on PATH. Never NULL: when none can, the first one. When why is not
 * NULL, *why is NULL if it can build arch, else one line naming every
 * compiler tried and its reason (owned by the module). */
kf_toolchain *kf_toolchain_for_arch(const char *arch, const char **why);

/* Returns NULL when the toolchain can build for arch, else a one-line reason
 * (owned by the toolchain) such as "hipcc (clang 15) cannot target gfx950". */
const char *kf_toolchain_check_arch(kf_toolchain *tc, const char *arch);

/* Compile arguments for one source, output and input excluded: flags, target
 * and the -I directories in search order. */
void kf_toolchain_compile_args(const kf_toolchain *tc, const char *arch,
                               const kf_strv *include_dirs, kf_strv *out);

/* Flags that make libclang preprocess like the compiler's device pass for
 * these compile args (defines, include paths, forced includes). Returns 0, or
 * -1 with *err set (caller frees). The result is cached per args. */
int kf_toolchain_device_flags(kf_toolchain *tc, const char *arch, const kf_strv *compile_args,
                              kf_strv *flags, char **err);

/* The host compiler's predefined macros for the device pass's flags (nvcc's
 * device pass is the host compiler's preprocessor, so libclang must see
 * gcc's macros, not its own). Returns the text of a header of #defines
 * (caller frees), or NULL for HIP (its clang is the parser's own kind) or
 * when the host compiler cannot tell (*err set, caller frees). Cached. */
char *kf_toolchain_host_predefs(kf_toolchain *tc, const kf_strv *device_flags, char **err);

/* The predefined macros of a HIP compiler's device pass for arch, with the
 * standard and optimisation flags of device_flags, and no forced includes:
 * for a parser that cannot target arch itself (libclang older than the
 * compiler). Returns the text of a header of #defines (caller frees), or
 * NULL with *err set (caller frees). Cached. */
char *kf_toolchain_hip_predefs(kf_toolchain *tc, const char *arch, const kf_strv *device_flags,
                               char **err);

/* Directories whose headers the identity covers (toolchain and system). */
int kf_toolchain_covers(const kf_toolchain *tc, const char *abs_path);

#endif /* KF_TOOLCHAIN_H */
