/* cmd_verify.c: `kforge verify` — re-hash every entry against its meta.json,
 * and check every manifest with the runtime's own rules (runtime/
 * rt_manifest.c, rt_trust.c, compiled into the generator): whatever the
 * runtime would refuse, verify reports, with the runtime's reason, entry by
 * entry. Reads only. */
#include "cmd_cache.h"
#include "commands.h"
#include "rt_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: kforge verify [--cache DIR] [--json] [--lax-permissions]\n"
    "Re-hashes every cache entry and checks every manifest as the runtime reads it\n"
    "(fields, paths, objects' sizes and checksums, links, owners and modes); prints\n"
    "'damaged: <key> <kernel-id>: <reason>' or 'damaged: manifest <path>: <reason>'\n"
    "for each problem, with the runtime's reason, and exits 1 if any.\n"
    "--lax-permissions (or KFORGE_LAX_PERMISSIONS=1) skips the owner and mode\n"
    "checks, as the runtime's option of that name does. --json prints {\"cache\",\n"
    "\"checked\", \"ok\", \"entries\": [{key, kernel_id, ok, reason}], \"damaged\":\n"
    "[{key, kernel_id, manifest, reason}]} instead.\n";

/* An object a manifest entry names, as the runtime's rules found it. */
struct seen {
  char key[33];
  int whole;      /* read, size and checksum as the manifest says */
  char sum[33];   /* the checksum it has, when whole */
  long long size; /* its bytes, when whole */
  char *object;   /* relative to v1 */
};

typedef struct {
  const kf_cache *c;
  int damaged;
  int checked;
  cJSON *entries; /* with --json */
  cJSON *problems;
  rt_root root;         /* the runtime's view of the cache; root.fd < 0: none */
  const char *manifest; /* the manifest being checked */
  struct seen *seen;    /* every manifest entry's object (sorted by key once
                           the manifests are walked) */
  size_t nseen, capseen;
} verify_ctx;

static int cmp_seen(const void *a, const void *b) {
  const struct seen *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  return c ? c : x->whole - y->whole; /* a damaged one first */
}

/* The first object seen under key (a damaged one when there is one). */
static const struct seen *seen_of(const verify_ctx *v, const char *key) {
  size_t lo = 0, hi = v->nseen;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (strcmp(v->seen[mid].key, key) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < v->nseen && strcmp(v->seen[lo].key, key) == 0 ? &v->seen[lo] : NULL;
}

static void add_seen(verify_ctx *v, const rt_kdesc *k, int whole) {
  if (v->nseen == v->capseen) {
    v->capseen = v->capseen ? 2 * v->capseen : 256;
    v->seen = kf_xrealloc(v->seen, v->capseen * sizeof *v->seen);
  }
  struct seen *e = &v->seen[v->nseen++];
  snprintf(e->key, sizeof e->key, "%.32s", k->key);
  e->whole = whole;
  rt_hex16(k->checksum, e->sum);
  e->size = (long long)k->size;
  e->object = kf_xstrdup(k->object);
}

/* One damaged entry or manifest reference; key, id and manifest may be
 * NULL. */
static void damage(verify_ctx *v, const char *key, const char *id, const char *manifest,
                   const char *reason) {
  v->damaged++;
  if (!v->problems) {
    if (key)
      printf("damaged: %s %s: %s\n", key, id ? id : "?", reason);
    else
      printf("damaged: manifest %s: %s\n", manifest, reason);
    return;
  }
  cJSON *o = cJSON_CreateObject();
  if (key)
    cJSON_AddStringToObject(o, "key", key);
  if (key || id)
    cJSON_AddStringToObject(o, "kernel_id", id ? id : "?");
  if (manifest)
    cJSON_AddStringToObject(o, "manifest", manifest);
  cJSON_AddStringToObject(o, "reason", reason);
  cJSON_AddItemToArray(v->problems, o);
}

/* The entry's file rel as the runtime would open it: reached without a
 * link, a regular file, trusted. NULL or the runtime's reason (caller
 * frees). Also keeps a FIFO from blocking the generator's own reads. */
static char *reachable(const verify_ctx *v, const char *key, const char *name) {
  char rel[128];
  rt_err e;
  size_t size;
  int fd;
  if (v->root.fd < 0)
    return NULL;
  snprintf(rel, sizeof rel, "objects/%.2s/%.32s/%.60s", key, key, name);
  if (rt_root_open_file(&v->root, rel, strcmp(name, "meta.json") == 0, &fd, &size, &e) == KF_OK) {
    close(fd);
    return NULL;
  }
  struct stat st;
  if (e.status == KF_ERR_IO && fstatat(v->root.fd, rel, &st, AT_SYMLINK_NOFOLLOW) != 0 &&
      errno == ENOENT)
    return NULL; /* missing: the generator's check says which part */
  return kf_xstrdup(e.text);
}

/* Whether the entry's object, named by its meta.json m, is one the walk of
 * manifests read whole with the checksum and size m gives: then hashing it
 * again would add nothing. */
static int read_whole(const verify_ctx *v, const char *key, const kf_entry_meta *m) {
  const struct seen *e = seen_of(v, key);
  char rel[200];
  if (!e || !e->whole || !m->key || strcmp(m->key, key) != 0 || !m->checksum || !m->has_size ||
      !m->object || strchr(m->object, '/') || strcmp(m->checksum, e->sum) != 0 ||
      m->size != e->size)
    return 0;
  snprintf(rel, sizeof rel, "objects/%.2s/%s/%s", key, key, m->object);
  return strcmp(rel, e->object) == 0;
}

static void check_entry(const char *key, void *ctx) {
  verify_ctx *v = ctx;
  char *why = reachable(v, key, "meta.json");
  kf_entry_meta m;
  int ok = 0;
  memset(&m, 0, sizeof m);
  v->checked++;
  /* name the kernel even when meta.json is what broke */
  if (!why)
    kf_entry_meta_load(v->c, key, &m);
  if (!why && read_whole(v, key, &m))
    ok = 1;
  else {
    if (!why && m.object && !strchr(m.object, '/'))
      why = reachable(v, key, m.object);
    if (!why)
      ok = kf_cache_check_entry(v->c, key, NULL, &why) == KF_ENTRY_OK;
  }
  const char *reason = why ? why : "entry is incomplete";
  const struct seen *e = seen_of(v, key);
  /* damage a manifest's entry showed is reported once, with the runtime's
   * reason, by the walk of manifests */
  if (!ok && !(e && !e->whole))
    damage(v, key, m.kernel_id, NULL, reason);
  if (v->entries) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "key", key);
    cJSON_AddStringToObject(o, "kernel_id", m.kernel_id ? m.kernel_id : "?");
    cJSON_AddBoolToObject(o, "ok", ok);
    if (!ok)
      cJSON_AddStringToObject(o, "reason", reason);
    cJSON_AddItemToArray(v->entries, o);
  }
  kf_entry_meta_free(&m);
  free(why);
}

/* A manifest entry the runtime refuses (it names kernels[i]). */
static void bad_entry(void *ctx, int i, const rt_err *e) {
  verify_ctx *v = ctx;
  (void)i;
  damage(v, NULL, NULL, v->manifest, e->text);
}

/* The manifest at path, as the runtime opens it, then every object it
 * lists as the runtime loads it, and its meta.json as the runtime reads it
 * for kf_kernel_resources. */
static void check_manifest(const char *path, void *ctx) {
  verify_ctx *v = ctx;
  size_t vlen = strlen(v->c->v1);
  const char *rel = path + vlen + 1;
  char model[256];
  const char *slash;
  rt_manifest m;
  rt_err e;
  if (v->root.fd < 0 || strncmp(path, v->c->v1, vlen) != 0 || path[vlen] != '/')
    return;
  /* manifests/<model>/<arch>.json */
  slash = strchr(rel + strlen("manifests/"), '/');
  snprintf(model, sizeof model, "%.*s", (int)(slash - rel - strlen("manifests/")),
           rel + strlen("manifests/"));
  v->manifest = path;
  if (rt_manifest_verify(&v->root, rel, model, &m, bad_entry, v, &e) != KF_OK) {
    damage(v, NULL, NULL, path, e.text);
    rt_manifest_free(&m);
    return;
  }
  for (int i = 0; i < m.nkernels; i++) {
    const rt_kdesc *k = &m.kernels[i];
    char *image;
    kf_resources res;
    if (!k->id)
      continue; /* refused above */
    if (rt_object_read(&v->root, &m, k, &image, &e) != KF_OK) {
      damage(v, k->key, k->id, path, e.text);
      add_seen(v, k, 0);
      continue;
    }
    free(image);
    add_seen(v, k, 1);
    if (rt_meta_load_at(&v->root, k->meta, &res, &e) != KF_OK) {
      rt_err_prefix(&e, "kernel %s: ", k->id);
      damage(v, k->key, k->id, path, e.text);
      v->seen[v->nseen - 1].whole = 0; /* reported: not again by the entry */
    }
  }
  rt_manifest_free(&m);
}

int kf_cmd_verify(int argc, char **argv) {
  kf_cache c;
  int json = 0, lax = rt_lax_from_env(), n = 0;
  char **args = kf_xmalloc(((size_t)argc + 1) * sizeof *args);
  for (int i = 0; i < argc; i++)
    if (i == 0 || strcmp(argv[i], "--lax-permissions") != 0)
      args[n++] = argv[i];
    else
      lax = 1;
  args[n] = NULL;
  int rc = kf_cache_cli(n, args, usage, &c, &json, NULL);
  free(args);
  if (rc)
    return rc == 1 ? 0 : rc;
  verify_ctx v;
  memset(&v, 0, sizeof v);
  v.c = &c;
  if (json) {
    v.entries = cJSON_CreateArray();
    v.problems = cJSON_CreateArray();
  }
  rt_err e;
  /* the root's and v1/'s own trust first (a cache that is not there has
   * nothing to check); the rest is checked even when they fail */
  if (rt_root_open(&v.root, c.root, lax, &e) == KF_ERR_UNTRUSTED)
    damage(&v, NULL, NULL, c.root, e.text);
  kf_cache_each_manifest(&c, check_manifest, &v);
  if (v.nseen)
    qsort(v.seen, v.nseen, sizeof *v.seen, cmp_seen);
  kf_cache_each_entry(&c, check_entry, &v);
  if (json) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "cache", c.root);
    cJSON_AddNumberToObject(root, "checked", v.checked);
    cJSON_AddBoolToObject(root, "ok", v.damaged == 0);
    cJSON_AddItemToObject(root, "entries", v.entries);
    cJSON_AddItemToObject(root, "damaged", v.problems);
    char *text = cJSON_Print(root);
    puts(text);
    free(text);
    cJSON_Delete(root);
  } else if (v.damaged) {
    printf("%d damaged of %d entries in %s\n", v.damaged, v.checked, c.root);
  } else {
    printf("%d entries ok in %s\n", v.checked, c.root);
  }
  rt_root_close(&v.root);
  for (size_t i = 0; i < v.nseen; i++)
    free(v.seen[i].object);
  free(v.seen);
  kf_cache_free(&c);
  return v.damaged ? 1 : 0;
}
