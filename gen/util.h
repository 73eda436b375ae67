/* util.h: small shared helpers for the generator: growable buffers and string
 * vectors, file I/O with atomic replacement, directory creation, hashing to
 * hex, and process spawning without a shell.
 *
 * Allocation failure aborts the generator (it is a command, not a library);
 * every other failure is returned to the caller. */
#ifndef KF_UTIL_H
#define KF_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
  char *data; /* NUL-terminated */
  size_t len;
  size_t cap;
} kf_buf;

void kf_buf_add(kf_buf *b, const void *p, size_t n);
void kf_buf_puts(kf_buf *b, const char *s);
void kf_buf_printf(kf_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kf_buf_free(kf_buf *b);
/* Returns the buffer's string and leaves the buffer empty; caller frees. */
char *kf_buf_take(kf_buf *b);

typedef struct {
  char **v;
  size_t n;
  size_t cap;
} kf_strv;

void kf_strv_push(kf_strv *s, const char *str); /* copies str */
void kf_strv_push_owned(kf_strv *s, char *str);
void kf_strv_free(kf_strv *s);
void kf_strv_sort(kf_strv *s);
int kf_strv_contains(const kf_strv *s, const char *str);

void *kf_xmalloc(size_t n);
void *kf_xcalloc(size_t n, size_t size);
void *kf_xrealloc(void *p, size_t n);
/* Makes room for element n of an array that holds n elements of size bytes:
 * reallocates only when n is 0 or a power of two (to twice n), so appending
 * one at a time stays linear even where realloc always copies (ASan). The
 * array must have grown only through this call. */
void *kf_xpush(void *p, size_t n, size_t size);
char *kf_xstrdup(const char *s);
char *kf_xstrndup(const char *s, size_t n);
char *kf_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define KF_STR_(x) #x
#define KF_STR(x) KF_STR_(x)

/* The largest file kforge reads whole (descriptions, configs, manifests,
 * metas, objects): far above any real one, and a bound on what hostile input
 * can make it allocate. */
#define KF_READ_MAX_MIB 256
#define KF_READ_MAX ((unsigned long long)KF_READ_MAX_MIB << 20)

/* Reads a whole regular file; NUL-terminates. Never blocks on a FIFO and
 * never reads a device. Returns NULL with errno set: EISDIR for a directory,
 * EINVAL for anything else that is not a regular file, EFBIG past
 * KF_READ_MAX; kf_read_error(errno) says it in words. */
char *kf_read_file(const char *path, size_t *len);
const char *kf_read_error(int err);
/* Replaces path atomically: writes a temporary file beside it, fsyncs and
 * renames. Returns 0, or -1 with errno set (the old file is untouched). */
int kf_write_file_atomic(const char *path, const void *data, size_t len);
/* The same without the syncs: readers see the old file or the new one, but
 * after a crash it may be empty. For what is only a speed-up (dependency
 * records), which a reader checks and rebuilds. */
int kf_write_file_replace(const char *path, const void *data, size_t len);
/* Writes only when the bytes differ; *changed (may be NULL) says whether it
 * wrote. Returns 0 or -1 with errno set. */
int kf_write_if_changed(const char *path, const void *data, size_t len, int *changed);
/* The same without the syncs (kf_write_file_replace): for files the next
 * run rewrites when they differ, as a build's generated sources. */
int kf_replace_if_changed(const char *path, const void *data, size_t len);
/* mkdir -p. Returns 0 or -1 with errno set. */
int kf_mkdir_p(const char *path);
/* rm -rf of a directory tree; returns 0 or -1. */
int kf_remove_tree(const char *path);
int kf_fsync_dir(const char *path);

/* Joins two paths with one '/'; caller frees. */
char *kf_path_join(const char *a, const char *b);
/* Directory part of a path ("." when none); caller frees. */
char *kf_path_dirname(const char *path);
/* Absolute, normalised path without resolving symlinks; caller frees. */
char *kf_path_absolute(const char *path);
/* If path is inside dir (both absolute, normalised), returns the relative
 * rest (pointer into path), else NULL. */
const char *kf_path_under(const char *path, const char *dir);
int kf_path_exists(const char *path);

/* XXH3-128 as 32 lowercase hex digits (canonical, high half first). */
void kf_hash128_hex(const void *data, size_t len, char out[33]);
void kf_hex128(const void *xxh128_hash, char out[33]);
void kf_hex64(uint64_t h, char out[17]);

/* d as an int64_t, saturated at the ends of the range (NaN gives 0): JSON
 * numbers are doubles, and casting one beyond the range is undefined. */
static inline int64_t kf_i64_of_double(double d) {
  if (!(d == d))
    return 0;
  if (d >= 9223372036854775807.0)
    return INT64_MAX;
  if (d <= -9223372036854775808.0)
    return INT64_MIN;
  return (int64_t)d;
}

/* Runs argv (argv[0] looked up on PATH) with no shell, stdout and stderr
 * captured together into *output (caller frees; may be NULL). Returns the
 * exit status, 128+signal, or -1 if it could not be started. */
int kf_run_capture(char *const argv[], char **output);
/* The same with "NAME=value" entries (NULL-terminated) added to or replacing
 * the child's environment. */
int kf_run_capture_env(char *const argv[], char *const env[], char **output);

double kf_now(void); /* monotonic seconds */
int kf_parse_size(const char *s, uint64_t *out);

/* Levenshtein distance, for "did you mean" hints. */
size_t kf_edit_distance(const char *a, const char *b);

#endif /* KF_UTIL_H */
