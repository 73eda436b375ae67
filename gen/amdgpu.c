/* amdgpu.c: resource figures from an AMD code object's metadata note.
 *
 * The clang offload bundle header is read here (magic, entry count, then
 * per entry offset, size, id length and id: four fields) rather than by
 * running clang-offload-bundler; the note itself is MessagePack, which
 * llvm-readelf turns into the YAML document that is parsed below. */
#define _GNU_SOURCE
#include "amdgpu.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

static const char kBundleMagic[] = "__CLANG_OFFLOAD_BUNDLE__";

static int read_u64(const char *bytes, size_t len, size_t *at, uint64_t *v) {
  if (*at > len || len - *at < 8)
    return -1;
  memcpy(v, bytes + *at, 8); /* little-endian, as the bundler writes it */
  *at += 8;
  return 0;
}

/* Whether a bundle entry id names arch: "<kind>-amdgcn-amd-amdhsa--<arch>"
 * optionally followed by ":features". */
static int id_is_arch(const char *id, size_t n, const char *arch) {
  static const char triple[] = "-amdgcn-amd-amdhsa--";
  size_t alen = strcspn(arch, ":");
  const char *t = memmem(id, n, triple, sizeof triple - 1);
  if (!t)
    return 0;
  const char *a = t + sizeof triple - 1;
  size_t rest = n - (size_t)(a - id);
  return rest >= alen && !memcmp(a, arch, alen) && (rest == alen || a[alen] == ':');
}

int kf_amdgpu_elf(const char *bytes, size_t len, const char *arch, size_t *off, size_t *n) {
  if (len >= 4 && !memcmp(bytes, "\177ELF", 4)) {
    *off = 0;
    *n = len;
    return 0;
  }
  size_t at = sizeof kBundleMagic - 1;
  uint64_t count;
  if (len < at || memcmp(bytes, kBundleMagic, at) || read_u64(bytes, len, &at, &count))
    return -1;
  for (uint64_t i = 0; i < count; i++) {
    uint64_t o, size, idlen;
    if (read_u64(bytes, len, &at, &o) || read_u64(bytes, len, &at, &size) ||
        read_u64(bytes, len, &at, &idlen) || idlen > len - at)
      return -1;
    const char *id = bytes + at;
    at += idlen;
    if (id_is_arch(id, idlen, arch) && o <= len && size <= len - o && size >= 4 &&
        !memcmp(bytes + o, "\177ELF", 4)) {
      *off = o;
      *n = size;
      return 0;
    }
  }
  return -1;
}

/* The value of "key:" on a line of the kernel's own level (4 spaces in, as
 * "    .vgpr_count:     3"), or -1. */
static long member(const char *entry, size_t n, const char *key) {
  size_t klen = strlen(key);
  for (const char *p = entry; p && p < entry + n; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    const char *q = p;
    if (!strncmp(q, "  - ", 4) || !strncmp(q, "    ", 4))
      q += 4;
    else
      continue;
    if (!strncmp(q, key, klen) && q[klen] == ':') {
      char *end;
      long v = strtol(q + klen + 1, &end, 10);
      return end != q + klen + 1 && v >= 0 ? v : -1;
    }
  }
  return -1;
}

/* Whether the entry's ".name:" is symbol. */
static int entry_is(const char *entry, size_t n, const char *symbol) {
  size_t slen = strlen(symbol);
  for (const char *p = entry; p && p < entry + n; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    const char *q = !strncmp(p, "  - ", 4) || !strncmp(p, "    ", 4) ? p + 4 : NULL;
    if (!q || strncmp(q, ".name:", 6))
      continue;
    q += 6;
    while (*q == ' ')
      q++;
    return !strncmp(q, symbol, slen) && (q[slen] == '\n' || q[slen] == '\0' || q[slen] == ' ');
  }
  return 0;
}

int kf_amdgpu_note_figures(const char *notes, const char *symbol, kf_meta_resources *r) {
  const char *list = strstr(notes, "\namdhsa.kernels:\n");
  if (!list)
    return -1;
  const char *p = strstr(list + 1, "\n  - ");
  while (p) {
    const char *entry = p + 1;
    const char *next = strstr(entry, "\n  - ");
    const char *top = strstr(entry, "\namdhsa."); /* the list's end */
    const char *end = next && (!top || next < top) ? next : top ? top : entry + strlen(entry);
    size_t n = (size_t)(end - entry);
    if (entry_is(entry, n, symbol)) {
      long v[7];
      static const char *const keys[7] = {".vgpr_count",
                                          ".agpr_count",
                                          ".sgpr_count",
                                          ".vgpr_spill_count",
                                          ".sgpr_spill_count",
                                          ".private_segment_fixed_size",
                                          ".group_segment_fixed_size"};
      for (int i = 0; i < 7; i++) {
        v[i] = member(entry, n, keys[i]);
        if (v[i] > (1L << 30)) /* no code object has such a figure; sums stay in range */
          return -1;
      }
      if (v[0] < 0 || v[2] < 0 || v[3] < 0 || v[4] < 0 || v[5] < 0 || v[6] < 0)
        return -1;
      r->registers = v[0];
      r->agprs = v[1] >= 0 ? v[1] : 0; /* not written for targets without AGPRs */
      r->sgprs = v[2];
      r->spilled_registers = v[3] + v[4];
      r->stack_bytes = v[5];
      r->shared_bytes = v[6];
      return 0;
    }
    p = end == top ? NULL : next;
  }
  return -1;
}

char *kf_amdgpu_find_readelf(int clang_major) {
  const char *env = getenv("KFORGE_LLVM_READELF");
  if (env && *env)
    return access(env, X_OK) == 0 ? kf_xstrdup(env) : NULL;
  if (clang_major > 0) {
    char *p = kf_xasprintf("/usr/lib/llvm-%d/bin/llvm-readelf", clang_major);
    if (access(p, X_OK) == 0)
      return p;
    free(p);
  }
  const char *path = getenv("PATH");
  if (path) {
    char *copy = kf_xstrdup(path), *save = NULL;
    for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
      char *p = kf_path_join(d, "llvm-readelf");
      if (access(p, X_OK) == 0) {
        free(copy);
        return p;
      }
      free(p);
    }
    free(copy);
  }
  return access("/opt/rocm/llvm/bin/llvm-readelf", X_OK) == 0
             ? kf_xstrdup("/opt/rocm/llvm/bin/llvm-readelf")
             : NULL;
}

int kf_amdgpu_object_figures(const char *readelf, const char *dir, const char *bytes, size_t len,
                             const char *arch, const char *symbol, kf_meta_resources *r) {
  size_t off, n;
  if (!readelf || kf_amdgpu_elf(bytes, len, arch, &off, &n) != 0)
    return -1;
  char *elf = kf_path_join(dir, ".notes.elf");
  int rc = -1;
  if (kf_write_file_atomic(elf, bytes + off, n) == 0) {
    char *argv[] = {(char *)readelf, "--notes", elf, NULL};
    char *out = NULL;
    if (kf_run_capture(argv, &out) == 0 && out)
      rc = kf_amdgpu_note_figures(out, symbol, r);
    free(out);
    unlink(elf);
  }
  free(elf);
  return rc;
}
