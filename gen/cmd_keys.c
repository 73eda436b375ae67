/* cmd_keys.c: `kforge keys` — every kernel's key, compiling and writing
 * nothing, so it works on a read-only cache and checkout. */
#include "commands.h"
#include "session.h"

#include <stdio.h>

static const char usage[] =
    "usage: kforge keys [--arch LIST] [--cache DIR] [--out DIR] [--json] MODEL.json...\n"
    "Prints '<kernel-id> <key>' for every kernel, sorted by id. Writes nothing.\n";

int kf_cmd_keys(int argc, char **argv) {
  kf_cli cli;
  kf_session s;
  int rc = kf_session_open(&s, &cli, argc, argv, usage, 0);
  if (rc != KF_SESSION_READY)
    return rc;
  rc = 0;
  if (cli.json)
    printf("[");
  for (size_t i = 0; i < s.plan.n; i++) {
    kf_unit *u = &s.units[i];
    if (kf_session_key(&s, u) != 0) {
      kf_session_report(&s, u);
      rc = 1;
      continue;
    }
    if (cli.json)
      printf("%s\n  {\"id\": \"%s\", \"key\": \"%s\"}", i ? "," : "", u->in->id, u->key);
    else
      printf("%s %s\n", u->in->id, u->key);
  }
  if (cli.json)
    printf("\n]\n");
  kf_session_free(&s);
  kf_cli_free(&cli);
  return rc;
}
