/* session.h: what every description-reading command shares: loading
 * descriptions into one plan, keying every instance, and the build that
 * compiles the misses (pool.h) and publishes entries and manifests. */
#ifndef KF_SESSION_H
#define KF_SESSION_H

#include "cache.h"
#include "cli.h"
#include "digest.h"
#include "manifest.h"
#include "model.h"
#include "plan.h"
#include "pool.h"
#include "remote_entry.h"
#include "tuning.h"

typedef struct {
  kf_cli *cli;
  kf_model **models;
  size_t nmodels;
  kf_plan plan;
  kf_unit *units; /* one per plan instance */
  kf_cache cache;
  kf_digest *digest;
  int reparsed;               /* how many sources libclang parsed */
  kf_strv reported;           /* error texts already printed */
  kf_tier tier;               /* the remotes (tier.remote NULL: none) and keys */
  int publish_only;           /* `kforge publish`: keys, compiles and fetches nothing */
  long fetched, refused;      /* entries taken from the remote, refused by verification */
  long published, incomplete; /* manifests published to the remote, not yet complete there */
  int other_shards;           /* some kernels belong to other shards */
  kf_tuning tuning;           /* the --tuning files' entries */
} kf_session;

/* What kf_session_open returns when the session is loaded. */
#define KF_SESSION_READY (-1)

/* The prologue of build, warm and keys: parses argv (kf_cli_parse), requires
 * a description and loads them. Returns KF_SESSION_READY (free s and cli
 * after use), or else the command's exit status with everything freed (0
 * after --help). */
int kf_session_open(kf_session *s, kf_cli *cli, int argc, char **argv, const char *usage,
                    int write_deps);
/* Loads every description and plans them. Returns 0, or 2 after reporting
 * bad input (nothing has been written). */
int kf_session_load(kf_session *s, kf_cli *cli, int write_deps);
/* Prints a unit's error on stderr, once per distinct text. */
void kf_session_report(kf_session *s, const kf_unit *u);
/* Computes one unit's key. Returns 0 or -1 (unit->error says why). */
int kf_session_key(kf_session *s, kf_unit *u);
/* Emits, keys, compiles and publishes; prepares the cache for writing only
 * when something is missing from it. Returns 0, 1 (a compile failed) or 2
 * (the output directory, or a cache that lacks kernels or a manifest, cannot
 * be written). */
int kf_session_build(kf_session *s, int *cached, int *compiled, int *failed);
void kf_session_free(kf_session *s);

/* Whether u is built by this run (--shard I/N takes the units whose key
 * falls in shard I; `publish` takes none). */
int kf_session_in_shard(const kf_session *s, const kf_unit *u);
/* The manifest of one (model, arch) into *out (free it either way). Returns
 * 1 when every kernel of it has an entry: in the local cache when local,
 * else anywhere its checksum is known (a remote record). */
int kf_session_manifest_of(const kf_session *s, const kf_model *m, const char *arch, int local,
                           kf_manifest *out);

/* session_remote.c: the build's remote tier. */
/* Opens the remotes and keys of s->cli. Returns 0, or 2 after reporting a
 * bad configuration. */
int kf_session_remote_open(kf_session *s);
/* Asks the remote for n units' missing entries at once (remote_entry.h's
 * batches, published with one sync) into the prepared cache: got[i] says
 * whether units[i]'s entry is now there (a refused entry is reported, and
 * its unit is to be built here). */
void kf_session_remote_fetch_many(kf_session *s, kf_unit **units, size_t n, int *got);
/* After the build: uploads the entries this run compiled, then publishes
 * every manifest whose kernels are all on the remote. Returns the number of
 * manifests that could not be published (incomplete there). */
long kf_session_remote_finish(kf_session *s);

#endif /* KF_SESSION_H */
