/* Tests of gen/digest.c, the core of the cache key (docs/contracts.md,
 * "Key"): the token hash, what enters the key and what must not, and the
 * dependency records that let a no-op build skip libclang while still
 * noticing a header that starts to shadow another.
 *
 * Each test writes its own template, headers and description (the digest
 * runs `nvcc --dryrun` and libclang on them); a "run" is a fresh kf_digest,
 * as one kforge command would make. */
#include "model_fixture.h"

#include "digest.h"
#include "plan.h"
#include "toolchain.h"

#include <poll.h>
#include <pthread.h>
#include <sys/inotify.h>
#include <time.h>

/* templates/tk.cuh includes a quoted header beside it, an angled one from
 * the description's include_dirs (found in the second) and one header per
 * CUDA arch family. */
static const char *const TK_JSON =
    "{\"template\": \"tk\", \"header\": \"tk.cuh\", \"entry\": \"tk::entry\",\n"
    " \"params\": {\"N\": {\"type\": \"int\"}},\n"
    " \"args\": [{\"name\": \"rows\", \"type\": \"int\"}],\n"
    " \"launch\": {\"grid\": [\"W\", 1, 1], \"block\": [32, 1, 1], \"shared_bytes\": 0}}\n";

static const char *const TK_CUH = "// tk: digest test template\n"
                                  "#pragma once\n"
                                  "#include \"tk_common.cuh\"\n"
                                  "#include <vend.h>\n"
                                  "#if __CUDA_ARCH__ >= 1000\n"
                                  "#include \"tk_b.cuh\"\n"
                                  "#else\n"
                                  "#include \"tk_h.cuh\"\n"
                                  "#endif // __CUDA_ARCH__ >= 1000\n"
                                  "namespace tk {\n"
                                  "template <class P> __device__ void entry(int rows) {}\n"
                                  "} // namespace tk\n";

static const char *const TK_COMMON = "#pragma once\n"
                                     "// shared by every tk kernel\n"
                                     "constexpr int tk_common = 1;\n";

static void write_tree(const char *root, int n_param) {
  fx_write_free(root, "templates/tk.json", TK_JSON);
  fx_write_free(root, "templates/tk.cuh", TK_CUH);
  fx_write_free(root, "templates/tk_common.cuh", TK_COMMON);
  fx_write_free(root, "templates/tk_b.cuh", "#pragma once\nconstexpr int tk_arch = 100;\n");
  fx_write_free(root, "templates/tk_h.cuh", "#pragma once\nconstexpr int tk_arch = 90;\n");
  fx_write_free(root, "templates/unrelated.cuh", "constexpr int unrelated = 1;\n");
  fx_write_free(root, "models/inc_b/vend.h", "#pragma once\nconstexpr int vend = 2;\n");
  char *empty = fx_path(root, "models/inc_a");
  if (kf_mkdir_p(empty) != 0)
    fx_die("mkdir %s", empty);
  free(empty);
  char *desc = kf_xasprintf("{\"name\": \"m\", \"shape\": {}, \"widths\": [1, 2],\n"
                            " \"arches\": [\"sm_90a\", \"sm_100a\", \"gfx90a\"],\n"
                            " \"include_dirs\": [\"inc_a\", \"inc_b\"],\n"
                            " \"description\": \"digest fixture\",\n"
                            " \"kernels\": [{\"kind\": \"k\", \"template\": \"tk\", "
                            "\"params\": {\"N\": %d}}]}\n",
                            n_param);
  fx_write_free(root, "models/m.json", desc);
  free(desc);
}

static const char *new_tree(void) {
  const char *root = fx_tmpdir();
  write_tree(root, 1);
  return root;
}

typedef struct {
  char key[33];
  kf_records rec;
  int reparsed;
} digest_result;

static void result_free(digest_result *r) { kf_records_free(&r->rec); }

/* Hook for a test to change the compile setup before the digest. */
typedef void (*setup_hook)(kf_compile_setup *cs);

/* One run: loads root/models/m.json (working directory root), plans it and
 * digests instance id with a fresh kf_digest. deps: the dependency record
 * directory, or NULL. Returns 0, or -1 after printing why. */
static int digest_run(const char *root, const char *id, const char *deps, setup_hook hook,
                      digest_result *out) {
  memset(out, 0, sizeof *out);
  if (chdir(root) != 0)
    fx_die("chdir %s", root);
  kf_model_options opt = fx_options();
  kf_model *m = kf_model_load("models/m.json", &opt);
  if (!m) {
    fprintf(stderr, "fixture description did not load\n");
    return -1;
  }
  kf_plan plan = {0};
  kf_plan_add_model(&plan, m);
  kf_instance *in = kf_plan_find(&plan, id);
  if (!in)
    fx_die("no instance %s", id);
  kf_toolchain *tc = kf_toolchain_get(kf_arch_is_hip(in->arch) ? KF_BACKEND_HIP : KF_BACKEND_CUDA);
  if (tc->error)
    fx_die("toolchain: %s", tc->error);
  kf_compile_setup cs;
  kf_strv none = {0};
  kf_compile_setup_init(&cs, in, tc, "out", "templates", &none, NULL);
  if (hook)
    hook(&cs);
  /* a build writes the source before keying it */
  char *dir = kf_path_dirname(cs.source_path);
  if (kf_mkdir_p(dir) != 0 ||
      kf_write_if_changed(cs.source_path, in->source, in->source_len, NULL) != 0)
    fx_die("cannot write %s", cs.source_path);
  free(dir);
  kf_digest *d = kf_digest_new(deps, 1);
  char *err = NULL;
  int rc = kf_digest_instance(d, in, tc, &cs, &out->rec, out->key, &out->reparsed, &err);
  if (rc != 0)
    fprintf(stderr, "digest of %s failed: %s\n", id, err);
  free(err);
  kf_digest_free(d);
  kf_compile_setup_free(&cs);
  kf_plan_free(&plan);
  kf_model_free(m);
  return rc;
}

/* The key of id in one run without dependency records. */
static int key_of(const char *root, const char *id, char key[33]) {
  digest_result r;
  int rc = digest_run(root, id, NULL, NULL, &r);
  memcpy(key, r.key, 33);
  result_free(&r);
  return rc;
}

static const kf_record *find_record(const kf_records *r, const char *tag, const char *name) {
  for (size_t i = 0; i < r->n; i++)
    if (!strcmp(r->v[i].tag, tag) && !strcmp(r->v[i].name, name))
      return &r->v[i];
  return NULL;
}

/* "tag name" of every record whose value differs between a and b, or that
 * only one has, joined by ", " (caller frees). */
static char *records_diff(const kf_records *a, const kf_records *b) {
  kf_buf out = {0};
  for (size_t i = 0; i < a->n; i++) {
    const kf_record *o = find_record(b, a->v[i].tag, a->v[i].name);
    if (!o || strcmp(o->value, a->v[i].value))
      kf_buf_printf(&out, "%s%s %s", out.len ? ", " : "", a->v[i].tag, a->v[i].name);
  }
  for (size_t i = 0; i < b->n; i++)
    if (!find_record(a, b->v[i].tag, b->v[i].name))
      kf_buf_printf(&out, "%s+%s %s", out.len ? ", " : "", b->v[i].tag, b->v[i].name);
  return kf_buf_take(&out);
}

/* The inputs that differ between records a and b are exactly want. */
#define CHECK_DIFF(a, b, want)                                                                     \
  do {                                                                                             \
    char *diff_ = records_diff(a, b);                                                              \
    KF_CHECK_STR_EQ(diff_, want);                                                                  \
    free(diff_);                                                                                   \
  } while (0)

/* The closure's file names, sorted and joined by ' ' (caller frees). */
static char *closure_names(const kf_records *r) {
  kf_strv names = {0};
  for (size_t i = 0; i < r->n; i++)
    if (!strcmp(r->v[i].tag, "file"))
      kf_strv_push(&names, r->v[i].name);
  kf_strv_sort(&names);
  kf_buf out = {0};
  for (size_t i = 0; i < names.n; i++)
    kf_buf_printf(&out, "%s%s", i ? " " : "", names.v[i]);
  kf_strv_free(&names);
  return kf_buf_take(&out);
}

/* Sets a file's mtime to a fixed past second so that a later write is seen
 * as a change even within one timestamp tick. */
static void age(const char *root, const char *rel) {
  char *p = fx_path(root, rel);
  struct timespec ts[2] = {{1500000000, 0}, {1500000000, 0}};
  if (utimensat(AT_FDCWD, p, ts, 0) != 0)
    fx_die("utimensat %s", p);
  free(p);
}

static const char *const ID = "m/k/w1/sm_90a";

/* ---- what the key is made of ---- */

KF_TEST(digest__records_name_the_closure_as_the_compiler_resolves_it) {
  const char *root = new_tree();
  digest_result r90, r100;
  KF_CHECK(digest_run(root, ID, NULL, NULL, &r90) == 0);
  KF_CHECK(digest_run(root, "m/k/w1/sm_100a", NULL, NULL, &r100) == 0);
  char *names = closure_names(&r90.rec);
  KF_CHECK_STR_EQ(names, "@inc1/vend.h @templates/tk.cuh @templates/tk_common.cuh "
                         "@templates/tk_h.cuh");
  free(names);
  /* __CUDA_ARCH__ of the target picks the other header */
  names = closure_names(&r100.rec);
  KF_CHECK_STR_EQ(names, "@inc1/vend.h @templates/tk.cuh @templates/tk_b.cuh "
                         "@templates/tk_common.cuh");
  free(names);
  KF_CHECK(find_record(&r90.rec, "scheme", ""));
  KF_CHECK(find_record(&r90.rec, "source", "generated"));
  KF_CHECK_STR_EQ(find_record(&r90.rec, "target", "arch")->value, "sm_90a");
  KF_CHECK_STR_EQ(find_record(&r90.rec, "param", "N")->value, "1");
  KF_CHECK_STR_EQ(find_record(&r90.rec, "param", "W")->value, "1");
  KF_CHECK_STR_EQ(find_record(&r90.rec, "param", "template")->value, "tk");
  KF_CHECK(find_record(&r90.rec, "tool", "compiler"));
  KF_CHECK(strcmp(r90.key, r100.key) != 0);
  result_free(&r90);
  result_free(&r100);
}

/* the same tree keyed for a gfx arch: hipcc's device pass, the same
 * rooted names, a key of its own */
KF_TEST(digest__hip_closure_is_named_by_include_root_and_follows_changes) {
  const char *root = new_tree();
  digest_result hip1, hip2;
  char cuda[33];
  KF_CHECK(digest_run(root, "m/k/w1/gfx90a", NULL, NULL, &hip1) == 0);
  char *names = closure_names(&hip1.rec);
  KF_CHECK_STR_EQ(names, "@inc1/vend.h @templates/tk.cuh @templates/tk_common.cuh "
                         "@templates/tk_h.cuh");
  free(names);
  KF_CHECK_STR_EQ(find_record(&hip1.rec, "target", "arch")->value, "gfx90a");
  KF_CHECK(key_of(root, ID, cuda) == 0);
  KF_CHECK(strcmp(hip1.key, cuda) != 0);
  fx_write_free(root, "models/inc_b/vend.h", "#pragma once\nconstexpr int vend = 5;\n");
  KF_CHECK(digest_run(root, "m/k/w1/gfx90a", NULL, NULL, &hip2) == 0);
  CHECK_DIFF(&hip1.rec, &hip2.rec, "file @inc1/vend.h");
  result_free(&hip1);
  result_free(&hip2);
}

KF_TEST(digest__key_is_the_same_in_every_run) {
  const char *root = new_tree();
  char k1[33], k2[33];
  KF_CHECK(key_of(root, ID, k1) == 0);
  KF_CHECK(key_of(root, ID, k2) == 0);
  KF_CHECK(strlen(k1) == 32);
  KF_CHECK_STR_EQ(k1, k2);
}

/* contracts.md: "No absolute checkout path … enters a key". */
KF_TEST(digest__copies_at_different_paths_give_the_same_key) {
  const char *a = new_tree();
  const char *b = new_tree();
  digest_result ra, rb;
  KF_CHECK(digest_run(a, ID, NULL, NULL, &ra) == 0);
  KF_CHECK(digest_run(b, ID, NULL, NULL, &rb) == 0);
  CHECK_DIFF(&ra.rec, &rb.rec, "");
  KF_CHECK_STR_EQ(ra.key, rb.key);
  for (size_t i = 0; i < ra.rec.n; i++) {
    KF_CHECK(!strstr(ra.rec.v[i].name, a) && !strstr(ra.rec.v[i].value, a));
    KF_CHECK(!strstr(ra.rec.v[i].name, "@abs"));
  }
  result_free(&ra);
  result_free(&rb);
}

/* A template including "../shared/x.h" reaches a file outside every include
 * root; its name must still not carry the checkout's absolute path. */
KF_TEST(digest__header_reached_through_dotdot_does_not_put_a_path_in_the_key) {
  const char *a = new_tree();
  const char *b = new_tree();
  const char *with_dotdot = "#pragma once\n#include \"../shared/sh.h\"\n";
  fx_write_free(a, "templates/tk_common.cuh", with_dotdot);
  fx_write_free(b, "templates/tk_common.cuh", with_dotdot);
  fx_write_free(a, "shared/sh.h", "constexpr int sh = 1;\n");
  fx_write_free(b, "shared/sh.h", "constexpr int sh = 1;\n");
  digest_result ra, rb;
  KF_CHECK(digest_run(a, ID, NULL, NULL, &ra) == 0);
  KF_CHECK(digest_run(b, ID, NULL, NULL, &rb) == 0);
  for (size_t i = 0; i < ra.rec.n; i++)
    KF_CHECK(!strstr(ra.rec.v[i].name, a));
  KF_CHECK_STR_EQ(ra.key, rb.key);
  result_free(&ra);
  result_free(&rb);
}

KF_TEST(digest__changes_when_included_header_changes_a_token) {
  const char *root = new_tree();
  digest_result before, after;
  KF_CHECK(digest_run(root, ID, NULL, NULL, &before) == 0);
  fx_write_free(root, "templates/tk_common.cuh",
                "#pragma once\n// shared by every tk kernel\nconstexpr int tk_common = 2;\n");
  KF_CHECK(digest_run(root, ID, NULL, NULL, &after) == 0);
  KF_CHECK(strcmp(before.key, after.key) != 0);
  CHECK_DIFF(&before.rec, &after.rec, "file @templates/tk_common.cuh");
  result_free(&before);
  result_free(&after);
}

KF_TEST(digest__changes_when_a_header_from_include_dirs_changes) {
  const char *root = new_tree();
  char k1[33], k2[33];
  KF_CHECK(key_of(root, ID, k1) == 0);
  fx_write_free(root, "models/inc_b/vend.h", "#pragma once\nconstexpr long vend = 2;\n");
  KF_CHECK(key_of(root, ID, k2) == 0);
  KF_CHECK(strcmp(k1, k2) != 0);
}

KF_TEST(digest__ignores_comments_and_whitespace) {
  const char *root = new_tree();
  char k1[33], k2[33], k3[33];
  KF_CHECK(key_of(root, ID, k1) == 0);
  fx_write_free(root, "templates/tk_common.cuh",
                "#pragma   once\n"
                "/* a new block comment\n   over two lines */\n"
                "\n\n"
                "constexpr\tint   tk_common=1; // trailing comment\n");
  KF_CHECK(key_of(root, ID, k2) == 0);
  KF_CHECK_STR_EQ(k1, k2);
  /* the template header's own comments and layout, too */
  fx_write_free(root, "templates/tk.cuh",
                "#pragma once\n"
                "#include \"tk_common.cuh\"\n"
                "#include <vend.h>\n"
                "#if __CUDA_ARCH__ >= 1000 // Blackwell\n"
                "#include \"tk_b.cuh\"\n"
                "#else\n"
                "#include \"tk_h.cuh\"\n"
                "#endif\n"
                "namespace tk { template <class P> __device__ void entry(int rows) {} }\n");
  KF_CHECK(key_of(root, ID, k3) == 0);
  KF_CHECK_STR_EQ(k1, k3);
}

/* Token-identical headers whose directives end in different places mean
 * different things and must key differently. */
static int header_keys_differ(const char *text_a, const char *text_b, int *differ) {
  const char *root = new_tree();
  char ka[33], kb[33];
  fx_write_free(root, "templates/tk_common.cuh", text_a);
  if (key_of(root, ID, ka) != 0)
    return -1;
  fx_write_free(root, "templates/tk_common.cuh", text_b);
  if (key_of(root, ID, kb) != 0)
    return -1;
  *differ = strcmp(ka, kb) != 0;
  return 0;
}

KF_TEST(digest__directive_boundaries_count) {
  int differ = 0;
  KF_CHECK(header_keys_differ("#define A 1\nint B;\n", "#define A 1 int B;\n", &differ) == 0);
  KF_CHECK(differ);
  /* blank lines between them do not */
  KF_CHECK(header_keys_differ("#define A 1\nint B;\n", "#define A 1\n\n\nint B;\n", &differ) == 0);
  KF_CHECK(!differ);
}

KF_TEST(digest__line_continuation_does_not_end_a_directive) {
  int differ = 1;
  KF_CHECK(header_keys_differ("#define A 1 \\\n + 2\nint B;\n", "#define A 1 + 2\nint B;\n",
                              &differ) == 0);
  KF_CHECK(!differ);
  /* a comment spanning lines inside a directive is a space, not its end */
  KF_CHECK(header_keys_differ("#define A 1 /* x\n y */ + 2\nint B;\n", "#define A 1 + 2\nint B;\n",
                              &differ) == 0);
  KF_CHECK(!differ);
}

KF_TEST(digest__function_like_and_object_like_macros_differ) {
  int differ = 0;
  KF_CHECK(header_keys_differ("#define F(x) x\n", "#define F (x) x\n", &differ) == 0);
  KF_CHECK(differ);
  KF_CHECK(header_keys_differ("#define F(x) x\n", "#define F( x )   x\n", &differ) == 0);
  KF_CHECK(!differ);
}

static void add_define(kf_compile_setup *cs) {
  kf_strv_push(&cs->compile_args, "-DKF_TEST_FLAG=1");
  kf_strv_push(&cs->key_args, "-DKF_TEST_FLAG=1");
}

KF_TEST(digest__changes_when_a_compile_arg_changes) {
  const char *root = new_tree();
  digest_result plain, flagged;
  KF_CHECK(digest_run(root, ID, NULL, NULL, &plain) == 0);
  KF_CHECK(digest_run(root, ID, NULL, add_define, &flagged) == 0);
  KF_CHECK(strcmp(plain.key, flagged.key) != 0);
  result_free(&plain);
  result_free(&flagged);
  /* one more include directory (even an empty one) is one more -I */
  char k1[33], k2[33];
  KF_CHECK(key_of(root, ID, k1) == 0);
  fx_write_free(root, "models/inc_c/readme.txt", "x");
  fx_write_free(
      root, "models/m.json",
      "{\"name\": \"m\", \"shape\": {}, \"widths\": [1, 2],\n"
      " \"arches\": [\"sm_90a\", \"sm_100a\"],\n"
      " \"include_dirs\": [\"inc_a\", \"inc_b\", \"inc_c\"],\n"
      " \"kernels\": [{\"kind\": \"k\", \"template\": \"tk\", \"params\": {\"N\": 1}}]}\n");
  KF_CHECK(key_of(root, ID, k2) == 0);
  KF_CHECK(strcmp(k1, k2) != 0);
}

KF_TEST(digest__changes_when_a_param_changes) {
  const char *root = new_tree();
  digest_result n1, n2, w2;
  KF_CHECK(digest_run(root, ID, NULL, NULL, &n1) == 0);
  KF_CHECK(digest_run(root, "m/k/w2/sm_90a", NULL, NULL, &w2) == 0);
  write_tree(root, 2);
  KF_CHECK(digest_run(root, ID, NULL, NULL, &n2) == 0);
  KF_CHECK(strcmp(n1.key, n2.key) != 0);
  KF_CHECK(strcmp(n1.key, w2.key) != 0);
  CHECK_DIFF(&n1.rec, &n2.rec, "source generated, param N");
  result_free(&n1);
  result_free(&n2);
  result_free(&w2);
}

KF_TEST(digest__changes_when_the_arch_changes) {
  const char *root = new_tree();
  char k90[33], k100[33];
  KF_CHECK(key_of(root, ID, k90) == 0);
  KF_CHECK(key_of(root, "m/k/w1/sm_100a", k100) == 0);
  KF_CHECK(strcmp(k90, k100) != 0);
}

/* a header only the other arch includes is outside this arch's closure */
KF_TEST(digest__ignores_files_outside_the_closure) {
  const char *root = new_tree();
  char k90[33], k100[33], k90b[33], k100b[33];
  KF_CHECK(key_of(root, ID, k90) == 0);
  KF_CHECK(key_of(root, "m/k/w1/sm_100a", k100) == 0);
  fx_write_free(root, "templates/tk_b.cuh", "#pragma once\nconstexpr int tk_arch = 101;\n");
  fx_write_free(root, "templates/unrelated.cuh", "constexpr int unrelated = 2;\n");
  fx_write_free(root, "templates/new_file.cuh", "constexpr int fresh = 2;\n");
  /* the description's free text is not an input either */
  fx_write_free(
      root, "models/m.json",
      "{\"name\": \"m\", \"shape\": {}, \"widths\": [1, 2],\n"
      " \"arches\": [\"sm_90a\", \"sm_100a\"],\n"
      " \"include_dirs\": [\"inc_a\", \"inc_b\"],\n"
      " \"description\": \"edited text\",\n"
      " \"kernels\": [{\"kind\": \"k\", \"template\": \"tk\", \"params\": {\"N\": 1}}]}\n");
  KF_CHECK(key_of(root, ID, k90b) == 0);
  KF_CHECK(key_of(root, "m/k/w1/sm_100a", k100b) == 0);
  KF_CHECK_STR_EQ(k90, k90b);
  KF_CHECK(strcmp(k100, k100b) != 0);
}

/* nvcc's device pass is the host compiler's preprocessor (gcc here, see
 * `nvcc --dryrun`): libclang replaying it must see gcc's macros, not its
 * own, or the closure is not the set of files the compiler reads. */
KF_TEST(digest__closure_follows_the_host_compiler_of_the_nvcc_device_pass) {
  const char *root = new_tree();
  fx_write_free(root, "templates/tk_common.cuh",
                "#pragma once\n"
                "#if defined(__clang__)\n"
                "#include \"tk_clang.cuh\"\n"
                "#endif\n"
                "#if __GNUC__ >= 9\n"
                "#include \"tk_gnu9.cuh\"\n"
                "#endif\n");
  fx_write_free(root, "templates/tk_clang.cuh", "constexpr int which = 1;\n");
  fx_write_free(root, "templates/tk_gnu9.cuh", "constexpr int which = 2;\n");
  char *cmd[] = {"gcc", "-dumpversion", NULL};
  char *ver = NULL;
  KF_CHECK(kf_run_capture(cmd, &ver) == 0 && atoi(ver) >= 9); /* what nvcc runs here */
  free(ver);
  digest_result r;
  KF_CHECK(digest_run(root, ID, NULL, NULL, &r) == 0);
  KF_CHECK(find_record(&r.rec, "file", "@templates/tk_gnu9.cuh"));
  KF_CHECK(find_record(&r.rec, "file", "@templates/tk_clang.cuh") == NULL);
  result_free(&r);
}

/* ---- records ---- */

KF_TEST(digest__records_are_length_delimited) {
  kf_records a = {0}, b = {0}, c = {0}, d = {0};
  char ka[33], kb[33], kc[33], kd[33];
  kf_records_add(&a, "arg", "00", "-I");
  kf_records_add(&a, "arg", "01", "-O2");
  kf_records_add(&b, "arg", "00", "-I-O2");
  kf_records_add(&c, "ab", "c", "d");
  kf_records_add(&d, "a", "bc", "d");
  kf_records_key(&a, ka);
  kf_records_key(&b, kb);
  kf_records_key(&c, kc);
  kf_records_key(&d, kd);
  KF_CHECK(strcmp(ka, kb) != 0);
  KF_CHECK(strcmp(kc, kd) != 0);
  /* the order of records is part of the key */
  kf_records e = {0};
  char ke[33];
  kf_records_add(&e, "arg", "01", "-O2");
  kf_records_add(&e, "arg", "00", "-I");
  kf_records_key(&e, ke);
  KF_CHECK(strcmp(ka, ke) != 0);
  char h1[17], h2[17];
  kf_record_hash(&a.v[0], h1);
  kf_record_hash(&a.v[1], h2);
  KF_CHECK(strlen(h1) == 16 && strcmp(h1, h2) != 0);
  kf_records_free(&a);
  kf_records_free(&b);
  kf_records_free(&c);
  kf_records_free(&d);
  kf_records_free(&e);
}

/* ---- dependency records (the no-op path) ---- */

KF_TEST(digest__noop_run_reuses_the_dependency_record) {
  const char *root = new_tree();
  char *deps = fx_path(root, "deps");
  digest_result r1, r2;
  KF_CHECK(digest_run(root, ID, deps, NULL, &r1) == 0);
  KF_CHECK(r1.reparsed == 1);
  KF_CHECK(digest_run(root, ID, deps, NULL, &r2) == 0);
  KF_CHECK(r2.reparsed == 0);
  KF_CHECK_STR_EQ(r1.key, r2.key);
  CHECK_DIFF(&r1.rec, &r2.rec, "");
  result_free(&r1);
  result_free(&r2);
  free(deps);
}

KF_TEST(digest__touched_but_token_identical_header_keeps_the_key_without_reparse) {
  const char *root = new_tree();
  char *deps = fx_path(root, "deps");
  age(root, "templates/tk_common.cuh");
  digest_result r1, r2, r3;
  KF_CHECK(digest_run(root, ID, deps, NULL, &r1) == 0);
  fx_write_free(root, "templates/tk_common.cuh",
                "#pragma once\n// a new comment, the same tokens\n\n"
                "constexpr int tk_common = 1; // shared\n");
  KF_CHECK(digest_run(root, ID, deps, NULL, &r2) == 0);
  KF_CHECK(r2.reparsed == 0);
  KF_CHECK_STR_EQ(r1.key, r2.key);
  KF_CHECK(digest_run(root, ID, deps, NULL, &r3) == 0);
  KF_CHECK(r3.reparsed == 0);
  KF_CHECK_STR_EQ(r1.key, r3.key);
  result_free(&r1);
  result_free(&r2);
  result_free(&r3);
  free(deps);
}

KF_TEST(digest__token_change_is_seen_on_the_noop_path) {
  const char *root = new_tree();
  char *deps = fx_path(root, "deps");
  age(root, "models/inc_b/vend.h");
  digest_result r1, r2, fresh;
  KF_CHECK(digest_run(root, ID, deps, NULL, &r1) == 0);
  fx_write_free(root, "models/inc_b/vend.h", "#pragma once\nconstexpr int vend = 3;\n");
  KF_CHECK(digest_run(root, ID, deps, NULL, &r2) == 0);
  KF_CHECK(strcmp(r1.key, r2.key) != 0);
  KF_CHECK(digest_run(root, ID, NULL, NULL, &fresh) == 0);
  KF_CHECK_STR_EQ(r2.key, fresh.key); /* the same as without any record */
  result_free(&r1);
  result_free(&r2);
  result_free(&fresh);
  free(deps);
}

/* inc_a comes before inc_b on the include path: a vend.h appearing there is
 * what the compiler would read from then on, although every file of the
 * recorded closure is unchanged. */
KF_TEST(digest__shadowing_header_is_detected_on_the_noop_path) {
  const char *root = new_tree();
  char *deps = fx_path(root, "deps");
  digest_result r1, r2, r3;
  KF_CHECK(digest_run(root, ID, deps, NULL, &r1) == 0);
  KF_CHECK(digest_run(root, ID, deps, NULL, &r2) == 0);
  KF_CHECK(r2.reparsed == 0); /* the record is valid */
  fx_write_free(root, "models/inc_a/vend.h", "#pragma once\nconstexpr int vend = 1;\n");
  KF_CHECK(digest_run(root, ID, deps, NULL, &r3) == 0);
  KF_CHECK(r3.reparsed == 1);
  KF_CHECK(strcmp(r1.key, r3.key) != 0);
  char *names = closure_names(&r3.rec);
  KF_CHECK_STR_EQ(names, "@inc0/vend.h @templates/tk.cuh @templates/tk_common.cuh "
                         "@templates/tk_h.cuh");
  free(names);
  result_free(&r1);
  result_free(&r2);
  result_free(&r3);
  free(deps);
}

/* a quoted include looks beside the includer first: a tk.cuh appearing next
 * to the generated source would be the one compiled */
KF_TEST(digest__header_beside_the_generated_source_shadows_the_template) {
  const char *root = new_tree();
  char *deps = fx_path(root, "deps");
  digest_result r1, r2;
  KF_CHECK(digest_run(root, ID, deps, NULL, &r1) == 0);
  fx_write_free(
      root, "out/m/sm_90a/tk.cuh",
      "#pragma once\nnamespace tk { template <class P> __device__ void entry(int) {} }\n");
  KF_CHECK(digest_run(root, ID, deps, NULL, &r2) == 0);
  KF_CHECK(strcmp(r1.key, r2.key) != 0);
  KF_CHECK(find_record(&r2.rec, "file", "@templates/tk.cuh") == NULL);
  result_free(&r1);
  result_free(&r2);
  free(deps);
}

KF_TEST(digest__vanished_header_forces_a_reparse) {
  const char *root = new_tree();
  char *deps = fx_path(root, "deps");
  digest_result r1, r2;
  KF_CHECK(digest_run(root, ID, deps, NULL, &r1) == 0);
  /* vend.h moves from inc_b to inc_a: same bytes, another place */
  char *from = fx_path(root, "models/inc_b/vend.h");
  char *to = fx_path(root, "models/inc_a/vend.h");
  KF_CHECK(rename(from, to) == 0);
  KF_CHECK(digest_run(root, ID, deps, NULL, &r2) == 0);
  KF_CHECK(r2.reparsed == 1);
  KF_CHECK(find_record(&r2.rec, "file", "@inc0/vend.h"));
  KF_CHECK(strcmp(r1.key, r2.key) != 0);
  free(from);
  free(to);
  result_free(&r1);
  result_free(&r2);
  free(deps);
}

/* Replaces dir/name (by rename, as editors do) as soon as someone opens it:
 * the opener keeps reading the old bytes. */
typedef struct {
  const char *dir, *name, *text;
  int fd;
  volatile int stop, swapped;
} swapper;

static void *swap_on_open(void *arg) {
  swapper *s = arg;
  char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
  while (!s->stop && !s->swapped) {
    struct pollfd pfd = {s->fd, POLLIN, 0};
    if (poll(&pfd, 1, 50) <= 0)
      continue;
    ssize_t n = read(s->fd, buf, sizeof buf);
    for (char *p = buf; n > 0 && p < buf + n;) {
      struct inotify_event *e = (struct inotify_event *)p;
      if ((e->mask & IN_OPEN) && e->len && !strcmp(e->name, s->name) && !s->swapped) {
        char *tmp = kf_xasprintf("%s/.%s.new", s->dir, s->name);
        char *dst = kf_path_join(s->dir, s->name);
        FILE *f = fopen(tmp, "w");
        if (f && fputs(s->text, f) >= 0 && fclose(f) == 0 && rename(tmp, dst) == 0)
          s->swapped = 1;
        free(tmp);
        free(dst);
      }
      p += sizeof *e + e->len;
    }
  }
  return NULL;
}

/* A header saved while libclang parses it: the record must not pair the
 * tokens libclang read with the size and mtime of the bytes saved after, or
 * every later no-op run keys the old content (and the object compiled from
 * the new one is cached under that key). */
KF_TEST(digest__header_replaced_while_being_parsed_is_not_trusted_later) {
  const char *root = new_tree();
  char *deps = fx_path(root, "deps");
  char *tdir = fx_path(root, "templates");
  swapper sw = {tdir,
                "tk_common.cuh",
                "#pragma once\n// shared by every tk kernel\nconstexpr int tk_common = 2;\n",
                -1,
                0,
                0};
  sw.fd = inotify_init1(IN_CLOEXEC);
  KF_CHECK(sw.fd >= 0 && inotify_add_watch(sw.fd, tdir, IN_OPEN) >= 0);
  pthread_t th;
  KF_CHECK(pthread_create(&th, NULL, swap_on_open, &sw) == 0);
  digest_result r1, r2, truth;
  int rc = digest_run(root, ID, deps, NULL, &r1);
  sw.stop = 1;
  pthread_join(th, NULL);
  close(sw.fd);
  KF_CHECK(rc == 0);
  KF_CHECK(sw.swapped);
  KF_CHECK(digest_run(root, ID, deps, NULL, &r2) == 0);
  KF_CHECK(digest_run(root, ID, NULL, NULL, &truth) == 0);
  KF_CHECK_STR_EQ(r2.key, truth.key);
  result_free(&r1);
  result_free(&r2);
  result_free(&truth);
  free(tdir);
  free(deps);
}

KF_TEST(digest__read_only_run_writes_no_dependency_record) {
  const char *root = new_tree();
  char *deps = fx_path(root, "deps");
  if (chdir(root) != 0)
    fx_die("chdir");
  kf_model_options opt = fx_options();
  kf_model *m = kf_model_load("models/m.json", &opt);
  KF_CHECK(m);
  kf_plan plan = {0};
  kf_plan_add_model(&plan, m);
  kf_instance *in = kf_plan_find(&plan, ID);
  KF_CHECK(in);
  kf_toolchain *tc = kf_toolchain_get(KF_BACKEND_CUDA);
  kf_compile_setup cs;
  kf_strv none = {0};
  kf_compile_setup_init(&cs, in, tc, "out", "templates", &none, NULL);
  kf_digest *d = kf_digest_new(deps, 0);
  kf_records rec = {0};
  char key[33], *err = NULL;
  int reparsed = 0;
  KF_CHECK(kf_digest_instance(d, in, tc, &cs, &rec, key, &reparsed, &err) == 0);
  KF_CHECK(reparsed == 1);
  KF_CHECK(!kf_path_exists(deps));
  kf_records_free(&rec);
  kf_digest_free(d);
  kf_compile_setup_free(&cs);
  kf_plan_free(&plan);
  kf_model_free(m);
  free(deps);
}

/* widths of one kernel share one parse within a run, and still key apart */
KF_TEST(digest__one_parse_serves_every_width_in_a_run) {
  const char *root = new_tree();
  if (chdir(root) != 0)
    fx_die("chdir");
  kf_model_options opt = fx_options();
  kf_model *m = kf_model_load("models/m.json", &opt);
  KF_CHECK(m);
  kf_plan plan = {0};
  kf_plan_add_model(&plan, m);
  kf_toolchain *tc = kf_toolchain_get(KF_BACKEND_CUDA);
  kf_digest *d = kf_digest_new(NULL, 0);
  kf_strv none = {0};
  const char *ids[] = {"m/k/w1/sm_90a", "m/k/w2/sm_90a"};
  char keys[2][33];
  int reparsed[2];
  kf_records rec[2] = {{0}, {0}};
  for (int i = 0; i < 2; i++) {
    kf_instance *in = kf_plan_find(&plan, ids[i]);
    kf_compile_setup cs;
    kf_compile_setup_init(&cs, in, tc, "out", "templates", &none, NULL);
    char *err = NULL;
    KF_CHECK(kf_digest_instance(d, in, tc, &cs, &rec[i], keys[i], &reparsed[i], &err) == 0);
    kf_compile_setup_free(&cs);
  }
  KF_CHECK(reparsed[0] == 1 && reparsed[1] == 0);
  KF_CHECK(strcmp(keys[0], keys[1]) != 0);
  CHECK_DIFF(&rec[0], &rec[1], "source generated, param W");
  /* the same as each width keyed in a run of its own */
  char alone[33];
  KF_CHECK(key_of(root, ids[1], alone) == 0);
  KF_CHECK_STR_EQ(keys[1], alone);
  kf_records_free(&rec[0]);
  kf_records_free(&rec[1]);
  kf_digest_free(d);
  kf_plan_free(&plan);
  kf_model_free(m);
}

/* ---- the toolchain's environment ---- */

/* KF_GEN_DIGEST_ROOT names a fixture tree, KF_GEN_DIGEST_DEPS (optional) a
 * dependency record directory; prints key=<key of ID>. */
FX_CHILD(print_key) {
  digest_result r;
  if (digest_run(getenv("KF_GEN_DIGEST_ROOT"), ID, getenv("KF_GEN_DIGEST_DEPS"), NULL, &r) != 0)
    return 1;
  printf("key=%s\nreparsed=%d\n", r.key, r.reparsed);
  result_free(&r);
  return 0;
}

FX_CHILDREN(FX_CHILD_ENTRY(print_key))

KF_TEST(digest__nvcc_append_flags_changes_the_key) {
  const char *root = new_tree();
  char *root_env = kf_xasprintf("KF_GEN_DIGEST_ROOT=%s", root);
  const char *plain_env[] = {root_env, "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", NULL};
  const char *flag_env[] = {root_env, "NVCC_APPEND_FLAGS=-lineinfo", "NVCC_PREPEND_FLAGS", NULL};
  char *out1 = NULL, *out2 = NULL;
  KF_CHECK(fx_run_child("print_key", plain_env, &out1) == 0);
  KF_CHECK(fx_run_child("print_key", flag_env, &out2) == 0);
  char *k1 = fx_line_value(out1, "key"), *k2 = fx_line_value(out2, "key");
  KF_CHECK(k1 && k2 && strlen(k1) == 32);
  KF_CHECK(strcmp(k1, k2) != 0);
  free(k1);
  free(k2);
  free(out1);
  free(out2);
  free(root_env);
}

/* The key of ID in a fresh process with env (see print_key); NULL on
 * failure (caller frees). */
static char *child_key(const char *root, const char *deps, const char *append_flags) {
  char *root_env = kf_xasprintf("KF_GEN_DIGEST_ROOT=%s", root);
  char *deps_env =
      deps ? kf_xasprintf("KF_GEN_DIGEST_DEPS=%s", deps) : kf_xstrdup("KF_GEN_DIGEST_DEPS");
  char *flags_env = append_flags ? kf_xasprintf("NVCC_APPEND_FLAGS=%s", append_flags)
                                 : kf_xstrdup("NVCC_APPEND_FLAGS");
  const char *env[] = {root_env, deps_env, flags_env, "NVCC_PREPEND_FLAGS", NULL};
  char *out = NULL;
  int rc = fx_run_child("print_key", env, &out);
  char *key = rc == 0 ? fx_line_value(out, "key") : NULL;
  free(out);
  free(root_env);
  free(deps_env);
  free(flags_env);
  return key;
}

/* The closure depends on the device pass's flags, which NVCC_APPEND_FLAGS
 * (or a new nvcc) changes without changing the compile arguments: a record
 * made under other flags must not stand in for this closure. */
KF_TEST(digest__dependency_record_made_under_other_nvcc_flags_is_not_reused) {
  const char *root = new_tree();
  char *deps = fx_path(root, "deps");
  fx_write_free(root, "templates/tk_common.cuh",
                "#pragma once\n"
                "#ifdef KF_USE_ALT\n"
                "#include \"tk_alt.cuh\"\n"
                "#endif // KF_USE_ALT\n"
                "constexpr int tk_common = 1;\n");
  fx_write_free(root, "templates/tk_alt.cuh", "constexpr int alt = 1;\n");
  char *plain = child_key(root, deps, NULL);
  char *alt1 = child_key(root, deps, "-DKF_USE_ALT=1");
  KF_CHECK(plain && alt1);
  KF_CHECK(strcmp(plain, alt1) != 0);
  age(root, "templates/tk_alt.cuh");
  fx_write_free(root, "templates/tk_alt.cuh", "constexpr int alt = 2;\n");
  char *alt2 = child_key(root, deps, "-DKF_USE_ALT=1");
  char *truth = child_key(root, NULL, "-DKF_USE_ALT=1"); /* a full parse */
  KF_CHECK(alt2 && truth);
  KF_CHECK_STR_EQ(alt2, truth);
  KF_CHECK(strcmp(alt1, alt2) != 0);
  free(plain);
  free(alt1);
  free(alt2);
  free(truth);
  free(deps);
}

/* A header that __has_include did not find is read once it exists: the
 * no-op path must see it appear, as a full parse does. */
KF_TEST(digest__header_appearing_for_has_include_is_seen_on_the_noop_path) {
  const char *root = new_tree();
  char *deps = fx_path(root, "deps");
  fx_write_free(root, "templates/tk_common.cuh",
                "#pragma once\n"
                "#if __has_include(\"tk_opt.cuh\")\n"
                "#include \"tk_opt.cuh\"\n"
                "#endif\n"
                "constexpr int tk_common = 1;\n");
  digest_result r1, r2, truth;
  KF_CHECK(digest_run(root, ID, deps, NULL, &r1) == 0);
  fx_write_free(root, "templates/tk_opt.cuh", "constexpr int opt = 1;\n");
  KF_CHECK(digest_run(root, ID, deps, NULL, &r2) == 0);
  KF_CHECK(digest_run(root, ID, NULL, NULL, &truth) == 0);
  KF_CHECK(find_record(&truth.rec, "file", "@templates/tk_opt.cuh"));
  KF_CHECK_STR_EQ(r2.key, truth.key);
  result_free(&r1);
  result_free(&r2);
  result_free(&truth);
  free(deps);
}

/* An #include that fails (the compile fails too) must not leave a record
 * that hides the header once it is created. */
KF_TEST(digest__header_created_after_a_failed_include_is_seen_on_the_noop_path) {
  const char *root = new_tree();
  char *deps = fx_path(root, "deps");
  fx_write_free(root, "templates/tk_common.cuh",
                "#pragma once\n#include \"tk_later.cuh\"\nconstexpr int tk_common = 1;\n");
  digest_result r1, r2, truth;
  KF_CHECK(digest_run(root, ID, deps, NULL, &r1) == 0);
  fx_write_free(root, "templates/tk_later.cuh", "constexpr int later = 1;\n");
  KF_CHECK(digest_run(root, ID, deps, NULL, &r2) == 0);
  KF_CHECK(digest_run(root, ID, NULL, NULL, &truth) == 0);
  KF_CHECK(find_record(&truth.rec, "file", "@templates/tk_later.cuh"));
  KF_CHECK_STR_EQ(r2.key, truth.key);
  result_free(&r1);
  result_free(&r2);
  result_free(&truth);
  free(deps);
}

KF_TEST_MAIN()
