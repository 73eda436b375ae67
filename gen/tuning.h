/* tuning.h: tuning files (docs/contracts.md, "Tuning files"): the values of a
 * template's tuning parameters chosen for one shape (its other parameters),
 * width and arch, as `kforge tune` measured them on a device. A build given
 * `--tuning FILE` builds every kernel an entry matches with the entry's
 * values in place of the description's; the key covers them as it covers
 * every parameter. */
#ifndef KF_TUNING_H
#define KF_TUNING_H

#include "model.h"
#include "util.h"

typedef struct {
  char *file;   /* the tuning file, as given */
  char *path;   /* "entries[i]", for messages */
  char *device; /* the file's "device" */
  char *tmpl;   /* template name */
  char *arch;
  int width;
  char **shape_names; /* the template's other parameters, with their values */
  kf_value *shape_values;
  size_t nshape;
  char **param_names; /* tuning parameters, with the values chosen */
  int64_t *param_values;
  size_t nparams;
  int used; /* a kernel of this build took it */
} kf_tuning_entry;

typedef struct kf_tuning {
  kf_tuning_entry *v;
  size_t n;
} kf_tuning;

/* Reads a tuning file and appends its entries to t. Returns the number of
 * problems reported on stderr (0: read), file and JSON path in each; an
 * entry that repeats another's template, arch, width and shape (this file's
 * or an earlier one's) is a problem. */
int kf_tuning_load(kf_tuning *t, const char *path);
void kf_tuning_free(kf_tuning *t);

/* Checks the entries that name a template some kernel of the models uses
 * against its schema: the shape names exactly its parameters that are not
 * tuning knobs, and params only tuning knobs, each value one of the
 * parameter's "tuning" candidates. Returns the number of problems reported. */
int kf_tuning_check(const kf_tuning *t, kf_model *const *models, size_t nmodels);

/* The entry for kernel k (not a layer kind) at this width and arch, or NULL. */
kf_tuning_entry *kf_tuning_find(const kf_tuning *t, const kf_kernel_desc *k, int width,
                                const char *arch);

#endif /* KF_TUNING_H */
