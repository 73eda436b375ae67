/* plan.h: the instances of a build — one per (model, kernel kind, width,
 * arch) — and the generated source of each (see docs/contracts.md). */
#ifndef KF_PLAN_H
#define KF_PLAN_H

#include "arch.h"
#include "model.h"

typedef struct {
  const kf_model *model;
  const kf_kernel_desc *kernel; /* the model's, or a copy a tuning entry changed */
  int tuned;                    /* kernel is such a copy (kf_plan.tuning) */
  int width;
  const char *arch;
  char *id;         /* <model>/<kind>/w<W>/<arch>; w<W>p<P> for a kernel of page size P of
                       a description that lists page_sizes */
  char *symbol;     /* extern "C" entry symbol, unique per id */
  char *rel_source; /* <model>/<arch>/<kind>_w<W>[p<P>].cu|.hip, relative to --out */
  char *source;     /* generated text */
  size_t source_len;
  int64_t grid[3], block[3], shared_bytes;
  int programmatic;   /* the template's launch.programmatic, on arches that have it (sm_90+) */
  int64_t cluster[3]; /* the template's launch.cluster; {1, 1, 1} on arches without clusters */
  int64_t max_blocks_per_sm; /* the template's launch.max_blocks_per_sm on NVIDIA arches, else 0 */
  int one_wave;              /* the template's launch.one_wave on NVIDIA arches, else 0 */
  int cooperative;           /* the template's launch.cooperative */
  int persistent;            /* a layer kernel: the runtime sizes grid[0] (a cap) to the device */
  int64_t *buffer_bytes;     /* one per kernel->tmpl->buffers, for this width */
  kf_limits limits;          /* template, then description, then kernel entry (resources.h) */
} kf_instance;

struct kf_tuning;

typedef struct {
  kf_instance *v;
  size_t n;
  /* Tuning entries (tuning.h) the instances take their tuning parameters
   * from, or NULL; an instance an entry matches (a layer kind: one of its
   * phases) points to a copy of its kernel with the entry's values, owned
   * here. */
  const struct kf_tuning *tuning;
  kf_kernel_desc **tuned;
  size_t ntuned;
} kf_plan;

/* Appends every instance of m to plan (sorted by id within the model). */
void kf_plan_add_model(kf_plan *plan, const kf_model *m);
/* Sorts all instances by id (across models). */
void kf_plan_sort(kf_plan *plan);
void kf_plan_free(kf_plan *plan);
/* The instance with this id, or NULL. */
kf_instance *kf_plan_find(const kf_plan *plan, const char *id);

#endif /* KF_PLAN_H */
