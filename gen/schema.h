/* schema.h: template schemas (templates/<template>.json): what a template
 * takes (parameters with their ranges, kernel arguments) and how it launches
 * (grid, block, shared memory, clusters as expressions over the parameters,
 * the width W and MMA). Loaded and checked before anything is written.
 * Format: docs/contracts.md. */
#ifndef KF_SCHEMA_H
#define KF_SCHEMA_H

#include "expr.h"
#include "resources.h"
#include "util.h"

typedef struct {
  char *name;
  int is_float;
  int has_min, has_max;
  double min, max;
  int64_t multiple_of; /* 0: none */
  int64_t *one_of;     /* n_one_of values, or NULL */
  size_t n_one_of;
  int64_t *tuning; /* "tuning": the candidates `kforge tune` times (a tuning knob), or NULL */
  size_t n_tuning;
} kf_param_spec;

typedef struct {
  char *name;
  char *type; /* C spelling from the closed set in contracts.md */
  int size;   /* bytes */
} kf_arg_spec;

/* A buffer the kernel needs besides its operands (launch workspace,
 * semaphores, a persistent kernel's counters): the pointer argument it is
 * passed as, its size as an expression over the parameters and W, and
 * whether the caller zeroes it once when it allocates it (every launch then
 * leaves it as the next one needs it) or may give it with any contents. */
typedef struct {
  char *arg;   /* a non-const pointer argument of the template */
  char *bytes; /* expression over params and W */
  int zero_once;
} kf_buffer_spec;
/* The widest step any description may ask for, and the most arguments a
 * kernel may take. */
#define KF_MAX_WIDTH 256
#define KF_MAX_ARGS 64

typedef struct kf_template {
  char *name;
  char *dir;    /* absolute directory holding the schema and header */
  char *path;   /* schema path as shown in messages */
  char *header; /* file name included by the generated source */
  char *entry;  /* device function template called as entry<P>(args...) */
  kf_param_spec *params;
  size_t nparams;
  kf_arg_spec *args;
  size_t nargs;
  char *grid[3], *block[3], *shared_bytes; /* expressions over params and W */
  char *cluster[3];         /* launch.cluster: blocks per thread-block cluster ("1" when absent) */
  int programmatic;         /* launch.programmatic: written for programmatic dependent launch */
  char *max_blocks_per_sm;  /* launch.max_blocks_per_sm ("0" when absent: no cap) */
  int one_wave;             /* launch.one_wave: at most ceil(blocks / SMs) blocks per SM */
  int cooperative;          /* launch.cooperative: every block resident at once (the runtime
                               checks occupancy at load and launches cooperatively) */
  char *layer_shared_bytes; /* launch.layer_shared_bytes: the dynamic shared memory one of its
                               blocks needs as a phase of a layer kernel (kf_layer.cuh); NULL
                               when absent: the template cannot be a phase */
  int layer_pack;           /* launch.layer_pack: as a phase of a layer kernel, as many of its
                               blocks as fit run side by side in one of the layer's blocks */
  char *layer_grid[3];      /* launch.layer_grid: the grid of its work items as a phase of a
                               layer kernel; NULL when absent: launch.grid */
  kf_buffer_spec *buffers;  /* "buffers", in schema order */
  size_t nbuffers;
  int max_width;         /* widths served: 1..max_width (KF_MAX_WIDTH when not given) */
  kf_limits_spec limits; /* "limits": resource limits of its kernels (resources.h) */
} kf_template;

/* One kernel of a description: a template and the values of its parameters. */
typedef struct kf_kernel_desc_s {
  char *kind;
  kf_template *tmpl;
  kf_value *values;      /* one per tmpl->params, in schema order */
  char *source_file;     /* description or family file that defined it */
  kf_limits_spec limits; /* the entry's "limits" (resources.h) */
  /* A layer kind (the family's "layer"): the kinds it runs as phases, in
   * order; tmpl is then a schema made for it (model.c) */
  const struct kf_kernel_desc_s **phases;
  size_t nphases;
  /* The KV-cache page size the kernel was specialised for: the shape's
   * page_size where a parameter's expression reads it (a layer kind: where a
   * phase's does), else 0 (the kernel serves any page size). */
  int page_size;
} kf_kernel_desc;

/* Loads <name>.json from the first directory of dirs that holds one and
 * checks it. where_file and where_path name the place that asked for the
 * template; "not found" is reported there. Returns the template (free with
 * kf_template_free) or NULL after reporting every problem on stderr, with
 * their number added to *errors. */
kf_template *kf_template_load(const kf_strv *dirs, const char *name, const char *where_file,
                              const char *where_path, int *errors);
void kf_template_free(kf_template *t);

/* Evaluates a template's launch expression for one kernel and width, with
 * W the width and MMA the given mma (kf_arch_has_mma of the arch). Returns 0
 * with the value in *out, or -1 with the reason in err. */
int kf_template_eval(const kf_kernel_desc *k, int width, int mma, const char *expr, int64_t *out,
                     char *err, size_t errlen);

/* Checks one launch's evaluated dims against what every backend launches:
 * grid x 1..2^31-1, y and z 1..65535; block x and y 1..1024, z 1..64, at
 * most 1024 threads in all; cluster dims at least 1 (model.c checks that
 * a cluster tiles the grid and holds at most 8 blocks). Returns -1 when they hold,
 * else the first at fault (0-2 grid, 3-5 block, 6 the block's total, 7-9
 * cluster) with the reason in err. */
int kf_launch_dims_problem(const int64_t grid[3], const int64_t block[3], const int64_t cluster[3],
                           char *err, size_t errlen);

#endif /* KF_SCHEMA_H */
