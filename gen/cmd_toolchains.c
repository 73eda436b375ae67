/* cmd_toolchains.c: `kforge toolchains` — for each arch, the compiler a
 * build would use and its flags, or why no installed compiler can build it
 * (every compiler tried, with its own words). Compiles nothing. */
#include "arch.h"
#include "cli.h"
#include "commands.h"
#include "report.h"
#include "toolchain.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

static const char usage[] =
    "usage: kforge toolchains [--arch LIST] [--json]\n"
    "Prints, for each arch (default: every arch kforge knows), the compiler a build\n"
    "uses for it and its compile flags (include directories aside), or `none` and\n"
    "why: each compiler tried and its reason. gfx arches try hipcc (KFORGE_HIPCC,\n"
    "PATH, /opt/rocm/bin), then the newest clang-N on PATH as a HIP driver; sm_*\n"
    "arches nvcc (KFORGE_NVCC, PATH, /usr/local/cuda/bin). Compiles nothing.\n"
    "Exits 0, or 1 when an arch named with --arch has no compiler.\n";

int kf_cmd_toolchains(int argc, char **argv) {
  kf_cli cli;
  int rc = kf_cli_parse(&cli, argc, argv, usage, NULL, NULL);
  if (rc)
    return rc == 1 ? 0 : rc;
  if (cli.inputs.n) {
    kf_usage_error(usage, "unexpected argument '%s'", cli.inputs.v[0]);
    kf_cli_free(&cli);
    return 2;
  }
  kf_strv arches = {0};
  for (size_t i = 0; i < cli.mopt.arches.n; i++) {
    char why[512];
    if (kf_arch_check(cli.mopt.arches.v[i], why, sizeof why) != 0) {
      kf_error(NULL, NULL, "--arch: %s", why);
      kf_strv_free(&arches);
      kf_cli_free(&cli);
      return 2;
    }
    kf_strv_push(&arches, cli.mopt.arches.v[i]);
  }
  if (!arches.n)
    for (const char *const *a = kf_arch_table; *a; a++)
      kf_strv_push(&arches, *a);
  cJSON *json = cli.json ? cJSON_CreateArray() : NULL;
  kf_strv none = {0};
  for (size_t i = 0; i < arches.n; i++) {
    const char *arch = arches.v[i];
    const char *why;
    kf_toolchain *tc = kf_toolchain_for_arch(arch, &why);
    kf_strv flags = {0};
    kf_strv no_dirs = {0};
    if (!why)
      kf_toolchain_compile_args(tc, arch, &no_dirs, &flags);
    if (json) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "arch", arch);
      if (why) {
        cJSON_AddNullToObject(o, "compiler");
        cJSON_AddStringToObject(o, "reason", why);
      } else {
        cJSON_AddStringToObject(o, "compiler", tc->compiler);
        cJSON_AddStringToObject(o, "version", tc->short_name);
        cJSON *f = cJSON_AddArrayToObject(o, "flags");
        for (size_t k = 0; k < flags.n; k++)
          cJSON_AddItemToArray(f, cJSON_CreateString(flags.v[k]));
      }
      cJSON_AddItemToArray(json, o);
    } else if (why) {
      printf("%s: none: %s\n", arch, why);
    } else {
      printf("%s: %s (%s)\n  flags:", arch, tc->compiler, tc->short_name);
      for (size_t k = 0; k < flags.n; k++)
        printf(" %s", flags.v[k]);
      printf("\n");
    }
    if (why)
      kf_strv_push(&none, arch);
    kf_strv_free(&flags);
  }
  if (json) {
    char *t = cJSON_Print(json);
    puts(t);
    free(t);
    cJSON_Delete(json);
  }
  rc = cli.mopt.arches.n && none.n ? 1 : 0;
  kf_strv_free(&none);
  kf_strv_free(&arches);
  kf_cli_free(&cli);
  return rc;
}
