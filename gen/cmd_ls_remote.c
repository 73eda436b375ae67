/* cmd_ls_remote.c: `kforge ls --remote URL`: what a remote holds of
 * (model, arch) sets: its manifest and, for each kernel, whether the entry
 * is there and passes the record's checks (remote_entry.h). Reads only. */
#define _GNU_SOURCE
#include "cmd_remote.h"
#include "commands.h"
#include "manifest.h"
#include "remote_entry.h"
#include "report.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kforge ls --remote URL [--remote URL]... [--trusted-keys LIST] [--arch LIST]\n"
    "                 [--json] MODEL|MODEL.json...\n"
    "Lists what the remote holds of each (model, arch): a line 'manifest <model>/<arch>:\n"
    "N kernels' (or 'missing' or 'refused: <reason>'), then per kernel its id, key, object\n"
    "bytes and 'ok', 'missing' or 'refused: <reason>' for its entry record. Transfers no\n"
    "objects. --json prints one array of {\"model\", \"arch\", \"manifest\", \"kernels\":\n"
    "[{\"id\", \"key\", \"bytes\", \"state\"}]}. Exit 0 when every manifest and entry is\n"
    "there, 1 otherwise, 2 on bad usage.\n";

/* Lists one (model, arch) into arr. Returns 0 when all is there, else 1. */
static int list_one(kf_tier *t, const char *model, const char *arch, cJSON *arr, int json) {
  char *why = NULL;
  kf_buf text = {0};
  int st = kf_remote_manifest_get(t, model, arch, &text, NULL, &why);
  kf_manifest man = {0};
  char *perr = NULL;
  if (st == KF_REMOTE_OK && kf_manifest_parse(text.data, text.len, &man, &perr) != 0) {
    st = KF_REMOTE_BAD;
    why = perr;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "model", model);
  cJSON_AddStringToObject(o, "arch", arch);
  char *state = st == KF_REMOTE_OK        ? kf_xasprintf("%zu kernels", man.nkernels)
                : st == KF_REMOTE_MISSING ? kf_xstrdup("missing")
                                          : kf_xasprintf("refused: %s", why);
  cJSON_AddStringToObject(o, "manifest", state);
  if (!json)
    printf("manifest %s/%s: %s\n", model, arch, state);
  free(state);
  int rc = st != KF_REMOTE_OK;
  cJSON *ks = cJSON_AddArrayToObject(o, "kernels");
  for (size_t i = 0; i < man.nkernels; i++) {
    const kf_manifest_kernel *k = &man.kernels[i];
    kf_remote_record rec;
    char *bad = NULL;
    int es = k->key ? kf_remote_entry_record(t, k->key, &rec, &bad) : KF_REMOTE_BAD;
    char *s = es == KF_REMOTE_OK        ? kf_xstrdup("ok")
              : es == KF_REMOTE_MISSING ? kf_xstrdup("missing")
                                        : kf_xasprintf("refused: %s", bad ? bad : "no key");
    rc |= es != KF_REMOTE_OK;
    long long bytes = es == KF_REMOTE_OK ? rec.object_size : -1;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "id", k->id ? k->id : "?");
    cJSON_AddStringToObject(e, "key", k->key ? k->key : "?");
    cJSON_AddNumberToObject(e, "bytes", (double)bytes);
    cJSON_AddStringToObject(e, "state", s);
    cJSON_AddItemToArray(ks, e);
    if (!json)
      printf("  %s %s %lld %s\n", k->id ? k->id : "?", k->key ? k->key : "?", bytes, s);
    free(s);
    free(bad);
  }
  cJSON_AddItemToArray(arr, o);
  kf_manifest_free(&man);
  kf_buf_free(&text);
  free(why);
  return rc;
}

int kf_cmd_ls_remote(int argc, char **argv) {
  kf_cli cli;
  int rc = kf_cli_parse(&cli, argc, argv, usage, NULL, NULL);
  if (rc)
    return rc == 1 ? 0 : rc;
  kf_strv models = {0}, arches = {0};
  kf_tier t;
  rc = kf_remote_command_open(&cli, usage, &models, &arches, &t);
  if (rc == 0) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < models.n; i++)
      rc |= list_one(&t, models.v[i], arches.v[i], arr, cli.json);
    if (cli.json) {
      char *text = cJSON_PrintUnformatted(arr);
      printf("%s\n", text);
      free(text);
    }
    cJSON_Delete(arr);
  }
  kf_tier_free(&t);
  kf_strv_free(&models);
  kf_strv_free(&arches);
  kf_cli_free(&cli);
  return rc;
}
