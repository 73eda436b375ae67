/* cmd_build.c: `kforge build` (offline builds by kernel developers) and
 * `kforge warm` (the cache warm step of a container build). */
#include "commands.h"
#include "report.h"
#include "session.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char build_usage[] =
    "usage: kforge build [--arch LIST] [--cache DIR] [--out DIR] [-j N] [-I DIR]\n"
    "                    [--template-dir DIR] [--define NAME[=VALUE]] [--tuning FILE] [--json]\n"
    "                    MODEL.json...\n"
    "Validates the descriptions, writes the generated sources under --out, keys every\n"
    "kernel and compiles what the cache lacks. Last line: 'N kernels: H cached, C compiled,\n"
    "F failed'. --define (or -D) passes -DNAME[=VALUE] to the compiler for a tuning\n"
    "variant; it enters the key like every compile argument. --json prints the counts\n"
    "with failed_ids and missing_ids. --tuning FILE builds the kernels a tuning file's\n"
    "entries match with its values (kforge tune writes one). Exit 0 on success, 1 if a\n"
    "compile failed, 2 on bad input.\n"
    "Remote tier: --remote URL (repeatable, or $KFORGE_REMOTE; redis://, redis+unix://,\n"
    "http[s]://, see docs/cli.md) is asked before compiling a miss and takes what is\n"
    "compiled and the complete manifests; --remote-read-only only reads it. --shard I/N\n"
    "builds the I-th of N parts of the kernels (by key). --signing-key FILE signs what\n"
    "goes up; --trusted-keys LIST (or $KFORGE_TRUSTED_KEYS) refuses remote entries not\n"
    "signed by one of them.\n";

static const char publish_usage[] =
    "usage: kforge publish [--arch LIST] [--out DIR] [--remote URL]... [--signing-key FILE]\n"
    "                      [--trusted-keys LIST] MODEL.json...\n"
    "Keys every kernel of the descriptions (compiling nothing) and writes to the remote the\n"
    "manifest of every (model, arch) whose kernels are all there, e.g. after the shards of a\n"
    "sharded build. Exit 0 when every manifest was published, 1 when one is incomplete on\n"
    "the remote, 2 on bad input or without a remote.\n";

static const char warm_usage[] =
    "usage: kforge warm [--arch LIST] [--cache DIR] [--out DIR] [-j N] [--json]\n"
    "                   MODEL.json...\n"
    "Like build, for a container's cache warm step: exits 1 unless every kernel of the\n"
    "descriptions is in the cache afterwards, and prints where the cache is. A complete\n"
    "cache is only read, so it may be read-only. --json lists failed_ids and missing_ids.\n";

/* The ids of the units in state st as a one-line JSON array (caller
 * frees). */
static char *ids_json(const kf_session *s, int st) {
  cJSON *arr = cJSON_CreateArray();
  for (size_t i = 0; i < s->plan.n; i++)
    if (s->units[i].state == st)
      cJSON_AddItemToArray(arr, cJSON_CreateString(s->plan.v[i].id));
  char *text = cJSON_PrintUnformatted(arr);
  cJSON_Delete(arr);
  return text;
}

static void print_json(const kf_session *s, int cached, int compiled, int failed, double seconds) {
  cJSON *root = cJSON_CreateString(s->cache.root);
  char *cache = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  /* a failed kernel has no entry, so the missing are the failed */
  char *failed_ids = ids_json(s, KF_UNIT_FAILED);
  char *remote = NULL;
  if (s->tier.remote) {
    const kf_remote_stats *st = kf_remote_stats_of(s->tier.remote);
    remote = kf_xasprintf(", \"remote\": {\"fetched\": %ld, \"missed\": %ld, \"refused\": %ld, "
                          "\"uploaded\": %ld, \"errors\": %ld, \"requests\": %ld, "
                          "\"bytes_in\": %lld, \"bytes_out\": %lld, \"manifests_published\": "
                          "%ld, \"manifests_incomplete\": %ld}",
                          s->fetched, st->misses, s->refused, st->uploads, st->errors, st->requests,
                          st->bytes_in, st->bytes_out, s->published, s->incomplete);
  }
  printf("{\"kernels\": %d, \"cached\": %d, \"compiled\": %d, \"failed\": %d, "
         "\"parsed\": %d, \"seconds\": %.3f, \"cache\": %s, \"failed_ids\": %s, "
         "\"missing_ids\": %s%s}\n",
         cached + compiled + failed, cached, compiled, failed, s->reparsed, seconds, cache,
         failed_ids, failed_ids, remote ? remote : "");
  free(failed_ids);
  free(cache);
  free(remote);
}

static void print_text(const kf_session *s, int warm, int cached, int compiled, int failed) {
  if (warm)
    printf("cache: %s\n", s->cache.root);
  for (size_t i = 0; i < s->plan.n; i++)
    if (s->units[i].state == KF_UNIT_FAILED)
      printf("%s: %s\n", warm ? "missing" : "failed", s->plan.v[i].id);
  if (s->tier.remote) {
    const kf_remote_stats *st = kf_remote_stats_of(s->tier.remote);
    printf("remote: %ld fetched, %ld missed, %ld refused, %ld uploaded, %ld errors; "
           "%ld manifests published, %ld incomplete\n",
           s->fetched, st->misses, s->refused, st->uploads, st->errors, s->published,
           s->incomplete);
  }
  printf("%d kernels: %d cached, %d compiled, %d failed\n", cached + compiled + failed, cached,
         compiled, failed);
}

enum { BUILD, WARM, PUBLISH };

static int run(int argc, char **argv, int mode) {
  static const char *const usages[] = {build_usage, warm_usage, publish_usage};
  kf_cli cli;
  kf_session s;
  int rc = kf_session_open(&s, &cli, argc, argv, usages[mode], 1);
  if (rc != KF_SESSION_READY)
    return rc;
  s.publish_only = mode == PUBLISH;
  if (mode == PUBLISH && cli.remotes.n == 0 && !getenv("KFORGE_REMOTE")) {
    kf_usage_error(publish_usage, "no remote given (--remote URL or $KFORGE_REMOTE)");
    kf_session_free(&s);
    kf_cli_free(&cli);
    return 2;
  }
  double t0 = kf_now();
  int cached = 0, compiled = 0, failed = 0;
  rc = kf_session_build(&s, &cached, &compiled, &failed);
  if (mode == PUBLISH && rc == 0 && s.incomplete)
    rc = 1;
  if (rc == 0 || rc == 1) {
    if (mode == PUBLISH)
      printf("%ld manifests published, %ld incomplete on the remote\n", s.published, s.incomplete);
    else if (cli.json)
      print_json(&s, cached, compiled, failed, kf_now() - t0);
    else
      print_text(&s, mode == WARM, cached, compiled, failed);
  }
  kf_session_free(&s);
  kf_cli_free(&cli);
  return rc;
}

int kf_cmd_build(int argc, char **argv) { return run(argc, argv, BUILD); }
int kf_cmd_warm(int argc, char **argv) { return run(argc, argv, WARM); }
int kf_cmd_publish(int argc, char **argv) { return run(argc, argv, PUBLISH); }
