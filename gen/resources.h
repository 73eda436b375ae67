/* resources.h: resource limits on compiled kernels (registers, spills,
 * occupancy) and their check against the figures the compiler reports.
 *
 * A template schema, a description and a kernel entry may each carry a
 * "limits" object; for every kernel the most specific value of each limit
 * wins (kernel entry, then description, then template). Inside an object,
 * "cuda" and "hip" sub-objects hold limits for one backend and take
 * precedence over the object's own members there. A kernel over a limit
 * fails its build with the figure and the limit; its cache entry stays (it
 * is a correct object for its key), so raising the limit needs no compile.
 * Format: docs/contracts.md ("Resource limits"). */
#ifndef KF_RESOURCES_H
#define KF_RESOURCES_H

#include <stdint.h>

#include "cache.h"

struct cJSON;

enum {
  KF_LIMIT_MAX_REGISTERS,     /* NVIDIA registers per thread; AMD VGPRs + AGPRs */
  KF_LIMIT_SPILLS,            /* NVIDIA spill bytes; AMD spilled registers (0 without scratch) */
  KF_LIMIT_MIN_BLOCKS_PER_SM, /* NVIDIA only: resident blocks per SM */
  KF_LIMIT_MIN_WAVES_PER_EU,  /* AMD only: the compiler's waves per SIMD */
  KF_LIMIT_COUNT
};

extern const char *const kf_limit_names[KF_LIMIT_COUNT];

typedef struct {
  int64_t value[KF_LIMIT_COUNT];
  const char *from[KF_LIMIT_COUNT]; /* the file that set it (borrowed); NULL: not set, so a
                                       zeroed kf_limits sets nothing */
} kf_limits;

/* One level's "limits" object, per backend (0 cuda, 1 hip). */
typedef struct {
  kf_limits backend[2];
} kf_limits_spec;

void kf_limits_clear(kf_limits *l);
/* Parses obj (a "limits" member at path in file; NULL: absent) into out.
 * file must outlive out. Reports each problem and returns their number. */
int kf_limits_parse(const char *file, const char *path, const struct cJSON *obj,
                    kf_limits_spec *out);
/* Lays the limits that spec sets for backend over l. */
void kf_limits_apply(kf_limits *l, const kf_limits_spec *spec, int hip);

/* Resident blocks per SM of an NVIDIA arch for these resources, or -1 when
 * the arch's limits are not known here or a figure is missing. */
int64_t kf_blocks_per_sm(const char *arch, const kf_meta_resources *r, int threads,
                         int64_t dyn_shared);
/* The figure limit (a KF_LIMIT_*) is checked against for a kernel of arch
 * with these resources, or -1 when it was not reported; *applies is 0 for a
 * limit of the other backend. */
int64_t kf_limit_figure(int limit, const kf_meta_resources *r, const char *arch, int threads,
                        int64_t dyn_shared, int *applies);
/* Checks r against l. Returns NULL when every limit set holds, else what is
 * over (or which figure is missing), naming the figure, the limit and the
 * file that set it; caller frees. */
char *kf_limits_check(const kf_limits *l, const kf_meta_resources *r, const char *arch, int threads,
                      int64_t dyn_shared);

#endif /* KF_RESOURCES_H */
