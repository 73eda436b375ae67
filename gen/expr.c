/* expr.c: a recursive-descent evaluator for the small expression language of
 * descriptions and template schemas (see expr.h). */
#include "expr.h"

#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *src;
  const char *p;
  kf_lookup_fn lookup;
  void *ctx;
  char *err;
  size_t errlen;
  int failed;
  int depth; /* open parentheses and unary minuses around the atom being parsed */
} parser;

/* Deeper nesting than any real expression needs is refused, so that hostile
 * input cannot run the recursive descent off the stack. */
#define EXPR_MAX_DEPTH 64

static void fail(parser *ps, const char *fmt, const char *arg) {
  if (ps->failed)
    return;
  ps->failed = 1;
  char what[160];
  snprintf(what, sizeof what, fmt, arg);
  snprintf(ps->err, ps->errlen, "%s at column %d of \"%s\"", what, (int)(ps->p - ps->src) + 1,
           ps->src);
}

static void skip_ws(parser *ps) {
  while (isspace((unsigned char)*ps->p))
    ps->p++;
}

static kf_value parse_sum(parser *ps);

/* min(a, b, ...) / max(a, b, ...) (is_max), at least two arguments; the
 * result is a float when any argument is. open points at the '('. */
static kf_value parse_min_max(parser *ps, const char *open, int is_max) {
  kf_value best = {0, 0, 0};
  if (ps->depth >= EXPR_MAX_DEPTH) {
    fail(ps, "nested deeper than %s levels", KF_STR(EXPR_MAX_DEPTH));
    return best;
  }
  ps->p = open + 1;
  ps->depth++;
  int n = 0;
  for (;;) {
    kf_value v = parse_sum(ps);
    if (ps->failed)
      break;
    if (n == 0) {
      best = v;
    } else {
      const int any_float = best.is_float || v.is_float;
      const double x = kf_value_as_double(best), y = kf_value_as_double(v);
      const int take =
          is_max ? (any_float ? y > x : v.i > best.i) : (any_float ? y < x : v.i < best.i);
      if (any_float) {
        best.f = take ? y : x;
        best.is_float = 1;
      } else if (take) {
        best = v;
      }
    }
    n++;
    skip_ws(ps);
    if (*ps->p == ',') {
      ps->p++;
      continue;
    }
    if (*ps->p != ')')
      fail(ps, "expected ',' or ')'%s", "");
    else
      ps->p++;
    break;
  }
  ps->depth--;
  if (!ps->failed && n < 2)
    fail(ps, "%s() takes at least two arguments", is_max ? "max" : "min");
  return best;
}

static kf_value parse_atom(parser *ps) {
  kf_value v = {0, 0, 0};
  skip_ws(ps);
  char c = *ps->p;
  if ((c == '(' || c == '-') && ps->depth >= EXPR_MAX_DEPTH) {
    fail(ps, "nested deeper than %s levels", KF_STR(EXPR_MAX_DEPTH));
    return v;
  }
  if (c == '(') {
    ps->p++;
    ps->depth++;
    v = parse_sum(ps);
    ps->depth--;
    skip_ws(ps);
    if (*ps->p != ')')
      fail(ps, "expected ')'%s", "");
    else
      ps->p++;
    return v;
  }
  if (c == '-') {
    ps->p++;
    ps->depth++;
    v = parse_atom(ps);
    ps->depth--;
    if (v.is_float)
      v.f = -v.f;
    else if (v.i == INT64_MIN)
      fail(ps, "integer overflow%s", "");
    else
      v.i = -v.i;
    return v;
  }
  if (isdigit((unsigned char)c) || c == '.') {
    const char *start = ps->p;
    int is_float = 0;
    while (isalnum((unsigned char)*ps->p) || *ps->p == '.' ||
           ((*ps->p == '+' || *ps->p == '-') && (ps->p[-1] == 'e' || ps->p[-1] == 'E'))) {
      if (*ps->p == '.' || *ps->p == 'e' || *ps->p == 'E')
        is_float = 1;
      ps->p++;
    }
    char num[64];
    size_t n = (size_t)(ps->p - start);
    if (n >= sizeof num) {
      fail(ps, "number too long%s", "");
      return v;
    }
    memcpy(num, start, n);
    num[n] = '\0';
    char *end;
    if (is_float) {
      v.is_float = 1;
      v.f = strtod(num, &end);
    } else {
      errno = 0;
      v.i = strtoll(num, &end, 10);
      if (errno == ERANGE) {
        fail(ps, "integer %s is out of range", num);
        return v;
      }
    }
    if (*end)
      fail(ps, "bad number '%s'", num);
    return v;
  }
  if (isalpha((unsigned char)c) || c == '_') {
    const char *start = ps->p;
    while (isalnum((unsigned char)*ps->p) || *ps->p == '_')
      ps->p++;
    char name[128];
    size_t n = (size_t)(ps->p - start);
    if (n >= sizeof name)
      n = sizeof name - 1;
    memcpy(name, start, n);
    name[n] = '\0';
    const char *after = ps->p;
    while (*after == ' ' || *after == '\t')
      after++;
    if (*after == '(' && (!strcmp(name, "min") || !strcmp(name, "max")))
      return parse_min_max(ps, after, name[1] == 'a');
    if (!ps->lookup || ps->lookup(ps->ctx, name, &v) != 0) {
      ps->p = start;
      fail(ps, "unknown name '%s'", name);
    }
    return v;
  }
  if (c == '\0')
    fail(ps, "unexpected end of expression%s", "");
  else {
    char s[2] = {c, 0};
    fail(ps, "unexpected '%s'", s);
  }
  return v;
}

static kf_value apply(parser *ps, char op, kf_value a, kf_value b) {
  kf_value r = {0, 0, 0};
  if (a.is_float || b.is_float) {
    double x = kf_value_as_double(a), y = kf_value_as_double(b);
    r.is_float = 1;
    switch (op) {
    case '+':
      r.f = x + y;
      break;
    case '-':
      r.f = x - y;
      break;
    case '*':
      r.f = x * y;
      break;
    case '/':
      if (y == 0)
        fail(ps, "division by zero%s", "");
      else
        r.f = x / y;
      break;
    default:
      if (y == 0)
        fail(ps, "division by zero%s", "");
      else
        r.f = fmod(x, y);
    }
    return r;
  }
  long long res = 0;
  int overflow = 0;
  switch (op) {
  case '+':
    overflow = __builtin_add_overflow(a.i, b.i, &res);
    break;
  case '-':
    overflow = __builtin_sub_overflow(a.i, b.i, &res);
    break;
  case '*':
    overflow = __builtin_mul_overflow(a.i, b.i, &res);
    break;
  default:
    if (b.i == 0) {
      fail(ps, "division by zero%s", "");
      return r;
    }
    if (a.i == INT64_MIN && b.i == -1) {
      overflow = 1;
      break;
    }
    res = op == '/' ? a.i / b.i : a.i % b.i;
  }
  if (overflow)
    fail(ps, "integer overflow%s", "");
  r.i = res;
  return r;
}

static kf_value parse_product(parser *ps) {
  kf_value v = parse_atom(ps);
  for (;;) {
    skip_ws(ps);
    char op = *ps->p;
    if (op != '*' && op != '/' && op != '%')
      return v;
    ps->p++;
    kf_value rhs = parse_atom(ps);
    if (ps->failed)
      return v;
    v = apply(ps, op, v, rhs);
  }
}

static kf_value parse_sum(parser *ps) {
  kf_value v = parse_product(ps);
  for (;;) {
    skip_ws(ps);
    char op = *ps->p;
    if (op != '+' && op != '-')
      return v;
    ps->p++;
    kf_value rhs = parse_product(ps);
    if (ps->failed)
      return v;
    v = apply(ps, op, v, rhs);
  }
}

int kf_expr_eval(const char *src, kf_lookup_fn lookup, void *ctx, kf_value *out, char *err,
                 size_t errlen) {
  parser ps = {src, src, lookup, ctx, err, errlen, 0, 0};
  kf_value v = parse_sum(&ps);
  skip_ws(&ps);
  if (!ps.failed && *ps.p) {
    char s[2] = {*ps.p, 0};
    fail(&ps, "unexpected '%s'", s);
  }
  if (ps.failed)
    return -1;
  if (v.is_float && !isfinite(v.f)) {
    snprintf(err, errlen, "not a finite number: \"%s\"", src);
    return -1;
  }
  *out = v;
  return 0;
}

double kf_value_as_double(kf_value v) { return v.is_float ? v.f : (double)v.i; }

void kf_value_format(kf_value v, char *buf, size_t n) {
  if (v.is_float)
    snprintf(buf, n, "%.9g", v.f);
  else
    snprintf(buf, n, "%lld", (long long)v.i);
}
