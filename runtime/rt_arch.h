/* rt_arch.h: the one arch-name grammar (docs/contracts.md, "Arch names") and
 * the rules for which manifest arch a device runs. rt_arch.c is compiled into
 * both the runtime library and the generator, so that a name one accepts the
 * other reads the same way; it needs nothing but the C library. Everything
 * that asks what an arch is asks a parsed rt_arch, never the name's text. */
#ifndef KFORGE_RT_ARCH_H
#define KFORGE_RT_ARCH_H

#include <stddef.h>

#define RT_ARCH_MAX 64         /* a name's length bound: "gfx942:sramecc+:xnack-" fits easily */
#define RT_ARCH_MAX_FEATURES 8 /* target features one gfx name may set */

/* The backend a name belongs to; the values are the runtime's kf_backend. */
typedef enum rt_arch_kind { RT_ARCH_CUDA = 1, RT_ARCH_HIP = 2 } rt_arch_kind;

/* What the letter after sm_XY says about the devices the code runs on. */
typedef enum rt_arch_variant {
  RT_ARCH_PLAIN = 0,      /* sm_90: compute capability X.Y and later minors of X */
  RT_ARCH_SPECIFIC = 'a', /* sm_90a: X.Y only (arch-specific features, from 9.0) */
  RT_ARCH_FAMILY = 'f'    /* sm_100f: X.Y and later minors of X (family features, from 10.0) */
} rt_arch_variant;

/* A parsed arch name. */
typedef struct rt_arch {
  rt_arch_kind kind;
  int code;                /* CUDA: the compute capability as 10*major+minor (100 for sm_100f) */
  rt_arch_variant variant; /* CUDA only */
  char base[RT_ARCH_MAX];  /* the name up to its first ':' ("sm_90a", "gfx942") */
  int nfeatures;           /* HIP target features, in the order the name gives them */
  char feature[RT_ARCH_MAX_FEATURES][RT_ARCH_MAX]; /* "xnack" */
  char feature_on[RT_ARCH_MAX_FEATURES];           /* '+' or '-' */
} rt_arch;

/* Parses name into *out. Returns 0, or -1 when name is not in the grammar
 * (then *out is unspecified):
 *   sm_<XY>[a|f]  two or three digits, no leading zero; X the major and Y
 *                 the minor compute capability; 'a' from major 9, 'f' from 10
 *   gfx<p>[:<feature><+|->]...  p lowercase letters and digits; each
 *                 feature lowercase letters, named at most once */
int rt_arch_parse(const char *name, rt_arch *out);

static inline int rt_arch_major(const rt_arch *a) { return a->code / 10; }
static inline int rt_arch_minor(const rt_arch *a) { return a->code % 10; }

/* How well a manifest arch serves a device: 0 is the best match, larger is
 * worse, -1 means its objects can't run there (or the name is malformed).
 * CUDA, on compute capability major.minor: sm_XYa only on X.Y (rank 0, no
 * other name ranks 0); sm_XYf on X.Y and later minors of X, nearer first
 * (1..10); sm_XY the same, after every sm_XYf (11..20). HIP: the same gfx
 * processor, and every target feature the manifest names (xnack-) set the
 * same way on the device; more named features rank better. */
int rt_arch_cuda_rank(const char *arch, int major, int minor);
int rt_arch_hip_rank(const char *arch, const char *device_arch);

/* Lists into buf, best first, the arch names a device could run ("sm_90a,
 * sm_90"), truncated to size; for the reason when no manifest fits. */
void rt_arch_cuda_wanted(int major, int minor, char *buf, size_t size);
void rt_arch_hip_wanted(const char *device_arch, char *buf, size_t size);

#endif /* KFORGE_RT_ARCH_H */
