/* Manifest parsing: <cache>/v1/manifests/<model>/<arch>.json, the only file
 * the runtime trusts (docs/contracts.md, "Manifest"). Every field the
 * runtime uses is checked here, so that the rest of the runtime can rely on
 * it: ids agree with model/kind/width/arch, checksums are 32 hex digits,
 * parameter types are from the contract's closed set with matching sizes,
 * paths stay inside the cache. A reason names the file and the field, or the
 * line:column of a JSON syntax error.
 *
 * The kernels' entries are parsed one at a time, after the header, and the
 * signatures after the entries: an eager open loads kernel i while entry
 * i+1 is parsed, instead of parsing the whole manifest (most of a cache's
 * startup work) before its first load. rt_json.c finds where the entries
 * and the signatures lie. */
#include "rt_internal.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where the parser is, so that a reason can name the field. The name is
 * only spelled out when something is wrong: formatting it for every field
 * of every kernel was most of the time a server spent opening a cache. */
typedef struct parse_ctx {
  const char *path;
  rt_err *err;
  const char *sig; /* kind whose "signatures" entry is being read, or NULL */
  int kernel;      /* index in "kernels", or -1 at the root */
  int param;       /* index in the kernel's "params", or -1 */
  const char *sub; /* "launch" while in the launch object, or NULL */
} parse_ctx;

static void field_name(const parse_ctx *c, const char *key, char *out, size_t n) {
  size_t o = 0;
  if (c->sig)
    o += (size_t)snprintf(out + o, n - o, "signatures.%s.", c->sig);
  if (c->kernel >= 0)
    o += (size_t)snprintf(out + o, n - o, "kernels[%d].", c->kernel);
  if (c->param >= 0 && o < n)
    o += (size_t)snprintf(out + o, n - o, "params[%d].", c->param);
  if (c->sub && o < n)
    o += (size_t)snprintf(out + o, n - o, "%s.", c->sub);
  if (o < n)
    snprintf(out + o, n - o, "%s", key);
}

static kf_status bad(parse_ctx *c, const char *key, const char *fmt, ...) RT_PRINTF(3, 4);

static kf_status bad(parse_ctx *c, const char *key, const char *fmt, ...) {
  char msg[512], field[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  field_name(c, key, field, sizeof field);
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

/* v, the member key of an object (NULL when missing), as a string. */
static const char *string_of(parse_ctx *c, const cJSON *v, const char *key, kf_status *st) {
  if (!cJSON_IsString(v) || !v->valuestring || !v->valuestring[0]) {
    *st = bad(c, key, v ? "must be a non-empty string" : "missing");
    return NULL;
  }
  return v->valuestring;
}

static const char *get_string(parse_ctx *c, const cJSON *obj, const char *key, kf_status *st) {
  return string_of(c, cJSON_GetObjectItemCaseSensitive(obj, key), key, st);
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
  free(k->id); /* the block of all six strings */
  for (int i = 0; i < k->nparams && !k->params_shared; i++) {
    free(k->params[i].name);
    free(k->params[i].type);
  }
  if (!k->params_shared)
    free(k->params);
  for (int i = 0; i < k->nbuffers; i++)
    free(k->buffers[i].arg);
  free(k->buffers);
}

void rt_manifest_free(rt_manifest *m) {
  for (int i = 0; i < m->nkernels; i++)
    kdesc_free(&m->kernels[i]);
  free(m->kernels);
  for (int i = 0; i < m->nsigs; i++) {
    for (int j = 0; j < m->sigs[i].nparams; j++) {
      free(m->sigs[i].params[j].name);
      free(m->sigs[i].params[j].type);
    }
    free(m->sigs[i].params);
    free(m->sigs[i].kind);
  }
  free(m->sigs);
  for (int i = 0; i < m->nlayer_types; i++) {
    for (int k = 0; k < m->layer_types[i].nkinds; k++)
      free(m->layer_types[i].kinds[k]);
    free(m->layer_types[i].kinds);
    free(m->layer_types[i].name);
    free(m->layer_types[i].layer);
  }
  free(m->layer_types);
  free(m->model);
  free(m->arch);
  free(m->description);
  free(m->path);
  free(m->text);
  memset(m, 0, sizeof *m);
}

static kf_status parse_dim3(parse_ctx *c, const cJSON *launch, const char *key, long long lo,
                            unsigned out[3]) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(launch, key);
  kf_status st = KF_OK;
  if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != 3)
    return bad(c, key, arr ? "must be an array of 3 integers" : "missing");
  int i = 0;
  for (const cJSON *e = arr->child; e; e = e->next, i++) {
    long long v;
    if (!cJSON_IsNumber(e) || e->valuedouble < (double)lo || e->valuedouble > 2147483647.0 ||
        e->valuedouble != (double)(long long)e->valuedouble) {
      char f[64];
      snprintf(f, sizeof f, "%s[%d]", key, i);
      return get_int(c, e, f, (double)lo, 2147483647.0, &v, &st), st;
    }
    out[i] = (unsigned)e->valuedouble;
  }
  return KF_OK;
}

static kf_status parse_params(parse_ctx *c, const cJSON *arr, rt_kdesc *k) {
  kf_status st = KF_OK;
  int n;
  if (!cJSON_IsArray(arr))
    return bad(c, "params", arr ? "must be an array" : "missing");
  n = cJSON_GetArraySize(arr);
  if (n > RT_MAX_PARAMS)
    return bad(c, "params", "%d parameters, at most %d supported", n, RT_MAX_PARAMS);
  k->params = calloc((size_t)(n ? n : 1), sizeof *k->params);
  if (!k->params)
    return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
  int i = 0;
  for (const cJSON *p = arr->child; p; p = p->next, i++) {
    const char *name, *type;
    long long size;
    size_t want;
    if (!cJSON_IsObject(p))
      return bad(c, "params", "element %d must be an object", i);
    c->param = i;
    if (!(name = get_string(c, p, "name", &st)) || !(type = get_string(c, p, "type", &st)))
      return st;
    if ((want = rt_type_size(type)) == 0)
      return bad(c, "type", "unknown type '%s'", type);
    if (get_int(c, cJSON_GetObjectItemCaseSensitive(p, "size"), "size", 1, 64, &size, &st) != 0)
      return st;
    if ((size_t)size != want)
      return bad(c, "size", "%lld does not match type '%s' (%zu bytes)", size, type, want);
    k->params[i].name = dup(name);
    k->params[i].type = dup(type);
    k->params[i].size = want;
    k->nparams = i + 1;
    if (!k->params[i].name || !k->params[i].type)
      return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
  }
  c->param = -1;
  return KF_OK;
}

/* id == "<model>/<kind>/w<width>/<arch>", compared without formatting; in a
 * manifest of several page sizes a kernel of page size P says so:
 * "w<width>p<P>". */
static int id_matches(const char *id, const rt_manifest *m, const char *kind, long long width,
                      int page_size) {
  size_t n = strlen(m->model);
  if (strncmp(id, m->model, n) != 0 || id[n] != '/')
    return 0;
  id += n + 1;
  n = strlen(kind);
  if (strncmp(id, kind, n) != 0 || id[n] != '/' || id[n + 1] != 'w')
    return 0;
  id += n + 2;
  char *end;
  if (strtoll(id, &end, 10) != width || end == id)
    return 0;
  if (m->page_size && page_size) {
    id = end;
    if (*id != 'p' || strtoll(id + 1, &end, 10) != page_size || end == id + 1)
      return 0;
  }
  return *end == '/' && strcmp(end + 1, m->arch) == 0;
}

/* The members of a kernel's entry, in the order the generator writes them. */
enum {
  F_ID,
  F_KIND,
  F_WIDTH,
  F_PAGE_SIZE,
  F_KEY,
  F_OBJECT,
  F_META,
  F_CHECKSUM,
  F_SIZE,
  F_SYMBOL,
  F_PARAMS,
  F_LAUNCH,
  F_BUFFERS,
  F_SHA256,
  F_COUNT
};
static const char *const kernel_fields[F_COUNT] = {
    "id",       "kind", "width",  "page_size", "key",    "object",  "meta",
    "checksum", "size", "symbol", "params",    "launch", "buffers", "sha256"};

/* Finds the members in one walk over the entry instead of one walk per
 * member: the first of a repeated name wins, as with
 * cJSON_GetObjectItemCaseSensitive. Each name is tried first where the
 * previous one matched, so the generator's order costs one compare each. */
static void kernel_members(const cJSON *obj, const cJSON *f[F_COUNT]) {
  int next = 0;
  memset(f, 0, F_COUNT * sizeof *f);
  for (const cJSON *e = obj->child; e; e = e->next)
    for (int j = 0; j < F_COUNT && e->string; j++) {
      int x = (next + j) % F_COUNT;
      if (strcmp(e->string, kernel_fields[x]) == 0) {
        if (!f[x])
          f[x] = e;
        next = x + 1;
        break;
      }
    }
}

/* Gives k, a kernel of kind, its kind's signature (c names the kernel in the
 * reason). A kind's kernels are neighbours (sorted by id), so the signature
 * that served the last kernel is tried first. */
static kf_status give_signature(parse_ctx *c, rt_manifest *m, const char *kind, rt_kdesc *k) {
  const rt_sig *sig = NULL;
  for (int j = 0; j < m->nsigs && !sig; j++) {
    int x = (m->sig_hint + j) % m->nsigs;
    if (strcmp(m->sigs[x].kind, kind) == 0) {
      sig = &m->sigs[x];
      m->sig_hint = x;
    }
  }
  if (!sig)
    return bad(c, "params", "missing, and \"signatures\" has no entry for kind '%s'", kind);
  k->params = sig->params;
  k->nparams = sig->nparams;
  k->params_shared = 1;
  return KF_OK;
}

/* "buffers": [{"arg": <parameter>, "bytes": <n>, "init": "none" | "zero_once"}]
 * (optional). That each arg names a pointer parameter is checked once the
 * parameter lists are known (check_buffers). */
static kf_status parse_buffers(parse_ctx *c, const cJSON *arr, rt_kdesc *k) {
  kf_status st = KF_OK;
  char sub[32];
  if (!cJSON_IsArray(arr))
    return bad(c, "buffers", "must be an array");
  int n = cJSON_GetArraySize(arr);
  if (n > RT_MAX_PARAMS)
    return bad(c, "buffers", "%d buffers, at most %d supported", n, RT_MAX_PARAMS);
  k->buffers = calloc((size_t)(n ? n : 1), sizeof *k->buffers);
  if (!k->buffers)
    return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
  int i = 0;
  for (const cJSON *b = arr->child; b; b = b->next, i++) {
    const char *arg, *init;
    long long bytes;
    snprintf(sub, sizeof sub, "buffers[%d]", i);
    c->sub = sub;
    if (!cJSON_IsObject(b))
      return bad(c, "arg", "the element must be an object");
    if (!(arg = get_string(c, b, "arg", &st)) || !(init = get_string(c, b, "init", &st)))
      return st;
    if (get_int(c, cJSON_GetObjectItemCaseSensitive(b, "bytes"), "bytes", 1, 1099511627776.0,
                &bytes, &st) != 0)
      return st;
    if (strcmp(init, "none") != 0 && strcmp(init, "zero_once") != 0)
      return bad(c, "init", "'%s' is neither \"none\" nor \"zero_once\"", init);
    for (int j = 0; j < i; j++)
      if (strcmp(k->buffers[j].arg, arg) == 0)
        return bad(c, "arg", "'%s' repeats buffers[%d]", arg, j);
    k->buffers[i].arg = dup(arg);
    k->buffers[i].bytes = (unsigned long long)bytes;
    k->buffers[i].zero_once = strcmp(init, "zero_once") == 0;
    k->nbuffers = i + 1;
    if (!k->buffers[i].arg)
      return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
  }
  c->sub = NULL;
  return KF_OK;
}

/* Every buffer names a non-const pointer parameter of its kernel. */
static kf_status check_buffers(parse_ctx *c, const rt_manifest *m) {
  char sub[32];
  for (int i = 0; i < m->nkernels; i++) {
    const rt_kdesc *k = &m->kernels[i];
    for (int b = 0; b < k->nbuffers; b++) {
      int p = rt_kdesc_param_index(k, k->buffers[b].arg);
      const char *type = p >= 0 ? k->params[p].type : NULL;
      if (type && strchr(type, '*') && strncmp(type, "const ", 6) != 0)
        continue;
      c->kernel = i;
      snprintf(sub, sizeof sub, "buffers[%d]", b);
      c->sub = sub;
      if (!type)
        return bad(c, "arg", "'%s' is not a parameter of the kernel", k->buffers[b].arg);
      return bad(c, "arg", "'%s' is '%s', not a writable pointer", k->buffers[b].arg, type);
    }
  }
  c->kernel = -1;
  c->sub = NULL;
  return KF_OK;
}

int rt_kdesc_param_index(const rt_kdesc *k, const char *name) {
  for (int i = 0; i < k->nparams && k->params; i++)
    if (strcmp(k->params[i].name, name) == 0)
      return i;
  return -1;
}

static kf_status parse_kernel(parse_ctx *c, const cJSON *obj, int index, rt_manifest *m,
                              rt_kdesc *k) {
  const char *id, *kind, *key, *object, *meta, *checksum, *symbol;
  const cJSON *launch, *f[F_COUNT];
  long long width, size, shared;
  unsigned char keybin[16];
  kf_status st = KF_OK;

  if (!cJSON_IsObject(obj))
    return bad(c, "kernels", "element %d must be an object", index);
  c->kernel = index;
  kernel_members(obj, f);
  if (!(id = string_of(c, f[F_ID], "id", &st)) || !(kind = string_of(c, f[F_KIND], "kind", &st)) ||
      !(key = string_of(c, f[F_KEY], "key", &st)) ||
      !(object = string_of(c, f[F_OBJECT], "object", &st)) ||
      !(meta = string_of(c, f[F_META], "meta", &st)) ||
      !(checksum = string_of(c, f[F_CHECKSUM], "checksum", &st)) ||
      !(symbol = string_of(c, f[F_SYMBOL], "symbol", &st)))
    return st;
  if (get_int(c, f[F_WIDTH], "width", 1, 1 << 20, &width, &st) != 0)
    return st;
  if (get_int(c, f[F_SIZE], "size", 0, 9007199254740992.0, &size, &st) != 0)
    return st;
  if (f[F_PAGE_SIZE]) {
    long long page_size;
    if (get_int(c, f[F_PAGE_SIZE], "page_size", 1, 1 << 20, &page_size, &st) != 0)
      return st;
    k->page_size = (int)page_size;
  }

  if (!valid_kind(kind))
    return bad(c, "kind", "'%s' is not [a-z0-9_]+", kind);
  if (!id_matches(id, m, kind, width, k->page_size)) {
    char page[16] = "";
    if (m->page_size && k->page_size)
      snprintf(page, sizeof page, "p%d", k->page_size);
    return bad(c, "id", "'%s' does not match model/kind/width/arch '%s/%s/w%lld%s/%s'", id,
               m->model, kind, width, page, m->arch);
  }
  if (rt_unhex16(key, keybin) != 0)
    return bad(c, "key", "must be 32 hex digits");
  if (rt_unhex16(checksum, k->checksum) != 0)
    return bad(c, "checksum", "must be 32 hex digits");
  if (f[F_SHA256]) {
    const char *sha = string_of(c, f[F_SHA256], "sha256", &st);
    if (!sha)
      return st;
    if (rt_unhex(sha, k->sha256, 32) != 0)
      return bad(c, "sha256", "must be 64 hex digits");
    k->has_sha256 = 1;
  }
  if (!valid_relpath(object))
    return bad(c, "object", "'%s' must be a path relative to the cache's v1/", object);
  if (!valid_relpath(meta))
    return bad(c, "meta", "'%s' must be a path relative to the cache's v1/", meta);
  if (!valid_symbol(symbol))
    return bad(c, "symbol", "'%s' is not a C identifier", symbol);

  /* the kernel's own parameter list, else its kind's signature, which
   * waits for rt_manifest_signatures while "signatures" is not parsed */
  if (f[F_PARAMS]) {
    if ((st = parse_params(c, f[F_PARAMS], k)) != KF_OK)
      return st;
  } else if (m->sigs_end) {
    k->params_shared = 1; /* params stay NULL until rt_manifest_signatures */
  } else if ((st = give_signature(c, m, kind, k)) != KF_OK) {
    return st;
  }
  launch = f[F_LAUNCH];
  if (!cJSON_IsObject(launch))
    return bad(c, "launch", launch ? "must be an object" : "missing");
  c->sub = "launch";
  if ((st = parse_dim3(c, launch, "grid", 1, k->grid)) != KF_OK ||
      (st = parse_dim3(c, launch, "block", 1, k->block)) != KF_OK)
    return st;
  if (get_int(c, cJSON_GetObjectItemCaseSensitive(launch, "shared_bytes"), "shared_bytes", 0,
              2147483647.0, &shared, &st) != 0)
    return st;
  const cJSON *pg = cJSON_GetObjectItemCaseSensitive(launch, "programmatic");
  if (pg && !cJSON_IsBool(pg))
    return bad(c, "programmatic", "must be true or false");
  k->programmatic = cJSON_IsTrue(pg);
  const cJSON *mb = cJSON_GetObjectItemCaseSensitive(launch, "max_blocks_per_sm");
  long long max_blocks = 0;
  if (mb && get_int(c, mb, "max_blocks_per_sm", 0, 65536.0, &max_blocks, &st) != 0)
    return st;
  k->max_blocks = (unsigned)max_blocks;
  const cJSON *ow = cJSON_GetObjectItemCaseSensitive(launch, "one_wave");
  if (ow && !cJSON_IsBool(ow))
    return bad(c, "one_wave", "must be true or false");
  k->one_wave = cJSON_IsTrue(ow);
  const cJSON *co = cJSON_GetObjectItemCaseSensitive(launch, "cooperative");
  if (co && !cJSON_IsBool(co))
    return bad(c, "cooperative", "must be true or false");
  k->cooperative = cJSON_IsTrue(co);
  const cJSON *pe = cJSON_GetObjectItemCaseSensitive(launch, "persistent");
  if (pe && !cJSON_IsBool(pe))
    return bad(c, "persistent", "must be true or false");
  k->persistent = cJSON_IsTrue(pe);
  c->sub = NULL;
  if (f[F_BUFFERS] && (st = parse_buffers(c, f[F_BUFFERS], k)) != KF_OK)
    return st;

  k->width = (int)width;
  k->size = (unsigned long long)size;
  k->shared = (unsigned)shared;
  /* the kernel's strings share one block, k->id first: one allocation per
   * kernel instead of six (opening a cache is mostly this parse) */
  const char *src[6] = {id, kind, key, symbol, object, meta};
  char **dst[6] = {&k->id, &k->kind, &k->key, &k->symbol, &k->object, &k->meta};
  size_t len[6], total = 0;
  for (int i = 0; i < 6; i++)
    total += len[i] = strlen(src[i]) + 1;
  char *block = malloc(total);
  if (!block)
    return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
  for (int i = 0; i < 6; i++) {
    memcpy(block, src[i], len[i]);
    *dst[i] = block;
    block += len[i];
  }
  c->kernel = -1;
  return KF_OK;
}

/* "signatures": {"<kind>": {"params": [...]}}: one parameter list for all
 * the kernels of a kind, so that a manifest of many kernels stays small to
 * parse (opening a cache is mostly parsing its manifest). Optional. A
 * streamed manifest parses them after its header (rt_manifest_signatures):
 * loading needs no parameter list, so an eager open's first load need not
 * wait for them. */
static kf_status parse_signatures(parse_ctx *c, const cJSON *sigs, rt_manifest *m) {
  kf_status st = KF_OK;
  if (!sigs)
    return KF_OK;
  if (!cJSON_IsObject(sigs))
    return bad(c, "signatures", "must be an object of kind: {\"params\": [...]}");
  int n = cJSON_GetArraySize(sigs);
  m->sigs = calloc((size_t)(n ? n : 1), sizeof *m->sigs);
  if (!m->sigs)
    return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
  for (const cJSON *e = sigs->child; e; e = e->next) {
    rt_kdesc tmp;
    memset(&tmp, 0, sizeof tmp);
    c->sig = e->string;
    if (!valid_kind(e->string))
      return bad(c, "params", "'%s' is not a kind ([a-z0-9_]+)", e->string);
    if (!cJSON_IsObject(e))
      return bad(c, "params", "the entry must be an object with \"params\"");
    st = parse_params(c, cJSON_GetObjectItemCaseSensitive(e, "params"), &tmp);
    rt_sig *sg = &m->sigs[m->nsigs++];
    sg->kind = dup(e->string);
    sg->params = tmp.params;
    sg->nparams = tmp.nparams;
    if (st != KF_OK)
      return st;
    if (!sg->kind)
      return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < m->nsigs - 1; i++)
      if (strcmp(m->sigs[i].kind, sg->kind) == 0)
        return bad(c, "params", "kind '%s' has two signatures", sg->kind);
  }
  c->sig = NULL;
  return KF_OK;
}

static int cmp_kdesc_id(const void *a, const void *b) {
  return strcmp((*(const rt_kdesc *const *)a)->id, (*(const rt_kdesc *const *)b)->id);
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

/* A syntax error at stop (where cJSON gave up), by line and column. */
static kf_status malformed(const char *path, const char *text, size_t len, const char *stop,
                           rt_err *err) {
  int line, col;
  size_t pos = stop && stop >= text ? (size_t)(stop - text) : 0;
  line_col(text, pos < len ? pos : len, &line, &col);
  return rt_err_set(err, KF_ERR_BAD_MANIFEST, "%s:%d:%d: error: malformed JSON in manifest", path,
                    line, col);
}

/* "layer_types" (optional): [{"name", "count", "kinds": [kinds, in order]}];
 * that every kind has kernels is checked once they are all parsed
 * (check_layer_kinds). */
static kf_status parse_layer_types(parse_ctx *c, const cJSON *lts, rt_manifest *m) {
  kf_status st = KF_OK;
  int n = cJSON_GetArraySize(lts);
  if (!cJSON_IsArray(lts) || n < 1)
    return bad(c, "layer_types", "must be a non-empty array");
  if (!(m->layer_types = calloc((size_t)n, sizeof *m->layer_types)))
    return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
  int i = 0;
  for (const cJSON *e = lts->child; e; e = e->next, i++) {
    rt_layer_type *t = &m->layer_types[m->nlayer_types++];
    char key[64];
    snprintf(key, sizeof key, "layer_types[%d]", i);
    if (!cJSON_IsObject(e))
      return bad(c, key, "must be an object");
    const char *name;
    long long count;
    snprintf(key, sizeof key, "layer_types[%d].name", i);
    if (!(name = get_string(c, e, "name", &st)))
      return bad(c, key, "must be a non-empty string");
    if (!(t->name = dup(name)))
      return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
    snprintf(key, sizeof key, "layer_types[%d].count", i);
    if (get_int(c, cJSON_GetObjectItemCaseSensitive(e, "count"), key, 0, 1000000.0, &count, &st))
      return st;
    t->count = (int)count;
    const cJSON *kinds = cJSON_GetObjectItemCaseSensitive(e, "kinds");
    int nk = cJSON_GetArraySize(kinds);
    snprintf(key, sizeof key, "layer_types[%d].kinds", i);
    if (!cJSON_IsArray(kinds) || nk < 1)
      return bad(c, key, kinds ? "must be a non-empty array of kinds" : "missing");
    if (!(t->kinds = calloc((size_t)nk, sizeof *t->kinds)))
      return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
    for (const cJSON *k = kinds->child; k; k = k->next) {
      if (!cJSON_IsString(k) || !valid_kind(k->valuestring)) {
        snprintf(key, sizeof key, "layer_types[%d].kinds[%d]", i, t->nkinds);
        return bad(c, key, "must be a kind name ([a-z0-9_])");
      }
      if (!(t->kinds[t->nkinds++] = dup(k->valuestring)))
        return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
    }
    const cJSON *layer = cJSON_GetObjectItemCaseSensitive(e, "layer");
    if (layer) {
      snprintf(key, sizeof key, "layer_types[%d].layer", i);
      if (!cJSON_IsString(layer) || !valid_kind(layer->valuestring))
        return bad(c, key, "must be a kind name ([a-z0-9_])");
      if (!(t->layer = dup(layer->valuestring)))
        return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
    }
  }
  return KF_OK;
}

static int has_kind(const rt_manifest *m, const char *kind) {
  for (int j = 0; j < m->nkernels; j++)
    if (m->kernels[j].kind && strcmp(m->kernels[j].kind, kind) == 0)
      return 1;
  return 0;
}

/* Every kind a layer type names, its layer kind too, has kernels in the
 * manifest. */
static kf_status check_layer_kinds(parse_ctx *c, const rt_manifest *m) {
  char key[64];
  for (int i = 0; i < m->nlayer_types; i++) {
    const rt_layer_type *t = &m->layer_types[i];
    for (int k = 0; k < t->nkinds; k++)
      if (!has_kind(m, t->kinds[k])) {
        snprintf(key, sizeof key, "layer_types[%d].kinds[%d]", i, k);
        return bad(c, key, "'%s' has no kernel in the manifest", t->kinds[k]);
      }
    if (t->layer && !has_kind(m, t->layer)) {
      snprintf(key, sizeof key, "layer_types[%d].layer", i);
      return bad(c, key, "'%s' has no kernel in the manifest", t->layer);
    }
  }
  return KF_OK;
}

/* Everything but the kernels' entries (and "signatures" when they wait for
 * rt_manifest_signatures); *kernels is the "kernels" array. */
static kf_status parse_header(parse_ctx *c, const cJSON *root, rt_manifest *m,
                              const cJSON **kernels) {
  const char *model, *arch, *backend;
  long long format;
  kf_status st = KF_OK;

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
  if (!(model = get_string(c, root, "model", &st)) || !(arch = get_string(c, root, "arch", &st)) ||
      !(backend = get_string(c, root, "backend", &st)))
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
  /* optional: only the hint of a refusal names it */
  const cJSON *description = cJSON_GetObjectItemCaseSensitive(root, "description");
  if (description) {
    const char *d = string_of(c, description, "description", &st);
    if (!d)
      return st;
    if (!(m->description = dup(d)))
      return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
  }

  /* optional: a manifest of several page sizes names the default one */
  const cJSON *page_size = cJSON_GetObjectItemCaseSensitive(root, "page_size");
  if (page_size) {
    long long p;
    if (get_int(c, page_size, "page_size", 1, 1 << 20, &p, &st) != 0)
      return st;
    m->page_size = (int)p;
  }

  const cJSON *lts = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
  if (lts && (st = parse_layer_types(c, lts, m)) != KF_OK)
    return st;

  if (!m->sigs_end &&
      (st = parse_signatures(c, cJSON_GetObjectItemCaseSensitive(root, "signatures"), m)) != KF_OK)
    return st;
  *kernels = cJSON_GetObjectItemCaseSensitive(root, "kernels");
  if (!cJSON_IsArray(*kernels))
    return bad(c, "kernels", *kernels ? "must be an array" : "missing");
  return KF_OK;
}

/* ids are unique: sort a view of them and compare neighbours */
static kf_status check_ids(parse_ctx *c, const rt_manifest *m) {
  int n = m->nkernels;
  kf_status st = KF_OK;
  const rt_kdesc **byid = calloc((size_t)(n ? n : 1), sizeof *byid);
  if (!byid)
    return rt_err_set(c->err, KF_ERR_NO_MEMORY, "out of memory");
  for (int i = 0; i < n; i++)
    byid[i] = &m->kernels[i];
  qsort(byid, (size_t)n, sizeof *byid, cmp_kdesc_id);
  for (int i = 1; i < n && st == KF_OK; i++)
    if (strcmp(byid[i]->id, byid[i - 1]->id) == 0) {
      int a = (int)(byid[i - 1] - m->kernels), b = (int)(byid[i] - m->kernels);
      c->kernel = a > b ? a : b;
      st = bad(c, "id", "'%s' repeats kernels[%d]", byid[i]->id, a < b ? a : b);
    }
  free(byid);
  return st;
}

/* Parses the header of text (which m takes over). When the scanner finds
 * the text well-formed, cJSON parses it with the kernels' entries and the
 * signatures cut out, and they wait for rt_manifest_kernel and
 * rt_manifest_signatures; otherwise (or should cJSON disagree) cJSON parses
 * the whole text as it always did, entries included, so that a syntax error
 * is reported where cJSON finds it. */
static kf_status begin(const char *path, char *text, size_t len, rt_manifest *m, rt_err *err) {
  parse_ctx c = {path, err, NULL, -1, -1, NULL};
  rt_json_layout lay;
  const cJSON *kernels = NULL;
  cJSON *root = NULL;
  int streamed = 0;
  kf_status st;

  memset(m, 0, sizeof *m);
  m->text = text;
  if (!(m->path = dup(path)))
    return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
  if (rt_json_scan_manifest(text, len, &lay) == 0 && lay.kernels_end > 0) {
    /* the header: "kernels" becomes [], "signatures" {} (each is >= 1 byte) */
    struct cut {
      size_t from, to;
      const char *with;
    } cut[2] = {{lay.kernels_start, lay.kernels_end, "[]"}, {lay.sigs_start, lay.sigs_end, "{}"}};
    int ncut = lay.sigs_end > 0 ? 2 : 1;
    size_t hlen = 0, at = 0;
    char *head = malloc(len + 2 * 2);
    if (!head)
      return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
    if (ncut == 2 && cut[1].from < cut[0].from) {
      struct cut first = cut[1];
      cut[1] = cut[0];
      cut[0] = first;
    }
    for (int j = 0; j < ncut; j++) {
      memcpy(head + hlen, text + at, cut[j].from - at);
      hlen += cut[j].from - at;
      memcpy(head + hlen, cut[j].with, 2);
      hlen += 2;
      at = cut[j].to;
    }
    memcpy(head + hlen, text + at, len - at);
    hlen += len - at;
    root = cJSON_ParseWithLength(head, hlen);
    free(head);
    if ((streamed = root != NULL) != 0) {
      m->sigs_start = lay.sigs_start;
      m->sigs_end = lay.sigs_end;
    }
  }
  if (!root) {
    const char *stop = NULL;
    if (!(root = cJSON_ParseWithLengthOpts(text, len, &stop, 0)))
      return malformed(path, text, len, stop, err);
  }
  st = parse_header(&c, root, m, &kernels);
  if (st == KF_OK) {
    int n = streamed ? lay.nkernels : cJSON_GetArraySize(kernels);
    if (!(m->kernels = calloc((size_t)(n ? n : 1), sizeof *m->kernels)))
      st = rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
    else
      m->nkernels = n;
  }
  if (st == KF_OK && streamed) {
    m->next = lay.kernels_start + 1;
    m->end = lay.kernels_end - 1;
  } else if (st == KF_OK) {
    int i = 0;
    for (const cJSON *e = kernels->child; e && st == KF_OK; e = e->next, i++)
      if ((st = parse_kernel(&c, e, i, m, &m->kernels[i])) == KF_OK)
        m->nparsed = i + 1;
  }
  cJSON_Delete(root);
  return st;
}

kf_status rt_manifest_open_at(const rt_root *r, const char *rel, rt_manifest *m, rt_err *err) {
  char *text, *path;
  size_t len;
  kf_status st;
  memset(m, 0, sizeof *m);
  if (rt_root_read(r, rel, 1, &text, &len, err) != KF_OK) {
    if (err->status == KF_ERR_IO)
      err->status = KF_ERR_BAD_MANIFEST;
    return err->status;
  }
  if ((st = rt_manifest_check_signature(r, rel, text, len, err)) != KF_OK) {
    free(text);
    return st;
  }
  if (!(path = rt_path_join(r->v1, rel))) {
    free(text);
    return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
  }
  st = begin(path, text, len, m, err);
  free(path);
  return st;
}

kf_status rt_manifest_open(const char *path, rt_manifest *m, rt_err *err) {
  char *text;
  size_t len;
  memset(m, 0, sizeof *m);
  if (rt_file_read(path, &text, &len, err) != KF_OK) {
    if (err->status == KF_ERR_IO)
      err->status = KF_ERR_BAD_MANIFEST;
    return err->status;
  }
  return begin(path, text, len, m, err);
}

static kf_status parse_entry(rt_manifest *m, int i, rt_err *err) {
  parse_ctx c = {m->path, err, NULL, -1, -1, NULL};
  const char *stop = NULL;
  rt_kdesc *k;
  cJSON *entry;
  size_t at = m->next;
  kf_status st;

  if (i < m->nparsed)
    return KF_OK;
  if (i != m->nparsed || i >= m->nkernels || !m->text)
    return rt_err_set(err, KF_ERR_INVALID_ARGUMENT, "%s: kernels[%d] parsed out of order",
                      m->path ? m->path : "manifest", i);
  k = &m->kernels[i];
  entry = cJSON_ParseWithLengthOpts(m->text + at, m->end - at, &stop, 0);
  if (!entry)
    return malformed(m->path, m->text, m->end, stop, err);
  st = parse_kernel(&c, entry, i, m, k);
  cJSON_Delete(entry);
  if (st != KF_OK) {
    kdesc_free(k); /* kernels past nparsed stay zero */
    memset(k, 0, sizeof *k);
    return st;
  }
  /* a comma before the next entry, the bracket after the last (the scanner
   * found them; cJSON agrees unless it reads an entry differently) */
  for (at = (size_t)(stop - m->text); at < m->end && (unsigned char)m->text[at] <= 32;)
    at++;
  if (i + 1 < m->nkernels ? at >= m->end || m->text[at] != ',' : at != m->end) {
    kdesc_free(k);
    memset(k, 0, sizeof *k);
    return malformed(m->path, m->text, m->end, m->text + at, err);
  }
  m->next = at + 1;
  m->nparsed = i + 1;
  return KF_OK;
}

kf_status rt_manifest_kernel(rt_manifest *m, int i, rt_err *err) {
  kf_status st = parse_entry(m, i, err);
  if (st == KF_ERR_BAD_MANIFEST && m->sigs_end) {
    /* A whole parse reads the signatures first and gives each entry its
     * kind's list as it goes: with them parsed, the entry's reason (or an
     * earlier one) is the one that parse gives. */
    if ((st = rt_manifest_signatures(m, err)) == KF_OK)
      st = parse_entry(m, i, err);
  }
  return st;
}

kf_status rt_manifest_signatures(rt_manifest *m, rt_err *err) {
  parse_ctx c = {m->path, err, NULL, -1, -1, NULL};
  kf_status st;
  if (m->sigs_end) {
    size_t at = m->sigs_start, end = m->sigs_end;
    const char *stop = NULL;
    cJSON *sigs = cJSON_ParseWithLengthOpts(m->text + at, end - at, &stop, 0);
    m->sigs_start = m->sigs_end = 0;
    if (!sigs)
      return malformed(m->path, m->text, end, stop, err);
    st = parse_signatures(&c, sigs, m);
    cJSON_Delete(sigs);
    if (st != KF_OK)
      return st;
  }
  for (int i = 0; i < m->nparsed; i++)
    if (m->kernels[i].params_shared && !m->kernels[i].params) {
      c.kernel = i;
      if ((st = give_signature(&c, m, m->kernels[i].kind, &m->kernels[i])) != KF_OK)
        return st;
    }
  return KF_OK;
}

kf_status rt_manifest_finish(rt_manifest *m, rt_err *err) {
  parse_ctx c = {m->path, err, NULL, -1, -1, NULL};
  kf_status st = KF_OK;
  for (int i = m->nparsed; i < m->nkernels && st == KF_OK; i++)
    st = rt_manifest_kernel(m, i, err);
  if (st == KF_OK)
    st = rt_manifest_signatures(m, err);
  if (st == KF_OK)
    st = check_buffers(&c, m);
  if (st == KF_OK)
    st = check_layer_kinds(&c, m);
  if (st == KF_OK && (st = check_ids(&c, m)) == KF_OK) {
    /* nothing refers to the text: entries copy what they keep */
    free(m->text);
    free(m->path);
    m->text = m->path = NULL;
  }
  return st;
}

kf_status rt_manifest_parse(const char *path, const char *text, size_t len, rt_manifest *m,
                            rt_err *err) {
  char *copy = malloc(len + 1);
  kf_status st;
  memset(m, 0, sizeof *m);
  if (!copy)
    return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
  memcpy(copy, text, len);
  copy[len] = '\0';
  if ((st = begin(path, copy, len, m, err)) == KF_OK)
    st = rt_manifest_finish(m, err);
  if (st != KF_OK)
    rt_manifest_free(m);
  return st;
}

kf_status rt_manifest_load(const char *path, rt_manifest *m, rt_err *err) {
  kf_status st = rt_manifest_open(path, m, err);
  if (st == KF_OK)
    st = rt_manifest_finish(m, err);
  if (st != KF_OK)
    rt_manifest_free(m);
  return st;
}

kf_status rt_manifest_check_place(const rt_manifest *m, const char *model, const char *path,
                                  rt_err *err) {
  const char *base = strrchr(path, '/');
  size_t alen = strlen(m->arch);
  base = base ? base + 1 : path;
  if (strcmp(m->model, model) != 0)
    return rt_err_set(err, KF_ERR_BAD_MANIFEST,
                      "%s: model: error: '%s' in a manifest of model '%s'", path, m->model, model);
  if (strncmp(base, m->arch, alen) != 0 || strcmp(base + alen, ".json") != 0)
    return rt_err_set(err, KF_ERR_BAD_MANIFEST,
                      "%s: arch: error: '%s' in the manifest file of another arch", path, m->arch);
  return KF_OK;
}

/* Past the refused entry i (kernels[i] stays zero): where entry i + 1
 * starts, as parse_entry would have left it. -1 when the text is malformed
 * there. */
static int skip_entry(rt_manifest *m, int i) {
  size_t at = rt_json_skip(m->text, m->end, m->next);
  if (at == 0)
    return -1;
  while (at < m->end && (unsigned char)m->text[at] <= 32)
    at++;
  if (i + 1 < m->nkernels ? at >= m->end || m->text[at] != ',' : at != m->end)
    return -1;
  m->next = at + 1;
  m->nparsed = i + 1;
  return 0;
}

kf_status rt_manifest_verify(const rt_root *r, const char *rel, const char *model, rt_manifest *m,
                             void (*bad_entry)(void *ctx, int i, const rt_err *e), void *ctx,
                             rt_err *err) {
  parse_ctx c = {NULL, err, NULL, -1, -1, NULL};
  kf_status st;
  int n;
  const rt_kdesc **byid;
  if ((st = rt_manifest_open_at(r, rel, m, err)) != KF_OK ||
      (st = rt_manifest_signatures(m, err)) != KF_OK ||
      (st = rt_manifest_check_place(m, model, m->path, err)) != KF_OK)
    return st;
  c.path = m->path;
  for (int i = m->nparsed; i < m->nkernels; i++) {
    rt_err e;
    if (rt_manifest_kernel(m, i, &e) == KF_OK)
      continue;
    if (e.status != KF_ERR_BAD_MANIFEST || !m->text || skip_entry(m, i) != 0) {
      *err = e; /* not one entry's fault: the whole text is refused */
      return e.status;
    }
    bad_entry(ctx, i, &e);
  }
  /* every repeated id (the runtime names the first) */
  n = m->nkernels;
  if (!(byid = calloc((size_t)(n ? n : 1), sizeof *byid)))
    return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
  int k = 0;
  for (int i = 0; i < n; i++)
    if (m->kernels[i].id)
      byid[k++] = &m->kernels[i];
  qsort(byid, (size_t)k, sizeof *byid, cmp_kdesc_id);
  for (int i = 1; i < k; i++)
    if (strcmp(byid[i]->id, byid[i - 1]->id) == 0) {
      int a = (int)(byid[i - 1] - m->kernels), b = (int)(byid[i] - m->kernels);
      rt_err e;
      c.err = &e;
      c.kernel = a > b ? a : b;
      bad(&c, "id", "'%s' repeats kernels[%d]", byid[i]->id, a < b ? a : b);
      bad_entry(ctx, c.kernel, &e);
    }
  free(byid);
  return KF_OK;
}
