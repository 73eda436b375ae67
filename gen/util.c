/* util.c: buffers, string vectors, file I/O, paths, hashing and process
 * spawning shared by every generator module (see util.h). */
#define _GNU_SOURCE
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

extern char **environ;

void *kf_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fputs("kforge: fatal: out of memory\n", stderr);
    abort();
  }
  return p;
}

void *kf_xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) {
    fputs("kforge: fatal: out of memory\n", stderr);
    abort();
  }
  return p;
}

void *kf_xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) {
    fputs("kforge: fatal: out of memory\n", stderr);
    abort();
  }
  return q;
}

void *kf_xpush(void *p, size_t n, size_t size) {
  if (n && (n & (n - 1)))
    return p;
  size_t cap = n ? 2 * n : 1;
  if (cap > SIZE_MAX / size) {
    fputs("kforge: fatal: out of memory\n", stderr);
    abort();
  }
  return kf_xrealloc(p, cap * size);
}

char *kf_xstrdup(const char *s) { return kf_xstrndup(s, strlen(s)); }

char *kf_xstrndup(const char *s, size_t n) {
  char *p = kf_xmalloc(n + 1);
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

char *kf_xasprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  if (vasprintf(&s, fmt, ap) < 0) {
    fputs("kforge: fatal: out of memory\n", stderr);
    abort();
  }
  va_end(ap);
  return s;
}

void kf_buf_add(kf_buf *b, const void *p, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < b->len + n + 1)
      cap *= 2;
    b->data = kf_xrealloc(b->data, cap);
    b->cap = cap;
  }
  if (n)
    memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void kf_buf_puts(kf_buf *b, const char *s) { kf_buf_add(b, s, strlen(s)); }

void kf_buf_printf(kf_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  int n = vasprintf(&s, fmt, ap);
  va_end(ap);
  if (n < 0) {
    fputs("kforge: fatal: out of memory\n", stderr);
    abort();
  }
  kf_buf_add(b, s, (size_t)n);
  free(s);
}

void kf_buf_free(kf_buf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

char *kf_buf_take(kf_buf *b) {
  char *s = b->data ? b->data : kf_xstrdup("");
  b->data = NULL;
  b->len = b->cap = 0;
  return s;
}

void kf_strv_push_owned(kf_strv *s, char *str) {
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 8;
    s->v = kf_xrealloc(s->v, s->cap * sizeof(char *));
  }
  s->v[s->n++] = str;
}

void kf_strv_push(kf_strv *s, const char *str) { kf_strv_push_owned(s, kf_xstrdup(str)); }

void kf_strv_free(kf_strv *s) {
  for (size_t i = 0; i < s->n; i++)
    free(s->v[i]);
  free(s->v);
  s->v = NULL;
  s->n = s->cap = 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

void kf_strv_sort(kf_strv *s) {
  if (s->n > 1)
    qsort(s->v, s->n, sizeof(char *), cmp_str);
}

int kf_strv_contains(const kf_strv *s, const char *str) {
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->v[i], str) == 0)
      return 1;
  return 0;
}

char *kf_read_file(const char *path, size_t *len) {
  /* O_NONBLOCK: opening a FIFO must not wait for a writer */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return NULL;
  struct stat st;
  int err = fstat(fd, &st) != 0                            ? errno
            : S_ISDIR(st.st_mode)                          ? EISDIR
            : !S_ISREG(st.st_mode)                         ? EINVAL /* a device, FIFO or socket */
            : (unsigned long long)st.st_size > KF_READ_MAX ? EFBIG
                                                           : 0;
  if (err) {
    close(fd);
    errno = err;
    return NULL;
  }
  /* a file that grows while it is read stops at the limit too */
  size_t cap = (size_t)st.st_size + 1, n = 0;
  char *data = kf_xmalloc(cap);
  for (;;) {
    if (n + 1 >= cap) {
      if (cap > KF_READ_MAX) {
        free(data);
        close(fd);
        errno = EFBIG;
        return NULL;
      }
      cap *= 2;
      data = kf_xrealloc(data, cap);
    }
    ssize_t r = read(fd, data + n, cap - n - 1);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      int e = errno;
      free(data);
      close(fd);
      errno = e;
      return NULL;
    }
    if (r == 0)
      break;
    n += (size_t)r;
  }
  close(fd);
  data[n] = '\0';
  if (len)
    *len = n;
  return data;
}

const char *kf_read_error(int err) {
  switch (err) {
  case EINVAL:
    return "not a regular file";
  case EFBIG:
    return "larger than kforge reads (" KF_STR(KF_READ_MAX_MIB) " MiB)";
  default:
    return strerror(err);
  }
}

static int write_all(int fd, const void *data, size_t len) {
  const char *p = data;
  while (len) {
    ssize_t w = write(fd, p, len);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

int kf_fsync_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  int r = fsync(fd);
  close(fd);
  return r;
}

static int write_atomic(const char *path, const void *data, size_t len, int durable) {
  /* a name of our own beside the target (mkstemp: never someone else's) */
  char *tmp = kf_xasprintf("%s.tmp.XXXXXX", path);
  int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0) {
    free(tmp);
    return -1;
  }
  if (fchmod(fd, 0644) != 0 || write_all(fd, data, len) != 0 || (durable && fsync(fd) != 0)) {
    int e = errno;
    close(fd);
    unlink(tmp);
    free(tmp);
    errno = e;
    return -1;
  }
  close(fd);
  if (rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    free(tmp);
    errno = e;
    return -1;
  }
  free(tmp);
  if (durable) {
    char *dir = kf_path_dirname(path);
    kf_fsync_dir(dir);
    free(dir);
  }
  return 0;
}

int kf_write_file_atomic(const char *path, const void *data, size_t len) {
  return write_atomic(path, data, len, 1);
}

int kf_write_file_replace(const char *path, const void *data, size_t len) {
  return write_atomic(path, data, len, 0);
}

static int write_if_changed(const char *path, const void *data, size_t len, int *changed,
                            int durable) {
  size_t old_len = 0;
  char *old = kf_read_file(path, &old_len);
  int same = old && old_len == len && memcmp(old, data, len) == 0;
  free(old);
  if (changed)
    *changed = !same;
  if (same)
    return 0;
  return write_atomic(path, data, len, durable);
}

int kf_write_if_changed(const char *path, const void *data, size_t len, int *changed) {
  return write_if_changed(path, data, len, changed, 1);
}

int kf_replace_if_changed(const char *path, const void *data, size_t len) {
  return write_if_changed(path, data, len, NULL, 0);
}

/* Whether path is a directory (after mkdir said EEXIST); sets errno. */
static int is_dir(const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
    return 0;
  errno = ENOTDIR;
  return -1;
}

int kf_mkdir_p(const char *path) {
  if (!*path) {
    errno = ENOENT;
    return -1;
  }
  /* most calls find the directory or its parent there: one call */
  if (mkdir(path, 0755) == 0)
    return 0;
  if (errno == EEXIST)
    return is_dir(path);
  if (errno != ENOENT)
    return -1;
  char *p = kf_xstrdup(path);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/')
      continue;
    *s = '\0';
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
      free(p);
      return -1;
    }
    *s = '/';
  }
  int r = mkdir(p, 0755);
  if (r != 0 && errno == EEXIST)
    r = is_dir(p);
  free(p);
  return r;
}

int kf_remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0)
    return errno == ENOENT ? 0 : -1;
  if (!S_ISDIR(st.st_mode))
    return unlink(path);
  DIR *d = opendir(path);
  if (!d)
    return -1;
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    char *sub = kf_path_join(path, e->d_name);
    if (kf_remove_tree(sub) != 0)
      rc = -1;
    free(sub);
  }
  closedir(d);
  if (rmdir(path) != 0)
    rc = -1;
  return rc;
}

char *kf_path_join(const char *a, const char *b) {
  if (b[0] == '/' || a[0] == '\0')
    return kf_xstrdup(b);
  size_t la = strlen(a);
  return kf_xasprintf("%s%s%s", a, a[la - 1] == '/' ? "" : "/", b);
}

char *kf_path_dirname(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    return kf_xstrdup(".");
  if (slash == path)
    return kf_xstrdup("/");
  return kf_xstrndup(path, (size_t)(slash - path));
}

char *kf_path_absolute(const char *path) {
  char *joined;
  if (path[0] == '/') {
    joined = kf_xstrdup(path);
  } else {
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd))
      return kf_xstrdup(path);
    joined = kf_path_join(cwd, path);
  }
  /* normalise: drop "." and empty components, resolve ".." lexically */
  size_t n = strlen(joined);
  char *out = kf_xmalloc(n + 2);
  size_t o = 0;
  const char *p = joined;
  while (*p) {
    while (*p == '/')
      p++;
    const char *start = p;
    while (*p && *p != '/')
      p++;
    size_t len = (size_t)(p - start);
    if (len == 0 || (len == 1 && start[0] == '.'))
      continue;
    if (len == 2 && start[0] == '.' && start[1] == '.') {
      while (o > 0 && out[o - 1] != '/')
        o--;
      if (o > 0)
        o--;
      continue;
    }
    out[o++] = '/';
    memcpy(out + o, start, len);
    o += len;
  }
  if (o == 0)
    out[o++] = '/';
  out[o] = '\0';
  free(joined);
  return out;
}

const char *kf_path_under(const char *path, const char *dir) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/')
    n--;
  if (strncmp(path, dir, n) != 0)
    return NULL;
  if (n == 1 && dir[0] == '/')
    return path + 1;
  if (path[n] != '/')
    return NULL;
  return path + n + 1;
}

int kf_path_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

void kf_hex128(const void *h, char out[33]) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, *(const XXH128_hash_t *)h);
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) {
    out[2 * i] = hex[c.digest[i] >> 4];
    out[2 * i + 1] = hex[c.digest[i] & 15];
  }
  out[32] = '\0';
}

void kf_hash128_hex(const void *data, size_t len, char out[33]) {
  XXH128_hash_t h = XXH3_128bits(data, len);
  kf_hex128(&h, out);
}

void kf_hex64(uint64_t h, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)h); }

int kf_run_capture(char *const argv[], char **output) {
  return kf_run_capture_env(argv, NULL, output);
}

int kf_run_capture_env(char *const argv[], char *const env[], char **output) {
  kf_strv envp = {0};
  for (char *const *e = environ; *e; e++) {
    int replaced = 0;
    for (char *const *o = env; o && *o && !replaced; o++) {
      size_t n = strcspn(*o, "=");
      replaced = !strncmp(*e, *o, n) && (*e)[n] == '=';
    }
    if (!replaced)
      kf_strv_push_owned(&envp, *e); /* borrowed: only the array is freed */
  }
  for (char *const *o = env; o && *o; o++)
    kf_strv_push_owned(&envp, *o);
  kf_strv_push_owned(&envp, NULL);
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    free(envp.v);
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, envp.v);
  free(envp.v);
  posix_spawn_file_actions_destroy(&fa);
  close(pipefd[1]);
  if (rc != 0) {
    close(pipefd[0]);
    errno = rc;
    if (output)
      *output = NULL;
    return -1;
  }
  kf_buf out = {0};
  char chunk[4096];
  for (;;) {
    ssize_t r = read(pipefd[0], chunk, sizeof chunk);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    kf_buf_add(&out, chunk, (size_t)r);
  }
  close(pipefd[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (output)
    *output = kf_buf_take(&out);
  else
    kf_buf_free(&out);
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return -1;
}

double kf_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int kf_parse_size(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !(v >= 0) || isinf(v))
    return -1;
  double mul = 1;
  switch (*end) {
  case 'k':
  case 'K':
    mul = 1024.0;
    end++;
    break;
  case 'm':
  case 'M':
    mul = 1024.0 * 1024;
    end++;
    break;
  case 'g':
  case 'G':
    mul = 1024.0 * 1024 * 1024;
    end++;
    break;
  case 't':
  case 'T':
    mul = 1024.0 * 1024 * 1024 * 1024;
    end++;
    break;
  default:
    break;
  }
  if (*end == 'B' || *end == 'b')
    end++;
  if (*end || v * mul >= 18446744073709551616.0)
    return -1;
  *out = (uint64_t)(v * mul);
  return 0;
}

size_t kf_edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  size_t *row = kf_xmalloc((lb + 1) * sizeof(size_t));
  for (size_t j = 0; j <= lb; j++)
    row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t prev = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t cur = row[j];
      size_t best = prev + (a[i - 1] != b[j - 1]);
      if (row[j] + 1 < best)
        best = row[j] + 1;
      if (row[j - 1] + 1 < best)
        best = row[j - 1] + 1;
      row[j] = best;
      prev = cur;
    }
  }
  size_t d = row[lb];
  free(row);
  return d;
}
