/* json.c: cJSON loading with line:column syntax errors (see json.h); the
 * messages go through the reporter (report.h). */
#define _GNU_SOURCE
#include "json.h"

#include "report.h"
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Finding where a syntax error is. cJSON says only that parsing failed and
 * roughly where it stopped (often inside the token after the mistake), so
 * when it fails, this small scanner walks the same grammar to the first byte
 * that is wrong and names the mistake in the terms of a person editing the
 * file. It never decides whether a file is valid: cJSON does. */
typedef struct {
  const char *text, *end, *p;
  const char *err_at;
  char msg[160];
} locator;

static int loc_fail(locator *L, const char *at, const char *fmt, ...) {
  if (!L->err_at) {
    L->err_at = at;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->msg, sizeof L->msg, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static int loc_unexpected(locator *L) {
  const char *p = L->p;
  if (p >= L->end)
    return loc_fail(L, p, "unexpected end of file (an unclosed '{', '[' or string?)");
  if (*p == '/' && p + 1 < L->end && (p[1] == '/' || p[1] == '*'))
    return loc_fail(L, p, "comments are not allowed in JSON");
  if (*p == '\'')
    return loc_fail(L, p, "strings must use double quotes, not single quotes");
  if ((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f)
    return loc_fail(L, p, "unexpected '%c'", *p);
  return loc_fail(L, p, "unexpected byte 0x%02x", (unsigned char)*p);
}

static void loc_ws(locator *L) {
  while (L->p < L->end && (*L->p == ' ' || *L->p == '\t' || *L->p == '\n' || *L->p == '\r'))
    L->p++;
}

static int loc_value(locator *L, int depth);

static int loc_string(locator *L) {
  L->p++; /* opening quote */
  while (L->p < L->end && *L->p != '"') {
    if ((unsigned char)*L->p < 0x20)
      return loc_fail(L, L->p, "control character in a string (a newline must be written \\n)");
    if (*L->p == '\\' && L->end - L->p >= 6 && !memcmp(L->p + 1, "u0000", 5))
      return loc_fail(L, L->p,
                      "a string may not contain \\u0000 (NUL): it would cut the string short");
    L->p += *L->p == '\\' ? 2 : 1;
  }
  if (L->p >= L->end)
    return loc_fail(L, L->end, "unexpected end of file (an unclosed '{', '[' or string?)");
  L->p++;
  return 0;
}

static int loc_number(locator *L) {
  const char *start = L->p;
  if (*L->p == '-')
    L->p++;
  int digits = 0;
  while (L->p < L->end && ((*L->p >= '0' && *L->p <= '9') || *L->p == '.' || *L->p == 'e' ||
                           *L->p == 'E' || ((*L->p == '+' || *L->p == '-') && digits))) {
    digits++;
    L->p++;
  }
  return digits ? 0 : loc_fail(L, start, "bad number");
}

static int loc_members(locator *L, char close, int depth) {
  L->p++; /* '{' or '[' */
  loc_ws(L);
  if (L->p < L->end && *L->p == close) {
    L->p++;
    return 0;
  }
  for (;;) {
    loc_ws(L);
    if (L->p < L->end && *L->p == close)
      return loc_fail(L, L->p, "trailing ',' before '%c' is not allowed in JSON", close);
    if (close == '}') {
      if (L->p >= L->end || *L->p != '"')
        return loc_unexpected(L);
      if (loc_string(L))
        return -1;
      loc_ws(L);
      if (L->p >= L->end)
        return loc_unexpected(L);
      if (*L->p != ':')
        return loc_fail(L, L->p, "expected ':' or ',' after string, got '%c'", *L->p);
      L->p++;
      loc_ws(L);
      if (L->p < L->end && (*L->p == '}' || *L->p == ',' || *L->p == ']'))
        return loc_fail(L, L->p, "expected a value after ':'");
    }
    if (loc_value(L, depth + 1))
      return -1;
    loc_ws(L);
    if (L->p >= L->end)
      return loc_unexpected(L);
    if (*L->p == close) {
      L->p++;
      return 0;
    }
    if (*L->p != ',') {
      if (close == '}' && *L->p == '"')
        return loc_fail(L, L->p, "expected ',' after member");
      if (close == ']' &&
          (*L->p == '"' || *L->p == '{' || *L->p == '[' || (*L->p >= '0' && *L->p <= '9')))
        return loc_fail(L, L->p, "expected ',' after element");
      return loc_unexpected(L);
    }
    L->p++;
  }
}

static int loc_value(locator *L, int depth) {
  loc_ws(L);
  if (L->p >= L->end || depth > 512)
    return loc_unexpected(L);
  char c = *L->p;
  if (c == '{')
    return loc_members(L, '}', depth);
  if (c == '[')
    return loc_members(L, ']', depth);
  if (c == '"')
    return loc_string(L);
  if (c == '-' || (c >= '0' && c <= '9'))
    return loc_number(L);
  static const char *const words[] = {"true", "false", "null"};
  for (int i = 0; i < 3; i++) {
    size_t n = strlen(words[i]);
    if ((size_t)(L->end - L->p) >= n && !strncmp(L->p, words[i], n)) {
      L->p += n;
      return 0;
    }
  }
  return loc_unexpected(L);
}

/* The first syntax error in text: its position and a message. */
static const char *locate_error(const char *text, size_t len, char *msg, size_t n) {
  locator L = {text, text + len, text, NULL, ""};
  if (loc_value(&L, 0) == 0) {
    loc_ws(&L);
    if (L.p < L.end)
      loc_unexpected(&L);
  }
  if (!L.err_at)
    return NULL;
  snprintf(msg, n, "%s", L.msg);
  return L.err_at;
}

cJSON *kf_json_parse(const char *text, size_t len, const char *display) {
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1); /* text[len] is NUL */
  /* cJSON accepts \u0000 and ends the C string there, so "sm_90a\u0000x" would
   * read as "sm_90a": the scanner refuses it */
  if (root && !memmem(text, len, "\\u0000", 6))
    return root;
  char msg[160];
  const char *at = locate_error(text, len, msg, sizeof msg);
  if (root && !at)
    return root;
  cJSON_Delete(root);
  if (!at) {
    /* cJSON refused what the scanner accepts (nesting depth, say) */
    at = cJSON_GetErrorPtr();
    if (!at || at < text || at > text + len)
      at = end && end >= text && end <= text + len ? end : text + len;
    snprintf(msg, sizeof msg, "cannot parse here (cJSON refused the document)");
  }
  int line = 1, col = 1;
  for (const char *p = text; p < at; p++) {
    if (*p == '\n') {
      line++;
      col = 1;
    } else {
      col++;
    }
  }
  kf_error_pos(display, line, col, "%s", msg);
  return NULL;
}

cJSON *kf_json_load(const char *path, const char *display) {
  size_t len;
  char *text = kf_read_file(path, &len);
  if (!text) {
    kf_error(display, NULL, "cannot read: %s", kf_read_error(errno));
    return NULL;
  }
  if (memchr(text, '\0', len)) {
    kf_error(display, NULL, "not a text file (contains a NUL byte)");
    free(text);
    return NULL;
  }
  cJSON *root = kf_json_parse(text, len, display);
  free(text);
  return root;
}

unsigned char *kf_json_duplicates(const cJSON *obj, size_t *n) {
  size_t count = 0;
  for (const cJSON *m = obj->child; m; m = m->next)
    count++;
  unsigned char *dup = kf_xcalloc(count ? count : 1, 1);
  *n = 0;
  /* open addressing, at most half full: linear in the number of members
   * (100k shape fields must not take seconds) */
  size_t size = 16;
  while (size < 2 * count)
    size *= 2;
  const char **table = kf_xcalloc(size, sizeof *table);
  size_t i = 0;
  for (const cJSON *m = obj->child; m; m = m->next, i++) {
    const char *name = m->string ? m->string : "";
    size_t h = (size_t)XXH3_64bits(name, strlen(name)) & (size - 1);
    while (table[h] && strcmp(table[h], name) != 0)
      h = (h + 1) & (size - 1);
    if (table[h]) {
      dup[i] = 1;
      (*n)++;
    } else {
      table[h] = name;
    }
  }
  free(table);
  return dup;
}

int kf_json_check_members(const char *display, const char *path, const cJSON *obj,
                          const char *const *allowed) {
  int problems = kf_json_check_unique(display, path, obj);
  for (const cJSON *m = obj->child; m; m = m->next) {
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
      kf_error(display, p, "unknown field \"%s\" (did you mean \"%s\"?)", m->string, best);
    else
      kf_error(display, p, "unknown field \"%s\"; allowed: %s", m->string, list.data);
    kf_buf_free(&list);
    free(p);
  }
  return problems;
}

int kf_json_check_unique(const char *display, const char *path, const cJSON *obj) {
  if (!obj)
    return 0;
  size_t ndup;
  unsigned char *dup = kf_json_duplicates(obj, &ndup);
  size_t i = 0;
  for (const cJSON *m = obj->child; m; m = m->next, i++) {
    if (!dup[i])
      continue;
    const char *name = m->string ? m->string : "";
    char *p = path && *path ? kf_xasprintf("%s.%s", path, name) : kf_xstrdup(name);
    kf_error(display, p, "duplicate member \"%s\"", name);
    free(p);
  }
  free(dup);
  return (int)ndup;
}

char *kf_json_dup_string(const cJSON *obj, const char *name) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  return cJSON_IsString(v) ? kf_xstrdup(v->valuestring) : NULL;
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
