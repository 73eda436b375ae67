/* Architecture names and compatibility: the grammar of arch names and which
 * manifest's objects a device can run, and how well. These are the
 * contract's rules (docs/contracts.md, "Arch names"): an sm_XYa object runs
 * only on compute capability X.Y; an sm_XYf or plain sm_XY object on X.Y and
 * later minors of major X; a gfx object on the same gfx processor when every
 * target feature it names (xnack-, sramecc+) is set the same way on the
 * device. The generator compiles this file too, for the same grammar. Pure
 * functions, tested on their own. */
#include "rt_arch.h"

#include <stdio.h>
#include <string.h>

static int is_lower(char c) { return c >= 'a' && c <= 'z'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* sm_<XY>[a|f] */
static int cuda_parse(const char *name, rt_arch *out) {
  const char *p = name + 3;
  int n = 0, digits = 0;
  for (; is_digit(*p); p++, digits++) {
    if (digits == 3)
      return -1;
    n = n * 10 + (*p - '0');
  }
  if (digits < 2 || name[3] == '0')
    return -1;
  out->kind = RT_ARCH_CUDA;
  out->code = n;
  out->variant = RT_ARCH_PLAIN;
  if (*p == 'a' && n >= 90)
    out->variant = RT_ARCH_SPECIFIC;
  else if (*p == 'f' && n >= 100)
    out->variant = RT_ARCH_FAMILY;
  if (out->variant != RT_ARCH_PLAIN)
    p++;
  if (*p != '\0')
    return -1;
  memcpy(out->base, name, (size_t)(p - name) + 1);
  return 0;
}

/* gfx<alnum>[:<feature><+|->]* */
static int hip_parse(const char *name, rt_arch *out) {
  size_t len = strcspn(name, ":");
  const char *p = name + len;
  if (len <= 3 || len >= sizeof out->base)
    return -1;
  for (size_t i = 3; i < len; i++)
    if (!is_lower(name[i]) && !is_digit(name[i]))
      return -1;
  out->kind = RT_ARCH_HIP;
  memcpy(out->base, name, len);
  out->base[len] = '\0';
  while (*p == ':') {
    const char *start = p + 1;
    size_t flen = strcspn(start, ":");
    if (out->nfeatures == RT_ARCH_MAX_FEATURES || flen < 2 || flen >= RT_ARCH_MAX)
      return -1;
    if (start[flen - 1] != '+' && start[flen - 1] != '-')
      return -1;
    for (size_t i = 0; i + 1 < flen; i++)
      if (!is_lower(start[i]))
        return -1;
    char *f = out->feature[out->nfeatures];
    memcpy(f, start, flen - 1);
    f[flen - 1] = '\0';
    for (int i = 0; i < out->nfeatures; i++)
      if (strcmp(out->feature[i], f) == 0)
        return -1; /* "xnack-:xnack+" says nothing a device could match */
    out->feature_on[out->nfeatures++] = start[flen - 1];
    p = start + flen;
  }
  return 0;
}

int rt_arch_parse(const char *name, rt_arch *out) {
  memset(out, 0, sizeof *out);
  if (strlen(name) >= RT_ARCH_MAX)
    return -1;
  if (strncmp(name, "sm_", 3) == 0)
    return cuda_parse(name, out);
  if (strncmp(name, "gfx", 3) == 0)
    return hip_parse(name, out);
  return -1;
}

int rt_arch_cuda_rank(const char *arch, int major, int minor) {
  rt_arch a;
  if (rt_arch_parse(arch, &a) != 0 || a.kind != RT_ARCH_CUDA || rt_arch_major(&a) != major)
    return -1;
  int behind = minor - rt_arch_minor(&a);
  if (a.variant == RT_ARCH_SPECIFIC)
    return behind == 0 ? 0 : -1;
  if (behind < 0)
    return -1;
  return (a.variant == RT_ARCH_FAMILY ? 1 : 11) + behind;
}

void rt_arch_cuda_wanted(int major, int minor, char *buf, size_t size) {
  size_t used = 0;
  if (size == 0)
    return;
  buf[0] = '\0';
  /* the order of rt_arch_cuda_rank, best first */
  static const struct {
    rt_arch_variant variant;
    const char *suffix;
    int from_code;
  } forms[] = {{RT_ARCH_SPECIFIC, "a", 90}, {RT_ARCH_FAMILY, "f", 100}, {RT_ARCH_PLAIN, "", 0}};
  for (size_t k = 0; k < sizeof forms / sizeof forms[0]; k++) {
    int last = forms[k].variant == RT_ARCH_SPECIFIC ? minor : 0;
    for (int m = minor; m >= last && used < size; m--) {
      if (major * 10 + m < forms[k].from_code)
        continue;
      used += (size_t)snprintf(buf + used, size - used, "%ssm_%d%d%s", used ? ", " : "", major, m,
                               forms[k].suffix);
    }
  }
}

int rt_arch_hip_rank(const char *arch, const char *device_arch) {
  rt_arch a, d;
  if (rt_arch_parse(arch, &a) != 0 || rt_arch_parse(device_arch, &d) != 0 ||
      a.kind != RT_ARCH_HIP || d.kind != RT_ARCH_HIP)
    return -1;
  if (strcmp(a.base, d.base) != 0)
    return -1;
  for (int i = 0; i < a.nfeatures; i++) {
    int match = 0;
    for (int j = 0; j < d.nfeatures; j++)
      if (strcmp(a.feature[i], d.feature[j]) == 0)
        match = a.feature_on[i] == d.feature_on[j];
    if (!match)
      return -1;
  }
  return RT_ARCH_MAX_FEATURES - a.nfeatures;
}

void rt_arch_hip_wanted(const char *device_arch, char *buf, size_t size) {
  rt_arch d;
  size_t used = 0;
  if (size == 0)
    return;
  buf[0] = '\0';
  if (rt_arch_parse(device_arch, &d) != 0 || d.kind != RT_ARCH_HIP) {
    snprintf(buf, size, "%s", device_arch);
    return;
  }
  /* Every subset of the device's features, most features first. */
  for (int count = d.nfeatures; count >= 0; count--) {
    for (unsigned mask = 0; mask < (1u << d.nfeatures); mask++) {
      if (__builtin_popcount(mask) != count || used >= size)
        continue;
      used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", d.base);
      for (int i = 0; i < d.nfeatures && used < size; i++)
        if (mask & (1u << i))
          used += (size_t)snprintf(buf + used, size - used, ":%s%c", d.feature[i], d.feature_on[i]);
    }
  }
}
