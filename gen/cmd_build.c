/* cmd_build.c: `kforge build` (offline builds by kernel developers) and
 * `kforge warm` (the cache warm step of a container build). */
#include "commands.h"
#include "report.h"
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char build_usage[] =
    "usage: kforge build [--arch LIST] [--cache DIR] [--out DIR] [-j N] [-I DIR]\n"
    "                    [--template-dir DIR] [--define NAME[=VALUE]] [--json] MODEL.json...\n"
    "Validates the descriptions, writes the generated sources under --out, keys every\n"
    "kernel and compiles what the cache lacks. Last line: 'N kernels: H cached, C compiled,\n"
    "F failed'. --define (or -D) passes -DNAME[=VALUE] to the compiler for a tuning\n"
    "variant; it enters the key like every compile argument. Exit 0 on success, 1 if a\n"
    "compile failed, 2 on bad input.\n";

static const char warm_usage[] =
    "usage: kforge warm [--arch LIST] [--cache DIR] [--out DIR] [-j N] MODEL.json...\n"
    "Like build, for a container's cache warm step: exits 1 unless every kernel of the\n"
    "descriptions is in the cache afterwards, and prints where the cache is.\n";

static int run(int argc, char **argv, int warm) {
  const char *usage = warm ? warm_usage : build_usage;
  kf_cli cli;
  int rc = kf_cli_parse(&cli, argc, argv, usage, NULL, NULL);
  if (rc)
    return rc == 1 ? 0 : rc;
  if (cli.inputs.n == 0) {
    kf_usage_error(usage, "no description given");
    kf_cli_free(&cli);
    return 2;
  }
  kf_session s;
  double t0 = kf_now();
  rc = kf_session_load(&s, &cli, 1);
  int cached = 0, compiled = 0, failed = 0;
  if (rc == 0)
    rc = kf_session_build(&s, &cached, &compiled, &failed);
  if (rc == 0 || rc == 1) {
    if (cli.json) {
      printf("{\"kernels\": %d, \"cached\": %d, \"compiled\": %d, \"failed\": %d, "
             "\"parsed\": %d, \"seconds\": %.3f, \"cache\": \"%s\"}\n",
             cached + compiled + failed, cached, compiled, failed, s.reparsed, kf_now() - t0,
             s.cache.root);
    } else {
      for (size_t i = 0; i < s.plan.n && !warm; i++)
        if (s.units[i].state == KF_UNIT_FAILED)
          printf("failed: %s\n", s.plan.v[i].id);
      if (warm) {
        printf("cache: %s\n", s.cache.root);
        for (size_t i = 0; i < s.plan.n; i++)
          if (s.units[i].state == KF_UNIT_FAILED)
            printf("missing: %s\n", s.plan.v[i].id);
      }
      printf("%d kernels: %d cached, %d compiled, %d failed\n", cached + compiled + failed, cached,
             compiled, failed);
    }
  }
  kf_session_free(&s);
  kf_cli_free(&cli);
  return rc;
}

int kf_cmd_build(int argc, char **argv) { return run(argc, argv, 0); }
int kf_cmd_warm(int argc, char **argv) { return run(argc, argv, 1); }
