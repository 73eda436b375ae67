/* tuning.c: reading tuning files and matching their entries to kernels (see
 * tuning.h). */
#define _GNU_SOURCE
#include "tuning.h"
#include "arch.h"
#include "json.h"
#include "report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void entry_free(kf_tuning_entry *e) {
  free(e->file);
  free(e->path);
  free(e->device);
  free(e->tmpl);
  free(e->arch);
  for (size_t i = 0; i < e->nshape; i++)
    free(e->shape_names[i]);
  free(e->shape_names);
  free(e->shape_values);
  for (size_t i = 0; i < e->nparams; i++)
    free(e->param_names[i]);
  free(e->param_names);
  free(e->param_values);
}

void kf_tuning_free(kf_tuning *t) {
  for (size_t i = 0; i < t->n; i++)
    entry_free(&t->v[i]);
  free(t->v);
  t->v = NULL;
  t->n = 0;
}

static int is_whole(const cJSON *v) {
  return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble) &&
         fabs(v->valuedouble) < 9007199254740992.0;
}

/* "shape": {NAME: number}; "params": {NAME: integer}. */
static int parse_shape(const char *file, const char *path, const cJSON *o, kf_tuning_entry *e) {
  if (!cJSON_IsObject(o)) {
    kf_error(file, path, "must be an object of the template's other parameters, got %s",
             kf_json_type_name(o));
    return 1;
  }
  int errors = kf_json_check_unique(file, path, o);
  for (const cJSON *v = o->child; v; v = v->next) {
    if (!cJSON_IsNumber(v)) {
      char *p = kf_xasprintf("%s.%s", path, v->string);
      kf_error(file, p, "must be a number, got %s", kf_json_type_name(v));
      free(p);
      errors++;
      continue;
    }
    e->shape_names = kf_xpush(e->shape_names, e->nshape, sizeof *e->shape_names);
    e->shape_values = kf_xpush(e->shape_values, e->nshape, sizeof *e->shape_values);
    e->shape_names[e->nshape] = kf_xstrdup(v->string);
    e->shape_values[e->nshape++] =
        is_whole(v) ? (kf_value){0, (int64_t)v->valuedouble, 0} : (kf_value){1, 0, v->valuedouble};
  }
  return errors;
}

static int parse_params(const char *file, const char *path, const cJSON *o, kf_tuning_entry *e) {
  if (!cJSON_IsObject(o) || !o->child) {
    kf_error(file, path, "must be a non-empty object of tuning parameters, got %s",
             cJSON_IsObject(o) ? "{}" : kf_json_type_name(o));
    return 1;
  }
  int errors = kf_json_check_unique(file, path, o);
  for (const cJSON *v = o->child; v; v = v->next) {
    if (!is_whole(v)) {
      char *p = kf_xasprintf("%s.%s", path, v->string);
      kf_error(file, p, "must be an integer, got %s", kf_json_type_name(v));
      free(p);
      errors++;
      continue;
    }
    e->param_names = kf_xpush(e->param_names, e->nparams, sizeof *e->param_names);
    e->param_values = kf_xpush(e->param_values, e->nparams, sizeof *e->param_values);
    e->param_names[e->nparams] = kf_xstrdup(v->string);
    e->param_values[e->nparams++] = (int64_t)v->valuedouble;
  }
  return errors;
}

static int same_value(kf_value a, kf_value b) {
  return a.is_float || b.is_float ? kf_value_as_double(a) == kf_value_as_double(b) : a.i == b.i;
}

/* Whether two entries are for the same kernels: template, arch, width, shape. */
static int same_place(const kf_tuning_entry *a, const kf_tuning_entry *b) {
  if (strcmp(a->tmpl, b->tmpl) || strcmp(a->arch, b->arch) || a->width != b->width ||
      a->nshape != b->nshape)
    return 0;
  for (size_t i = 0; i < a->nshape; i++) {
    size_t j = 0;
    while (j < b->nshape && strcmp(a->shape_names[i], b->shape_names[j]))
      j++;
    if (j == b->nshape || !same_value(a->shape_values[i], b->shape_values[j]))
      return 0;
  }
  return 1;
}

static int parse_entry(const char *file, const char *path, const cJSON *o, const char *device,
                       kf_tuning_entry *e) {
  static const char *const members[] = {"template", "arch",     "W",           "shape",
                                        "params",   "measured", "description", NULL};
  e->file = kf_xstrdup(file);
  e->path = kf_xstrdup(path);
  e->device = kf_xstrdup(device);
  if (!cJSON_IsObject(o)) {
    kf_error(file, path, "must be an object, got %s", kf_json_type_name(o));
    return 1;
  }
  int errors = kf_json_check_members(file, path, o, members);
  const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(o, "template");
  const cJSON *arch = cJSON_GetObjectItemCaseSensitive(o, "arch");
  const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "W");
  char *p;
  if (!cJSON_IsString(tmpl) || !*tmpl->valuestring) {
    p = kf_xasprintf("%s.template", path);
    kf_error(file, p, "must be a template name");
    free(p);
    errors++;
  } else
    e->tmpl = kf_xstrdup(tmpl->valuestring);
  char why[1024];
  if (!cJSON_IsString(arch) || kf_arch_check(arch->valuestring, why, sizeof why) != 0) {
    p = kf_xasprintf("%s.arch", path);
    kf_error(file, p, "%s", cJSON_IsString(arch) ? why : "must be an arch name");
    free(p);
    errors++;
  } else
    e->arch = kf_xstrdup(arch->valuestring);
  if (!is_whole(w) || w->valuedouble < 1 || w->valuedouble > KF_MAX_WIDTH) {
    p = kf_xasprintf("%s.W", path);
    kf_error(file, p, "must be a width from 1 to %d", KF_MAX_WIDTH);
    free(p);
    errors++;
  } else
    e->width = (int)w->valuedouble;
  p = kf_xasprintf("%s.shape", path);
  errors += parse_shape(file, p, cJSON_GetObjectItemCaseSensitive(o, "shape"), e);
  free(p);
  p = kf_xasprintf("%s.params", path);
  errors += parse_params(file, p, cJSON_GetObjectItemCaseSensitive(o, "params"), e);
  free(p);
  const cJSON *measured = cJSON_GetObjectItemCaseSensitive(o, "measured");
  if (measured && !cJSON_IsObject(measured)) {
    p = kf_xasprintf("%s.measured", path);
    kf_error(file, p, "must be an object, got %s", kf_json_type_name(measured));
    free(p);
    errors++;
  }
  return errors;
}

int kf_tuning_load(kf_tuning *t, const char *path) {
  static const char *const members[] = {"kforge_tuning", "device", "entries", "description", NULL};
  cJSON *root = kf_json_load(path, path);
  if (!root)
    return 1;
  int errors = 0;
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "kforge_tuning");
  const cJSON *device = cJSON_GetObjectItemCaseSensitive(root, "device");
  const cJSON *entries = cJSON_GetObjectItemCaseSensitive(root, "entries");
  if (!cJSON_IsObject(root)) {
    kf_error(path, NULL, "a tuning file is a JSON object, got %s", kf_json_type_name(root));
    cJSON_Delete(root);
    return 1;
  }
  errors += kf_json_check_members(path, "", root, members);
  if (!cJSON_IsNumber(fmt) || fmt->valuedouble != 1) {
    kf_error(path, "kforge_tuning", "must be 1 (the format this kforge reads)");
    errors++;
  }
  if (!cJSON_IsString(device) || !*device->valuestring) {
    kf_error(path, "device", "must name the device the choices were measured on");
    errors++;
  }
  if (!cJSON_IsArray(entries)) {
    kf_error(path, "entries", "must be an array, got %s", kf_json_type_name(entries));
    errors++;
  }
  if (errors) {
    cJSON_Delete(root);
    return errors;
  }
  size_t first = t->n, i = 0;
  for (const cJSON *o = entries->child; o; o = o->next, i++) {
    char *p = kf_xasprintf("entries[%zu]", i);
    kf_tuning_entry e = {0};
    int bad = parse_entry(path, p, o, device->valuestring, &e);
    errors += bad;
    for (size_t j = 0; !bad && j < t->n; j++)
      if (same_place(&e, &t->v[j])) {
        if (j >= first)
          kf_error(path, p, "repeats %s: one entry per template, arch, W and shape", t->v[j].path);
        else
          kf_error(path, p, "%s of %s (%s) is for the same kernels: give one device's tuning",
                   t->v[j].path, t->v[j].file, t->v[j].device);
        errors++;
        bad = 1;
      }
    free(p);
    if (bad) {
      entry_free(&e);
      continue;
    }
    t->v = kf_xpush(t->v, t->n, sizeof *t->v);
    t->v[t->n++] = e;
  }
  cJSON_Delete(root);
  return errors;
}

static const kf_param_spec *param_of(const kf_template *tp, const char *name) {
  for (size_t i = 0; i < tp->nparams; i++)
    if (!strcmp(tp->params[i].name, name))
      return &tp->params[i];
  return NULL;
}

/* Checks one entry against the schema of its template. */
static int check_entry(const kf_tuning_entry *e, const kf_template *tp) {
  int errors = 0;
  char *p;
  for (size_t i = 0; i < e->nshape; i++) {
    const kf_param_spec *ps = param_of(tp, e->shape_names[i]);
    if (!ps || ps->tuning) {
      p = kf_xasprintf("%s.shape.%s", e->path, e->shape_names[i]);
      kf_error(e->file, p, "%s (%s)",
               ps ? "is a tuning parameter: it belongs in params"
                  : "is not a parameter of the template",
               tp->path);
      free(p);
      errors++;
    }
  }
  for (size_t i = 0; i < tp->nparams; i++) {
    size_t j = 0;
    while (j < e->nshape && strcmp(e->shape_names[j], tp->params[i].name))
      j++;
    if (!tp->params[i].tuning && j == e->nshape) {
      p = kf_xasprintf("%s.shape", e->path);
      kf_error(e->file, p,
               "lacks %s: the shape names every parameter of %s that is not a tuning "
               "parameter (%s)",
               tp->params[i].name, tp->name, tp->path);
      free(p);
      errors++;
    }
  }
  for (size_t i = 0; i < e->nparams; i++) {
    const kf_param_spec *ps = param_of(tp, e->param_names[i]);
    p = kf_xasprintf("%s.params.%s", e->path, e->param_names[i]);
    if (!ps || !ps->tuning) {
      kf_error(e->file, p, "%s (%s)",
               ps ? "is not a tuning parameter (its schema has no \"tuning\")"
                  : "is not a parameter of the template",
               tp->path);
      errors++;
    } else {
      size_t j = 0;
      while (j < ps->n_tuning && ps->tuning[j] != e->param_values[i])
        j++;
      if (j == ps->n_tuning) {
        kf_buf list = {0};
        for (j = 0; j < ps->n_tuning; j++)
          kf_buf_printf(&list, "%s%lld", j ? ", " : "", (long long)ps->tuning[j]);
        kf_error(e->file, p, "must be one of its tuning candidates %s, got %lld (%s)", list.data,
                 (long long)e->param_values[i], tp->path);
        free(list.data);
        errors++;
      }
    }
    free(p);
  }
  return errors;
}

int kf_tuning_check(const kf_tuning *t, kf_model *const *models, size_t nmodels) {
  int errors = 0;
  for (size_t i = 0; i < t->n; i++) {
    const kf_template *tp = NULL;
    for (size_t m = 0; !tp && m < nmodels; m++)
      for (size_t k = 0; !tp && k < models[m]->nkernels; k++)
        if (!models[m]->kernels[k].nphases &&
            !strcmp(models[m]->kernels[k].tmpl->name, t->v[i].tmpl))
          tp = models[m]->kernels[k].tmpl;
    if (tp)
      errors += check_entry(&t->v[i], tp);
  }
  return errors;
}

kf_tuning_entry *kf_tuning_find(const kf_tuning *t, const kf_kernel_desc *k, int width,
                                const char *arch) {
  if (!t || k->nphases)
    return NULL;
  const kf_template *tp = k->tmpl;
  for (size_t i = 0; i < t->n; i++) {
    kf_tuning_entry *e = &t->v[i];
    if (strcmp(e->tmpl, tp->name) || strcmp(e->arch, arch) || e->width != width)
      continue;
    int match = 1;
    for (size_t j = 0; match && j < e->nshape; j++) {
      size_t p = 0;
      while (p < tp->nparams && strcmp(tp->params[p].name, e->shape_names[j]))
        p++;
      match = p < tp->nparams && same_value(e->shape_values[j], k->values[p]);
    }
    if (match)
      return e;
  }
  return NULL;
}
