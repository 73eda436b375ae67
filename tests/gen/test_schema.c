/* test_schema.c: gen/schema.c, a template schema loaded on its own from a
 * list of directories (how a description reaches it is tested in
 * test_model.c). */
#include "gen_fixture.h"

#include "schema.h"

/* A schema whose launch gives only the required grid and block. */
static const char *const MINIMAL_JSON =
    "{\"template\": \"t\", \"header\": \"t.cuh\", \"entry\": \"%s\",\n"
    " \"params\": {\"N\": {\"type\": \"int\", \"min\": 1}, \"EPS\": {\"type\": \"float\"}},\n"
    " \"args\": [{\"name\": \"x\", \"type\": \"const kf_bf16*\"},\n"
    "          {\"name\": \"rows\", \"type\": \"int\"}],\n"
    " \"launch\": {\"grid\": [\"W * N\", 2, 1], \"block\": [64, 1, 1]}}\n";

/* Writes a loadable t.json (entry named entry) and t.cuh into root/rel. */
static void write_minimal(const char *root, const char *rel, const char *entry) {
  char *json = kf_xasprintf(MINIMAL_JSON, entry);
  char *jp = kf_xasprintf("%s/t.json", rel);
  char *hp = kf_xasprintf("%s/t.cuh", rel);
  fx_write_free(root, jp, json);
  fx_write_free(root, hp, "#pragma once\n");
  free(hp);
  free(jp);
  free(json);
}

/* Loads `name` from root/<rels...>, capturing stderr into *err. */
static kf_template *load(const char *root, const char *const *rels, const char *name, int *errors,
                         char **err) {
  kf_strv dirs = {0};
  for (const char *const *r = rels; *r; r++)
    kf_strv_push_owned(&dirs, kf_path_join(root, *r));
  fx_capture_begin();
  kf_template *t = kf_template_load(&dirs, name, "models/m.json", "kernels[0].template", errors);
  *err = fx_capture_end();
  kf_strv_free(&dirs);
  return t;
}

KF_TEST(schema__the_first_dir_holding_the_schema_wins) {
  const char *root = fx_tmpdir();
  write_minimal(root, "b", "b::entry");
  write_minimal(root, "c", "c::entry");
  fx_write_free(root, "a/other.json", "{}");
  const char *rels[] = {"a", "b", "c", NULL};
  int errors = 0;
  char *err = NULL;
  kf_template *t = load(root, rels, "t", &errors, &err);
  KF_CHECK(t);
  KF_CHECK(errors == 0);
  KF_CHECK_STR_EQ(err, "");
  KF_CHECK_STR_EQ(t->entry, "b::entry");
  char *want_dir = kf_path_join(root, "b");
  char *want_path = kf_path_join(want_dir, "t.json");
  KF_CHECK_STR_EQ(t->dir, want_dir);
  KF_CHECK_STR_EQ(t->path, want_path);
  free(want_path);
  free(want_dir);
  free(err);
  kf_template_free(t);
}

KF_TEST(schema__not_found_is_reported_where_named_with_every_dir_searched) {
  const char *root = fx_tmpdir();
  write_minimal(root, "b", "b::entry");
  const char *rels[] = {"a", "b", NULL};
  int errors = 5; /* the count is added to, not set */
  char *err = NULL;
  kf_template *t = load(root, rels, "t_nope", &errors, &err);
  KF_CHECK(t == NULL);
  KF_CHECK(errors == 6);
  char *want = kf_xasprintf("models/m.json: kernels[0].template: error: template \"t_nope\" not "
                            "found (searched %s/a, %s/b)\n",
                            root, root);
  KF_CHECK_STR_EQ(err, want);
  free(want);
  free(err);
}

KF_TEST(schema__absent_optional_launch_fields_take_their_defaults) {
  const char *root = fx_tmpdir();
  write_minimal(root, "d", "t::entry");
  const char *rels[] = {"d", NULL};
  int errors = 0;
  char *err = NULL;
  kf_template *t = load(root, rels, "t", &errors, &err);
  KF_CHECK(t);
  KF_CHECK_STR_EQ(t->grid[0], "W * N");
  KF_CHECK_STR_EQ(t->grid[1], "2"); /* numbers become expressions */
  KF_CHECK_STR_EQ(t->block[0], "64");
  for (int d = 0; d < 3; d++)
    KF_CHECK_STR_EQ(t->cluster[d], "1");
  KF_CHECK_STR_EQ(t->shared_bytes, "0");
  KF_CHECK_STR_EQ(t->max_blocks_per_sm, "0");
  KF_CHECK(t->programmatic == 0 && t->one_wave == 0);
  KF_CHECK(t->nparams == 2 && t->params[0].has_min && t->params[0].min == 1);
  KF_CHECK(!t->params[0].is_float && t->params[1].is_float);
  KF_CHECK(t->nargs == 2 && t->args[0].size == 8 && t->args[1].size == 4);
  free(err);
  kf_template_free(t);
}

/* One run shows every problem of a schema, in the order of its members. */
KF_TEST(schema__every_problem_is_reported_in_order_and_counted) {
  const char *root = fx_tmpdir();
  fx_write_free(root, "e/t.cuh", "#pragma once\n");
  fx_write_free(root, "e/t.json",
                "{\"template\": \"u\", \"header\": \"t.cuh\",\n"
                " \"params\": {\"n\": {\"type\": \"int\"}},\n"
                " \"args\": [{\"name\": \"x\", \"type\": \"double*\"}],\n"
                " \"launch\": {\"grid\": [1, 1], \"block\": [32, 1, 1],\n"
                "            \"programmatic\": \"yes\"}}\n");
  const char *rels[] = {"e", NULL};
  int errors = 0;
  char *err = NULL;
  kf_template *t = load(root, rels, "t", &errors, &err);
  KF_CHECK(t == NULL);
  const char *want[] = {
      "t.json: template: error: must be \"t\" (the file's name)\n",
      "t.json: entry: error: must name the device function template to call\n",
      "t.json: params.n: error: parameter names are upper-case identifiers ([A-Z][A-Z0-9_]*) "
      "other than W and MMA\n",
      "t.json: args[0]: error: unknown argument type \"double*\"; allowed: ",
      "t.json: args: error: the last argument must be {\"name\": \"rows\", \"type\": \"int\"}\n",
      "t.json: launch.grid: error: must be an array of 3 dimensions\n",
      "t.json: launch.programmatic: error: must be true or false\n",
  };
  const char *at = err;
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    KF_CHECK_CONTAINS(at, want[i]);
    at = strstr(at, want[i]) + strlen(want[i]);
  }
  KF_CHECK(errors == (int)(sizeof want / sizeof want[0]));
  KF_CHECK(fx_count_lines_with(err, "error:") == errors);
  free(err);
}

KF_TEST(schema__template_eval_binds_params_width_and_mma) {
  const char *root = fx_tmpdir();
  write_minimal(root, "d", "t::entry");
  const char *rels[] = {"d", NULL};
  int errors = 0;
  char *err = NULL;
  kf_template *t = load(root, rels, "t", &errors, &err);
  KF_CHECK(t);
  kf_value values[2] = {{0, 96, 0}, {1, 0, 0.25}};
  kf_kernel_desc k = {.kind = "k", .tmpl = t, .values = values, .source_file = "models/m.json"};
  int64_t v = 0;
  char msg[256] = "";
  KF_CHECK(kf_template_eval(&k, 4, 1, t->grid[0], &v, msg, sizeof msg) == 0);
  KF_CHECK(v == 4 * 96);
  KF_CHECK(kf_template_eval(&k, 4, 1, "MMA * 10 + W", &v, msg, sizeof msg) == 0);
  KF_CHECK(v == 14);
  KF_CHECK(kf_template_eval(&k, 4, 0, "MMA * 10 + W", &v, msg, sizeof msg) == 0);
  KF_CHECK(v == 4);
  KF_CHECK(kf_template_eval(&k, 4, 1, "EPS * 4", &v, msg, sizeof msg) == -1);
  KF_CHECK_STR_EQ(msg, "\"EPS * 4\" is not an integer");
  KF_CHECK(kf_template_eval(&k, 4, 1, "hidden_size", &v, msg, sizeof msg) == -1);
  KF_CHECK_CONTAINS(msg, "unknown name 'hidden_size'");
  free(err);
  kf_template_free(t);
}

/* Loads e/t.json written from text (with t.cuh beside it) and expects it
 * refused with each of want (NULL-terminated) among the messages, one
 * error counted per line. */
static int refuses(const char *text, const char *const *want) {
  const char *root = fx_tmpdir();
  fx_write_free(root, "e/t.cuh", "#pragma once\n");
  fx_write_free(root, "e/t.json", text);
  const char *rels[] = {"e", NULL};
  int errors = 0;
  char *err = NULL;
  kf_template *t = load(root, rels, "t", &errors, &err);
  int ok = t == NULL && errors > 0 && fx_count_lines_with(err, "error:") == errors;
  for (const char *const *w = want; *w; w++)
    if (!strstr(err, *w)) {
      fprintf(stderr, "want: %s\ngot:\n%s", *w, err);
      ok = 0;
    }
  kf_template_free(t);
  free(err);
  return ok;
}

/* A schema with params (spliced), args and launch (spliced) otherwise valid. */
static char *schema_with(const char *entry, const char *params, const char *args,
                         const char *launch) {
  return kf_xasprintf("{\"template\": \"t\", \"header\": \"t.cuh\", \"entry\": \"%s\",\n"
                      " \"params\": {%s},\n"
                      " \"args\": [%s{\"name\": \"rows\", \"type\": \"int\"}],\n"
                      " \"launch\": {%s}}\n",
                      entry, params, args, launch);
}

static const char *const OK_LAUNCH = "\"grid\": [\"W\", 1, 1], \"block\": [64, 1, 1]";

KF_TEST(schema__constraints_that_no_value_or_every_value_meets_are_refused) {
  struct {
    const char *params;
    const char *want;
  } cases[] = {
      {"\"N\": {\"type\": \"int\", \"multiple_of\": 0}",
       "t.json: params.N.multiple_of: error: must be a positive integer, got 0\n"},
      {"\"N\": {\"type\": \"int\", \"multiple_of\": -8}",
       "t.json: params.N.multiple_of: error: must be a positive integer, got -8\n"},
      {"\"N\": {\"type\": \"int\", \"multiple_of\": 2.5}",
       "t.json: params.N.multiple_of: error: must be a positive integer, got 2.5\n"},
      {"\"N\": {\"type\": \"int\", \"one_of\": []}",
       "t.json: params.N.one_of: error: must be a non-empty array of integers, got []\n"},
      {"\"N\": {\"type\": \"int\", \"one_of\": 16}",
       "t.json: params.N.one_of: error: must be a non-empty array of integers, got a number\n"},
      {"\"N\": {\"type\": \"int\", \"one_of\": [16, \"32\"]}",
       "t.json: params.N.one_of[1]: error: must be an integer, got a string\n"},
      {"\"N\": {\"type\": \"int\", \"min\": 32, \"one_of\": [16, 64]}",
       "t.json: params.N.one_of[0]: error: 16 breaks the parameter's min, max or multiple_of\n"},
      {"\"N\": {\"type\": \"int\", \"min\": 64, \"max\": 8}",
       "t.json: params.N: error: min 64 is above max 8: no value is allowed\n"},
      {"\"N\": {\"type\": \"int\", \"min\": \"8\"}",
       "t.json: params.N.min: error: must be an integer, got a string\n"},
      {"\"N\": {\"type\": \"int\", \"max\": 7.5}",
       "t.json: params.N.max: error: must be an integer, got a number\n"},
      {"\"EPS\": {\"type\": \"float\", \"multiple_of\": 2}",
       "t.json: params.EPS.multiple_of: error: is for int parameters only, got a number\n"},
      {"\"EPS\": {\"type\": \"float\", \"one_of\": [1]}",
       "t.json: params.EPS.one_of: error: is for int parameters only, got an array\n"},
      {"\"N\": {\"type\": \"int\"}, \"N\": {\"type\": \"int\", \"min\": 9}",
       "t.json: params.N: error: duplicate member \"N\"\n"},
      /* "tuning": a knob's candidates, each one a value the param may take */
      {"\"N\": {\"type\": \"int\", \"one_of\": [1, 2], \"tuning\": [1, 4]}",
       "t.json: params.N.tuning[1]: error: 4 breaks the parameter's min, max, multiple_of or "
       "one_of\n"},
      {"\"N\": {\"type\": \"int\", \"tuning\": [2, 2]}",
       "t.json: params.N.tuning[1]: error: 2 is listed twice\n"},
      {"\"N\": {\"type\": \"int\", \"tuning\": []}",
       "t.json: params.N.tuning: error: must be a non-empty array of integers, got []\n"},
      {"\"EPS\": {\"type\": \"float\", \"tuning\": [1]}",
       "t.json: params.EPS.tuning: error: is for int parameters only, got an array\n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *text = schema_with("t::entry", cases[i].params, "", OK_LAUNCH);
    const char *want[] = {cases[i].want, NULL};
    KF_CHECK(refuses(text, want));
    free(text);
  }
}

KF_TEST(schema__names_pasted_into_the_generated_source_must_be_identifiers) {
  struct {
    const char *entry, *params, *args, *want;
  } cases[] = {
      {"kf::x(); system(\\\"id\\\"); kf::y", "", "",
       "t.json: entry: error: must be a C++ name such as \"kf::add_rmsnorm_entry\""},
      {"kf::", "", "", "t.json: entry: error: must be a C++ name"},
      {"kf:::x", "", "", "t.json: entry: error: must be a C++ name"},
      {"kf::template", "", "", "t.json: entry: error: must be a C++ name"},
      {"t::e", "\"N-1\": {\"type\": \"int\"}", "",
       "t.json: params.N-1: error: parameter names are upper-case identifiers"},
      {"t::e", "\"MMA\": {\"type\": \"int\"}", "",
       "t.json: params.MMA: error: parameter names are upper-case identifiers"},
      {"t::e", "\"Nx\": {\"type\": \"int\"}", "",
       "t.json: params.Nx: error: parameter names are upper-case identifiers"},
      {"t::e", "", "{\"name\": \"x); evil(\", \"type\": \"int*\"}, ",
       "t.json: args[0].name: error: must be a C identifier that is not a keyword, got \"x); "
       "evil(\"\n"},
      {"t::e", "", "{\"name\": \"int\", \"type\": \"int*\"}, ",
       "t.json: args[0].name: error: must be a C identifier that is not a keyword"},
      {"t::e", "", "{\"name\": \"__x\", \"type\": \"int*\"}, ",
       "t.json: args[0].name: error: must be a C identifier that is not a keyword"},
      {"t::e", "", "{\"name\": \"rows\", \"type\": \"int*\"}, ",
       "t.json: args[1].name: error: \"rows\" is also the name of args[0]\n"},
      {"t::e", "", "{\"name\": \"x\", \"type\": \"int*; int y\"}, ",
       "t.json: args[0]: error: unknown argument type \"int*; int y\""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *text = schema_with(cases[i].entry, cases[i].params, cases[i].args, OK_LAUNCH);
    const char *want[] = {cases[i].want, NULL};
    KF_CHECK(refuses(text, want));
    free(text);
  }
  /* a qualified name, with a leading "::" too, is an entry */
  const char *root = fx_tmpdir();
  fx_write_free(root, "q/t.cuh", "#pragma once\n");
  char *text = schema_with("::kf::v2::entry_1", "\"HEAD_DIM_2\": {\"type\": \"int\"}",
                           "{\"name\": \"x_0\", \"type\": \"int*\"}, ", OK_LAUNCH);
  fx_write_free(root, "q/t.json", text);
  free(text);
  const char *rels[] = {"q", NULL};
  int errors = 0;
  char *err = NULL;
  kf_template *t = load(root, rels, "t", &errors, &err);
  KF_CHECK(t && errors == 0);
  KF_CHECK_STR_EQ(err, "");
  free(err);
  kf_template_free(t);
}

KF_TEST(schema__launch_dims_given_as_numbers_are_checked_against_every_backend) {
  struct {
    const char *launch, *want;
  } cases[] = {
      {"\"grid\": [\"W\", 1, 1], \"block\": [1e9, 1, 1]",
       "t.json: launch.block[0]: error: block[0] = 1000000000; a block's x must be from 1 to "
       "1024\n"},
      {"\"grid\": [\"W\", 1, 1], \"block\": [64, 32, 1]",
       "t.json: launch.block: error: a block of 64 x 32 x 1 = 2048 threads; at most 1024\n"},
      {"\"grid\": [\"W\", 1, 1], \"block\": [1, 1, 65]",
       "t.json: launch.block[2]: error: block[2] = 65; a block's z must be from 1 to 64\n"},
      {"\"grid\": [0, 1, 1], \"block\": [32, 1, 1]",
       "t.json: launch.grid[0]: error: grid[0] = 0; the grid's x must be from 1 to 2147483647\n"},
      {"\"grid\": [\"W\", -1, 1], \"block\": [32, 1, 1]",
       "t.json: launch.grid[1]: error: grid[1] = -1; the grid's y must be from 1 to 65535\n"},
      {"\"grid\": [\"W\", 1, 1], \"block\": [32, 1, 1], \"cluster\": [0, 1, 1]",
       "t.json: launch.cluster[0]: error: cluster[0] = 0; must be at least 1\n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *text = schema_with("t::e", "", "", cases[i].launch);
    const char *want[] = {cases[i].want, NULL};
    KF_CHECK(refuses(text, want));
    free(text);
  }
}

KF_TEST(schema__max_width_is_read_and_checked) {
  char *text = schema_with("t::e", "", "", OK_LAUNCH);
  char *bad = kf_xasprintf("%.*s, \"max_width\": 0}\n", (int)(strrchr(text, '}') - text), text);
  const char *want[] = {"t.json: max_width: error: must be an integer from 1 to 256", NULL};
  KF_CHECK(refuses(bad, want));
  free(bad);
  const char *root = fx_tmpdir();
  fx_write_free(root, "m/t.cuh", "#pragma once\n");
  char *good = kf_xasprintf("%.*s, \"max_width\": 8}\n", (int)(strrchr(text, '}') - text), text);
  fx_write_free(root, "m/t.json", good);
  const char *rels[] = {"m", NULL};
  int errors = 0;
  char *err = NULL;
  kf_template *t = load(root, rels, "t", &errors, &err);
  KF_CHECK(t && t->max_width == 8);
  kf_template_free(t);
  free(err);
  fx_write_free(root, "m/t.json", text);
  t = load(root, rels, "t", &errors, &err);
  KF_CHECK(t && t->max_width == KF_MAX_WIDTH);
  kf_template_free(t);
  free(err);
  free(good);
  free(text);
}

KF_TEST_MAIN()
