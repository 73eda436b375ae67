/* arch.c: the generator's table of known arches, over the grammar that
 * runtime/rt_arch.c holds for the generator and the runtime alike. */
#include "arch.h"

#include <stdio.h>
#include <string.h>

const char *const kf_arch_table[] = {
    "sm_75",   "sm_80",   "sm_86",   "sm_87",   "sm_89",   "sm_90",   "sm_90a",  "sm_100",
    "sm_100a", "sm_100f", "sm_103",  "sm_103a", "sm_103f", "sm_110",  "sm_110a", "sm_110f",
    "sm_120",  "sm_120a", "sm_120f", "sm_121",  "sm_121a", "sm_121f", "gfx900",  "gfx906",
    "gfx908",  "gfx90a",  "gfx940",  "gfx941",  "gfx942",  "gfx950",  "gfx1030", "gfx1100",
    "gfx1101", "gfx1102", "gfx1200", "gfx1201", NULL};

/* The HIP target features a known gfx name may set. */
static const char *const known_features[] = {"sramecc", "xnack", NULL};

static int in_list(const char *const *list, const char *s) {
  for (; *list; list++)
    if (strcmp(*list, s) == 0)
      return 1;
  return 0;
}

int kf_arch_known(const char *arch) {
  rt_arch a;
  if (rt_arch_parse(arch, &a) != 0 || !in_list(kf_arch_table, a.base))
    return 0;
  for (int i = 0; i < a.nfeatures; i++)
    if (!in_list(known_features, a.feature[i]))
      return 0;
  return 1;
}

const char *kf_arch_known_list(void) {
  static char list[512];
  if (!list[0]) {
    size_t o = 0;
    for (const char *const *a = kf_arch_table; *a && o < sizeof list; a++)
      o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "", *a);
  }
  return list;
}

int kf_arch_is_hip(const char *arch) {
  rt_arch a;
  return rt_arch_parse(arch, &a) == 0 && a.kind == RT_ARCH_HIP;
}

int kf_arch_sm(const char *arch) {
  rt_arch a;
  return rt_arch_parse(arch, &a) == 0 && a.kind == RT_ARCH_CUDA ? a.code : 0;
}

int kf_arch_has_mma(const char *arch) { return kf_arch_sm(arch) >= 80; }
