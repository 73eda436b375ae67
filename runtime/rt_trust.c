/* The cache's rules for what may be read, in one place for the runtime and
 * for `kforge verify` (gen/CMakeLists.txt compiles this file into the
 * generator too), so that verify refuses exactly what the runtime refuses,
 * with the same reason (docs/contracts.md, "Trust").
 *
 * Loading a code object runs its code on the GPU, so a file is read only
 * when nobody but the caller and root could have put it there: every path is
 * resolved below <cache>/v1 without following any symbolic link (none can
 * lead out of the cache), and the cache root, v1/, each file read and the
 * directory holding a manifest or meta.json must be owned by the caller or
 * root and not writable by group or others, unless the caller opted out
 * (lax). An object's directory is not checked: that would be one more
 * system call per kernel at startup for nothing, as a file others put there
 * is theirs, and the manifest's checksum binds the bytes of any other. Files are opened
 * O_NONBLOCK, so a FIFO never blocks, and must be regular files. */
#define _GNU_SOURCE
#include "rt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(SYS_openat2)
#include <linux/openat2.h>
#endif

int rt_lax_from_env(void) {
  const char *v = getenv("KFORGE_LAX_PERMISSIONS");
  return v && strcmp(v, "1") == 0;
}

/* "<v1>/<rel>" for a reason, into out. */
static const char *full(const rt_root *r, const char *rel, char *out, size_t n) {
  /* a path past n is cut short: the reason stays one bounded line */
  if (snprintf(out, n, "%s%s%s", r->v1, rel && *rel ? "/" : "", rel ? rel : "") < 0)
    out[0] = '\0';
  return out;
}

kf_status rt_trusted(const rt_root *r, const struct stat *st, const char *what, rt_err *err) {
  if (r->lax)
    return KF_OK;
  if (st->st_uid != (uid_t)r->uid && st->st_uid != 0)
    return rt_err_set(err, KF_ERR_UNTRUSTED,
                      "%s: error: owned by uid %u, neither the caller (uid %u) nor root: the "
                      "runtime loads only what others cannot change (or open with "
                      "lax_permissions)",
                      what, (unsigned)st->st_uid, r->uid);
  if (st->st_mode & (S_IWGRP | S_IWOTH))
    return rt_err_set(err, KF_ERR_UNTRUSTED,
                      "%s: error: writable by %s (mode %04o): the runtime loads only what others "
                      "cannot change (chmod go-w, or open with lax_permissions)",
                      what, (st->st_mode & S_IWOTH) ? "others" : "group",
                      (unsigned)(st->st_mode & 07777));
  return KF_OK;
}

kf_status rt_root_open(rt_root *r, const char *cache_dir, int lax, rt_err *err) {
  struct stat st;
  int dfd;
  memset(r, 0, sizeof *r);
  r->fd = -1;
  r->lax = lax;
  r->uid = (unsigned)geteuid();
  if (!(r->v1 = rt_path_join(cache_dir, "v1")) || !(r->dir = strdup(cache_dir)))
    return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
  /* the root itself may be a link (a mount elsewhere); nothing below it */
  dfd = open(cache_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return rt_err_set(err, KF_ERR_IO, "cannot open the cache %s: %s", cache_dir, strerror(errno));
  if (fstat(dfd, &st) != 0) {
    int e = errno;
    close(dfd);
    return rt_err_set(err, KF_ERR_IO, "cannot read the cache %s: %s", cache_dir, strerror(e));
  }
  r->fd = openat(dfd, "v1", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (r->fd < 0) {
    int e = errno;
    close(dfd);
    if (e == ELOOP || e == ENOTDIR)
      return rt_err_set(err, KF_ERR_UNTRUSTED,
                        "cannot open %s: %s (the runtime follows no link inside the cache)", r->v1,
                        e == ELOOP ? "a symbolic link" : "not a directory");
    return rt_err_set(err, KF_ERR_IO, "cannot open %s: %s", r->v1, strerror(e));
  }
  close(dfd);
  /* the fd stays usable on a trust failure: verify reports it and goes on */
  if (rt_trusted(r, &st, cache_dir, err) != KF_OK)
    return err->status;
  if (fstat(r->fd, &st) != 0)
    return rt_err_set(err, KF_ERR_IO, "cannot read %s: %s", r->v1, strerror(errno));
  return rt_trusted(r, &st, r->v1, err);
}

void rt_root_close(rt_root *r) {
  if (r->fd >= 0)
    close(r->fd);
  free(r->v1);
  free(r->dir);
  r->fd = -1;
  r->v1 = r->dir = NULL;
}

/* openat of rel below r->fd, following no link: openat2 where the kernel
 * has it, else one component at a time with O_NOFOLLOW. -1 with errno set
 * (ELOOP for a link) on failure. */
static int open_beneath(const rt_root *r, const char *rel, int flags) {
#if defined(SYS_openat2)
  static int no_openat2; /* ENOSYS (old kernel) or refused by a filter */
  if (!__atomic_load_n(&no_openat2, __ATOMIC_RELAXED)) {
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = (unsigned long long)(flags | O_CLOEXEC);
    how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    int fd = (int)syscall(SYS_openat2, r->fd, rel, &how, sizeof how);
    if (fd >= 0 || (errno != ENOSYS && errno != EPERM))
      return fd == -1 && errno == EXDEV ? (errno = ELOOP, -1) : fd;
    __atomic_store_n(&no_openat2, 1, __ATOMIC_RELAXED);
  }
#endif
  char part[256];
  int dfd = r->fd;
  const char *p = rel;
  for (;;) {
    const char *slash = strchr(p, '/');
    size_t n = slash ? (size_t)(slash - p) : strlen(p);
    int fd;
    if (n == 0 || n >= sizeof part || (n == 2 && p[0] == '.' && p[1] == '.')) {
      if (dfd != r->fd)
        close(dfd);
      errno = n >= sizeof part ? ENAMETOOLONG : ELOOP;
      return -1;
    }
    memcpy(part, p, n);
    part[n] = '\0';
    fd = openat(dfd, part,
                slash ? O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
                      : flags | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    if (dfd != r->fd)
      close(dfd);
    if (fd < 0 || !slash) {
      errno = e;
      return fd;
    }
    dfd = fd;
    p = slash + 1;
  }
}

kf_status rt_root_open_file(const rt_root *r, const char *rel, int check_dir, int *fd_out,
                            size_t *size, rt_err *err) {
  char path[RT_REASON_MAX / 2];
  struct stat st;
  int fd = open_beneath(r, rel, O_RDONLY | O_NONBLOCK);
  *fd_out = -1;
  if (fd < 0) {
    int e = errno;
    if (e == ELOOP)
      return rt_err_set(err, KF_ERR_UNTRUSTED,
                        "cannot open %s: it passes through a symbolic link (the runtime follows "
                        "no link inside the cache)",
                        full(r, rel, path, sizeof path));
    return rt_err_set(err, KF_ERR_IO, "cannot open %s: %s", full(r, rel, path, sizeof path),
                      strerror(e));
  }
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return rt_err_set(err, KF_ERR_IO, "cannot read %s: %s", full(r, rel, path, sizeof path),
                      strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return rt_err_set(err, KF_ERR_IO, "cannot read %s: not a regular file",
                      full(r, rel, path, sizeof path));
  }
  if (rt_trusted(r, &st, full(r, rel, path, sizeof path), err) != KF_OK) {
    close(fd);
    return err->status;
  }
  if (!r->lax && check_dir) {
    /* the directory holding it: others could rename files in and out */
    const char *slash = strrchr(rel, '/');
    struct stat ds;
    int rc;
    if (slash) {
      char dir[RT_REASON_MAX / 2];
      size_t n = (size_t)(slash - rel);
      if (n >= sizeof dir)
        n = sizeof dir - 1;
      memcpy(dir, rel, n);
      dir[n] = '\0';
      rc = fstatat(r->fd, dir, &ds, AT_SYMLINK_NOFOLLOW);
      full(r, dir, path, sizeof path);
    } else {
      rc = fstat(r->fd, &ds);
      full(r, NULL, path, sizeof path);
    }
    if (rc != 0 || rt_trusted(r, &ds, path, err) != KF_OK) {
      close(fd);
      return rc != 0 ? rt_err_set(err, KF_ERR_IO, "cannot read %s: %s", path, strerror(errno))
                     : err->status;
    }
  }
  *fd_out = fd;
  *size = (size_t)st.st_size;
  return KF_OK;
}

kf_status rt_root_read(const rt_root *r, const char *rel, int check_dir, char **data, size_t *len,
                       rt_err *err) {
  char path[RT_REASON_MAX / 2];
  size_t size, got = 0;
  char *buf;
  int fd;
  *data = NULL;
  *len = 0;
  if (rt_root_open_file(r, rel, check_dir, &fd, &size, err) != KF_OK)
    return err->status;
  if (!(buf = malloc(size + 1))) {
    close(fd);
    return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory reading %s",
                      full(r, rel, path, sizeof path));
  }
  while (got < size) {
    ssize_t n = read(fd, buf + got, size - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int e = errno;
      free(buf);
      close(fd);
      return rt_err_set(err, KF_ERR_IO, "cannot read %s: %s", full(r, rel, path, sizeof path),
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

kf_status rt_root_opendir(const rt_root *r, const char *rel, DIR **dp, rt_err *err) {
  char path[RT_REASON_MAX / 2];
  struct stat st;
  int fd = open_beneath(r, rel, O_RDONLY | O_DIRECTORY);
  *dp = NULL;
  if (fd < 0) {
    int e = errno;
    return rt_err_set(err, e == ELOOP ? KF_ERR_UNTRUSTED : KF_ERR_IO, "cannot open %s: %s",
                      full(r, rel, path, sizeof path),
                      e == ELOOP ? "it passes through a symbolic link (the runtime follows no "
                                   "link inside the cache)"
                                 : strerror(e));
  }
  if (fstat(fd, &st) != 0 || rt_trusted(r, &st, full(r, rel, path, sizeof path), err) != KF_OK) {
    int e = errno;
    close(fd);
    return err->status == KF_ERR_UNTRUSTED
               ? err->status
               : rt_err_set(err, KF_ERR_IO, "cannot read %s: %s", path, strerror(e));
  }
  if (!(*dp = fdopendir(fd))) {
    close(fd);
    return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
  }
  return KF_OK;
}

static kf_status read_checked(const rt_root *r, const char *id, const char *rel,
                              unsigned long long size, const unsigned char checksum[16],
                              char **image, rt_err *err) {
  char path[RT_REASON_MAX / 2];
  unsigned char sum[16];
  size_t len;
  *image = NULL;
  /* no check of the object's directory: a file others put there is theirs
   * (refused), and the manifest's checksum binds the bytes of any other */
  if (rt_root_read(r, rel, 0, image, &len, err) != KF_OK)
    return rt_err_prefix(err, "kernel %s: ", id);
  if (len != size) {
    free(*image);
    *image = NULL;
    return rt_err_set(err, KF_ERR_CHECKSUM,
                      "kernel %s: object %s is damaged: %zu bytes, the "
                      "manifest says %llu",
                      id, full(r, rel, path, sizeof path), len, size);
  }
  rt_xxh128(*image, len, sum);
  if (memcmp(sum, checksum, 16) != 0) {
    char got[33], want[33];
    free(*image);
    *image = NULL;
    rt_hex16(sum, got);
    rt_hex16(checksum, want);
    return rt_err_set(err, KF_ERR_CHECKSUM,
                      "kernel %s: object %s is damaged: its checksum is %s, "
                      "the manifest says %s",
                      id, full(r, rel, path, sizeof path), got, want);
  }
  return KF_OK;
}

kf_status rt_object_read(const rt_root *r, const rt_manifest *m, const rt_kdesc *d, char **image,
                         rt_err *err) {
  kf_status st = read_checked(r, d->id, d->object, d->size, d->checksum, image, err);
  if (st == KF_ERR_IO || st == KF_ERR_CHECKSUM) /* missing or damaged: a build replaces it */
    rt_err_build_hint(err, m->arch, r->dir, m->model, m->description);
  if (st == KF_OK && (st = rt_object_check_signed(d, *image, d->size, err)) != KF_OK) {
    free(*image);
    *image = NULL;
  }
  return st;
}
