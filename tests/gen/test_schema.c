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
      "t.json: params.n: error: parameter names are upper-case identifiers other than W\n",
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
  kf_kernel_desc k = {"k", t, values, "models/m.json"};
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

KF_TEST_MAIN()
