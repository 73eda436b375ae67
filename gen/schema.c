/* schema.c: loads and checks a template schema (templates/<template>.json):
 * its name, header and entry, its parameters, its kernel arguments and its
 * launch expressions, and evaluates those expressions for one kernel. Every
 * problem in a schema is reported, not only the first; the description that
 * named the template (model.c) decides what a failure means. */
#define _GNU_SOURCE
#include "schema.h"
#include "report.h"

#include "json.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kf_template_free(kf_template *t) {
  if (!t)
    return;
  free(t->name);
  free(t->dir);
  free(t->path);
  free(t->header);
  free(t->entry);
  for (size_t i = 0; i < t->nparams; i++) {
    free(t->params[i].name);
    free(t->params[i].one_of);
  }
  free(t->params);
  for (size_t i = 0; i < t->nargs; i++) {
    free(t->args[i].name);
    free(t->args[i].type);
  }
  free(t->args);
  for (int i = 0; i < 3; i++) {
    free(t->grid[i]);
    free(t->block[i]);
    free(t->cluster[i]);
  }
  free(t->shared_bytes);
  free(t->max_blocks_per_sm);
  free(t);
}

/* The closed set of kernel argument types (contracts.md) and their sizes. */
static const struct {
  const char *type;
  int size;
} arg_types[] = {{"const kf_bf16*", 8}, {"kf_bf16*", 8}, {"const float*", 8}, {"float*", 8},
                 {"const int*", 8},     {"int*", 8},     {"int", 4},          {"float", 4},
                 {"long long", 8},      {NULL, 0}};

/* ---- finding the schema ---- */

/* Returns the path of <name>.json in the first of dirs that holds one, with
 * that directory in *dir (both owned by the caller), or NULL after reporting
 * at where_file/where_path every directory searched. */
static char *find_schema(const kf_strv *dirs, const char *name, const char *where_file,
                         const char *where_path, char **dir) {
  char *found = NULL;
  kf_buf searched = {0};
  for (size_t i = 0; i < dirs->n && !found; i++) {
    char *p = kf_xasprintf("%s/%s.json", dirs->v[i], name);
    if (kf_path_exists(p)) {
      found = p;
      *dir = kf_xstrdup(dirs->v[i]);
    } else {
      free(p);
      kf_buf_printf(&searched, "%s%s", i ? ", " : "", dirs->v[i]);
    }
  }
  if (!found)
    kf_error(where_file, where_path, "template \"%s\" not found (searched %s)", name,
             searched.data ? searched.data : "nothing");
  kf_buf_free(&searched);
  return found;
}

/* ---- name, header and entry ---- */

static int check_template_name(const kf_template *t, const cJSON *root) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "template");
  if (!cJSON_IsString(v) || strcmp(v->valuestring, t->name) != 0) {
    kf_error(t->path, "template", "must be \"%s\" (the file's name)", t->name);
    return 1;
  }
  return 0;
}

static int parse_header(kf_template *t, const cJSON *v) {
  if (!cJSON_IsString(v) || !*v->valuestring || strchr(v->valuestring, '"')) {
    kf_error(t->path, "header", "must be the header's file name");
    return 1;
  }
  t->header = kf_xstrdup(v->valuestring);
  char *hp = kf_path_join(t->dir, t->header);
  int missing = !kf_path_exists(hp);
  free(hp);
  if (missing) {
    kf_error(t->path, "header", "\"%s\" does not exist beside the schema", t->header);
    return 1;
  }
  return 0;
}

static int parse_entry(kf_template *t, const cJSON *v) {
  if (!cJSON_IsString(v) || !*v->valuestring) {
    kf_error(t->path, "entry", "must name the device function template to call");
    return 1;
  }
  t->entry = kf_xstrdup(v->valuestring);
  return 0;
}

/* ---- params ---- */

static int parse_param_spec(const char *file, const char *path, const cJSON *spec,
                            kf_param_spec *ps) {
  static const char *const members[] = {"type",   "min",         "max", "multiple_of",
                                        "one_of", "description", NULL};
  int errors = 0;
  if (!cJSON_IsObject(spec)) {
    kf_error(file, path, "must be an object, got %s", kf_json_type_name(spec));
    return 1;
  }
  errors += kf_json_check_members(file, path, spec, members);
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(spec, "type");
  if (!cJSON_IsString(type) ||
      (strcmp(type->valuestring, "int") != 0 && strcmp(type->valuestring, "float") != 0)) {
    char *p = kf_xasprintf("%s.type", path);
    kf_error(file, p, "must be \"int\" or \"float\"");
    free(p);
    errors++;
  } else {
    ps->is_float = strcmp(type->valuestring, "float") == 0;
  }
  const cJSON *v;
  if ((v = cJSON_GetObjectItemCaseSensitive(spec, "min"))) {
    ps->has_min = cJSON_IsNumber(v);
    ps->min = v->valuedouble;
  }
  if ((v = cJSON_GetObjectItemCaseSensitive(spec, "max"))) {
    ps->has_max = cJSON_IsNumber(v);
    ps->max = v->valuedouble;
  }
  if ((v = cJSON_GetObjectItemCaseSensitive(spec, "multiple_of")))
    ps->multiple_of = cJSON_IsNumber(v) ? (int64_t)v->valuedouble : 0;
  if ((v = cJSON_GetObjectItemCaseSensitive(spec, "one_of")) && cJSON_IsArray(v)) {
    ps->n_one_of = (size_t)cJSON_GetArraySize(v);
    ps->one_of = kf_xcalloc(ps->n_one_of, sizeof(int64_t));
    size_t i = 0;
    for (const cJSON *e = v->child; e; e = e->next)
      ps->one_of[i++] = (int64_t)e->valuedouble;
  }
  return errors;
}

/* "params" is optional: a template may take no parameters. */
static int parse_params(kf_template *t, const cJSON *params) {
  if (!params)
    return 0;
  if (!cJSON_IsObject(params)) {
    kf_error(t->path, "params", "must be an object");
    return 1;
  }
  int errors = 0;
  t->nparams = (size_t)cJSON_GetArraySize(params);
  t->params = kf_xcalloc(t->nparams, sizeof *t->params);
  size_t i = 0;
  for (const cJSON *p = params->child; p; p = p->next, i++) {
    t->params[i].name = kf_xstrdup(p->string);
    char *path = kf_xasprintf("params.%s", p->string);
    if (!isupper((unsigned char)p->string[0]) || strcmp(p->string, "W") == 0) {
      kf_error(t->path, path, "parameter names are upper-case identifiers other than W");
      errors++;
    }
    errors += parse_param_spec(t->path, path, p, &t->params[i]);
    free(path);
  }
  return errors;
}

/* ---- args ---- */

static int parse_arg(const kf_template *t, const char *path, const cJSON *a, kf_arg_spec *as) {
  const cJSON *an = cJSON_GetObjectItemCaseSensitive(a, "name");
  const cJSON *at = cJSON_GetObjectItemCaseSensitive(a, "type");
  if (!cJSON_IsString(an) || !cJSON_IsString(at)) {
    kf_error(t->path, path, "must be {\"name\": …, \"type\": …}");
    as->name = kf_xstrdup("?");
    as->type = kf_xstrdup("int");
    return 1;
  }
  as->name = kf_xstrdup(an->valuestring);
  as->type = kf_xstrdup(at->valuestring);
  for (int k = 0; arg_types[k].type; k++)
    if (strcmp(arg_types[k].type, at->valuestring) == 0)
      as->size = arg_types[k].size;
  if (as->size)
    return 0;
  kf_buf list = {0};
  for (int k = 0; arg_types[k].type; k++)
    kf_buf_printf(&list, "%s\"%s\"", k ? ", " : "", arg_types[k].type);
  kf_error(t->path, path, "unknown argument type \"%s\"; allowed: %s", at->valuestring, list.data);
  kf_buf_free(&list);
  return 1;
}

/* The kernel's arguments, in call order; the runtime passes the row count
 * last. */
static int parse_args(kf_template *t, const cJSON *args) {
  if (!cJSON_IsArray(args) || cJSON_GetArraySize(args) == 0) {
    kf_error(t->path, "args", "must be a non-empty array");
    return 1;
  }
  int errors = 0;
  t->nargs = (size_t)cJSON_GetArraySize(args);
  t->args = kf_xcalloc(t->nargs, sizeof *t->args);
  size_t i = 0;
  for (const cJSON *a = args->child; a; a = a->next, i++) {
    char *path = kf_xasprintf("args[%zu]", i);
    errors += parse_arg(t, path, a, &t->args[i]);
    free(path);
  }
  const kf_arg_spec *last = &t->args[t->nargs - 1];
  if (strcmp(last->name, "rows") != 0 || strcmp(last->type, "int") != 0) {
    kf_error(t->path, "args", "the last argument must be {\"name\": \"rows\", \"type\": \"int\"}");
    errors++;
  }
  return errors;
}

/* ---- launch ---- */

/* A launch dimension is a number or an expression string. */
static char *launch_expr(const char *file, const char *path, const cJSON *v, int *errors) {
  if (cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble))
    return kf_xasprintf("%lld", (long long)v->valuedouble);
  if (cJSON_IsString(v) && *v->valuestring)
    return kf_xstrdup(v->valuestring);
  kf_error(file, path, "must be an integer or an expression string, got %s", kf_json_type_name(v));
  (*errors)++;
  return kf_xstrdup("0");
}

/* launch.grid, launch.block and the optional launch.cluster: 3 expressions
 * each; a malformed one reads as {1, 1, 1} after its error. */
static int parse_launch_dims(kf_template *t, const cJSON *launch) {
  static const char *const names[3] = {"grid", "block", "cluster"};
  char **dst[3] = {t->grid, t->block, t->cluster};
  int errors = 0;
  for (int d = 0; d < 3; d++) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(launch, names[d]);
    if (d == 2 && !arr)
      continue; /* optional: no clusters */
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != 3) {
      char *p = kf_xasprintf("launch.%s", names[d]);
      kf_error(t->path, p, "must be an array of 3 dimensions");
      free(p);
      errors++;
      for (int k = 0; k < 3; k++)
        dst[d][k] = kf_xstrdup("1");
      continue;
    }
    int k = 0;
    for (const cJSON *e = arr->child; e; e = e->next, k++) {
      char *p = kf_xasprintf("launch.%s[%d]", names[d], k);
      dst[d][k] = launch_expr(t->path, p, e, &errors);
      free(p);
    }
  }
  return errors;
}

/* An optional boolean member of "launch"; absent reads as false. */
static int parse_launch_flag(const kf_template *t, const cJSON *launch, const char *name,
                             int *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(launch, name);
  int errors = 0;
  if (v && !cJSON_IsBool(v)) {
    char *p = kf_xasprintf("launch.%s", name);
    kf_error(t->path, p, "must be true or false");
    free(p);
    errors++;
  }
  *out = cJSON_IsTrue(v);
  return errors;
}

static int parse_launch(kf_template *t, const cJSON *launch) {
  static const char *const members[] = {"grid",         "block",   "shared_bytes",
                                        "programmatic", "cluster", "max_blocks_per_sm",
                                        "one_wave",     NULL};
  if (!cJSON_IsObject(launch)) {
    kf_error(t->path, "launch", "must be an object with grid, block and shared_bytes");
    return 1;
  }
  int errors = kf_json_check_members(t->path, "launch", launch, members);
  errors += parse_launch_dims(t, launch);
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(launch, "shared_bytes");
  t->shared_bytes = sh ? launch_expr(t->path, "launch.shared_bytes", sh, &errors) : kf_xstrdup("0");
  const cJSON *mb = cJSON_GetObjectItemCaseSensitive(launch, "max_blocks_per_sm");
  t->max_blocks_per_sm =
      mb ? launch_expr(t->path, "launch.max_blocks_per_sm", mb, &errors) : kf_xstrdup("0");
  errors += parse_launch_flag(t, launch, "programmatic", &t->programmatic);
  errors += parse_launch_flag(t, launch, "one_wave", &t->one_wave);
  return errors;
}

/* An absent launch.cluster is {1, 1, 1}; on a schema with errors, every
 * other launch field left unset gets its neutral value too. */
static void set_launch_defaults(kf_template *t) {
  for (int k = 0; k < 3; k++) {
    if (!t->grid[k])
      t->grid[k] = kf_xstrdup("1");
    if (!t->block[k])
      t->block[k] = kf_xstrdup("1");
    if (!t->cluster[k])
      t->cluster[k] = kf_xstrdup("1");
  }
  if (!t->shared_bytes)
    t->shared_bytes = kf_xstrdup("0");
  if (!t->max_blocks_per_sm)
    t->max_blocks_per_sm = kf_xstrdup("0");
}

/* ---- the whole schema ---- */

/* Checks every member of the schema into t; returns the number of problems
 * reported. */
static int parse_schema(kf_template *t, const cJSON *root) {
  static const char *const members[] = {"template", "header", "entry",       "params",
                                        "args",     "launch", "description", NULL};
  if (!cJSON_IsObject(root)) {
    kf_error(t->path, "", "a template schema must be a JSON object");
    return 1;
  }
  int errors = kf_json_check_members(t->path, "", root, members);
  errors += check_template_name(t, root);
  errors += parse_header(t, cJSON_GetObjectItemCaseSensitive(root, "header"));
  errors += parse_entry(t, cJSON_GetObjectItemCaseSensitive(root, "entry"));
  errors += parse_params(t, cJSON_GetObjectItemCaseSensitive(root, "params"));
  errors += parse_args(t, cJSON_GetObjectItemCaseSensitive(root, "args"));
  errors += parse_launch(t, cJSON_GetObjectItemCaseSensitive(root, "launch"));
  return errors;
}

kf_template *kf_template_load(const kf_strv *dirs, const char *name, const char *where_file,
                              const char *where_path, int *errors) {
  char *dir = NULL;
  char *path = find_schema(dirs, name, where_file, where_path, &dir);
  if (!path) {
    (*errors)++;
    return NULL;
  }
  cJSON *root = kf_json_load(path, path);
  if (!root) {
    (*errors)++;
    free(path);
    free(dir);
    return NULL;
  }
  kf_template *t = kf_xcalloc(1, sizeof *t);
  t->name = kf_xstrdup(name);
  t->dir = dir;
  t->path = path;
  int problems = parse_schema(t, root);
  cJSON_Delete(root);
  set_launch_defaults(t);
  if (problems) {
    *errors += problems;
    kf_template_free(t);
    return NULL;
  }
  return t;
}

/* ---- launch expressions ---- */

typedef struct {
  const kf_kernel_desc *k;
  int width;
  int mma;
} launch_ctx;

/* The names a launch expression sees: W, MMA and the template's parameters;
 * the description's shape fields are not in scope. */
static int launch_lookup(void *ctx, const char *name, kf_value *out) {
  const launch_ctx *lc = ctx;
  if (strcmp(name, "W") == 0) {
    out->is_float = 0;
    out->i = lc->width;
    return 0;
  }
  if (strcmp(name, "MMA") == 0) {
    out->is_float = 0;
    out->i = lc->mma;
    return 0;
  }
  for (size_t i = 0; i < lc->k->tmpl->nparams; i++) {
    if (strcmp(lc->k->tmpl->params[i].name, name) == 0) {
      *out = lc->k->values[i];
      return 0;
    }
  }
  return -1;
}

int kf_template_eval(const kf_kernel_desc *k, int width, int mma, const char *expr, int64_t *out,
                     char *err, size_t errlen) {
  launch_ctx lc = {k, width, mma};
  kf_value v;
  if (kf_expr_eval(expr, launch_lookup, &lc, &v, err, errlen) != 0)
    return -1;
  if (v.is_float) {
    snprintf(err, errlen, "\"%s\" is not an integer", expr);
    return -1;
  }
  *out = v.i;
  return 0;
}
