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

/* The HIP target features each gfx processor of the table takes (LLVM's
 * AMDGPU processor table); the others (RDNA) take none. */
static const struct {
  const char *base;
  const char *features[3];
} gfx_features[] = {
    {"gfx900", {"xnack", NULL}},
    {"gfx906", {"sramecc", "xnack", NULL}},
    {"gfx908", {"sramecc", "xnack", NULL}},
    {"gfx90a", {"sramecc", "xnack", NULL}},
    {"gfx940", {"sramecc", "xnack", NULL}},
    {"gfx941", {"sramecc", "xnack", NULL}},
    {"gfx942", {"sramecc", "xnack", NULL}},
    {"gfx950", {"sramecc", "xnack", NULL}},
    {NULL, {NULL}},
};

static int in_list(const char *const *list, const char *s) {
  for (; *list; list++)
    if (strcmp(*list, s) == 0)
      return 1;
  return 0;
}

static const char *const no_features[] = {NULL};

static const char *const *features_of(const char *base) {
  for (int i = 0; gfx_features[i].base; i++)
    if (!strcmp(gfx_features[i].base, base))
      return gfx_features[i].features;
  return no_features;
}

/* The first target feature that a gfx name sets twice, into feature; 0 when
 * none does. */
static int repeated_feature(const char *arch, char *feature, size_t n) {
  const char *p = strchr(arch, ':');
  while (p) {
    const char *start = p + 1;
    size_t len = strcspn(start, ":");
    size_t flen = len && (start[len - 1] == '+' || start[len - 1] == '-') ? len - 1 : len;
    for (const char *q = strchr(start + len, ':'); q; q = strchr(q + 1, ':')) {
      size_t l2 = strcspn(q + 1, ":");
      size_t f2 = l2 && (q[l2] == '+' || q[l2] == '-') ? l2 - 1 : l2;
      if (f2 == flen && flen && !strncmp(start, q + 1, flen)) {
        snprintf(feature, n, "%.*s", (int)flen, start);
        return 1;
      }
    }
    p = strchr(start, ':');
  }
  return 0;
}

int kf_arch_check(const char *arch, char *why, size_t n) {
  rt_arch a;
  char f[RT_ARCH_MAX];
  if (rt_arch_parse(arch, &a) != 0) {
    if (!strncmp(arch, "gfx", 3) && repeated_feature(arch, f, sizeof f))
      snprintf(why, n, "target feature %s is set more than once in \"%s\"", f, arch);
    else
      snprintf(why, n, "unknown arch \"%s\"; known: %s", arch, kf_arch_known_list());
    return -1;
  }
  if (!in_list(kf_arch_table, a.base)) {
    snprintf(why, n, "unknown arch \"%s\"; known: %s", arch, kf_arch_known_list());
    return -1;
  }
  const char *const *takes = features_of(a.base);
  for (int i = 0; i < a.nfeatures; i++)
    if (!in_list(takes, a.feature[i])) {
      if (takes[0])
        snprintf(why, n, "%s has no target feature %s (it takes %s%s%s)", a.base, a.feature[i],
                 takes[0], takes[1] ? " and " : "", takes[1] ? takes[1] : "");
      else
        snprintf(why, n, "%s has no target feature %s (it takes none)", a.base, a.feature[i]);
      return -1;
    }
  return 0;
}

int kf_arch_known(const char *arch) {
  char why[16];
  return kf_arch_check(arch, why, sizeof why) == 0;
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

long kf_arch_block_shared_max(const char *arch) {
  rt_arch a;
  if (rt_arch_parse(arch, &a) != 0)
    return 0;
  if (kf_arch_is_hip(arch))
    return !strcmp(a.base, "gfx950") ? 160 * 1024 : 64 * 1024; /* LDS per workgroup */
  const int sm = kf_arch_sm(arch);
  if (sm == 80 || sm == 87)
    return 163 * 1024;
  if (sm >= 90 && sm < 120)
    return 227 * 1024;
  return sm == 75 ? 64 * 1024 : 99 * 1024; /* sm_86, sm_89, sm_120, sm_121 */
}

/* When LLVM first targeted each newer processor, and an older processor of
 * the same generation for parsers that predate it. */
static const struct {
  const char *base;
  int llvm;
  const char *older;
} gfx_since[] = {
    {"gfx941", 17, "gfx940"},   {"gfx942", 17, "gfx940"},   {"gfx950", 20, "gfx940"},
    {"gfx1200", 18, "gfx1102"}, {"gfx1201", 18, "gfx1102"}, {NULL, 0, NULL},
};

int kf_arch_first_llvm(const char *arch) {
  rt_arch a;
  if (rt_arch_parse(arch, &a) != 0 || a.kind != RT_ARCH_HIP)
    return 0;
  for (int i = 0; gfx_since[i].base; i++)
    if (!strcmp(gfx_since[i].base, a.base))
      return gfx_since[i].llvm;
  return 0;
}

const char *kf_arch_parse_as(const char *arch, int llvm) {
  rt_arch a;
  if (rt_arch_parse(arch, &a) != 0 || a.kind != RT_ARCH_HIP)
    return arch;
  for (int i = 0; gfx_since[i].base; i++)
    if (!strcmp(gfx_since[i].base, a.base) && llvm < gfx_since[i].llvm)
      return gfx_since[i].older;
  return arch;
}
