/* remote.h: remote storage tiers behind one small interface (get, put,
 * exists), as ccache's remote backends. Two backends: Redis through hiredis
 * (remote_redis.c) and HTTP(S) through libcurl (remote_http.c, WebDAV, S3
 * with SigV4, bazel-remote). A remote holds named blobs; what the names and
 * blobs mean (the Bazel-style cas/ and ac/ layout of entries and manifests)
 * is remote_entry.h's.
 *
 * Configuration: one or more URLs (--remote, repeatable, or $KFORGE_REMOTE,
 * separated by spaces), tried in order; each may carry ccache-style
 * attributes after '|':
 *   redis://[:PASSWORD@]HOST[:PORT][/DB]   redis+unix:///PATH[?db=N]
 *   http[s]://[USER:PASSWORD@]HOST[:PORT]/PATH
 *   |read-only  |connect-timeout=MS  |operation-timeout=MS
 *   |bearer-token=TOKEN  |aws-sigv4=PROVIDER:TYPE:REGION:SERVICE (HTTP)
 *   |shards=NAME[(WEIGHT)],...  with a '*' in the URL that each NAME
 *   replaces: one object goes to one shard, chosen by weighted rendezvous
 *   hashing of its name.
 * A remote that fails a request (down, slow, an HTTP error) is skipped for
 * the rest of the command, said once on stderr with the reason; a command
 * never fails because of it. */
#ifndef KF_REMOTE_H
#define KF_REMOTE_H

#include "util.h"

/* What a backend request returns. */
enum { KF_REMOTE_OK = 0, KF_REMOTE_MISSING = 1, KF_REMOTE_FAILED = -1 };

/* One server's options, parsed from its URL (strings owned). */
typedef struct {
  char *url;          /* without the attributes; '*' replaced for a shard */
  long connect_ms;    /* connection timeout */
  long operation_ms;  /* whole-request timeout */
  char *bearer_token; /* HTTP: Authorization: Bearer */
  char *aws_sigv4;    /* HTTP: curl's CURLOPT_AWS_SIGV4 parameter */
} kf_remote_options;

/* One server. get fills *out (cleared first) with the blob; put stores it,
 * and with overwrite 0 first asks whether the name exists and writes nothing
 * when it does (write-once); exists answers OK or MISSING. Each returns
 * KF_REMOTE_OK, KF_REMOTE_MISSING (get, exists) or KF_REMOTE_FAILED with a
 * one-line reason in *err (caller frees). */
typedef struct kf_remote_backend kf_remote_backend;
struct kf_remote_backend {
  int (*get)(kf_remote_backend *b, const char *name, kf_buf *out, char **err);
  int (*put)(kf_remote_backend *b, const char *name, const void *data, size_t len, int overwrite,
             char **err);
  int (*exists)(kf_remote_backend *b, const char *name, char **err);
  /* Gets n blobs at once (pipelined or in parallel): outs[i] and sts[i]
   * (OK or MISSING) for each; KF_REMOTE_FAILED with *err when the server
   * failed (then sts and outs mean nothing). May be NULL: one get each. */
  int (*get_many)(kf_remote_backend *b, const char *const *names, size_t n, kf_buf *outs, int *sts,
                  char **err);
  void (*close)(kf_remote_backend *b);
  char *display; /* the URL without credentials, for messages */
  long requests; /* sent to this server */
  double weight; /* of its shard */
};

/* Backend constructors: parse the URL only (no connection yet). Return NULL
 * with *err (caller frees) for a URL they cannot use. */
kf_remote_backend *kf_remote_redis_open(const kf_remote_options *o, char **err);
kf_remote_backend *kf_remote_http_open(const kf_remote_options *o, char **err);

/* What a command did with its remotes, for `kforge stats` and --json. */
typedef struct {
  long hits, misses, errors; /* entries found, not found, requests failed */
  long bad;                  /* entries refused by verification */
  long uploads;              /* entries and manifests stored */
  long long bytes_in, bytes_out;
  long requests;
} kf_remote_stats;

typedef struct kf_remote kf_remote;

/* The remotes of --remote values (urls) or else $KFORGE_REMOTE. Returns NULL
 * with *err == NULL when none is configured, NULL with *err (caller frees)
 * for a bad URL or attribute, else the remotes (free with kf_remote_free).
 * read_only: --remote-read-only (every remote then only reads). */
kf_remote *kf_remote_open(const kf_strv *urls, int read_only, char **err);
void kf_remote_free(kf_remote *r);

/* The blob called name from the first remote that has it. Returns
 * KF_REMOTE_OK (*out holds it), or KF_REMOTE_MISSING when no remote that
 * answers has it. */
int kf_remote_get(kf_remote *r, const char *name, kf_buf *out);
/* The blobs called names[0..n) as kf_remote_get gives each (outs[i],
 * sts[i]), asking each server for all that are still missing at once. */
void kf_remote_get_many(kf_remote *r, const char *const *names, size_t n, kf_buf *outs, int *sts);
/* Stores a blob on every writable remote that answers. Returns KF_REMOTE_OK
 * when one took it, else KF_REMOTE_FAILED (read-only or all skipped). */
int kf_remote_put(kf_remote *r, const char *name, const void *data, size_t len, int overwrite);
/* KF_REMOTE_OK when a remote has name, else KF_REMOTE_MISSING. */
int kf_remote_exists(kf_remote *r, const char *name);
/* Whether a remote can still take writes. */
int kf_remote_writable(const kf_remote *r);
kf_remote_stats *kf_remote_stats_of(kf_remote *r);

/* Parses "a:b" URL userinfo/host parts: percent-decoding of s[0..n) (caller
 * frees). */
char *kf_remote_unescape(const char *s, size_t n);

#endif /* KF_REMOTE_H */
