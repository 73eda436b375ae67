/* fuzz_common.h: what every harness in fuzz/ shares. A harness gets bytes
 * from libFuzzer and hands them to one parser of outside input, as kforge
 * or the runtime would read them. Harnesses print nothing per input (the
 * generator's diagnostics go to /dev/null; the sanitizers still write their
 * reports to file descriptor 2), write only under one private temporary
 * directory, removed at exit, and free all they allocate. */
#ifndef KF_FUZZ_COMMON_H
#define KF_FUZZ_COMMON_H

#define _GNU_SOURCE
#include <fcntl.h>
#include <ftw.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fz_dir[4096]; /* the private temporary directory */

static int fz_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

static void fz_cleanup(void) {
  if (fz_dir[0])
    nftw(fz_dir, fz_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Creates the temporary directory, silences stderr's FILE (libFuzzer keeps
 * the stream it took at start-up), and removes the directory at exit. */
static inline void fz_init(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(fz_dir, sizeof fz_dir, "%s/kforge-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(fz_dir)) {
    perror("kforge fuzz: mkdtemp");
    abort();
  }
  atexit(fz_cleanup);
  if (!getenv("KF_FUZZ_VERBOSE")) {
    FILE *null = fopen("/dev/null", "w");
    if (null)
      stderr = null;
  }
}

/* fz_dir/rel (static buffer, valid until the next call). */
static inline const char *fz_path(const char *rel) {
  static char buf[2][4200];
  static int which;
  which ^= 1;
  snprintf(buf[which], sizeof buf[which], "%s/%s", fz_dir, rel);
  return buf[which];
}

/* Writes len bytes to path (replacing it); aborts when it cannot, since
 * then the harness would test nothing. */
static inline void fz_write(const char *path, const void *data, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    perror(path);
    abort();
  }
  const char *p = data;
  while (len) {
    ssize_t n = write(fd, p, len);
    if (n <= 0) {
      perror(path);
      abort();
    }
    p += n;
    len -= (size_t)n;
  }
  close(fd);
}

/* Splits data at the first occurrence of sep: part 0 before it, the rest
 * after it (len 0 and NULL when there is no sep). */
static inline void fz_split(const uint8_t *data, size_t size, const char *sep, const uint8_t **rest,
                            size_t *head_len, size_t *rest_len) {
  const uint8_t *at = memmem(data, size, sep, strlen(sep));
  if (!at) {
    *head_len = size;
    *rest = NULL;
    *rest_len = 0;
    return;
  }
  *head_len = (size_t)(at - data);
  *rest = at + strlen(sep);
  *rest_len = size - *head_len - strlen(sep);
}

/* A NUL-terminated copy of data (caller frees). */
static inline char *fz_cstr(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s)
    abort();
  memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

/* Writes h.cuh, one small header, into fz_dir (for the closure targets). */
static inline void fz_write_header(void) {
  static const char header[] = "#pragma once\nint kf_fuzz_header(int x) { return x + 1; }\n";
  fz_write(fz_path("h.cuh"), header, sizeof header - 1);
}

#endif /* KF_FUZZ_COMMON_H */
