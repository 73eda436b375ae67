/* model.h: layer descriptions (models/<name>.json), family presets
 * (models/families/<family>.json) and template schemas
 * (templates/<template>.json), loaded and validated before anything is
 * written. Formats: docs/contracts.md. */
#ifndef KF_MODEL_H
#define KF_MODEL_H

#include "expr.h"
#include "util.h"

typedef struct {
  char *name;
  int is_float;
  int has_min, has_max;
  double min, max;
  int64_t multiple_of; /* 0: none */
  int64_t *one_of;     /* n_one_of values, or NULL */
  size_t n_one_of;
} kf_param_spec;

typedef struct {
  char *name;
  char *type; /* C spelling from the closed set in contracts.md */
  int size;   /* bytes */
} kf_arg_spec;

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
  char *cluster[3];        /* launch.cluster: blocks per thread-block cluster ("1" when absent) */
  int programmatic;        /* launch.programmatic: written for programmatic dependent launch */
  char *max_blocks_per_sm; /* launch.max_blocks_per_sm ("0" when absent: no cap) */
  int one_wave;            /* launch.one_wave: at most ceil(blocks / SMs) blocks per SM */
} kf_template;

typedef struct {
  char *kind;
  kf_template *tmpl;
  kf_value *values;  /* one per tmpl->params, in schema order */
  char *source_file; /* description or family file that defined it */
} kf_kernel_desc;

typedef struct {
  char *name;
  int is_string;
  kf_value value;
  char *str;
} kf_shape_field;

typedef struct {
  char *path; /* as given on the command line */
  char *dir;  /* absolute directory of the description */
  char *name;
  char *family; /* NULL when none */
  kf_shape_field *shape;
  size_t nshape;
  int widths[64];
  size_t nwidths;
  kf_strv arches;
  kf_kernel_desc *kernels; /* sorted by kind */
  size_t nkernels;
  kf_strv include_dirs;           /* absolute, in order */
  kf_strv template_dirs;          /* absolute, searched before the built-in ones */
  struct kf_template **templates; /* schemas the kernels point into (owned) */
  size_t ntemplates;
} kf_model;

/* Where templates and families come from, and command-line overrides. */
typedef struct {
  const char *templates_dir; /* built-in templates/ */
  const char *families_dir;  /* built-in models/families/ */
  kf_strv extra_template_dirs;
  kf_strv extra_include_dirs;
  kf_strv arches; /* replaces each description's arches when non-empty */
} kf_model_options;

/* Loads and validates a description. Returns the model (free with
 * kf_model_free) or NULL after reporting every problem found on stderr. */
kf_model *kf_model_load(const char *path, const kf_model_options *opt);
void kf_model_free(kf_model *m);

/* Evaluates a template's launch expression for one kernel and width, with
 * W the width and MMA the given mma (kf_arch_has_mma of the arch). */
int kf_template_eval(const kf_kernel_desc *k, int width, int mma, const char *expr, int64_t *out,
                     char *err, size_t errlen);

#endif /* KF_MODEL_H */
