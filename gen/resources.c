/* resources.c: resource limits of compiled kernels and the NVIDIA occupancy
 * they imply. */
#include "resources.h"

#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "json.h"
#include "report.h"
#include "util.h"

const char *const kf_limit_names[KF_LIMIT_COUNT] = {"max_registers", "spills", "min_blocks_per_sm",
                                                    "min_waves_per_eu"};

/* The largest value any limit may take (a register file, a count of
 * blocks): larger is a typo. */
#define LIMIT_MAX 65536

void kf_limits_clear(kf_limits *l) { memset(l, 0, sizeof *l); }

static int limit_index(const char *name) {
  for (int i = 0; i < KF_LIMIT_COUNT; i++)
    if (!strcmp(kf_limit_names[i], name))
      return i;
  return -1;
}

/* The limit members of one object (the top or a backend's) into l. */
static int parse_members(const char *file, const char *path, const cJSON *obj, kf_limits *l,
                         int top) {
  static const char *const members[] = {
      "max_registers", "spills", "min_blocks_per_sm", "min_waves_per_eu", "cuda", "hip", NULL};
  static const char *const backend_members[] = {"max_registers", "spills", "min_blocks_per_sm",
                                                "min_waves_per_eu", NULL};
  int errors = kf_json_check_members(file, path, obj, top ? members : backend_members);
  for (const cJSON *v = obj->child; v; v = v->next) {
    int i = limit_index(v->string);
    if (i < 0)
      continue;
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    /* the range first: casting a double out of int64_t's range is undefined */
    if (!cJSON_IsNumber(v) || d < 0 || d > LIMIT_MAX || d != (double)(int64_t)d) {
      char *p = kf_xasprintf("%s.%s", path, v->string);
      kf_error(file, p, "must be an integer from 0 to %d, got %s", LIMIT_MAX,
               cJSON_IsNumber(v) ? "a number out of range" : kf_json_type_name(v));
      free(p);
      errors++;
      continue;
    }
    l->value[i] = (int64_t)d;
    l->from[i] = file;
  }
  return errors;
}

int kf_limits_parse(const char *file, const char *path, const cJSON *obj, kf_limits_spec *out) {
  kf_limits_clear(&out->backend[0]);
  kf_limits_clear(&out->backend[1]);
  if (!obj)
    return 0;
  if (!cJSON_IsObject(obj)) {
    kf_error(file, path, "must be an object of limits, got %s", kf_json_type_name(obj));
    return 1;
  }
  kf_limits common;
  kf_limits_clear(&common);
  int errors = parse_members(file, path, obj, &common, 1);
  static const char *const backends[2] = {"cuda", "hip"};
  for (int b = 0; b < 2; b++) {
    out->backend[b] = common;
    const cJSON *sub = cJSON_GetObjectItemCaseSensitive(obj, backends[b]);
    if (!sub)
      continue;
    char *p = kf_xasprintf("%s.%s", path, backends[b]);
    if (!cJSON_IsObject(sub)) {
      kf_error(file, p, "must be an object of limits, got %s", kf_json_type_name(sub));
      errors++;
    } else {
      errors += parse_members(file, p, sub, &out->backend[b], 0);
    }
    free(p);
  }
  return errors;
}

void kf_limits_apply(kf_limits *l, const kf_limits_spec *spec, int hip) {
  const kf_limits *s = &spec->backend[hip ? 1 : 0];
  for (int i = 0; i < KF_LIMIT_COUNT; i++)
    if (s->from[i]) {
      l->value[i] = s->value[i];
      l->from[i] = s->from[i];
    }
}

/* ---- NVIDIA occupancy ---- */

/* What bounds resident blocks on an SM (the CUDA occupancy calculator's
 * per-compute-capability table). Registers are allocated per warp in units
 * of 256 within each of the SM's 4 partitions of 16384; each block reserves
 * 1 KiB of shared memory besides its own. */
typedef struct {
  int sm; /* kf_arch_sm */
  int max_warps, max_blocks;
  int64_t shared_bytes; /* per SM, usable by blocks */
} sm_limits;

static const sm_limits sm_table[] = {
    {75, 32, 16, 65536},   {80, 64, 32, 167936},  {86, 48, 16, 102400},  {87, 48, 16, 167936},
    {89, 48, 24, 102400},  {90, 64, 32, 233472},  {100, 64, 32, 233472}, {103, 64, 32, 233472},
    {120, 48, 32, 102400}, {121, 48, 32, 102400},
};

static const sm_limits *sm_of(const char *arch) {
  int sm = kf_arch_sm(arch);
  for (size_t i = 0; i < sizeof sm_table / sizeof sm_table[0]; i++)
    if (sm_table[i].sm == sm)
      return &sm_table[i];
  return NULL;
}

int64_t kf_blocks_per_sm(const char *arch, const kf_meta_resources *r, int threads,
                         int64_t dyn_shared) {
  const sm_limits *s = sm_of(arch);
  if (!s || r->registers < 0 || r->shared_bytes < 0 || threads <= 0)
    return -1;
  int64_t warps = (threads + 31) / 32;
  int64_t by_warps = s->max_warps / warps;
  int64_t regs_per_warp = (r->registers * 32 + 255) / 256 * 256;
  int64_t by_regs = regs_per_warp ? 4 * (16384 / regs_per_warp) / warps : s->max_blocks;
  int64_t by_shared = s->shared_bytes / (r->shared_bytes + dyn_shared + 1024);
  int64_t n = s->max_blocks;
  if (by_warps < n)
    n = by_warps;
  if (by_regs < n)
    n = by_regs;
  if (by_shared < n)
    n = by_shared;
  return n;
}

/* ---- the check ---- */

int64_t kf_limit_figure(int limit, const kf_meta_resources *r, const char *arch, int threads,
                        int64_t dyn_shared, int *applies) {
  int hip = kf_arch_is_hip(arch);
  *applies = 1;
  switch (limit) {
  case KF_LIMIT_MAX_REGISTERS:
    if (r->registers < 0)
      return -1;
    return r->registers + (hip && r->agprs > 0 ? r->agprs : 0);
  case KF_LIMIT_SPILLS:
    /* AMD: registers spilled into other registers (SGPRs into lanes of a
     * VGPR, VGPRs into AGPRs) need no scratch and move no memory; with no
     * private segment every spill went there, and the figure is 0. */
    if (hip)
      return r->spilled_registers > 0 && r->stack_bytes == 0 ? 0 : r->spilled_registers;
    return r->spill_stores < 0 || r->spill_loads < 0 ? -1 : r->spill_stores + r->spill_loads;
  case KF_LIMIT_MIN_BLOCKS_PER_SM:
    *applies = !hip;
    return kf_blocks_per_sm(arch, r, threads, dyn_shared);
  default:
    *applies = hip;
    return r->waves_per_eu;
  }
}

static const char *const figure_words[KF_LIMIT_COUNT] = {"registers", "spilled", "blocks per SM",
                                                         "waves per SIMD"};

char *kf_limits_check(const kf_limits *l, const kf_meta_resources *r, const char *arch, int threads,
                      int64_t dyn_shared) {
  kf_buf why = {0};
  for (int i = 0; i < KF_LIMIT_COUNT; i++) {
    if (!l->from[i])
      continue;
    int applies;
    int64_t f = kf_limit_figure(i, r, arch, threads, dyn_shared, &applies);
    if (!applies)
      continue;
    const char *sep = why.len ? "; " : "";
    if (f < 0) {
      kf_buf_printf(&why, "%s%s: the compiler reported no figure to check %s %lld (%s)", sep, arch,
                    kf_limit_names[i], (long long)l->value[i], l->from[i]);
      continue;
    }
    int is_max = i == KF_LIMIT_MAX_REGISTERS || i == KF_LIMIT_SPILLS;
    if (is_max ? f > l->value[i] : f < l->value[i])
      kf_buf_printf(&why, "%s%lld %s, %s the limit %s %lld (%s)", sep, (long long)f,
                    figure_words[i], is_max ? "over" : "under", kf_limit_names[i],
                    (long long)l->value[i], l->from[i]);
  }
  return why.len ? kf_buf_take(&why) : NULL;
}
