/* Tests of runtime/rt_manifest.c and rt_meta.c: what a manifest must hold
 * (docs/contracts.md, "Manifest"), and the reasons given when it doesn't. */
#define _GNU_SOURCE
#include "kf_test.h"
#include "rt_internal.h"

#include <stdarg.h>
#include <stdlib.h>

/* printf into a malloc'd string; aborts when out of memory. (Not asprintf:
 * a local whose address asprintf gets looks to gcc -O3 like the target of
 * the string it returns, and code inlined after it is warned about.) */
static char *xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = n < 0 ? NULL : malloc((size_t)n + 1);
  if (!s)
    abort();
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

static const char *GOOD = "{\n"
                          "  \"format\": 1,\n"
                          "  \"model\": \"qwen3-0.6b\",\n"
                          "  \"arch\": \"sm_90a\",\n"
                          "  \"backend\": \"cuda\",\n"
                          "  \"kernels\": [\n"
                          "    {\n"
                          "      \"id\": \"qwen3-0.6b/input_norm/w4/sm_90a\",\n"
                          "      \"kind\": \"input_norm\",\n"
                          "      \"width\": 4,\n"
                          "      \"key\": \"0123456789abcdef0123456789abcdef\",\n"
                          "      \"object\": \"objects/01/0123456789abcdef0123456789abcdef/"
                          "object.cubin\",\n"
                          "      \"meta\": \"objects/01/0123456789abcdef0123456789abcdef/"
                          "meta.json\",\n"
                          "      \"checksum\": \"00112233445566778899AABBCCDDEEFF\",\n"
                          "      \"size\": 6352,\n"
                          "      \"symbol\": \"kf_qwen3_0_6b_input_norm_w4_sm_90a_1a2b3c4d\",\n"
                          "      \"params\": [{\"name\": \"x\", \"type\": \"const kf_bf16*\", "
                          "\"size\": 8}, {\"name\": \"eps\", \"type\": \"float\", \"size\": 4}, "
                          "{\"name\": \"rows\", \"type\": \"int\", \"size\": 4}],\n"
                          "      \"launch\": {\"grid\": [4, 1, 1], \"block\": [256, 1, 1], "
                          "\"shared_bytes\": 65536}\n"
                          "    }\n"
                          "  ]\n"
                          "}\n";

/* GOOD with the first occurrence of from replaced by to; malloc'd. */
static char *edit(const char *from, const char *to) {
  const char *at = strstr(GOOD, from);
  if (!at)
    abort();
  return xprintf("%.*s%s%s", (int)(at - GOOD), GOOD, to, at + strlen(from));
}

static kf_status parse(const char *text, rt_manifest *m, rt_err *err) {
  return rt_manifest_parse("cache/v1/manifests/qwen3-0.6b/sm_90a.json", text, strlen(text), m, err);
}

/* Parses GOOD edited once; expects status and a reason holding needle. */
static int refuses(const char *from, const char *to, kf_status want, const char *needle) {
  rt_manifest m;
  rt_err err;
  char *text = edit(from, to);
  kf_status st = parse(text, &m, &err);
  free(text);
  if (st != want || m.kernels != NULL || !strstr(err.text, needle)) {
    fprintf(stderr, "  status %d (want %d), reason: %s\n", st, want, err.text);
    return 0;
  }
  return 1;
}

KF_TEST(manifest__parses_every_field_the_runtime_uses) {
  rt_manifest m;
  rt_err err;
  const rt_kdesc *k;
  KF_CHECK(parse(GOOD, &m, &err) == KF_OK);
  KF_CHECK(m.format == 1 && m.backend == KF_BACKEND_CUDA && m.nkernels == 1);
  KF_CHECK_STR_EQ(m.model, "qwen3-0.6b");
  KF_CHECK_STR_EQ(m.arch, "sm_90a");
  k = &m.kernels[0];
  KF_CHECK_STR_EQ(k->id, "qwen3-0.6b/input_norm/w4/sm_90a");
  KF_CHECK_STR_EQ(k->kind, "input_norm");
  KF_CHECK_STR_EQ(k->symbol, "kf_qwen3_0_6b_input_norm_w4_sm_90a_1a2b3c4d");
  KF_CHECK_STR_EQ(k->object, "objects/01/0123456789abcdef0123456789abcdef/object.cubin");
  KF_CHECK(k->width == 4 && k->size == 6352);
  KF_CHECK(k->checksum[0] == 0x00 && k->checksum[1] == 0x11 && k->checksum[15] == 0xff);
  KF_CHECK(k->nparams == 3);
  KF_CHECK_STR_EQ(k->params[0].type, "const kf_bf16*");
  KF_CHECK(k->params[0].size == 8 && k->params[1].size == 4);
  KF_CHECK_STR_EQ(k->params[2].name, "rows");
  KF_CHECK(k->grid[0] == 4 && k->grid[1] == 1 && k->block[0] == 256);
  KF_CHECK(k->shared == 65536);
  rt_manifest_free(&m);
}

KF_TEST(manifest__refuses_a_newer_format_naming_the_file) {
  KF_CHECK(refuses("\"format\": 1", "\"format\": 2", KF_ERR_FORMAT,
                   "cache/v1/manifests/qwen3-0.6b/sm_90a.json: manifest "
                   "format 2 is newer"));
  /* Even when the rest has changed shape beyond recognition. */
  {
    rt_manifest m;
    rt_err err;
    const char *v2 = "{\"format\": 2, \"entries\": {}}";
    KF_CHECK(parse(v2, &m, &err) == KF_ERR_FORMAT);
  }
}

KF_TEST(manifest__malformed_json_names_path_line_and_column) {
  KF_CHECK(refuses("\"model\": \"qwen3-0.6b\",", "\"model\": \"qwen3-0.6b\"", KF_ERR_BAD_MANIFEST,
                   "cache/v1/manifests/qwen3-0.6b/sm_90a.json:4:"));
}

KF_TEST(manifest__missing_field_is_named) {
  KF_CHECK(refuses("\"symbol\"", "\"symbolx\"", KF_ERR_BAD_MANIFEST,
                   "sm_90a.json: kernels[0].symbol: error: missing"));
  KF_CHECK(refuses("\"width\": 4", "\"width\": \"4\"", KF_ERR_BAD_MANIFEST,
                   "kernels[0].width: error: must be an integer"));
}

KF_TEST(manifest__param_types_come_from_the_contract_set) {
  KF_CHECK(refuses("\"type\": \"float\"", "\"type\": \"double\"", KF_ERR_BAD_MANIFEST,
                   "kernels[0].params[1].type: error: unknown type 'double'"));
  KF_CHECK(refuses("\"type\": \"float\", \"size\": 4", "\"type\": \"float\", \"size\": 8",
                   KF_ERR_BAD_MANIFEST, "kernels[0].params[1].size"));
}

KF_TEST(manifest__id_must_agree_with_model_kind_width_and_arch) {
  KF_CHECK(refuses("\"width\": 4", "\"width\": 8", KF_ERR_BAD_MANIFEST,
                   "kernels[0].id: error: 'qwen3-0.6b/input_norm/w4/sm_90a' "
                   "does not match"));
}

KF_TEST(manifest__object_paths_stay_inside_the_cache) {
  KF_CHECK(refuses("\"object\": \"objects/01", "\"object\": \"../../etc/01", KF_ERR_BAD_MANIFEST,
                   "kernels[0].object"));
  KF_CHECK(refuses("\"object\": \"objects/01", "\"object\": \"/objects/01", KF_ERR_BAD_MANIFEST,
                   "kernels[0].object"));
}

KF_TEST(manifest__checksum_must_be_32_hex_digits) {
  KF_CHECK(refuses("00112233445566778899AABBCCDDEEFF", "00112233445566778899AABBCCDDEEFG",
                   KF_ERR_BAD_MANIFEST, "kernels[0].checksum"));
  KF_CHECK(refuses("00112233445566778899AABBCCDDEEFF", "00112233445566778899AABBCCDDEE",
                   KF_ERR_BAD_MANIFEST, "kernels[0].checksum"));
}

KF_TEST(manifest__backend_and_arch_must_agree) {
  KF_CHECK(refuses("\"backend\": \"cuda\"", "\"backend\": \"hip\"", KF_ERR_BAD_MANIFEST,
                   "arch: error: 'sm_90a' is not a hip"));
  KF_CHECK(
      refuses("\"backend\": \"cuda\"", "\"backend\": \"metal\"", KF_ERR_BAD_MANIFEST, "backend"));
}

KF_TEST(manifest__unreadable_file_names_its_path) {
  rt_manifest m;
  rt_err err;
  KF_CHECK(rt_manifest_load("/nonexistent/kf/sm_90a.json", &m, &err) == KF_ERR_BAD_MANIFEST);
  KF_CHECK_CONTAINS(err.text, "/nonexistent/kf/sm_90a.json");
}

KF_TEST(meta__reads_resources_and_refuses_a_malformed_file) {
  char dir[] = "/tmp/kfmeta-XXXXXX", path[64];
  kf_resources r;
  rt_err err;
  FILE *f;
  KF_CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/meta.json", dir);
  f = fopen(path, "w");
  fputs("{\"format\": 1, \"resources\": {\"registers\": 40, \"stack_bytes\": "
        "8, \"spill_stores\": 12, \"spill_loads\": 16, \"shared_bytes\": "
        "2048}}",
        f);
  fclose(f);
  KF_CHECK(rt_meta_load(path, &r, &err) == KF_OK);
  KF_CHECK(r.registers == 40 && r.stack_bytes == 8 && r.spill_stores == 12 && r.spill_loads == 16 &&
           r.shared_bytes == 2048);
  f = fopen(path, "w");
  fputs("{\"format\": 1, \"resources\": {\"registers\": 40}}", f);
  fclose(f);
  KF_CHECK(rt_meta_load(path, &r, &err) == KF_ERR_BAD_META);
  KF_CHECK_CONTAINS(err.text, "resources.spill_stores");
  KF_CHECK_CONTAINS(err.text, path);
  remove(path);
  remove(dir);
}

/* The generator writes one parameter list per kind under "signatures" and
 * none in the kernels: they must reach each kernel of the kind. */
static const char *SIG_PARAMS =
    "\"params\": [{\"name\": \"x\", \"type\": \"const kf_bf16*\", \"size\": 8}, "
    "{\"name\": \"eps\", \"type\": \"float\", \"size\": 4}, "
    "{\"name\": \"rows\", \"type\": \"int\", \"size\": 4}],\n";

static char *with_signatures(const char *sig_kind, const char *sig_body) {
  char *no_params = edit(SIG_PARAMS, "");
  const char *at = strstr(no_params, "  \"kernels\"");
  if (!at)
    abort();
  char *out = xprintf("%.*s  \"signatures\": {\"%s\": %s},\n%s", (int)(at - no_params), no_params,
                      sig_kind, sig_body, at);
  free(no_params);
  return out;
}

KF_TEST(manifest__kernel_params_come_from_its_kinds_signature) {
  char *text = with_signatures("input_norm", "{\"params\": [{\"name\": \"x\", \"type\": "
                                             "\"const kf_bf16*\", \"size\": 8}, {\"name\": "
                                             "\"rows\", \"type\": \"int\", \"size\": 4}]}");
  rt_manifest m;
  rt_err err;
  kf_status st = parse(text, &m, &err);
  free(text);
  KF_CHECK(st == KF_OK);
  KF_CHECK(m.nkernels == 1 && m.kernels[0].nparams == 2);
  KF_CHECK_STR_EQ(m.kernels[0].params[0].name, "x");
  KF_CHECK_STR_EQ(m.kernels[0].params[1].type, "int");
  KF_CHECK(m.kernels[0].params[1].size == 4);
  rt_manifest_free(&m);
}

KF_TEST(manifest__kernel_without_params_or_signature_is_refused) {
  char *text = with_signatures("o_proj", "{\"params\": [{\"name\": \"rows\", \"type\": "
                                         "\"int\", \"size\": 4}]}");
  rt_manifest m;
  rt_err err;
  kf_status st = parse(text, &m, &err);
  free(text);
  KF_CHECK(st == KF_ERR_BAD_MANIFEST);
  KF_CHECK_CONTAINS(err.text, "kernels[0].params: error: missing, and \"signatures\" has no entry "
                              "for kind 'input_norm'");
}

KF_TEST(manifest__bad_signature_names_its_kind_and_field) {
  char *text = with_signatures("input_norm", "{\"params\": [{\"name\": \"x\", \"type\": "
                                             "\"double\", \"size\": 8}]}");
  rt_manifest m;
  rt_err err;
  kf_status st = parse(text, &m, &err);
  free(text);
  KF_CHECK(st == KF_ERR_BAD_MANIFEST);
  KF_CHECK_CONTAINS(err.text, "signatures.input_norm.params[0].type: error: unknown type 'double'");
}

/* A manifest of hundreds of kernels (a server's real case): every kernel
 * arrives intact, and a problem deep inside names its kernel and line. */
static char *big_manifest(int n, int bad_index, const char *bad_field) {
  size_t cap = (size_t)n * 700 + 1024, o = 0;
  char *t = malloc(cap);
  o += (size_t)snprintf(t + o, cap - o,
                        "{\n  \"format\": 1,\n  \"model\": \"big\",\n  \"arch\": \"sm_90a\",\n"
                        "  \"backend\": \"cuda\",\n  \"signatures\": {\"k\": {\"params\": "
                        "[{\"name\": \"rows\", \"type\": \"int\", \"size\": 4}]}},\n"
                        "  \"kernels\": [\n");
  for (int i = 0; i < n; i++)
    o += (size_t)snprintf(
        t + o, cap - o,
        "    {\"id\": \"big/k/w%d/sm_90a\", \"kind\": \"k\", \"width\": %d, \"key\": "
        "\"0123456789abcdef0123456789abcdef\", \"object\": \"objects/01/x%d/object.cubin\", "
        "\"meta\": \"objects/01/x%d/meta.json\", \"checksum\": "
        "\"00112233445566778899aabbccddeeff\", \"size\": %d, \"symbol\": \"%s%d\", \"launch\": "
        "{\"grid\": [%d, 1, 1], \"block\": [32, 1, 1], \"shared_bytes\": 0}}%s\n",
        i + 1, i + 1, i, i, 1000 + i, i == bad_index ? bad_field : "kf_big_", i, i + 1,
        i + 1 < n ? "," : "");
  snprintf(t + o, cap - o, "  ]\n}\n");
  return t;
}

KF_TEST(manifest__many_kernels_parse_like_a_whole_parse) {
  char *text = big_manifest(300, -1, NULL);
  KF_CHECK(strlen(text) > 65536);
  rt_manifest m;
  rt_err err;
  kf_status st = rt_manifest_parse("big.json", text, strlen(text), &m, &err);
  free(text);
  KF_CHECK(st == KF_OK);
  KF_CHECK(m.nkernels == 300);
  for (int i = 0; i < 300; i++) {
    char id[64], sym[32];
    snprintf(id, sizeof id, "big/k/w%d/sm_90a", i + 1);
    snprintf(sym, sizeof sym, "kf_big_%d", i);
    KF_CHECK_STR_EQ(m.kernels[i].id, id);
    KF_CHECK_STR_EQ(m.kernels[i].symbol, sym);
    KF_CHECK(m.kernels[i].width == i + 1 && m.kernels[i].size == 1000ull + (unsigned)i);
    KF_CHECK(m.kernels[i].grid[0] == (unsigned)i + 1 && m.kernels[i].nparams == 1);
  }
  rt_manifest_free(&m);
}

KF_TEST(manifest__many_kernels_report_the_first_bad_one) {
  char *text = big_manifest(300, 250, "9bad_");
  rt_manifest m;
  rt_err err;
  kf_status st = rt_manifest_parse("big.json", text, strlen(text), &m, &err);
  free(text);
  KF_CHECK(st == KF_ERR_BAD_MANIFEST && m.kernels == NULL);
  KF_CHECK_CONTAINS(err.text,
                    "big.json: kernels[250].symbol: error: '9bad_250' is not a C identifier");
}

KF_TEST(manifest__many_kernels_syntax_error_names_its_line) {
  char *text = big_manifest(300, -1, NULL);
  char *at = strstr(text, "\"big/k/w101/sm_90a\"");
  KF_CHECK(at != NULL);
  at[-1] = '['; /* "{[\"id\"…": kernels[100] is no longer an object */
  rt_manifest m;
  rt_err err;
  kf_status st = rt_manifest_parse("big.json", text, strlen(text), &m, &err);
  free(text);
  KF_CHECK(st == KF_ERR_BAD_MANIFEST && m.kernels == NULL);
  KF_CHECK_CONTAINS(err.text, "big.json:108:"); /* line 8 holds kernels[0] */
}

/* ---- the scanner (rt_json.c) and streamed parsing ---------------------- */

/* Whether the value v, followed by more text, is found to end where it does. */
static int ends_where_it_does(const char *v) {
  char t[512];
  snprintf(t, sizeof t, "  %s , 1]", v);
  return rt_json_skip(t, strlen(t), 0) == 2 + strlen(v);
}

static int refused(const char *v) { return rt_json_skip(v, strlen(v), 0) == 0; }

KF_TEST(json__skip_ends_tricky_values_where_they_end) {
  KF_CHECK(ends_where_it_does("\"a\\\"]}b\"")); /* escaped quote, brackets */
  KF_CHECK(ends_where_it_does("\"\\\\\""));     /* an escaped backslash */
  KF_CHECK(
      ends_where_it_does("\"\\u00e9\\uD83D\\uDE00 \\/\\b\\f\\n\\r\\t\"")); /* unicode escapes */
  KF_CHECK(ends_where_it_does("\"a\tb\x01\"")); /* raw control bytes: cJSON takes them */
  KF_CHECK(ends_where_it_does("\"a long string that spans several words \\\" of eight\""));
  KF_CHECK(ends_where_it_does("[[1, [2, {\"a\": []}]], \"]\", {\"}\": \"{\"}, []]"));
  KF_CHECK(ends_where_it_does("{\"k\": {\"k\": [true, false, null, -0.5e+3, 10, 0, 1E2]}}"));
  KF_CHECK(ends_where_it_does("{}") && ends_where_it_does("-0") && ends_where_it_does("null"));
  KF_CHECK(refused("\"\\uD83D\"") && refused("\"\\uDE00\"") && refused("\"\\uD83Dx\""));
  KF_CHECK(refused("\"\\uZZZZ\"") && refused("\"\\x\"") && refused("\"abc"));
  KF_CHECK(refused("[1,]") && refused("{\"a\" 1}") && refused("{\"a\": 1,}") && refused("{1: 2}"));
  KF_CHECK(refused("[01]") && refused("[1.]") && refused("-") && refused(".5") && refused("[1e]"));
  KF_CHECK(rt_json_skip("01", 2, 0) == 1); /* "0", then something else */
  KF_CHECK(refused("tru") && refused("[") && refused("{\"a\": 1") && refused("") && refused("]"));
  /* nesting past the scanner's depth is left to cJSON */
  char deep[300];
  memset(deep, '[', 100);
  memset(deep + 100, ']', 100);
  deep[200] = '\0';
  KF_CHECK(refused(deep));
}

KF_TEST(json__scan_finds_the_kernels_array_and_not_one_inside_a_string) {
  const char *t = "{\"note\": \"\\\"kernels\\\": [1, 2]\", \"kernels\": [{\"a\": \"]\"}, [1, [2]], "
                  "\"x,y\"], \"kernels\": [9], \"after\": {\"kernels\": []}}";
  const char *arr = strstr(t, "[{");
  rt_json_layout lay;
  KF_CHECK(rt_json_scan_manifest(t, strlen(t), &lay) == 0);
  KF_CHECK(lay.nkernels == 3);
  KF_CHECK(lay.kernels_start == (size_t)(arr - t));
  KF_CHECK(strncmp(t + lay.kernels_end - 2, "\"], \"kernels\": [9]", 18) == 0);
  KF_CHECK(rt_json_scan_manifest("{\"kernels\":[]}", 14, &lay) == 0 && lay.nkernels == 0 &&
           lay.kernels_start == 11 && lay.kernels_end == 13);
  /* no array: nothing found, and cJSON will say what is wrong */
  KF_CHECK(rt_json_scan_manifest("{\"kernels\": {}}", 15, &lay) == 0 && lay.kernels_end == 0);
  KF_CHECK(rt_json_scan_manifest(" {} ", 4, &lay) == 0 && lay.kernels_end == 0);
  /* what only a whole parse reads right */
  const char *whole[] = {"{\"kern\\u0065ls\": []}",
                         "{\"kernels\": []} x",
                         "{\"kernels\": [1,]}",
                         "[1]",
                         "{\"a\": 1",
                         "\xEF\xBB\xBF{}",
                         ""};
  for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++)
    KF_CHECK(rt_json_scan_manifest(whole[i], strlen(whole[i]), &lay) == -1);
}

/* A manifest of n kernels (kinds a then b) in the generator's order:
 * header, "signatures", "kernels"; kernels_first puts "kernels" first and
 * the rest after it. Strings hold what a scanner could trip on. */
static char *shaped_manifest(int n, int kernels_first) {
  static const char *head =
      "  \"format\": 1,\n"
      "  \"generator\": \"kforge \\\"0.1\\\" ]}[{ \\\"kernels\\\": [\",\n"
      "  \"model\": \"m\",\n  \"arch\": \"sm_90a\",\n  \"backend\": \"cuda\",\n"
      "  \"signatures\": {\n"
      "    \"a\": {\"params\": [{\"name\": \"x\", \"type\": \"float*\", \"size\": 8},\n"
      "                       {\"name\": \"rows\", \"type\": \"int\", \"size\": 4}]},\n"
      "    \"b\": {\"params\": [{\"name\": \"rows\", \"type\": \"int\", \"size\": 4}]}\n"
      "  }";
  char *out;
  size_t size;
  FILE *f = open_memstream(&out, &size);
  fputs("{\n", f);
  if (!kernels_first)
    fprintf(f, "%s,\n", head);
  fputs("  \"kernels\": [\n", f);
  for (int i = 0; i < n; i++)
    fprintf(
        f,
        "    {\"id\": \"m/%s/w%d/sm_90a\", \"kind\": \"%s\", \"width\": %d,\n"
        "     \"key\": \"0123456789abcdef0123456789abcdef\",\n"
        "     \"object\": \"objects/\\u0061]/%d.cubin\", \"meta\": \"objects/a]/%d.json\",\n"
        "     \"checksum\": \"00112233445566778899aabbccddeeff\", \"size\": %d,\n"
        "     \"symbol\": \"kf_%d\",\n"
        "     \"note\": \"a \\\"quoted\\\" ] } [ { , : \\\\ \\u00e9 \\ud83d\\ude00\",\n"
        "     \"extra\": [[1, [2.5e-3, {\"x\": \"]\"}]], [], {}, true, false, null, -0],\n"
        "     \"launch\": {\"grid\": [%d, 1, 1], \"block\": [64, 1, 1], \"shared_bytes\": 0}}%s\n",
        i < n / 2 ? "a" : "b", i + 1, i < n / 2 ? "a" : "b", i + 1, i, i, 100 + i, i, i + 1,
        i + 1 < n ? "," : "");
  fputs("  ]", f);
  if (kernels_first)
    fprintf(f, ",\n%s", head);
  fputs("\n}\n", f);
  fclose(f);
  return out;
}

/* text without whitespace outside strings (malloc'd) */
static char *compact(const char *text) {
  char *out = malloc(strlen(text) + 1), *o = out;
  int in_string = 0;
  for (const char *p = text; *p; p++) {
    if (in_string && *p == '\\') {
      *o++ = *p++;
    } else if (*p == '"') {
      in_string = !in_string;
    } else if (!in_string && (*p == ' ' || *p == '\n' || *p == '\t')) {
      continue;
    }
    *o++ = *p;
  }
  *o = '\0';
  return out;
}

/* Writes text to a fresh file; its path is malloc'd. */
static char *temp_manifest(const char *text) {
  char dir[] = "/tmp/kfman-XXXXXX";
  if (!mkdtemp(dir))
    abort();
  char *path = xprintf("%s/sm_90a.json", dir);
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
  return path;
}

static void remove_temp(char *path) {
  remove(path);
  *strrchr(path, '/') = '\0';
  remove(path);
  free(path);
}

/* The entries of shaped_manifest(n, ...) arrived intact. */
static int shaped_intact(const rt_manifest *m, int n) {
  if (m->nkernels != n || m->nparsed != n || strcmp(m->model, "m") != 0 || m->nsigs != 2)
    return 0;
  for (int i = 0; i < n; i++) {
    const rt_kdesc *k = &m->kernels[i];
    char id[64], object[64];
    snprintf(id, sizeof id, "m/%s/w%d/sm_90a", i < n / 2 ? "a" : "b", i + 1);
    snprintf(object, sizeof object, "objects/a]/%d.cubin", i);
    if (strcmp(k->id, id) != 0 || strcmp(k->object, object) != 0 || k->size != 100u + (unsigned)i ||
        k->grid[0] != (unsigned)i + 1 || k->block[0] != 64 || !k->params_shared ||
        k->nparams != (i < n / 2 ? 2 : 1) || strcmp(k->params[k->nparams - 1].name, "rows") != 0) {
      fprintf(stderr, "  kernels[%d] differs: %s %s\n", i, k->id, k->object);
      return 0;
    }
  }
  return 1;
}

/* text, a shaped_manifest of n entries (maybe edited), parses intact both
 * ways: step by step from a file, where only the header is parsed at open
 * (and, with sigs_after, "signatures" is found before that string), then
 * in one call. */
static void parses_both_ways(const char *text, int n, const char *sigs_after) {
  char *path = temp_manifest(text);
  rt_manifest m;
  rt_err err;
  KF_CHECK(rt_manifest_open(path, &m, &err) == KF_OK);
  KF_CHECK(m.nkernels == n && m.nparsed == 0);
  if (sigs_after)
    KF_CHECK(m.sigs_end > m.sigs_start && strstr(text, sigs_after) > text + m.sigs_end);
  for (int i = 0; i < n; i++)
    KF_CHECK(rt_manifest_kernel(&m, i, &err) == KF_OK && m.nparsed == i + 1);
  KF_CHECK(rt_manifest_finish(&m, &err) == KF_OK && m.text == NULL);
  KF_CHECK(shaped_intact(&m, n));
  rt_manifest_free(&m);
  KF_CHECK(rt_manifest_parse("x.json", text, strlen(text), &m, &err) == KF_OK);
  KF_CHECK(shaped_intact(&m, n));
  rt_manifest_free(&m);
  remove_temp(path);
}

KF_TEST(manifest__pretty_compact_or_reordered_parse_alike_and_stream) {
  for (int shape = 0; shape < 4; shape++) {
    char *pretty = shaped_manifest(40, shape & 1);
    char *text = shape & 2 ? compact(pretty) : strdup(pretty);
    /* the scanner reads every shape: the header alone is parsed at open */
    parses_both_ways(text, 40, NULL);
    free(text);
    free(pretty);
  }
}

KF_TEST(manifest__the_first_of_two_signatures_members_is_the_one_read) {
  /* as cJSON reads a repeated member: the first, streamed or whole */
  for (int kernels_first = 0; kernels_first < 2; kernels_first++) {
    char *base = shaped_manifest(6, kernels_first), *text;
    const char *close = strrchr(base, '}');
    KF_CHECK(asprintf(&text,
                      "%.*s,\n  \"signatures\": {\"a\": {\"params\": [{\"name\": \"x\", "
                      "\"type\": \"double\", \"size\": 8}]}}\n}\n",
                      (int)(close - base - 1), base) > 0);
    parses_both_ways(text, 6, "\"double\"");
    free(text);
    free(base);
  }
}

KF_TEST(manifest__text_the_scanner_leaves_to_cjson_still_parses_whole) {
  char *base = shaped_manifest(6, 0), *variants[3];
  const char *at = strstr(base, "\"kernels\"");
  /* text after the object, a byte-order mark, an escaped member name */
  KF_CHECK(asprintf(&variants[0], "%s\n  trailing text cJSON ignores", base) > 0);
  KF_CHECK(asprintf(&variants[1], "\xEF\xBB\xBF%s", base) > 0);
  KF_CHECK(asprintf(&variants[2], "%.*s\"kern\\u0065ls\"%s", (int)(at - base), base, at + 9) > 0);
  for (int v = 0; v < 3; v++) {
    char *path = temp_manifest(variants[v]);
    rt_manifest m;
    rt_err err;
    KF_CHECK(rt_manifest_open(path, &m, &err) == KF_OK);
    KF_CHECK(m.nparsed == 6); /* parsed whole at open */
    KF_CHECK(rt_manifest_finish(&m, &err) == KF_OK && shaped_intact(&m, 6));
    rt_manifest_free(&m);
    remove_temp(path);
    free(variants[v]);
  }
  free(base);
}

/* 1-based line:column of the byte at, as reasons give it. */
static void where(const char *text, const char *at, char *out, size_t size) {
  int line = 1, col = 1;
  for (const char *p = text; p < at; p++)
    if (*p == '\n')
      line++, col = 1;
    else
      col++;
  snprintf(out, size, ":%d:%d: error: malformed JSON in manifest", line, col);
}

KF_TEST(manifest__entry_cjson_refuses_names_its_line_in_the_whole_file) {
  /* The scanner refuses what cJSON refuses, so this is reached only when
   * the two disagree (or cJSON runs out of memory): corrupt the text
   * behind the scanner's back to get there. */
  char *text = shaped_manifest(10, 0), *path = temp_manifest(text), want[96];
  rt_manifest m;
  rt_err err;
  char *at;
  KF_CHECK(rt_manifest_open(path, &m, &err) == KF_OK && m.nparsed == 0);
  at = strstr(strstr(m.text, "\"m/a/w4/sm_90a\""), "\"width\":") + 7;
  *at = ';';
  where(m.text, at, want, sizeof want);
  for (int i = 0; i < 3; i++)
    KF_CHECK(rt_manifest_kernel(&m, i, &err) == KF_OK);
  KF_CHECK(rt_manifest_kernel(&m, 3, &err) == KF_ERR_BAD_MANIFEST);
  KF_CHECK_CONTAINS(err.text, path);
  KF_CHECK_CONTAINS(err.text, want);
  KF_CHECK(m.nparsed == 3 && m.kernels[3].id == NULL);
  rt_manifest_free(&m);
  /* the comma between two entries */
  KF_CHECK(rt_manifest_open(path, &m, &err) == KF_OK);
  at = strstr(m.text, "\"m/b/w7/sm_90a\"");
  while (*at != ',')
    at--;
  *at = ' ';
  at = strstr(m.text, "\"m/b/w7/sm_90a\"") - 7; /* the '{' of the next entry */
  while (*at != '{')
    at++;
  where(m.text, at, want, sizeof want);
  KF_CHECK(rt_manifest_finish(&m, &err) == KF_ERR_BAD_MANIFEST);
  KF_CHECK_CONTAINS(err.text, want);
  KF_CHECK(m.nparsed == 5);
  rt_manifest_free(&m);
  remove_temp(path);
  free(text);
}

KF_TEST(manifest__signatures_wait_for_their_step_and_reach_the_entries_parsed) {
  char *text = shaped_manifest(10, 1), *path = temp_manifest(text);
  rt_manifest m;
  rt_err err;
  KF_CHECK(rt_manifest_open(path, &m, &err) == KF_OK);
  KF_CHECK(m.nsigs == 0 && m.sigs_end > 0); /* the header alone */
  for (int i = 0; i < 7; i++)
    KF_CHECK(rt_manifest_kernel(&m, i, &err) == KF_OK);
  KF_CHECK(m.kernels[0].params_shared && m.kernels[0].params == NULL); /* waiting */
  KF_CHECK(rt_manifest_signatures(&m, &err) == KF_OK && m.nsigs == 2);
  KF_CHECK(m.kernels[6].params != NULL && m.kernels[6].nparams == 1);
  KF_CHECK(m.kernels[0].nparams == 2 && strcmp(m.kernels[0].params[0].name, "x") == 0);
  /* entries parsed after it get theirs at once */
  KF_CHECK(rt_manifest_kernel(&m, 7, &err) == KF_OK && m.kernels[7].params != NULL);
  KF_CHECK(rt_manifest_finish(&m, &err) == KF_OK && shaped_intact(&m, 10));
  rt_manifest_free(&m);
  remove_temp(path);
  free(text);
}

/* The reason the streamed steps give for text, and the one a whole parse
 * gives (a byte-order mark makes the scanner leave the text to cJSON). */
static void reasons(const char *text, char *streamed, char *whole, size_t size) {
  char *path = temp_manifest(text), *bom;
  rt_manifest m;
  rt_err err;
  kf_status st = rt_manifest_open(path, &m, &err);
  if (st == KF_OK && !(m.sigs_end > 0 && m.nparsed == 0))
    abort(); /* not streamed: the comparison would be empty */
  for (int i = 0; st == KF_OK && i < m.nkernels; i++)
    st = rt_manifest_kernel(&m, i, &err);
  if (st == KF_OK)
    st = rt_manifest_finish(&m, &err);
  snprintf(streamed, size, "%d %s", st, st == KF_OK ? "" : err.text);
  rt_manifest_free(&m);
  if (asprintf(&bom, "\xEF\xBB\xBF%s", text) < 0)
    abort();
  st = rt_manifest_parse(path, bom, strlen(bom), &m, &err);
  snprintf(whole, size, "%d %s", st, st == KF_OK ? "" : err.text);
  if (st == KF_OK)
    rt_manifest_free(&m);
  free(bom);
  remove_temp(path);
}

/* text with the first occurrence of from after after replaced by to */
static char *replace_after(const char *text, const char *after, const char *from, const char *to) {
  const char *at = strstr(strstr(text, after), from);
  char *out;
  if (!at || asprintf(&out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from)) < 0)
    abort();
  return out;
}

KF_TEST(manifest__streamed_steps_refuse_with_the_reason_of_a_whole_parse) {
  /* kinds a (kernels[0..4]) and b (kernels[5..9]); signatures after or
   * before the kernels */
  static const struct {
    const char *after, *from, *to;
  } edits[][2] = {
      /* a bad signature: before any entry's problem */
      {{"\"signatures\"", "\"float*\"", "\"double\""}, {NULL, NULL, NULL}},
      {{"\"signatures\"", "\"float*\"", "\"double\""}, {"\"m/a/w2/", "\"kf_1\"", "\"1kf\""}},
      {{"\"signatures\"", "\"rows\"", "7"}, {NULL, NULL, NULL}},
      {{"\"signatures\"", "{\"params\"", "{\"parms\""}, {NULL, NULL, NULL}},
      /* kind b without a signature: its first kernel, unless an earlier
       * entry or a field checked before the params is wrong */
      {{"\"signatures\"", "\"b\": {", "\"c\": {"}, {NULL, NULL, NULL}},
      {{"\"signatures\"", "\"b\": {", "\"c\": {"}, {"\"m/b/w9/", "\"kf_8\"", "\"8kf\""}},
      {{"\"signatures\"", "\"b\": {", "\"c\": {"}, {"\"m/b/w6/", "\"kf_5\"", "\"5kf\""}},
      {{"\"signatures\"", "\"b\": {", "\"c\": {"}, {"\"m/b/w6/", "\"grid\"", "\"gird\""}},
      {{"\"signatures\"", "\"b\": {", "\"c\": {"}, {"\"m/a/w3/", "\"grid\"", "\"gird\""}},
      /* no problem */
      {{"\"signatures\"", "\"a\"", "\"a\""}, {NULL, NULL, NULL}},
  };
  for (int order = 0; order < 2; order++)
    for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++) {
      char *text = shaped_manifest(10, order), streamed[1200], whole[1200];
      for (int j = 0; j < 2 && edits[e][j].from; j++) {
        char *next = replace_after(text, edits[e][j].after, edits[e][j].from, edits[e][j].to);
        free(text);
        text = next;
      }
      reasons(text, streamed, whole, sizeof streamed);
      if (strcmp(streamed, whole) != 0)
        fprintf(stderr, "  edit %zu, order %d:\n    streamed %s\n    whole    %s\n", e, order,
                streamed, whole);
      KF_CHECK_STR_EQ(streamed, whole);
      snprintf(whole, sizeof whole, "%d ",
               e + 1 < sizeof edits / sizeof edits[0] ? KF_ERR_BAD_MANIFEST : KF_OK);
      KF_CHECK(strncmp(streamed, whole, strlen(whole)) == 0);
      free(text);
    }
}

KF_TEST(manifest__repeated_id_is_refused_naming_both_entries) {
  char *text = big_manifest(300, -1, NULL);
  char *second = strstr(text, "\"big/k/w201/sm_90a\""), *first = strstr(text, "\"big/k/w200/");
  rt_manifest m;
  rt_err err;
  KF_CHECK(second && first);
  memcpy(second, "\"big/k/w200/sm_90a\"", 19);
  memcpy(strstr(second, "\"width\": 201"), "\"width\": 200", 12);
  KF_CHECK(rt_manifest_parse("big.json", text, strlen(text), &m, &err) == KF_ERR_BAD_MANIFEST);
  KF_CHECK(m.kernels == NULL);
  KF_CHECK_CONTAINS(err.text, "big.json: kernels[200].id: error: 'big/k/w200/sm_90a' repeats "
                              "kernels[199]");
  free(text);
}

/* As with a whole cJSON parse, the first of a repeated member counts. */
KF_TEST(manifest__a_repeated_member_counts_once_its_first) {
  rt_manifest m;
  rt_err err;
  char *text = edit("\"width\": 4,", "\"width\": 4, \"width\": 8, \"kind\": \"other\",");
  KF_CHECK(parse(text, &m, &err) == KF_OK);
  KF_CHECK(m.nkernels == 1 && m.kernels[0].width == 4);
  KF_CHECK_STR_EQ(m.kernels[0].kind, "input_norm");
  rt_manifest_free(&m);
  free(text);
  text = edit("\"kernels\": [", "\"kernels\": [], \"kernels\": [");
  KF_CHECK(parse(text, &m, &err) == KF_OK);
  KF_CHECK(m.nkernels == 0);
  rt_manifest_free(&m);
  free(text);
}

/* "layer_types": which kinds each layer runs where a model's layers differ. */
KF_TEST(manifest__layer_types_are_read_and_must_name_kinds_it_has) {
  const char *two = "\"backend\": \"cuda\",\n  \"layer_types\": [{\"name\": \"dense\", \"count\": "
                    "1, \"kinds\": [\"input_norm\"]}, {\"name\": \"moe\", \"count\": 45, "
                    "\"kinds\": [\"input_norm\", \"input_norm\"], \"layer\": \"input_norm\"}],";
  rt_manifest m;
  rt_err err;
  char *text = edit("\"backend\": \"cuda\",", two);
  KF_CHECK(parse(text, &m, &err) == KF_OK);
  free(text);
  KF_CHECK(m.nlayer_types == 2);
  if (m.nlayer_types == 2) {
    KF_CHECK_STR_EQ(m.layer_types[0].name, "dense");
    KF_CHECK(m.layer_types[0].count == 1 && m.layer_types[0].nkinds == 1);
    KF_CHECK_STR_EQ(m.layer_types[1].name, "moe");
    KF_CHECK(m.layer_types[1].count == 45 && m.layer_types[1].nkinds == 2);
    KF_CHECK_STR_EQ(m.layer_types[1].kinds[1], "input_norm");
    KF_CHECK(m.layer_types[0].layer == NULL);
    KF_CHECK_STR_EQ(m.layer_types[1].layer, "input_norm");
  }
  rt_manifest_free(&m);
  /* none: every layer alike */
  KF_CHECK(parse(GOOD, &m, &err) == KF_OK);
  KF_CHECK(m.nlayer_types == 0);
  rt_manifest_free(&m);
  const struct {
    const char *with, *reason;
  } bad[] = {
      {"\"layer_types\": [],", "layer_types: error: must be a non-empty array"},
      {"\"layer_types\": [{\"name\": \"d\", \"count\": -1, \"kinds\": [\"input_norm\"]}],",
       "layer_types[0].count: error: must be an integer in [0, 1000000]"},
      {"\"layer_types\": [{\"name\": \"d\", \"count\": 1, \"kinds\": []}],",
       "layer_types[0].kinds: error: must be a non-empty array"},
      {"\"layer_types\": [{\"name\": \"d\", \"count\": 1, \"kinds\": [\"Norm\"]}],",
       "layer_types[0].kinds[0]: error: must be a kind name"},
      {"\"layer_types\": [{\"count\": 1, \"kinds\": [\"input_norm\"]}],",
       "layer_types[0].name: error: must be a non-empty string"},
      {"\"layer_types\": [{\"name\": \"d\", \"count\": 1, \"kinds\": [\"router\"]}],",
       "layer_types[0].kinds[0]: error: 'router' has no kernel in the manifest"},
      {"\"layer_types\": [{\"name\": \"d\", \"count\": 1, \"kinds\": [\"input_norm\"], "
       "\"layer\": \"layer\"}],",
       "layer_types[0].layer: error: 'layer' has no kernel in the manifest"},
      {"\"layer_types\": [{\"name\": \"d\", \"count\": 1, \"kinds\": [\"input_norm\"], "
       "\"layer\": 3}],",
       "layer_types[0].layer: error: must be a kind name"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *with = xprintf("\"backend\": \"cuda\", %s", bad[i].with);
    KF_CHECK(refuses("\"backend\": \"cuda\",", with, KF_ERR_BAD_MANIFEST, bad[i].reason));
    free(with);
  }
}

KF_TEST_MAIN()
