/* model.c: loads a layer description, merges its family preset, loads the
 * template schema of every kernel and validates every parameter against it.
 * Every problem is reported (not only the first) so that one run shows the
 * user all that is wrong; the caller writes nothing when loading fails. */
#define _GNU_SOURCE
#include "model.h"
#include "report.h"

#include "arch.h"
#include "json.h"

#include <ctype.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ---- */

static int valid_name(const char *s, int allow_dot) {
  if (!*s || strlen(s) > 64 || !(islower((unsigned char)s[0]) || isdigit((unsigned char)s[0])))
    return 0;
  if (strstr(s, ".."))
    return 0;
  for (const char *p = s; *p; p++) {
    if (islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '_' || *p == '-')
      continue;
    if (allow_dot && *p == '.')
      continue;
    return 0;
  }
  return 1;
}

/* ---- loading context ---- */

typedef struct {
  const kf_model_options *opt;
  const char *display; /* description path as given */
  int errors;
  kf_template **templates; /* loaded schemas, shared by kernels */
  size_t ntemplates;
  const cJSON *shape; /* the description's "shape" object */
  size_t page_index;  /* > 0 while the kernels are parsed for m->page_sizes[page_index] */
} loader;

/* The schema of template `name`: loaded once per description from the
 * description's template_dirs, then --template-dir, then the built-in dir. */
static kf_template *find_template(loader *L, const kf_model *m, const char *name,
                                  const char *where_file, const char *where_path) {
  for (size_t i = 0; i < L->ntemplates; i++)
    if (strcmp(L->templates[i]->name, name) == 0)
      return L->templates[i];
  kf_strv dirs = {0};
  for (size_t i = 0; i < m->template_dirs.n; i++)
    kf_strv_push(&dirs, m->template_dirs.v[i]);
  for (size_t i = 0; i < L->opt->extra_template_dirs.n; i++)
    kf_strv_push_owned(&dirs, kf_path_absolute(L->opt->extra_template_dirs.v[i]));
  kf_strv_push_owned(&dirs, kf_path_absolute(L->opt->templates_dir));
  kf_template *t = kf_template_load(&dirs, name, where_file, where_path, &L->errors);
  kf_strv_free(&dirs);
  if (!t)
    return NULL;
  L->templates = kf_xpush(L->templates, L->ntemplates, sizeof *L->templates);
  L->templates[L->ntemplates++] = t;
  return t;
}

/* ---- shape lookup for expressions ---- */

/* A parameter value's place: where it is written, and, for a kernel of the
 * family, the first shape field of the description the expression read (a
 * problem there is the description's to fix, so it is reported there). */
typedef struct {
  const kf_model *m;
  const char *file;       /* the description or the family file */
  const char *path;       /* kernels[i].params.NAME */
  const cJSON *given;     /* the description's "shape" object, for family kernels */
  const char *first_read; /* first member of given the expression read */
  int64_t page_size;      /* the shape's page_size where the expression read it, else 0 */
} value_place;

static int shape_lookup(void *ctx, const char *name, kf_value *out) {
  value_place *vp = ctx;
  const kf_model *m = vp->m;
  if (vp->given && !vp->first_read) {
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(vp->given, name);
    if (g)
      vp->first_read = g->string;
  }
  for (size_t i = 0; i < m->nshape; i++) {
    if (strcmp(m->shape[i].name, name) == 0 && !m->shape[i].is_string) {
      *out = m->shape[i].value;
      if (strcmp(name, "page_size") == 0 && !out->is_float)
        vp->page_size = out->i;
      return 0;
    }
  }
  return -1;
}

/* Reports a problem of one parameter value. A value of a family's kernel is
 * reported in the description that chose the family, at the shape field its
 * expression read (else at "family"), with the family file's place in the
 * message. */
static void __attribute__((format(printf, 3, 4)))
value_error(loader *L, const value_place *vp, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  L->errors++;
  char page[96] = ""; /* a pass for another page size than the shape's: which */
  if (L->page_index)
    snprintf(page, sizeof page, " (for page size %d of page_sizes)",
             vp->m->page_sizes[L->page_index]);
  if (!vp->given) {
    kf_error(vp->file, vp->path, "%s%s", msg, page);
    return;
  }
  char *at = L->page_index && vp->page_size ? kf_xstrdup("page_sizes")
             : vp->first_read               ? kf_xasprintf("shape.%s", vp->first_read)
                                            : kf_xstrdup("family");
  kf_error(L->display, at, "%s: %s: %s (family %s)%s", vp->file, vp->path, msg, vp->m->family,
           page);
  free(at);
}

/* ---- kernels ---- */

static void check_value(loader *L, const value_place *vp, const kf_param_spec *ps, kf_value v,
                        const char *expr) {
  char got[64];
  kf_value_format(v, got, sizeof got);
  char from[256] = "";
  if (expr)
    snprintf(from, sizeof from, " (from \"%.200s\")", expr);
  if (!ps->is_float && v.is_float) {
    if (v.f != floor(v.f)) {
      value_error(L, vp, "must be an integer, got %s%s", got, from);
      return;
    }
  }
  double d = kf_value_as_double(v);
  /* the generated source declares int params as int and float as float */
  if (!ps->is_float && (d < -2147483648.0 || d > 2147483647.0)) {
    value_error(L, vp, "must fit in a 32-bit int, got %s%s", got, from);
    return;
  }
  if (ps->is_float && (d > FLT_MAX || d < -FLT_MAX)) {
    value_error(L, vp, "is beyond the range of a float, got %s%s", got, from);
    return;
  }
  if (ps->has_min && d < ps->min)
    value_error(L, vp, "must be at least %g, got %s%s", ps->min, got, from);
  if (ps->has_max && d > ps->max)
    value_error(L, vp, "must be at most %g, got %s%s", ps->max, got, from);
  if (!ps->is_float && ps->multiple_of > 0 && (int64_t)d % ps->multiple_of != 0)
    value_error(L, vp, "must be a multiple of %lld, got %s%s", (long long)ps->multiple_of, got,
                from);
  if (ps->n_one_of) {
    int ok = 0;
    kf_buf list = {0};
    for (size_t i = 0; i < ps->n_one_of; i++) {
      if ((double)ps->one_of[i] == d)
        ok = 1;
      kf_buf_printf(&list, "%s%lld", i ? ", " : "", (long long)ps->one_of[i]);
    }
    if (!ok)
      value_error(L, vp, "must be one of %s, got %s%s", list.data, got, from);
    kf_buf_free(&list);
  }
}

/* Reports every member of a kernel's params that its template does not
 * take. */
static void check_unknown_params(loader *L, const char *file, const char *path,
                                 const kf_kernel_desc *k, const cJSON *params) {
  for (const cJSON *e = params ? params->child : NULL; e; e = e->next) {
    int known = 0;
    for (size_t i = 0; i < k->tmpl->nparams; i++)
      if (strcmp(k->tmpl->params[i].name, e->string) == 0)
        known = 1;
    if (known)
      continue;
    char *p = kf_xasprintf("%s.params.%s", path, e->string);
    kf_buf list = {0};
    for (size_t i = 0; i < k->tmpl->nparams; i++)
      kf_buf_printf(&list, "%s%s", i ? ", " : "", k->tmpl->params[i].name);
    kf_error(file, p, "unknown parameter \"%s\" of template %s; it takes: %s", e->string,
             k->tmpl->name, list.data ? list.data : "none");
    kf_buf_free(&list);
    free(p);
    L->errors++;
  }
}

/* One parameter's value: a number, or an expression over the shape fields,
 * checked against its spec. *out is left alone when there is none. */
static void parse_param_value(loader *L, value_place *vp, const kf_param_spec *ps, const cJSON *v,
                              kf_value *out) {
  if (cJSON_IsNumber(v)) {
    kf_value val = {0, 0, 0};
    if (v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 9e15 && !ps->is_float)
      val.i = (int64_t)v->valuedouble;
    else {
      val.is_float = 1;
      val.f = v->valuedouble;
    }
    check_value(L, vp, ps, val, NULL);
    *out = val;
  } else if (cJSON_IsString(v)) {
    kf_value val;
    char err[256];
    if (kf_expr_eval(v->valuestring, shape_lookup, vp, &val, err, sizeof err) != 0) {
      value_error(L, vp, "%s", err);
    } else {
      check_value(L, vp, ps, val, v->valuestring);
      if (!ps->is_float && val.is_float)
        val = (kf_value){0, kf_i64_of_double(val.f), 0};
      *out = val;
    }
  } else {
    kf_error(vp->file, vp->path, "must be a number or an expression string, got %s",
             kf_json_type_name(v));
    L->errors++;
  }
}

/* Every parameter of the kernel's template, in schema order, into
 * k->values; a float parameter always holds a float. */
static void parse_kernel_params(loader *L, kf_model *m, const char *file, const char *path,
                                kf_kernel_desc *k, const cJSON *params) {
  k->values = kf_xcalloc(k->tmpl->nparams ? k->tmpl->nparams : 1, sizeof(kf_value));
  if (params) {
    char *pp = kf_xasprintf("%s.params", path);
    L->errors += kf_json_check_unique(file, pp, params);
    free(pp);
  }
  check_unknown_params(L, file, path, k, params);
  for (size_t i = 0; i < k->tmpl->nparams; i++) {
    const kf_param_spec *ps = &k->tmpl->params[i];
    const cJSON *v = params ? cJSON_GetObjectItemCaseSensitive(params, ps->name) : NULL;
    char *p = kf_xasprintf("%s.params.%s", path, ps->name);
    if (!v) {
      kf_error(file, p, "missing parameter %s of template %s", ps->name, k->tmpl->name);
      L->errors++;
    } else {
      value_place vp = {m, file, p, strcmp(file, L->display) ? L->shape : NULL, NULL, 0};
      parse_param_value(L, &vp, ps, v, &k->values[i]);
      if (vp.page_size > 0 && vp.page_size <= INT_MAX)
        k->page_size = (int)vp.page_size;
    }
    if (ps->is_float && !k->values[i].is_float)
      k->values[i] = (kf_value){1, 0, (double)k->values[i].i};
    free(p);
  }
}

/* A name member of a kernel entry (kind, template): returns its string, or
 * NULL after reporting what is wrong with it. */
static const char *kernel_name_member(loader *L, const char *file, const char *path,
                                      const cJSON *obj, const char *member, const char *want) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, member);
  if (cJSON_IsString(v) && valid_name(v->valuestring, 0))
    return v->valuestring;
  char *p = kf_xasprintf("%s.%s", path, member);
  kf_error(file, p, "%s, got %s", want, cJSON_IsString(v) ? v->valuestring : kf_json_type_name(v));
  free(p);
  L->errors++;
  return NULL;
}

/* Parses one kernel entry (from the description or its family) into k. */
static int parse_kernel(loader *L, kf_model *m, const char *file, const char *path,
                        const cJSON *obj, kf_kernel_desc *k) {
  static const char *const members[] = {"kind",        "template", "params",
                                        "description", "limits",   NULL};
  int before = L->errors;
  if (!cJSON_IsObject(obj)) {
    kf_error(file, path, "must be an object, got %s", kf_json_type_name(obj));
    L->errors++;
    return -1;
  }
  L->errors += kf_json_check_members(file, path, obj, members);
  const char *kind = kernel_name_member(
      L, file, path, obj, "kind", "must be a name of lower-case letters, digits, '_' and '-'");
  if (!kind)
    return -1;
  k->kind = kf_xstrdup(kind);
  k->source_file = kf_xstrdup(file);
  const char *tmpl =
      kernel_name_member(L, file, path, obj, "template", "must name a template in templates/");
  if (!tmpl)
    return -1;
  char *p = kf_xasprintf("%s.template", path);
  k->tmpl = find_template(L, m, tmpl, file, p);
  free(p);
  if (!k->tmpl)
    return -1;
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(obj, "params");
  if (params && !cJSON_IsObject(params)) {
    p = kf_xasprintf("%s.params", path);
    kf_error(file, p, "must be an object, got %s", kf_json_type_name(params));
    free(p);
    L->errors++;
    return -1;
  }
  parse_kernel_params(L, m, file, path, k, params);
  p = kf_xasprintf("%s.limits", path);
  L->errors += kf_limits_parse(k->source_file, p, cJSON_GetObjectItemCaseSensitive(obj, "limits"),
                               &k->limits);
  free(p);
  return L->errors == before ? 0 : -1;
}

static void kernel_free(kf_kernel_desc *k) {
  free(k->kind);
  free(k->values);
  free(k->source_file);
  free(k->phases);
}

/* ---- families ---- */

typedef struct {
  char *path;
  cJSON *root;
  const cJSON *fields;   /* shape_fields */
  const cJSON *optional; /* optional_fields */
} family;

static int load_family(loader *L, const kf_model *m, const char *name, family *f) {
  char *local = kf_xasprintf("%s/families/%s.json", m->dir, name);
  char *builtin = kf_xasprintf("%s/%s.json", L->opt->families_dir, name);
  char *path = kf_path_exists(local) ? local : kf_path_exists(builtin) ? builtin : NULL;
  if (!path) {
    kf_error(L->display, "family", "unknown family \"%s\" (no %s or %s)", name, local, builtin);
    free(local);
    free(builtin);
    L->errors++;
    return -1;
  }
  f->path = kf_xstrdup(path);
  free(local);
  free(builtin);
  f->root = kf_json_load(f->path, f->path);
  if (!f->root) {
    L->errors++;
    return -1;
  }
  static const char *const members[] = {"family",      "shape_fields", "optional_fields", "kernels",
                                        "description", "layers",       "layer_types",     NULL};
  int errors = 0;
  if (!cJSON_IsObject(f->root)) {
    kf_error(f->path, "", "a family preset must be a JSON object");
    L->errors++;
    return -1;
  }
  errors += kf_json_check_members(f->path, "", f->root, members);
  const cJSON *fam = cJSON_GetObjectItemCaseSensitive(f->root, "family");
  if (!cJSON_IsString(fam) || strcmp(fam->valuestring, name) != 0) {
    kf_error(f->path, "family", "must be \"%s\" (the file's name)", name);
    errors++;
  }
  f->fields = cJSON_GetObjectItemCaseSensitive(f->root, "shape_fields");
  f->optional = cJSON_GetObjectItemCaseSensitive(f->root, "optional_fields");
  if (f->fields && !cJSON_IsObject(f->fields)) {
    kf_error(f->path, "shape_fields", "must be an object of field: type");
    errors++;
  }
  if (f->optional && !cJSON_IsObject(f->optional)) {
    kf_error(f->path, "optional_fields", "must be an object");
    errors++;
  }
  L->errors += errors;
  return errors ? -1 : 0;
}

/* The declared type of a shape field in a family: "int", "float", "string"
 * or "bool"; the default of an optional one through *def (may be NULL). */
static const char *family_field_type(const family *f, const char *name, const cJSON **def,
                                     int *optional) {
  const cJSON *t = f->fields ? cJSON_GetObjectItemCaseSensitive(f->fields, name) : NULL;
  *def = NULL;
  *optional = 0;
  if (t)
    return cJSON_IsString(t) ? t->valuestring : "?";
  t = f->optional ? cJSON_GetObjectItemCaseSensitive(f->optional, name) : NULL;
  if (!t)
    return NULL;
  *optional = 1;
  if (cJSON_IsString(t))
    return t->valuestring;
  if (cJSON_IsObject(t)) {
    *def = cJSON_GetObjectItemCaseSensitive(t, "default");
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(t, "type");
    return cJSON_IsString(ty) ? ty->valuestring : "?";
  }
  return "?";
}

static void add_shape(kf_model *m, const char *name, const cJSON *v) {
  m->shape = kf_xpush(m->shape, m->nshape, sizeof *m->shape);
  kf_shape_field *s = &m->shape[m->nshape++];
  memset(s, 0, sizeof *s);
  s->name = kf_xstrdup(name);
  if (cJSON_IsString(v)) {
    s->is_string = 1;
    s->str = kf_xstrdup(v->valuestring);
  } else if (cJSON_IsBool(v)) {
    s->value.i = cJSON_IsTrue(v);
  } else if (v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 9e15) {
    s->value.i = (int64_t)v->valuedouble;
  } else {
    s->value.is_float = 1;
    s->value.f = v->valuedouble;
  }
}

static const kf_shape_field *shape_field(const kf_model *m, const char *name) {
  for (size_t i = 0; i < m->nshape; i++)
    if (!strcmp(m->shape[i].name, name))
      return &m->shape[i];
  return NULL;
}

static int type_matches(const char *type, const cJSON *v) {
  if (!strcmp(type, "int"))
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
  if (!strcmp(type, "float"))
    return cJSON_IsNumber(v);
  if (!strcmp(type, "string"))
    return cJSON_IsString(v);
  if (!strcmp(type, "bool"))
    return cJSON_IsBool(v);
  return 0;
}

static const char *type_phrase(const char *type) {
  if (!strcmp(type, "int"))
    return "an integer";
  if (!strcmp(type, "float"))
    return "a number";
  if (!strcmp(type, "string"))
    return "a string";
  if (!strcmp(type, "bool"))
    return "true or false";
  return type;
}

/* A shape field the family does not declare, with the closest declared name
 * when one is near. */
static void report_unknown_field(loader *L, const kf_model *m, const family *f, const char *path,
                                 const char *name) {
  const char *best = NULL;
  size_t best_d = (size_t)-1;
  const cJSON *lists[2] = {f->fields, f->optional};
  for (int li = 0; li < 2; li++)
    for (const cJSON *c = lists[li] ? lists[li]->child : NULL; c; c = c->next) {
      size_t d = kf_edit_distance(c->string, name);
      if (d < best_d) {
        best_d = d;
        best = c->string;
      }
    }
  if (best && best_d <= 3)
    kf_error(L->display, path, "unknown field \"%s\" for family %s (did you mean \"%s\"?)", name,
             m->family, best);
  else
    kf_error(L->display, path, "unknown field \"%s\" for family %s", name, m->family);
  L->errors++;
}

/* One member e of "shape": typed by the family when there is one, else any
 * number, string or boolean. */
static void parse_shape_field(loader *L, kf_model *m, const cJSON *e, int dup, const family *f) {
  char *p = kf_xasprintf("shape.%s", e->string);
  if (dup) {
    kf_error(L->display, p, "duplicate member \"%s\"", e->string);
    L->errors++;
  }
  if (!valid_name(e->string, 0) || strchr(e->string, '-')) {
    kf_error(L->display, p, "field names are lower-case identifiers");
    L->errors++;
  } else if (f && f->root) {
    const cJSON *def;
    int optional;
    const char *type = family_field_type(f, e->string, &def, &optional);
    if (!type) {
      report_unknown_field(L, m, f, p, e->string);
    } else if (!type_matches(type, e)) {
      kf_error(L->display, p, "must be %s, got %s", type_phrase(type), kf_json_type_name(e));
      L->errors++;
    } else {
      add_shape(m, e->string, e);
    }
  } else if (!cJSON_IsNumber(e) && !cJSON_IsString(e) && !cJSON_IsBool(e)) {
    kf_error(L->display, p, "must be a number, a string or a boolean, got %s",
             kf_json_type_name(e));
    L->errors++;
  } else {
    add_shape(m, e->string, e);
  }
  free(p);
}

/* The family's required fields the shape leaves out are errors; its
 * optional ones take their defaults. */
static void apply_family_fields(loader *L, kf_model *m, const cJSON *shape, const family *f) {
  for (const cJSON *c = f->fields ? f->fields->child : NULL; c; c = c->next)
    if (!cJSON_GetObjectItemCaseSensitive(shape, c->string)) {
      char *p = kf_xasprintf("shape.%s", c->string);
      kf_error(L->display, p, "missing field required by family %s (%s)", m->family,
               cJSON_IsString(c) ? type_phrase(c->valuestring) : "?");
      free(p);
      L->errors++;
    }
  for (const cJSON *c = f->optional ? f->optional->child : NULL; c; c = c->next) {
    if (cJSON_GetObjectItemCaseSensitive(shape, c->string))
      continue;
    const cJSON *def;
    int optional;
    family_field_type(f, c->string, &def, &optional);
    if (def)
      add_shape(m, c->string, def);
  }
}

static void parse_shape(loader *L, kf_model *m, const cJSON *shape, const family *f) {
  if (!cJSON_IsObject(shape)) {
    kf_error(L->display, "shape", "must be an object of shape fields, got %s",
             kf_json_type_name(shape));
    L->errors++;
    return;
  }
  size_t ndup, i = 0;
  unsigned char *dup = kf_json_duplicates(shape, &ndup);
  for (const cJSON *e = shape->child; e; e = e->next, i++)
    parse_shape_field(L, m, e, dup[i], f);
  free(dup);
  if (f && f->root)
    apply_family_fields(L, m, shape, f);
}

static void parse_widths(loader *L, kf_model *m, const cJSON *w) {
  if (!w) {
    int d[] = {1, 2, 4, 8};
    memcpy(m->widths, d, sizeof d);
    m->nwidths = 4;
    return;
  }
  if (!cJSON_IsArray(w) || cJSON_GetArraySize(w) == 0) {
    kf_error(L->display, "widths", "must be a non-empty array of integers, got %s",
             kf_json_type_name(w));
    L->errors++;
    return;
  }
  int i = 0;
  for (const cJSON *e = w->child; e; e = e->next, i++) {
    char *p = kf_xasprintf("widths[%d]", i);
    if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 1 ||
        e->valuedouble > 256) {
      char got[64];
      if (cJSON_IsNumber(e))
        snprintf(got, sizeof got, "%g", e->valuedouble);
      else
        snprintf(got, sizeof got, "%s", kf_json_type_name(e));
      kf_error(L->display, p, "must be an integer from 1 to 256, got %s", got);
      L->errors++;
    } else if (m->nwidths >= sizeof m->widths / sizeof m->widths[0]) {
      kf_error(L->display, p, "too many widths (at most 64)");
      L->errors++;
    } else {
      int v = (int)e->valuedouble;
      int dup = 0;
      for (size_t k = 0; k < m->nwidths; k++)
        dup |= m->widths[k] == v;
      if (dup) {
        kf_error(L->display, p, "width %d is listed twice", v);
        L->errors++;
      } else {
        m->widths[m->nwidths++] = v;
      }
    }
    free(p);
  }
  /* sort ascending: plans and manifests list widths in order */
  for (size_t a = 1; a < m->nwidths; a++)
    for (size_t b = a; b > 0 && m->widths[b - 1] > m->widths[b]; b--) {
      int t = m->widths[b];
      m->widths[b] = m->widths[b - 1];
      m->widths[b - 1] = t;
    }
}

static void check_arch(loader *L, const char *file, const char *path, const char *arch) {
  char why[1024];
  if (kf_arch_check(arch, why, sizeof why) != 0) {
    kf_error(file, path, "%s", why);
    L->errors++;
  }
}

static void parse_arches(loader *L, kf_model *m, const cJSON *a) {
  if (L->opt->arches.n) {
    for (size_t i = 0; i < L->opt->arches.n; i++) {
      check_arch(L, "--arch", "", L->opt->arches.v[i]);
      if (!kf_strv_contains(&m->arches, L->opt->arches.v[i]))
        kf_strv_push(&m->arches, L->opt->arches.v[i]);
    }
  }
  if (!a) {
    if (!L->opt->arches.n)
      kf_strv_push(&m->arches, "sm_90a");
    return;
  }
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) == 0) {
    kf_error(L->display, "arches", "must be a non-empty array of arch names, got %s",
             kf_json_type_name(a));
    L->errors++;
    return;
  }
  int i = 0;
  for (const cJSON *e = a->child; e; e = e->next, i++) {
    char *p = kf_xasprintf("arches[%d]", i);
    if (!cJSON_IsString(e)) {
      kf_error(L->display, p, "must be an arch name such as \"sm_90a\", got %s",
               kf_json_type_name(e));
      L->errors++;
    } else {
      check_arch(L, L->display, p, e->valuestring);
      if (!L->opt->arches.n && !kf_strv_contains(&m->arches, e->valuestring))
        kf_strv_push(&m->arches, e->valuestring);
    }
    free(p);
  }
}

static void parse_dirs(loader *L, kf_model *m, const cJSON *a, const char *field, kf_strv *out) {
  if (!a)
    return;
  if (!cJSON_IsArray(a)) {
    kf_error(L->display, field, "must be an array of directory paths, got %s",
             kf_json_type_name(a));
    L->errors++;
    return;
  }
  int i = 0;
  for (const cJSON *e = a->child; e; e = e->next, i++) {
    char *p = kf_xasprintf("%s[%d]", field, i);
    if (!cJSON_IsString(e) || !*e->valuestring) {
      kf_error(L->display, p, "must be a directory path, got %s", kf_json_type_name(e));
      L->errors++;
    } else {
      char *joined = kf_path_join(m->dir, e->valuestring);
      char *abs = kf_path_absolute(joined);
      free(joined);
      char *probe = kf_path_join(abs, ".");
      if (!kf_path_exists(probe)) {
        kf_error(L->display, p, "directory \"%s\" does not exist", e->valuestring);
        L->errors++;
        free(abs);
      } else {
        kf_strv_push_owned(out, abs);
      }
      free(probe);
    }
    free(p);
  }
}

/* "page_sizes": the KV-cache page sizes the description serves. The shape's
 * page_size, which kf_kernel_find serves without a variant, must be one of
 * them; it goes first, the others follow in ascending order. */
static void parse_page_sizes(loader *L, kf_model *m, const cJSON *a) {
  if (!a)
    return;
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) == 0) {
    kf_error(L->display, "page_sizes",
             "must be a non-empty array of page sizes (tokens per KV-cache page), got %s",
             kf_json_type_name(a));
    L->errors++;
    return;
  }
  const kf_shape_field *ps = shape_field(m, "page_size");
  if (!ps || ps->is_string || ps->value.is_float) {
    kf_error(L->display, "page_sizes",
             "the shape has no integer page_size field (family %s): only kernels that read "
             "page_size can serve several page sizes",
             m->family ? m->family : "none");
    L->errors++;
    return;
  }
  int list[sizeof m->page_sizes / sizeof m->page_sizes[0]];
  size_t n = 0;
  int i = 0, has_default = 0;
  for (const cJSON *e = a->child; e; e = e->next, i++) {
    char *p = kf_xasprintf("page_sizes[%d]", i);
    if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 1 ||
        e->valuedouble > (1 << 20)) {
      char got[64];
      if (cJSON_IsNumber(e))
        snprintf(got, sizeof got, "%g", e->valuedouble);
      else
        snprintf(got, sizeof got, "%s", kf_json_type_name(e));
      kf_error(L->display, p, "must be an integer from 1 to %d, got %s", 1 << 20, got);
      L->errors++;
    } else if (n == sizeof list / sizeof list[0]) {
      kf_error(L->display, p, "too many page sizes (at most %zu)", sizeof list / sizeof list[0]);
      L->errors++;
    } else {
      int v = (int)e->valuedouble, dup = 0;
      for (size_t k = 0; k < n; k++)
        dup |= list[k] == v;
      if (dup) {
        kf_error(L->display, p, "page size %d is listed twice", v);
        L->errors++;
      } else {
        list[n++] = v;
        has_default |= v == ps->value.i;
      }
    }
    free(p);
  }
  if (n == (size_t)i && !has_default) {
    kf_error(L->display, "page_sizes",
             "must include the shape's page_size, %lld (the size served when the caller names "
             "none)",
             (long long)ps->value.i);
    L->errors++;
  }
  if (L->errors)
    return;
  m->page_sizes[m->npage_sizes++] = (int)ps->value.i;
  for (int lo = 0;;) { /* the others, ascending */
    int next = INT_MAX;
    for (size_t k = 0; k < n; k++)
      if (list[k] > lo && list[k] < next && list[k] != ps->value.i)
        next = list[k];
    if (next == INT_MAX)
      break;
    m->page_sizes[m->npage_sizes++] = lo = next;
  }
}

/* ---- the description ---- */

static kf_model *new_model(const char *path) {
  kf_model *m = kf_xcalloc(1, sizeof *m);
  m->path = kf_xstrdup(path);
  char *abs = kf_path_absolute(path);
  m->dir = kf_path_dirname(abs);
  free(abs);
  return m;
}

static void parse_name(loader *L, kf_model *m, const cJSON *name) {
  if (!cJSON_IsString(name)) {
    kf_error(L->display, "name", "missing the model's name (a string such as \"qwen3-0.6b\")");
    L->errors++;
  } else if (!valid_name(name->valuestring, 1)) {
    kf_error(L->display, "name",
             "\"%s\" is not a valid model name: use lower-case letters, digits, '.', '_' and "
             "'-' (no '/' or '..'), at most 64 characters",
             name->valuestring);
    L->errors++;
  } else {
    m->name = kf_xstrdup(name->valuestring);
  }
}

/* The "family" member, when present: loads its preset into *fam. */
static void parse_family(loader *L, kf_model *m, const cJSON *f, family *fam) {
  if (!f)
    return;
  if (!cJSON_IsString(f) || !valid_name(f->valuestring, 0)) {
    kf_error(L->display, "family", "must be a family name such as \"qwen3\", got %s",
             cJSON_IsString(f) ? f->valuestring : kf_json_type_name(f));
    L->errors++;
    return;
  }
  m->family = kf_xstrdup(f->valuestring);
  load_family(L, m, m->family, fam);
}

/* Every top-level member but the kernels, in the order the messages come:
 * name, family, shape (typed by the family), widths, page_sizes, arches,
 * template_dirs, include_dirs. */
static void read_description(loader *L, kf_model *m, const cJSON *root, family *fam) {
  static const char *const members[] = {"name",        "family",  "shape",        "widths",
                                        "arches",      "kernels", "include_dirs", "template_dirs",
                                        "description", "limits",  "page_sizes",   NULL};
  if (!cJSON_IsObject(root)) {
    kf_error(L->display, "", "a description must be a JSON object, got %s",
             kf_json_type_name(root));
    L->errors++;
    return;
  }
  L->errors += kf_json_check_members(L->display, "", root, members);
  parse_name(L, m, cJSON_GetObjectItemCaseSensitive(root, "name"));
  parse_family(L, m, cJSON_GetObjectItemCaseSensitive(root, "family"), fam);
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(root, "shape");
  L->shape = cJSON_IsObject(shape) ? shape : NULL;
  if (!shape) {
    kf_error(L->display, "shape", "missing the model's shape fields");
    L->errors++;
  } else {
    parse_shape(L, m, shape, fam); /* fam->root is NULL without a family */
  }
  parse_widths(L, m, cJSON_GetObjectItemCaseSensitive(root, "widths"));
  if (shape)
    parse_page_sizes(L, m, cJSON_GetObjectItemCaseSensitive(root, "page_sizes"));
  parse_arches(L, m, cJSON_GetObjectItemCaseSensitive(root, "arches"));
  parse_dirs(L, m, cJSON_GetObjectItemCaseSensitive(root, "template_dirs"), "template_dirs",
             &m->template_dirs);
  parse_dirs(L, m, cJSON_GetObjectItemCaseSensitive(root, "include_dirs"), "include_dirs",
             &m->include_dirs);
  for (size_t i = 0; i < L->opt->extra_include_dirs.n; i++)
    kf_strv_push_owned(&m->include_dirs, kf_path_absolute(L->opt->extra_include_dirs.v[i]));
  L->errors += kf_limits_parse(m->path, "limits", cJSON_GetObjectItemCaseSensitive(root, "limits"),
                               &m->limits);
}

/* ---- the kernel list ---- */

/* Adds k (taken) to the model, replacing a kernel of the same kind from an
 * earlier file; the same kind twice in one file is an error. */
static void add_kernel(loader *L, kf_model *m, const char *file, const char *path,
                       kf_kernel_desc *k) {
  size_t at = m->nkernels;
  for (size_t j = 0; j < m->nkernels; j++)
    if (!strcmp(m->kernels[j].kind, k->kind)) {
      if (!strcmp(m->kernels[j].source_file, file)) {
        kf_error(file, path, "kind \"%s\" is listed twice", k->kind);
        L->errors++;
      }
      kernel_free(&m->kernels[j]);
      at = j;
    }
  if (at == m->nkernels) {
    m->kernels = kf_xpush(m->kernels, m->nkernels, sizeof *m->kernels);
    m->nkernels++;
  }
  m->kernels[at] = *k;
}

/* The "kernels" array of one file (the description or its family). */
static void parse_kernel_list(loader *L, kf_model *m, const char *file, const cJSON *ks) {
  if (!ks)
    return;
  if (!cJSON_IsArray(ks)) {
    kf_error(file, "kernels", "must be an array of kernels, got %s", kf_json_type_name(ks));
    L->errors++;
    return;
  }
  int i = 0;
  for (const cJSON *e = ks->child; e; e = e->next, i++) {
    char *p = kf_xasprintf("kernels[%d]", i);
    kf_kernel_desc k = {0};
    if (parse_kernel(L, m, file, p, e, &k) == 0)
      add_kernel(L, m, file, p, &k);
    else
      kernel_free(&k);
    free(p);
  }
}

static int cmp_kernel(const void *a, const void *b) {
  const kf_kernel_desc *x = a, *y = b;
  int c = strcmp(x->kind, y->kind);
  return c ? c : (x->page_size > y->page_size) - (x->page_size < y->page_size);
}

/* The family's kernels first, then the description's (replacing by kind);
 * the result sorted by kind. */
static void parse_kernels(loader *L, kf_model *m, const cJSON *root, const family *fam) {
  parse_kernel_list(L, m, fam->path,
                    fam->root ? cJSON_GetObjectItemCaseSensitive(fam->root, "kernels") : NULL);
  parse_kernel_list(L, m, L->display, cJSON_GetObjectItemCaseSensitive(root, "kernels"));
  if (!L->errors && m->nkernels == 0) {
    kf_error(L->display, "kernels",
             "the description names no kernels (give \"kernels\" or a \"family\")");
    L->errors++;
  }
  if (m->nkernels > 1)
    qsort(m->kernels, m->nkernels, sizeof *m->kernels, cmp_kernel);
}

/* The kernels of the description's other page sizes: its kernel lists parsed
 * again with the shape's page_size set to each; a kernel whose parameters
 * read it is kept, the others are the first pass's (built once). */
static void parse_page_kernels(loader *L, kf_model *m, const cJSON *root, const family *fam) {
  kf_shape_field *ps = (kf_shape_field *)shape_field(m, "page_size");
  if (m->npage_sizes < 2 || !ps)
    return;
  const int64_t shape_size = ps->value.i;
  kf_kernel_desc *kept = m->kernels;
  size_t nkept = m->nkernels;
  for (size_t i = 1; i < m->npage_sizes && !L->errors; i++) {
    ps->value.i = m->page_sizes[i];
    L->page_index = i;
    m->kernels = NULL;
    m->nkernels = 0;
    parse_kernel_list(L, m, fam->path,
                      fam->root ? cJSON_GetObjectItemCaseSensitive(fam->root, "kernels") : NULL);
    parse_kernel_list(L, m, L->display, cJSON_GetObjectItemCaseSensitive(root, "kernels"));
    for (size_t j = 0; j < m->nkernels; j++) {
      if (m->kernels[j].page_size == m->page_sizes[i]) {
        kept = kf_xpush(kept, nkept, sizeof *kept);
        kept[nkept++] = m->kernels[j];
      } else {
        kernel_free(&m->kernels[j]);
      }
    }
    free(m->kernels);
  }
  ps->value.i = shape_size;
  L->page_index = 0;
  m->kernels = kept;
  m->nkernels = nkept;
  qsort(m->kernels, m->nkernels, sizeof *m->kernels, cmp_kernel);
}

/* ---- layer kinds ---- */

/* The sync area and split scratch of a layer kernel (kf_layer.cuh) are its
 * arguments after the phases' and before rows. */
static void push_arg(kf_template *t, const char *name, const char *type, int size) {
  t->args = kf_xpush(t->args, t->nargs, sizeof *t->args);
  t->args[t->nargs++] = (kf_arg_spec){kf_xstrdup(name), kf_xstrdup(type), size};
}

/* A layer kind of the family's "layers": {"kind": K, "phases": [kinds in the
 * chain's order]}. Its schema is made here from its phases' (docs/contracts.md,
 * "Layer kinds"): their parameters as "<kind>.<PARAM>", their arguments as
 * "<kind>_<arg>" (rows once, last), their buffers likewise, plus the sync
 * area and the split scratch. plan.c computes its launch per width. */
static void parse_layer(loader *L, kf_model *m, const char *file, const cJSON *e, int index,
                        int page_size, int *paged) {
  char *p = kf_xasprintf("layers[%d]", index);
  static const char *const members[] = {"kind", "phases", "description", NULL};
  const cJSON *kind = cJSON_GetObjectItemCaseSensitive(e, "kind");
  const cJSON *phases = cJSON_GetObjectItemCaseSensitive(e, "phases");
  if (!cJSON_IsObject(e) || kf_json_check_members(file, p, e, members) || !cJSON_IsString(kind) ||
      !cJSON_IsArray(phases) || cJSON_GetArraySize(phases) < 1) {
    kf_error(file, p, "must be {\"kind\": NAME, \"phases\": [kinds, in order]}");
    L->errors++;
    free(p);
    return;
  }
  kf_template *t = kf_xcalloc(1, sizeof *t);
  t->name = kf_xstrdup("layer");
  t->path = kf_xstrdup(file);
  t->header = kf_xstrdup("kf_layer.cuh");
  t->entry = kf_xstrdup("kf::layer::phase");
  t->cooperative = 1;
  t->max_width = KF_MAX_WIDTH;
  for (int d = 0; d < 3; d++) {
    t->grid[d] = kf_xstrdup("1");
    t->block[d] = kf_xstrdup("1");
    t->cluster[d] = kf_xstrdup("1");
  }
  t->shared_bytes = kf_xstrdup("0");
  t->max_blocks_per_sm = kf_xstrdup("0");
  L->templates = kf_xpush(L->templates, L->ntemplates, sizeof *L->templates);
  L->templates[L->ntemplates++] = t;

  kf_kernel_desc k = {0};
  k.kind = kf_xstrdup(kind->valuestring);
  k.tmpl = t;
  k.source_file = kf_xstrdup(file);
  k.nphases = (size_t)cJSON_GetArraySize(phases);
  k.phases = kf_xcalloc(k.nphases, sizeof *k.phases);
  size_t nvalues = 0;
  int bad = 0;
  for (size_t i = 0; i < k.nphases; i++) {
    const cJSON *ph = cJSON_GetArrayItem(phases, (int)i);
    const kf_kernel_desc *pk = NULL; /* the kind's kernel of this page size */
    for (size_t j = 0; cJSON_IsString(ph) && j < m->nkernels; j++)
      if (!strcmp(m->kernels[j].kind, ph->valuestring) &&
          (!m->kernels[j].page_size || !page_size || m->kernels[j].page_size == page_size))
        pk = &m->kernels[j];
    if (!pk || pk->nphases) {
      kf_error(file, p, "phase %zu: %s is not a kernel kind of the model", i,
               cJSON_IsString(ph) ? ph->valuestring : "(not a string)");
      bad = 1;
      break;
    }
    if (!pk->tmpl->layer_shared_bytes) {
      kf_error(file, p,
               "phase %zu: template %s (kind %s) has no launch.layer_shared_bytes: it "
               "cannot run inside a layer kernel (%s)",
               i, pk->tmpl->name, pk->kind, pk->tmpl->path);
      bad = 1;
      break;
    }
    k.phases[i] = pk;
    nvalues += pk->tmpl->nparams;
    if (pk->page_size)
      k.page_size = pk->page_size; /* (every phase that reads it reads the same) */
  }
  if (bad) {
    L->errors++;
    kernel_free(&k);
    free(p);
    return;
  }
  t->params = kf_xcalloc(nvalues ? nvalues : 1, sizeof *t->params);
  k.values = kf_xcalloc(nvalues ? nvalues : 1, sizeof *k.values);
  for (size_t i = 0; i < k.nphases; i++) {
    const kf_kernel_desc *pk = k.phases[i];
    const kf_template *pt = pk->tmpl;
    for (size_t j = 0; j < pt->nparams; j++) {
      t->params[t->nparams] = pt->params[j];
      t->params[t->nparams].name = kf_xasprintf("%s.%s", pk->kind, pt->params[j].name);
      t->params[t->nparams].one_of = NULL;
      t->params[t->nparams].n_one_of = 0;
      t->params[t->nparams].tuning = NULL;
      t->params[t->nparams].n_tuning = 0;
      k.values[t->nparams++] = pk->values[j];
    }
    for (size_t j = 0; j < pt->nargs; j++)
      if (strcmp(pt->args[j].name, "rows") != 0) {
        char *name = kf_xasprintf("%s_%s", pk->kind, pt->args[j].name);
        push_arg(t, name, pt->args[j].type, pt->args[j].size);
        free(name);
      }
    for (size_t b = 0; b < pt->nbuffers; b++) {
      t->buffers = kf_xpush(t->buffers, t->nbuffers, sizeof *t->buffers);
      t->buffers[t->nbuffers++] =
          (kf_buffer_spec){kf_xasprintf("%s_%s", pk->kind, pt->buffers[b].arg),
                           kf_xstrdup(pt->buffers[b].bytes), pt->buffers[b].zero_once};
    }
    if (pt->max_width < t->max_width)
      t->max_width = pt->max_width;
  }
  push_arg(t, "layer_sync", "int*", 8);
  push_arg(t, "layer_scratch", "float*", 8);
  push_arg(t, "rows", "int", 4);
  t->buffers = kf_xpush(t->buffers, t->nbuffers, sizeof *t->buffers);
  t->buffers[t->nbuffers++] = (kf_buffer_spec){kf_xstrdup("layer_sync"), kf_xstrdup("0"), 1};
  t->buffers = kf_xpush(t->buffers, t->nbuffers, sizeof *t->buffers);
  t->buffers[t->nbuffers++] = (kf_buffer_spec){kf_xstrdup("layer_scratch"), kf_xstrdup("0"), 0};
  if (t->nargs > KF_MAX_ARGS) {
    kf_error(file, p, "the layer takes %zu arguments; at most %d", t->nargs, KF_MAX_ARGS);
    L->errors++;
    kernel_free(&k);
    free(p);
    return;
  }
  *paged = k.page_size != 0;
  m->kernels[m->nkernels++] = k; /* parse_layers made room */
  free(p);
}

/* The family's "layers", after its kernels; phases point into m->kernels,
 * so the layers are added last and the kernels are not sorted again (a layer
 * kind's position among the kinds is the family's order, after them). */
static void parse_layers(loader *L, kf_model *m, const family *fam) {
  const cJSON *ls = fam->root ? cJSON_GetObjectItemCaseSensitive(fam->root, "layers") : NULL;
  if (!ls)
    return;
  if (!cJSON_IsArray(ls)) {
    kf_error(fam->path, "layers", "must be an array of {\"kind\", \"phases\"}");
    L->errors++;
    return;
  }
  size_t base = m->nkernels, n = (size_t)cJSON_GetArraySize(ls);
  size_t pages = m->npage_sizes ? m->npage_sizes : 1;
  /* room for all first: the phases point into the array */
  m->kernels = kf_xrealloc(m->kernels, (base + n * pages) * sizeof *m->kernels);
  /* a layer kernel per page size where a phase reads it, else one */
  for (int i = 0; i < (int)n; i++) {
    const int before = L->errors;
    for (size_t q = 0, paged = 1; q < pages && paged && L->errors == before; q++) {
      int reads = 0;
      parse_layer(L, m, fam->path, cJSON_GetArrayItem(ls, i), i,
                  m->npage_sizes ? m->page_sizes[q] : 0, &reads);
      paged = (size_t)reads;
    }
  }
}

/* The family's "layer_types": which kinds each layer of the model runs,
 * where its layers differ (GLM-4.5: first_k_dense_replace dense layers, then
 * mixtures of experts). [{"name": N, "count": EXPR over the shape, "kinds":
 * [kinds, in order]}], the entries covering consecutive layers in order. */
static void parse_layer_types(loader *L, kf_model *m, const family *fam) {
  const cJSON *lt = fam->root ? cJSON_GetObjectItemCaseSensitive(fam->root, "layer_types") : NULL;
  if (!lt)
    return;
  if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) < 1) {
    kf_error(fam->path, "layer_types",
             "must be a non-empty array of {\"name\", \"count\", \"kinds\"}");
    L->errors++;
    return;
  }
  static const char *const members[] = {"name", "count", "kinds", "description", NULL};
  m->layer_types = kf_xcalloc((size_t)cJSON_GetArraySize(lt), sizeof *m->layer_types);
  int i = 0;
  for (const cJSON *e = lt->child; e; e = e->next, i++) {
    char *p = kf_xasprintf("layer_types[%d]", i);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
    const cJSON *count = cJSON_GetObjectItemCaseSensitive(e, "count");
    const cJSON *kinds = cJSON_GetObjectItemCaseSensitive(e, "kinds");
    if (!cJSON_IsObject(e) || kf_json_check_members(fam->path, p, e, members) ||
        !cJSON_IsString(name) || !valid_name(name->valuestring, 0) ||
        !(cJSON_IsString(count) || cJSON_IsNumber(count)) || !cJSON_IsArray(kinds) ||
        cJSON_GetArraySize(kinds) < 1) {
      kf_error(fam->path, p,
               "must be {\"name\": NAME ([a-z0-9_-]), \"count\": layers (an expression over "
               "the shape), \"kinds\": [kinds, in order]}");
      L->errors++;
      free(p);
      continue;
    }
    kf_layer_type *t = &m->layer_types[m->nlayer_types++];
    t->name = kf_xstrdup(name->valuestring);
    for (size_t j = 0; j + 1 < m->nlayer_types; j++)
      if (!strcmp(m->layer_types[j].name, t->name)) {
        kf_error(fam->path, p, "name \"%s\" repeats layer_types[%zu]", t->name, j);
        L->errors++;
      }
    value_place vp = {m, fam->path, p, L->shape, NULL, 0};
    kf_value v;
    char err[256];
    if (cJSON_IsNumber(count)) {
      v.is_float = count->valuedouble != floor(count->valuedouble);
      v.i = (int64_t)count->valuedouble;
      v.f = count->valuedouble;
    } else if (kf_expr_eval(count->valuestring, shape_lookup, &vp, &v, err, sizeof err) != 0) {
      kf_error(fam->path, p, "count: %s", err);
      L->errors++;
      free(p);
      continue;
    }
    double d = kf_value_as_double(v);
    if (d != floor(d) || d < 0 || d > 1e6) {
      char got[64];
      kf_value_format(v, got, sizeof got);
      value_error(L, &vp, "count must be a whole number of layers, 0 or more, got %s", got);
    }
    t->count = (int64_t)d;
    int j = 0;
    for (const cJSON *k = kinds->child; k; k = k->next, j++) {
      int known = 0;
      for (size_t q = 0; cJSON_IsString(k) && q < m->nkernels; q++)
        known |= !strcmp(m->kernels[q].kind, k->valuestring);
      if (!known) {
        kf_error(fam->path, p, "kinds[%d]: %s is not a kernel kind of the model", j,
                 cJSON_IsString(k) ? k->valuestring : "(not a string)");
        L->errors++;
      } else {
        kf_strv_push(&t->kinds, k->valuestring);
      }
    }
    free(p);
  }
}

/* ---- model-level rules ---- */

/* The element types the templates implement: their arguments are kf_bf16
 * (templates/kf_portability.cuh). A shape field "dtype" names the model's. */
static const char *const implemented_dtypes[] = {"bf16", NULL};

/* What the shape means beyond each field's type: the dtype is one the
 * templates implement, and the kv heads divide the query heads (each kv
 * head serves a whole group of query heads). */
static void check_shape_meaning(loader *L, const kf_model *m) {
  const kf_shape_field *dt = shape_field(m, "dtype");
  if (dt) {
    int ok = 0;
    kf_buf list = {0};
    for (const char *const *d = implemented_dtypes; *d; d++) {
      ok |= dt->is_string && !strcmp(dt->str, *d);
      kf_buf_printf(&list, "%s\"%s\"", d == implemented_dtypes ? "" : ", ", *d);
    }
    if (!ok) {
      char got[64];
      if (dt->is_string)
        snprintf(got, sizeof got, "\"%.40s\"", dt->str);
      else
        kf_value_format(dt->value, got, sizeof got);
      kf_error(L->display, "shape.dtype",
               "the templates implement only %s, got %s; another dtype needs templates "
               "written for it",
               list.data, got);
      L->errors++;
    }
    kf_buf_free(&list);
  }
  const kf_shape_field *q = shape_field(m, "num_attention_heads");
  const kf_shape_field *kv = shape_field(m, "num_key_value_heads");
  if (q && kv && !q->is_string && !kv->is_string && !q->value.is_float && !kv->value.is_float) {
    if (kv->value.i < 1 || q->value.i < 1 || q->value.i % kv->value.i != 0) {
      kf_error(L->display, "shape.num_key_value_heads",
               "must be at least 1 and divide num_attention_heads (%lld), got %lld",
               (long long)q->value.i, (long long)kv->value.i);
      L->errors++;
    }
  }
}

/* Every width within what each kernel's template serves (its schema's
 * max_width); one message per template. */
static void check_widths_served(loader *L, const kf_model *m) {
  if (!m->nwidths)
    return;
  int widest = m->widths[m->nwidths - 1];
  for (size_t t = 0; t < L->ntemplates; t++) {
    const kf_template *tp = L->templates[t];
    if (widest <= tp->max_width)
      continue;
    const char *kind = "?";
    for (size_t i = 0; i < m->nkernels; i++)
      if (m->kernels[i].tmpl == tp) {
        kind = m->kernels[i].kind;
        break;
      }
    kf_error(L->display, "widths",
             "width %d is above %d, the widest template %s serves (%s: max_width; kind %s)", widest,
             tp->max_width, tp->name, tp->path, kind);
    L->errors++;
  }
}

/* ---- launch checks ---- */

/* Evaluates every launch expression of k for one width and mma; returns 1
 * with the reason in err when one fails, is out of range, or the clusters do
 * not tile the grid or hold more than the portable 8 blocks. */
static int launch_problem(const kf_kernel_desc *k, int width, int mma, char *err, size_t errlen) {
  const kf_template *t = k->tmpl;
  const char *exprs[11] = {t->grid[0],    t->grid[1],      t->grid[2],          t->block[0],
                           t->block[1],   t->block[2],     t->cluster[0],       t->cluster[1],
                           t->cluster[2], t->shared_bytes, t->max_blocks_per_sm};
  int64_t v[11] = {0};
  for (int e = 0; e < 11; e++) {
    if (kf_template_eval(k, width, mma, exprs[e], &v[e], err, errlen) != 0)
      return 1;
    if ((e < 9 && v[e] < 1) || v[e] < 0 || v[e] > INT32_MAX) {
      snprintf(err, errlen, "\"%s\" gives %lld for width %d", exprs[e], (long long)v[e], width);
      return 1;
    }
  }
  char why[160];
  if (kf_launch_dims_problem(v, v + 3, v + 6, why, sizeof why) >= 0) {
    snprintf(err, errlen, "%s for width %d", why, width);
    return 1;
  }
  for (int d = 0; d < 3; d++)
    if (v[d] % v[6 + d] != 0) {
      snprintf(err, errlen, "grid[%d] = %lld is not a multiple of cluster[%d] = %lld for width %d",
               d, (long long)v[d], d, (long long)v[6 + d], width);
      return 1;
    }
  if (v[6] * v[7] * v[8] > 8) {
    snprintf(err, errlen, "a cluster of %lld blocks for width %d; at most 8",
             (long long)(v[6] * v[7] * v[8]), width);
    return 1;
  }
  for (int d = 0; d < 3 && t->layer_grid[d]; d++) {
    int64_t g;
    if (kf_template_eval(k, width, mma, t->layer_grid[d], &g, err, errlen) != 0)
      return 1;
    if (g < 1 || g > INT32_MAX) {
      snprintf(err, errlen, "launch.layer_grid[%d]: \"%s\" gives %lld for width %d", d,
               t->layer_grid[d], (long long)g, width);
      return 1;
    }
  }
  for (size_t b = 0; b < t->nbuffers; b++) {
    int64_t bytes;
    if (kf_template_eval(k, width, mma, t->buffers[b].bytes, &bytes, err, errlen) != 0)
      return 1;
    if (bytes < 1 || bytes > ((int64_t)1 << 40)) {
      snprintf(err, errlen, "buffer \"%s\": \"%s\" gives %lld bytes for width %d",
               t->buffers[b].arg, t->buffers[b].bytes, (long long)bytes, width);
      return 1;
    }
  }
  return 0;
}

/* Launch expressions must evaluate for every width, with MMA 0 and 1 (the
 * arches come later, from the command line too); the first problem of the
 * first kernel that has one is reported. */
static void check_launches(loader *L, const kf_model *m) {
  for (size_t i = 0; i < m->nkernels && !L->errors; i++) {
    const kf_kernel_desc *k = &m->kernels[i];
    for (size_t wm = 0; wm < 2 * m->nwidths; wm++) {
      char err[256] = "";
      if (launch_problem(k, m->widths[wm / 2], (int)(wm % 2), err, sizeof err)) {
        kf_error(k->tmpl->path, "launch", "%s (kernel %s of %s)", err, k->kind, L->display);
        L->errors++;
        break;
      }
    }
  }
}

kf_model *kf_model_load(const char *path, const kf_model_options *opt) {
  loader L = {opt, path, 0, NULL, 0, NULL, 0};
  kf_report_cap_begin();
  cJSON *root = kf_json_load(path, path);
  if (!root) {
    kf_report_cap_end();
    return NULL;
  }
  kf_model *m = new_model(path);
  family fam = {0};
  read_description(&L, m, root, &fam);
  if (!L.errors)
    check_shape_meaning(&L, m);
  if (!L.errors) { /* kernels need a valid shape and template dirs */
    parse_kernels(&L, m, root, &fam);
    parse_page_kernels(&L, m, root, &fam);
    check_widths_served(&L, m);
    check_launches(&L, m);
  }
  if (!L.errors)
    parse_layers(&L, m, &fam);
  if (!L.errors)
    parse_layer_types(&L, m, &fam);
  if (fam.root)
    cJSON_Delete(fam.root);
  free(fam.path);
  cJSON_Delete(root);
  /* the schemas stay alive with the model */
  m->templates = L.templates;
  m->ntemplates = L.ntemplates;
  kf_report_cap_end();
  if (L.errors) {
    kf_model_free(m);
    return NULL;
  }
  return m;
}

void kf_model_free(kf_model *m) {
  if (!m)
    return;
  for (size_t i = 0; i < m->nkernels; i++)
    kernel_free(&m->kernels[i]);
  for (size_t i = 0; i < m->ntemplates; i++)
    kf_template_free(m->templates[i]);
  free(m->templates);
  free(m->kernels);
  for (size_t i = 0; i < m->nlayer_types; i++) {
    free(m->layer_types[i].name);
    kf_strv_free(&m->layer_types[i].kinds);
  }
  free(m->layer_types);
  free(m->path);
  free(m->dir);
  free(m->name);
  free(m->family);
  for (size_t i = 0; i < m->nshape; i++) {
    free(m->shape[i].name);
    free(m->shape[i].str);
  }
  free(m->shape);
  kf_strv_free(&m->arches);
  kf_strv_free(&m->include_dirs);
  kf_strv_free(&m->template_dirs);
  free(m);
}
