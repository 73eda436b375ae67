/* Tests of gen/util.c: atomic file replacement, write-if-changed, lexical
 * path handling, size parsing and process spawning. */
#include "gen_fixture.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

static void set_mtime(const char *path, time_t sec) {
  struct timespec ts[2] = {{sec, 0}, {sec, 0}};
  if (utimensat(AT_FDCWD, path, ts, 0) != 0)
    fx_die("utimensat %s: %s", path, strerror(errno));
}

/* Number of entries in dir (without "." and ".."). */
static int dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    fx_die("opendir %s: %s", dir, strerror(errno));
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(d);
  return n;
}

/* ---- reading ---- */

KF_TEST(util__read_file_refuses_what_is_not_a_regular_file_without_blocking) {
  const char *dir = fx_tmpdir();
  char *fifo = kf_path_join(dir, "fifo");
  KF_CHECK(mkfifo(fifo, 0600) == 0);
  /* a blocking open of a FIFO with no writer would hang here */
  KF_CHECK(kf_read_file(fifo, NULL) == NULL && errno == EINVAL);
  KF_CHECK_STR_EQ(kf_read_error(EINVAL), "not a regular file");
  KF_CHECK(kf_read_file("/dev/zero", NULL) == NULL && errno == EINVAL);
  KF_CHECK(kf_read_file(dir, NULL) == NULL && errno == EISDIR);
  free(fifo);
}

KF_TEST(util__read_file_refuses_a_file_over_the_limit) {
  const char *dir = fx_tmpdir();
  char *big = kf_path_join(dir, "big.json");
  int fd = open(big, O_CREAT | O_WRONLY, 0600);
  KF_CHECK(fd >= 0 && ftruncate(fd, (off_t)KF_READ_MAX + 1) == 0); /* sparse */
  close(fd);
  KF_CHECK(kf_read_file(big, NULL) == NULL && errno == EFBIG);
  KF_CHECK_CONTAINS(kf_read_error(EFBIG), "larger than kforge reads (256 MiB)");
  fd = open(big, O_WRONLY | O_TRUNC);
  KF_CHECK(fd >= 0 && write(fd, "{}", 2) == 2);
  close(fd);
  size_t n = 0;
  char *text = kf_read_file(big, &n);
  KF_CHECK(text && n == 2 && !strcmp(text, "{}"));
  free(text);
  free(big);
}

/* ---- atomic writes ---- */

KF_TEST(util__atomic_write_replaces_content) {
  const char *dir = fx_tmpdir();
  char *p = fx_write(dir, "f.txt", "old");
  KF_CHECK(kf_write_file_atomic(p, "new content", 11) == 0);
  char *text = fx_read(p);
  KF_CHECK_STR_EQ(text, "new content");
  KF_CHECK(dir_entries(dir) == 1); /* no temporary left beside it */
  free(text);
  free(p);
}

/* The target is a directory: rename fails, nothing is replaced and the
 * temporary is removed. */
KF_TEST(util__atomic_write_fails_over_a_directory_and_leaves_no_temporary) {
  const char *dir = fx_tmpdir();
  fx_write_free(dir, "target/inside.txt", "keep");
  char *p = fx_path(dir, "target");
  errno = 0;
  KF_CHECK(kf_write_file_atomic(p, "new", 3) == -1);
  KF_CHECK(errno != 0);
  char *inside = fx_path(p, "inside.txt");
  char *text = fx_read(inside);
  KF_CHECK_STR_EQ(text, "keep");
  KF_CHECK(dir_entries(dir) == 1);
  free(text);
  free(inside);
  free(p);
}

/* Two writers of one file (two containers sharing a cache can have the same
 * pid) must not write through each other's temporary: a file already at a
 * temporary name is someone else's. */
KF_TEST(util__atomic_write_does_not_clobber_a_temporary_it_did_not_create) {
  const char *dir = fx_tmpdir();
  char *p = fx_write(dir, "manifest.json", "old");
  char *theirs = kf_xasprintf("%s.tmp.%ld", p, (long)getpid());
  fx_write_free("/", theirs, "another writer's half-written bytes");
  KF_CHECK(kf_write_file_atomic(p, "mine", 4) == 0);
  char *text = fx_read(p);
  KF_CHECK_STR_EQ(text, "mine");
  free(text);
  text = fx_read(theirs);
  KF_CHECK_STR_EQ(text, "another writer's half-written bytes");
  free(text);
  free(theirs);
  free(p);
}

/* A path below a regular file cannot be written: -1 with ENOTDIR, and the
 * regular file is untouched. */
KF_TEST(util__atomic_write_fails_below_a_regular_file) {
  const char *dir = fx_tmpdir();
  char *f = fx_write(dir, "plain", "keep me");
  char *p = kf_xasprintf("%s/sub.txt", f);
  errno = 0;
  KF_CHECK(kf_write_file_atomic(p, "x", 1) == -1);
  KF_CHECK(errno == ENOTDIR);
  char *text = fx_read(f);
  KF_CHECK_STR_EQ(text, "keep me");
  free(text);
  free(p);
  free(f);
}

/* write(2) itself fails half-way (file size limit): the old file keeps its
 * bytes and the partial temporary is removed. Runs in a child because the
 * limit is per process. */
KF_TEST(util__atomic_write_keeps_old_file_when_write_fails) {
  const char *dir = fx_tmpdir();
  char *p = fx_write(dir, "f.txt", "old bytes");
  size_t big = 1 << 20;
  char *data = kf_xmalloc(big);
  memset(data, 'x', big);
  pid_t pid = fork();
  KF_CHECK(pid >= 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {4096, 4096};
    setrlimit(RLIMIT_FSIZE, &rl);
    errno = 0;
    int r = kf_write_file_atomic(p, data, big);
    _exit(r == -1 && errno == EFBIG ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  KF_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char *text = fx_read(p);
  KF_CHECK_STR_EQ(text, "old bytes");
  KF_CHECK(dir_entries(dir) == 1);
  free(text);
  free(data);
  free(p);
}

KF_TEST(util__write_if_changed_does_not_rewrite_identical_bytes) {
  const char *dir = fx_tmpdir();
  char *p = fx_write(dir, "f.cu", "same bytes");
  set_mtime(p, 1000000000);
  struct stat before, after;
  KF_CHECK(stat(p, &before) == 0);
  int changed = -1;
  KF_CHECK(kf_write_if_changed(p, "same bytes", 10, &changed) == 0);
  KF_CHECK(changed == 0);
  KF_CHECK(stat(p, &after) == 0);
  KF_CHECK(after.st_mtim.tv_sec == 1000000000 && after.st_mtim.tv_nsec == 0);
  KF_CHECK(after.st_ino == before.st_ino); /* not replaced either */
  free(p);
}

KF_TEST(util__write_if_changed_rewrites_different_bytes) {
  const char *dir = fx_tmpdir();
  char *p = fx_write(dir, "f.cu", "same bytes");
  set_mtime(p, 1000000000);
  int changed = -1;
  /* same length, one byte differs */
  KF_CHECK(kf_write_if_changed(p, "same bytez", 10, &changed) == 0);
  KF_CHECK(changed == 1);
  char *text = fx_read(p);
  KF_CHECK_STR_EQ(text, "same bytez");
  struct stat st;
  KF_CHECK(stat(p, &st) == 0);
  KF_CHECK(st.st_mtim.tv_sec != 1000000000);
  free(text);
  /* a prefix of the old content is a change too */
  KF_CHECK(kf_write_if_changed(p, "same", 4, &changed) == 0);
  KF_CHECK(changed == 1);
  text = fx_read(p);
  KF_CHECK_STR_EQ(text, "same");
  free(text);
  free(p);
}

KF_TEST(util__write_if_changed_creates_a_missing_file) {
  const char *dir = fx_tmpdir();
  char *p = fx_path(dir, "new.cu");
  int changed = -1;
  KF_CHECK(kf_write_if_changed(p, "abc", 3, &changed) == 0);
  KF_CHECK(changed == 1);
  char *text = fx_read(p);
  KF_CHECK_STR_EQ(text, "abc");
  free(text);
  free(p);
}

KF_TEST(util__mkdir_p_creates_nested_and_fails_over_a_file) {
  const char *dir = fx_tmpdir();
  char *deep = fx_path(dir, "a/b/c");
  KF_CHECK(kf_mkdir_p(deep) == 0);
  struct stat st;
  KF_CHECK(stat(deep, &st) == 0 && S_ISDIR(st.st_mode));
  KF_CHECK(kf_mkdir_p(deep) == 0); /* existing is fine */
  char *f = fx_write(dir, "file", "x");
  errno = 0;
  KF_CHECK(kf_mkdir_p(f) == -1);
  KF_CHECK(errno == ENOTDIR || errno == EEXIST);
  char *below = fx_path(f, "sub");
  KF_CHECK(kf_mkdir_p(below) == -1);
  free(below);
  free(f);
  free(deep);
}

KF_TEST(util__mkdir_p_of_an_empty_path_fails) {
  errno = 0;
  KF_CHECK(kf_mkdir_p("") == -1);
  KF_CHECK(errno == ENOENT);
}

KF_TEST(util__remove_tree_removes_nested_and_tolerates_missing) {
  const char *dir = fx_tmpdir();
  fx_write_free(dir, "t/a/b/c.txt", "x");
  fx_write_free(dir, "t/d.txt", "y");
  char *t = fx_path(dir, "t");
  KF_CHECK(kf_remove_tree(t) == 0);
  KF_CHECK(!kf_path_exists(t));
  KF_CHECK(kf_remove_tree(t) == 0);
  free(t);
}

/* ---- paths ---- */

static int absolute_is(const char *in, const char *want) {
  char *got = kf_path_absolute(in);
  int ok = !strcmp(got, want);
  if (!ok)
    fprintf(stderr, "kf_path_absolute(\"%s\") = \"%s\", want \"%s\"\n", in, got, want);
  free(got);
  return ok;
}

KF_TEST(util__path_absolute_normalises_lexically) {
  KF_CHECK(absolute_is("/a/./b//c/../d", "/a/b/d"));
  KF_CHECK(absolute_is("/a/b/", "/a/b"));
  KF_CHECK(absolute_is("/a/b/..", "/a"));
  KF_CHECK(absolute_is("/a/..", "/"));
  KF_CHECK(absolute_is("/..", "/"));
  KF_CHECK(absolute_is("/../x", "/x"));
  KF_CHECK(absolute_is("/", "/"));
  KF_CHECK(absolute_is("//a///b", "/a/b"));
  KF_CHECK(absolute_is("/a/..b/c", "/a/..b/c")); /* "..b" is a name */
  KF_CHECK(absolute_is("/a/.b", "/a/.b"));
}

KF_TEST(util__path_absolute_joins_relative_paths_to_cwd) {
  const char *dir = fx_tmpdir();
  KF_CHECK(chdir(dir) == 0);
  char *want = kf_xasprintf("%s/x/z", dir);
  KF_CHECK(absolute_is("x/y/../z", want));
  free(want);
  KF_CHECK(absolute_is(".", dir));
  char *parent = kf_path_dirname(dir);
  KF_CHECK(absolute_is("..", parent));
  free(parent);
}

/* a symlink is not resolved: the path stays as spelled */
KF_TEST(util__path_absolute_does_not_resolve_symlinks) {
  const char *dir = fx_tmpdir();
  char *target = fx_path(dir, "real");
  char *link = fx_path(dir, "link");
  KF_CHECK(mkdir(target, 0755) == 0);
  KF_CHECK(symlink(target, link) == 0);
  char *in = kf_xasprintf("%s/link/f", dir);
  KF_CHECK(absolute_is(in, in));
  free(in);
  free(link);
  free(target);
}

KF_TEST(util__path_under_needs_a_component_boundary) {
  KF_CHECK(kf_path_under("/a/bc", "/a/b") == NULL);
  KF_CHECK(kf_path_under("/a/b", "/a/b") == NULL); /* the dir itself is not inside */
  KF_CHECK(kf_path_under("/a", "/a/b") == NULL);
  KF_CHECK(kf_path_under("/x/b/c", "/a/b") == NULL);
  KF_CHECK_STR_EQ(kf_path_under("/a/b/c", "/a/b"), "c");
  KF_CHECK_STR_EQ(kf_path_under("/a/b/c/d.h", "/a/b"), "c/d.h");
  KF_CHECK_STR_EQ(kf_path_under("/a/b/c", "/a/b/"), "c");
  KF_CHECK_STR_EQ(kf_path_under("/a/b/c", "/"), "a/b/c");
}

KF_TEST(util__path_join_and_dirname) {
  char *s;
  KF_CHECK_STR_EQ(s = kf_path_join("a", "b"), "a/b");
  free(s);
  KF_CHECK_STR_EQ(s = kf_path_join("a/", "b"), "a/b");
  free(s);
  KF_CHECK_STR_EQ(s = kf_path_join("a", "/abs"), "/abs");
  free(s);
  KF_CHECK_STR_EQ(s = kf_path_join("", "b"), "b");
  free(s);
  KF_CHECK_STR_EQ(s = kf_path_dirname("a/b/c"), "a/b");
  free(s);
  KF_CHECK_STR_EQ(s = kf_path_dirname("c"), ".");
  free(s);
  KF_CHECK_STR_EQ(s = kf_path_dirname("/c"), "/");
  free(s);
}

/* ---- sizes ---- */

static int size_is(const char *in, uint64_t want) {
  uint64_t got = 12345;
  int r = kf_parse_size(in, &got);
  if (r != 0 || got != want) {
    fprintf(stderr, "kf_parse_size(\"%s\") = %d, %llu; want %llu\n", in, r, (unsigned long long)got,
            (unsigned long long)want);
    return 0;
  }
  return 1;
}

static int size_rejected(const char *in) {
  uint64_t got = 12345;
  int r = kf_parse_size(in, &got);
  if (r != -1)
    fprintf(stderr, "kf_parse_size(\"%s\") accepted: %llu\n", in, (unsigned long long)got);
  return r == -1;
}

KF_TEST(util__parse_size_accepts_bytes_and_binary_suffixes) {
  KF_CHECK(size_is("0", 0));
  KF_CHECK(size_is("1234", 1234));
  KF_CHECK(size_is("500M", 500ull << 20));
  KF_CHECK(size_is("500m", 500ull << 20));
  KF_CHECK(size_is("2G", 2ull << 30));
  KF_CHECK(size_is("2GB", 2ull << 30));
  KF_CHECK(size_is("1.5K", 1536));
  KF_CHECK(size_is("3T", 3ull << 40));
  KF_CHECK(size_is("10b", 10));
}

KF_TEST(util__parse_size_rejects_malformed_sizes) {
  KF_CHECK(size_rejected(""));
  KF_CHECK(size_rejected("M"));
  KF_CHECK(size_rejected("abc"));
  KF_CHECK(size_rejected("-1"));
  KF_CHECK(size_rejected("-1G"));
  KF_CHECK(size_rejected("5X"));
  KF_CHECK(size_rejected("5 M"));
  KF_CHECK(size_rejected("5MM"));
  KF_CHECK(size_rejected("5MB "));
}

/* `gc --max-size inf` must not turn into an undefined conversion (on x86 it
 * gives 0, and gc would evict everything). */
KF_TEST(util__parse_size_rejects_non_finite_and_unrepresentable_sizes) {
  KF_CHECK(size_rejected("inf"));
  KF_CHECK(size_rejected("infinity"));
  KF_CHECK(size_rejected("nan"));
  KF_CHECK(size_rejected("1e30"));
  KF_CHECK(size_rejected("99999999999T"));
}

/* ---- processes ---- */

KF_TEST(util__run_capture_returns_exit_status_and_both_streams) {
  char *argv[] = {"sh", "-c", "echo to-out; echo to-err >&2; exit 3", NULL};
  char *out = NULL;
  KF_CHECK(kf_run_capture(argv, &out) == 3);
  KF_CHECK_CONTAINS(out, "to-out\n");
  KF_CHECK_CONTAINS(out, "to-err\n");
  free(out);
  char *ok[] = {"true", NULL};
  KF_CHECK(kf_run_capture(ok, NULL) == 0);
}

KF_TEST(util__run_capture_reports_a_signal_as_128_plus_signal) {
  char *argv[] = {"sh", "-c", "kill -9 $$", NULL};
  char *out = NULL;
  KF_CHECK(kf_run_capture(argv, &out) == 128 + SIGKILL);
  free(out);
}

KF_TEST(util__run_capture_fails_for_a_missing_program) {
  char *argv[] = {"/nonexistent/kforge-no-such-program", NULL};
  char *out = (char *)"untouched";
  KF_CHECK(kf_run_capture(argv, &out) == -1);
  KF_CHECK(out == NULL);
}

/* no shell: an argument with spaces and quotes arrives as one word */
KF_TEST(util__run_capture_passes_arguments_without_a_shell) {
  char *argv[] = {"printf", "[%s]", "a b 'c' $HOME;", NULL};
  char *out = NULL;
  KF_CHECK(kf_run_capture(argv, &out) == 0);
  KF_CHECK_STR_EQ(out, "[a b 'c' $HOME;]");
  free(out);
}

/* more than a pipe's buffer of output, and stdin at end of file */
KF_TEST(util__run_capture_reads_large_output_with_stdin_closed) {
  char *argv[] = {"sh", "-c", "read x; echo \"stdin:[$x]\"; yes 0123456789 | head -n 20000", NULL};
  char *out = NULL;
  KF_CHECK(kf_run_capture(argv, &out) == 0);
  KF_CHECK(strncmp(out, "stdin:[]\n", 9) == 0);
  KF_CHECK(strlen(out) == 9 + 20000 * 11);
  free(out);
}

/* ---- hashing and hints ---- */

KF_TEST(util__hash128_hex_is_canonical_xxh3_128) {
  char hex[33];
  kf_hash128_hex("", 0, hex);
  /* XXH3_128bits of no bytes, canonical (high half first) */
  KF_CHECK_STR_EQ(hex, "99aa06d3014798d86001c324468d497f");
  char other[33];
  kf_hash128_hex("a", 1, other);
  KF_CHECK(strcmp(hex, other) != 0);
  KF_CHECK(strlen(other) == 32);
}

KF_TEST(util__edit_distance_counts_single_edits) {
  KF_CHECK(kf_edit_distance("kitten", "sitting") == 3);
  KF_CHECK(kf_edit_distance("", "abc") == 3);
  KF_CHECK(kf_edit_distance("widths", "widths") == 0);
  KF_CHECK(kf_edit_distance("widths", "widht") == 2);
}

KF_TEST(util__strv_sort_and_contains) {
  kf_strv s = {0};
  kf_strv_push(&s, "b");
  kf_strv_push(&s, "a10");
  kf_strv_push(&s, "a2");
  kf_strv_sort(&s);
  KF_CHECK_STR_EQ(s.v[0], "a10");
  KF_CHECK_STR_EQ(s.v[1], "a2");
  KF_CHECK_STR_EQ(s.v[2], "b");
  KF_CHECK(kf_strv_contains(&s, "a2"));
  KF_CHECK(!kf_strv_contains(&s, "a"));
  kf_strv_free(&s);
}

KF_TEST_MAIN()
