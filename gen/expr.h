/* expr.h: integer/float expressions in descriptions and template schemas,
 * e.g. "(num_attention_heads + 2*num_key_value_heads) * head_dim".
 *
 * Grammar: numbers, names, + - * / %, unary minus, parentheses, min(a, b,
 * ...) and max(a, b, ...). Integer
 * arithmetic is exact (int64, overflow is an error); an operation with a float
 * operand is done in double. */
#ifndef KF_EXPR_H
#define KF_EXPR_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int is_float; /* 1: f holds the value; 0: i does */
  int64_t i;
  double f;
} kf_value;

/* Looks a name up; returns 0 and sets *out, or -1 when the name is unknown. */
typedef int (*kf_lookup_fn)(void *ctx, const char *name, kf_value *out);

/* Evaluates src. Returns 0, or -1 with a one-line reason in err. */
int kf_expr_eval(const char *src, kf_lookup_fn lookup, void *ctx, kf_value *out, char *err,
                 size_t errlen);

double kf_value_as_double(kf_value v);
/* Canonical text of a value: integers in decimal, floats with %.9g (the
 * precision a float template parameter keeps). Writes at most n bytes. */
void kf_value_format(kf_value v, char *buf, size_t n);

#endif /* KF_EXPR_H */
