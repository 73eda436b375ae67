/* main.c: the `kforge` command's entry: git-style subcommand dispatch. */
#include "commands.h"
#include "paths.h"
#include "report.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *summary;
} commands[] = {
    {"build", kf_cmd_build, "emit, key and compile kernels into the cache"},
    {"warm", kf_cmd_warm, "build, and fail unless every kernel ends up in the cache"},
    {"publish", kf_cmd_publish,
     "write the manifests to the remote once all their kernels are there"},
    {"pull", kf_cmd_pull, "fetch a model's kernels and manifests from the remote, verified"},
    {"keygen", kf_cmd_keygen, "create an ed25519 key pair for signing remote entries"},
    {"stats", kf_cmd_stats, "show the cache's hits, misses, remote errors and bytes moved"},
    {"keys", kf_cmd_keys, "print each kernel's key, compiling nothing"},
    {"lint", kf_cmd_lint, "show each kernel's registers, spills and occupancy against its limits"},
    {"toolchains", kf_cmd_toolchains, "show which compiler builds each arch, or why none can"},
    {"explain", kf_cmd_explain, "show the inputs of a kernel's key and what changed"},
    {"ls", kf_cmd_ls, "list cache entries"},
    {"verify", kf_cmd_verify, "re-hash every cache entry"},
    {"gc", kf_cmd_gc, "evict least recently used entries"},
    {"import-hf", kf_cmd_import_hf, "turn a Hugging Face config.json into a description"},
    {"tune", kf_cmd_tune, "time the tuning parameters' candidates on the GPU, write a tuning file"},
};

static void usage(FILE *f) {
  fputs("usage: kforge <command> [options]\n\ncommands:\n", f);
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fputs("\n'kforge <command> --help' describes a command.\n", f);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || (!strcmp(cmd, "help") && argc == 2)) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "--version")) {
    /* The directories too: which templates a kforge reads is part of what
     * it builds. */
    printf("kforge %s\ntemplates: %s\nfamilies: %s\n", KFORGE_VERSION, kf_default_templates_dir(),
           kf_default_families_dir());
    const char *dirs[] = {kf_default_templates_dir(), kf_default_families_dir()};
    for (int i = 0; i < 2; i++)
      if (!kf_path_exists(dirs[i]))
        kf_warning(NULL, NULL,
                   "'%s' does not exist (is kforge installed?); set KFORGE_TEMPLATES and "
                   "KFORGE_FAMILIES or pass --templates and --families",
                   dirs[i]);
    return 0;
  }
  if (!strcmp(cmd, "help")) {
    char *args[] = {argv[2], "--help", NULL};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
      if (!strcmp(commands[i].name, argv[2]))
        return commands[i].fn(2, args);
    cmd = argv[2]; /* reported below as the unknown command */
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(commands[i].name, cmd))
      return commands[i].fn(argc - 1, argv + 1);
  kf_error(NULL, NULL, "unknown command '%s'", cmd);
  usage(stderr);
  return 2;
}
