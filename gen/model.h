/* model.h: layer descriptions (models/<name>.json) and family presets
 * (models/families/<family>.json), loaded and validated, with the template
 * schemas their kernels name (schema.h), before anything is written.
 * Formats: docs/contracts.md. */
#ifndef KF_MODEL_H
#define KF_MODEL_H

#include "expr.h"
#include "schema.h"
#include "util.h"

typedef struct {
  char *name;
  int is_string;
  kf_value value;
  char *str;
} kf_shape_field;

/* One entry of a family's "layer_types": `count` consecutive layers (after
 * those of the entries before) that run `kinds`, in that order. */
typedef struct {
  char *name;
  int64_t count;
  kf_strv kinds;
} kf_layer_type;

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
  kf_kernel_desc *kernels; /* sorted by kind, then page size; layer kinds last */
  size_t nkernels;
  kf_strv include_dirs;           /* absolute, in order */
  kf_strv template_dirs;          /* absolute, searched before the built-in ones */
  struct kf_template **templates; /* schemas the kernels point into (owned) */
  size_t ntemplates;
  kf_limits_spec limits;      /* the description's "limits" (resources.h) */
  kf_layer_type *layer_types; /* the family's "layer_types" (none: every layer alike) */
  size_t nlayer_types;
  /* The description's "page_sizes": the KV-cache page sizes it serves, the
   * shape's page_size (the default) first; none: only the shape's. A kind
   * whose parameters read page_size has a kernel per size (its ids say
   * p<P>); the others are built once. */
  int page_sizes[16];
  size_t npage_sizes;
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

#endif /* KF_MODEL_H */
