/* session.c: loading, keying and the build behind `build`, `warm`, `keys`
 * and `explain` (see session.h).
 *
 * The main thread emits and keys units one after another (libclang runs
 * there only) and hands each miss to the compile pool (pool.c) as soon as
 * its key is known, so parsing overlaps compiling. The cache is prepared for
 * writing only at the first miss: a complete cache that cannot be written
 * still serves a build that has nothing to compile. */
#define _GNU_SOURCE
#include "session.h"
#include "manifest.h"
#include "report.h"
#include "sign.h"
#include "stats.h"
#include "tuning.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- loading and keying ---- */

int kf_session_load(kf_session *s, kf_cli *cli, int write_deps) {
  memset(s, 0, sizeof *s);
  s->cli = cli;
  kf_cache_init(&s->cache, cli->cache_dir);
  int bad = 0;
  s->models = kf_xcalloc(cli->inputs.n ? cli->inputs.n : 1, sizeof *s->models);
  for (size_t i = 0; i < cli->inputs.n; i++) {
    kf_model *m = kf_model_load(cli->inputs.v[i], &cli->mopt);
    if (!m) {
      bad = 1;
      continue;
    }
    for (size_t k = 0; k < s->nmodels; k++)
      if (!strcmp(s->models[k]->name, m->name)) {
        kf_error(m->path, "name", "model \"%s\" is also described by %s", m->name,
                 s->models[k]->path);
        bad = 1;
      }
    s->models[s->nmodels++] = m;
  }
  for (size_t i = 0; i < cli->tuning.n; i++)
    bad |= kf_tuning_load(&s->tuning, cli->tuning.v[i]) != 0;
  if (bad || kf_tuning_check(&s->tuning, s->models, s->nmodels) != 0)
    return 2;
  s->plan.tuning = cli->tuning.n ? &s->tuning : NULL;
  for (size_t i = 0; i < s->nmodels; i++)
    kf_plan_add_model(&s->plan, s->models[i]);
  if (cli->tuning.n) {
    size_t used = 0, tuned = 0;
    for (size_t i = 0; i < s->tuning.n; i++)
      used += s->tuning.v[i].used;
    for (size_t i = 0; i < s->plan.n; i++)
      tuned += s->plan.v[i].tuned;
    kf_note(NULL, NULL,
            "tuning: %zu of %zu entries match kernels of this build; %zu kernels take "
            "other values than their description's",
            used, s->tuning.n, tuned);
  }
  kf_plan_sort(&s->plan); /* one order by id across descriptions */
  s->units = kf_xcalloc(s->plan.n ? s->plan.n : 1, sizeof *s->units);
  char *deps = kf_path_join(s->cache.v1, "deps");
  s->digest = kf_digest_new(deps, write_deps);
  free(deps);
  for (size_t i = 0; i < s->plan.n; i++) {
    kf_unit *u = &s->units[i];
    u->in = &s->plan.v[i];
    u->tc = kf_toolchain_for_arch(u->in->arch, NULL);
    kf_compile_setup_init(&u->cs, u->in, u->tc, cli->out_dir, cli->mopt.templates_dir,
                          &cli->mopt.extra_template_dirs, &cli->defines);
  }
  return 0;
}

void kf_session_report(kf_session *s, const kf_unit *u) {
  /* a toolchain that cannot build an arch fails every kernel of it alike:
   * say so once per reason */
  for (size_t i = 0; i < s->reported.n; i++)
    if (!strcmp(s->reported.v[i], u->error))
      return;
  kf_strv_push(&s->reported, u->error);
  kf_error(NULL, NULL, "%s: %s", u->in->id, u->error);
}

int kf_session_key(kf_session *s, kf_unit *u) {
  if (u->keyed)
    return 0;
  const char *why;
  kf_toolchain_for_arch(u->in->arch, &why);
  if (why) {
    u->error = kf_xstrdup(why);
    return -1;
  }
  char *err = NULL;
  int reparsed = 0;
  if (kf_digest_instance(s->digest, u->in, u->tc, &u->cs, &u->records, u->key, &reparsed, &err) !=
      0) {
    u->error = err;
    return -1;
  }
  s->reparsed += reparsed;
  u->keyed = 1;
  return 0;
}

void kf_session_free(kf_session *s) {
  if (s->units)
    for (size_t i = 0; i < s->plan.n; i++) {
      kf_compile_setup_free(&s->units[i].cs);
      kf_records_free(&s->units[i].records);
      free(s->units[i].error);
    }
  free(s->units);
  kf_plan_free(&s->plan);
  kf_tuning_free(&s->tuning);
  for (size_t i = 0; i < s->nmodels; i++)
    kf_model_free(s->models[i]);
  free(s->models);
  kf_digest_free(s->digest);
  kf_cache_free(&s->cache);
  kf_strv_free(&s->reported);
  kf_tier_free(&s->tier);
}

int kf_session_open(kf_session *s, kf_cli *cli, int argc, char **argv, const char *usage,
                    int write_deps) {
  memset(s, 0, sizeof *s);
  int rc = kf_cli_parse(cli, argc, argv, usage, NULL, NULL);
  if (rc)
    return rc == 1 ? 0 : rc;
  if (cli->inputs.n == 0) {
    kf_usage_error(usage, "no description given");
    kf_cli_free(cli);
    return 2;
  }
  rc = kf_session_load(s, cli, write_deps);
  if (rc) {
    kf_session_free(s);
    kf_cli_free(cli);
    return rc;
  }
  return KF_SESSION_READY;
}

/* ---- building ---- */

/* A manifest with a kernel missing is never written (the old one stays). */
/* The SHA-256 a manifest names for u's object (caller frees): the one known,
 * else read from the cached object (an entry of an older kforge), else NULL
 * (then not named). */
static char *unit_sha256(const kf_session *s, const kf_unit *u) {
  if (u->sha256[0])
    return kf_xstrdup(u->sha256);
  char *dir = kf_cache_entry_dir(&s->cache, u->key);
  char *path = kf_path_join(dir, kf_unit_object_name(u));
  size_t len = 0;
  char *bytes = kf_read_file(path, &len);
  char *sha = NULL;
  if (bytes && (long long)len == u->size) {
    sha = kf_xcalloc(65, 1);
    kf_sha256_hex(bytes, len, sha);
  }
  free(bytes);
  free(path);
  free(dir);
  return sha;
}

/* The layer kind of m that runs kinds, in order, as its phases and has
 * kernels for arch in this build, or NULL. */
static const char *layer_kind_of(const kf_session *s, const kf_model *m, const char *arch,
                                 const kf_strv *kinds) {
  for (size_t k = 0; k < m->nkernels; k++) {
    const kf_kernel_desc *d = &m->kernels[k];
    int same = d->nphases == kinds->n;
    for (size_t p = 0; same && p < d->nphases; p++)
      same = !strcmp(d->phases[p]->kind, kinds->v[p]);
    for (size_t i = 0; same && i < s->plan.n; i++)
      if (s->plan.v[i].model == m && !strcmp(s->plan.v[i].arch, arch) &&
          !strcmp(s->plan.v[i].kernel->kind, d->kind))
        return d->kind;
  }
  return NULL;
}

int kf_session_manifest_of(const kf_session *s, const kf_model *m, const char *arch, int local,
                           kf_manifest *out) {
  kf_manifest_init(out, m->name, arch, kf_arch_is_hip(arch) ? "hip" : "cuda");
  out->description = kf_path_absolute(m->path);
  out->page_size = m->npage_sizes ? m->page_sizes[0] : 0;
  for (size_t i = 0; i < m->nlayer_types; i++)
    kf_manifest_add_layer_type(out, m->layer_types[i].name, m->layer_types[i].count,
                               &m->layer_types[i].kinds,
                               layer_kind_of(s, m, arch, &m->layer_types[i].kinds));
  int all_ok = 1;
  for (size_t k = 0; k < s->plan.n; k++) {
    const kf_unit *u = &s->units[k];
    const kf_instance *in = u->in;
    if (in->model != m || strcmp(in->arch, arch) != 0)
      continue;
    if (!kf_manifest_signature_of(out, in->kernel->kind)) {
      kf_manifest_signature *sig = kf_manifest_add_signature(out, in->kernel->kind);
      const kf_template *t = in->kernel->tmpl;
      for (size_t i = 0; i < t->nargs; i++)
        kf_manifest_add_param(sig, t->args[i].name, t->args[i].type, t->args[i].size);
    }
    int here = u->state == KF_UNIT_CACHED || u->state == KF_UNIT_COMPILED;
    if (u->state == KF_UNIT_FAILED || !u->checksum[0] || (local && !here)) {
      all_ok = 0;
      continue;
    }
    kf_manifest_kernel *e =
        kf_manifest_add_kernel(out, in->id, in->kernel->kind, in->width, u->key,
                               kf_unit_object_name(u), u->checksum, u->size, in->symbol);
    e->sha256 = unit_sha256(s, u);
    e->page_size = in->kernel->page_size;
    kf_manifest_launch *l = &e->launch;
    memcpy(l->grid, in->grid, sizeof l->grid);
    memcpy(l->block, in->block, sizeof l->block);
    memcpy(l->cluster, in->cluster, sizeof l->cluster);
    l->shared_bytes = in->shared_bytes;
    l->programmatic = in->programmatic;
    l->one_wave = in->one_wave;
    l->max_blocks_per_sm = in->max_blocks_per_sm;
    l->cooperative = in->cooperative;
    l->persistent = in->persistent;
    const kf_template *t = in->kernel->tmpl;
    for (size_t b = 0; b < t->nbuffers; b++)
      kf_manifest_add_buffer(e, t->buffers[b].arg, in->buffer_bytes[b], t->buffers[b].zero_once);
  }
  return all_ok;
}

/* Writes path.sig, the signed record of a manifest this build wrote, for a
 * runtime that requires signatures (runtime/rt_sign.c). Returns 0 or -1
 * with errno set. */
static int sign_manifest(const kf_session *s, const char *path, const char *model, const char *arch,
                         const kf_manifest *man) {
  char *text = kf_manifest_text(man);
  char *rec = kf_manifest_record_text(&s->tier, model, arch, text);
  char *sig = kf_xasprintf("%s.sig", path);
  int r = kf_write_if_changed(sig, rec, strlen(rec), NULL);
  free(sig);
  free(rec);
  free(text);
  return r;
}

/* Removes path.sig after an unsigned build changed the manifest: it signs
 * bytes that are gone, and a runtime that requires signatures should say
 * the manifest is unsigned, not that its bytes are not the signed ones.
 * Returns 0 or -1 with errno set. */
static int drop_signature(const char *path) {
  char *sig = kf_xasprintf("%s.sig", path);
  int r = unlink(sig) == 0 || errno == ENOENT ? 0 : -1;
  free(sig);
  return r;
}

/* Writes every complete manifest. Returns 0, or 2 when one cannot be
 * written. */
static int write_manifests(kf_session *s) {
  int rc = 0;
  for (size_t i = 0; i < s->nmodels; i++)
    for (size_t a = 0; a < s->models[i]->arches.n; a++) {
      const kf_model *m = s->models[i];
      const char *arch = m->arches.v[a];
      kf_manifest man;
      if (kf_session_manifest_of(s, m, arch, 1, &man)) {
        char *path = kf_cache_manifest_path(&s->cache, m->name, arch);
        int changed = 0;
        if (kf_manifest_write(path, &man, &changed) != 0 ||
            (s->tier.signing && sign_manifest(s, path, m->name, arch, &man) != 0) ||
            (!s->tier.signing && changed && drop_signature(path) != 0)) {
          kf_error(NULL, NULL, "cannot write manifest %s: %s", path, strerror(errno));
          rc = 2;
        }
        free(path);
      } else if (!s->other_shards && !s->publish_only) {
        kf_note(NULL, NULL, "manifest %s/%s not updated: some of its kernels failed", m->name,
                arch);
      }
      kf_manifest_free(&man);
    }
  return rc;
}

/* Writes u's generated source (only when its content changed). */
static int emit(kf_unit *u) {
  char *dir = kf_path_dirname(u->cs.source_path);
  /* no syncs: the key and the compile take the source from memory and this
   * run's file, and a build after a crash rewrites a file that differs */
  int r = kf_mkdir_p(dir) == 0 &&
                  kf_replace_if_changed(u->cs.source_path, u->in->source, u->in->source_len) == 0
              ? 0
              : -1;
  if (r != 0)
    kf_error(NULL, NULL, "cannot write %s: %s", u->cs.source_path, strerror(errno));
  free(dir);
  return r;
}

/* Makes the cache ready for the first compile. Returns 0, or 2 after saying
 * why a cache that lacks u's entry cannot take it. */
static int prepare_for(kf_session *s, const kf_unit *u) {
  char *err = NULL;
  if (kf_cache_prepare(&s->cache, &err) == 0)
    return 0;
  kf_error(NULL, NULL, "cache %s is not writable: %s; it lacks %s (key %s), which needs compiling",
           s->cache.root, err, u->in->id, u->key);
  free(err);
  return 2;
}

/* Local misses that go to the remote together (kf_session_remote_fetch_many)
 * before what is still missing goes to the pool: a batch costs two round
 * trips, where one at a time each costs three. */
#define REMOTE_BATCH 32
typedef struct {
  kf_unit *v[REMOTE_BATCH];
  size_t n;
} remote_queue;

/* Fetches the queued units' entries; the rest go to the pool. */
static void fetch_queued(kf_session *s, kf_pool *p, remote_queue *q) {
  int got[REMOTE_BATCH];
  kf_session_remote_fetch_many(s, q->v, q->n, got);
  for (size_t i = 0; i < q->n; i++) {
    kf_unit *u = q->v[i];
    kf_entry_meta found;
    if (got[i] && kf_cache_check_entry(&s->cache, u->key, &found, NULL) == KF_ENTRY_OK) {
      kf_unit_take_entry(u, &found);
      kf_entry_meta_free(&found);
      u->state = KF_UNIT_CACHED;
      kf_pool_settled(p);
    } else if (!kf_pool_share(p, u)) {
      kf_pool_add(p, u);
    }
  }
  q->n = 0;
}

/* Emits and keys u, then finds its entry, queues it for the remote or hands
 * it to the pool. Returns 0, 2 when its source cannot be written, or -1 when
 * the cache lacks its entry and cannot be written. */
static int start_unit(kf_session *s, kf_pool *p, kf_unit *u, int *prepared, remote_queue *q) {
  if (emit(u) != 0) {
    u->state = KF_UNIT_FAILED;
    kf_pool_settled(p);
    return 2;
  }
  if (kf_session_key(s, u) != 0) {
    kf_session_report(s, u);
    u->state = KF_UNIT_FAILED;
    kf_pool_settled(p);
    return 0;
  }
  if (!kf_session_in_shard(s, u)) { /* another builder's, or `publish` */
    s->other_shards = 1;
    kf_pool_settled(p);
    return 0;
  }
  if (kf_pool_share(p, u)) /* identical instantiations compile once */
    return 0;
  kf_entry_meta found;
  int st = kf_cache_check_entry(&s->cache, u->key, &found, NULL);
  if (st == KF_ENTRY_OK) {
    kf_unit_take_entry(u, &found);
    kf_entry_meta_free(&found);
    u->state = KF_UNIT_CACHED;
    kf_cache_touch(&s->cache, u->key);
    kf_pool_settled(p);
    return 0;
  }
  if (!*prepared) {
    if (prepare_for(s, u) != 0)
      return -1;
    *prepared = 1;
  }
  if (s->tier.remote) {
    q->v[q->n++] = u;
    if (q->n == REMOTE_BATCH)
      fetch_queued(s, p, q);
    return 0;
  }
  kf_pool_add(p, u);
  return 0;
}

/* Fails every built kernel whose figures break its limits, with the figure
 * and the limit (its entry stays: a correct object for its key). */
static void check_limits(kf_session *s) {
  for (size_t i = 0; i < s->plan.n; i++) {
    kf_unit *u = &s->units[i];
    if (u->state != KF_UNIT_CACHED && u->state != KF_UNIT_COMPILED)
      continue;
    char *why = kf_unit_limits_problem(u);
    if (!why)
      continue;
    u->state = KF_UNIT_FAILED;
    free(u->error);
    u->error = why;
    kf_error(NULL, NULL, "%s: %s", u->in->id, why);
  }
}

static void record_stats(kf_session *s, int cached, int compiled) {
  kf_stats d = {0};
  if (s->tier.remote)
    kf_stats_of_remote(&d, kf_remote_stats_of(s->tier.remote));
  d.local_hits = cached - s->fetched;
  d.compiled = compiled;
  kf_stats_add(&s->cache, &d);
}

int kf_session_build(kf_session *s, int *n_cached, int *n_compiled, int *n_failed) {
  *n_cached = *n_compiled = *n_failed = 0;
  if (kf_session_remote_open(s) != 0)
    return 2;
  kf_progress progress = isatty(2) ? KF_PROGRESS_TTY : KF_PROGRESS_LINES;
  kf_pool *p = kf_pool_start(&s->cache, s->cli->jobs, (int)s->plan.n, progress);
  int rc = 0, prepared = 0, unwritable = 0;
  remote_queue q = {{0}, 0};
  for (size_t i = 0; i < s->plan.n && !unwritable; i++) {
    int r = start_unit(s, p, &s->units[i], &prepared, &q);
    unwritable = r < 0; /* the cache cannot take what is missing: stop */
    if (r > 0)
      rc = r;
  }
  if (q.n)
    fetch_queued(s, p, &q);
  kf_pool_finish(p);
  if (unwritable)
    return 2;
  check_limits(s);
  for (size_t i = 0; i < s->plan.n; i++) {
    int st = s->units[i].state;
    if (!kf_session_in_shard(s, &s->units[i]) && st != KF_UNIT_FAILED)
      continue; /* not this run's */
    if (st == KF_UNIT_CACHED)
      (*n_cached)++;
    else if (st == KF_UNIT_COMPILED)
      (*n_compiled)++;
    else
      (*n_failed)++;
  }
  int wr = 0;
  if (s->fetched && kf_cache_sync(&s->cache) != 0) { /* the fetched entries' renames */
    kf_error(NULL, NULL, "cannot sync %s: %s", s->cache.v1, strerror(errno));
    wr = 2;
  }
  wr = wr ? wr : write_manifests(s);
  if (s->tier.remote)
    s->incomplete = kf_session_remote_finish(s);
  if (prepared || s->tier.remote) /* a complete cache that needed nothing stays unwritten */
    record_stats(s, *n_cached, *n_compiled);
  if (rc)
    return rc;
  if (wr)
    return wr;
  return *n_failed ? 1 : 0;
}
