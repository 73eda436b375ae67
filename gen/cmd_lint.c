/* cmd_lint.c: `kforge lint` — the resources every kernel of the
 * descriptions uses, as its cached code object's compile reported them, with
 * the limits that apply (resources.h), compiling and writing nothing. */
#include "commands.h"
#include "json.h"
#include "resources.h"
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kforge lint [--arch LIST] [--cache DIR] [--out DIR] [--json] MODEL.json...\n"
    "Prints every kernel's resources from its cache entry: registers (AMD: VGPRs + AGPRs),\n"
    "spills (NVIDIA: bytes; AMD: registers, 0 with no scratch), static shared memory,\n"
    "occupancy (NVIDIA: blocks per SM; AMD: waves per SIMD) and the limits set on it,\n"
    "then OK, OVER or MISSING (not in the cache: run `kforge build`). Compiles and\n"
    "writes nothing.\n"
    "Exits 0 when every kernel is cached and within its limits, else 1.\n";

/* The limits set on in, as "name=value ..." ("-" when none). */
static void limits_text(const kf_limits *l, char *out, size_t n) {
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; i < KF_LIMIT_COUNT; i++)
    if (l->from[i] && used < n)
      used += (size_t)snprintf(out + used, n - used, "%s%s=%lld", used ? "," : "",
                               kf_limit_names[i], (long long)l->value[i]);
  if (!used)
    snprintf(out, n, "-");
}

typedef struct {
  const kf_instance *in;
  const kf_meta_resources *r; /* NULL when the entry is missing */
  const char *status;
  const char *why;
} row;

/* The figure a limit of this kind is checked against; for the other
 * backend's occupancy limit, this backend's own. */
static long figure(const row *w, int limit) {
  const kf_instance *in = w->in;
  int64_t threads = in->block[0] * in->block[1] * in->block[2];
  int applies;
  if (limit == KF_LIMIT_MIN_BLOCKS_PER_SM && kf_arch_is_hip(in->arch))
    limit = KF_LIMIT_MIN_WAVES_PER_EU;
  return (long)kf_limit_figure(limit, w->r, in->arch, (int)threads, in->shared_bytes, &applies);
}

static void print_row(const row *w) {
  char lim[160];
  limits_text(&w->in->limits, lim, sizeof lim);
  if (!w->r) {
    printf("%-46s %5s %6s %7s %4s  %-7s %s\n", w->in->id, "-", "-", "-", "-", w->status, lim);
    return;
  }
  printf("%-46s %5ld %6ld %7ld %4ld  %-7s %s%s%s\n", w->in->id, figure(w, KF_LIMIT_MAX_REGISTERS),
         figure(w, KF_LIMIT_SPILLS), w->r->shared_bytes, figure(w, KF_LIMIT_MIN_BLOCKS_PER_SM),
         w->status, lim, w->why ? ": " : "", w->why ? w->why : "");
}

static cJSON *row_json(const row *w) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", w->in->id);
  cJSON_AddStringToObject(o, "status", w->status);
  if (w->r) {
    cJSON_AddNumberToObject(o, "registers", (double)figure(w, KF_LIMIT_MAX_REGISTERS));
    cJSON_AddNumberToObject(o, "spills", (double)figure(w, KF_LIMIT_SPILLS));
    cJSON_AddNumberToObject(o, "shared_bytes", (double)w->r->shared_bytes);
    cJSON_AddNumberToObject(o, kf_arch_is_hip(w->in->arch) ? "waves_per_eu" : "blocks_per_sm",
                            (double)figure(w, KF_LIMIT_MIN_BLOCKS_PER_SM));
  }
  cJSON *lim = cJSON_AddObjectToObject(o, "limits");
  for (int i = 0; i < KF_LIMIT_COUNT; i++)
    if (w->in->limits.from[i])
      cJSON_AddNumberToObject(lim, kf_limit_names[i], (double)w->in->limits.value[i]);
  if (w->why)
    cJSON_AddStringToObject(o, "reason", w->why);
  return o;
}

int kf_cmd_lint(int argc, char **argv) {
  kf_cli cli;
  kf_session s;
  int rc = kf_session_open(&s, &cli, argc, argv, usage, 0);
  if (rc != KF_SESSION_READY)
    return rc;
  rc = 0;
  cJSON *json = cli.json ? cJSON_CreateArray() : NULL;
  if (!json)
    printf("%-46s %5s %6s %7s %4s  %-7s %s\n", "kernel", "regs", "spills", "smem", "occ", "status",
           "limits");
  for (size_t i = 0; i < s.plan.n; i++) {
    kf_unit *u = &s.units[i];
    if (kf_session_key(&s, u) != 0) {
      kf_session_report(&s, u);
      rc = 1;
      continue;
    }
    kf_entry_meta meta;
    row w = {u->in, NULL, "MISSING", NULL};
    char *why = NULL;
    if (kf_cache_check_entry(&s.cache, u->key, &meta, NULL) == KF_ENTRY_OK) {
      kf_unit_take_entry(u, &meta);
      kf_entry_meta_free(&meta);
      why = kf_unit_limits_problem(u);
      w.r = &u->resources;
      w.status = why ? "OVER" : "OK";
      w.why = why;
    }
    if (w.why || !w.r)
      rc = 1;
    if (json)
      cJSON_AddItemToArray(json, row_json(&w));
    else
      print_row(&w);
    free(why);
  }
  if (json) {
    char *t = cJSON_Print(json);
    puts(t);
    free(t);
    cJSON_Delete(json);
  }
  kf_session_free(&s);
  kf_cli_free(&cli);
  return rc;
}
