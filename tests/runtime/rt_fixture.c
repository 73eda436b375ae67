/* Test caches for the runtime's tests; see rt_fixture.h. */
#define _GNU_SOURCE
#include "rt_fixture.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <openssl/evp.h>
#include <xxhash.h>

char *fx_tmpdir(void) {
  const char *base = getenv("TMPDIR");
  char *p;
  if (!base || !*base)
    base = "/tmp";
  if (asprintf(&p, "%s/kfrt-XXXXXX", base) < 0)
    return NULL;
  if (!mkdtemp(p)) {
    free(p);
    return NULL;
  }
  return p;
}

static int mkdirs(const char *path) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p == '/') {
      *p = '\0';
      if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return -1;
      *p = '/';
    }
  }
  return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

int fx_write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return -1;
  if (fwrite(data, 1, len, f) != len) {
    fclose(f);
    return -1;
  }
  return fclose(f);
}

/* SHA-256 as 64 lowercase hex digits (what a signed manifest binds). */
static void sha256_hex(const void *data, size_t len, char out[65]) {
  unsigned char h[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data, len, h, &n, EVP_sha256(), NULL);
  for (unsigned i = 0; i < 32; i++)
    snprintf(out + 2 * i, 3, "%02x", h[i]);
}

static void hex128(const void *data, size_t len, char out[33]) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(data, len));
  for (int i = 0; i < 16; i++)
    sprintf(out + 2 * i, "%02x", c.digest[i]);
}

void fx_symbol(const char *id, char *out, size_t size) {
  size_t n = 0;
  n += (size_t)snprintf(out, size, "kf_");
  for (const char *p = id; *p && n + 1 < size; p++)
    out[n++] = ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))
                   ? *p
                   : '_';
  out[n] = '\0';
  snprintf(out + n, size - n, "_%08llx",
           (unsigned long long)(XXH3_64bits(id, strlen(id)) & 0xffffffffu));
}

static void kernel_key(const char *id, char key[33]) {
  char buf[600];
  snprintf(buf, sizeof buf, "key:%s", id);
  hex128(buf, strlen(buf), key);
}

static char *entry_path(const char *cache, const char *model, const char *arch, const char *kind,
                        int width, const char *file) {
  char id[512], key[33], *p;
  snprintf(id, sizeof id, "%s/%s/w%d/%s", model, kind, width, arch);
  kernel_key(id, key);
  if (asprintf(&p, "%s/v1/objects/%.2s/%s/%s", cache, key, key, file) < 0)
    return NULL;
  return p;
}

static const char *object_name(const char *arch) {
  return strncmp(arch, "gfx", 3) == 0 ? "object.hsaco" : "object.cubin";
}

char *fx_object_path(const char *cache, const char *model, const char *arch, const char *kind,
                     int width) {
  return entry_path(cache, model, arch, kind, width, object_name(arch));
}

char *fx_meta_path(const char *cache, const char *model, const char *arch, const char *kind,
                   int width) {
  return entry_path(cache, model, arch, kind, width, "meta.json");
}

char *fx_manifest_path(const char *cache, const char *model, const char *arch) {
  char *p;
  if (asprintf(&p, "%s/v1/manifests/%s/%s.json", cache, model, arch) < 0)
    return NULL;
  return p;
}

static size_t type_size(const char *type) {
  return strchr(type, '*') || strcmp(type, "long long") == 0 ? 8 : 4;
}

/* "const float* x; int rows" -> JSON params and the fake's size list. */
static void params_json(const char *spec, char *json, size_t jsize, char *sizes, size_t ssize) {
  char buf[1024], *save = NULL;
  size_t jn = 0, sn = 0;
  snprintf(buf, sizeof buf, "%s", spec ? spec : "");
  jn += (size_t)snprintf(json, jsize, "[");
  sizes[0] = '\0';
  for (char *tok = strtok_r(buf, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
    char *name, *type = tok;
    while (*type == ' ')
      type++;
    name = strrchr(type, ' ');
    if (!name)
      continue;
    *name++ = '\0';
    jn += (size_t)snprintf(json + jn, jsize - jn,
                           "%s{\"name\": \"%s\", \"type\": \"%s\", \"size\": "
                           "%zu}",
                           jn > 1 ? ", " : "", name, type, type_size(type));
    sn += (size_t)snprintf(sizes + sn, ssize - sn, "%s%zu", sn ? "," : "", type_size(type));
  }
  snprintf(json + jn, jsize - jn, "]");
}

typedef struct fx_entry {
  char id[512];
  char text[16384];
} fx_entry;

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const fx_entry *)a)->id, ((const fx_entry *)b)->id);
}

int fx_cache_add(const char *cache, const char *model, const char *arch, const fx_spec *specs,
                 int n, int format) {
  fx_entry *entries = calloc((size_t)(n ? n : 1), sizeof *entries);
  char *mpath = fx_manifest_path(cache, model, arch), *dir;
  FILE *f;
  int rc = -1;
  if (!entries || !mpath)
    goto out;
  for (int i = 0; i < n; i++) {
    const fx_spec *s = &specs[i];
    char symbol[600], key[33], sum[33], sha[65], object[1024], pj[4096], sizes[256];
    char meta[2048], *opath, *mtpath, *edir;
    int olen;
    snprintf(entries[i].id, sizeof entries[i].id, "%s/%s/w%d/%s", model, s->kind, s->width, arch);
    fx_symbol(entries[i].id, symbol, sizeof symbol);
    kernel_key(entries[i].id, key);
    params_json(s->params, pj, sizeof pj, sizes, sizeof sizes);
    olen = snprintf(object, sizeof object, "KFFAKE\n%s %s\n",
                    s->object_symbol ? s->object_symbol : symbol, sizes);
    hex128(object, (size_t)olen, sum);
    sha256_hex(object, (size_t)olen, sha);
    opath = fx_object_path(cache, model, arch, s->kind, s->width);
    mtpath = fx_meta_path(cache, model, arch, s->kind, s->width);
    edir = strdup(opath);
    *strrchr(edir, '/') = '\0';
    snprintf(meta, sizeof meta,
             "{\"format\": 1, \"key\": \"%s\", \"kernel_id\": \"%s\", "
             "\"object\": \"%s\", \"checksum\": \"%s\", \"size\": %d, "
             "\"command\": [\"nvcc\"], \"compiler_output\": \"\", "
             "\"compile_seconds\": 0.5, \"resources\": {\"registers\": %d, "
             "\"stack_bytes\": 16, \"spill_stores\": 4, \"spill_loads\": 8, "
             "\"shared_bytes\": 1024}, \"inputs\": []}\n",
             key, entries[i].id, object_name(arch), sum, olen, 32 + s->width);
    if (mkdirs(edir) != 0 || fx_write_file(opath, object, (size_t)olen) != 0 ||
        fx_write_file(mtpath, meta, strlen(meta)) != 0) {
      free(edir);
      free(opath);
      free(mtpath);
      goto out;
    }
    free(edir);
    free(opath);
    free(mtpath);
    char blocks[80] = "";
    if (s->max_blocks)
      snprintf(blocks, sizeof blocks, ", \"max_blocks_per_sm\": %u", s->max_blocks);
    if (s->one_wave)
      snprintf(blocks + strlen(blocks), sizeof blocks - strlen(blocks), ", \"one_wave\": true");
    snprintf(entries[i].text, sizeof entries[i].text,
             "    {\n      \"id\": \"%s\",\n      \"kind\": \"%s\",\n"
             "      \"width\": %d,\n      \"key\": \"%s\",\n"
             "      \"object\": \"objects/%.2s/%s/%s\",\n"
             "      \"meta\": \"objects/%.2s/%s/meta.json\",\n"
             "      \"checksum\": \"%s\",\n      \"sha256\": \"%s\",\n      \"size\": %d,\n"
             "      \"symbol\": \"%s\",\n      \"params\": %s,\n"
             "      \"launch\": {\"grid\": [%d, 1, 1], \"block\": [256, 1, "
             "1], \"shared_bytes\": %u%s}\n    }",
             entries[i].id, s->kind, s->width, key, key, key, object_name(arch), key, key, sum, sha,
             olen, symbol, pj, s->width, s->shared, blocks);
  }
  qsort(entries, (size_t)n, sizeof *entries, cmp_entry);
  dir = strdup(mpath);
  *strrchr(dir, '/') = '\0';
  if (mkdirs(dir) != 0) {
    free(dir);
    goto out;
  }
  free(dir);
  if (!(f = fopen(mpath, "w")))
    goto out;
  fprintf(f,
          "{\n  \"format\": %d,\n  \"model\": \"%s\",\n  \"arch\": \"%s\",\n"
          "  \"backend\": \"%s\",\n  \"kernels\": [\n",
          format, model, arch, strncmp(arch, "gfx", 3) == 0 ? "hip" : "cuda");
  for (int i = 0; i < n; i++)
    fprintf(f, "%s%s", entries[i].text, i + 1 < n ? ",\n" : "\n");
  fprintf(f, "  ]\n}\n");
  rc = fclose(f);
out:
  free(entries);
  free(mpath);
  return rc;
}

int fx_flip_byte(const char *path, long offset) {
  FILE *f = fopen(path, "r+b");
  int c;
  if (!f)
    return -1;
  if (fseek(f, offset, SEEK_SET) != 0 || (c = fgetc(f)) == EOF || fseek(f, offset, SEEK_SET) != 0 ||
      fputc(c ^ 0x20, f) == EOF) {
    fclose(f);
    return -1;
  }
  return fclose(f);
}

static int chmod_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)flag;
  (void)ftw;
  chmod(p, st->st_mode | S_IWUSR | S_IRUSR | (S_ISDIR(st->st_mode) ? S_IXUSR : 0));
  return 0;
}

static int remove_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  remove(p);
  return 0;
}

void fx_remove_tree(const char *path) {
  nftw(path, chmod_one, 16, FTW_PHYS);
  nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}
