/* model_fixture.h: a small tree of templates, a family preset and a
 * description, written by the test itself into its temporary directory so
 * that the tests do not depend on the shipped templates. Shared by the model,
 * plan and digest tests.
 *
 *   templates/t_all.{json,cuh}  int N (min/max/multiple_of), float EPS,
 *                               int PAGE (one_of); includes t_common.cuh
 *   templates/t_one.{json,cuh}  one int N
 *   templates/t_common.cuh      included by both
 *   families/fam.json           family "fam": kinds norm (t_all), proj (t_one)
 *   models/m.json               written per test */
#ifndef KF_MODEL_FIXTURE_H
#define KF_MODEL_FIXTURE_H

#include "gen_fixture.h"

#include "model.h"

static const char *const FX_T_ALL_JSON =
    "{\n"
    "  \"template\": \"t_all\",\n"
    "  \"header\": \"t_all.cuh\",\n"
    "  \"entry\": \"t::all_entry\",\n"
    "  \"params\": {\n"
    "    \"N\": {\"type\": \"int\", \"min\": 32, \"max\": 65536, \"multiple_of\": 32},\n"
    "    \"EPS\": {\"type\": \"float\", \"min\": 0, \"max\": 1},\n"
    "    \"PAGE\": {\"type\": \"int\", \"one_of\": [16, 64]}\n"
    "  },\n"
    "  \"args\": [\n"
    "    {\"name\": \"x\", \"type\": \"const kf_bf16*\"},\n"
    "    {\"name\": \"out\", \"type\": \"float*\"},\n"
    "    {\"name\": \"scale\", \"type\": \"float\"},\n"
    "    {\"name\": \"rows\", \"type\": \"int\"}\n"
    "  ],\n"
    "  \"launch\": {\"grid\": [\"(W + 1) / 2\", \"N / 32\", 1], \"block\": [64, 2, 1],\n"
    "             \"shared_bytes\": \"N * 4\"}\n"
    "}\n";

static const char *const FX_T_ALL_CUH = "// t_all: test template\n"
                                        "#pragma once\n"
                                        "#include \"t_common.cuh\"\n"
                                        "namespace t {\n"
                                        "template <class P>\n"
                                        "__device__ void all_entry(const kf_bf16 *x, float *out, "
                                        "float scale, int rows) {}\n"
                                        "} // namespace t\n";

static const char *const FX_T_ONE_JSON =
    "{\n"
    "  \"template\": \"t_one\",\n"
    "  \"header\": \"t_one.cuh\",\n"
    "  \"entry\": \"t::one_entry\",\n"
    "  \"params\": {\"N\": {\"type\": \"int\", \"min\": 1}},\n"
    "  \"args\": [{\"name\": \"out\", \"type\": \"float*\"}, {\"name\": \"rows\", \"type\": "
    "\"int\"}],\n"
    "  \"launch\": {\"grid\": [\"W\", 1, 1], \"block\": [32, 1, 1], \"shared_bytes\": 0}\n"
    "}\n";

static const char *const FX_T_ONE_CUH = "#pragma once\n"
                                        "#include \"t_common.cuh\"\n"
                                        "namespace t {\n"
                                        "template <class P> __device__ void one_entry(float *out, "
                                        "int rows) {}\n"
                                        "} // namespace t\n";

static const char *const FX_T_COMMON_CUH = "#pragma once\n"
                                           "typedef unsigned short kf_bf16;\n"
                                           "namespace t { constexpr int common_value = 1; }\n";

static const char *const FX_FAMILY_JSON =
    "{\n"
    "  \"family\": \"fam\",\n"
    "  \"shape_fields\": {\"hidden_size\": \"int\", \"rms_norm_eps\": \"float\",\n"
    "                   \"dtype\": \"string\"},\n"
    "  \"optional_fields\": {\"page\": {\"type\": \"int\", \"default\": 16}},\n"
    "  \"kernels\": [\n"
    "    {\"kind\": \"proj\", \"template\": \"t_one\", \"params\": {\"N\": \"hidden_size * 2\"}},\n"
    "    {\"kind\": \"norm\", \"template\": \"t_all\",\n"
    "     \"params\": {\"N\": \"hidden_size\", \"EPS\": \"rms_norm_eps\", \"PAGE\": \"page\"}}\n"
    "  ]\n"
    "}\n";

/* Writes the fixture tree into a fresh directory, makes it the working
 * directory and returns it. */
static KF_UNUSED const char *fx_model_tree(void) {
  const char *root = fx_tmpdir();
  fx_write_free(root, "templates/t_all.json", FX_T_ALL_JSON);
  fx_write_free(root, "templates/t_all.cuh", FX_T_ALL_CUH);
  fx_write_free(root, "templates/t_one.json", FX_T_ONE_JSON);
  fx_write_free(root, "templates/t_one.cuh", FX_T_ONE_CUH);
  fx_write_free(root, "templates/t_common.cuh", FX_T_COMMON_CUH);
  fx_write_free(root, "families/fam.json", FX_FAMILY_JSON);
  if (chdir(root) != 0)
    fx_die("chdir %s: %s", root, strerror(errno));
  return root;
}

static KF_UNUSED kf_model_options fx_options(void) {
  kf_model_options o;
  memset(&o, 0, sizeof o);
  o.templates_dir = "templates";
  o.families_dir = "families";
  return o;
}

/* Writes text to rel (relative to the working directory), loads it with opt
 * (NULL: fx_options) and returns the model or NULL; *err gets stderr
 * (caller frees; may be NULL). */
static KF_UNUSED kf_model *fx_load_desc(const char *rel, const char *text,
                                        const kf_model_options *opt, char **err) {
  char cwd[4096];
  if (!getcwd(cwd, sizeof cwd))
    fx_die("getcwd: %s", strerror(errno));
  fx_write_free(cwd, rel, text);
  kf_model_options def = fx_options();
  fx_capture_begin();
  kf_model *m = kf_model_load(rel, opt ? opt : &def);
  char *out = fx_capture_end();
  if (err)
    *err = out;
  else
    free(out);
  return m;
}

/* A description using t_all and t_one directly; params spliced in. */
static KF_UNUSED char *fx_desc_all(const char *all_params, const char *extra) {
  return kf_xasprintf("{\n"
                      "  \"name\": \"m\",\n"
                      "  \"shape\": {\"hidden_size\": 1024, \"eps\": 1e-6},\n"
                      "  \"kernels\": [\n"
                      "    {\"kind\": \"norm\", \"template\": \"t_all\", \"params\": {%s}}\n"
                      "  ]%s\n"
                      "}\n",
                      all_params, extra ? extra : "");
}

#endif /* KF_MODEL_FIXTURE_H */
