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

/* Whether the local entry of k is good and holds the object k names. */
static int have_kernel(const kf_cache *c, const kf_manifest_kernel *k) {
  kf_entry_meta m;
  if (kf_cache_check_entry(c, k->key, &m, NULL) != KF_ENTRY_OK)
    return 0;
  int same = !strcmp(m.checksum, k->checksum) && m.size == k->size;
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

/* Entries staged and not yet published: at most BATCH at once, since each
 * holds its key's lock (an open file). */
#define BATCH 64
typedef struct {
  kf_staged *v;
  size_t n;
} batch;

/* Publishes the batch (kf_staged_publish_all). Returns 0, or 1 after
 * reporting (the batch is released either way). */
static int flush(const kf_cache *c, batch *b) {
  char *why = NULL;
  int rc = kf_staged_publish_all(c, b->v, b->n, &why) != 0;
  if (rc)
    kf_error(NULL, NULL, "%s", why);
  free(why);
  b->n = 0;
  return rc;
}

static const kf_manifest *sort_manifest;
static int cmp_key(const void *a, const void *b) {
  const char *ka = sort_manifest->kernels[*(const size_t *)a].key;
  const char *kb = sort_manifest->kernels[*(const size_t *)b].key;
  return strcmp(ka ? ka : "", kb ? kb : "");
}

/* Sorts kernel indices by key: every puller takes the keys' locks in one
 * order, so two of them never wait on each other. */
static void by_key(const kf_manifest *m, size_t *order) {
  sort_manifest = m;
  qsort(order, m->nkernels, sizeof *order, cmp_key);
}

/* Pulls one (model, arch). Returns 0 or 1 after reporting why not. */
static int pull_one(kf_tier *t, const kf_cache *c, const char *model, const char *arch, int json,
                    pull_counts *n) {
  char *why = NULL;
  kf_buf text = {0}, record = {0};
  int st = kf_remote_manifest_get(t, model, arch, &text, &record, &why);
  if (st != KF_REMOTE_OK) {
    if (st == KF_REMOTE_MISSING)
      kf_error(NULL, NULL, "%s/%s: no manifest on the remote (build and publish it first)", model,
               arch);
    else
      kf_error(NULL, NULL, "%s/%s: remote manifest refused: %s", model, arch, why);
    free(why);
    kf_buf_free(&text);
    return 1;
  }
  kf_manifest man;
  int rc = 0;
  if (kf_manifest_parse(text.data, text.len, &man, &why) != 0 || !man.model || !man.arch ||
      strcmp(man.model, model) || strcmp(man.arch, arch)) {
    kf_error(NULL, NULL, "%s/%s: remote manifest refused: %s", model, arch,
             why ? why : "it names another model or arch");
    rc = 1;
  }
  long fetched = 0, here = 0;
  size_t *order = kf_xcalloc(man.nkernels + 1, sizeof *order);
  for (size_t i = 0; i < man.nkernels; i++)
    order[i] = i;
  if (rc == 0)
    by_key(&man, order);
  batch b = {kf_xcalloc(BATCH, sizeof *b.v), 0};
  const char **want = kf_xcalloc(BATCH, sizeof *want);
  const char **want_id = kf_xcalloc(BATCH, sizeof *want_id);
  int sts[BATCH];
  char *whys[BATCH];
  size_t nwant = 0;
  for (size_t n = 0; rc == 0 && n <= man.nkernels; n++) {
    /* the missing entries go in batches: every record at once, then every
     * meta and object at once (remote.h's get_many) */
    if (nwant == BATCH || (n == man.nkernels && nwant)) {
      kf_remote_entries_stage(t, c, want, nwant, b.v, sts, whys);
      for (size_t i = 0; i < nwant; i++) {
        if (sts[i] == KF_REMOTE_OK)
          fetched++;
        else if (rc == 0 && sts[i] == KF_REMOTE_MISSING)
          kf_error(NULL, NULL, "%s: entry %s is not on the remote", want_id[i], want[i]);
        else if (rc == 0)
          kf_error(NULL, NULL, "%s: remote entry %s refused: %s", want_id[i], want[i], whys[i]);
        rc |= sts[i] != KF_REMOTE_OK;
        free(whys[i]);
      }
      /* what passed stays, even when another failed */
      size_t keep = 0;
      for (size_t i = 0; i < nwant; i++)
        if (sts[i] == KF_REMOTE_OK)
          b.v[keep++] = b.v[i];
      b.n = keep;
      rc |= flush(c, &b);
      nwant = 0;
    }
    if (n == man.nkernels || rc)
      break;
    const kf_manifest_kernel *k = &man.kernels[order[n]];
    const char *id = k->id ? k->id : "?";
    if (!k->key || !k->checksum || !k->has_size) {
      kf_error(NULL, NULL, "%s/%s: remote manifest refused: kernel %s is incomplete", model, arch,
               id);
      rc = 1;
      break;
    }
    if (have_kernel(c, k)) {
      here++;
      continue;
    }
    if (nwant && !strcmp(want[nwant - 1], k->key))
      continue; /* the same instantiation under two ids (sorted: adjacent): one lock, one fetch */
    want_id[nwant] = id;
    want[nwant++] = k->key;
  }
  free(want);
  free(want_id);
  free(b.v);
  for (size_t i = 0; rc == 0 && i < man.nkernels; i++)
    if (!have_kernel(c, &man.kernels[i])) {
      kf_error(NULL, NULL, "%s: entry %s does not hold the object the manifest names",
               man.kernels[i].id ? man.kernels[i].id : "?", man.kernels[i].key);
      rc = 1;
    }
  free(order);
  if (rc == 0) {
    char *path = kf_cache_manifest_path(c, model, arch);
    if (write_manifest(path, &text, &record) != 0) {
      kf_error(NULL, NULL, "cannot write manifest %s: %s", path, strerror(errno));
      rc = 1;
    }
    free(path);
  }
  if (rc == 0)
    fetched = (long)man.nkernels - here; /* twins of a fetched key included */
  if (rc == 0 && !json)
    printf("pulled %s/%s: %zu kernels (%ld fetched, %ld already here)\n", model, arch, man.nkernels,
           fetched, here);
  if (rc == 0) {
    n->kernels += (long)man.nkernels;
    n->manifests++;
  } else {
    n->failed++;
  }
  n->fetched += fetched;
  n->here += here;
  free(why);
  kf_manifest_free(&man);
  kf_buf_free(&text);
  kf_buf_free(&record);
  return rc;
}

int kf_cmd_pull(int argc, char **argv) {
  kf_cli cli;
  int rc = kf_cli_parse(&cli, argc, argv, usage, NULL, NULL);
  if (rc)
    return rc == 1 ? 0 : rc;
  kf_strv models = {0}, arches = {0};
  kf_tier t = {0};
  kf_cache c;
  char *err = NULL;
  kf_cache_init(&c, cli.cache_dir);
  int tr = 0;
  if (cli.inputs.n == 0) {
    kf_usage_error(usage, "no model given");
    rc = 2;
  } else if ((rc = kf_remote_targets(&cli, usage, &models, &arches)) == 0) {
    tr = kf_tier_open(&t, &cli.remotes, 1, NULL, cli.trusted_keys, &err);
    if (tr <= 0) {
      kf_error(NULL, NULL, "%s", err ? err : "no remote given (--remote URL or $KFORGE_REMOTE)");
      rc = 2;
    } else if (kf_cache_prepare(&c, &err) != 0) {
      kf_error(NULL, NULL, "cache %s is not writable: %s", c.root, err);
      rc = 2;
    }
  }
  if (rc == 0) {
    pull_counts n = {0};
    for (size_t i = 0; i < models.n; i++)
      rc |= pull_one(&t, &c, models.v[i], arches.v[i], cli.json, &n);
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
