/* Tests of gen/expr.c: the expression language of descriptions and template
 * schemas (grammar in expr.h and docs/contracts.md): precedence, integer
 * versus float arithmetic, and errors that say what went wrong and where. */
#include "gen_fixture.h"

#include "expr.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int lookup(void *ctx, const char *name, kf_value *out) {
  (void)ctx;
  if (!strcmp(name, "hidden_size")) {
    *out = (kf_value){0, 1024, 0};
    return 0;
  }
  if (!strcmp(name, "heads")) {
    *out = (kf_value){0, 16, 0};
    return 0;
  }
  if (!strcmp(name, "eps")) {
    *out = (kf_value){1, 0, 1e-6};
    return 0;
  }
  if (!strcmp(name, "int_max")) {
    *out = (kf_value){0, INT64_MAX, 0};
    return 0;
  }
  if (!strcmp(name, "int_min")) {
    *out = (kf_value){0, INT64_MIN, 0};
    return 0;
  }
  return -1;
}

static char err[256];

/* Evaluates src expecting an integer result. */
static int int_is(const char *src, int64_t want) {
  kf_value v = {0, 0, 0};
  err[0] = '\0';
  if (kf_expr_eval(src, lookup, NULL, &v, err, sizeof err) != 0) {
    fprintf(stderr, "\"%s\" failed: %s\n", src, err);
    return 0;
  }
  if (v.is_float || v.i != want) {
    fprintf(stderr, "\"%s\" = %s%lld / %g, want integer %lld\n", src, v.is_float ? "float " : "",
            (long long)v.i, v.f, (long long)want);
    return 0;
  }
  return 1;
}

static int float_is(const char *src, double want) {
  kf_value v = {0, 0, 0};
  err[0] = '\0';
  if (kf_expr_eval(src, lookup, NULL, &v, err, sizeof err) != 0) {
    fprintf(stderr, "\"%s\" failed: %s\n", src, err);
    return 0;
  }
  if (!v.is_float || v.f != want) {
    fprintf(stderr, "\"%s\" = %s%.17g, want float %.17g\n", src, v.is_float ? "" : "integer ",
            v.is_float ? v.f : (double)v.i, want);
    return 0;
  }
  return 1;
}

/* Evaluates src expecting an error; the reason is left in err. */
static int fails(const char *src) {
  kf_value v = {0, 0, 0};
  err[0] = '\0';
  if (kf_expr_eval(src, lookup, NULL, &v, err, sizeof err) == 0) {
    fprintf(stderr, "\"%s\" evaluated to %lld / %g, want an error\n", src, (long long)v.i, v.f);
    return 0;
  }
  return 1;
}

KF_TEST(expr__multiplication_binds_tighter_than_addition) {
  KF_CHECK(int_is("2 + 3 * 4", 14));
  KF_CHECK(int_is("2 * 3 + 4", 10));
  KF_CHECK(int_is("20 - 6 / 2", 17));
  KF_CHECK(int_is("7 + 10 % 4", 9));
}

KF_TEST(expr__operators_of_one_level_associate_left) {
  KF_CHECK(int_is("10 - 4 - 3", 3));
  KF_CHECK(int_is("64 / 4 / 2", 8));
  KF_CHECK(int_is("100 % 7 * 2", 4));
}

KF_TEST(expr__parentheses_override_precedence) {
  KF_CHECK(int_is("(2 + 3) * 4", 20));
  KF_CHECK(int_is("2 * (3 + 4)", 14));
  KF_CHECK(int_is("((1))", 1));
  KF_CHECK(int_is(" ( heads + 2 * 8 ) * 128 ", 4096));
}

KF_TEST(expr__min_and_max_take_two_or_more_arguments) {
  KF_CHECK(int_is("min(heads, 8)", 8));
  KF_CHECK(int_is("max(heads, 8)", 16));
  KF_CHECK(int_is("min(hidden_size / 16, heads * 2, 40) + 1", 33));
  KF_CHECK(int_is("max (-3, -heads)", -3));
  KF_CHECK(int_is("2 * min(3, max(1, 2))", 4));
  KF_CHECK(float_is("min(eps, 1)", 1e-6));
  KF_CHECK(float_is("max(eps, 1)", 1.0));
  KF_CHECK(fails("min(3)"));
  KF_CHECK_CONTAINS(err, "min() takes at least two arguments");
  KF_CHECK(fails("max(1, 2"));
  KF_CHECK_CONTAINS(err, "expected ',' or ')'");
  KF_CHECK(fails("min()"));
  KF_CHECK(fails("min(1,, 2)"));
  KF_CHECK(fails("mean(1, 2)")); /* only min and max are functions */
  KF_CHECK_CONTAINS(err, "unknown name 'mean'");
}

KF_TEST(expr__unary_minus) {
  KF_CHECK(int_is("-5", -5));
  KF_CHECK(int_is("-(2 + 3)", -5));
  KF_CHECK(int_is("2 * -3", -6));
  KF_CHECK(int_is("--4", 4));
  KF_CHECK(int_is("1 - -1", 2));
}

KF_TEST(expr__integer_division_truncates_toward_zero) {
  KF_CHECK(int_is("7 / 2", 3));
  KF_CHECK(int_is("-7 / 2", -3));
  KF_CHECK(int_is("7 / -2", -3));
  KF_CHECK(int_is("1 / 2", 0));
  KF_CHECK(int_is("-7 % 3", -1));
  KF_CHECK(int_is("hidden_size / 3", 341));
}

KF_TEST(expr__a_float_operand_makes_the_operation_float) {
  KF_CHECK(float_is("7 / 2.0", 3.5));
  KF_CHECK(float_is("7.0 / 2", 3.5));
  KF_CHECK(float_is("1.5 * 2", 3.0)); /* integral, but still a float */
  KF_CHECK(float_is("eps * 10", 1e-6 * 10));
  KF_CHECK(float_is("1e-6", 1e-6));
  KF_CHECK(float_is("2.5e+3", 2500.0));
  KF_CHECK(float_is(".5", 0.5));
  KF_CHECK(float_is("7.5 % 2", 1.5));
  KF_CHECK(float_is("-eps", -1e-6));
  /* the integer part stays integer until a float meets it */
  KF_CHECK(float_is("7 / 2 * 1.0", 3.0));
}

KF_TEST(expr__names_are_looked_up) {
  KF_CHECK(int_is("hidden_size", 1024));
  KF_CHECK(int_is("hidden_size / heads", 64));
}

KF_TEST(expr__unknown_name_is_named_with_its_column) {
  KF_CHECK(fails("2 * hiden_size"));
  KF_CHECK_CONTAINS(err, "unknown name 'hiden_size'");
  KF_CHECK_CONTAINS(err, "column 5");
  KF_CHECK_CONTAINS(err, "\"2 * hiden_size\"");
  /* a lookup-less evaluation knows no names at all */
  kf_value v;
  KF_CHECK(kf_expr_eval("W", NULL, NULL, &v, err, sizeof err) == -1);
  KF_CHECK_CONTAINS(err, "unknown name 'W'");
}

KF_TEST(expr__division_by_zero_is_an_error) {
  KF_CHECK(fails("4 / (2 - 2)"));
  KF_CHECK_CONTAINS(err, "division by zero");
  KF_CHECK_CONTAINS(err, "\"4 / (2 - 2)\"");
  KF_CHECK(fails("4 % 0"));
  KF_CHECK_CONTAINS(err, "division by zero");
  KF_CHECK(fails("1.0 / 0"));
  KF_CHECK_CONTAINS(err, "division by zero");
  KF_CHECK(fails("eps % 0"));
  KF_CHECK_CONTAINS(err, "division by zero");
}

KF_TEST(expr__integer_overflow_is_an_error) {
  KF_CHECK(fails("int_max + 1"));
  KF_CHECK_CONTAINS(err, "integer overflow");
  KF_CHECK(fails("int_min - 1"));
  KF_CHECK_CONTAINS(err, "integer overflow");
  KF_CHECK(fails("4611686018427387904 * 2"));
  KF_CHECK_CONTAINS(err, "integer overflow");
  KF_CHECK(fails("int_min / -1"));
  KF_CHECK_CONTAINS(err, "integer overflow");
  KF_CHECK(int_is("int_max", INT64_MAX)); /* the edges themselves are fine */
  KF_CHECK(int_is("int_min", INT64_MIN));
}

/* expr.h: "Integer arithmetic is exact (int64, overflow is an error)" holds
 * for negation too: -INT64_MIN does not exist. */
KF_TEST(expr__negating_the_smallest_integer_is_an_overflow) {
  KF_CHECK(fails("-int_min"));
  KF_CHECK_CONTAINS(err, "overflow");
  KF_CHECK(fails("-(-9223372036854775807 - 1)"));
  KF_CHECK_CONTAINS(err, "overflow");
}

/* A literal beyond int64 must not silently become INT64_MAX. */
KF_TEST(expr__integer_literal_beyond_int64_is_an_error) {
  KF_CHECK(fails("9223372036854775808"));
  KF_CHECK(fails("99999999999999999999 - 1"));
  KF_CHECK(int_is("9223372036854775807", INT64_MAX));
}

KF_TEST(expr__non_finite_float_result_is_an_error) {
  KF_CHECK(fails("1e999"));
  KF_CHECK_CONTAINS(err, "not a finite number");
  KF_CHECK(fails("1e308 * 10"));
}

KF_TEST(expr__trailing_garbage_is_an_error_with_its_column) {
  KF_CHECK(fails("2 3"));
  KF_CHECK_CONTAINS(err, "unexpected '3' at column 3");
  KF_CHECK(fails("hidden_size)"));
  KF_CHECK_CONTAINS(err, "unexpected ')' at column 12");
  KF_CHECK(fails("4 # comment"));
  KF_CHECK_CONTAINS(err, "unexpected '#' at column 3");
}

KF_TEST(expr__incomplete_expressions_are_errors) {
  KF_CHECK(fails(""));
  KF_CHECK_CONTAINS(err, "unexpected end of expression");
  KF_CHECK(fails("1 +"));
  KF_CHECK_CONTAINS(err, "unexpected end of expression");
  KF_CHECK(fails("(1 + 2"));
  KF_CHECK_CONTAINS(err, "expected ')'");
  KF_CHECK(fails("* 2"));
  KF_CHECK_CONTAINS(err, "unexpected '*' at column 1");
}

KF_TEST(expr__malformed_numbers_are_errors) {
  KF_CHECK(fails("3x"));
  KF_CHECK_CONTAINS(err, "bad number '3x'");
  KF_CHECK(fails("1.2.3"));
  KF_CHECK_CONTAINS(err, "bad number '1.2.3'");
  KF_CHECK(fails("0x10")); /* decimal only */
}

/* Builds prefix*n + mid + suffix*n (caller frees). */
static char *nested(const char *prefix, int n, const char *mid, const char *suffix) {
  size_t lp = strlen(prefix), lm = strlen(mid), ls = strlen(suffix);
  char *s = malloc(n * (lp + ls) + lm + 1), *p = s;
  for (int i = 0; i < n; i++, p += lp)
    memcpy(p, prefix, lp);
  memcpy(p, mid, lm), p += lm;
  for (int i = 0; i < n; i++, p += ls)
    memcpy(p, suffix, ls);
  *p = '\0';
  return s;
}

KF_TEST(expr__nesting_is_bounded_instead_of_overflowing_the_stack) {
  char *ok = nested("(", 64, "heads", ")");
  KF_CHECK(int_is(ok, 16));
  free(ok);
  ok = nested("-", 64, "heads", "");
  KF_CHECK(int_is(ok, 16));
  free(ok);
  /* deep enough to crash a recursive parser without the bound */
  const char *deep[][3] = {{"(", "1", ")"}, {"-", "1", ""}, {"(-", "1", ")"}};
  for (size_t i = 0; i < sizeof deep / sizeof deep[0]; i++) {
    char *bad = nested(deep[i][0], 1000000, deep[i][1], deep[i][2]);
    KF_CHECK(fails(bad));
    KF_CHECK_CONTAINS(err, "nested deeper than 64 levels at column ");
    free(bad);
  }
  char *just_over = nested("(", 65, "1", ")");
  KF_CHECK(fails(just_over));
  KF_CHECK_CONTAINS(err, "nested deeper than 64 levels at column 65");
  free(just_over);
}

KF_TEST(expr__value_format_is_canonical) {
  char buf[64];
  kf_value_format((kf_value){0, -42, 0}, buf, sizeof buf);
  KF_CHECK_STR_EQ(buf, "-42");
  kf_value_format((kf_value){1, 0, 1e-6}, buf, sizeof buf);
  KF_CHECK_STR_EQ(buf, "1e-06");
  kf_value_format((kf_value){1, 0, 0.1}, buf, sizeof buf);
  KF_CHECK_STR_EQ(buf, "0.1");
  kf_value_format((kf_value){1, 0, 2.0}, buf, sizeof buf);
  KF_CHECK_STR_EQ(buf, "2");
  KF_CHECK(kf_value_as_double((kf_value){0, 7, 0}) == 7.0);
}

KF_TEST_MAIN()
