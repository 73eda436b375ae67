/* JSON scanning without a tree: where a value ends, and where a manifest's
 * "kernels" array, each of its entries and its "signatures" lie. It lets an eager open parse
 * the manifest's header first and then each kernel's entry just before that
 * kernel is loaded, instead of parsing all of it before the first load.
 *
 * The scanner allocates nothing and checks the JSON grammar as cJSON reads
 * it (any byte up to 32 is whitespace, strings may hold raw control bytes,
 * escapes and surrogate pairs are checked). Where the two could disagree it
 * errs on refusing: a refused text is parsed whole by cJSON, which accepts
 * it or says where it is wrong, exactly as before the scanner existed. */
#include "rt_internal.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>

#define DEPTH_MAX 64  /* deeper texts are left to cJSON (its limit: 1000) */
#define NUMBER_MAX 63 /* cJSON reads at most 63 characters of a number */

typedef const unsigned char *pos;

static pos skip_ws(pos p, pos end) {
  while (p < end && *p <= 32)
    p++;
  return p;
}

static int hex4(pos p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned c = p[i];
    if (c >= '0' && c <= '9')
      c -= '0';
    else if (c >= 'a' && c <= 'f')
      c -= 'a' - 10;
    else if (c >= 'A' && c <= 'F')
      c -= 'A' - 10;
    else
      return -1;
    v = v << 4 | c;
  }
  *out = v;
  return 0;
}

/* The first '"' or '\\' at or after p, or end. Strings are most of a
 * manifest's bytes: eight at a time where the byte order allows. */
static pos find_quote(pos p, pos end) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
  for (; end - p >= 8; p += 8) {
    uint64_t v, q, b, hit;
    memcpy(&v, p, 8);
    q = v ^ (ones * '"');
    b = v ^ (ones * '\\');
    /* high bit of each zero byte of q or b; the lowest is exact */
    hit = (((q - ones) & ~q) | ((b - ones) & ~b)) & highs;
    if (hit)
      return p + (__builtin_ctzll(hit) >> 3);
  }
#endif
  while (p < end && *p != '"' && *p != '\\')
    p++;
  return p;
}

/* p at the opening quote; returns past the closing one, NULL if malformed.
 * *escaped tells whether the string held a backslash. */
static pos skip_string(pos p, pos end, int *escaped) {
  *escaped = 0;
  for (p++;; p++) {
    if ((p = find_quote(p, end)) >= end)
      return NULL;
    if (*p == '"')
      return p + 1;
    *escaped = 1;
    if (++p >= end)
      return NULL;
    switch (*p) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't':
      break;
    case 'u': {
      unsigned u, lo;
      if (end - p < 5 || hex4(p + 1, &u) != 0 || (u >= 0xDC00 && u <= 0xDFFF))
        return NULL;
      p += 4;
      if (u >= 0xD800 && u <= 0xDBFF) { /* a high surrogate needs its low half */
        if (end - p < 7 || p[1] != '\\' || p[2] != 'u' || hex4(p + 3, &lo) != 0 || lo < 0xDC00 ||
            lo > 0xDFFF)
          return NULL;
        p += 6;
      }
      break;
    }
    default:
      return NULL;
    }
  }
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static pos skip_number(pos p, pos end) {
  pos start = p;
  if (p < end && *p == '-')
    p++;
  if (p < end && *p == '0')
    p++;
  else if (p < end && *p >= '1' && *p <= '9')
    while (p < end && *p >= '0' && *p <= '9')
      p++;
  else
    return NULL;
  if (p < end && *p == '.') {
    pos digits = ++p;
    while (p < end && *p >= '0' && *p <= '9')
      p++;
    if (p == digits)
      return NULL;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    pos digits;
    p++;
    if (p < end && (*p == '+' || *p == '-'))
      p++;
    digits = p;
    while (p < end && *p >= '0' && *p <= '9')
      p++;
    if (p == digits)
      return NULL;
  }
  return p - start <= NUMBER_MAX ? p : NULL;
}

static pos skip_literal(pos p, pos end, const char *word, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p + i >= end || p[i] != (unsigned char)word[i])
      return NULL;
  return p + n;
}

static pos skip_value(pos p, pos end, int depth);

/* p at '[' or '{' at nesting depth; returns past its close, NULL if
 * malformed or nested deeper than DEPTH_MAX. count: NULL, or where to count
 * the elements (members). */
static pos skip_container(pos p, pos end, int depth, int *count) {
  unsigned char close = *p == '[' ? ']' : '}';
  int escaped;
  if (depth >= DEPTH_MAX)
    return NULL;
  p = skip_ws(p + 1, end);
  if (p < end && *p == close)
    return p + 1;
  for (;;) {
    if (close == '}') {
      if (p >= end || *p != '"' || !(p = skip_string(p, end, &escaped)))
        return NULL;
      p = skip_ws(p, end);
      if (p >= end || *p != ':')
        return NULL;
      p = skip_ws(p + 1, end);
    }
    if (!(p = skip_value(p, end, depth + 1)))
      return NULL;
    if (count) {
      if (*count == INT_MAX)
        return NULL;
      ++*count;
    }
    p = skip_ws(p, end);
    if (p < end && *p == close)
      return p + 1;
    if (p >= end || *p != ',')
      return NULL;
    p = skip_ws(p + 1, end);
  }
}

/* p at a value (no whitespace before it); returns past it, NULL if
 * malformed or nested deeper than DEPTH_MAX. */
static pos skip_value(pos p, pos end, int depth) {
  int escaped;
  if (p >= end)
    return NULL;
  switch (*p) {
  case '"':
    return skip_string(p, end, &escaped);
  case 't':
    return skip_literal(p, end, "true", 4);
  case 'f':
    return skip_literal(p, end, "false", 5);
  case 'n':
    return skip_literal(p, end, "null", 4);
  case '[':
  case '{':
    return skip_container(p, end, depth, NULL);
  default:
    return skip_number(p, end);
  }
}

size_t rt_json_skip(const char *text, size_t len, size_t at) {
  pos start = (pos)text, end = start + len, p;
  if (at > len)
    return 0;
  p = skip_value(skip_ws(start + at, end), end, 0);
  return p ? (size_t)(p - start) : 0;
}

/* Whether the member name at name (its opening quote; end past the closing
 * one) is key. */
static int name_is(pos name, pos end, const char *key) {
  size_t n = strlen(key);
  return (size_t)(end - name) == n + 2 && memcmp(name + 1, key, n) == 0;
}

int rt_json_scan_manifest(const char *text, size_t len, rt_json_layout *out) {
  pos start = (pos)text, end = start + len, p = skip_ws(start, end);
  int seen = 0, seen_sigs = 0, escaped;

  out->kernels_start = out->kernels_end = 0;
  out->nkernels = 0;
  out->sigs_start = out->sigs_end = 0;
  if (p >= end || *p != '{')
    return -1;
  p = skip_ws(p + 1, end);
  if (p < end && *p == '}')
    p++;
  else
    for (;;) {
      pos name = p, v;
      int is_kernels, is_sigs;
      if (p >= end || *p != '"' || !(p = skip_string(p, end, &escaped)) || escaped)
        return -1; /* an escaped name may spell "kernels": cJSON decides */
      is_kernels = !seen && name_is(name, p, "kernels");
      is_sigs = !seen_sigs && name_is(name, p, "signatures");
      p = skip_ws(p, end);
      if (p >= end || *p != ':')
        return -1;
      v = p = skip_ws(p + 1, end);
      if (is_kernels && p < end && *p == '[') {
        /* cJSON reads the first "kernels"; a later one is only skipped */
        if (!(p = skip_container(p, end, 1, &out->nkernels)))
          return -1;
        out->kernels_start = (size_t)(v - start);
        out->kernels_end = (size_t)(p - start);
      } else if (!(p = skip_value(p, end, 1))) {
        return -1;
      } else if (is_sigs) {
        /* like "kernels", cJSON reads the first "signatures" */
        out->sigs_start = (size_t)(v - start);
        out->sigs_end = (size_t)(p - start);
      }
      seen |= is_kernels;
      seen_sigs |= is_sigs;
      p = skip_ws(p, end);
      if (p < end && *p == '}') {
        p++;
        break;
      }
      if (p >= end || *p != ',')
        return -1;
      p = skip_ws(p + 1, end);
    }
  /* cJSON ignores what follows the object; the scanner leaves that to it */
  return skip_ws(p, end) == end ? 0 : -1;
}
