/* Tests of gen/cache.c: entries published whole and checked against their
 * meta.json (MISSING / OK / DAMAGED with a reason), key locks that no dead
 * process can leave behind, and the removal of dead builders' leftovers
 * (docs/contracts.md, "Cache layout"). */
#include "gen_fixture.h"

#include "cache.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

static const char *const KEY_A = "0123456789abcdef0123456789abcdef";
static const char *const KEY_B = "ab23456789abcdef0123456789abcdef";
static const char *const KEY_C = "5523456789abcdef0123456789abcdef";

static kf_cache new_cache(void) {
  const char *root = fx_tmpdir();
  char *dir = fx_path(root, "cache");
  kf_cache c;
  kf_cache_init(&c, dir);
  free(dir);
  char *err = NULL;
  if (kf_cache_prepare(&c, &err) != 0)
    fx_die("prepare: %s", err);
  return c;
}

/* Writes an entry for key whose object holds bytes and publishes it under
 * the key's lock, as a builder does. Returns 0 or -1. */
static int publish(const kf_cache *c, const char *key, const char *bytes) {
  char *tmp = kf_cache_tmpdir(c, key);
  if (!tmp)
    return -1;
  fx_write_free(tmp, "object.cubin", bytes);
  char sum[33];
  kf_hash128_hex(bytes, strlen(bytes), sum);
  char *meta = kf_xasprintf("{\"format\": 1, \"key\": \"%s\", \"kernel_id\": \"m/k/w1/sm_90a\", "
                            "\"object\": \"object.cubin\", \"checksum\": \"%s\", \"size\": %zu}\n",
                            key, sum, strlen(bytes));
  fx_write_free(tmp, "meta.json", meta);
  free(meta);
  int fd = kf_cache_lock(c, key);
  int r = fd >= 0 ? kf_cache_publish(c, key, tmp) : -1;
  kf_cache_unlock(fd);
  free(tmp);
  return r;
}

static char *entry_file(const kf_cache *c, const char *key, const char *name) {
  char *dir = kf_cache_entry_dir(c, key);
  char *p = kf_path_join(dir, name);
  free(dir);
  return p;
}

static int check(const kf_cache *c, const char *key, char **why) {
  return kf_cache_check_entry(c, key, NULL, why);
}

static int dir_is_empty(const char *path) {
  DIR *d = opendir(path);
  if (!d)
    return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    n += e->d_name[0] != '.';
  closedir(d);
  return n == 0;
}

KF_TEST(cache__published_entry_checks_ok) {
  kf_cache c = new_cache();
  KF_CHECK(publish(&c, KEY_A, "CUBIN-BYTES") == 0);
  kf_entry_meta meta;
  char *why = NULL;
  KF_CHECK(kf_cache_check_entry(&c, KEY_A, &meta, &why) == KF_ENTRY_OK);
  KF_CHECK(why == NULL);
  KF_CHECK_STR_EQ(meta.key, KEY_A);
  KF_CHECK_STR_EQ(meta.kernel_id, "m/k/w1/sm_90a");
  KF_CHECK(meta.has_size && meta.size == 11);
  kf_entry_meta_free(&meta);
  char *dir = kf_cache_entry_dir(&c, KEY_A);
  char *want = kf_xasprintf("%s/objects/01/%s", c.v1, KEY_A);
  KF_CHECK_STR_EQ(dir, want);
  free(want);
  free(dir);
  char *tmpdir = fx_path(c.v1, "tmp");
  KF_CHECK(dir_is_empty(tmpdir)); /* the build directory became the entry */
  free(tmpdir);
  kf_cache_free(&c);
}

KF_TEST(cache__missing_entry_is_missing) {
  kf_cache c = new_cache();
  char *why = NULL;
  KF_CHECK(check(&c, KEY_A, &why) == KF_ENTRY_MISSING);
  KF_CHECK(why == NULL);
  kf_cache_free(&c);
}

KF_TEST(cache__flipped_object_byte_is_damaged_with_a_reason) {
  kf_cache c = new_cache();
  KF_CHECK(publish(&c, KEY_A, "CUBIN-BYTES") == 0);
  char *obj = entry_file(&c, KEY_A, "object.cubin");
  fx_write_free("/", obj, "CUBIN-BYTEZ"); /* same size */
  char *why = NULL;
  KF_CHECK(check(&c, KEY_A, &why) == KF_ENTRY_DAMAGED);
  KF_CHECK_CONTAINS(why, "object.cubin checksum ");
  KF_CHECK_CONTAINS(why, "does not match meta.json's ");
  free(why);
  free(obj);
  kf_cache_free(&c);
}

KF_TEST(cache__truncated_object_is_damaged_with_its_size) {
  kf_cache c = new_cache();
  KF_CHECK(publish(&c, KEY_A, "CUBIN-BYTES") == 0);
  char *obj = entry_file(&c, KEY_A, "object.cubin");
  KF_CHECK(truncate(obj, 5) == 0);
  char *why = NULL;
  KF_CHECK(check(&c, KEY_A, &why) == KF_ENTRY_DAMAGED);
  KF_CHECK_STR_EQ(why, "object.cubin has 5 bytes, meta.json says 11");
  free(why);
  free(obj);
  kf_cache_free(&c);
}

KF_TEST(cache__missing_object_is_damaged) {
  kf_cache c = new_cache();
  KF_CHECK(publish(&c, KEY_A, "CUBIN-BYTES") == 0);
  char *obj = entry_file(&c, KEY_A, "object.cubin");
  KF_CHECK(unlink(obj) == 0);
  char *why = NULL;
  KF_CHECK(check(&c, KEY_A, &why) == KF_ENTRY_DAMAGED);
  KF_CHECK_STR_EQ(why, "object.cubin is missing");
  free(why);
  free(obj);
  kf_cache_free(&c);
}

KF_TEST(cache__missing_or_unparseable_meta_is_damaged) {
  kf_cache c = new_cache();
  KF_CHECK(publish(&c, KEY_A, "CUBIN-BYTES") == 0);
  char *meta = entry_file(&c, KEY_A, "meta.json");
  fx_write_free("/", meta, "{\"key\": ");
  char *why = NULL;
  KF_CHECK(check(&c, KEY_A, &why) == KF_ENTRY_DAMAGED);
  KF_CHECK_STR_EQ(why, "meta.json is damaged");
  free(why);
  KF_CHECK(unlink(meta) == 0);
  KF_CHECK(check(&c, KEY_A, &why) == KF_ENTRY_DAMAGED); /* the directory is still there */
  KF_CHECK_STR_EQ(why, "meta.json is missing or unreadable");
  free(why);
  free(meta);
  kf_cache_free(&c);
}

/* an entry moved or copied under another key is not that key's entry */
KF_TEST(cache__meta_of_another_key_is_damaged) {
  kf_cache c = new_cache();
  KF_CHECK(publish(&c, KEY_A, "CUBIN-BYTES") == 0);
  char *a = kf_cache_entry_dir(&c, KEY_A);
  char *b = kf_cache_entry_dir(&c, KEY_B);
  char *b_parent = kf_path_dirname(b);
  KF_CHECK(kf_mkdir_p(b_parent) == 0);
  KF_CHECK(rename(a, b) == 0);
  char *why = NULL;
  KF_CHECK(check(&c, KEY_B, &why) == KF_ENTRY_DAMAGED);
  char *want = kf_xasprintf("meta.json belongs to key %s", KEY_A);
  KF_CHECK_STR_EQ(why, want);
  KF_CHECK(check(&c, KEY_A, NULL) == KF_ENTRY_MISSING);
  free(want);
  free(why);
  free(b_parent);
  free(a);
  free(b);
  kf_cache_free(&c);
}

KF_TEST(cache__meta_object_name_cannot_leave_the_entry) {
  kf_cache c = new_cache();
  KF_CHECK(publish(&c, KEY_A, "CUBIN-BYTES") == 0);
  char *meta = entry_file(&c, KEY_A, "meta.json");
  char *text = kf_xasprintf("{\"key\": \"%s\", \"object\": \"../../../x\", \"checksum\": "
                            "\"00\", \"size\": 1}",
                            KEY_A);
  fx_write_free("/", meta, text);
  KF_CHECK(check(&c, KEY_A, NULL) == KF_ENTRY_DAMAGED);
  free(text);
  free(meta);
  kf_cache_free(&c);
}

KF_TEST(cache__publish_replaces_a_damaged_entry) {
  kf_cache c = new_cache();
  KF_CHECK(publish(&c, KEY_A, "OLD-BYTES") == 0);
  char *obj = entry_file(&c, KEY_A, "object.cubin");
  fx_write_free("/", obj, "OLD-BYTEZ");
  KF_CHECK(check(&c, KEY_A, NULL) == KF_ENTRY_DAMAGED);
  KF_CHECK(publish(&c, KEY_A, "NEW-BYTES!") == 0);
  KF_CHECK(check(&c, KEY_A, NULL) == KF_ENTRY_OK);
  char *bytes = fx_read(obj);
  KF_CHECK_STR_EQ(bytes, "NEW-BYTES!");
  free(bytes);
  char *tmpdir = fx_path(c.v1, "tmp");
  KF_CHECK(dir_is_empty(tmpdir)); /* the old entry went through trash and is gone */
  free(tmpdir);
  free(obj);
  kf_cache_free(&c);
}

KF_TEST(cache__remove_entry_makes_it_missing) {
  kf_cache c = new_cache();
  KF_CHECK(publish(&c, KEY_A, "BYTES") == 0);
  KF_CHECK(kf_cache_remove_entry(&c, KEY_A) == 0);
  KF_CHECK(check(&c, KEY_A, NULL) == KF_ENTRY_MISSING);
  KF_CHECK(kf_cache_remove_entry(&c, KEY_A) == 0); /* already gone is fine */
  kf_cache_free(&c);
}

static void collect(const char *s, void *ctx) { kf_strv_push(ctx, s); }

KF_TEST(cache__each_entry_visits_valid_keys_in_order) {
  kf_cache c = new_cache();
  KF_CHECK(publish(&c, KEY_B, "b") == 0);
  KF_CHECK(publish(&c, KEY_A, "a") == 0);
  KF_CHECK(publish(&c, KEY_C, "c") == 0);
  char *junk = fx_path(c.v1, "objects/zz/not-a-key");
  KF_CHECK(kf_mkdir_p(junk) == 0);
  free(junk);
  kf_strv keys = {0};
  kf_cache_each_entry(&c, collect, &keys);
  KF_CHECK(keys.n == 3);
  KF_CHECK_STR_EQ(keys.v[0], KEY_A);
  KF_CHECK_STR_EQ(keys.v[1], KEY_C);
  KF_CHECK_STR_EQ(keys.v[2], KEY_B);
  kf_strv_free(&keys);
  kf_cache_free(&c);
}

KF_TEST(cache__each_manifest_visits_json_files_in_order) {
  kf_cache c = new_cache();
  char *p;
  fx_write_free(c.v1, "manifests/zeta/sm_90a.json", "{}");
  fx_write_free(c.v1, "manifests/alpha/sm_90a.json", "{}");
  fx_write_free(c.v1, "manifests/alpha/gfx942.json", "{}");
  fx_write_free(c.v1, "manifests/alpha/notes.txt", "x");
  kf_strv paths = {0};
  kf_cache_each_manifest(&c, collect, &paths);
  KF_CHECK(paths.n == 3);
  KF_CHECK_STR_EQ(paths.v[0], p = kf_cache_manifest_path(&c, "alpha", "gfx942"));
  free(p);
  KF_CHECK_STR_EQ(paths.v[1], p = kf_cache_manifest_path(&c, "alpha", "sm_90a"));
  free(p);
  KF_CHECK_STR_EQ(paths.v[2], p = kf_cache_manifest_path(&c, "zeta", "sm_90a"));
  free(p);
  kf_strv_free(&paths);
  kf_cache_free(&c);
}

/* ---- meta.json ---- */

static kf_entry_meta sample_meta(void) {
  kf_entry_meta m = {0};
  m.key = (char *)KEY_A;
  m.kernel_id = "m/k/w1/sm_90a";
  m.object = "object.cubin";
  m.checksum = "00112233445566778899aabbccddeeff";
  m.size = 11;
  kf_strv_push(&m.command, "nvcc");
  kf_strv_push(&m.command, "-O3");
  m.compiler_output = "ptxas info";
  m.compile_seconds = 1.25;
  m.resources = (kf_meta_resources){32, 0, 4, 2, 512, -1, -1, -1, -1}; /* NVIDIA: no AMD figures */
  kf_entry_meta_add_input(&m, "file", "kf/x.cuh", "0123456789abcdef", NULL);
  kf_entry_meta_add_input(&m, "arg", "3", "fedcba9876543210", "-O3");
  return m;
}

static void free_sample(kf_entry_meta *m) {
  kf_strv_free(&m->command);
  kf_entry_meta input_only = {.inputs = m->inputs, .ninputs = m->ninputs};
  kf_entry_meta_free(&input_only);
}

/* the bytes every reader of meta.json (and older kforge) expects */
KF_TEST(cache__meta_is_written_in_its_documented_shape) {
  const char *dir = fx_tmpdir();
  kf_entry_meta m = sample_meta();
  KF_CHECK(kf_entry_meta_write(dir, &m) == 0);
  free_sample(&m);
  char *path = fx_path(dir, "meta.json");
  char *text = fx_read(path);
  free(path);
  KF_CHECK_STR_EQ(text, "{\n"
                        "\t\"format\":\t1,\n"
                        "\t\"key\":\t\"0123456789abcdef0123456789abcdef\",\n"
                        "\t\"kernel_id\":\t\"m/k/w1/sm_90a\",\n"
                        "\t\"object\":\t\"object.cubin\",\n"
                        "\t\"checksum\":\t\"00112233445566778899aabbccddeeff\",\n"
                        "\t\"size\":\t11,\n"
                        "\t\"command\":\t[\"nvcc\", \"-O3\"],\n"
                        "\t\"compiler_output\":\t\"ptxas info\",\n"
                        "\t\"compile_seconds\":\t1.25,\n"
                        "\t\"resources\":\t{\n"
                        "\t\t\"registers\":\t32,\n"
                        "\t\t\"stack_bytes\":\t0,\n"
                        "\t\t\"spill_stores\":\t4,\n"
                        "\t\t\"spill_loads\":\t2,\n"
                        "\t\t\"shared_bytes\":\t512\n"
                        "\t},\n"
                        "\t\"inputs\":\t[{\n"
                        "\t\t\t\"tag\":\t\"file\",\n"
                        "\t\t\t\"name\":\t\"kf/x.cuh\",\n"
                        "\t\t\t\"hash\":\t\"0123456789abcdef\"\n"
                        "\t\t}, {\n"
                        "\t\t\t\"tag\":\t\"arg\",\n"
                        "\t\t\t\"name\":\t\"3\",\n"
                        "\t\t\t\"hash\":\t\"fedcba9876543210\",\n"
                        "\t\t\t\"value\":\t\"-O3\"\n"
                        "\t\t}]\n"
                        "}");
  free(text);
}

KF_TEST(cache__meta_load_reads_back_what_was_written) {
  kf_cache c = new_cache();
  char *dir = kf_cache_entry_dir(&c, KEY_A);
  KF_CHECK(kf_mkdir_p(dir) == 0);
  kf_entry_meta m = sample_meta();
  KF_CHECK(kf_entry_meta_write(dir, &m) == 0);
  free_sample(&m);
  kf_entry_meta got;
  KF_CHECK(kf_entry_meta_load(&c, KEY_A, &got) == 0);
  KF_CHECK_STR_EQ(got.key, KEY_A);
  KF_CHECK_STR_EQ(got.object, "object.cubin");
  KF_CHECK(got.command.n == 2);
  KF_CHECK(got.compile_seconds == 1.25);
  KF_CHECK(got.resources.registers == 32 && got.resources.spill_stores == 4);
  KF_CHECK(got.ninputs == 2);
  KF_CHECK(got.inputs[0].value == NULL);
  KF_CHECK_STR_EQ(got.inputs[1].value, "-O3");
  kf_entry_meta_free(&got);
  /* an unreadable one reports failure and leaves nothing to misuse */
  KF_CHECK(kf_entry_meta_load(&c, KEY_B, &got) == -1);
  KF_CHECK(got.kernel_id == NULL && got.ninputs == 0);
  kf_entry_meta_free(&got);
  free(dir);
  kf_cache_free(&c);
}

KF_TEST(cache__meta_load_keeps_what_a_damaged_meta_still_says) {
  kf_cache c = new_cache();
  char *dir = kf_cache_entry_dir(&c, KEY_A);
  fx_write_free(dir, "meta.json", "{\"kernel_id\": \"m/k/w1/sm_90a\", \"size\": \"x\"}");
  kf_entry_meta got;
  KF_CHECK(kf_entry_meta_load(&c, KEY_A, &got) == 0);
  KF_CHECK_STR_EQ(got.kernel_id, "m/k/w1/sm_90a");
  KF_CHECK(!got.has_size && got.object == NULL);
  KF_CHECK(got.resources.registers == -1);
  kf_entry_meta_free(&got);
  KF_CHECK(check(&c, KEY_A, NULL) == KF_ENTRY_DAMAGED);
  free(dir);
  kf_cache_free(&c);
}

/* ---- locks ---- */

/* Forks a child that takes key's lock, says so through a pipe and waits to
 * be killed. Returns its pid once it holds the lock, or -1. */
static pid_t hold_lock_in_child(const kf_cache *c, const char *key) {
  int p[2];
  if (pipe(p) != 0)
    return -1;
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    close(p[0]);
    int fd = kf_cache_lock(c, key);
    char ok = fd >= 0 ? 'L' : 'E';
    if (write(p[1], &ok, 1) != 1)
      _exit(1);
    for (;;)
      pause();
  }
  close(p[1]);
  char got = 0;
  ssize_t n = read(p[0], &got, 1);
  close(p[0]);
  if (n != 1 || got != 'L') {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
  }
  return pid;
}

static void kill_child(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

KF_TEST(cache__lock_is_exclusive_across_processes_and_dies_with_its_holder) {
  kf_cache c = new_cache();
  pid_t child = hold_lock_in_child(&c, KEY_A);
  KF_CHECK(child > 0);
  errno = 0;
  int fd = kf_cache_trylock(&c, KEY_A);
  int e = errno;
  int other = kf_cache_trylock(&c, KEY_B); /* other keys are not blocked */
  kill_child(child);
  KF_CHECK(fd == -1);
  KF_CHECK(e == EWOULDBLOCK);
  KF_CHECK(other >= 0);
  kf_cache_unlock(other);
  /* SIGKILL gives no chance to clean up; the lock is free all the same */
  fd = kf_cache_trylock(&c, KEY_A);
  KF_CHECK(fd >= 0);
  kf_cache_unlock(fd);
  kf_cache_free(&c);
}

KF_TEST(cache__lock_is_released_by_unlock) {
  kf_cache c = new_cache();
  int fd = kf_cache_lock(&c, KEY_A);
  KF_CHECK(fd >= 0);
  int again = kf_cache_trylock(&c, KEY_A); /* another open file: excluded too */
  KF_CHECK(again == -1);
  kf_cache_unlock(fd);
  again = kf_cache_trylock(&c, KEY_A);
  KF_CHECK(again >= 0);
  kf_cache_unlock(again);
  kf_cache_free(&c);
}

KF_TEST(cache__prepare_removes_dead_builders_leftovers_but_not_a_live_builders) {
  kf_cache c = new_cache();
  char *dead = kf_cache_tmpdir(&c, KEY_A);
  char *live = kf_cache_tmpdir(&c, KEY_B);
  KF_CHECK(dead && live);
  fx_write_free(dead, "object.cubin", "partial");
  fx_write_free(live, "object.cubin", "in progress");
  char *trash = fx_path(c.v1, "tmp/trash.abc123");
  fx_write_free(trash, "entry/meta.json", "{}");
  char *other = fx_path(c.v1, "tmp/not-a-builder");
  KF_CHECK(kf_mkdir_p(other) == 0);
  pid_t child = hold_lock_in_child(&c, KEY_B);
  KF_CHECK(child > 0);
  char *err = NULL;
  int r = kf_cache_prepare(&c, &err);
  int dead_gone = !kf_path_exists(dead), live_kept = kf_path_exists(live);
  int trash_gone = !kf_path_exists(trash), other_kept = kf_path_exists(other);
  kill_child(child);
  KF_CHECK(r == 0);
  KF_CHECK(dead_gone);
  KF_CHECK(live_kept);
  KF_CHECK(trash_gone);
  KF_CHECK(other_kept); /* not ours to judge */
  /* once its builder is dead, its directory is a leftover too */
  KF_CHECK(kf_cache_prepare(&c, &err) == 0);
  KF_CHECK(!kf_path_exists(live));
  free(dead);
  free(live);
  free(trash);
  free(other);
  kf_cache_free(&c);
}

KF_TEST(cache__prepare_creates_the_layout) {
  kf_cache c = new_cache();
  const char *subdirs[] = {"objects", "manifests", "locks", "tmp", "deps"};
  for (int i = 0; i < 5; i++) {
    char *p = fx_path(c.v1, subdirs[i]);
    struct stat st;
    KF_CHECK(stat(p, &st) == 0 && S_ISDIR(st.st_mode));
    free(p);
  }
  kf_cache_free(&c);
}

KF_TEST(cache__prepare_reports_an_unwritable_cache) {
  const char *root = fx_tmpdir();
  char *file = fx_write(root, "a-file", "x");
  char *dir = fx_path(file, "cache"); /* below a regular file */
  kf_cache c;
  kf_cache_init(&c, dir);
  char *err = NULL;
  KF_CHECK(kf_cache_prepare(&c, &err) == -1);
  KF_CHECK_CONTAINS(err, "cannot create ");
  KF_CHECK_CONTAINS(err, "Not a directory");
  free(err);
  kf_cache_free(&c);
  free(dir);
  free(file);
}

KF_TEST(cache__init_takes_the_option_then_the_environment_then_cwd) {
  const char *root = fx_tmpdir();
  KF_CHECK(chdir(root) == 0);
  setenv("KFORGE_CACHE_DIR", "/env/cache", 1);
  kf_cache c;
  kf_cache_init(&c, "given/../given2");
  char *want = kf_xasprintf("%s/given2", root);
  KF_CHECK_STR_EQ(c.root, want);
  free(want);
  want = kf_xasprintf("%s/given2/v1", root);
  KF_CHECK_STR_EQ(c.v1, want);
  free(want);
  kf_cache_free(&c);
  kf_cache_init(&c, NULL);
  KF_CHECK_STR_EQ(c.root, "/env/cache");
  kf_cache_free(&c);
  unsetenv("KFORGE_CACHE_DIR");
  kf_cache_init(&c, NULL);
  want = kf_xasprintf("%s/cache", root);
  KF_CHECK_STR_EQ(c.root, want);
  free(want);
  kf_cache_free(&c);
}

KF_TEST(cache__manifest_path_follows_the_layout) {
  kf_cache c;
  kf_cache_init(&c, "/c");
  char *p = kf_cache_manifest_path(&c, "qwen3-0.6b", "sm_90a");
  KF_CHECK_STR_EQ(p, "/c/v1/manifests/qwen3-0.6b/sm_90a.json");
  free(p);
  kf_cache_free(&c);
}

KF_TEST_MAIN()
