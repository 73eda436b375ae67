/* manifest.c: writing and reading manifests (see manifest.h). The writer
 * emits the members in one fixed order, so that a rebuild of the same
 * kernels rewrites nothing. */
#define _GNU_SOURCE
#include "manifest.h"
#include "util.h"

#include "json.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#ifndef KFORGE_VERSION
#define KFORGE_VERSION "0.1.0"
#endif

void kf_manifest_init(kf_manifest *m, const char *model, const char *arch, const char *backend) {
  memset(m, 0, sizeof *m);
  m->generator = kf_xstrdup("kforge " KFORGE_VERSION);
  m->model = kf_xstrdup(model);
  m->arch = kf_xstrdup(arch);
  m->backend = kf_xstrdup(backend);
}

kf_manifest_signature *kf_manifest_signature_of(const kf_manifest *m, const char *kind) {
  for (size_t i = 0; i < m->nsignatures; i++)
    if (!strcmp(m->signatures[i].kind, kind))
      return &m->signatures[i];
  return NULL;
}

kf_manifest_signature *kf_manifest_add_signature(kf_manifest *m, const char *kind) {
  m->signatures = kf_xpush(m->signatures, m->nsignatures, sizeof *m->signatures);
  kf_manifest_signature *s = &m->signatures[m->nsignatures++];
  memset(s, 0, sizeof *s);
  s->kind = kf_xstrdup(kind);
  return s;
}

void kf_manifest_add_param(kf_manifest_signature *s, const char *name, const char *type, int size) {
  s->params = kf_xpush(s->params, s->nparams, sizeof *s->params);
  kf_manifest_param *p = &s->params[s->nparams++];
  p->name = kf_xstrdup(name);
  p->type = kf_xstrdup(type);
  p->size = size;
}

static kf_manifest_kernel *new_kernel(kf_manifest *m) {
  m->kernels = kf_xpush(m->kernels, m->nkernels, sizeof *m->kernels);
  kf_manifest_kernel *k = &m->kernels[m->nkernels++];
  memset(k, 0, sizeof *k);
  for (int d = 0; d < 3; d++)
    k->launch.cluster[d] = 1;
  return k;
}

kf_manifest_kernel *kf_manifest_add_kernel(kf_manifest *m, const char *id, const char *kind,
                                           int width, const char *key, const char *object_name,
                                           const char *checksum, int64_t size, const char *symbol) {
  kf_manifest_kernel *k = new_kernel(m);
  k->id = kf_xstrdup(id);
  k->kind = kf_xstrdup(kind);
  k->width = width;
  k->key = kf_xstrdup(key);
  k->object = kf_xasprintf("objects/%.2s/%s/%s", key, key, object_name);
  k->meta = kf_xasprintf("objects/%.2s/%s/meta.json", key, key);
  k->checksum = kf_xstrdup(checksum);
  k->has_size = 1;
  k->size = size;
  k->symbol = kf_xstrdup(symbol);
  k->launch.has_dims = 1;
  return k;
}

/* ---- writing ---- */

static void add_dims(cJSON *obj, const char *name, const int64_t v[3]) {
  cJSON *a = cJSON_AddArrayToObject(obj, name);
  for (int d = 0; d < 3; d++)
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[d]));
}

static cJSON *kernel_json(const kf_manifest_kernel *k) {
  cJSON *e = cJSON_CreateObject();
  cJSON_AddStringToObject(e, "id", k->id);
  cJSON_AddStringToObject(e, "kind", k->kind);
  cJSON_AddNumberToObject(e, "width", k->width);
  if (k->page_size)
    cJSON_AddNumberToObject(e, "page_size", k->page_size);
  cJSON_AddStringToObject(e, "key", k->key);
  cJSON_AddStringToObject(e, "object", k->object);
  cJSON_AddStringToObject(e, "meta", k->meta);
  cJSON_AddStringToObject(e, "checksum", k->checksum);
  if (k->sha256)
    cJSON_AddStringToObject(e, "sha256", k->sha256);
  cJSON_AddNumberToObject(e, "size", (double)k->size);
  cJSON_AddStringToObject(e, "symbol", k->symbol);
  const kf_manifest_launch *l = &k->launch;
  cJSON *launch = cJSON_AddObjectToObject(e, "launch");
  add_dims(launch, "grid", l->grid);
  add_dims(launch, "block", l->block);
  cJSON_AddNumberToObject(launch, "shared_bytes", (double)l->shared_bytes);
  if (l->programmatic)
    cJSON_AddTrueToObject(launch, "programmatic");
  if (l->one_wave)
    cJSON_AddTrueToObject(launch, "one_wave");
  if (l->max_blocks_per_sm > 0)
    cJSON_AddNumberToObject(launch, "max_blocks_per_sm", (double)l->max_blocks_per_sm);
  if (l->cluster[0] * l->cluster[1] * l->cluster[2] > 1)
    add_dims(launch, "cluster", l->cluster);
  if (l->cooperative)
    cJSON_AddTrueToObject(launch, "cooperative");
  if (l->persistent)
    cJSON_AddTrueToObject(launch, "persistent");
  if (k->nbuffers) {
    cJSON *bufs = cJSON_AddArrayToObject(e, "buffers");
    for (size_t i = 0; i < k->nbuffers; i++) {
      cJSON *b = cJSON_CreateObject();
      cJSON_AddStringToObject(b, "arg", k->buffers[i].arg);
      cJSON_AddNumberToObject(b, "bytes", (double)k->buffers[i].bytes);
      cJSON_AddStringToObject(b, "init", k->buffers[i].zero_once ? "zero_once" : "none");
      cJSON_AddItemToArray(bufs, b);
    }
  }
  return e;
}

char *kf_manifest_text(const kf_manifest *m) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "format", 1);
  cJSON_AddStringToObject(root, "generator", m->generator);
  cJSON_AddStringToObject(root, "model", m->model);
  cJSON_AddStringToObject(root, "arch", m->arch);
  cJSON_AddStringToObject(root, "backend", m->backend);
  if (m->description)
    cJSON_AddStringToObject(root, "description", m->description);
  if (m->page_size)
    cJSON_AddNumberToObject(root, "page_size", m->page_size);
  if (m->nlayer_types) {
    cJSON *lts = cJSON_AddArrayToObject(root, "layer_types");
    for (size_t i = 0; i < m->nlayer_types; i++) {
      const kf_manifest_layer_type *t = &m->layer_types[i];
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "name", t->name);
      cJSON_AddNumberToObject(o, "count", (double)t->count);
      cJSON *ks = cJSON_AddArrayToObject(o, "kinds");
      for (size_t k = 0; k < t->kinds.n; k++)
        cJSON_AddItemToArray(ks, cJSON_CreateString(t->kinds.v[k]));
      if (t->layer)
        cJSON_AddStringToObject(o, "layer", t->layer);
      cJSON_AddItemToArray(lts, o);
    }
  }
  /* one parameter list per kind (all its kernels share the template's
   * arguments): a manifest of hundreds of kernels stays quick to parse */
  cJSON *sigs = cJSON_AddObjectToObject(root, "signatures");
  for (size_t i = 0; i < m->nsignatures; i++) {
    const kf_manifest_signature *s = &m->signatures[i];
    cJSON *params = cJSON_AddArrayToObject(cJSON_AddObjectToObject(sigs, s->kind), "params");
    for (size_t k = 0; k < s->nparams; k++) {
      cJSON *p = cJSON_CreateObject();
      cJSON_AddStringToObject(p, "name", s->params[k].name);
      cJSON_AddStringToObject(p, "type", s->params[k].type);
      cJSON_AddNumberToObject(p, "size", s->params[k].size);
      cJSON_AddItemToArray(params, p);
    }
  }
  cJSON *kernels = cJSON_AddArrayToObject(root, "kernels");
  for (size_t i = 0; i < m->nkernels; i++)
    cJSON_AddItemToArray(kernels, kernel_json(&m->kernels[i]));
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  return text;
}

int kf_manifest_write(const char *path, const kf_manifest *m, int *changed) {
  char *text = kf_manifest_text(m);
  char *dir = kf_path_dirname(path);
  int r = kf_mkdir_p(dir) == 0 ? kf_write_if_changed(path, text, strlen(text), changed) : -1;
  int e = errno;
  free(dir);
  free(text);
  errno = e;
  return r;
}

/* ---- reading ---- */

static int get_dims(const cJSON *o, const char *name, int64_t out[3]) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, name);
  if (cJSON_GetArraySize(a) != 3)
    return 0;
  for (int d = 0; d < 3; d++)
    out[d] = cJSON_GetArrayItem(a, d)->valueint;
  return 1;
}

static void load_launch(const cJSON *l, kf_manifest_launch *out) {
  if (!cJSON_IsObject(l))
    return;
  out->has_dims = get_dims(l, "grid", out->grid) & get_dims(l, "block", out->block);
  get_dims(l, "cluster", out->cluster);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(l, "shared_bytes");
  out->shared_bytes = cJSON_IsNumber(v) ? kf_i64_of_double(v->valuedouble) : 0;
  v = cJSON_GetObjectItemCaseSensitive(l, "max_blocks_per_sm");
  out->max_blocks_per_sm = cJSON_IsNumber(v) ? kf_i64_of_double(v->valuedouble) : 0;
  out->programmatic = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(l, "programmatic"));
  out->one_wave = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(l, "one_wave"));
  out->cooperative = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(l, "cooperative"));
  out->persistent = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(l, "persistent"));
}

void kf_manifest_add_layer_type(kf_manifest *m, const char *name, int64_t count,
                                const kf_strv *kinds, const char *layer) {
  m->layer_types = kf_xpush(m->layer_types, m->nlayer_types, sizeof *m->layer_types);
  kf_manifest_layer_type *t = &m->layer_types[m->nlayer_types++];
  memset(t, 0, sizeof *t);
  t->name = kf_xstrdup(name);
  t->count = count;
  for (size_t i = 0; i < kinds->n; i++)
    kf_strv_push(&t->kinds, kinds->v[i]);
  t->layer = layer ? kf_xstrdup(layer) : NULL;
}

void kf_manifest_add_buffer(kf_manifest_kernel *k, const char *arg, int64_t bytes, int zero_once) {
  k->buffers = kf_xpush(k->buffers, k->nbuffers, sizeof *k->buffers);
  kf_manifest_buffer *b = &k->buffers[k->nbuffers++];
  b->arg = kf_xstrdup(arg);
  b->bytes = bytes;
  b->zero_once = zero_once;
}

/* "buffers": an element whose arg is not a string is kept with arg NULL. */
static void load_buffers(kf_manifest_kernel *k, const cJSON *bufs) {
  for (const cJSON *b = cJSON_IsArray(bufs) ? bufs->child : NULL; b; b = b->next) {
    const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(b, "bytes");
    const cJSON *init = cJSON_GetObjectItemCaseSensitive(b, "init");
    kf_manifest_add_buffer(k, "", cJSON_IsNumber(bytes) ? (int64_t)bytes->valuedouble : 0,
                           cJSON_IsString(init) && !strcmp(init->valuestring, "zero_once"));
    free(k->buffers[k->nbuffers - 1].arg);
    k->buffers[k->nbuffers - 1].arg = kf_json_dup_string(b, "arg");
  }
}

static void load_kernel(kf_manifest *m, const cJSON *o) {
  kf_manifest_kernel *k = new_kernel(m);
  k->id = kf_json_dup_string(o, "id");
  k->kind = kf_json_dup_string(o, "kind");
  k->key = kf_json_dup_string(o, "key");
  k->object = kf_json_dup_string(o, "object");
  k->meta = kf_json_dup_string(o, "meta");
  k->checksum = kf_json_dup_string(o, "checksum");
  k->sha256 = kf_json_dup_string(o, "sha256");
  k->symbol = kf_json_dup_string(o, "symbol");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "width");
  k->width = cJSON_IsNumber(v) ? v->valueint : 0;
  v = cJSON_GetObjectItemCaseSensitive(o, "page_size");
  k->page_size = cJSON_IsNumber(v) ? v->valueint : 0;
  v = cJSON_GetObjectItemCaseSensitive(o, "size");
  k->has_size = cJSON_IsNumber(v);
  k->size = k->has_size ? kf_i64_of_double(v->valuedouble) : 0;
  load_launch(cJSON_GetObjectItemCaseSensitive(o, "launch"), &k->launch);
  load_buffers(k, cJSON_GetObjectItemCaseSensitive(o, "buffers"));
}

static void load_signatures(kf_manifest *m, const cJSON *sigs) {
  for (const cJSON *s = cJSON_IsObject(sigs) ? sigs->child : NULL; s; s = s->next) {
    kf_manifest_signature *sig = kf_manifest_add_signature(m, s->string);
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(s, "params");
    for (const cJSON *p = cJSON_IsArray(params) ? params->child : NULL; p; p = p->next) {
      char *name = kf_json_dup_string(p, "name"), *type = kf_json_dup_string(p, "type");
      const cJSON *size = cJSON_GetObjectItemCaseSensitive(p, "size");
      kf_manifest_add_param(sig, name ? name : "", type ? type : "",
                            cJSON_IsNumber(size) ? size->valueint : 0);
      free(name);
      free(type);
    }
  }
}

int kf_manifest_load(const char *path, kf_manifest *m, char **err) {
  memset(m, 0, sizeof *m);
  *err = NULL;
  size_t len;
  char *text = kf_read_file(path, &len);
  if (!text) {
    *err = kf_xasprintf("cannot read %s: %s", path, strerror(errno));
    return -1;
  }
  int r = kf_manifest_parse(text, len, m, err);
  free(text);
  return r;
}

int kf_manifest_parse(const char *text, size_t len, kf_manifest *m, char **err) {
  memset(m, 0, sizeof *m);
  *err = NULL;
  cJSON *root = cJSON_ParseWithLength(text, len);
  const cJSON *ks = root ? cJSON_GetObjectItemCaseSensitive(root, "kernels") : NULL;
  if (!cJSON_IsArray(ks)) {
    *err = kf_xstrdup("not a valid manifest");
    cJSON_Delete(root);
    return -1;
  }
  m->generator = kf_json_dup_string(root, "generator");
  m->model = kf_json_dup_string(root, "model");
  m->arch = kf_json_dup_string(root, "arch");
  m->backend = kf_json_dup_string(root, "backend");
  m->description = kf_json_dup_string(root, "description");
  const cJSON *ps = cJSON_GetObjectItemCaseSensitive(root, "page_size");
  m->page_size = cJSON_IsNumber(ps) ? ps->valueint : 0;
  load_signatures(m, cJSON_GetObjectItemCaseSensitive(root, "signatures"));
  for (const cJSON *k = ks->child; k; k = k->next)
    load_kernel(m, k);
  cJSON_Delete(root);
  return 0;
}

void kf_manifest_free(kf_manifest *m) {
  free(m->generator);
  free(m->model);
  free(m->arch);
  free(m->backend);
  free(m->description);
  for (size_t i = 0; i < m->nsignatures; i++) {
    for (size_t k = 0; k < m->signatures[i].nparams; k++) {
      free(m->signatures[i].params[k].name);
      free(m->signatures[i].params[k].type);
    }
    free(m->signatures[i].params);
    free(m->signatures[i].kind);
  }
  free(m->signatures);
  for (size_t i = 0; i < m->nkernels; i++) {
    kf_manifest_kernel *k = &m->kernels[i];
    free(k->id);
    free(k->kind);
    free(k->key);
    free(k->object);
    free(k->meta);
    free(k->checksum);
    free(k->sha256);
    free(k->symbol);
    for (size_t b = 0; b < k->nbuffers; b++)
      free(k->buffers[b].arg);
    free(k->buffers);
  }
  free(m->kernels);
  for (size_t i = 0; i < m->nlayer_types; i++) {
    free(m->layer_types[i].name);
    kf_strv_free(&m->layer_types[i].kinds);
    free(m->layer_types[i].layer);
  }
  free(m->layer_types);
  memset(m, 0, sizeof *m);
}
