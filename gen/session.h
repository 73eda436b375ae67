/* session.h: what every description-reading command shares: options, loading
 * descriptions into one plan, keying every instance, compiling the misses in
 * parallel and publishing entries and manifests. */
#ifndef KF_SESSION_H
#define KF_SESSION_H

#include "cache.h"
#include "digest.h"
#include "model.h"
#include "plan.h"

typedef struct {
  kf_model_options mopt;
  const char *cache_dir; /* NULL: $KFORGE_CACHE_DIR or ./cache */
  const char *out_dir;   /* generated sources */
  int jobs;
  int json;
  kf_strv defines; /* --define NAME[=VALUE], in order: compile arguments and key records */
  kf_strv inputs;  /* description paths */
} kf_cli;

/* Parses the options common to description commands from argv (starting at
 * argv[1]); stray arguments go to cli->inputs. Returns 0, or 2 after printing
 * a usage error. extra(opt, value) may claim command-specific options. */
int kf_cli_parse(kf_cli *cli, int argc, char **argv, const char *usage,
                 int (*extra)(const char *opt, const char *val, void *ctx), void *ctx);
void kf_cli_free(kf_cli *cli);

enum { KF_UNIT_PENDING, KF_UNIT_CACHED, KF_UNIT_COMPILED, KF_UNIT_FAILED };

typedef struct kf_job kf_job;

typedef struct {
  kf_instance *in;
  kf_toolchain *tc;
  kf_compile_setup cs;
  kf_records records;
  char key[33];
  int keyed;
  int state;
  char checksum[33]; /* of the entry's object, once it is known good */
  long long size;    /* the object's bytes */
  kf_job *job;
  char *error; /* why it failed */
} kf_unit;

typedef struct {
  kf_cli *cli;
  kf_model **models;
  size_t nmodels;
  kf_plan plan;
  kf_unit *units; /* one per plan instance */
  kf_cache cache;
  kf_digest *digest;
  int reparsed;     /* how many sources libclang parsed */
  kf_strv reported; /* error texts already printed */
} kf_session;

/* Loads every description and plans them. Returns 0, or 2 after reporting
 * bad input (nothing has been written). */
int kf_session_load(kf_session *s, kf_cli *cli, int write_deps);
/* Prints a unit's error on stderr, once per distinct text. */
void kf_session_report(kf_session *s, const kf_unit *u);
/* Computes one unit's key. Returns 0 or -1 (unit->error says why). */
int kf_session_key(kf_session *s, kf_unit *u);
/* Emits, keys, compiles and publishes. Returns 0, 1 (a compile failed) or
 * 2 (the cache or output directory cannot be written). */
int kf_session_build(kf_session *s, int *cached, int *compiled, int *failed);
void kf_session_free(kf_session *s);

#endif /* KF_SESSION_H */
