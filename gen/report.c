/* report.c: the diagnostic printer (see report.h). One function formats
 * every line, so the shape cannot drift between commands. */
#include "report.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const level_words[] = {"error", "warning", "note"};

/* Errors printed and held back per file while a cap is on (few files: the
 * description, its family, the schemas it names). */
static int cap_depth;
static struct capped {
  char *file;
  long shown, hidden;
} * capped;
static size_t ncapped;

void kf_report_cap_begin(void) { cap_depth++; }

void kf_report_cap_end(void) {
  if (cap_depth == 0 || --cap_depth > 0)
    return;
  for (size_t i = 0; i < ncapped; i++) {
    if (capped[i].hidden)
      fprintf(stderr, "%s: error: and %ld more error%s (only the first %d are shown)\n",
              capped[i].file, capped[i].hidden, capped[i].hidden == 1 ? "" : "s",
              KF_REPORT_MAX_ERRORS);
    free(capped[i].file);
  }
  free(capped);
  capped = NULL;
  ncapped = 0;
}

/* Whether an error about file is over the cap (and then counts it). */
static int held_back(const char *file) {
  if (!cap_depth)
    return 0;
  size_t i = 0;
  while (i < ncapped && strcmp(capped[i].file, file) != 0)
    i++;
  if (i == ncapped) {
    struct capped *grown = realloc(capped, (ncapped + 1) * sizeof *capped);
    char *copy = strdup(file);
    if (!grown || !copy) { /* out of memory: print rather than lose it */
      free(copy);
      capped = grown ? grown : capped;
      return 0;
    }
    capped = grown;
    capped[ncapped++] = (struct capped){copy, 0, 0};
  }
  if (capped[i].shown < KF_REPORT_MAX_ERRORS) {
    capped[i].shown++;
    return 0;
  }
  capped[i].hidden++;
  return 1;
}

static void vdiag(kf_level level, const char *file, const char *path, const char *fmt, va_list ap) {
  if (level == KF_ERROR && held_back(file ? file : "kforge"))
    return;
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
  if (held_back(file))
    return;
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
