/* remote_entry.c: entries and manifests on a remote (see remote_entry.h). */
#define _GNU_SOURCE
#include "remote_entry.h"
#include "rt_internal.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int kf_tier_open(kf_tier *t, const kf_strv *urls, int read_only, const char *signing_key,
                 const char *trusted_keys, char **err) {
  memset(t, 0, sizeof *t);
  *err = NULL;
  if (kf_trust_load(trusted_keys, &t->trust, err) != 0)
    return -1;
  int s = kf_signer_load(signing_key, &t->signer, err);
  if (s < 0)
    return -1;
  t->signing = s;
  if (kf_sign_init() != 0) {
    *err = kf_xstrdup("libsodium cannot start");
    return -1;
  }
  t->remote = kf_remote_open(urls, read_only, err);
  if (!t->remote)
    return *err ? -1 : 0;
  /* Fetched bodies come and go in chunks of a few megabytes (hiredis's
   * reader buffer holds a chunk's replies at once): from the heap, kept
   * rather than returned to the system after each chunk, so the next chunk
   * reuses pages already faulted in. Left to glibc's defaults, buffers over
   * 128 KB were mapped and unmapped per chunk, and a pull from Redis faulted
   * in 1.5x the pages (notes/perf/journal.md, v38). */
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  return 1;
}

void kf_tier_free(kf_tier *t) {
  kf_remote_free(t->remote);
  kf_trust_free(&t->trust);
  memset(&t->signer, 0, sizeof t->signer);
  t->remote = NULL;
}

/* "ac/" + sha256 of what names the record (caller frees). */
static char *ac_name(const char *what) {
  char hex[65];
  kf_sha256_hex(what, strlen(what), hex);
  return kf_xasprintf("ac/%s", hex);
}

static char *entry_ac(const char *key) {
  char *what = kf_xasprintf("kforge/v1/entry/%s", key);
  char *n = ac_name(what);
  free(what);
  return n;
}

static char *manifest_ac(const char *model, const char *arch) {
  char *what = kf_xasprintf("kforge/v1/manifest/%s/%s", model, arch);
  char *n = ac_name(what);
  free(what);
  return n;
}

static char *shared_ac(const char *name) {
  char *what = kf_xasprintf("kforge/v1/shared/%s", name);
  char *n = ac_name(what);
  free(what);
  return n;
}

/* The text a record's signature covers: every field, one per line. */
static char *entry_message(const kf_remote_record *r) {
  return kf_xasprintf("kforge-entry-v1\nkey=%s\nobject=%s\nobject_sha256=%s\nobject_size=%lld\n"
                      "checksum=%s\nmeta_sha256=%s\nmeta_size=%lld\n",
                      r->key, r->object, r->object_sha256, r->object_size, r->checksum,
                      r->meta_sha256, r->meta_size);
}

/* The runtime owns this text: it checks the signature of a local manifest
 * (runtime/rt_sign.c). */
static char *manifest_message(const char *model, const char *arch, const char *sha,
                              long long size) {
  char *msg = rt_manifest_signed_text(model, arch, sha, size);
  if (!msg)
    abort(); /* out of memory: the generator's policy (util.h) */
  return msg;
}

/* Adds "signature" to a record when t signs. */
static void add_signature(const kf_tier *t, cJSON *o, const char *msg) {
  if (!t->signing)
    return;
  char sig[129];
  kf_signer_sign(&t->signer, msg, sig);
  cJSON *s = cJSON_AddObjectToObject(o, "signature");
  cJSON_AddStringToObject(s, "public_key", t->signer.public_hex);
  cJSON_AddStringToObject(s, "ed25519", sig);
}

/* Why the record's signature is not acceptable, or NULL. */
static char *check_signature(const kf_tier *t, const cJSON *o, const char *msg) {
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "signature");
  const cJSON *pk = cJSON_GetObjectItemCaseSensitive(s, "public_key");
  const cJSON *sig = cJSON_GetObjectItemCaseSensitive(s, "ed25519");
  return kf_trust_check(&t->trust, msg, cJSON_IsString(pk) ? pk->valuestring : NULL,
                        cJSON_IsString(sig) ? sig->valuestring : NULL);
}

static int is_hex(const char *s, size_t n) {
  if (!s || strlen(s) != n)
    return 0;
  for (; *s; s++)
    if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
      return 0;
  return 1;
}

/* Copies a string member of exactly hex_len hex digits (0: any short
 * name) into out. Returns 0 or -1. */
static int take_field(const cJSON *o, const char *name, char *out, size_t cap, size_t hex_len) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  if (!cJSON_IsString(v) || strlen(v->valuestring) >= cap)
    return -1;
  if (hex_len && !is_hex(v->valuestring, hex_len))
    return -1;
  snprintf(out, cap, "%s", v->valuestring);
  return 0;
}

static int take_size(const cJSON *o, const char *name, long long *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > (double)KF_READ_MAX)
    return -1;
  *out = (long long)v->valuedouble;
  return 0;
}

static int parse_record(const kf_buf *b, kf_remote_record *r, cJSON **json) {
  if (!b->data)
    return -1;
  cJSON *o = cJSON_ParseWithLength(b->data, b->len);
  *json = o;
  if (!cJSON_IsObject(o))
    return -1;
  if (take_field(o, "key", r->key, sizeof r->key, 32) ||
      take_field(o, "object", r->object, sizeof r->object, 0) ||
      take_field(o, "object_sha256", r->object_sha256, sizeof r->object_sha256, 64) ||
      take_field(o, "checksum", r->checksum, sizeof r->checksum, 32) ||
      take_field(o, "meta_sha256", r->meta_sha256, sizeof r->meta_sha256, 64) ||
      take_size(o, "object_size", &r->object_size) || take_size(o, "meta_size", &r->meta_size))
    return -1;
  if (strcmp(r->object, "object.cubin") && strcmp(r->object, "object.hsaco"))
    return -1;
  return 0;
}

/* Gets the record called name (freed here) into b. Returns KF_REMOTE_OK,
 * or KF_REMOTE_MISSING with b empty. */
static int get_record(kf_tier *t, char *name, kf_buf *b) {
  int st = kf_remote_get(t->remote, name, b);
  free(name);
  if (st != KF_REMOTE_OK)
    kf_buf_free(b);
  return st;
}

char *kf_remote_record_check(const kf_tier *t, const char *key, const char *text, size_t len,
                             kf_remote_record *rec) {
  memset(rec, 0, sizeof *rec);
  kf_buf b = {(char *)text, len, len};
  cJSON *o = NULL;
  char *why = NULL;
  if (parse_record(&b, rec, &o) != 0)
    why = kf_xstrdup("its record is damaged");
  else if (strcmp(rec->key, key) != 0)
    why = kf_xasprintf("its record names key %s", rec->key);
  else {
    char *msg = entry_message(rec);
    why = check_signature(t, o, msg);
    free(msg);
  }
  cJSON_Delete(o);
  return why;
}

int kf_remote_entry_record(kf_tier *t, const char *key, kf_remote_record *rec, char **why) {
  memset(rec, 0, sizeof *rec);
  kf_buf b = {0};
  *why = NULL;
  if (get_record(t, entry_ac(key), &b) != KF_REMOTE_OK)
    return KF_REMOTE_MISSING;
  *why = kf_remote_record_check(t, key, b.data, b.len, rec);
  kf_buf_free(&b);
  return *why ? KF_REMOTE_BAD : KF_REMOTE_OK;
}

/* Checks fetched content against the SHA-256 and size its record names.
 * Returns NULL, or why not (caller frees). */
static char *check_content(const char *what, const kf_buf *got, const char *sha, long long size) {
  char sum[65];
  kf_sha256_hex(got->data ? got->data : "", got->len, sum);
  if ((long long)got->len != size)
    return kf_xasprintf("its %s has %zu bytes, the record says %lld", what, got->len, size);
  if (strcmp(sum, sha) != 0)
    return kf_xasprintf("its %s has SHA-256 %s, the record says %s", what, sum, sha);
  return NULL;
}

/* Gets cas/<sha> and checks its size and SHA-256. Returns KF_REMOTE_OK,
 * KF_REMOTE_MISSING, or KF_REMOTE_BAD with *why. */
static int get_content(kf_tier *t, const char *what, const char *sha, long long size, kf_buf *out,
                       char **why) {
  char *name = kf_xasprintf("cas/%s", sha);
  int st = kf_remote_get(t->remote, name, out);
  free(name);
  if (st != KF_REMOTE_OK) {
    *why = kf_xasprintf("its %s is missing", what);
    return KF_REMOTE_MISSING;
  }
  *why = check_content(what, out, sha, size);
  return *why ? KF_REMOTE_BAD : KF_REMOTE_OK;
}

/* Checks a fetched meta.json against the record. Returns why not, or
 * NULL. */
static char *check_meta(const kf_buf *meta, const kf_remote_record *r) {
  cJSON *o = cJSON_ParseWithLength(meta->data, meta->len);
  char *why = NULL;
  const cJSON *key = cJSON_GetObjectItemCaseSensitive(o, "key");
  const cJSON *obj = cJSON_GetObjectItemCaseSensitive(o, "object");
  const cJSON *sum = cJSON_GetObjectItemCaseSensitive(o, "checksum");
  const cJSON *size = cJSON_GetObjectItemCaseSensitive(o, "size");
  const cJSON *sha = cJSON_GetObjectItemCaseSensitive(o, "sha256");
  if (!cJSON_IsObject(o) || !cJSON_IsString(key) || !cJSON_IsString(obj) || !cJSON_IsString(sum) ||
      !cJSON_IsNumber(size))
    why = kf_xstrdup("its meta.json is damaged");
  else if (strcmp(key->valuestring, r->key) != 0)
    why = kf_xasprintf("its meta.json names key %s", key->valuestring);
  else if (strcmp(obj->valuestring, r->object) || strcmp(sum->valuestring, r->checksum) ||
           (long long)size->valuedouble != r->object_size)
    why = kf_xstrdup("its meta.json does not match its record");
  else if (sha && (!cJSON_IsString(sha) || strcmp(sha->valuestring, r->object_sha256)))
    why = kf_xstrdup("its meta.json names another SHA-256 than its record");
  cJSON_Delete(o);
  return why;
}

/* Writes b as a new file in a private tmp directory. No fsync here:
 * kf_cache_publish syncs every file before the rename that publishes them
 * (one sync per file, not two). Returns 0 or -1 with errno set. */
static int write_private(const char *path, const kf_buf *b) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return -1;
  size_t done = 0;
  while (done < b->len) {
    ssize_t n = write(fd, b->data + done, b->len - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int e = n < 0 ? errno : EIO;
      close(fd);
      errno = e;
      return -1;
    }
    done += (size_t)n;
  }
  return close(fd);
}

/* Writes the verified files into a private tmp directory of c, under key's
 * lock (so that no kf_cache_prepare takes the directory for a dead
 * builder's). Returns 0 with s filled, or -1 with *why (nothing left). */
static int stage_files(const kf_cache *c, const char *key, const kf_remote_record *r,
                       const kf_buf *meta, const kf_buf *object, kf_staged *s, char **why) {
  memset(s, 0, sizeof *s);
  snprintf(s->key, sizeof s->key, "%s", key);
  s->lock = kf_cache_lock(c, key);
  s->dir = s->lock < 0 ? NULL : kf_cache_tmpdir(c, key);
  if (!s->dir) {
    *why = kf_xasprintf("cannot create a directory in %s/tmp: %s", c->v1, strerror(errno));
    kf_cache_unlock(s->lock);
    return -1;
  }
  char *mp = kf_path_join(s->dir, "meta.json");
  char *op = kf_path_join(s->dir, r->object);
  int rc = 0;
  if (write_private(op, object) != 0 || write_private(mp, meta) != 0) {
    *why = kf_xasprintf("cannot write into %s: %s", s->dir, strerror(errno));
    kf_staged_drop(s);
    rc = -1;
  }
  free(mp);
  free(op);
  return rc;
}

void kf_staged_drop(kf_staged *s) {
  if (s->dir)
    kf_remove_tree(s->dir); /* gone after a publication; a leftover otherwise */
  free(s->dir);
  kf_cache_unlock(s->lock);
  memset(s, 0, sizeof *s);
  s->lock = -1;
}

int kf_staged_publish(const kf_cache *c, kf_staged *s, int synced, char **why) {
  int rc = 0;
  if (kf_cache_check_entry(c, s->key, NULL, NULL) != KF_ENTRY_OK &&
      (synced ? kf_cache_publish_synced(c, s->key, s->dir) : kf_cache_publish(c, s->key, s->dir)) !=
          0) {
    *why = kf_xasprintf("cannot publish into %s: %s", c->v1, strerror(errno));
    rc = -1;
  }
  kf_staged_drop(s);
  return rc;
}

/* Verifies one entry's fetched meta and object against its record and
 * stages them. Returns KF_REMOTE_OK or KF_REMOTE_BAD with *why. */
static int stage_one(const kf_cache *c, const char *key, const kf_remote_record *r,
                     const kf_buf *meta, const kf_buf *object, kf_staged *staged, char **why) {
  if (!(*why = check_content("meta.json", meta, r->meta_sha256, r->meta_size)) &&
      !(*why = check_meta(meta, r)) &&
      !(*why = check_content("object", object, r->object_sha256, r->object_size))) {
    char sum[33];
    kf_hash128_hex(object->data ? object->data : "", object->len, sum);
    if (strcmp(sum, r->checksum) != 0)
      *why = kf_xasprintf("its object's checksum %s does not match its meta.json's %s", sum,
                          r->checksum);
  }
  if (*why || stage_files(c, key, r, meta, object, staged, why) != 0)
    return KF_REMOTE_BAD;
  snprintf(staged->checksum, sizeof staged->checksum, "%s", r->checksum);
  staged->size = r->object_size;
  return KF_REMOTE_OK;
}

/* Entries whose contents are asked for at once: their bodies are in memory
 * together, and staged (written to files) and freed before the next
 * chunk's are fetched, so that the next chunk reuses the same memory. With
 * every body of a pull in memory at once (4 MB for three models), a pull
 * from Redis faulted in 2089 pages; in chunks, with the heap kept
 * (kf_tier_open), 1108, and it took a fifth less time (notes/perf/journal.md,
 * v38). A chunk costs one more round of requests. */
#define CONTENT_CHUNK 16

void kf_remote_entries_stage(kf_tier *t, const kf_cache *c, const char *const *keys, size_t n,
                             kf_staged *staged, int *sts, char **whys) {
  char **names = kf_xcalloc(n + 1, sizeof *names);
  kf_buf *got = kf_xcalloc(n + 1, sizeof *got);
  int *gst = kf_xcalloc(n + 1, sizeof *gst);
  kf_remote_record *recs = kf_xcalloc(n + 1, sizeof *recs);
  for (size_t i = 0; i < n; i++) {
    names[i] = entry_ac(keys[i]);
    whys[i] = NULL;
  }
  kf_remote_get_many(t->remote, (const char *const *)names, n, got, gst);
  for (size_t i = 0; i < n; i++) {
    sts[i] = gst[i] == KF_REMOTE_OK ? KF_REMOTE_OK : KF_REMOTE_MISSING;
    if (sts[i] == KF_REMOTE_OK &&
        (whys[i] = kf_remote_record_check(t, keys[i], got[i].data, got[i].len, &recs[i])))
      sts[i] = KF_REMOTE_BAD;
    kf_buf_free(&got[i]);
    free(names[i]);
  }
  /* the contents, meta and object, of CONTENT_CHUNK entries at a time */
  char *ask[2 * CONTENT_CHUNK];
  size_t of[CONTENT_CHUNK];
  kf_buf content[2 * CONTENT_CHUNK];
  int cst[2 * CONTENT_CHUNK];
  for (size_t at = 0; at < n;) {
    size_t m = 0;
    for (; at < n && m < CONTENT_CHUNK; at++) {
      if (sts[at] != KF_REMOTE_OK)
        continue;
      of[m] = at;
      ask[2 * m] = kf_xasprintf("cas/%s", recs[at].meta_sha256);
      ask[2 * m + 1] = kf_xasprintf("cas/%s", recs[at].object_sha256);
      m++;
    }
    if (!m)
      break;
    memset(content, 0, sizeof content);
    kf_remote_get_many(t->remote, (const char *const *)ask, 2 * m, content, cst);
    for (size_t j = 0; j < m; j++) {
      const size_t i = of[j], mi = 2 * j, oi = 2 * j + 1;
      if (cst[mi] != KF_REMOTE_OK || cst[oi] != KF_REMOTE_OK) {
        whys[i] =
            kf_xasprintf("its %s is missing", cst[mi] != KF_REMOTE_OK ? "meta.json" : "object");
        sts[i] = KF_REMOTE_BAD; /* a record whose content is gone */
      } else {
        sts[i] = stage_one(c, keys[i], &recs[i], &content[mi], &content[oi], &staged[i], &whys[i]);
      }
      kf_buf_free(&content[mi]);
      kf_buf_free(&content[oi]);
      free(ask[mi]);
      free(ask[oi]);
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (sts[i] == KF_REMOTE_OK)
      kf_remote_stats_of(t->remote)->hits++;
    else if (sts[i] == KF_REMOTE_BAD)
      kf_remote_stats_of(t->remote)->bad++;
  }
  free(names);
  free(got);
  free(gst);
  free(recs);
}

int kf_staged_publish_all(const kf_cache *c, kf_staged *v, size_t n, char **why) {
  int rc = 0;
  *why = NULL;
  if (n && kf_cache_sync(c) != 0) {
    *why = kf_xasprintf("cannot sync %s: %s", c->v1, strerror(errno));
    rc = -1;
  }
  for (size_t i = 0; i < n; i++) {
    if (rc)
      kf_staged_drop(&v[i]);
    else if (kf_staged_publish(c, &v[i], 1, why) != 0)
      rc = -1;
  }
  return rc;
}

/* Stores content under cas/<its sha256> (write-once) and fills sha. */
static int put_content(kf_tier *t, const void *data, size_t len, char sha[65]) {
  kf_sha256_hex(data, len, sha);
  char *name = kf_xasprintf("cas/%s", sha);
  int st = kf_remote_put(t->remote, name, data, len, 0);
  free(name);
  return st;
}

static char *read_entry_file(const kf_cache *c, const char *key, const char *file, size_t *len) {
  char *dir = kf_cache_entry_dir(c, key);
  char *p = kf_path_join(dir, file);
  char *data = kf_read_file(p, len);
  free(p);
  free(dir);
  return data;
}

int kf_remote_entry_upload(kf_tier *t, const kf_cache *c, const char *key) {
  if (!kf_remote_writable(t->remote))
    return KF_REMOTE_FAILED;
  char *ac = entry_ac(key);
  int there = kf_remote_exists(t->remote, ac) == KF_REMOTE_OK;
  free(ac);
  if (there) /* another builder's: write-once */
    return KF_REMOTE_OK;
  kf_entry_meta m;
  if (kf_cache_check_entry(c, key, &m, NULL) != KF_ENTRY_OK)
    return KF_REMOTE_FAILED;
  size_t olen = 0, mlen = 0;
  char *object = read_entry_file(c, key, m.object, &olen);
  char *meta = read_entry_file(c, key, "meta.json", &mlen);
  kf_remote_record r = {0};
  snprintf(r.key, sizeof r.key, "%s", key);
  snprintf(r.object, sizeof r.object, "%s", m.object);
  snprintf(r.checksum, sizeof r.checksum, "%s", m.checksum);
  r.object_size = (long long)olen;
  r.meta_size = (long long)mlen;
  kf_entry_meta_free(&m);
  int st = object && meta ? KF_REMOTE_OK : KF_REMOTE_FAILED;
  if (st == KF_REMOTE_OK)
    st = put_content(t, object, olen, r.object_sha256);
  if (st == KF_REMOTE_OK)
    st = put_content(t, meta, mlen, r.meta_sha256);
  if (st == KF_REMOTE_OK) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "format", 1);
    cJSON_AddStringToObject(o, "type", "kforge-entry");
    cJSON_AddStringToObject(o, "key", r.key);
    cJSON_AddStringToObject(o, "object", r.object);
    cJSON_AddStringToObject(o, "object_sha256", r.object_sha256);
    cJSON_AddNumberToObject(o, "object_size", (double)r.object_size);
    cJSON_AddStringToObject(o, "checksum", r.checksum);
    cJSON_AddStringToObject(o, "meta_sha256", r.meta_sha256);
    cJSON_AddNumberToObject(o, "meta_size", (double)r.meta_size);
    char *msg = entry_message(&r);
    add_signature(t, o, msg);
    free(msg);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    char *name = entry_ac(key);
    st = kf_remote_put(t->remote, name, text, strlen(text), 0);
    free(name);
    free(text);
  }
  if (st == KF_REMOTE_OK)
    kf_remote_stats_of(t->remote)->uploads++;
  free(object);
  free(meta);
  return st;
}

char *kf_manifest_record_text(const kf_tier *t, const char *model, const char *arch,
                              const char *text) {
  char sha[65];
  size_t len = strlen(text);
  kf_sha256_hex(text, len, sha);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "format", 1);
  cJSON_AddStringToObject(o, "type", "kforge-manifest");
  cJSON_AddStringToObject(o, "model", model);
  cJSON_AddStringToObject(o, "arch", arch);
  cJSON_AddStringToObject(o, "sha256", sha);
  cJSON_AddNumberToObject(o, "size", (double)len);
  char *msg = manifest_message(model, arch, sha, (long long)len);
  add_signature(t, o, msg);
  free(msg);
  char *rec = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return rec;
}

int kf_remote_manifest_put(kf_tier *t, const char *model, const char *arch, const char *text) {
  char sha[65];
  int st = put_content(t, text, strlen(text), sha);
  if (st != KF_REMOTE_OK)
    return st;
  char *rec = kf_manifest_record_text(t, model, arch, text);
  char *name = manifest_ac(model, arch);
  st = kf_remote_put(t->remote, name, rec, strlen(rec), 1);
  free(name);
  free(rec);
  if (st == KF_REMOTE_OK)
    kf_remote_stats_of(t->remote)->uploads++;
  return st;
}

char *kf_remote_manifest_record_check(const kf_tier *t, const char *model, const char *arch,
                                      const char *text, size_t len, char sha[65], long long *size) {
  cJSON *o = cJSON_ParseWithLength(text, len);
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "model");
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "arch");
  char *why = NULL;
  if (!cJSON_IsObject(o) || take_field(o, "sha256", sha, 65, 64) || take_size(o, "size", size) ||
      !cJSON_IsString(m) || !cJSON_IsString(a))
    why = kf_xstrdup("its record is damaged");
  else if (strcmp(m->valuestring, model) || strcmp(a->valuestring, arch))
    why = kf_xasprintf("its record names %s/%s", m->valuestring, a->valuestring);
  else {
    char *msg = manifest_message(model, arch, sha, *size);
    why = check_signature(t, o, msg);
    free(msg);
  }
  cJSON_Delete(o);
  return why;
}

int kf_remote_manifest_get(kf_tier *t, const char *model, const char *arch, kf_buf *out,
                           kf_buf *record, char **why) {
  kf_buf b = {0};
  char sha[65] = "";
  long long size = 0;
  *why = NULL;
  if (get_record(t, manifest_ac(model, arch), &b) != KF_REMOTE_OK)
    return KF_REMOTE_MISSING;
  *why = kf_remote_manifest_record_check(t, model, arch, b.data, b.len, sha, &size);
  if (record && !*why) {
    kf_buf_free(record);
    *record = b;
  } else {
    kf_buf_free(&b);
  }
  if (*why)
    return KF_REMOTE_BAD;
  int st = get_content(t, "manifest", sha, size, out, why);
  return st == KF_REMOTE_OK ? st : KF_REMOTE_BAD;
}

/* The text a shared record's signature covers. */
static char *shared_message(const char *id, const char *body) {
  char sha[65];
  kf_sha256_hex(body, strlen(body), sha);
  return kf_xasprintf("kforge-shared-v1\nid=%s\nbody_sha256=%s\n", id, sha);
}

char *kf_remote_shared_get(kf_tier *t, const char *id, size_t *len) {
  kf_buf b = {0};
  if (get_record(t, shared_ac(id), &b) != KF_REMOTE_OK)
    return NULL;
  cJSON *o = cJSON_ParseWithLength(b.data, b.len);
  kf_buf_free(&b);
  const cJSON *rid = cJSON_GetObjectItemCaseSensitive(o, "id");
  const cJSON *body = cJSON_GetObjectItemCaseSensitive(o, "body");
  char *text = NULL;
  if (cJSON_IsString(rid) && !strcmp(rid->valuestring, id) && cJSON_IsString(body)) {
    char *msg = shared_message(id, body->valuestring);
    char *why = check_signature(t, o, msg);
    if (!why)
      text = kf_xstrdup(body->valuestring);
    free(why);
    free(msg);
  }
  cJSON_Delete(o);
  if (text)
    *len = strlen(text);
  return text;
}

void kf_remote_shared_put(kf_tier *t, const char *id, const char *text) {
  if (!kf_remote_writable(t->remote))
    return;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "format", 1);
  cJSON_AddStringToObject(o, "type", "kforge-shared");
  cJSON_AddStringToObject(o, "id", id);
  cJSON_AddStringToObject(o, "body", text);
  char *msg = shared_message(id, text);
  add_signature(t, o, msg);
  free(msg);
  char *rec = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  char *name = shared_ac(id);
  kf_remote_put(t->remote, name, rec, strlen(rec), 1); /* a class's files change: replaced */
  free(name);
  free(rec);
}
