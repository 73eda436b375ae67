/* fuzz/schema.c: a template schema (templates/<template>.json, gen/schema.c)
 * as `kforge build` loads it, then every launch expression evaluated for a
 * kernel with each parameter at an allowed value, at widths 1 and 8, with
 * and without MMA. The schema is written under its own "template" name
 * (when that is a plain name) with an empty header beside it. */
#include "fuzz_common.h"

#include "schema.h"

#include <cjson/cJSON.h>

/* name when it is a plain file name of [a-z0-9_.-], else fallback. */
static const char *plain_name(const cJSON *v, const char *fallback) {
  if (!cJSON_IsString(v) || !*v->valuestring || strlen(v->valuestring) > 64 ||
      v->valuestring[0] == '.')
    return fallback;
  for (const char *p = v->valuestring; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '.' ||
          *p == '-'))
      return fallback;
  return v->valuestring;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_init();
  mkdir(fz_path("t"), 0755);
  return 0;
}

static void evaluate(kf_template *t) {
  kf_kernel_desc k = {.kind = "fuzz", .tmpl = t, .source_file = "fuzz"};
  k.values = calloc(t->nparams ? t->nparams : 1, sizeof *k.values);
  if (!k.values)
    abort();
  for (size_t i = 0; i < t->nparams; i++) {
    const kf_param_spec *ps = &t->params[i];
    double d = ps->n_one_of ? (double)ps->one_of[0] : ps->has_min ? ps->min : 1;
    k.values[i] = ps->is_float ? (kf_value){1, 0, d} : (kf_value){0, kf_i64_of_double(d), 0};
  }
  const char *exprs[] = {t->grid[0],    t->grid[1],      t->grid[2],          t->block[0],
                         t->block[1],   t->block[2],     t->cluster[0],       t->cluster[1],
                         t->cluster[2], t->shared_bytes, t->max_blocks_per_sm};
  for (int w = 1; w <= 8; w += 7)
    for (int mma = 0; mma < 2; mma++)
      for (size_t e = 0; e < sizeof exprs / sizeof exprs[0]; e++) {
        int64_t v;
        char err[256];
        if (exprs[e])
          kf_template_eval(&k, w, mma, exprs[e], &v, err, sizeof err);
      }
  free(k.values);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cJSON *peek = cJSON_ParseWithLength((const char *)data, size);
  char name[80], header[80];
  snprintf(name, sizeof name, "%s",
           plain_name(cJSON_GetObjectItemCaseSensitive(peek, "template"), "fz"));
  snprintf(header, sizeof header, "%s",
           plain_name(cJSON_GetObjectItemCaseSensitive(peek, "header"), "fz.cuh"));
  cJSON_Delete(peek);
  char rel[200];
  snprintf(rel, sizeof rel, "t/%s.json", name);
  const char *schema_path = fz_path(rel);
  fz_write(schema_path, data, size);
  snprintf(rel, sizeof rel, "t/%s", header);
  const char *header_path = fz_path(rel);
  int header_written = strcmp(header_path, schema_path) != 0;
  if (header_written)
    fz_write(header_path, "", 0);

  kf_strv dirs = {0};
  kf_strv_push(&dirs, fz_path("t"));
  int errors = 0;
  kf_template *t = kf_template_load(&dirs, name, "fuzz.json", "kernels[0].template", &errors);
  if (t)
    evaluate(t);
  kf_template_free(t);
  kf_strv_free(&dirs);
  unlink(schema_path);
  if (header_written)
    unlink(header_path);
  return 0;
}
