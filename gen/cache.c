/* cache.c: entry storage, locking, publication and traversal (see cache.h). */
#define _GNU_SOURCE
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

void kf_cache_init(kf_cache *c, const char *dir) {
  const char *d = dir;
  if (!d || !*d)
    d = getenv("KFORGE_CACHE_DIR");
  if (!d || !*d)
    d = "cache";
  c->root = kf_path_absolute(d);
  c->v1 = kf_path_join(c->root, "v1");
}

void kf_cache_free(kf_cache *c) {
  free(c->root);
  free(c->v1);
}

static int valid_key(const char *key) {
  if (strlen(key) != 32)
    return 0;
  for (const char *p = key; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
      return 0;
  return 1;
}

char *kf_cache_entry_dir(const kf_cache *c, const char *key) {
  return kf_xasprintf("%s/objects/%.2s/%s", c->v1, key, key);
}

char *kf_cache_manifest_path(const kf_cache *c, const char *model, const char *arch) {
  return kf_xasprintf("%s/manifests/%s/%s.json", c->v1, model, arch);
}

static char *lock_path(const kf_cache *c, const char *key) {
  return kf_xasprintf("%s/locks/%.2s/%s.lock", c->v1, key, key);
}

static int lock_impl(const kf_cache *c, const char *key, int op) {
  char *p = lock_path(c, key);
  int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ENOENT) {
    char *dir = kf_path_dirname(p);
    kf_mkdir_p(dir);
    free(dir);
    fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  }
  free(p);
  if (fd < 0)
    return -1;
  while (flock(fd, op) != 0) {
    if (errno == EINTR)
      continue;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

int kf_cache_lock(const kf_cache *c, const char *key) { return lock_impl(c, key, LOCK_EX); }
int kf_cache_trylock(const kf_cache *c, const char *key) {
  return lock_impl(c, key, LOCK_EX | LOCK_NB);
}

void kf_cache_unlock(int fd) {
  if (fd >= 0) {
    flock(fd, LOCK_UN);
    close(fd);
  }
}

/* tmp/ holds "<key>.<random>" directories of builders at work and
 * "<key>.trash.<random>" of removals; a key's leftovers are dead when its
 * lock is free. */
static void clean_tmp(const kf_cache *c) {
  char *tmp = kf_path_join(c->v1, "tmp");
  DIR *d = opendir(tmp);
  if (!d) {
    free(tmp);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    char key[33] = "";
    if (strlen(e->d_name) > 33 && e->d_name[32] == '.') {
      memcpy(key, e->d_name, 32);
      key[32] = '\0';
    }
    int fd = -1;
    if (valid_key(key)) {
      fd = kf_cache_trylock(c, key);
      if (fd < 0)
        continue; /* a live builder owns it */
    } else if (strncmp(e->d_name, "trash.", 6) != 0) {
      continue;
    }
    char *p = kf_path_join(tmp, e->d_name);
    kf_remove_tree(p);
    free(p);
    kf_cache_unlock(fd);
  }
  closedir(d);
  free(tmp);
}

int kf_cache_prepare(kf_cache *c, char **err) {
  static const char *const subdirs[] = {"objects", "manifests", "locks", "tmp", "deps", NULL};
  for (const char *const *s = subdirs; *s; s++) {
    char *p = kf_path_join(c->v1, *s);
    if (kf_mkdir_p(p) != 0) {
      *err = kf_xasprintf("cannot create %s: %s", p, strerror(errno));
      free(p);
      return -1;
    }
    free(p);
  }
  /* writable for real (root ignores permission bits, not read-only mounts) */
  char *probe = kf_xasprintf("%s/tmp/.probe.%ld", c->v1, (long)getpid());
  int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *err = kf_xasprintf("cannot write to %s: %s", c->v1, strerror(errno));
    free(probe);
    return -1;
  }
  close(fd);
  unlink(probe);
  free(probe);
  clean_tmp(c);
  return 0;
}

int kf_cache_check_entry(const kf_cache *c, const char *key, cJSON **meta, char **why) {
  if (meta)
    *meta = NULL;
  if (why)
    *why = NULL;
  if (!valid_key(key)) { /* e.g. from a hand-edited manifest: never a path */
    if (why)
      *why = kf_xstrdup("not a key (32 hex digits)");
    return KF_ENTRY_DAMAGED;
  }
  char *dir = kf_cache_entry_dir(c, key);
  char *mp = kf_path_join(dir, "meta.json");
  size_t len;
  char *text = kf_read_file(mp, &len);
  free(mp);
  if (!text) {
    int missing = errno == ENOENT && !kf_path_exists(dir);
    free(dir);
    if (missing)
      return KF_ENTRY_MISSING;
    if (why)
      *why = kf_xstrdup("meta.json is missing or unreadable");
    return KF_ENTRY_DAMAGED;
  }
  cJSON *m = cJSON_ParseWithLength(text, len);
  free(text);
  const cJSON *obj = m ? cJSON_GetObjectItemCaseSensitive(m, "object") : NULL;
  const cJSON *sum = m ? cJSON_GetObjectItemCaseSensitive(m, "checksum") : NULL;
  const cJSON *size = m ? cJSON_GetObjectItemCaseSensitive(m, "size") : NULL;
  const cJSON *mkey = m ? cJSON_GetObjectItemCaseSensitive(m, "key") : NULL;
  if (!cJSON_IsString(obj) || !cJSON_IsString(sum) || !cJSON_IsNumber(size) ||
      !cJSON_IsString(mkey) || strchr(obj->valuestring, '/')) {
    cJSON_Delete(m);
    free(dir);
    if (why)
      *why = kf_xstrdup("meta.json is damaged");
    return KF_ENTRY_DAMAGED;
  }
  if (strcmp(mkey->valuestring, key) != 0) {
    if (why)
      *why = kf_xasprintf("meta.json belongs to key %s", mkey->valuestring);
    cJSON_Delete(m);
    free(dir);
    return KF_ENTRY_DAMAGED;
  }
  char *op = kf_path_join(dir, obj->valuestring);
  free(dir);
  size_t olen;
  char *bytes = kf_read_file(op, &olen);
  free(op);
  int state = KF_ENTRY_OK;
  if (!bytes) {
    state = KF_ENTRY_DAMAGED;
    if (why)
      *why = kf_xasprintf("%s is missing", obj->valuestring);
  } else {
    char hex[33];
    kf_hash128_hex(bytes, olen, hex);
    if ((double)olen != size->valuedouble) {
      state = KF_ENTRY_DAMAGED;
      if (why)
        *why = kf_xasprintf("%s has %zu bytes, meta.json says %.0f", obj->valuestring, olen,
                            size->valuedouble);
    } else if (strcmp(hex, sum->valuestring) != 0) {
      state = KF_ENTRY_DAMAGED;
      if (why)
        *why = kf_xasprintf("%s checksum %s does not match meta.json's %s", obj->valuestring, hex,
                            sum->valuestring);
    }
  }
  free(bytes);
  if (state == KF_ENTRY_OK && meta)
    *meta = m;
  else
    cJSON_Delete(m);
  return state;
}

char *kf_cache_tmpdir(const kf_cache *c, const char *key) {
  char *tmpl = kf_xasprintf("%s/tmp/%s.XXXXXX", c->v1, key);
  if (!mkdtemp(tmpl)) {
    free(tmpl);
    return NULL;
  }
  return tmpl;
}

/* Removal renames the entry into tmp/ first, so that it vanishes at once.
 * The trash is named after the key like a builder's directory, so that
 * clean_tmp leaves it alone while the key's lock is held. */
static int move_to_trash(const kf_cache *c, const char *key, const char *path) {
  char *trash = kf_xasprintf("%s/tmp/%s.trash.XXXXXX", c->v1, key);
  if (!mkdtemp(trash)) {
    free(trash);
    return -1;
  }
  char *dst = kf_path_join(trash, "entry");
  int r = rename(path, dst);
  free(dst);
  kf_remove_tree(trash);
  free(trash);
  return r;
}

int kf_cache_publish(const kf_cache *c, const char *key, const char *tmpdir) {
  char *dir = kf_cache_entry_dir(c, key);
  char *parent = kf_path_dirname(dir);
  if (kf_mkdir_p(parent) != 0) {
    free(dir);
    free(parent);
    return -1;
  }
  if (kf_path_exists(dir))
    move_to_trash(c, key, dir);
  kf_fsync_dir(tmpdir);
  int r = rename(tmpdir, dir);
  if (r == 0)
    kf_fsync_dir(parent);
  free(dir);
  free(parent);
  return r;
}

int kf_cache_remove_entry(const kf_cache *c, const char *key) {
  char *dir = kf_cache_entry_dir(c, key);
  int r = kf_path_exists(dir) ? move_to_trash(c, key, dir) : 0;
  free(dir);
  return r;
}

void kf_cache_touch(const kf_cache *c, const char *key) {
  char *dir = kf_cache_entry_dir(c, key);
  utimensat(AT_FDCWD, dir, NULL, 0);
  free(dir);
}

static void list_dir_sorted(const char *path, kf_strv *out) {
  DIR *d = opendir(path);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.')
      kf_strv_push(out, e->d_name);
  closedir(d);
  kf_strv_sort(out);
}

void kf_cache_each_entry(const kf_cache *c, void (*fn)(const char *key, void *ctx), void *ctx) {
  char *objects = kf_path_join(c->v1, "objects");
  kf_strv shards = {0};
  list_dir_sorted(objects, &shards);
  for (size_t i = 0; i < shards.n; i++) {
    char *sd = kf_path_join(objects, shards.v[i]);
    kf_strv keys = {0};
    list_dir_sorted(sd, &keys);
    for (size_t k = 0; k < keys.n; k++)
      if (valid_key(keys.v[k]))
        fn(keys.v[k], ctx);
    kf_strv_free(&keys);
    free(sd);
  }
  kf_strv_free(&shards);
  free(objects);
}

void kf_cache_each_manifest(const kf_cache *c, void (*fn)(const char *path, void *ctx), void *ctx) {
  char *mdir = kf_path_join(c->v1, "manifests");
  kf_strv models = {0};
  list_dir_sorted(mdir, &models);
  for (size_t i = 0; i < models.n; i++) {
    char *md = kf_path_join(mdir, models.v[i]);
    kf_strv files = {0};
    list_dir_sorted(md, &files);
    for (size_t k = 0; k < files.n; k++) {
      size_t n = strlen(files.v[k]);
      if (n > 5 && !strcmp(files.v[k] + n - 5, ".json")) {
        char *p = kf_path_join(md, files.v[k]);
        fn(p, ctx);
        free(p);
      }
    }
    kf_strv_free(&files);
    free(md);
  }
  kf_strv_free(&models);
  free(mdir);
}
