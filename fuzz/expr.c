/* fuzz/expr.c: the expression language (gen/expr.c), which evaluates a
 * description's parameter values and a schema's launch expressions. The
 * input is one expression; names resolve over a fixed table with the
 * extremes an attacker would reach for. */
#include "fuzz_common.h"

#include "expr.h"

static int lookup(void *ctx, const char *name, kf_value *out) {
  (void)ctx;
  static const struct {
    const char *name;
    kf_value v;
  } names[] = {
      {"hidden_size", {0, 4096, 0}},
      {"head_dim", {0, 128, 0}},
      {"W", {0, 8, 0}},
      {"MMA", {0, 1, 0}},
      {"zero", {0, 0, 0}},
      {"neg", {0, -1, 0}},
      {"big", {0, INT64_MAX, 0}},
      {"small", {0, INT64_MIN, 0}},
      {"eps", {1, 0, 1e-6}},
      {"huge", {1, 0, 1e308}},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(names[i].name, name)) {
      *out = names[i].v;
      return 0;
    }
  return -1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_init();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *src = fz_cstr(data, size);
  kf_value v;
  char err[256], text[64];
  if (kf_expr_eval(src, lookup, NULL, &v, err, sizeof err) == 0) {
    kf_value_format(v, text, sizeof text);
    (void)kf_value_as_double(v);
  }
  free(src);
  return 0;
}
