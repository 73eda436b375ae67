/* json.c: cJSON loading with line:column syntax errors and the generator's
 * error-report format (see json.h). */
#define _GNU_SOURCE
#include "json.h"

#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kf_report(const char *display, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (path && *path)
    fprintf(stderr, "%s: %s: error: ", display, path);
  else
    fprintf(stderr, "%s: error: ", display);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* cJSON stops at the first byte it cannot use; say what went wrong there in
 * the terms a person editing the file would use. */
static void syntax_hint(const char *text, const char *at, char *msg, size_t n) {
  const char *prev = at;
  while (prev > text &&
         (prev[-1] == ' ' || prev[-1] == '\t' || prev[-1] == '\n' || prev[-1] == '\r'))
    prev--;
  char before = prev > text ? prev[-1] : '\0';
  char c = *at;
  if (c == '\0')
    snprintf(msg, n, "unexpected end of file (an unclosed '{', '[' or string?)");
  else if (c == '/' && (at[1] == '/' || at[1] == '*'))
    snprintf(msg, n, "comments are not allowed in JSON");
  else if (c == '\'')
    snprintf(msg, n, "strings must use double quotes, not single quotes");
  else if ((c == '}' || c == ']') && before == ',')
    snprintf(msg, n, "trailing ',' before '%c' is not allowed in JSON", c);
  else if (c == '"' && before != '{' && before != '[' && before != ',' && before != ':')
    snprintf(msg, n, "expected ',' after member");
  else if ((c == '}' || c == ']' || c == ',') && before == ':')
    snprintf(msg, n, "expected a value after ':'");
  else if (before == '"' && c != ':')
    snprintf(msg, n, "expected ':' or ',' after string, got '%c'", c);
  else if (c >= 0x20 && c < 0x7f)
    snprintf(msg, n, "unexpected '%c'", c);
  else
    snprintf(msg, n, "unexpected byte 0x%02x", (unsigned char)c);
}

cJSON *kf_json_parse(const char *text, size_t len, const char *display) {
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1); /* text[len] is NUL */
  if (root)
    return root;
  const char *at = cJSON_GetErrorPtr();
  if (!at || at < text || at > text + len)
    at = end && end >= text && end <= text + len ? end : text + len;
  int line = 1, col = 1;
  for (const char *p = text; p < at; p++) {
    if (*p == '\n') {
      line++;
      col = 1;
    } else {
      col++;
    }
  }
  char msg[160];
  syntax_hint(text, at, msg, sizeof msg);
  fprintf(stderr, "%s:%d:%d: error: %s\n", display, line, col, msg);
  return NULL;
}

cJSON *kf_json_load(const char *path, const char *display) {
  size_t len;
  char *text = kf_read_file(path, &len);
  if (!text) {
    fprintf(stderr, "%s: error: cannot read: %s\n", display, strerror(errno));
    return NULL;
  }
  if (memchr(text, '\0', len)) {
    fprintf(stderr, "%s: error: not a text file (contains a NUL byte)\n", display);
    free(text);
    return NULL;
  }
  cJSON *root = kf_json_parse(text, len, display);
  free(text);
  return root;
}

int kf_json_check_members(const char *display, const char *path, const cJSON *obj,
                          const char *const *allowed) {
  int problems = 0;
  for (const cJSON *m = obj->child; m; m = m->next) {
    for (const cJSON *o = obj->child; o != m; o = o->next) {
      if (strcmp(o->string, m->string) == 0) {
        char *p = *path ? kf_xasprintf("%s.%s", path, m->string) : kf_xstrdup(m->string);
        kf_report(display, p, "duplicate member \"%s\"", m->string);
        free(p);
        problems++;
        break;
      }
    }
    int ok = 0;
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (const char *const *a = allowed; *a; a++) {
      if (strcmp(*a, m->string) == 0) {
        ok = 1;
        break;
      }
      size_t d = kf_edit_distance(*a, m->string);
      if (d < best_d) {
        best_d = d;
        best = *a;
      }
    }
    if (ok)
      continue;
    problems++;
    char *p = *path ? kf_xasprintf("%s.%s", path, m->string) : kf_xstrdup(m->string);
    kf_buf list = {0};
    for (const char *const *a = allowed; *a; a++)
      kf_buf_printf(&list, "%s%s", a == allowed ? "" : ", ", *a);
    if (best && best_d <= 2)
      kf_report(display, p, "unknown field \"%s\" (did you mean \"%s\"?)", m->string, best);
    else
      kf_report(display, p, "unknown field \"%s\"; allowed: %s", m->string, list.data);
    kf_buf_free(&list);
    free(p);
  }
  return problems;
}

const char *kf_json_type_name(const cJSON *v) {
  if (!v)
    return "nothing";
  if (cJSON_IsString(v))
    return "a string";
  if (cJSON_IsNumber(v))
    return "a number";
  if (cJSON_IsBool(v))
    return "a boolean";
  if (cJSON_IsNull(v))
    return "null";
  if (cJSON_IsArray(v))
    return "an array";
  if (cJSON_IsObject(v))
    return "an object";
  return "an invalid value";
}
