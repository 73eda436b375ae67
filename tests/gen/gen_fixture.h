/* gen_fixture.h: helpers shared by the generator's unit tests: a private
 * temporary directory per test process (removed at exit unless the test
 * failed), writing fixture files, capturing what a call prints on stderr, and
 * running a function of the test binary in a fresh process (the toolchain is
 * probed once per process, so tests that change its environment need one).
 *
 * Setup failures abort with a message: they are not what a test asserts. */
#ifndef KF_GEN_FIXTURE_H
#define KF_GEN_FIXTURE_H

#define _GNU_SOURCE
#include "kf_test.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define KF_UNUSED __attribute__((unused))

static KF_UNUSED void fx_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("test setup failed: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  _exit(3);
}

static kf_strv fx_tmp_dirs;
static pid_t fx_tmp_owner;

static void fx_cleanup(void) {
  if (getpid() != fx_tmp_owner)
    return; /* a forked child never removes its parent's directories */
  for (size_t i = 0; i < fx_tmp_dirs.n; i++) {
    if (kf_test_failed)
      fprintf(stderr, "kept %s for inspection\n", fx_tmp_dirs.v[i]);
    else
      kf_remove_tree(fx_tmp_dirs.v[i]);
  }
  kf_strv_free(&fx_tmp_dirs);
}

/* A fresh directory (absolute, symlinks resolved); removed at exit, when
 * the returned string is freed too. */
static KF_UNUSED const char *fx_tmpdir(void) {
  char tmpl[] = "/tmp/kf-gen-test.XXXXXX";
  if (!mkdtemp(tmpl))
    fx_die("mkdtemp: %s", strerror(errno));
  char *real = realpath(tmpl, NULL);
  if (!real)
    fx_die("realpath %s: %s", tmpl, strerror(errno));
  if (fx_tmp_owner != getpid()) {
    fx_tmp_owner = getpid();
    atexit(fx_cleanup);
  }
  kf_strv_push_owned(&fx_tmp_dirs, real);
  return real;
}

/* dir/rel; caller frees. */
static KF_UNUSED char *fx_path(const char *dir, const char *rel) { return kf_path_join(dir, rel); }

/* Writes text to dir/rel, creating directories; returns the path (caller
 * frees). */
static KF_UNUSED char *fx_write(const char *dir, const char *rel, const char *text) {
  char *p = kf_path_join(dir, rel);
  char *parent = kf_path_dirname(p);
  if (kf_mkdir_p(parent) != 0)
    fx_die("mkdir -p %s: %s", parent, strerror(errno));
  free(parent);
  FILE *f = fopen(p, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0)
    fx_die("write %s: %s", p, strerror(errno));
  return p;
}

static KF_UNUSED void fx_write_free(const char *dir, const char *rel, const char *text) {
  free(fx_write(dir, rel, text));
}

/* The file's text (caller frees), or NULL when it cannot be read. */
static KF_UNUSED char *fx_read(const char *path) { return kf_read_file(path, NULL); }

/* ---- stderr capture ---- */

static int fx_saved_stderr = -1;
static char fx_capture_path[64];

/* Sends stderr to a temporary file until fx_capture_end. */
static KF_UNUSED void fx_capture_begin(void) {
  fflush(stderr);
  strcpy(fx_capture_path, "/tmp/kf-gen-stderr.XXXXXX");
  int fd = mkstemp(fx_capture_path);
  if (fd < 0)
    fx_die("mkstemp: %s", strerror(errno));
  fx_saved_stderr = dup(2);
  if (fx_saved_stderr < 0 || dup2(fd, 2) < 0)
    fx_die("dup2: %s", strerror(errno));
  close(fd);
}

/* Restores stderr and returns what was printed (caller frees). The text is
 * also echoed so that a failing test shows it. */
static KF_UNUSED char *fx_capture_end(void) {
  fflush(stderr);
  if (dup2(fx_saved_stderr, 2) < 0)
    fx_die("dup2: %s", strerror(errno));
  close(fx_saved_stderr);
  fx_saved_stderr = -1;
  char *text = kf_read_file(fx_capture_path, NULL);
  unlink(fx_capture_path);
  if (!text)
    fx_die("read captured stderr: %s", strerror(errno));
  if (*text)
    fprintf(stderr, "[captured stderr]\n%s[end]\n", text);
  return text;
}

/* Number of lines of text holding needle. */
static KF_UNUSED int fx_count_lines_with(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; p && *p;) {
    const char *eol = strchr(p, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    char *line = kf_xstrndup(p, len);
    if (strstr(line, needle))
      n++;
    free(line);
    p += len + (eol ? 1 : 0);
  }
  return n;
}

/* ---- running a function in a fresh process ---- */

/* A test file that needs fresh processes defines its child functions with
 * FX_CHILD(name) and lists them with FX_CHILDREN(...); fx_run_child execs
 * the test binary again with KF_GEN_TEST_CHILD=name, and a constructor runs
 * that function before main, so the child starts with nothing probed.
 * Returns the child's exit status; *output gets its stdout and stderr. */
typedef int (*fx_child_fn)(void);
struct fx_child {
  const char *name;
  fx_child_fn fn;
};

#define FX_CHILD(name) static int fx_child_##name(void)
#define FX_CHILD_ENTRY(name)                                                                       \
  { #name, fx_child_##name }
#define FX_CHILDREN(...)                                                                           \
  static const struct fx_child fx_children[] = {__VA_ARGS__, {NULL, NULL}};                        \
  __attribute__((constructor)) static void fx_child_dispatch(void) {                               \
    const char *want = getenv("KF_GEN_TEST_CHILD");                                                \
    if (!want)                                                                                     \
      return;                                                                                      \
    for (const struct fx_child *c = fx_children; c->name; c++)                                     \
      if (!strcmp(c->name, want)) {                                                                \
        unsetenv("KF_GEN_TEST_CHILD");                                                             \
        int rc = c->fn();                                                                          \
        fflush(stdout);                                                                            \
        fflush(stderr);                                                                            \
        _exit(rc);                                                                                 \
      }                                                                                            \
    fprintf(stderr, "no child function %s\n", want);                                               \
    _exit(99);                                                                                     \
  }

/* env: NULL-terminated "NAME=value" (set) or "NAME" (unset) entries applied
 * to the child's environment only. */
static KF_UNUSED int fx_run_child(const char *name, const char *const *env, char **output) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n < 0)
    fx_die("readlink /proc/self/exe: %s", strerror(errno));
  self[n] = '\0';
  kf_strv saved = {0}; /* "NAME=old" or "NAME" to restore */
  for (const char *const *e = env; e && *e; e++) {
    const char *eq = strchr(*e, '=');
    char *nm = eq ? kf_xstrndup(*e, (size_t)(eq - *e)) : kf_xstrdup(*e);
    const char *old = getenv(nm);
    kf_strv_push_owned(&saved, old ? kf_xasprintf("%s=%s", nm, old) : kf_xstrdup(nm));
    if (eq)
      setenv(nm, eq + 1, 1);
    else
      unsetenv(nm);
    free(nm);
  }
  setenv("KF_GEN_TEST_CHILD", name, 1);
  char *argv[] = {self, NULL};
  int rc = kf_run_capture(argv, output);
  unsetenv("KF_GEN_TEST_CHILD");
  for (size_t i = saved.n; i-- > 0;) {
    char *eq = strchr(saved.v[i], '=');
    if (eq) {
      *eq = '\0';
      setenv(saved.v[i], eq + 1, 1);
    } else {
      unsetenv(saved.v[i]);
    }
  }
  kf_strv_free(&saved);
  if (output && *output && **output)
    fprintf(stderr, "[child %s, exit %d]\n%s[end]\n", name, rc, *output);
  return rc;
}

/* The value of "name=value" on its own line of text (caller frees), or NULL. */
static KF_UNUSED char *fx_line_value(const char *text, const char *name) {
  size_t nl = strlen(name);
  for (const char *p = text; p && *p;) {
    const char *eol = strchr(p, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    if (len > nl && !strncmp(p, name, nl) && p[nl] == '=')
      return kf_xstrndup(p + nl + 1, len - nl - 1);
    p += len + (eol ? 1 : 0);
  }
  return NULL;
}

#endif /* KF_GEN_FIXTURE_H */
