/* Manifest parsing: <cache>/v1/manifests/<model>/<arch>.json, the only file
 * the runtime trusts (docs/contracts.md, "Manifest"). Every field the
 * runtime uses is checked here, so that the rest of the runtime can rely on
 * it: ids agree with model/kind/width/arch, checksums are 32 hex digits,
 * parameter types are from the contract's closed set with matching sizes,
 * paths stay inside the cache. A reason names the file and the field, or the
 * line:column of a JSON syntax error. */
#include "rt_internal.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parse_ctx {
  const char *path;
  rt_err *err;
} parse_ctx;

static kf_status bad(parse_ctx *c, const char *field, const char *fmt, ...) RT_PRINTF(3, 4);

static kf_status bad(parse_ctx *c, const char *field, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return rt_err_set(c->err, KF_ERR_BAD_MANIFEST, "%s: %s: error: %s", c->path, field, msg);
}

size_t rt_type_size(const char *type) {
  static const struct {
    const char *name;
    size_t size;
  } types[] = {{"const kf_bf16*", 8}, {"kf_bf16*", 8}, {"const float*", 8}, {"float*", 8},
               {"const int*", 8},     {"int*", 8},     {"int", 4},          {"float", 4},
               {"long long", 8}};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (strcmp(type, types[i].name) == 0)
      return types[i].size;
  return 0;
}

static const char *get_string(parse_ctx *c, const cJSON *obj, const char *key, const char *where,
                              kf_status *st) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  char field[256];
  snprintf(field, sizeof field, "%s%s", where, key);
  if (!cJSON_IsString(v) || !v->valuestring || !v->valuestring[0]) {
    *st = bad(c, field, v ? "must be a non-empty string" : "missing");
    return NULL;
  }
  return v->valuestring;
}

/* An integer in [lo, hi]; JSON numbers are doubles, so check integrality. */
static int get_int(parse_ctx *c, const cJSON *v, const char *field, double lo, double hi,
                   long long *out, kf_status *st) {
  if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi ||
      v->valuedouble != (double)(long long)v->valuedouble) {
    *st =
        v ? bad(c, field, "must be an integer in [%.0f, %.0f]", lo, hi) : bad(c, field, "missing");
    return -1;
  }
  *out = (long long)v->valuedouble;
  return 0;
}

static int valid_kind(const char *s) {
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
      return 0;
  return *s != '\0';
}

static int valid_symbol(const char *s) {
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '_'))
      return 0;
  return *s != '\0' && !(*s >= '0' && *s <= '9');
}

/* Relative, no "..", no empty or "." components: stays inside <cache>/v1. */
static int valid_relpath(const char *s) {
  const char *p = s;
  if (*s == '/' || *s == '\0')
    return 0;
  while (*p) {
    const char *end = strchr(p, '/');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
      return 0;
    p += n;
    if (*p == '/')
      p++;
  }
  return 1;
}

static char *dup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p)
    memcpy(p, s, n);
  return p;
}

static void kdesc_free(rt_kdesc *k) {
  free(k->id);
  free(k->kind);
  free(k->key);
  free(k->symbol);
  free(k->object);
  free(k->meta);
  for (int i = 0; i < k->nparams; i++) {
    free(k->params[i].name);
    free(k->params[i].type);
  }
  free(k->params);
}

void rt_manifest_free(rt_manifest *m) {
  for (int i = 0; i < m->nkernels; i++)
    kdesc_free(&m->kernels[i]);
  free(m->kernels);
  free(m->model);
  free(m->arch);
  memset(m, 0, sizeof *m);
}

static kf_status parse_dim3(parse_ctx *c, const cJSON *launch, const char *key, const char *where,
                            long long lo, unsigned out[3]) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(launch, key);
  char field[256];
  kf_status st = KF_OK;
  snprintf(field, sizeof field, "%s%s", where, key);
  if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != 3)
    return bad(c, field, arr ? "must be an array of 3 integers" : "missing");
  for (int i = 0; i < 3; i++) {
    long long v;
    char f[300];
    snprintf(f, sizeof f, "%s[%d]", field, i);
    if (get_int(c, cJSON_GetArrayItem(arr, i), f, (double)lo, 2147483647.0, &v, &st) != 0)
      return st;
    out[i] = (unsigned)v;
  }
  return KF_OK;
}

static kf_status parse_params(parse_ctx *c, const cJSON *arr, const char *where, rt_kdesc *k) {
  char field[256];
  kf_status st = KF_OK;
  int n;
  snprintf(field, sizeof field, "%sparams", where);
  if (!cJSON_IsArray(arr))
    return bad(c, field, arr ? "must be an array" : "missing");
  n = cJSON_GetArraySize(arr);
  if (n > RT_MAX_PARAMS)
    return bad(c, field, "%d parameters, at most %d supported", n, RT_MAX_PARAMS);
  k->params = calloc((size_t)(n ? n : 1), sizeof *k->params);
  if (!k->params)
    return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
  for (int i = 0; i < n; i++) {
    const cJSON *p = cJSON_GetArrayItem(arr, i);
    char pw[128];
    const char *name, *type;
    long long size;
    size_t want;
    snprintf(pw, sizeof pw, "%sparams[%d].", where, i);
    if (!cJSON_IsObject(p))
      return bad(c, field, "element %d must be an object", i);
    if (!(name = get_string(c, p, "name", pw, &st)) || !(type = get_string(c, p, "type", pw, &st)))
      return st;
    snprintf(field, sizeof field, "%stype", pw);
    if ((want = rt_type_size(type)) == 0)
      return bad(c, field, "unknown type '%s'", type);
    snprintf(field, sizeof field, "%ssize", pw);
    if (get_int(c, cJSON_GetObjectItemCaseSensitive(p, "size"), field, 1, 64, &size, &st) != 0)
      return st;
    if ((size_t)size != want)
      return bad(c, field, "%lld does not match type '%s' (%zu bytes)", size, type, want);
    k->params[i].name = dup(name);
    k->params[i].type = dup(type);
    k->params[i].size = want;
    k->nparams = i + 1;
    if (!k->params[i].name || !k->params[i].type)
      return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
  }
  return KF_OK;
}

static kf_status parse_kernel(parse_ctx *c, const cJSON *obj, int index, const rt_manifest *m,
                              rt_kdesc *k) {
  char where[64], field[128], want_id[512];
  const char *id, *kind, *key, *object, *meta, *checksum, *symbol;
  const cJSON *launch;
  long long width, size, shared;
  unsigned char keybin[16];
  kf_status st = KF_OK;

  snprintf(where, sizeof where, "kernels[%d].", index);
  if (!cJSON_IsObject(obj))
    return bad(c, "kernels", "element %d must be an object", index);
  if (!(id = get_string(c, obj, "id", where, &st)) ||
      !(kind = get_string(c, obj, "kind", where, &st)) ||
      !(key = get_string(c, obj, "key", where, &st)) ||
      !(object = get_string(c, obj, "object", where, &st)) ||
      !(meta = get_string(c, obj, "meta", where, &st)) ||
      !(checksum = get_string(c, obj, "checksum", where, &st)) ||
      !(symbol = get_string(c, obj, "symbol", where, &st)))
    return st;
  snprintf(field, sizeof field, "%swidth", where);
  if (get_int(c, cJSON_GetObjectItemCaseSensitive(obj, "width"), field, 1, 1 << 20, &width, &st) !=
      0)
    return st;
  snprintf(field, sizeof field, "%ssize", where);
  if (get_int(c, cJSON_GetObjectItemCaseSensitive(obj, "size"), field, 0, 9007199254740992.0, &size,
              &st) != 0)
    return st;

  snprintf(field, sizeof field, "%skind", where);
  if (!valid_kind(kind))
    return bad(c, field, "'%s' is not [a-z0-9_]+", kind);
  snprintf(want_id, sizeof want_id, "%s/%s/w%lld/%s", m->model, kind, width, m->arch);
  snprintf(field, sizeof field, "%sid", where);
  if (strcmp(id, want_id) != 0)
    return bad(c, field, "'%s' does not match model/kind/width/arch '%s'", id, want_id);
  snprintf(field, sizeof field, "%skey", where);
  if (rt_unhex16(key, keybin) != 0)
    return bad(c, field, "must be 32 hex digits");
  snprintf(field, sizeof field, "%schecksum", where);
  if (rt_unhex16(checksum, k->checksum) != 0)
    return bad(c, field, "must be 32 hex digits");
  snprintf(field, sizeof field, "%sobject", where);
  if (!valid_relpath(object))
    return bad(c, field, "'%s' must be a path relative to the cache's v1/", object);
  snprintf(field, sizeof field, "%smeta", where);
  if (!valid_relpath(meta))
    return bad(c, field, "'%s' must be a path relative to the cache's v1/", meta);
  snprintf(field, sizeof field, "%ssymbol", where);
  if (!valid_symbol(symbol))
    return bad(c, field, "'%s' is not a C identifier", symbol);

  if ((st = parse_params(c, cJSON_GetObjectItemCaseSensitive(obj, "params"), where, k)) != KF_OK)
    return st;
  launch = cJSON_GetObjectItemCaseSensitive(obj, "launch");
  snprintf(field, sizeof field, "%slaunch", where);
  if (!cJSON_IsObject(launch))
    return bad(c, field, launch ? "must be an object" : "missing");
  snprintf(field, sizeof field, "%slaunch.", where);
  if ((st = parse_dim3(c, launch, "grid", field, 1, k->grid)) != KF_OK ||
      (st = parse_dim3(c, launch, "block", field, 1, k->block)) != KF_OK)
    return st;
  snprintf(field, sizeof field, "%slaunch.shared_bytes", where);
  if (get_int(c, cJSON_GetObjectItemCaseSensitive(launch, "shared_bytes"), field, 0, 2147483647.0,
              &shared, &st) != 0)
    return st;

  k->width = (int)width;
  k->size = (unsigned long long)size;
  k->shared = (unsigned)shared;
  k->id = dup(id);
  k->kind = dup(kind);
  k->key = dup(key);
  k->symbol = dup(symbol);
  k->object = dup(object);
  k->meta = dup(meta);
  if (!k->id || !k->kind || !k->key || !k->symbol || !k->object || !k->meta)
    return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
  return KF_OK;
}

/* 1-based line and column of offset pos in text. */
static void line_col(const char *text, size_t pos, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < pos && text[i]; i++) {
    if (text[i] == '\n') {
      (*line)++;
      *col = 1;
    } else {
      (*col)++;
    }
  }
}

static kf_status parse_root(parse_ctx *c, const cJSON *root, rt_manifest *m) {
  const cJSON *kernels;
  const char *model, *arch, *backend;
  long long format;
  kf_status st = KF_OK;
  int n;

  if (!cJSON_IsObject(root))
    return bad(c, "(root)", "must be an object");
  /* The format first: a newer manifest may have any other shape. */
  if (get_int(c, cJSON_GetObjectItemCaseSensitive(root, "format"), "format", 1, 2147483647.0,
              &format, &st) != 0)
    return st;
  if (format > KF_MANIFEST_FORMAT)
    return rt_err_set(c->err, KF_ERR_FORMAT,
                      "%s: manifest format %lld is newer than this runtime "
                      "reads (%d): upgrade libkforge_rt to match the kforge "
                      "that wrote the cache",
                      c->path, format, KF_MANIFEST_FORMAT);
  m->format = (int)format;
  if (!(model = get_string(c, root, "model", "", &st)) ||
      !(arch = get_string(c, root, "arch", "", &st)) ||
      !(backend = get_string(c, root, "backend", "", &st)))
    return st;
  if (strcmp(backend, "cuda") == 0)
    m->backend = KF_BACKEND_CUDA;
  else if (strcmp(backend, "hip") == 0)
    m->backend = KF_BACKEND_HIP;
  else
    return bad(c, "backend", "'%s' is neither \"cuda\" nor \"hip\"", backend);
  if (!rt_arch_valid(m->backend, arch))
    return bad(c, "arch", "'%s' is not a %s arch name", arch, backend);
  m->model = dup(model);
  m->arch = dup(arch);
  if (!m->model || !m->arch)
    return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");

  kernels = cJSON_GetObjectItemCaseSensitive(root, "kernels");
  if (!cJSON_IsArray(kernels))
    return bad(c, "kernels", kernels ? "must be an array" : "missing");
  n = cJSON_GetArraySize(kernels);
  m->kernels = calloc((size_t)(n ? n : 1), sizeof *m->kernels);
  if (!m->kernels)
    return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
  for (int i = 0; i < n; i++) {
    m->nkernels = i + 1;
    if ((st = parse_kernel(c, cJSON_GetArrayItem(kernels, i), i, m, &m->kernels[i])) != KF_OK)
      return st;
    for (int j = 0; j < i; j++)
      if (strcmp(m->kernels[j].id, m->kernels[i].id) == 0) {
        char field[64];
        snprintf(field, sizeof field, "kernels[%d].id", i);
        return bad(c, field, "'%s' repeats kernels[%d]", m->kernels[i].id, j);
      }
  }
  return KF_OK;
}

kf_status rt_manifest_parse(const char *path, const char *text, size_t len, rt_manifest *m,
                            rt_err *err) {
  parse_ctx c = {path, err};
  const char *end = NULL;
  cJSON *root;
  kf_status st;

  memset(m, 0, sizeof *m);
  root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (!root) {
    int line, col;
    size_t pos = end && end >= text ? (size_t)(end - text) : 0;
    line_col(text, pos < len ? pos : len, &line, &col);
    return rt_err_set(err, KF_ERR_BAD_MANIFEST, "%s:%d:%d: error: malformed JSON in manifest", path,
                      line, col);
  }
  st = parse_root(&c, root, m);
  cJSON_Delete(root);
  if (st != KF_OK)
    rt_manifest_free(m);
  return st;
}

kf_status rt_manifest_load(const char *path, rt_manifest *m, rt_err *err) {
  char *text;
  size_t len;
  kf_status st;
  memset(m, 0, sizeof *m);
  if ((st = rt_file_read(path, &text, &len, err)) != KF_OK) {
    if (st == KF_ERR_IO)
      err->status = KF_ERR_BAD_MANIFEST;
    return err->status;
  }
  st = rt_manifest_parse(path, text, len, m, err);
  free(text);
  return st;
}
