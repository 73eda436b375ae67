/* cache.c: entry storage, locking, publication and traversal (see cache.h). */
#define _GNU_SOURCE
#include "cache.h"

#include "json.h"

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

/* ---- meta.json ---- */

static cJSON *inputs_json(const kf_entry_meta *m) {
  cJSON *arr = cJSON_CreateArray();
  for (size_t i = 0; i < m->ninputs; i++) {
    const kf_meta_input *in = &m->inputs[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tag", in->tag);
    cJSON_AddStringToObject(o, "name", in->name);
    cJSON_AddStringToObject(o, "hash", in->hash);
    if (in->value)
      cJSON_AddStringToObject(o, "value", in->value);
    cJSON_AddItemToArray(arr, o);
  }
  return arr;
}

int kf_entry_meta_write(const char *dir, const kf_entry_meta *m) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "format", 1);
  cJSON_AddStringToObject(o, "key", m->key);
  cJSON_AddStringToObject(o, "kernel_id", m->kernel_id);
  cJSON_AddStringToObject(o, "object", m->object);
  cJSON_AddStringToObject(o, "checksum", m->checksum);
  if (m->sha256)
    cJSON_AddStringToObject(o, "sha256", m->sha256);
  cJSON_AddNumberToObject(o, "size", (double)m->size);
  cJSON *cmd = cJSON_AddArrayToObject(o, "command");
  for (size_t i = 0; i < m->command.n; i++)
    cJSON_AddItemToArray(cmd, cJSON_CreateString(m->command.v[i]));
  cJSON_AddStringToObject(o, "compiler_output", m->compiler_output ? m->compiler_output : "");
  cJSON_AddNumberToObject(o, "compile_seconds", m->compile_seconds);
  const kf_meta_resources *r = &m->resources;
  cJSON *res = cJSON_AddObjectToObject(o, "resources");
  cJSON_AddNumberToObject(res, "registers", (double)r->registers);
  cJSON_AddNumberToObject(res, "stack_bytes", (double)r->stack_bytes);
  cJSON_AddNumberToObject(res, "spill_stores", (double)r->spill_stores);
  cJSON_AddNumberToObject(res, "spill_loads", (double)r->spill_loads);
  cJSON_AddNumberToObject(res, "shared_bytes", (double)r->shared_bytes);
  /* AMD's own figures, only where reported (NVIDIA metas stay as they were) */
  const struct {
    const char *name;
    long v;
  } amd[] = {{"sgprs", r->sgprs},
             {"agprs", r->agprs},
             {"spilled_registers", r->spilled_registers},
             {"waves_per_eu", r->waves_per_eu}};
  for (size_t i = 0; i < sizeof amd / sizeof amd[0]; i++)
    if (amd[i].v >= 0)
      cJSON_AddNumberToObject(res, amd[i].name, (double)amd[i].v);
  cJSON_AddItemToObject(o, "inputs", inputs_json(m));
  char *text = cJSON_Print(o);
  cJSON_Delete(o);
  char *path = kf_path_join(dir, "meta.json");
  int r2 = kf_write_file_atomic(path, text, strlen(text));
  int e = errno;
  free(path);
  free(text);
  errno = e;
  return r2;
}

void kf_entry_meta_add_input(kf_entry_meta *m, const char *tag, const char *name, const char *hash,
                             const char *value) {
  m->inputs = kf_xpush(m->inputs, m->ninputs, sizeof *m->inputs);
  kf_meta_input *in = &m->inputs[m->ninputs++];
  in->tag = kf_xstrdup(tag);
  in->name = kf_xstrdup(name);
  in->hash = kf_xstrdup(hash);
  in->value = value ? kf_xstrdup(value) : NULL;
}

void kf_entry_meta_free(kf_entry_meta *m) {
  free(m->key);
  free(m->kernel_id);
  free(m->object);
  free(m->checksum);
  free(m->sha256);
  kf_strv_free(&m->command);
  free(m->compiler_output);
  for (size_t i = 0; i < m->ninputs; i++) {
    free(m->inputs[i].tag);
    free(m->inputs[i].name);
    free(m->inputs[i].hash);
    free(m->inputs[i].value);
  }
  free(m->inputs);
  memset(m, 0, sizeof *m);
}

static long get_long(const cJSON *o, const char *name, long absent) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  return cJSON_IsNumber(v) ? (long)kf_i64_of_double(v->valuedouble) : absent;
}

static void take_meta(const cJSON *o, kf_entry_meta *m) {
  m->key = kf_json_dup_string(o, "key");
  m->kernel_id = kf_json_dup_string(o, "kernel_id");
  m->object = kf_json_dup_string(o, "object");
  m->checksum = kf_json_dup_string(o, "checksum");
  m->sha256 = kf_json_dup_string(o, "sha256");
  m->compiler_output = kf_json_dup_string(o, "compiler_output");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "size");
  m->has_size = cJSON_IsNumber(v);
  m->size = m->has_size ? kf_i64_of_double(v->valuedouble) : 0;
  v = cJSON_GetObjectItemCaseSensitive(o, "compile_seconds");
  m->has_seconds = cJSON_IsNumber(v);
  m->compile_seconds = m->has_seconds ? v->valuedouble : 0;
  v = cJSON_GetObjectItemCaseSensitive(o, "command");
  for (const cJSON *a = cJSON_IsArray(v) ? v->child : NULL; a; a = a->next)
    if (cJSON_IsString(a))
      kf_strv_push(&m->command, a->valuestring);
  const cJSON *res = cJSON_GetObjectItemCaseSensitive(o, "resources");
  m->has_resources = cJSON_IsObject(res);
  m->resources.registers = get_long(res, "registers", -1);
  m->resources.stack_bytes = get_long(res, "stack_bytes", -1);
  m->resources.spill_stores = get_long(res, "spill_stores", -1);
  m->resources.spill_loads = get_long(res, "spill_loads", -1);
  m->resources.shared_bytes = get_long(res, "shared_bytes", -1);
  m->resources.sgprs = get_long(res, "sgprs", -1);
  m->resources.agprs = get_long(res, "agprs", -1);
  m->resources.spilled_registers = get_long(res, "spilled_registers", -1);
  m->resources.waves_per_eu = get_long(res, "waves_per_eu", -1);
  v = cJSON_GetObjectItemCaseSensitive(o, "inputs");
  for (const cJSON *e = cJSON_IsArray(v) ? v->child : NULL; e; e = e->next) {
    char *tag = kf_json_dup_string(e, "tag"), *name = kf_json_dup_string(e, "name");
    char *hash = kf_json_dup_string(e, "hash"), *value = kf_json_dup_string(e, "value");
    if (tag && name)
      kf_entry_meta_add_input(m, tag, name, hash ? hash : "", value);
    free(tag);
    free(name);
    free(hash);
    free(value);
  }
}

/* Reads dir/meta.json. Returns 0, -1 when it cannot be read (errno set) or
 * -2 when it is not a JSON object. */
static int load_meta_at(const char *dir, kf_entry_meta *m) {
  memset(m, 0, sizeof *m);
  char *mp = kf_path_join(dir, "meta.json");
  size_t len;
  char *text = kf_read_file(mp, &len);
  int e = errno;
  free(mp);
  if (!text) {
    errno = e;
    return -1;
  }
  cJSON *o = cJSON_ParseWithLength(text, len);
  free(text);
  if (!cJSON_IsObject(o)) {
    cJSON_Delete(o);
    return -2;
  }
  take_meta(o, m);
  cJSON_Delete(o);
  return 0;
}

int kf_entry_meta_load(const kf_cache *c, const char *key, kf_entry_meta *m) {
  if (!valid_key(key)) {
    memset(m, 0, sizeof *m);
    return -1;
  }
  char *dir = kf_cache_entry_dir(c, key);
  int r = load_meta_at(dir, m);
  free(dir);
  return r == 0 ? 0 : -1;
}

/* ---- checking ---- */

/* Checks the object named by a well-formed meta m against its checksum and
 * size. Returns NULL or why it does not match (caller frees). */
static char *check_object(const char *dir, const kf_entry_meta *m) {
  char *op = kf_path_join(dir, m->object);
  size_t olen;
  char *bytes = kf_read_file(op, &olen);
  free(op);
  if (!bytes)
    return kf_xasprintf("%s is missing", m->object);
  char hex[33];
  kf_hash128_hex(bytes, olen, hex);
  free(bytes);
  if ((long long)olen != m->size)
    return kf_xasprintf("%s has %zu bytes, meta.json says %lld", m->object, olen, m->size);
  if (strcmp(hex, m->checksum) != 0)
    return kf_xasprintf("%s checksum %s does not match meta.json's %s", m->object, hex,
                        m->checksum);
  return NULL;
}

/* Why key's entry in dir is not good, or NULL when it is; *missing is set
 * when there is no entry at all. */
static char *check_entry_at(const char *dir, const char *key, kf_entry_meta *m, int *missing) {
  int r = load_meta_at(dir, m);
  if (r == -1 && errno == ENOENT && !kf_path_exists(dir)) {
    *missing = 1;
    return NULL;
  }
  if (r == -1)
    return kf_xstrdup("meta.json is missing or unreadable");
  if (r == -2 || !m->object || !m->checksum || !m->has_size || !m->key || strchr(m->object, '/'))
    return kf_xstrdup("meta.json is damaged");
  if (strcmp(m->key, key) != 0)
    return kf_xasprintf("meta.json belongs to key %s", m->key);
  return check_object(dir, m);
}

int kf_cache_check_entry(const kf_cache *c, const char *key, kf_entry_meta *meta, char **why) {
  if (meta)
    memset(meta, 0, sizeof *meta);
  if (why)
    *why = NULL;
  if (!valid_key(key)) { /* e.g. from a hand-edited manifest: never a path */
    if (why)
      *why = kf_xstrdup("not a key (32 hex digits)");
    return KF_ENTRY_DAMAGED;
  }
  char *dir = kf_cache_entry_dir(c, key);
  kf_entry_meta m;
  int missing = 0;
  char *bad = check_entry_at(dir, key, &m, &missing);
  free(dir);
  int state = missing ? KF_ENTRY_MISSING : bad ? KF_ENTRY_DAMAGED : KF_ENTRY_OK;
  if (state == KF_ENTRY_OK && meta)
    *meta = m;
  else
    kf_entry_meta_free(&m);
  if (why)
    *why = bad;
  else
    free(bad);
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

/* Every regular file of a finished entry reaches the disk before the rename
 * that publishes it: a crash then leaves the old state or a whole entry,
 * never a published entry with an empty object. */
static void fsync_files(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  if (!d)
    return;
  while ((e = readdir(d))) {
    int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
      continue;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
      fsync(fd);
    close(fd);
  }
  closedir(d);
}

static int publish(const kf_cache *c, const char *key, const char *tmpdir, int sync) {
  char *dir = kf_cache_entry_dir(c, key);
  char *parent = kf_path_dirname(dir);
  if (kf_mkdir_p(parent) != 0) {
    free(dir);
    free(parent);
    return -1;
  }
  if (kf_path_exists(dir))
    move_to_trash(c, key, dir);
  if (sync) {
    fsync_files(tmpdir);
    kf_fsync_dir(tmpdir);
  }
  int r = rename(tmpdir, dir);
  if (r == 0 && sync)
    kf_fsync_dir(parent);
  free(dir);
  free(parent);
  return r;
}

int kf_cache_publish(const kf_cache *c, const char *key, const char *tmpdir) {
  return publish(c, key, tmpdir, 1);
}

int kf_cache_publish_synced(const kf_cache *c, const char *key, const char *tmpdir) {
  return publish(c, key, tmpdir, 0);
}

int kf_cache_sync(const kf_cache *c) {
  int fd = open(c->v1, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  int r = syncfs(fd);
  int e = errno;
  close(fd);
  errno = e;
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
