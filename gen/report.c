/* report.c: the diagnostic printer (see report.h). One function formats
 * every line, so the shape cannot drift between commands. */
#include "report.h"

#include <stdarg.h>
#include <stdio.h>

static const char *const level_words[] = {"error", "warning", "note"};

static void vdiag(kf_level level, const char *file, const char *path, const char *fmt, va_list ap) {
  fprintf(stderr, "%s: ", file ? file : "kforge");
  if (path && *path)
    fprintf(stderr, "%s: ", path);
  fprintf(stderr, "%s: ", level_words[level]);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

void kf_diag(kf_level level, const char *file, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vdiag(level, file, path, fmt, ap);
  va_end(ap);
}

void kf_error(const char *file, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vdiag(KF_ERROR, file, path, fmt, ap);
  va_end(ap);
}

void kf_warning(const char *file, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vdiag(KF_WARNING, file, path, fmt, ap);
  va_end(ap);
}

void kf_note(const char *file, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vdiag(KF_NOTE, file, path, fmt, ap);
  va_end(ap);
}

void kf_error_pos(const char *file, int line, int col, const char *fmt, ...) {
  fprintf(stderr, "%s:%d:%d: error: ", file, line, col);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

void kf_usage_error(const char *usage, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vdiag(KF_ERROR, NULL, NULL, fmt, ap);
  va_end(ap);
  fputs(usage, stderr);
}
