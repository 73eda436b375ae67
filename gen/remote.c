/* remote.c: the remotes of a command (see remote.h): parsing --remote and
 * $KFORGE_REMOTE, shards by weighted rendezvous hashing, trying remotes in
 * order, and skipping one that fails, said once. */
#define _GNU_SOURCE
#include "remote.h"
#include "report.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* One configured URL: a server, or its shards. */
typedef struct {
  kf_remote_backend **shards;
  char **shard_names; /* NULL entries when not sharded */
  size_t nshards;
  int read_only;
  int skipped;   /* failed once: not asked again */
  char *display; /* as configured, credentials left out */
} kf_remote_group;

struct kf_remote {
  kf_remote_group *groups;
  size_t ngroups;
  kf_remote_stats stats;
};

char *kf_remote_unescape(const char *s, size_t n) {
  char *out = kf_xmalloc(n + 1);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '%' && i + 2 < n && isxdigit((unsigned char)s[i + 1]) &&
        isxdigit((unsigned char)s[i + 2])) {
      char hex[3] = {s[i + 1], s[i + 2], '\0'};
      out[k++] = (char)strtol(hex, NULL, 16);
      i += 2;
    } else {
      out[k++] = s[i];
    }
  }
  out[k] = '\0';
  return out;
}

/* The URL with any "user:password@" replaced by "***@". */
static char *without_credentials(const char *url) {
  const char *scheme_end = strstr(url, "://");
  const char *at = scheme_end ? strchr(scheme_end + 3, '@') : NULL;
  const char *slash = scheme_end ? strchr(scheme_end + 3, '/') : NULL;
  if (!at || (slash && slash < at))
    return kf_xstrdup(url);
  return kf_xasprintf("%.*s***%s", (int)(scheme_end + 3 - url), url, at);
}

static int parse_ms(const char *val, long *out) {
  char *end;
  long v = strtol(val, &end, 10);
  if (!*val || *end || v < 1 || v > 3600000)
    return -1;
  *out = v;
  return 0;
}

/* "a,b(2),c" into names and weights. Returns 0 or -1. */
static int parse_shards(const char *val, kf_strv *names, kf_strv *weights) {
  char *copy = kf_xstrdup(val), *save = NULL;
  int bad = 0;
  for (char *t = strtok_r(copy, ",", &save); t && !bad; t = strtok_r(NULL, ",", &save)) {
    char *paren = strchr(t, '(');
    const char *w = "1";
    if (paren) {
      size_t n = strlen(paren);
      if (n < 3 || paren[n - 1] != ')') {
        bad = 1;
        break;
      }
      paren[n - 1] = '\0';
      *paren = '\0';
      w = paren + 1;
    }
    char *end;
    double wv = strtod(w, &end);
    if (!*t || *end || !(wv > 0 && wv < 1e6))
      bad = 1;
    kf_strv_push(names, t);
    kf_strv_push(weights, w);
  }
  free(copy);
  return bad || names->n == 0 ? -1 : 0;
}

static kf_remote_backend *open_backend(const kf_remote_options *o, char **err) {
  if (!strncmp(o->url, "redis://", 8) || !strncmp(o->url, "redis+unix://", 13))
    return kf_remote_redis_open(o, err);
  if (!strncmp(o->url, "http://", 7) || !strncmp(o->url, "https://", 8))
    return kf_remote_http_open(o, err);
  *err = kf_xstrdup("unknown scheme (use redis://, redis+unix://, http:// or https://)");
  return NULL;
}

/* Replaces the one '*' of url with name (caller frees). */
static char *shard_url(const char *url, const char *name) {
  const char *star = strchr(url, '*');
  return kf_xasprintf("%.*s%s%s", (int)(star - url), url, name, star + 1);
}

/* Parses one configured URL with its attributes into g. Returns 0, or -1
 * with *err. */
static int parse_group(const char *spec, int read_only, kf_remote_group *g, char **err) {
  memset(g, 0, sizeof *g);
  kf_remote_options o = {0};
  o.connect_ms = 2000;
  o.operation_ms = 30000;
  g->read_only = read_only;
  kf_strv names = {0}, weights = {0};
  char *copy = kf_xstrdup(spec), *save = NULL;
  char *url = strtok_r(copy, "|", &save);
  int rc = 0;
  for (char *a = strtok_r(NULL, "|", &save); a && rc == 0; a = strtok_r(NULL, "|", &save)) {
    char *eq = strchr(a, '=');
    const char *val = eq ? eq + 1 : NULL;
    if (eq)
      *eq = '\0';
    if (!strcmp(a, "read-only") && !val)
      g->read_only = 1;
    else if (!strcmp(a, "connect-timeout") && val && parse_ms(val, &o.connect_ms) == 0)
      ;
    else if (!strcmp(a, "operation-timeout") && val && parse_ms(val, &o.operation_ms) == 0)
      ;
    else if (!strcmp(a, "bearer-token") && val && *val)
      o.bearer_token = kf_xstrdup(val);
    else if (!strcmp(a, "aws-sigv4") && val && *val)
      o.aws_sigv4 = kf_xstrdup(val);
    else if (!strcmp(a, "shards") && val && parse_shards(val, &names, &weights) == 0)
      ;
    else {
      *err = kf_xasprintf("bad attribute '%s%s%s' (known: read-only, connect-timeout=MS, "
                          "operation-timeout=MS, bearer-token=T, aws-sigv4=P:T:R:S, "
                          "shards=A,B(W),...)",
                          a, val ? "=" : "", val ? val : "");
      rc = -1;
    }
  }
  if (rc == 0 && (!url || !*url)) {
    *err = kf_xstrdup("empty URL");
    rc = -1;
  }
  if (rc == 0 && (names.n > 0) != (strchr(url, '*') != NULL)) {
    *err = kf_xstrdup(names.n ? "shards= needs a '*' in the URL for the shard's name"
                              : "a '*' in the URL needs a shards= attribute");
    rc = -1;
  }
  size_t n = names.n ? names.n : 1;
  g->shards = kf_xcalloc(n, sizeof *g->shards);
  g->shard_names = kf_xcalloc(n, sizeof *g->shard_names);
  g->display = url ? without_credentials(url) : kf_xstrdup("");
  for (size_t i = 0; i < n && rc == 0; i++) {
    o.url = names.n ? shard_url(url, names.v[i]) : kf_xstrdup(url);
    g->shards[i] = open_backend(&o, err);
    free(o.url);
    if (!g->shards[i]) {
      rc = -1;
      break;
    }
    g->shards[i]->weight = names.n ? strtod(weights.v[i], NULL) : 1;
    g->shard_names[i] = names.n ? kf_xstrdup(names.v[i]) : NULL;
    g->nshards++;
  }
  free(o.bearer_token);
  free(o.aws_sigv4);
  kf_strv_free(&names);
  kf_strv_free(&weights);
  free(copy);
  return rc;
}

static void free_group(kf_remote_group *g) {
  for (size_t i = 0; i < g->nshards; i++) {
    free(g->shards[i]->display);
    g->shards[i]->close(g->shards[i]);
    free(g->shard_names[i]);
  }
  free(g->shards);
  free(g->shard_names);
  free(g->display);
}

kf_remote *kf_remote_open(const kf_strv *urls, int read_only, char **err) {
  *err = NULL;
  kf_strv specs = {0};
  for (size_t i = 0; urls && i < urls->n; i++)
    kf_strv_push(&specs, urls->v[i]);
  const char *env = getenv("KFORGE_REMOTE");
  if (specs.n == 0 && env) {
    char *copy = kf_xstrdup(env), *save = NULL;
    for (char *t = strtok_r(copy, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save))
      kf_strv_push(&specs, t);
    free(copy);
  }
  if (specs.n == 0)
    return NULL;
  kf_remote *r = kf_xcalloc(1, sizeof *r);
  r->groups = kf_xcalloc(specs.n, sizeof *r->groups);
  for (size_t i = 0; i < specs.n; i++) {
    char *why = NULL;
    if (parse_group(specs.v[i], read_only, &r->groups[r->ngroups++], &why) != 0) {
      char *shown = without_credentials(specs.v[i]);
      *err = kf_xasprintf("remote '%s': %s", shown, why);
      free(shown);
      free(why);
      kf_remote_free(r);
      kf_strv_free(&specs);
      return NULL;
    }
  }
  kf_strv_free(&specs);
  return r;
}

void kf_remote_free(kf_remote *r) {
  if (!r)
    return;
  for (size_t i = 0; i < r->ngroups; i++)
    free_group(&r->groups[i]);
  free(r->groups);
  free(r);
}

/* The shard of g that holds name: the highest weight / -ln(u), u uniform in
 * (0, 1) from a hash of the shard and the name (rendezvous hashing with
 * weights: adding a shard moves only the objects it wins). */
static kf_remote_backend *shard_for(const kf_remote_group *g, const char *name) {
  if (g->nshards == 1)
    return g->shards[0];
  size_t best = 0;
  double best_score = -1;
  for (size_t i = 0; i < g->nshards; i++) {
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    XXH64_update(st, g->shard_names[i], strlen(g->shard_names[i]) + 1);
    XXH64_update(st, name, strlen(name));
    uint64_t h = XXH64_digest(st);
    XXH64_freeState(st);
    double u = ((double)(h >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */
    double score = g->shards[i]->weight / -log(u);
    if (score > best_score) {
      best_score = score;
      best = i;
    }
  }
  return g->shards[best];
}

/* Marks g skipped after a failed request, saying so once. */
static void skip_group(kf_remote *r, kf_remote_group *g, const char *what, const char *name,
                       const char *why) {
  r->stats.errors++;
  if (g->skipped)
    return;
  g->skipped = 1;
  kf_warning(NULL, NULL, "remote %s skipped for the rest of this run: %s %s: %s", g->display, what,
             name, why ? why : "failed");
}

/* Asks each remote in turn for name: its blob into out, or (out NULL)
 * whether it is there. */
static int ask(kf_remote *r, const char *name, kf_buf *out) {
  for (size_t i = 0; i < r->ngroups; i++) {
    kf_remote_group *g = &r->groups[i];
    if (g->skipped)
      continue;
    kf_remote_backend *b = shard_for(g, name);
    char *err = NULL;
    b->requests++;
    r->stats.requests++;
    int st = out ? b->get(b, name, out, &err) : b->exists(b, name, &err);
    if (st == KF_REMOTE_FAILED)
      skip_group(r, g, out ? "get" : "exists", name, err);
    free(err);
    if (st == KF_REMOTE_OK) {
      r->stats.bytes_in += out ? (long long)out->len : 0;
      return KF_REMOTE_OK;
    }
  }
  return KF_REMOTE_MISSING;
}

int kf_remote_get(kf_remote *r, const char *name, kf_buf *out) { return ask(r, name, out); }

/* One server's part of a kf_remote_get_many. */
static int get_many(kf_remote_backend *b, const char *const *names, size_t n, kf_buf *outs,
                    int *sts, char **err) {
  if (b->get_many)
    return b->get_many(b, names, n, outs, sts, err);
  for (size_t i = 0; i < n; i++) {
    sts[i] = b->get(b, names[i], &outs[i], err);
    if (sts[i] == KF_REMOTE_FAILED)
      return KF_REMOTE_FAILED;
  }
  return KF_REMOTE_OK;
}

void kf_remote_get_many(kf_remote *r, const char *const *names, size_t n, kf_buf *outs, int *sts) {
  for (size_t i = 0; i < n; i++)
    sts[i] = KF_REMOTE_MISSING;
  size_t *idx = kf_xcalloc(n + 1, sizeof *idx);
  const char **sub = kf_xcalloc(n + 1, sizeof *sub);
  kf_buf *got = kf_xcalloc(n + 1, sizeof *got);
  int *st = kf_xcalloc(n + 1, sizeof *st);
  for (size_t gi = 0; gi < r->ngroups; gi++) {
    kf_remote_group *g = &r->groups[gi];
    for (size_t s = 0; s < g->nshards && !g->skipped; s++) {
      kf_remote_backend *b = g->shards[s];
      size_t m = 0;
      for (size_t i = 0; i < n; i++)
        if (sts[i] != KF_REMOTE_OK && shard_for(g, names[i]) == b) {
          idx[m] = i;
          sub[m++] = names[i];
        }
      if (!m)
        continue;
      b->requests += (long)m;
      r->stats.requests += (long)m;
      char *err = NULL;
      int rc = get_many(b, sub, m, got, st, &err);
      if (rc == KF_REMOTE_FAILED)
        skip_group(r, g, "get", sub[0], err);
      free(err);
      for (size_t j = 0; j < m; j++) {
        if (rc != KF_REMOTE_FAILED && st[j] == KF_REMOTE_OK) {
          kf_buf_free(&outs[idx[j]]);
          outs[idx[j]] = got[j];
          sts[idx[j]] = KF_REMOTE_OK;
          r->stats.bytes_in += (long long)got[j].len;
        } else {
          kf_buf_free(&got[j]);
        }
        memset(&got[j], 0, sizeof got[j]);
      }
    }
  }
  free(idx);
  free(sub);
  free(got);
  free(st);
}

int kf_remote_put(kf_remote *r, const char *name, const void *data, size_t len, int overwrite) {
  int stored = 0;
  for (size_t i = 0; i < r->ngroups; i++) {
    kf_remote_group *g = &r->groups[i];
    if (g->skipped || g->read_only)
      continue;
    kf_remote_backend *b = shard_for(g, name);
    char *err = NULL;
    long before = b->requests;
    int st = b->put(b, name, data, len, overwrite, &err);
    r->stats.requests += b->requests - before;
    if (st == KF_REMOTE_OK) {
      stored = 1;
      r->stats.bytes_out += (long long)len;
    } else {
      skip_group(r, g, "put", name, err);
    }
    free(err);
  }
  return stored ? KF_REMOTE_OK : KF_REMOTE_FAILED;
}

int kf_remote_exists(kf_remote *r, const char *name) { return ask(r, name, NULL); }

int kf_remote_writable(const kf_remote *r) {
  for (size_t i = 0; i < r->ngroups; i++)
    if (!r->groups[i].skipped && !r->groups[i].read_only)
      return 1;
  return 0;
}

kf_remote_stats *kf_remote_stats_of(kf_remote *r) { return &r->stats; }
