/* Tests of gen/model.c: loading descriptions with family presets and
 * template schemas, and every validation message in the documented shape
 * "FILE: json.path: error: …" (docs/contracts.md, docs/cli.md). Fixtures are
 * written by each test (model_fixture.h). */
#include "model_fixture.h"
#include "plan.h"

#include <math.h>

static const kf_kernel_desc *kernel(const kf_model *m, const char *kind) {
  for (size_t i = 0; i < m->nkernels; i++)
    if (!strcmp(m->kernels[i].kind, kind))
      return &m->kernels[i];
  return NULL;
}

/* Index of a parameter in a kernel's template, or -1. */
static int param(const kf_kernel_desc *k, const char *name) {
  for (size_t i = 0; i < k->tmpl->nparams; i++)
    if (!strcmp(k->tmpl->params[i].name, name))
      return (int)i;
  return -1;
}

static int int_param_is(const kf_kernel_desc *k, const char *name, int64_t want) {
  int i = param(k, name);
  if (i < 0 || k->values[i].is_float || k->values[i].i != want) {
    fprintf(stderr, "%s.%s: want integer %lld\n", k->kind, name, (long long)want);
    return 0;
  }
  return 1;
}

static int float_param_is(const kf_kernel_desc *k, const char *name, double want) {
  int i = param(k, name);
  if (i < 0 || !k->values[i].is_float || k->values[i].f != want) {
    fprintf(stderr, "%s.%s: want float %.17g\n", k->kind, name, want);
    return 0;
  }
  return 1;
}

/* Loads fx_desc_all(params) and expects it to fail with exactly the line
 * "models/m.json: kernels[0].params.<line>\n" among the messages. */
static int rejects_params(const char *params, const char *line) {
  char *desc = fx_desc_all(params, NULL);
  char *err = NULL;
  kf_model *m = fx_load_desc("models/m.json", desc, NULL, &err);
  char *want = kf_xasprintf("models/m.json: kernels[0].params.%s\n", line);
  int ok = m == NULL && strstr(err, want) != NULL;
  if (!ok)
    fprintf(stderr, "want the line: %s", want);
  kf_model_free(m);
  free(want);
  free(err);
  free(desc);
  return ok;
}

static const char *const FAM_DESC =
    "{\"name\": \"fam-1\", \"family\": \"fam\",\n"
    " \"shape\": {\"hidden_size\": 1024, \"rms_norm_eps\": 1e-6, \"dtype\": \"bf16\"}%s}\n";

KF_TEST(model__loads_description_with_family_preset) {
  fx_model_tree();
  char *desc = kf_xasprintf(FAM_DESC, "");
  kf_model *m = fx_load_desc("models/m.json", desc, NULL, NULL);
  KF_CHECK(m);
  KF_CHECK_STR_EQ(m->name, "fam-1");
  KF_CHECK_STR_EQ(m->family, "fam");
  KF_CHECK(m->nkernels == 2);
  /* sorted by kind */
  KF_CHECK_STR_EQ(m->kernels[0].kind, "norm");
  KF_CHECK_STR_EQ(m->kernels[1].kind, "proj");
  const kf_kernel_desc *norm = &m->kernels[0], *proj = &m->kernels[1];
  KF_CHECK_STR_EQ(norm->tmpl->name, "t_all");
  KF_CHECK_STR_EQ(norm->source_file, "families/fam.json");
  KF_CHECK(int_param_is(norm, "N", 1024));
  KF_CHECK(float_param_is(norm, "EPS", 1e-6));
  KF_CHECK(int_param_is(norm, "PAGE", 16)); /* the optional field's default */
  KF_CHECK(int_param_is(proj, "N", 2048));
  /* defaults */
  KF_CHECK(m->nwidths == 4 && m->widths[0] == 1 && m->widths[3] == 8);
  KF_CHECK(m->arches.n == 1);
  KF_CHECK_STR_EQ(m->arches.v[0], "sm_90a");
  kf_model_free(m);
  free(desc);
}

KF_TEST(model__a_kernel_that_reads_the_shapes_page_size_is_built_for_it) {
  fx_model_tree();
  kf_model *m =
      fx_load_desc("models/m.json",
                   "{\"name\": \"m\", \"shape\": {\"hidden_size\": 1024, \"page_size\": 64},\n"
                   " \"kernels\": [\n"
                   "  {\"kind\": \"attn\", \"template\": \"t_all\", \"params\": {\"N\": 64, "
                   "\"EPS\": 0.5, \"PAGE\": \"page_size\"}},\n"
                   "  {\"kind\": \"norm\", \"template\": \"t_all\", \"params\": {\"N\": "
                   "\"hidden_size\", \"EPS\": 0.5, \"PAGE\": 16}},\n"
                   "  {\"kind\": \"tiles\", \"template\": \"t_all\", \"params\": {\"N\": "
                   "\"page_size * 16\", \"EPS\": 0.5, \"PAGE\": 16}}]}\n",
                   NULL, NULL);
  KF_CHECK(m && m->nkernels == 3);
  if (m && m->nkernels == 3) {
    KF_CHECK(kernel(m, "attn")->page_size == 64);
    KF_CHECK(kernel(m, "norm")->page_size == 0); /* a page size of 16, but not the shape's */
    KF_CHECK(kernel(m, "tiles")->page_size == 64);
  }
  kf_model_free(m);
}

/* A description of page sizes `sizes` (a JSON array) over the fixture's
 * t_all, whose PAGE is one of 16 and 64: attn and tiles read page_size,
 * norm does not. */
static kf_model *load_page_sizes(const char *shape_page, const char *sizes, char **err) {
  char *desc =
      kf_xasprintf("{\"name\": \"m\", \"shape\": {\"hidden_size\": 1024%s}, \"page_sizes\": %s,\n"
                   " \"kernels\": [\n"
                   "  {\"kind\": \"tiles\", \"template\": \"t_all\", \"params\": {\"N\": "
                   "\"page_size * 16\", \"EPS\": 0.5, \"PAGE\": 16}},\n"
                   "  {\"kind\": \"attn\", \"template\": \"t_all\", \"params\": {\"N\": 64, "
                   "\"EPS\": 0.5, \"PAGE\": \"page_size\"}},\n"
                   "  {\"kind\": \"norm\", \"template\": \"t_all\", \"params\": {\"N\": "
                   "\"hidden_size\", \"EPS\": 0.5, \"PAGE\": 16}}]}\n",
                   shape_page, sizes);
  kf_model *m = fx_load_desc("models/m.json", desc, NULL, err);
  free(desc);
  return m;
}

KF_TEST(model__page_sizes_build_what_reads_page_size_once_per_size) {
  fx_model_tree();
  kf_model *m = load_page_sizes(", \"page_size\": 64", "[16, 64]", NULL);
  KF_CHECK(m && m->npage_sizes == 2);
  if (!m || m->nkernels != 5) {
    KF_CHECK(!"five kernels: attn and tiles per page size, norm once");
    kf_model_free(m);
    return;
  }
  /* the shape's page size first: what a caller gets when it names none */
  KF_CHECK(m->page_sizes[0] == 64 && m->page_sizes[1] == 16);
  const char *kinds[] = {"attn", "attn", "norm", "tiles", "tiles"};
  const int pages[] = {16, 64, 0, 16, 64};
  for (int i = 0; i < 5; i++) {
    KF_CHECK_STR_EQ(m->kernels[i].kind, kinds[i]);
    KF_CHECK(m->kernels[i].page_size == pages[i]);
  }
  KF_CHECK(int_param_is(&m->kernels[0], "PAGE", 16));
  KF_CHECK(int_param_is(&m->kernels[1], "PAGE", 64));
  KF_CHECK(int_param_is(&m->kernels[3], "N", 256));
  KF_CHECK(int_param_is(&m->kernels[4], "N", 1024));
  /* the plan: page-specific ids and sources say their page size */
  kf_plan plan = {0};
  kf_plan_add_model(&plan, m);
  KF_CHECK(plan.n == 5 * 4);
  KF_CHECK(kf_plan_find(&plan, "m/attn/w1p16/sm_90a") != NULL);
  KF_CHECK(kf_plan_find(&plan, "m/attn/w8p64/sm_90a") != NULL);
  KF_CHECK(kf_plan_find(&plan, "m/norm/w2/sm_90a") != NULL);
  KF_CHECK(kf_plan_find(&plan, "m/norm/w2p64/sm_90a") == NULL);
  KF_CHECK(kf_plan_find(&plan, "m/attn/w1/sm_90a") == NULL);
  const kf_instance *in = kf_plan_find(&plan, "m/tiles/w4p16/sm_90a");
  KF_CHECK(in && !strcmp(in->rel_source, "m/sm_90a/tiles_w4p16.cu"));
  KF_CHECK(in && strstr(in->source, "static constexpr int N = 256;"));
  kf_plan_free(&plan);
  kf_model_free(m);
}

KF_TEST(model__one_page_size_keeps_the_ids_and_a_list_takes_the_default_first) {
  fx_model_tree();
  kf_model *m = load_page_sizes("", "[64, 16]", NULL); /* no page_size: no field */
  KF_CHECK(m == NULL);
  kf_model_free(m);
  /* without page_sizes nothing says p<P> */
  m = fx_load_desc("models/m.json",
                   "{\"name\": \"m\", \"shape\": {\"page_size\": 64}, \"kernels\": [{\"kind\": "
                   "\"attn\", \"template\": \"t_all\", \"params\": {\"N\": 64, \"EPS\": 0.5, "
                   "\"PAGE\": \"page_size\"}}]}\n",
                   NULL, NULL);
  KF_CHECK(m && m->npage_sizes == 0 && m->nkernels == 1);
  if (m) {
    kf_plan plan = {0};
    kf_plan_add_model(&plan, m);
    KF_CHECK(kf_plan_find(&plan, "m/attn/w1/sm_90a") != NULL);
    kf_plan_free(&plan);
  }
  kf_model_free(m);
}

KF_TEST(model__bad_page_sizes_are_named) {
  fx_model_tree();
  const struct {
    const char *shape, *sizes, *line;
  } cases[] = {
      {", \"page_size\": 16", "16", "models/m.json: page_sizes: error: must be a non-empty array"},
      {", \"page_size\": 16", "[]", "models/m.json: page_sizes: error: must be a non-empty array"},
      {", \"page_size\": 16", "[16, 0]",
       "models/m.json: page_sizes[1]: error: must be an integer from 1 to 1048576, got 0"},
      {", \"page_size\": 16", "[16, \"64\"]",
       "models/m.json: page_sizes[1]: error: must be an integer from 1 to 1048576, got a string"},
      {", \"page_size\": 16", "[16, 64, 16]",
       "models/m.json: page_sizes[2]: error: page size 16 is listed twice"},
      {", \"page_size\": 16", "[64]",
       "models/m.json: page_sizes: error: must include the shape's page_size, 16"},
      {"", "[16]", "models/m.json: page_sizes: error: the shape has no integer page_size field"},
      /* a size the template refuses: named with the kernel and the size */
      {", \"page_size\": 16", "[16, 32]",
       "models/m.json: kernels[1].params.PAGE: error: must be one of 16, 64, got 32 (from "
       "\"page_size\") (for page size 32 of page_sizes)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *err = NULL;
    kf_model *m = load_page_sizes(cases[i].shape, cases[i].sizes, &err);
    KF_CHECK(m == NULL);
    if (!err || !strstr(err, cases[i].line))
      fprintf(stderr, "case %zu: want the line: %s\ngot: %s\n", i, cases[i].line,
              err ? err : "(nothing)");
    KF_CHECK(err && strstr(err, cases[i].line));
    kf_model_free(m);
    free(err);
  }
}

KF_TEST(model__description_kernel_replaces_the_family_kind) {
  fx_model_tree();
  char *desc = kf_xasprintf(FAM_DESC, ",\n \"kernels\": [{\"kind\": \"proj\", \"template\": "
                                      "\"t_all\", \"params\": {\"N\": 64, \"EPS\": 0.5, "
                                      "\"PAGE\": 64}},\n {\"kind\": \"extra\", \"template\": "
                                      "\"t_one\", \"params\": {\"N\": 3}}]");
  kf_model *m = fx_load_desc("models/m.json", desc, NULL, NULL);
  KF_CHECK(m);
  KF_CHECK(m->nkernels == 3);
  KF_CHECK_STR_EQ(m->kernels[0].kind, "extra");
  KF_CHECK_STR_EQ(m->kernels[1].kind, "norm");
  KF_CHECK_STR_EQ(m->kernels[2].kind, "proj");
  const kf_kernel_desc *proj = kernel(m, "proj");
  KF_CHECK_STR_EQ(proj->tmpl->name, "t_all");
  KF_CHECK_STR_EQ(proj->source_file, "models/m.json");
  KF_CHECK(int_param_is(proj, "N", 64));
  KF_CHECK(int_param_is(proj, "PAGE", 64));
  const kf_kernel_desc *norm = kernel(m, "norm");
  KF_CHECK_STR_EQ(norm->source_file, "families/fam.json");
  KF_CHECK(int_param_is(norm, "N", 1024));
  kf_model_free(m);
  free(desc);
}

KF_TEST(model__family_shape_fields_are_typed_and_required) {
  fx_model_tree();
  char *err = NULL;
  kf_model *m = fx_load_desc("models/m.json",
                             "{\"name\": \"m\", \"family\": \"fam\",\n"
                             " \"shape\": {\"hiden_size\": 1024, \"dtype\": 3, \"page\": 2.5}}\n",
                             NULL, &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "models/m.json: shape.hiden_size: error: unknown field \"hiden_size\" "
                         "for family fam (did you mean \"hidden_size\"?)\n");
  KF_CHECK_CONTAINS(err, "models/m.json: shape.dtype: error: must be a string, got a number\n");
  KF_CHECK_CONTAINS(err, "models/m.json: shape.page: error: must be an integer, got a number\n");
  KF_CHECK_CONTAINS(err, "models/m.json: shape.hidden_size: error: missing field required by "
                         "family fam (an integer)\n");
  KF_CHECK_CONTAINS(err, "models/m.json: shape.rms_norm_eps: error: missing field required by "
                         "family fam (a number)\n");
  free(err);
}

KF_TEST(model__unknown_family_is_reported) {
  fx_model_tree();
  char *err = NULL;
  kf_model *m = fx_load_desc(
      "models/m.json", "{\"name\": \"m\", \"family\": \"nofam\", \"shape\": {}}\n", NULL, &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "models/m.json: family: error: unknown family \"nofam\"");
  free(err);
}

KF_TEST(model__expression_params_evaluate_over_the_shape) {
  fx_model_tree();
  char *desc = fx_desc_all("\"N\": \"hidden_size / 4 + 32\", \"EPS\": \"eps * 10\", "
                           "\"PAGE\": \"(hidden_size - 1000) * 2 + 16\"",
                           NULL);
  char *err = NULL;
  kf_model *m = fx_load_desc("models/m.json", desc, NULL, &err);
  KF_CHECK(m);
  const kf_kernel_desc *k = kernel(m, "norm");
  KF_CHECK(int_param_is(k, "N", 288));
  KF_CHECK(float_param_is(k, "EPS", 1e-6 * 10));
  KF_CHECK(int_param_is(k, "PAGE", 64));
  kf_model_free(m);
  free(desc);
  free(err);
}

/* an int parameter may come from a float expression that is integral; it is
 * stored as an integer */
KF_TEST(model__integral_float_expression_gives_an_int_param) {
  fx_model_tree();
  char *desc = fx_desc_all("\"N\": \"hidden_size / 2.0\", \"EPS\": 1, \"PAGE\": 16", NULL);
  kf_model *m = fx_load_desc("models/m.json", desc, NULL, NULL);
  KF_CHECK(m);
  const kf_kernel_desc *k = kernel(m, "norm");
  KF_CHECK(int_param_is(k, "N", 512));
  KF_CHECK(float_param_is(k, "EPS", 1.0)); /* an int given for a float is a float */
  kf_model_free(m);
  free(desc);
}

KF_TEST(model__int_param_must_be_an_integer) {
  fx_model_tree();
  KF_CHECK(rejects_params("\"N\": 64.5, \"EPS\": 0.5, \"PAGE\": 16",
                          "N: error: must be an integer, got 64.5"));
  KF_CHECK(rejects_params("\"N\": \"hidden_size / 3.0\", \"EPS\": 0.5, \"PAGE\": 16",
                          "N: error: must be an integer, got 341.333333 (from \"hidden_size / "
                          "3.0\")"));
}

KF_TEST(model__param_min_is_enforced) {
  fx_model_tree();
  KF_CHECK(rejects_params("\"N\": 0, \"EPS\": 0.5, \"PAGE\": 16",
                          "N: error: must be at least 32, got 0"));
  KF_CHECK(rejects_params("\"N\": 64, \"EPS\": -0.5, \"PAGE\": 16",
                          "EPS: error: must be at least 0, got -0.5"));
}

KF_TEST(model__param_max_is_enforced) {
  fx_model_tree();
  KF_CHECK(rejects_params("\"N\": 65568, \"EPS\": 0.5, \"PAGE\": 16",
                          "N: error: must be at most 65536, got 65568"));
  KF_CHECK(rejects_params("\"N\": 64, \"EPS\": \"eps * 2000000\", \"PAGE\": 16",
                          "EPS: error: must be at most 1, got 2 (from \"eps * 2000000\")"));
}

KF_TEST(model__param_multiple_of_is_enforced) {
  fx_model_tree();
  KF_CHECK(rejects_params("\"N\": 100, \"EPS\": 0.5, \"PAGE\": 16",
                          "N: error: must be a multiple of 32, got 100"));
  KF_CHECK(rejects_params("\"N\": \"hidden_size + 4\", \"EPS\": 0.5, \"PAGE\": 16",
                          "N: error: must be a multiple of 32, got 1028 (from \"hidden_size + "
                          "4\")"));
}

KF_TEST(model__param_one_of_is_enforced) {
  fx_model_tree();
  KF_CHECK(rejects_params("\"N\": 64, \"EPS\": 0.5, \"PAGE\": 32",
                          "PAGE: error: must be one of 16, 64, got 32"));
}

KF_TEST(model__param_must_be_a_number_or_an_expression) {
  fx_model_tree();
  KF_CHECK(rejects_params("\"N\": true, \"EPS\": 0.5, \"PAGE\": 16",
                          "N: error: must be a number or an expression string, got a boolean"));
  KF_CHECK(rejects_params("\"N\": \"hidden_sise\", \"EPS\": 0.5, \"PAGE\": 16",
                          "N: error: unknown name 'hidden_sise' at column 1 of \"hidden_sise\""));
}

KF_TEST(model__missing_and_unknown_params_are_named) {
  fx_model_tree();
  KF_CHECK(rejects_params("\"N\": 64, \"EPS\": 0.5",
                          "PAGE: error: missing parameter PAGE of template t_all"));
  KF_CHECK(rejects_params("\"N\": 64, \"EPS\": 0.5, \"PAGE\": 16, \"PAGES\": 1",
                          "PAGES: error: unknown parameter \"PAGES\" of template t_all; it takes: "
                          "N, EPS, PAGE"));
}

/* one run shows everything that is wrong */
KF_TEST(model__every_problem_is_reported) {
  fx_model_tree();
  char *desc = fx_desc_all("\"N\": 100, \"EPS\": 7, \"PAGE\": 32", ", \"widths\": [0]");
  char *err = NULL;
  kf_model *m = fx_load_desc("models/m.json", desc, NULL, &err);
  KF_CHECK(m == NULL);
  /* the widths error stops before the kernels: fix it and see the rest */
  KF_CHECK_CONTAINS(err, "models/m.json: widths[0]: error: must be an integer from 1 to 256");
  free(err);
  free(desc);
  desc = fx_desc_all("\"N\": 100, \"EPS\": 7, \"PAGE\": 32", NULL);
  m = fx_load_desc("models/m.json", desc, NULL, &err);
  KF_CHECK(m == NULL);
  KF_CHECK(fx_count_lines_with(err, ": error: ") == 3);
  KF_CHECK_CONTAINS(err, "kernels[0].params.N: error: must be a multiple of 32");
  KF_CHECK_CONTAINS(err, "kernels[0].params.EPS: error: must be at most 1");
  KF_CHECK_CONTAINS(err, "kernels[0].params.PAGE: error: must be one of 16, 64");
  free(err);
  free(desc);
}

/* contracts.md: a float param is emitted as `float`; a value no float can
 * hold must be refused at load, not emitted as "inff" or 0. */
KF_TEST(model__float_param_beyond_float_range_is_rejected) {
  fx_model_tree();
  fx_write_free(
      ".", "templates/t_f.json",
      "{\"template\": \"t_f\", \"header\": \"t_one.cuh\", \"entry\": \"t::f\",\n"
      " \"params\": {\"F\": {\"type\": \"float\"}},\n"
      " \"args\": [{\"name\": \"rows\", \"type\": \"int\"}],\n"
      " \"launch\": {\"grid\": [1, 1, 1], \"block\": [32, 1, 1], \"shared_bytes\": 0}}\n");
  char *err = NULL;
  kf_model *m = fx_load_desc("models/m.json",
                             "{\"name\": \"m\", \"shape\": {}, \"kernels\": [{\"kind\": \"k\", "
                             "\"template\": \"t_f\", \"params\": {\"F\": 1e39}}]}\n",
                             NULL, &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "models/m.json: kernels[0].params.F: error: ");
  free(err);
  kf_model_free(m);
}

KF_TEST(model__widths_are_sorted_and_checked) {
  fx_model_tree();
  char *desc = fx_desc_all("\"N\": 64, \"EPS\": 0.5, \"PAGE\": 16", ", \"widths\": [8, 1, 4]");
  kf_model *m = fx_load_desc("models/m.json", desc, NULL, NULL);
  KF_CHECK(m);
  KF_CHECK(m->nwidths == 3 && m->widths[0] == 1 && m->widths[1] == 4 && m->widths[2] == 8);
  kf_model_free(m);
  free(desc);
  char *err = NULL;
  desc = fx_desc_all("\"N\": 64, \"EPS\": 0.5, \"PAGE\": 16", ", \"widths\": [4, 257, 4, 2.5]");
  m = fx_load_desc("models/m.json", desc, NULL, &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err,
                    "models/m.json: widths[1]: error: must be an integer from 1 to 256, got 257\n");
  KF_CHECK_CONTAINS(err, "models/m.json: widths[2]: error: width 4 is listed twice\n");
  KF_CHECK_CONTAINS(err, "models/m.json: widths[3]: error: must be an integer from 1 to 256");
  free(err);
  free(desc);
}

KF_TEST(model__unknown_arch_is_rejected_with_the_known_list) {
  fx_model_tree();
  char *desc =
      fx_desc_all("\"N\": 64, \"EPS\": 0.5, \"PAGE\": 16", ", \"arches\": [\"sm_90a\", \"sm_91\"]");
  char *err = NULL;
  kf_model *m = fx_load_desc("models/m.json", desc, NULL, &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "models/m.json: arches[1]: error: unknown arch \"sm_91\"; known: sm_75, ");
  KF_CHECK_CONTAINS(err, "gfx942");
  free(err);
  free(desc);
}

KF_TEST(model__arch_option_replaces_the_description_arches) {
  fx_model_tree();
  char *desc = fx_desc_all("\"N\": 64, \"EPS\": 0.5, \"PAGE\": 16",
                           ", \"arches\": [\"sm_90a\", \"gfx942\"]");
  kf_model_options opt = fx_options();
  kf_strv_push(&opt.arches, "sm_100a");
  kf_model *m = fx_load_desc("models/m.json", desc, &opt, NULL);
  KF_CHECK(m);
  KF_CHECK(m->arches.n == 1);
  KF_CHECK_STR_EQ(m->arches.v[0], "sm_100a");
  kf_model_free(m);
  kf_strv_free(&opt.arches);
  kf_strv_push(&opt.arches, "sm_1");
  char *err = NULL;
  m = fx_load_desc("models/m.json", desc, &opt, &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "--arch: error: unknown arch \"sm_1\"");
  kf_strv_free(&opt.arches);
  free(err);
  free(desc);
}

KF_TEST(model__arch_names_follow_the_contract) {
  KF_CHECK(kf_arch_known("sm_90a"));
  KF_CHECK(kf_arch_known("sm_100a"));
  KF_CHECK(kf_arch_known("sm_80"));
  KF_CHECK(kf_arch_known("gfx942"));
  KF_CHECK(kf_arch_known("gfx942:xnack-"));
  KF_CHECK(kf_arch_known("gfx90a:sramecc+:xnack-"));
  KF_CHECK(!kf_arch_known("sm_91"));
  KF_CHECK(!kf_arch_known("sm_90ab"));
  KF_CHECK(!kf_arch_known("sm_9"));
  KF_CHECK(!kf_arch_known("sm_90a:xnack-")); /* features are HIP only */
  KF_CHECK(!kf_arch_known("gfx942:xnack"));  /* a feature needs its sign */
  KF_CHECK(!kf_arch_known("gfx942:wave64+"));
  KF_CHECK(!kf_arch_known("gfx942:"));
  KF_CHECK(!kf_arch_known(""));
  KF_CHECK(kf_arch_is_hip("gfx90a") && !kf_arch_is_hip("sm_90a"));
}

static int name_rejected(const char *name) {
  char *desc = kf_xasprintf("{\"name\": \"%s\", \"shape\": {}, \"kernels\": [{\"kind\": \"k\", "
                            "\"template\": \"t_one\", \"params\": {\"N\": 1}}]}\n",
                            name);
  char *err = NULL;
  kf_model *m = fx_load_desc("models/m.json", desc, NULL, &err);
  char *want = kf_xasprintf("models/m.json: name: error: \"%s\" is not a valid model name", name);
  int ok = m == NULL && strstr(err, want);
  if (!ok)
    fprintf(stderr, "name \"%s\" was not rejected as wanted\n", name);
  kf_model_free(m);
  free(want);
  free(err);
  free(desc);
  return ok;
}

KF_TEST(model__name_with_slash_or_dotdot_is_rejected) {
  fx_model_tree();
  KF_CHECK(name_rejected("qwen/evil"));
  KF_CHECK(name_rejected(".."));
  KF_CHECK(name_rejected("a..b"));
  KF_CHECK(name_rejected("../up"));
  KF_CHECK(name_rejected("Qwen3"));
  KF_CHECK(name_rejected(""));
  KF_CHECK(name_rejected("-lead"));
  /* the message says how to fix it */
  char *err = NULL;
  kf_model *m = fx_load_desc("models/m.json", "{\"name\": \"a/b\", \"shape\": {}}", NULL, &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "no '/' or '..'");
  free(err);
  m = fx_load_desc("models/m.json",
                   "{\"name\": \"qwen3-0.6b\", \"shape\": {}, \"kernels\": [{\"kind\": \"k\", "
                   "\"template\": \"t_one\", \"params\": {\"N\": 1}}]}",
                   NULL, NULL);
  KF_CHECK(m);
  kf_model_free(m);
}

KF_TEST(model__missing_template_is_reported_where_it_is_named) {
  fx_model_tree();
  char *err = NULL;
  kf_model *m = fx_load_desc("models/m.json",
                             "{\"name\": \"m\", \"shape\": {},\n \"kernels\": [{\"kind\": \"k\", "
                             "\"template\": \"t_one\", \"params\": {\"N\": 1}},\n"
                             "  {\"kind\": \"k2\", \"template\": \"t_nope\"}]}\n",
                             NULL, &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "models/m.json: kernels[1].template: error: template \"t_nope\" not found "
                         "(searched ");
  free(err);
}

KF_TEST(model__template_name_cannot_leave_the_template_dirs) {
  fx_model_tree();
  fx_write_free(".", "secret.json", "{}");
  char *err = NULL;
  kf_model *m = fx_load_desc("models/m.json",
                             "{\"name\": \"m\", \"shape\": {}, \"kernels\": [{\"kind\": \"k\", "
                             "\"template\": \"../secret\"}]}\n",
                             NULL, &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "models/m.json: kernels[0].template: error: must name a template in "
                         "templates/, got ../secret\n");
  free(err);
}

KF_TEST(model__template_header_must_exist_beside_the_schema) {
  const char *root = fx_model_tree();
  fx_write_free(
      root, "templates/t_nohdr.json",
      "{\"template\": \"t_nohdr\", \"header\": \"absent.cuh\", \"entry\": \"t::f\",\n"
      " \"args\": [{\"name\": \"rows\", \"type\": \"int\"}],\n"
      " \"launch\": {\"grid\": [1, 1, 1], \"block\": [32, 1, 1], \"shared_bytes\": 0}}\n");
  char *err = NULL;
  kf_model *m = fx_load_desc("models/m.json",
                             "{\"name\": \"m\", \"shape\": {}, \"kernels\": [{\"kind\": \"k\", "
                             "\"template\": \"t_nohdr\"}]}\n",
                             NULL, &err);
  KF_CHECK(m == NULL);
  char *want = kf_xasprintf("%s/templates/t_nohdr.json: header: error: \"absent.cuh\" does not "
                            "exist beside the schema\n",
                            root);
  KF_CHECK_CONTAINS(err, want);
  free(want);
  free(err);
}

KF_TEST(model__template_schema_checks_args_and_last_rows) {
  const char *root = fx_model_tree();
  fx_write_free(
      root, "templates/t_bad.json",
      "{\"template\": \"t_bad\", \"header\": \"t_one.cuh\", \"entry\": \"t::f\",\n"
      " \"args\": [{\"name\": \"x\", \"type\": \"double*\"}],\n"
      " \"launch\": {\"grid\": [1, 1, 1], \"block\": [32, 1, 1], \"shared_bytes\": 0}}\n");
  char *err = NULL;
  kf_model *m = fx_load_desc("models/m.json",
                             "{\"name\": \"m\", \"shape\": {}, \"kernels\": [{\"kind\": \"k\", "
                             "\"template\": \"t_bad\"}]}\n",
                             NULL, &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err,
                    "t_bad.json: args[0]: error: unknown argument type \"double*\"; allowed: ");
  KF_CHECK_CONTAINS(err, "t_bad.json: args: error: the last argument must be {\"name\": \"rows\", "
                         "\"type\": \"int\"}\n");
  free(err);
}

/* template_dirs of the description come before the built-in templates */
KF_TEST(model__template_dirs_are_searched_before_the_builtin_dir) {
  const char *root = fx_model_tree();
  fx_write_free(
      root, "models/mine/t_one.json",
      "{\"template\": \"t_one\", \"header\": \"t_one.cuh\", \"entry\": \"mine::f\",\n"
      " \"params\": {\"M\": {\"type\": \"int\"}},\n"
      " \"args\": [{\"name\": \"rows\", \"type\": \"int\"}],\n"
      " \"launch\": {\"grid\": [1, 1, 1], \"block\": [32, 1, 1], \"shared_bytes\": 0}}\n");
  fx_write_free(root, "models/mine/t_one.cuh", "#pragma once\n");
  kf_model *m = fx_load_desc("models/m.json",
                             "{\"name\": \"m\", \"shape\": {}, \"template_dirs\": [\"mine\"],\n"
                             " \"kernels\": [{\"kind\": \"k\", \"template\": \"t_one\", "
                             "\"params\": {\"M\": 5}}]}\n",
                             NULL, NULL);
  KF_CHECK(m);
  char *want = kf_xasprintf("%s/models/mine", root);
  KF_CHECK_STR_EQ(m->kernels[0].tmpl->dir, want);
  KF_CHECK_STR_EQ(m->kernels[0].tmpl->entry, "mine::f");
  free(want);
  kf_model_free(m);
}

KF_TEST(model__include_dirs_are_relative_to_the_description_and_must_exist) {
  const char *root = fx_model_tree();
  fx_write_free(root, "models/third_party/v/v.h", "#pragma once\n");
  char *desc =
      fx_desc_all("\"N\": 64, \"EPS\": 0.5, \"PAGE\": 16",
                  ", \"include_dirs\": [\"third_party/v\", \"./third_party/../third_party\"]");
  kf_model *m = fx_load_desc("models/m.json", desc, NULL, NULL);
  KF_CHECK(m);
  KF_CHECK(m->include_dirs.n == 2);
  char *want = kf_xasprintf("%s/models/third_party/v", root);
  KF_CHECK_STR_EQ(m->include_dirs.v[0], want);
  free(want);
  want = kf_xasprintf("%s/models/third_party", root);
  KF_CHECK_STR_EQ(m->include_dirs.v[1], want);
  free(want);
  kf_model_free(m);
  free(desc);
  char *err = NULL;
  desc = fx_desc_all("\"N\": 64, \"EPS\": 0.5, \"PAGE\": 16", ", \"include_dirs\": [\"nope\"]");
  m = fx_load_desc("models/m.json", desc, NULL, &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err,
                    "models/m.json: include_dirs[0]: error: directory \"nope\" does not exist");
  free(err);
  free(desc);
}

KF_TEST(model__kind_listed_twice_in_one_file_is_an_error) {
  fx_model_tree();
  char *err = NULL;
  kf_model *m =
      fx_load_desc("models/m.json",
                   "{\"name\": \"m\", \"shape\": {}, \"kernels\": [\n"
                   "  {\"kind\": \"k\", \"template\": \"t_one\", \"params\": {\"N\": 1}},\n"
                   "  {\"kind\": \"k\", \"template\": \"t_one\", \"params\": {\"N\": 2}}]}\n",
                   NULL, &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "models/m.json: kernels[1]: error: kind \"k\" is listed twice\n");
  free(err);
}

KF_TEST(model__description_without_kernels_is_an_error) {
  fx_model_tree();
  char *err = NULL;
  kf_model *m = fx_load_desc("models/m.json", "{\"name\": \"m\", \"shape\": {}}\n", NULL, &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "models/m.json: kernels: error: the description names no kernels");
  free(err);
}

KF_TEST(model__unknown_top_level_field_suggests_a_fix) {
  fx_model_tree();
  char *desc = fx_desc_all("\"N\": 64, \"EPS\": 0.5, \"PAGE\": 16", ", \"widht\": [1]");
  char *err = NULL;
  kf_model *m = fx_load_desc("models/m.json", desc, NULL, &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "models/m.json: widht: error: unknown field \"widht\" (did you mean "
                         "\"widths\"?)\n");
  free(err);
  free(desc);
}

KF_TEST(model__syntax_error_names_file_line_and_column) {
  fx_model_tree();
  char *err = NULL;
  kf_model *m =
      fx_load_desc("models/m.json", "{\n  \"name\": \"m\"\n  \"shape\": {}\n}\n", NULL, &err);
  KF_CHECK(m == NULL);
  KF_CHECK_STR_EQ(err, "models/m.json:3:3: error: expected ',' after member\n");
  free(err);
}

/* ---- launch expressions ---- */

static void write_launch_template(const char *grid0, const char *block0) {
  char *schema = kf_xasprintf(
      "{\"template\": \"t_launch\", \"header\": \"t_one.cuh\", \"entry\": \"t::f\",\n"
      " \"params\": {\"N\": {\"type\": \"int\"}},\n"
      " \"args\": [{\"name\": \"rows\", \"type\": \"int\"}],\n"
      " \"launch\": {\"grid\": [\"%s\", 1, 1], \"block\": [\"%s\", 1, 1], \"shared_bytes\": 0}}\n",
      grid0, block0);
  fx_write_free(".", "templates/t_launch.json", schema);
  free(schema);
}

static kf_model *load_launch(const char *widths, char **err) {
  char *desc = kf_xasprintf("{\"name\": \"m\", \"shape\": {}, \"widths\": %s, \"kernels\": "
                            "[{\"kind\": \"k\", \"template\": \"t_launch\", \"params\": "
                            "{\"N\": 64}}]}\n",
                            widths);
  kf_model *m = fx_load_desc("models/m.json", desc, NULL, err);
  free(desc);
  return m;
}

KF_TEST(model__launch_expressions_are_checked_for_every_width) {
  const char *root = fx_model_tree();
  write_launch_template("W - 2", "N");
  char *err = NULL;
  kf_model *m = load_launch("[4, 8]", &err);
  KF_CHECK(m);
  kf_model_free(m);
  free(err);
  m = load_launch("[4, 1, 8]", &err);
  KF_CHECK(m == NULL);
  char *want = kf_xasprintf("%s/templates/t_launch.json: launch: error: \"W - 2\" gives -1 for "
                            "width 1 (kernel k of models/m.json)\n",
                            root);
  KF_CHECK_CONTAINS(err, want);
  free(want);
  free(err);
}

KF_TEST(model__launch_dimension_below_one_is_rejected) {
  fx_model_tree();
  write_launch_template("W", "N - 64");
  char *err = NULL;
  kf_model *m = load_launch("[1]", &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "launch: error: \"N - 64\" gives 0 for width 1 (kernel k of "
                         "models/m.json)\n");
  free(err);
}

/* the reason of a failed evaluation is what the user needs to see */
KF_TEST(model__launch_expression_error_names_the_unknown_name) {
  fx_model_tree();
  write_launch_template("W * FOO", "N");
  char *err = NULL;
  kf_model *m = load_launch("[1, 2]", &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "launch: error: unknown name 'FOO' at column 5 of \"W * FOO\" (kernel k "
                         "of models/m.json)\n");
  free(err);
  write_launch_template("W", "N * 0.5");
  m = load_launch("[1]", &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "launch: error: \"N * 0.5\" is not an integer (kernel k of "
                         "models/m.json)\n");
  free(err);
}

KF_TEST(model__template_eval_uses_params_width_and_mma) {
  fx_model_tree();
  char *desc = fx_desc_all("\"N\": 128, \"EPS\": 0.5, \"PAGE\": 16", NULL);
  kf_model *m = fx_load_desc("models/m.json", desc, NULL, NULL);
  KF_CHECK(m);
  const kf_kernel_desc *k = kernel(m, "norm");
  int64_t v = 0;
  char err[256];
  KF_CHECK(kf_template_eval(k, 8, 1, "W * N + PAGE", &v, err, sizeof err) == 0);
  KF_CHECK(v == 8 * 128 + 16);
  KF_CHECK(kf_template_eval(k, 8, 1, "MMA * 100 + W", &v, err, sizeof err) == 0);
  KF_CHECK(v == 108);
  KF_CHECK(kf_template_eval(k, 8, 0, "MMA * 100 + W", &v, err, sizeof err) == 0);
  KF_CHECK(v == 8);
  KF_CHECK(kf_template_eval(k, 8, 1, "EPS * 2", &v, err, sizeof err) == -1);
  KF_CHECK_CONTAINS(err, "is not an integer");
  KF_CHECK(kf_template_eval(k, 8, 1, "hidden_size", &v, err, sizeof err) == -1);
  KF_CHECK_CONTAINS(err, "unknown name 'hidden_size'"); /* shape fields are not in scope */
  kf_model_free(m);
  free(desc);
}

KF_TEST(model__arches_with_the_matrix_instruction_path) {
  KF_CHECK(kf_arch_has_mma("sm_90a"));
  KF_CHECK(kf_arch_has_mma("sm_100a"));
  KF_CHECK(kf_arch_has_mma("sm_80"));
  KF_CHECK(!kf_arch_has_mma("sm_75"));
  KF_CHECK(!kf_arch_has_mma("gfx90a"));
  KF_CHECK(!kf_arch_has_mma("gfx942:xnack-"));
  KF_CHECK(kf_arch_sm("sm_90a") == 90);
  KF_CHECK(kf_arch_sm("sm_100a") == 100);
  KF_CHECK(kf_arch_sm("gfx90a") == 0);
  KF_CHECK(kf_arch_sm("sm_x") == 0);
}

KF_TEST_MAIN()

/* ---- launch.programmatic ---- */

/* A one-kernel model on template `tname` (param N = 64) whose schema's
 * launch object is `launch`, for the given widths and arches. */
static kf_model *load_with_launch(const char *tname, const char *launch, const char *widths,
                                  const char *arches, char **err) {
  char *schema = kf_xasprintf("{\"template\": \"%s\", \"header\": \"t_one.cuh\", \"entry\": "
                              "\"t::f\",\n \"params\": {\"N\": {\"type\": \"int\"}},\n"
                              " \"args\": [{\"name\": \"rows\", \"type\": \"int\"}],\n"
                              " \"launch\": {%s}}\n",
                              tname, launch);
  char *path = kf_xasprintf("templates/%s.json", tname);
  fx_write_free(".", path, schema);
  free(path);
  free(schema);
  char *desc = kf_xasprintf("{\"name\": \"m\", \"shape\": {}, \"widths\": %s, \"arches\": %s, "
                            "\"kernels\": [{\"kind\": \"k\", \"template\": \"%s\", \"params\": "
                            "{\"N\": 64}}]}\n",
                            widths, arches, tname);
  kf_model *m = fx_load_desc("models/m.json", desc, NULL, err);
  free(desc);
  return m;
}

/* A one-block launch with one more member, field: value, in schema tname. */
static kf_model *load_launch_field(const char *tname, const char *field, const char *value,
                                   const char *widths, const char *arches, char **err) {
  char *launch = kf_xasprintf("\"grid\": [1, 1, 1], \"block\": [32, 1, 1], \"shared_bytes\": 0, "
                              "\"%s\": %s",
                              field, value);
  kf_model *m = load_with_launch(tname, launch, widths, arches, err);
  free(launch);
  return m;
}

static kf_model *load_programmatic(const char *value, const char *arches, char **err) {
  return load_launch_field("t_pdl", "programmatic", value, "[1]", arches, err);
}

KF_TEST(model__launch_programmatic_must_be_a_boolean) {
  fx_model_tree();
  char *err = NULL;
  kf_model *m = load_programmatic("\"yes\"", "[\"sm_90a\"]", &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "t_pdl.json: launch.programmatic: error: must be true or false\n");
  free(err);
}

KF_TEST(model__launch_programmatic_reaches_sm90_and_later_instances_only) {
  fx_model_tree();
  char *err = NULL;
  kf_model *m = load_programmatic("true", "[\"sm_80\", \"sm_90a\", \"sm_100a\", \"gfx942\"]", &err);
  KF_CHECK(m);
  free(err);
  kf_plan plan = {0};
  kf_plan_add_model(&plan, m);
  const char *ids[] = {"m/k/w1/sm_80", "m/k/w1/sm_90a", "m/k/w1/sm_100a", "m/k/w1/gfx942"};
  const int want[] = {0, 1, 1, 0};
  for (int i = 0; i < 4; i++) {
    const kf_instance *in = kf_plan_find(&plan, ids[i]);
    KF_CHECK(in && in->programmatic == want[i]);
  }
  kf_plan_free(&plan);
  kf_model_free(m);
  m = load_programmatic("false", "[\"sm_90a\"]", &err);
  KF_CHECK(m);
  free(err);
  kf_plan plan2 = {0};
  kf_plan_add_model(&plan2, m);
  KF_CHECK(plan2.n == 1 && plan2.v[0].programmatic == 0);
  kf_plan_free(&plan2);
  kf_model_free(m);
}

/* ---- launch.max_blocks_per_sm ---- */

static kf_model *load_max_blocks(const char *value, const char *arches, char **err) {
  return load_launch_field("t_mb", "max_blocks_per_sm", value, "[1, 4]", arches, err);
}

KF_TEST(model__launch_max_blocks_per_sm_is_per_width_on_nvidia_arches_only) {
  fx_model_tree();
  char *err = NULL;
  kf_model *m = load_max_blocks("\"2 * (2 / (W + 1))\"", "[\"sm_90a\", \"gfx942\"]", &err);
  KF_CHECK(m);
  free(err);
  kf_plan plan = {0};
  kf_plan_add_model(&plan, m);
  const char *ids[] = {"m/k/w1/sm_90a", "m/k/w4/sm_90a", "m/k/w1/gfx942"};
  const int64_t want[] = {2, 0, 0};
  for (int i = 0; i < 3; i++) {
    const kf_instance *in = kf_plan_find(&plan, ids[i]);
    KF_CHECK(in && in->max_blocks_per_sm == want[i]);
  }
  kf_plan_free(&plan);
  kf_model_free(m);
  m = load_max_blocks("\"W - 2\"", "[\"sm_90a\"]", &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "t_mb.json: launch: error: \"W - 2\" gives -1 for width 1 (kernel k of "
                         "models/m.json)\n");
  free(err);
}

KF_TEST(model__launch_one_wave_is_a_boolean_for_nvidia_arches_only) {
  fx_model_tree();
  char *err = NULL;
  kf_model *m =
      load_with_launch("t_ow", "\"grid\": [\"W\", 1, 1], \"block\": [32, 1, 1], \"one_wave\": true",
                       "[1, 4]", "[\"sm_90a\", \"gfx942\"]", &err);
  KF_CHECK(m);
  free(err);
  kf_plan plan = {0};
  kf_plan_add_model(&plan, m);
  const kf_instance *cu = kf_plan_find(&plan, "m/k/w4/sm_90a");
  const kf_instance *hip = kf_plan_find(&plan, "m/k/w4/gfx942");
  KF_CHECK(cu && cu->one_wave == 1 && hip && hip->one_wave == 0);
  kf_plan_free(&plan);
  kf_model_free(m);
  m = load_launch_field("t_ow", "one_wave", "1", "[1]", "[\"sm_90a\"]", &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "t_ow.json: launch.one_wave: error: must be true or false\n");
  free(err);
}

/* ---- launch.cluster ---- */

static kf_model *load_cluster(const char *grid, const char *cluster, const char *arches,
                              char **err) {
  char *launch = kf_xasprintf("\"grid\": [%s, 1, 1], \"block\": [32, 1, 1], \"shared_bytes\": 0, "
                              "\"cluster\": %s",
                              grid, cluster);
  kf_model *m = load_with_launch("t_cl", launch, "[1, 4]", arches, err);
  free(launch);
  return m;
}

KF_TEST(model__launch_cluster_reaches_sm90_and_later_sources_only) {
  fx_model_tree();
  char *err = NULL;
  kf_model *m = load_cluster("\"N / 16 * W\"", "[\"W\", 1, 1]",
                             "[\"sm_80\", \"sm_90a\", \"sm_100a\", \"gfx942\"]", &err);
  KF_CHECK(m);
  free(err);
  kf_plan plan = {0};
  kf_plan_add_model(&plan, m);
  const char *archs[] = {"sm_80", "sm_90a", "sm_100a", "gfx942"};
  for (int i = 0; i < 4; i++) {
    char *id = kf_xasprintf("m/k/w4/%s", archs[i]);
    const kf_instance *in = kf_plan_find(&plan, id);
    const int clustered = i == 1 || i == 2;
    KF_CHECK(in && in->cluster[0] == (clustered ? 4 : 1) && in->cluster[1] == 1 &&
             in->cluster[2] == 1);
    KF_CHECK(in && (strstr(in->source, " __cluster_dims__(4, 1, 1)\n") != NULL) == clustered);
    free(id);
    /* width 1: a cluster of one block is written as none */
    id = kf_xasprintf("m/k/w1/%s", archs[i]);
    in = kf_plan_find(&plan, id);
    KF_CHECK(in && in->cluster[0] == 1 && !strstr(in->source, "__cluster_dims__"));
    free(id);
  }
  kf_plan_free(&plan);
  kf_model_free(m);
}

KF_TEST(model__launch_cluster_must_tile_the_grid_and_hold_at_most_8_blocks) {
  fx_model_tree();
  char *err = NULL;
  kf_model *m = load_cluster("6", "[\"W\", 1, 1]", "[\"sm_90a\"]", &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "t_cl.json: launch: error: grid[0] = 6 is not a multiple of cluster[0] "
                         "= 4 for width 4 (kernel k of models/m.json)\n");
  free(err);
  m = load_cluster("64", "[16, 1, 1]", "[\"sm_90a\"]", &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "launch: error: a cluster of 16 blocks for width 1; at most 8");
  free(err);
  m = load_cluster("64", "[\"W - 1\", 1, 1]", "[\"sm_90a\"]", &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "launch: error: \"W - 1\" gives 0 for width 1");
  free(err);
  m = load_cluster("64", "[2, 1]", "[\"sm_90a\"]", &err);
  KF_CHECK(m == NULL);
  KF_CHECK_CONTAINS(err, "t_cl.json: launch.cluster: error: must be an array of 3 dimensions\n");
  free(err);
}

/* ---- layer_types ---- */

/* fam (the fixture family) with "layer_types": lt, loaded by FAM_DESC. */
static kf_model *load_layer_types(const char *lt, char **err) {
  char *fam =
      kf_xasprintf("{\"family\": \"famlt\",\n"
                   " \"shape_fields\": {\"hidden_size\": \"int\", \"rms_norm_eps\": "
                   "\"float\", \"dtype\": \"string\"},\n"
                   " \"optional_fields\": {\"page\": {\"type\": \"int\", \"default\": 16},\n"
                   "   \"dense_layers\": {\"type\": \"int\", \"default\": 3}},\n"
                   " \"kernels\": [{\"kind\": \"proj\", \"template\": \"t_one\", "
                   "\"params\": {\"N\": 64}},\n"
                   "   {\"kind\": \"norm\", \"template\": \"t_all\", \"params\": {\"N\": "
                   "64, \"EPS\": \"rms_norm_eps\", \"PAGE\": \"page\"}}],\n"
                   " \"layer_types\": %s}\n",
                   lt);
  fx_write_free(".", "families/famlt.json", fam);
  free(fam);
  kf_model *m =
      fx_load_desc("models/m.json",
                   "{\"name\": \"m\", \"family\": \"famlt\", \"shape\": {\"hidden_size\": "
                   "1024, \"rms_norm_eps\": 1e-6, \"dtype\": \"bf16\"}}\n",
                   NULL, err);
  return m;
}

KF_TEST(model__layer_types_count_layers_over_the_shape_and_name_kinds) {
  fx_model_tree();
  kf_model *m = load_layer_types("[{\"name\": \"dense\", \"count\": \"dense_layers\", \"kinds\": "
                                 "[\"norm\", \"proj\"]},\n"
                                 " {\"name\": \"moe\", \"count\": \"hidden_size / 16 - "
                                 "dense_layers\", \"kinds\": [\"norm\"]}]",
                                 NULL);
  KF_CHECK(m && m->nlayer_types == 2);
  if (m && m->nlayer_types == 2) {
    KF_CHECK_STR_EQ(m->layer_types[0].name, "dense");
    KF_CHECK(m->layer_types[0].count == 3 && m->layer_types[0].kinds.n == 2);
    KF_CHECK_STR_EQ(m->layer_types[0].kinds.v[1], "proj");
    KF_CHECK(m->layer_types[1].count == 61 && m->layer_types[1].kinds.n == 1);
  }
  kf_model_free(m);
  /* the fixture family has none */
  char *desc = kf_xasprintf(FAM_DESC, "");
  m = fx_load_desc("models/m.json", desc, NULL, NULL);
  KF_CHECK(m && m->nlayer_types == 0);
  kf_model_free(m);
  free(desc);
}

KF_TEST(model__bad_layer_types_are_named_where_they_are) {
  fx_model_tree();
  const struct {
    const char *lt, *reason;
  } bad[] = {
      {"[{\"name\": \"d\", \"count\": 1, \"kinds\": [\"router\"]}]",
       "families/famlt.json: layer_types[0]: error: kinds[0]: router is not a kernel kind of the "
       "model"},
      {"[{\"name\": \"d\", \"count\": \"dense_layers - 4\", \"kinds\": [\"norm\"]}]",
       "count must be a whole number of layers, 0 or more, got -1"},
      {"[{\"name\": \"d\", \"count\": \"layers\", \"kinds\": [\"norm\"]}]",
       "families/famlt.json: layer_types[0]: error: count: "},
      {"[{\"name\": \"d\", \"count\": 1, \"kinds\": [\"norm\"]}, {\"name\": \"d\", \"count\": 2, "
       "\"kinds\": [\"norm\"]}]",
       "layer_types[1]: error: name \"d\" repeats layer_types[0]"},
      {"[{\"name\": \"d\", \"count\": 1}]", "layer_types[0]: error: must be {\"name\""},
      {"[]", "layer_types: error: must be a non-empty array"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *err = NULL;
    kf_model *m = load_layer_types(bad[i].lt, &err);
    KF_CHECK(m == NULL);
    KF_CHECK_CONTAINS(err, bad[i].reason);
    kf_model_free(m);
    free(err);
  }
}
