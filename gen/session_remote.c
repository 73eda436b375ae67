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

int kf_session_remote_open(kf_session *s) {
  char *err = NULL;
  int r = kf_tier_open(&s->tier, &s->cli->remotes, s->cli->remote_read_only, s->cli->signing_key,
                       s->cli->trusted_keys, &err);
  if (r < 0) {
    kf_error(NULL, NULL, "%s", err);
    free(err);
    return 2;
  }
  return 0;
}

int kf_session_remote_fetch(kf_session *s, kf_unit *u) {
  char *why = NULL;
  int st = kf_remote_entry_fetch(&s->tier, &s->cache, u->key, &why);
  if (st == KF_REMOTE_OK) {
    s->fetched++;
    u->on_remote = 1;
    return 1;
  }
  if (st == KF_REMOTE_BAD) {
    s->refused++;
    u->on_remote = -1; /* what is there is refused: no manifest of ours names it */
    kf_warning(NULL, NULL, "%s: remote entry %s refused: %s; building it here", u->in->id, u->key,
               why);
  } else {
    kf_remote_stats_of(s->tier.remote)->misses++;
  }
  free(why);
  return 0;
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
