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
    free(t->params[i].tuning);
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
    free(t->layer_grid[i]);
  }
  free(t->shared_bytes);
  free(t->max_blocks_per_sm);
  free(t->layer_shared_bytes);
  for (size_t i = 0; i < t->nbuffers; i++) {
    free(t->buffers[i].arg);
    free(t->buffers[i].bytes);
  }
  free(t->buffers);
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

/* ---- names pasted into the generated source ---- */

/* Words of C and C++ (and the generated source's own struct) that cannot
 * name an argument or a scope of the entry. */
static const char *const reserved_words[] = {
    "alignas",  "alignof", "and",       "asm",    "auto",      "bool",     "break",    "case",
    "catch",    "char",    "class",     "const",  "constexpr", "continue", "decltype", "default",
    "delete",   "do",      "double",    "else",   "enum",      "explicit", "extern",   "false",
    "float",    "for",     "friend",    "goto",   "if",        "inline",   "int",      "kf_params",
    "long",     "mutable", "namespace", "new",    "noexcept",  "not",      "nullptr",  "operator",
    "or",       "private", "protected", "public", "register",  "return",   "short",    "signed",
    "sizeof",   "static",  "struct",    "switch", "template",  "this",     "throw",    "true",
    "try",      "typedef", "typename",  "union",  "unsigned",  "using",    "virtual",  "void",
    "volatile", "while",   "xor",       NULL};

/* The length of the C identifier at s ([A-Za-z_][A-Za-z0-9_]*), 0 if none. */
static size_t identifier_length(const char *s) {
  size_t n = 0;
  if (!isalpha((unsigned char)s[0]) && s[0] != '_')
    return 0;
  while (isalnum((unsigned char)s[n]) || s[n] == '_')
    n++;
  return n;
}

/* 1 when s[0..n) is a word of reserved_words or one the compiler reserves
 * ("__x", "_X"). */
static int reserved(const char *s, size_t n) {
  if (n >= 2 && s[0] == '_' && (s[1] == '_' || isupper((unsigned char)s[1])))
    return 1;
  for (const char *const *w = reserved_words; *w; w++)
    if (strlen(*w) == n && !strncmp(*w, s, n))
      return 1;
  return 0;
}

/* 1 when s is one identifier that is not reserved. */
static int plain_identifier(const char *s) {
  size_t n = identifier_length(s);
  return n && s[n] == '\0' && !reserved(s, n);
}

/* 1 when s is a qualified name: identifiers joined by "::", optionally
 * starting with "::" (kf::add_rmsnorm_entry). */
static int qualified_name(const char *s) {
  if (!strncmp(s, "::", 2))
    s += 2;
  for (;;) {
    size_t n = identifier_length(s);
    if (!n || reserved(s, n))
      return 0;
    s += n;
    if (*s == '\0')
      return 1;
    if (strncmp(s, "::", 2) != 0)
      return 0;
    s += 2;
  }
}

static int parse_entry(kf_template *t, const cJSON *v) {
  if (!cJSON_IsString(v) || !*v->valuestring) {
    kf_error(t->path, "entry", "must name the device function template to call");
    return 1;
  }
  if (strlen(v->valuestring) > 256 || !qualified_name(v->valuestring)) {
    kf_error(t->path, "entry",
             "must be a C++ name such as \"kf::add_rmsnorm_entry\" (identifiers joined by "
             "\"::\"), got \"%.256s\"",
             v->valuestring);
    return 1;
  }
  t->entry = kf_xstrdup(v->valuestring);
  return 0;
}

/* The widths the template serves: 1 to max_width (optional, default
 * KF_MAX_WIDTH). */
static int parse_max_width(kf_template *t, const cJSON *v) {
  t->max_width = KF_MAX_WIDTH;
  if (!v)
    return 0;
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
      v->valuedouble > KF_MAX_WIDTH) {
    kf_error(t->path, "max_width", "must be an integer from 1 to %d, got %s", KF_MAX_WIDTH,
             cJSON_IsNumber(v) ? "a number out of range" : kf_json_type_name(v));
    return 1;
  }
  t->max_width = (int)v->valuedouble;
  return 0;
}

/* ---- params ---- */

/* 1 when v is a JSON number that is a whole number an int64 holds exactly. */
static int whole_number(const cJSON *v) {
  return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) &&
         fabs(v->valuedouble) < 9e15;
}

/* Reports "<path>.<member>: <message>" for one constraint of a param. */
static void constraint_error(const char *file, const char *path, const char *member,
                             const char *msg, const cJSON *v) {
  char *p = kf_xasprintf("%s.%s", path, member);
  kf_error(file, p, "%s, got %s", msg, kf_json_type_name(v));
  free(p);
}

/* "min" and "max": numbers (whole for an int param), min at most max. */
static int parse_bounds(const char *file, const char *path, const cJSON *spec, kf_param_spec *ps) {
  static const char *const names[2] = {"min", "max"};
  int errors = 0;
  for (int b = 0; b < 2; b++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, names[b]);
    if (!v)
      continue;
    if (!cJSON_IsNumber(v) || (!ps->is_float && !whole_number(v))) {
      constraint_error(file, path, names[b],
                       ps->is_float ? "must be a number" : "must be an integer", v);
      errors++;
    } else if (b == 0) {
      ps->has_min = 1;
      ps->min = v->valuedouble;
    } else {
      ps->has_max = 1;
      ps->max = v->valuedouble;
    }
  }
  if (ps->has_min && ps->has_max && ps->min > ps->max) {
    kf_error(file, path, "min %g is above max %g: no value is allowed", ps->min, ps->max);
    errors++;
  }
  return errors;
}

/* "multiple_of": a positive integer, for int params only. */
static int parse_multiple_of(const char *file, const char *path, const cJSON *spec,
                             kf_param_spec *ps) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, "multiple_of");
  if (!v)
    return 0;
  if (ps->is_float) {
    constraint_error(file, path, "multiple_of", "is for int parameters only", v);
    return 1;
  }
  if (!whole_number(v) || v->valuedouble < 1 || v->valuedouble > 2147483647.0) {
    char *p = kf_xasprintf("%s.multiple_of", path);
    if (cJSON_IsNumber(v))
      kf_error(file, p, "must be a positive integer, got %g", v->valuedouble);
    else
      kf_error(file, p, "must be a positive integer, got %s", kf_json_type_name(v));
    free(p);
    return 1;
  }
  ps->multiple_of = (int64_t)v->valuedouble;
  return 0;
}

/* An int list member ("one_of", "tuning"): a non-empty array of integers, for
 * int params only; each must meet min, max, multiple_of (and, for "tuning",
 * one_of), else it is a value no kernel could take. Returns the number of
 * problems; the values go to *out (NULL when the member is absent). */
static int parse_int_list(const char *file, const char *path, const cJSON *spec, const char *member,
                          const kf_param_spec *ps, int64_t **out, size_t *nout) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, member);
  *out = NULL;
  *nout = 0;
  if (!v)
    return 0;
  if (ps->is_float) {
    constraint_error(file, path, member, "is for int parameters only", v);
    return 1;
  }
  char *lp = kf_xasprintf("%s.%s", path, member);
  if (!cJSON_IsArray(v) || !v->child) {
    kf_error(file, lp, "must be a non-empty array of integers, got %s",
             cJSON_IsArray(v) ? "[]" : kf_json_type_name(v));
    free(lp);
    return 1;
  }
  int errors = 0;
  size_t n = (size_t)cJSON_GetArraySize(v), i = 0;
  int64_t *vals = kf_xcalloc(n, sizeof *vals);
  for (const cJSON *e = v->child; e; e = e->next, i++) {
    char *p = kf_xasprintf("%s[%zu]", lp, i);
    if (!whole_number(e)) {
      kf_error(file, p, "must be an integer, got %s", kf_json_type_name(e));
      errors++;
    } else {
      vals[i] = (int64_t)e->valuedouble;
      double d = (double)vals[i];
      int allowed = !ps->one_of;
      for (size_t j = 0; j < ps->n_one_of; j++)
        allowed |= ps->one_of[j] == vals[i];
      for (size_t j = 0; j < i; j++)
        if (vals[j] == vals[i]) {
          kf_error(file, p, "%lld is listed twice", (long long)vals[i]);
          errors++;
        }
      if ((ps->has_min && d < ps->min) || (ps->has_max && d > ps->max) ||
          (ps->multiple_of > 0 && vals[i] % ps->multiple_of != 0) || !allowed) {
        kf_error(file, p, "%lld breaks the parameter's min, max%s", (long long)vals[i],
                 ps->one_of ? ", multiple_of or one_of" : " or multiple_of");
        errors++;
      }
    }
    free(p);
  }
  free(lp);
  if (errors) {
    free(vals);
    return errors;
  }
  *out = vals;
  *nout = n;
  return 0;
}

static int parse_param_spec(const char *file, const char *path, const cJSON *spec,
                            kf_param_spec *ps) {
  static const char *const members[] = {"type",   "min",    "max",         "multiple_of",
                                        "one_of", "tuning", "description", NULL};
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
  errors += parse_bounds(file, path, spec, ps);
  errors += parse_multiple_of(file, path, spec, ps);
  errors += parse_int_list(file, path, spec, "one_of", ps, &ps->one_of, &ps->n_one_of);
  if (!errors)
    errors += parse_int_list(file, path, spec, "tuning", ps, &ps->tuning, &ps->n_tuning);
  return errors;
}

/* A parameter name: [A-Z][A-Z0-9_]*, at most 64 characters (it becomes a
 * member of the generated kf_params struct). */
static int upper_identifier(const char *s) {
  if (!isupper((unsigned char)s[0]) || strlen(s) > 64)
    return 0;
  for (; *s; s++)
    if (!isupper((unsigned char)*s) && !isdigit((unsigned char)*s) && *s != '_')
      return 0;
  return 1;
}

/* "params" is optional: a template may take no parameters. */
static int parse_params(kf_template *t, const cJSON *params) {
  if (!params)
    return 0;
  if (!cJSON_IsObject(params)) {
    kf_error(t->path, "params", "must be an object");
    return 1;
  }
  int errors = kf_json_check_unique(t->path, "params", params);
  t->nparams = (size_t)cJSON_GetArraySize(params);
  t->params = kf_xcalloc(t->nparams, sizeof *t->params);
  size_t i = 0;
  for (const cJSON *p = params->child; p; p = p->next, i++) {
    t->params[i].name = kf_xstrdup(p->string);
    char *path = kf_xasprintf("params.%s", p->string);
    if (!upper_identifier(p->string) || !strcmp(p->string, "W") || !strcmp(p->string, "MMA")) {
      kf_error(t->path, path,
               "parameter names are upper-case identifiers ([A-Z][A-Z0-9_]*) other than W and "
               "MMA");
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
  if (strlen(an->valuestring) > 64 || !plain_identifier(an->valuestring)) {
    char *p = kf_xasprintf("%s.name", path);
    kf_error(t->path, p, "must be a C identifier that is not a keyword, got \"%.64s\"",
             an->valuestring);
    free(p);
    return 1;
  }
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
  if (cJSON_GetArraySize(args) > KF_MAX_ARGS) {
    kf_error(t->path, "args", "has %d arguments; at most %d", cJSON_GetArraySize(args),
             KF_MAX_ARGS);
    return 1;
  }
  int errors = 0;
  t->nargs = (size_t)cJSON_GetArraySize(args);
  t->args = kf_xcalloc(t->nargs, sizeof *t->args);
  size_t i = 0;
  for (const cJSON *a = args->child; a; a = a->next, i++) {
    char *path = kf_xasprintf("args[%zu]", i);
    errors += parse_arg(t, path, a, &t->args[i]);
    for (size_t j = 0; j < i; j++)
      if (!strcmp(t->args[j].name, t->args[i].name) && strcmp(t->args[i].name, "?") != 0) {
        char *np = kf_xasprintf("%s.name", path);
        kf_error(t->path, np, "\"%s\" is also the name of args[%zu]", t->args[i].name, j);
        free(np);
        errors++;
        break;
      }
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
    return kf_xasprintf("%lld", (long long)kf_i64_of_double(v->valuedouble));
  if (cJSON_IsString(v) && *v->valuestring)
    return kf_xstrdup(v->valuestring);
  kf_error(file, path, "must be an integer or an expression string, got %s", kf_json_type_name(v));
  (*errors)++;
  return kf_xstrdup("0");
}

int kf_launch_dims_problem(const int64_t grid[3], const int64_t block[3], const int64_t cluster[3],
                           char *err, size_t errlen) {
  static const int64_t grid_max[3] = {2147483647, 65535, 65535};
  static const int64_t block_max[3] = {1024, 1024, 64};
  static const char xyz[3] = {'x', 'y', 'z'};
  for (int d = 0; d < 3; d++) {
    if (grid[d] < 1 || grid[d] > grid_max[d]) {
      snprintf(err, errlen, "grid[%d] = %lld; the grid's %c must be from 1 to %lld", d,
               (long long)grid[d], xyz[d], (long long)grid_max[d]);
      return d;
    }
    if (block[d] < 1 || block[d] > block_max[d]) {
      snprintf(err, errlen, "block[%d] = %lld; a block's %c must be from 1 to %lld", d,
               (long long)block[d], xyz[d], (long long)block_max[d]);
      return 3 + d;
    }
    if (cluster[d] < 1) {
      snprintf(err, errlen, "cluster[%d] = %lld; must be at least 1", d, (long long)cluster[d]);
      return 7 + d;
    }
  }
  if (block[0] * block[1] * block[2] > 1024) {
    snprintf(err, errlen, "a block of %lld x %lld x %lld = %lld threads; at most 1024",
             (long long)block[0], (long long)block[1], (long long)block[2],
             (long long)(block[0] * block[1] * block[2]));
    return 6;
  }
  return -1;
}

/* The dims that are plain numbers are checked against the limits of every
 * backend now, so that a schema such as "block": [1e9, 1, 1] is refused
 * whatever description names it (expressions are checked per width, for
 * each model: model.c). */
static int check_literal_dims(const kf_template *t, const cJSON *launch) {
  static const char *const names[3] = {"grid", "block", "cluster"};
  int64_t v[3][3] = {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}};
  for (int d = 0; d < 3; d++) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(launch, names[d]);
    int k = 0;
    for (const cJSON *e = cJSON_IsArray(arr) ? arr->child : NULL; e && k < 3; e = e->next, k++)
      if (cJSON_IsNumber(e) && e->valuedouble == floor(e->valuedouble))
        v[d][k] = fabs(e->valuedouble) < 9e15 ? (int64_t)e->valuedouble : INT64_MAX / 4;
  }
  char err[160];
  int at = kf_launch_dims_problem(v[0], v[1], v[2], err, sizeof err);
  if (at < 0)
    return 0;
  char *p = at == 6  ? kf_xstrdup("launch.block")
            : at < 6 ? kf_xasprintf("launch.%s[%d]", names[at / 3], at % 3)
                     : kf_xasprintf("launch.cluster[%d]", at - 7);
  kf_error(t->path, p, "%s", err);
  free(p);
  return 1;
}

/* launch.grid, launch.block and the optional launch.cluster and
 * launch.layer_grid: 3 expressions each; a malformed one reads as {1, 1, 1}
 * after its error. */
static int parse_launch_dims(kf_template *t, const cJSON *launch) {
  static const char *const names[4] = {"grid", "block", "cluster", "layer_grid"};
  char **dst[4] = {t->grid, t->block, t->cluster, t->layer_grid};
  int errors = 0;
  for (int d = 0; d < 4; d++) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(launch, names[d]);
    if (d >= 2 && !arr)
      continue; /* optional: no clusters; a layer kernel's items are the grid's blocks */
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
  return errors + check_literal_dims(t, launch);
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
  static const char *const members[] = {"grid",         "block",       "shared_bytes",
                                        "programmatic", "cluster",     "max_blocks_per_sm",
                                        "one_wave",     "cooperative", "layer_shared_bytes",
                                        "layer_grid",   "layer_pack",  NULL};
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
  const cJSON *ls = cJSON_GetObjectItemCaseSensitive(launch, "layer_shared_bytes");
  if (ls)
    t->layer_shared_bytes = launch_expr(t->path, "launch.layer_shared_bytes", ls, &errors);
  errors += parse_launch_flag(t, launch, "programmatic", &t->programmatic);
  errors += parse_launch_flag(t, launch, "one_wave", &t->one_wave);
  errors += parse_launch_flag(t, launch, "cooperative", &t->cooperative);
  errors += parse_launch_flag(t, launch, "layer_pack", &t->layer_pack);
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

/* ---- buffers ---- */

/* One element of "buffers": {"arg": <a non-const pointer argument>, "bytes":
 * <expression>, "init": "none" | "zero_once", "description": "..."}. */
static int parse_buffer(kf_template *t, const char *path, const cJSON *b, size_t index) {
  static const char *const members[] = {"arg", "bytes", "init", "description", NULL};
  kf_buffer_spec *bs = &t->buffers[index];
  if (!cJSON_IsObject(b)) {
    kf_error(t->path, path, "must be {\"arg\": …, \"bytes\": …, \"init\": …}");
    return 1;
  }
  int errors = kf_json_check_members(t->path, path, b, members);
  const cJSON *arg = cJSON_GetObjectItemCaseSensitive(b, "arg");
  char *sub = kf_xasprintf("%s.arg", path);
  if (!cJSON_IsString(arg)) {
    kf_error(t->path, sub, "must name a pointer argument");
    errors++;
  } else {
    bs->arg = kf_xstrdup(arg->valuestring);
    const kf_arg_spec *as = NULL;
    for (size_t i = 0; i < t->nargs; i++)
      if (t->args[i].name && strcmp(t->args[i].name, arg->valuestring) == 0)
        as = &t->args[i];
    if (!as) {
      kf_error(t->path, sub, "\"%s\" is not an argument of the template", arg->valuestring);
      errors++;
    } else if (!strchr(as->type, '*') || strncmp(as->type, "const ", 6) == 0) {
      kf_error(t->path, sub, "\"%s\" is \"%s\"; a buffer is a non-const pointer argument",
               arg->valuestring, as->type);
      errors++;
    }
    for (size_t i = 0; i < index; i++)
      if (t->buffers[i].arg && strcmp(t->buffers[i].arg, arg->valuestring) == 0) {
        kf_error(t->path, sub, "\"%s\" is declared twice", arg->valuestring);
        errors++;
      }
  }
  free(sub);
  sub = kf_xasprintf("%s.bytes", path);
  const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(b, "bytes");
  if (!bytes) {
    kf_error(t->path, sub, "missing: the buffer's size as an expression over the parameters and W");
    errors++;
  } else {
    bs->bytes = launch_expr(t->path, sub, bytes, &errors);
  }
  free(sub);
  const cJSON *init = cJSON_GetObjectItemCaseSensitive(b, "init");
  if (!cJSON_IsString(init) ||
      (strcmp(init->valuestring, "none") != 0 && strcmp(init->valuestring, "zero_once") != 0)) {
    sub = kf_xasprintf("%s.init", path);
    kf_error(t->path, sub,
             "must be \"none\" (any contents) or \"zero_once\" (zeroed when "
             "allocated, left as the next launch needs it by every launch)");
    free(sub);
    errors++;
  } else {
    bs->zero_once = strcmp(init->valuestring, "zero_once") == 0;
  }
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(b, "description");
  if (d && !cJSON_IsString(d)) {
    sub = kf_xasprintf("%s.description", path);
    kf_error(t->path, sub, "must be a string");
    free(sub);
    errors++;
  }
  return errors;
}

/* The optional "buffers" array (after the args, which it names). */
static int parse_buffers(kf_template *t, const cJSON *buffers) {
  if (!buffers)
    return 0;
  if (!cJSON_IsArray(buffers)) {
    kf_error(t->path, "buffers", "must be an array of {\"arg\", \"bytes\", \"init\"}");
    return 1;
  }
  int errors = 0;
  t->nbuffers = (size_t)cJSON_GetArraySize(buffers);
  t->buffers = kf_xcalloc(t->nbuffers ? t->nbuffers : 1, sizeof *t->buffers);
  size_t i = 0;
  for (const cJSON *b = buffers->child; b; b = b->next, i++) {
    char *path = kf_xasprintf("buffers[%zu]", i);
    errors += parse_buffer(t, path, b, i);
    free(path);
  }
  return errors;
}

/* ---- the whole schema ---- */

/* Checks every member of the schema into t; returns the number of problems
 * reported. */
static int parse_schema(kf_template *t, const cJSON *root) {
  static const char *const members[] = {"template",  "header", "entry",   "params",
                                        "args",      "launch", "buffers", "description",
                                        "max_width", "limits", NULL};
  if (!cJSON_IsObject(root)) {
    kf_error(t->path, "", "a template schema must be a JSON object");
    return 1;
  }
  int errors = kf_json_check_members(t->path, "", root, members);
  errors += check_template_name(t, root);
  errors += parse_header(t, cJSON_GetObjectItemCaseSensitive(root, "header"));
  errors += parse_entry(t, cJSON_GetObjectItemCaseSensitive(root, "entry"));
  errors += parse_max_width(t, cJSON_GetObjectItemCaseSensitive(root, "max_width"));
  errors += parse_params(t, cJSON_GetObjectItemCaseSensitive(root, "params"));
  errors += parse_args(t, cJSON_GetObjectItemCaseSensitive(root, "args"));
  errors += parse_launch(t, cJSON_GetObjectItemCaseSensitive(root, "launch"));
  errors += parse_buffers(t, cJSON_GetObjectItemCaseSensitive(root, "buffers"));
  errors += kf_limits_parse(t->path, "limits", cJSON_GetObjectItemCaseSensitive(root, "limits"),
                            &t->limits);
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
