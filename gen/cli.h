/* cli.h: the options shared by the commands that read descriptions (build,
 * warm, keys, explain): where the cache, the sources and the templates are,
 * which arches, extra include and template directories, --define, -j,
 * --json, the remote tiers, keys, --shard and --tuning; everything else on the command line is a
 * description path. */
#ifndef KF_CLI_H
#define KF_CLI_H

#include "model.h"
#include "util.h"

typedef struct {
  kf_model_options mopt;
  const char *cache_dir; /* NULL: $KFORGE_CACHE_DIR or ./cache */
  const char *out_dir;   /* generated sources */
  int jobs;
  int json;
  kf_strv defines;          /* --define NAME[=VALUE], in order: compile arguments and key records */
  kf_strv inputs;           /* description paths */
  kf_strv remotes;          /* --remote URL, in order (remote.h); none: $KFORGE_REMOTE */
  int remote_read_only;     /* --remote-read-only */
  const char *signing_key;  /* --signing-key FILE (sign.h) */
  const char *trusted_keys; /* --trusted-keys LIST (sign.h) */
  int shard, nshards;       /* --shard I/N, I from 1; nshards 0: every kernel */
  kf_strv tuning;           /* --tuning FILE, in order (tuning.h) */
} kf_cli;

/* Parses the options common to description commands from argv (starting at
 * argv[1]); stray arguments go to cli->inputs. Returns 0; 1 after printing
 * the usage for --help; or 2 after printing a usage error. extra(opt, value)
 * may claim command-specific options (returning 0). On 1 and 2, cli is freed. */
int kf_cli_parse(kf_cli *cli, int argc, char **argv, const char *usage,
                 int (*extra)(const char *opt, const char *val, void *ctx), void *ctx);
void kf_cli_free(kf_cli *cli);

#endif /* KF_CLI_H */
