/* Read-only file access, paths and checksums. The runtime must work from a
 * read-only cache (a container image layer), so files are only ever opened
 * O_RDONLY and nothing is created, locked or touched. */
#include "rt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

kf_status rt_file_read(const char *path, char **data, size_t *len, rt_err *err) {
  struct stat st;
  char *buf;
  size_t got = 0;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO never blocks */
  *data = NULL;
  *len = 0;
  if (fd < 0)
    return rt_err_set(err, KF_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return rt_err_set(err, KF_ERR_IO, "cannot read %s: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return rt_err_set(err, KF_ERR_IO, "cannot read %s: not a regular file", path);
  }
  buf = malloc((size_t)st.st_size + 1);
  if (!buf) {
    close(fd);
    return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory reading %s", path);
  }
  while (got < (size_t)st.st_size) {
    ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int e = errno;
      free(buf);
      close(fd);
      return rt_err_set(err, KF_ERR_IO, "cannot read %s: %s", path,
                        n == 0 ? "file shrank while reading" : strerror(e));
    }
    got += (size_t)n;
  }
  close(fd);
  buf[got] = '\0';
  *data = buf;
  *len = got;
  return KF_OK;
}

char *rt_path_join(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *p = malloc(la + lb + 2);
  if (!p)
    return NULL;
  memcpy(p, a, la);
  p[la] = '/';
  memcpy(p + la + 1, b, lb + 1);
  return p;
}

void rt_hex16(const unsigned char in[16], char out[33]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) {
    out[2 * i] = digits[in[i] >> 4];
    out[2 * i + 1] = digits[in[i] & 15];
  }
  out[32] = '\0';
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

int rt_unhex16(const char *hex, unsigned char out[16]) { return rt_unhex(hex, out, 16); }

int rt_unhex(const char *hex, unsigned char *out, size_t n) {
  if (strlen(hex) != 2 * n)
    return -1;
  for (size_t i = 0; i < n; i++) {
    int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return -1;
    out[i] = (unsigned char)(hi << 4 | lo);
  }
  return 0;
}

void rt_xxh128(const void *data, size_t len, unsigned char out[16]) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(data, len));
  memcpy(out, c.digest, 16);
}
