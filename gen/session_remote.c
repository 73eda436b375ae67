/* session_remote.c: the remote tier of `build`, `warm` and `publish` (see
 * session.h). A local miss asks the remote before compiling; an entry this
 * run compiled goes up; a manifest goes up only when every kernel of it is
 * on the remote. A remote that fails is skipped (remote.c says so once) and
 * the build goes on locally; an entry that fails verification is reported
 * and built here. */
#define _GNU_SOURCE
#include "report.h"
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kf_session_in_shard(const kf_session *s, const kf_unit *u) {
  if (s->publish_only)
    return 0;
  if (s->cli->nshards <= 1)
    return 1;
  /* the key's first 16 hex digits as a number: keys are uniform, and every
   * builder computes the same */
  char head[17];
  memcpy(head, u->key, 16);
  head[16] = '\0';
  unsigned long long h = strtoull(head, NULL, 16);
  return (int)(h % (unsigned long long)s->cli->nshards) == s->cli->shard - 1;
}

static char *closure_get(void *ctx, const char *id, size_t *len) {
  return kf_remote_shared_get(ctx, id, len);
}

static void closure_put(void *ctx, const char *id, const char *text) {
  kf_remote_shared_put(ctx, id, text);
}

int kf_session_remote_open(kf_session *s) {
  char *err = NULL;
  int r = kf_tier_open(&s->tier, &s->cli->remotes, s->cli->remote_read_only, s->cli->signing_key,
                       s->cli->trusted_keys, &err);
  if (r < 0) {
    kf_error(NULL, NULL, "%s", err);
    free(err);
    return 2;
  }
  if (r > 0) { /* a fresh builder keys from closures other builders parsed */
    kf_closure_share share = {closure_get, closure_put, &s->tier};
    kf_digest_set_share(s->digest, &share);
  }
  return 0;
}

void kf_session_remote_fetch_many(kf_session *s, kf_unit **units, size_t n, int *got) {
  const char **keys = kf_xcalloc(n + 1, sizeof *keys);
  size_t *of = kf_xcalloc(n + 1, sizeof *of); /* units[i]'s key is keys[of[i]] */
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    size_t k = 0;
    while (k < m && strcmp(keys[k], units[i]->key)) /* identical instantiations: one lock */
      k++;
    if (k == m)
      keys[m++] = units[i]->key;
    of[i] = k;
  }
  kf_staged *staged = kf_xcalloc(m + 1, sizeof *staged);
  int *sts = kf_xcalloc(m + 1, sizeof *sts);
  char **whys = kf_xcalloc(m + 1, sizeof *whys);
  kf_remote_entries_stage(&s->tier, &s->cache, keys, m, staged, sts, whys);
  size_t nstaged = 0;
  for (size_t k = 0; k < m; k++)
    if (sts[k] == KF_REMOTE_OK)
      staged[nstaged++] = staged[k];
  char *why = NULL;
  int published = kf_staged_publish_all(&s->cache, staged, nstaged, &why) == 0;
  if (!published)
    kf_warning(NULL, NULL, "%s; building here what was fetched", why);
  free(why);
  for (size_t i = 0; i < n; i++) {
    kf_unit *u = units[i];
    int st = sts[of[i]];
    /* a verified entry whose publication succeeded is there (the caller
     * reads its meta); after a failed one, only what the cache holds */
    got[i] = st == KF_REMOTE_OK &&
             (published || kf_cache_check_entry(&s->cache, u->key, NULL, NULL) == KF_ENTRY_OK);
    if (got[i]) {
      s->fetched++;
      u->on_remote = 1;
    } else if (st == KF_REMOTE_BAD) {
      s->refused++;
      u->on_remote = -1; /* what is there is refused: no manifest of ours names it */
      kf_warning(NULL, NULL, "%s: remote entry %s refused: %s; building it here", u->in->id, u->key,
                 whys[of[i]]);
    } else if (st == KF_REMOTE_MISSING) {
      kf_remote_stats_of(s->tier.remote)->misses++;
    }
  }
  for (size_t k = 0; k < m; k++)
    free(whys[k]);
  free(whys);
  free(sts);
  free(staged);
  free(of);
  free(keys);
}

/* Makes sure u's kernel is on the remote and its checksum known: uploads a
 * local entry the remote lacks; reads another shard's record. Returns 1 when
 * it is there. */
static int ensure_on_remote(kf_session *s, kf_unit *u) {
  if (u->on_remote)
    return u->on_remote > 0;
  if (u->state == KF_UNIT_CACHED || u->state == KF_UNIT_COMPILED) {
    u->on_remote = kf_remote_entry_upload(&s->tier, &s->cache, u->key) == KF_REMOTE_OK;
    return u->on_remote;
  }
  if (u->state != KF_UNIT_PENDING || !u->keyed)
    return 0; /* failed here */
  kf_remote_record rec;
  char *why = NULL;
  int st = kf_remote_entry_record(&s->tier, u->key, &rec, &why);
  if (st == KF_REMOTE_BAD)
    kf_warning(NULL, NULL, "%s: remote entry %s refused: %s", u->in->id, u->key, why);
  free(why);
  if (st != KF_REMOTE_OK)
    return 0;
  snprintf(u->checksum, sizeof u->checksum, "%s", rec.checksum);
  snprintf(u->sha256, sizeof u->sha256, "%s", rec.object_sha256);
  u->size = rec.object_size;
  u->on_remote = 1;
  return 1;
}

/* Publishes the manifest of (m, arch) when all its kernels are on the
 * remote. Returns 1 when published, 0 when incomplete there. */
static int publish_manifest(kf_session *s, const kf_model *m, const char *arch) {
  long missing = 0;
  const char *first = NULL;
  for (size_t k = 0; k < s->plan.n; k++) {
    kf_unit *u = &s->units[k];
    if (u->in->model != m || strcmp(u->in->arch, arch) != 0)
      continue;
    if (!ensure_on_remote(s, u)) {
      missing++;
      if (!first)
        first = u->in->id;
    }
  }
  if (missing) {
    kf_note(NULL, NULL,
            "manifest %s/%s not published to the remote: %ld of its kernels are not there yet "
            "(%s%s)",
            m->name, arch, missing, first, missing > 1 ? ", ..." : "");
    return 0;
  }
  kf_manifest man;
  int ok = kf_session_manifest_of(s, m, arch, 0, &man);
  char *text = ok ? kf_manifest_text(&man) : NULL;
  kf_manifest_free(&man);
  ok = text && kf_remote_manifest_put(&s->tier, m->name, arch, text) == KF_REMOTE_OK;
  free(text);
  return ok;
}

long kf_session_remote_finish(kf_session *s) {
  if (!kf_remote_writable(s->tier.remote)) {
    if (s->publish_only)
      kf_error(NULL, NULL, "no remote can take the manifests (read-only or skipped)");
    return s->publish_only ? 1 : 0;
  }
  for (size_t i = 0; i < s->plan.n; i++) /* what this run compiled, first */
    if (s->units[i].state == KF_UNIT_COMPILED)
      ensure_on_remote(s, &s->units[i]);
  long incomplete = 0;
  for (size_t i = 0; i < s->nmodels; i++)
    for (size_t a = 0; a < s->models[i]->arches.n; a++) {
      if (publish_manifest(s, s->models[i], s->models[i]->arches.v[a]))
        s->published++;
      else
        incomplete++;
    }
  return incomplete;
}
