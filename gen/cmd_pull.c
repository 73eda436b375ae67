/* cmd_pull.c: `kforge pull`: materialises (model, arch) sets from the remote
 * into a local cache, for a container image or a server's start. Every
 * entry is verified (remote_entry.c) before it is published; a manifest is
 * written, byte for byte as the builder published it, only when every
 * kernel it names is in the local cache with the checksum it names. */
#define _GNU_SOURCE
#include "cmd_remote.h"
#include "commands.h"
#include "manifest.h"
#include "remote_entry.h"
#include "report.h"
#include "stats.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: kforge pull [--cache DIR] [--remote URL]... [--trusted-keys LIST] [--arch LIST]\n"
    "                   [--json] MODEL|MODEL.json...\n"
    "Fetches the manifest of every (model, arch) from the remote and every entry it names,\n"
    "verifies each (checksums, keys, and signatures when trusted keys are given) and\n"
    "publishes it into the cache; then writes the manifest. A MODEL.json description\n"
    "gives its name and arches; a bare model name needs --arch. Prints one line per\n"
    "manifest: 'pulled <model>/<arch>: N kernels (F fetched, L already here)'. Exit 0 when\n"
    "every manifest was pulled, 1 when one is missing or refused (its manifest is not\n"
    "written), 2 on bad usage or an unwritable cache.\n";

typedef struct {
  long kernels, fetched, here, manifests, failed;
} pull_counts;

/* Whether the local entry of key is good and holds the object named by
 * checksum and size. */
static int have_entry(const kf_cache *c, const char *key, const char *checksum, int64_t size) {
  kf_entry_meta m;
  if (kf_cache_check_entry(c, key, &m, NULL) != KF_ENTRY_OK)
    return 0;
  int same = !strcmp(m.checksum, checksum) && m.size == size;
  kf_entry_meta_free(&m);
  return same;
}

/* Writes a pulled manifest and, first, its record as path.sig when it is
 * signed, for a runtime that requires signatures (runtime/rt_sign.c); an
 * unsigned one removes a stale .sig. Returns 0 or -1 with errno set. */
static int write_manifest(const char *path, const kf_buf *text, const kf_buf *record) {
  char *dir = kf_path_dirname(path);
  char *sig = kf_xasprintf("%s.sig", path);
  int signed_ = record->data && strstr(record->data, "\"signature\"") != NULL;
  int r = kf_mkdir_p(dir);
  if (r == 0 && signed_)
    r = kf_write_if_changed(sig, record->data, record->len, NULL);
  else if (r == 0 && unlink(sig) != 0 && errno != ENOENT)
    r = -1;
  if (r == 0)
    r = kf_write_if_changed(path, text->data, text->len, NULL);
  free(sig);
  free(dir);
  return r;
}

/* One (model, arch) being pulled: its verified manifest from the remote. */
typedef struct {
  const char *model, *arch;
  kf_buf text, record;
  kf_manifest man;
  int ok; /* manifest taken; cleared when a kernel of it cannot be had */
} pulled;

/* One key some manifest names, with the object it names. */
typedef struct {
  const char *key, *checksum, *id; /* the first naming kernel's */
  int64_t size;
  enum { WANTED, HERE, FETCHED, FAILED } state;
} wanted;

static int cmp_wanted(const void *a, const void *b) {
  return strcmp(((const wanted *)a)->key, ((const wanted *)b)->key);
}

/* The entry of key among the sorted w[0..n), or NULL. */
static wanted *find_wanted(wanted *w, size_t n, const char *key) {
  wanted probe = {.key = key};
  return bsearch(&probe, w, n, sizeof *w, cmp_wanted);
}

/* Gets and checks the manifest of p. Returns 0, or 1 after reporting. */
static int get_manifest(kf_tier *t, pulled *p) {
  char *why = NULL;
  int st = kf_remote_manifest_get(t, p->model, p->arch, &p->text, &p->record, &why);
  if (st != KF_REMOTE_OK) {
    if (st == KF_REMOTE_MISSING)
      kf_error(NULL, NULL, "%s/%s: no manifest on the remote (build and publish it first)",
               p->model, p->arch);
    else
      kf_error(NULL, NULL, "%s/%s: remote manifest refused: %s", p->model, p->arch, why);
    free(why);
    return 1;
  }
  if (kf_manifest_parse(p->text.data, p->text.len, &p->man, &why) != 0 || !p->man.model ||
      !p->man.arch || strcmp(p->man.model, p->model) || strcmp(p->man.arch, p->arch)) {
    kf_error(NULL, NULL, "%s/%s: remote manifest refused: %s", p->model, p->arch,
             why ? why : "it names another model or arch");
    free(why);
    return 1;
  }
  for (size_t i = 0; i < p->man.nkernels; i++) {
    const kf_manifest_kernel *k = &p->man.kernels[i];
    if (!k->key || !k->checksum || !k->has_size) {
      kf_error(NULL, NULL, "%s/%s: remote manifest refused: kernel %s is incomplete", p->model,
               p->arch, k->id ? k->id : "?");
      return 1;
    }
  }
  return 0;
}

/* Entries staged and not yet published: at most BATCH at once, since each
 * holds its key's lock (an open file) and its bytes were in memory. */
#define BATCH 128

/* Fetches, checks and publishes w's entries that are WANTED, BATCH at a
 * time (every record at once, then every meta and object at once: remote.h's
 * get_many), each batch with one sync before its renames. Returns 0, or 1
 * after reporting. */
static int fetch_wanted(kf_tier *t, const kf_cache *c, wanted *w, size_t n) {
  kf_staged staged[BATCH];
  const char *keys[BATCH];
  wanted *of[BATCH];
  int sts[BATCH];
  char *whys[BATCH];
  int rc = 0;
  for (size_t at = 0; at < n;) {
    size_t m = 0;
    for (; at < n && m < BATCH; at++)
      if (w[at].state == WANTED) {
        of[m] = &w[at];
        keys[m++] = w[at].key;
      }
    if (!m)
      break;
    kf_remote_entries_stage(t, c, keys, m, staged, sts, whys);
    size_t keep = 0;
    for (size_t i = 0; i < m; i++) {
      wanted *e = of[i];
      if (sts[i] == KF_REMOTE_MISSING)
        kf_error(NULL, NULL, "%s: entry %s is not on the remote", e->id, e->key);
      else if (sts[i] != KF_REMOTE_OK)
        kf_error(NULL, NULL, "%s: remote entry %s refused: %s", e->id, e->key, whys[i]);
      else if (strcmp(staged[i].checksum, e->checksum) || staged[i].size != e->size) {
        kf_error(NULL, NULL, "%s: entry %s does not hold the object the manifest names", e->id,
                 e->key);
        kf_staged_drop(&staged[i]);
        sts[i] = KF_REMOTE_BAD;
      }
      free(whys[i]);
      e->state = sts[i] == KF_REMOTE_OK ? FETCHED : FAILED;
      if (sts[i] == KF_REMOTE_OK)
        staged[keep++] = staged[i];
      rc |= sts[i] != KF_REMOTE_OK;
    }
    /* what passed stays, even when another failed */
    char *why = NULL;
    if (kf_staged_publish_all(c, staged, keep, &why) != 0) {
      kf_error(NULL, NULL, "%s", why);
      for (size_t i = 0; i < m; i++)
        if (of[i]->state == FETCHED && !have_entry(c, of[i]->key, of[i]->checksum, of[i]->size))
          of[i]->state = FAILED;
      rc = 1;
    }
    free(why);
  }
  return rc;
}

/* Pulls every (models[i], arches[i]): all manifests first, then every entry
 * they name that the cache lacks, in batches across manifests, then each
 * manifest whose kernels are all here. Returns 0 or 1 after reporting. */
static int pull_all(kf_tier *t, const kf_cache *c, const kf_strv *models, const kf_strv *arches,
                    int json, pull_counts *n) {
  pulled *ps = kf_xcalloc(models->n + 1, sizeof *ps);
  size_t nw = 0;
  for (size_t i = 0; i < models->n; i++) {
    ps[i].model = models->v[i];
    ps[i].arch = arches->v[i];
    ps[i].ok = get_manifest(t, &ps[i]) == 0;
    if (ps[i].ok)
      nw += ps[i].man.nkernels;
  }
  wanted *w = kf_xcalloc(nw + 1, sizeof *w);
  nw = 0;
  for (size_t i = 0; i < models->n; i++)
    for (size_t k = 0; ps[i].ok && k < ps[i].man.nkernels; k++) {
      const kf_manifest_kernel *mk = &ps[i].man.kernels[k];
      w[nw++] = (wanted){mk->key, mk->checksum, mk->id ? mk->id : "?", mk->size, WANTED};
    }
  /* one entry per key (the same instantiation under two ids or models: one
   * lock, one fetch), in key order: every puller takes the keys' locks in
   * one order, so two of them never wait on each other */
  qsort(w, nw, sizeof *w, cmp_wanted);
  size_t u = 0;
  for (size_t i = 0; i < nw; i++)
    if (!u || strcmp(w[u - 1].key, w[i].key))
      w[u++] = w[i];
  nw = u;
  for (size_t i = 0; i < nw; i++)
    if (have_entry(c, w[i].key, w[i].checksum, w[i].size))
      w[i].state = HERE;
  int rc = fetch_wanted(t, c, w, nw);
  long fetched_any = 0;
  for (size_t i = 0; i < nw; i++)
    fetched_any += w[i].state == FETCHED;
  if (fetched_any && kf_cache_sync(c) != 0) { /* the renames, before a manifest names them */
    kf_error(NULL, NULL, "cannot sync %s: %s", c->v1, strerror(errno));
    for (size_t i = 0; i < models->n; i++)
      ps[i].ok = 0;
  }
  for (size_t i = 0; i < models->n; i++) {
    pulled *p = &ps[i];
    long fetched = 0, here = 0;
    for (size_t k = 0; p->ok && k < p->man.nkernels; k++) {
      const kf_manifest_kernel *mk = &p->man.kernels[k];
      wanted *e = find_wanted(w, nw, mk->key);
      /* a key two manifests name with different objects: only one can be */
      if (!e || e->state == FAILED || e->state == WANTED || strcmp(e->checksum, mk->checksum) ||
          e->size != mk->size) {
        if (e && e->state != FAILED && e->state != WANTED)
          kf_error(NULL, NULL, "%s: entry %s does not hold the object the manifest names",
                   mk->id ? mk->id : "?", mk->key);
        p->ok = 0;
      } else if (e->state == FETCHED) {
        fetched++;
      } else {
        here++;
      }
    }
    if (p->ok) {
      char *path = kf_cache_manifest_path(c, p->model, p->arch);
      if (write_manifest(path, &p->text, &p->record) != 0) {
        kf_error(NULL, NULL, "cannot write manifest %s: %s", path, strerror(errno));
        p->ok = 0;
      }
      free(path);
    }
    if (p->ok && !json)
      printf("pulled %s/%s: %zu kernels (%ld fetched, %ld already here)\n", p->model, p->arch,
             p->man.nkernels, fetched, here);
    if (p->ok) {
      n->kernels += (long)p->man.nkernels;
      n->manifests++;
    } else {
      n->failed++;
      rc = 1;
    }
    n->fetched += fetched;
    n->here += here;
  }
  for (size_t i = 0; i < models->n; i++) { /* w points into them */
    kf_manifest_free(&ps[i].man);
    kf_buf_free(&ps[i].text);
    kf_buf_free(&ps[i].record);
  }
  free(w);
  free(ps);
  return rc;
}

int kf_cmd_pull(int argc, char **argv) {
  kf_cli cli;
  int rc = kf_cli_parse(&cli, argc, argv, usage, NULL, NULL);
  if (rc)
    return rc == 1 ? 0 : rc;
  kf_strv models = {0}, arches = {0};
  kf_tier t;
  kf_cache c;
  char *err = NULL;
  kf_cache_init(&c, cli.cache_dir);
  rc = kf_remote_command_open(&cli, usage, &models, &arches, &t);
  if (rc == 0 && kf_cache_prepare(&c, &err) != 0) {
    kf_error(NULL, NULL, "cache %s is not writable: %s", c.root, err);
    rc = 2;
  }
  if (rc == 0) {
    pull_counts n = {0};
    rc = pull_all(&t, &c, &models, &arches, cli.json, &n);
    kf_stats_add_remote(&c, kf_remote_stats_of(t.remote));
    if (cli.json)
      printf("{\"manifests\": %ld, \"failed\": %ld, \"kernels\": %ld, \"fetched\": %ld, "
             "\"here\": %ld, \"requests\": %ld, \"bytes_in\": %lld}\n",
             n.manifests, n.failed, n.kernels, n.fetched, n.here,
             kf_remote_stats_of(t.remote)->requests, kf_remote_stats_of(t.remote)->bytes_in);
  }
  free(err);
  kf_tier_free(&t);
  kf_cache_free(&c);
  kf_strv_free(&models);
  kf_strv_free(&arches);
  kf_cli_free(&cli);
  return rc;
}
