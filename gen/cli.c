/* cli.c: the options every description-reading command shares (see cli.h):
 * GNU-style spellings (--opt=value, --opt value, -Ivalue, -jN), checked as
 * they are read, so that a bad value is reported before anything is loaded. */
#define _GNU_SOURCE
#include "cli.h"
#include "paths.h"
#include "report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void split_list(const char *s, kf_strv *out) {
  char *copy = kf_xstrdup(s);
  char *save = NULL;
  for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
    if (*t && !kf_strv_contains(out, t))
      kf_strv_push(out, t);
  free(copy);
}

/* NAME or NAME=VALUE, NAME an identifier: what `-D` means to every compiler
 * kforge drives, so a tuning variant cannot smuggle in another option. */
static int valid_define(const char *d) {
  if (!(*d == '_' || (*d >= 'A' && *d <= 'Z') || (*d >= 'a' && *d <= 'z')))
    return 0;
  for (d++; *d && *d != '='; d++)
    if (!(*d == '_' || (*d >= 'A' && *d <= 'Z') || (*d >= 'a' && *d <= 'z') ||
          (*d >= '0' && *d <= '9')))
      return 0;
  return 1;
}

/* Applies one option with its value (NULL for a flag). Returns 0, 2 after
 * reporting a bad value, or -1 when the option is unknown. */
static int apply(kf_cli *cli, const char *opt, const char *val,
                 int (*extra)(const char *opt, const char *val, void *ctx), void *ctx) {
  if (!strcmp(opt, "--json"))
    cli->json = 1;
  else if (!strcmp(opt, "--cache"))
    cli->cache_dir = val;
  else if (!strcmp(opt, "--out"))
    cli->out_dir = val;
  else if (!strcmp(opt, "--arch"))
    split_list(val, &cli->mopt.arches);
  else if (!strcmp(opt, "-I") || !strcmp(opt, "--include-dir"))
    kf_strv_push(&cli->mopt.extra_include_dirs, val);
  else if (!strcmp(opt, "--template-dir"))
    kf_strv_push(&cli->mopt.extra_template_dirs, val);
  else if (!strcmp(opt, "--templates"))
    cli->mopt.templates_dir = val;
  else if (!strcmp(opt, "--families"))
    cli->mopt.families_dir = val;
  else if (!strcmp(opt, "-D") || !strcmp(opt, "--define")) {
    if (!valid_define(val)) {
      kf_error(NULL, NULL, "--define needs NAME or NAME=VALUE with NAME a C identifier, got '%s'",
               val);
      return 2;
    }
    kf_strv_push(&cli->defines, val);
  } else if (!strcmp(opt, "-j") || !strcmp(opt, "--jobs")) {
    char *end;
    long j = strtol(val, &end, 10);
    if (*end || j < 1 || j > 1024) {
      kf_error(NULL, NULL, "-j needs a number of jobs from 1 to 1024, got '%s'", val);
      return 2;
    }
    cli->jobs = (int)j;
  } else if (!strcmp(opt, "--remote"))
    kf_strv_push(&cli->remotes, val);
  else if (!strcmp(opt, "--tuning"))
    kf_strv_push(&cli->tuning, val);
  else if (!strcmp(opt, "--remote-read-only"))
    cli->remote_read_only = 1;
  else if (!strcmp(opt, "--signing-key"))
    cli->signing_key = val;
  else if (!strcmp(opt, "--trusted-keys"))
    cli->trusted_keys = val;
  else if (!strcmp(opt, "--shard")) {
    int i = 0, n = 0, used = 0;
    if (sscanf(val, "%d/%d%n", &i, &n, &used) != 2 || val[used] || n < 1 || n > 4096 || i < 1 ||
        i > n) {
      kf_error(NULL, NULL, "--shard needs I/N with 1 <= I <= N <= 4096, got '%s'", val);
      return 2;
    }
    cli->shard = i;
    cli->nshards = n;
  } else if (!extra || extra(opt, val, ctx) != 0)
    return -1;
  return 0;
}

/* Splits argv[*i] into an option name (caller frees) and its value, taking
 * the next argument when the value is separate: --opt=value, --opt value,
 * -Ivalue, -I value, -jN, -j N. Returns the name, or NULL after reporting a
 * missing value. */
static char *split_option(int argc, char **argv, int *i, const char **val, const char *usage,
                          int (*extra)(const char *opt, const char *val, void *ctx), void *ctx,
                          int *claimed) {
  const char *a = argv[*i];
  const char *eq = strchr(a, '=');
  char *opt;
  *val = NULL;
  if (a[1] == '-' && eq) {
    opt = kf_xstrndup(a, (size_t)(eq - a));
    *val = eq + 1;
  } else if (a[1] != '-' && a[2] != '\0' &&
             (a[1] == 'I' || a[1] == 'j' || a[1] == 'o' || a[1] == 'D')) {
    opt = kf_xstrndup(a, 2);
    *val = a + 2;
  } else {
    opt = kf_xstrdup(a);
  }
  *claimed = extra && !*val && extra(opt, NULL, ctx) == 0; /* a command's own flag */
  if (*claimed || *val || !strcmp(opt, "--json") || !strcmp(opt, "--remote-read-only"))
    return opt;
  if (*i + 1 >= argc) {
    kf_usage_error(usage, "option %s needs a value", opt);
    free(opt);
    return NULL;
  }
  *val = argv[++*i];
  return opt;
}

int kf_cli_parse(kf_cli *cli, int argc, char **argv, const char *usage,
                 int (*extra)(const char *opt, const char *val, void *ctx), void *ctx) {
  memset(cli, 0, sizeof *cli);
  cli->mopt.templates_dir = kf_default_templates_dir();
  cli->mopt.families_dir = kf_default_families_dir();
  cli->out_dir = "kernels-out";
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  cli->jobs = ncpu > 0 ? (int)ncpu : 1;
  int rc = 0;
  for (int i = 1; i < argc && rc == 0; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      rc = 1;
    } else if (a[0] != '-' || !strcmp(a, "-")) {
      kf_strv_push(&cli->inputs, a);
    } else if (!strcmp(a, "--")) {
      for (i++; i < argc; i++)
        kf_strv_push(&cli->inputs, argv[i]);
    } else {
      const char *val;
      int claimed;
      char *opt = split_option(argc, argv, &i, &val, usage, extra, ctx, &claimed);
      rc = !opt ? 2 : claimed ? 0 : apply(cli, opt, val, extra, ctx);
      if (rc < 0) {
        kf_usage_error(usage, "unknown option '%s'", opt);
        rc = 2;
      }
      free(opt);
    }
  }
  if (rc)
    kf_cli_free(cli);
  return rc;
}

void kf_cli_free(kf_cli *cli) {
  kf_strv_free(&cli->mopt.arches);
  kf_strv_free(&cli->mopt.extra_include_dirs);
  kf_strv_free(&cli->mopt.extra_template_dirs);
  kf_strv_free(&cli->defines);
  kf_strv_free(&cli->inputs);
  kf_strv_free(&cli->remotes);
  kf_strv_free(&cli->tuning);
}
