/* remote_redis.c: the Redis backend (see remote.h), through hiredis. A blob
 * is a string value under "kforge/<name>"; write-once puts use SET NX, so
 * that the first writer of a name wins without a separate question. The
 * connection is made at the first request and kept. */
#define _GNU_SOURCE
#include "remote.h"

#include <hiredis/hiredis.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

typedef struct {
  kf_remote_backend base;
  char *host; /* NULL for a unix socket */
  int port;
  char *socket_path;
  char *user, *password; /* NULL: no AUTH */
  long db;
  long connect_ms, operation_ms;
  redisContext *ctx;
} redis_backend;

static struct timeval tv_of(long ms) {
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
  return tv;
}

/* Runs a command that must not fail (AUTH, SELECT). Returns 0 or -1. */
static int setup_command(redis_backend *r, char **err, const char *what, redisReply *rep) {
  if (!rep || rep->type == REDIS_REPLY_ERROR) {
    *err = kf_xasprintf("%s: %s", what, rep ? rep->str : r->ctx->errstr);
    if (rep)
      freeReplyObject(rep);
    return -1;
  }
  freeReplyObject(rep);
  return 0;
}

/* Connects when not connected. Returns 0 or -1 with *err. */
static int connect_redis(redis_backend *r, char **err) {
  if (r->ctx)
    return 0;
  r->ctx = r->host ? redisConnectWithTimeout(r->host, r->port, tv_of(r->connect_ms))
                   : redisConnectUnixWithTimeout(r->socket_path, tv_of(r->connect_ms));
  if (!r->ctx || r->ctx->err) {
    *err = kf_xasprintf("cannot connect: %s", r->ctx ? r->ctx->errstr : "out of memory");
    goto fail;
  }
  redisSetTimeout(r->ctx, tv_of(r->operation_ms));
  if (r->password) {
    redisReply *rep = r->user ? redisCommand(r->ctx, "AUTH %s %s", r->user, r->password)
                              : redisCommand(r->ctx, "AUTH %s", r->password);
    if (setup_command(r, err, "AUTH", rep) != 0)
      goto fail;
  }
  if (r->db && setup_command(r, err, "SELECT", redisCommand(r->ctx, "SELECT %ld", r->db)) != 0)
    goto fail;
  return 0;
fail:
  if (r->ctx)
    redisFree(r->ctx);
  r->ctx = NULL;
  return -1;
}

/* Sends one command (connecting first). Returns the reply, or NULL with
 * *err; a transport error drops the connection. */
static redisReply *command(redis_backend *r, char **err, const char *fmt, ...) {
  if (connect_redis(r, err) != 0)
    return NULL;
  va_list ap;
  va_start(ap, fmt);
  redisReply *rep = redisvCommand(r->ctx, fmt, ap);
  va_end(ap);
  if (!rep) {
    *err = kf_xstrdup(r->ctx->errstr[0] ? r->ctx->errstr : "no reply");
    redisFree(r->ctx);
    r->ctx = NULL;
    return NULL;
  }
  if (rep->type == REDIS_REPLY_ERROR) {
    *err = kf_xasprintf("server error: %s", rep->str);
    freeReplyObject(rep);
    return NULL;
  }
  return rep;
}

static int redis_get(kf_remote_backend *b, const char *name, kf_buf *out, char **err) {
  redis_backend *r = (redis_backend *)b;
  out->len = 0;
  redisReply *rep = command(r, err, "GET kforge/%s", name);
  if (!rep)
    return KF_REMOTE_FAILED;
  int st = KF_REMOTE_MISSING;
  if (rep->type == REDIS_REPLY_STRING) {
    kf_buf_add(out, rep->str, rep->len);
    st = KF_REMOTE_OK;
  } else if (rep->type != REDIS_REPLY_NIL) {
    *err = kf_xasprintf("GET answered type %d, not a string", rep->type);
    st = KF_REMOTE_FAILED;
  }
  freeReplyObject(rep);
  return st;
}

/* Pipelined GETs, a bounded number in flight. */
static int redis_get_many(kf_remote_backend *b, const char *const *names, size_t n, kf_buf *outs,
                          int *sts, char **err) {
  redis_backend *r = (redis_backend *)b;
  if (connect_redis(r, err) != 0)
    return KF_REMOTE_FAILED;
  enum { WINDOW = 64 };
  for (size_t at = 0; at < n; at += WINDOW) {
    size_t m = n - at < WINDOW ? n - at : WINDOW;
    for (size_t i = 0; i < m; i++)
      if (redisAppendCommand(r->ctx, "GET kforge/%s", names[at + i]) != REDIS_OK)
        goto lost;
    for (size_t i = 0; i < m; i++) {
      redisReply *rep = NULL;
      if (redisGetReply(r->ctx, (void **)&rep) != REDIS_OK || !rep)
        goto lost;
      kf_buf *out = &outs[at + i];
      out->len = 0;
      sts[at + i] = KF_REMOTE_MISSING;
      if (rep->type == REDIS_REPLY_STRING) {
        kf_buf_add(out, rep->str, rep->len);
        sts[at + i] = KF_REMOTE_OK;
      } else if (rep->type != REDIS_REPLY_NIL) {
        *err = kf_xasprintf("GET %s answered type %d, not a string", names[at + i], rep->type);
        freeReplyObject(rep);
        redisFree(r->ctx); /* replies still owed: the connection is out of step */
        r->ctx = NULL;
        return KF_REMOTE_FAILED;
      }
      freeReplyObject(rep);
    }
  }
  return KF_REMOTE_OK;
lost:
  *err = kf_xstrdup(r->ctx->errstr[0] ? r->ctx->errstr : "no reply");
  redisFree(r->ctx); /* replies still owed: the connection is out of step */
  r->ctx = NULL;
  return KF_REMOTE_FAILED;
}

static int redis_put(kf_remote_backend *b, const char *name, const void *data, size_t len,
                     int overwrite, char **err) {
  redis_backend *r = (redis_backend *)b;
  b->requests++;
  redisReply *rep = overwrite ? command(r, err, "SET kforge/%s %b", name, data, len)
                              : command(r, err, "SET kforge/%s %b NX", name, data, len);
  if (!rep)
    return KF_REMOTE_FAILED;
  freeReplyObject(rep); /* OK, or nil when NX found it there */
  return KF_REMOTE_OK;
}

static int redis_exists(kf_remote_backend *b, const char *name, char **err) {
  redis_backend *r = (redis_backend *)b;
  redisReply *rep = command(r, err, "EXISTS kforge/%s", name);
  if (!rep)
    return KF_REMOTE_FAILED;
  int st = rep->type == REDIS_REPLY_INTEGER && rep->integer > 0 ? KF_REMOTE_OK : KF_REMOTE_MISSING;
  freeReplyObject(rep);
  return st;
}

static void redis_close(kf_remote_backend *b) {
  redis_backend *r = (redis_backend *)b;
  if (r->ctx)
    redisFree(r->ctx);
  free(r->host);
  free(r->socket_path);
  free(r->user);
  free(r->password);
  free(r);
}

/* "[USER:]PASSWORD" of the userinfo s[0..n). */
static void take_userinfo(redis_backend *r, const char *s, size_t n) {
  const char *colon = memchr(s, ':', n);
  if (!colon) {
    r->password = kf_remote_unescape(s, n);
    return;
  }
  if (colon > s)
    r->user = kf_remote_unescape(s, (size_t)(colon - s));
  r->password = kf_remote_unescape(colon + 1, n - (size_t)(colon + 1 - s));
}

static int parse_db(const char *s, long *db) {
  char *end;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < 0 || v > 1000000)
    return -1;
  *db = v;
  return 0;
}

kf_remote_backend *kf_remote_redis_open(const kf_remote_options *o, char **err) {
  redis_backend *r = kf_xcalloc(1, sizeof *r);
  r->base.get = redis_get;
  r->base.put = redis_put;
  r->base.exists = redis_exists;
  r->base.get_many = redis_get_many;
  r->base.close = redis_close;
  r->connect_ms = o->connect_ms;
  r->operation_ms = o->operation_ms;
  int unix_socket = !strncmp(o->url, "redis+unix://", 13);
  const char *rest = o->url + (unix_socket ? 13 : 8);
  const char *at = strchr(rest, '@');
  const char *slash = strchr(rest, '/');
  if (at && (!slash || at < slash)) {
    take_userinfo(r, rest, (size_t)(at - rest));
    rest = at + 1;
  }
  int bad = 0;
  if (unix_socket) {
    const char *q = strchr(rest, '?');
    r->socket_path = q ? kf_xstrndup(rest, (size_t)(q - rest)) : kf_xstrdup(rest);
    bad = r->socket_path[0] != '/' || (q && (strncmp(q, "?db=", 4) || parse_db(q + 4, &r->db)));
  } else {
    slash = strchr(rest, '/');
    size_t hlen = slash ? (size_t)(slash - rest) : strlen(rest);
    char *hostport = kf_xstrndup(rest, hlen);
    char *colon = strrchr(hostport, ':');
    r->port = 6379;
    if (colon) {
      char *end;
      long p = strtol(colon + 1, &end, 10);
      bad = *end || p < 1 || p > 65535;
      r->port = (int)p;
      *colon = '\0';
    }
    r->host = kf_xstrdup(hostport);
    free(hostport);
    bad = bad || !r->host[0] || (slash && slash[1] && parse_db(slash + 1, &r->db));
  }
  if (bad) {
    *err = kf_xstrdup(unix_socket ? "expected redis+unix://[[USER:]PASSWORD@]/PATH[?db=N]"
                                  : "expected redis://[[USER:]PASSWORD@]HOST[:PORT][/DB]");
    r->base.display = NULL;
    redis_close(&r->base);
    return NULL;
  }
  r->base.display = kf_xstrdup(o->url);
  return &r->base;
}
