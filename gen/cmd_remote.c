/* cmd_remote.c: what the remote-reading commands (pull, ls --remote)
 * share: which (model, arch) sets the command line names. */
#define _GNU_SOURCE
#include "cmd_remote.h"
#include "report.h"

#include <stdlib.h>
#include <string.h>

/* A model or arch name safe as a path component. */
static int safe_name(const char *s) {
  if (!*s || *s == '.')
    return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '.' || *s == '_' || *s == '-'))
      return 0;
  return 1;
}

int kf_remote_targets(kf_cli *cli, const char *usage, kf_strv *models, kf_strv *arches) {
  for (size_t i = 0; i < cli->inputs.n; i++) {
    const char *in = cli->inputs.v[i];
    size_t n = strlen(in);
    if (n > 5 && !strcmp(in + n - 5, ".json")) {
      kf_model *m = kf_model_load(in, &cli->mopt);
      if (!m)
        return 2;
      for (size_t a = 0; a < m->arches.n; a++) {
        kf_strv_push(models, m->name);
        kf_strv_push(arches, m->arches.v[a]);
      }
      kf_model_free(m);
      continue;
    }
    if (cli->mopt.arches.n == 0) {
      kf_usage_error(usage, "model '%s' needs --arch (or give its description)", in);
      return 2;
    }
    for (size_t a = 0; a < cli->mopt.arches.n; a++) {
      kf_strv_push(models, in);
      kf_strv_push(arches, cli->mopt.arches.v[a]);
    }
  }
  for (size_t i = 0; i < models->n; i++)
    if (!safe_name(models->v[i]) || !safe_name(arches->v[i])) {
      kf_error(NULL, NULL, "'%s/%s' is not a model and arch name (letters, digits, '.', '_', '-')",
               models->v[i], arches->v[i]);
      return 2;
    }
  return 0;
}

int kf_remote_command_open(kf_cli *cli, const char *usage, kf_strv *models, kf_strv *arches,
                           kf_tier *t) {
  memset(t, 0, sizeof *t);
  if (cli->inputs.n == 0) {
    kf_usage_error(usage, "no model given");
    return 2;
  }
  int rc = kf_remote_targets(cli, usage, models, arches);
  if (rc)
    return rc;
  char *err = NULL;
  if (kf_tier_open(t, &cli->remotes, 1, NULL, cli->trusted_keys, &err) <= 0) {
    kf_error(NULL, NULL, "%s", err ? err : "no remote given (--remote URL or $KFORGE_REMOTE)");
    rc = 2;
  }
  free(err);
  return rc;
}
