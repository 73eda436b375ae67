/* Architecture names and compatibility: which manifest's objects a device
 * can run, and how well. These are the contract's rules (docs/contracts.md,
 * "Arch names"): an sm_XYa object runs only on compute capability X.Y; a
 * plain sm_XY object on X.Y and later minors of major X; a gfx object on the
 * same gfx processor when every target feature it names (xnack-, sramecc+)
 * is set the same way on the device. Pure functions, tested on their own. */
#include "rt_internal.h"

#include <stdio.h>
#include <string.h>

#define RT_MAX_FEATURES 8

/* sm_<digits>[a] -> major, minor, arch-specific flag; 0 on success. */
static int cuda_parse(const char *arch, int *major, int *minor, int *specific) {
  int n = 0, digits = 0;
  const char *p = arch;
  if (strncmp(p, "sm_", 3) != 0)
    return -1;
  for (p += 3; *p >= '0' && *p <= '9'; p++, digits++) {
    if (digits == 3)
      return -1;
    n = n * 10 + (*p - '0');
  }
  if (digits < 2 || arch[3] == '0')
    return -1;
  *specific = 0;
  if (*p == 'a') {
    *specific = 1;
    p++;
  }
  if (*p != '\0')
    return -1;
  *major = n / 10;
  *minor = n % 10;
  return 0;
}

int rt_arch_cuda_rank(const char *arch, int major, int minor) {
  int am, an, specific;
  if (cuda_parse(arch, &am, &an, &specific) != 0 || am != major)
    return -1;
  if (specific)
    return an == minor ? 0 : -1;
  return an <= minor ? 1 + (minor - an) : -1;
}

void rt_arch_cuda_wanted(int major, int minor, char *buf, size_t size) {
  size_t used = 0;
  if (size == 0)
    return;
  buf[0] = '\0';
  used += (size_t)snprintf(buf, size, "sm_%d%da", major, minor);
  for (int m = minor; m >= 0 && used < size; m--)
    used += (size_t)snprintf(buf + used, size - used, ", sm_%d%d", major, m);
}

typedef struct hip_arch {
  char base[RT_ARCH_MAX];
  int n;
  char feature[RT_MAX_FEATURES][RT_ARCH_MAX];
  char on[RT_MAX_FEATURES]; /* '+' or '-' */
} hip_arch;

/* gfx<alnum>[:<feature><+|->]* */
static int hip_parse(const char *arch, hip_arch *out) {
  const char *p = arch, *colon;
  size_t len;
  memset(out, 0, sizeof *out);
  if (strncmp(arch, "gfx", 3) != 0)
    return -1;
  colon = strchr(arch, ':');
  len = colon ? (size_t)(colon - arch) : strlen(arch);
  if (len <= 3 || len >= sizeof out->base)
    return -1;
  for (size_t i = 3; i < len; i++)
    if (!((arch[i] >= '0' && arch[i] <= '9') || (arch[i] >= 'a' && arch[i] <= 'z')))
      return -1;
  memcpy(out->base, arch, len);
  p = colon;
  while (p) {
    const char *start = p + 1, *end = strchr(start, ':');
    size_t flen = end ? (size_t)(end - start) : strlen(start);
    if (out->n == RT_MAX_FEATURES || flen < 2 || flen >= RT_ARCH_MAX)
      return -1;
    if (start[flen - 1] != '+' && start[flen - 1] != '-')
      return -1;
    for (size_t i = 0; i + 1 < flen; i++)
      if (!(start[i] >= 'a' && start[i] <= 'z'))
        return -1;
    memcpy(out->feature[out->n], start, flen - 1);
    out->on[out->n] = start[flen - 1];
    out->n++;
    p = end;
  }
  return 0;
}

int rt_arch_hip_rank(const char *arch, const char *device_arch) {
  hip_arch a, d;
  if (hip_parse(arch, &a) != 0 || hip_parse(device_arch, &d) != 0)
    return -1;
  if (strcmp(a.base, d.base) != 0)
    return -1;
  for (int i = 0; i < a.n; i++) {
    int match = 0;
    for (int j = 0; j < d.n; j++)
      if (strcmp(a.feature[i], d.feature[j]) == 0)
        match = a.on[i] == d.on[j] ? 1 : -1;
    if (match != 1)
      return -1;
  }
  return RT_MAX_FEATURES - a.n;
}

void rt_arch_hip_wanted(const char *device_arch, char *buf, size_t size) {
  hip_arch d;
  size_t used = 0;
  if (size == 0)
    return;
  buf[0] = '\0';
  if (hip_parse(device_arch, &d) != 0) {
    snprintf(buf, size, "%s", device_arch);
    return;
  }
  /* Every subset of the device's features, most features first. */
  for (int count = d.n; count >= 0; count--) {
    for (unsigned mask = 0; mask < (1u << d.n); mask++) {
      if (__builtin_popcount(mask) != count || used >= size)
        continue;
      used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", d.base);
      for (int i = 0; i < d.n && used < size; i++)
        if (mask & (1u << i))
          used += (size_t)snprintf(buf + used, size - used, ":%s%c", d.feature[i], d.on[i]);
    }
  }
}

int rt_arch_valid(kf_backend backend, const char *name) {
  int a, b, c;
  hip_arch h;
  if (backend == KF_BACKEND_CUDA)
    return cuda_parse(name, &a, &b, &c) == 0;
  if (backend == KF_BACKEND_HIP)
    return hip_parse(name, &h) == 0;
  return 0;
}
