/* Tests of the runtime's public API (runtime/include/kforge/runtime.h)
 * against the fake CUDA driver and fake HIP runtime: opening (arch choice,
 * refusals with their reasons, nothing left open), finding by width,
 * launching (configuration, argument checks), lazy loading, read-only
 * caches, introspection and last-error slots. */
#define _GNU_SOURCE
#include "fake_query.h"
#include "kf_test.h"
#include "kforge/runtime.h"
#include "rt_fixture.h"

#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#define NORM_PARAMS "const float* x; float* y; float eps; int rows"
#define PROJ_PARAMS "const kf_bf16* x; const kf_bf16* w; kf_bf16* y; long long n; int rows"

static const fx_spec STD[] = {
    {"norm", 1, NORM_PARAMS, 0, NULL, 0, 0}, {"norm", 2, NORM_PARAMS, 0, NULL, 0, 0},
    {"norm", 4, NORM_PARAMS, 0, NULL, 0, 0}, {"norm", 8, NORM_PARAMS, 0, NULL, 0, 0},
    {"proj", 4, PROJ_PARAMS, 0, NULL, 0, 0},
};
#define NSTD ((int)(sizeof STD / sizeof STD[0]))

/* A cache holding model "m" with STD for each listed arch. */
static char *std_cache(const char *const *arches, int n) {
  char *dir = fx_tmpdir();
  for (int i = 0; dir && i < n; i++)
    if (fx_cache_add(dir, "m", arches[i], STD, NSTD, 1) != 0)
      abort();
  return dir;
}

/* Options for model in cache, through the driver library at driver (NULL:
 * the environment's, then the default names), backend auto. */
static kf_runtime_options options(const char *cache, const char *model, const char *driver) {
  kf_runtime_options o;
  kf_runtime_options_init(&o);
  o.cache_dir = cache;
  o.model = model;
  o.driver_path = driver;
  return o;
}

/* Removes a test cache and frees its path. */
static void drop_cache(char *cache) {
  fx_remove_tree(cache);
  free(cache);
}

static kf_status open_cuda(const char *cache, int lazy, kf_runtime **rt) {
  kf_runtime_options o = options(cache, "m", FAKE_CUDA_PATH);
  o.lazy = lazy;
  o.backend = KF_BACKEND_CUDA;
  return kf_runtime_open(&o, rt);
}

/* Every test starts from a device of compute capability 9.0 and no loads. */
static void fresh(void) {
  setenv("FAKE_CUDA_CC", "90", 1);
  unsetenv("FAKE_CUDA_DEVICES");
  unsetenv("FAKE_CUDA_INIT_ERROR");
  unsetenv("FAKE_CUDA_STATIC_SHARED");
  fq_reset(FAKE_CUDA_PATH);
}

KF_TEST(open__loads_and_verifies_every_object_eagerly) {
  const char *arches[] = {"sm_90a", "sm_90"};
  char *cache = std_cache(arches, 2);
  kf_runtime *rt = NULL;
  long retained;
  fresh();
  retained = fq_stat(FAKE_CUDA_PATH, "retained");
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK && rt);
  KF_CHECK_STR_EQ(kf_runtime_arch(rt), "sm_90a");
  KF_CHECK_STR_EQ(kf_runtime_device_arch(rt), "sm_90");
  KF_CHECK_STR_EQ(kf_runtime_model(rt), "m");
  KF_CHECK(kf_runtime_backend(rt) == KF_BACKEND_CUDA);
  KF_CHECK(kf_runtime_kernel_count(rt) == NSTD);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == NSTD);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "retained") == retained + 1);
  kf_runtime_close(rt);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "retained") == retained);
  drop_cache(cache);
}

KF_TEST(open__plain_sm_xy_serves_a_later_minor_and_sm_xya_does_not) {
  const char *both[] = {"sm_90a", "sm_90"}, *only_a[] = {"sm_90a"};
  char *cache = std_cache(both, 2), *cache_a = std_cache(only_a, 1);
  kf_runtime *rt = NULL;
  fresh();
  setenv("FAKE_CUDA_CC", "92", 1);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK_STR_EQ(kf_runtime_arch(rt), "sm_90");
  kf_runtime_close(rt);
  KF_CHECK(open_cuda(cache_a, 0, &rt) == KF_ERR_NO_MANIFEST && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "sm_92a, sm_92, sm_91, sm_90");
  KF_CHECK_CONTAINS(kf_last_error(), "the cache has sm_90a");
  fx_remove_tree(cache);
  fx_remove_tree(cache_a);
  free(cache);
  free(cache_a);
}

KF_TEST(open__refuses_sm_100a_on_9_0_naming_what_it_runs_and_has) {
  const char *arches[] = {"sm_100a", "sm_120a"};
  char *cache = std_cache(arches, 2);
  kf_runtime *rt = (kf_runtime *)1;
  long retained;
  fresh();
  retained = fq_stat(FAKE_CUDA_PATH, "retained");
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_NO_MANIFEST);
  KF_CHECK(rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "which runs sm_90a, sm_90");
  KF_CHECK_CONTAINS(kf_last_error(), "the cache has sm_100a, sm_120a");
  KF_CHECK_CONTAINS(kf_last_error(), "compute capability 9.0");
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "retained") == retained);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == 0);
  drop_cache(cache);
}

KF_TEST(open__refuses_a_damaged_object_naming_kernel_and_path) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  char *obj = fx_object_path(cache, "m", "sm_90a", "norm", 4);
  kf_runtime *rt = (kf_runtime *)1;
  long retained;
  fresh();
  retained = fq_stat(FAKE_CUDA_PATH, "retained");
  KF_CHECK(fx_flip_byte(obj, 10) == 0);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_CHECKSUM);
  KF_CHECK(rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "kernel m/norm/w4/sm_90a");
  KF_CHECK_CONTAINS(kf_last_error(), obj);
  KF_CHECK_CONTAINS(kf_last_error(), "damaged");
  /* Kernels loaded before the damaged one were unloaded again. */
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") > 0);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "retained") == retained);
  drop_cache(cache);
  free(obj);
}

KF_TEST(open__refuses_a_truncated_object) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  char *obj = fx_object_path(cache, "m", "sm_90a", "proj", 4);
  kf_runtime *rt = NULL;
  fresh();
  KF_CHECK(truncate(obj, 5) == 0);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_CHECKSUM && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "kernel m/proj/w4/sm_90a");
  KF_CHECK_CONTAINS(kf_last_error(), obj);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  drop_cache(cache);
  free(obj);
}

KF_TEST(open__refuses_a_missing_symbol_with_the_drivers_reason) {
  fx_spec specs[] = {{"norm", 1, NORM_PARAMS, 0, NULL, 0, 0},
                     {"norm", 2, NORM_PARAMS, 0, "kf_something_else", 0, 0}};
  char *cache = fx_tmpdir(), sym[256];
  kf_runtime *rt = NULL;
  fresh();
  KF_CHECK(fx_cache_add(cache, "m", "sm_90a", specs, 2, 1) == 0);
  fx_symbol("m/norm/w2/sm_90a", sym, sizeof sym);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_SYMBOL && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "kernel m/norm/w2/sm_90a");
  KF_CHECK_CONTAINS(kf_last_error(), sym);
  /* The check macro's record: file:line, statement, driver's own text. */
  KF_CHECK_CONTAINS(kf_last_error(), "rt_cuda.c:");
  KF_CHECK_CONTAINS(kf_last_error(), "cuModuleGetFunction(&fn, mod, symbol)");
  KF_CHECK_CONTAINS(kf_last_error(), "CUDA_ERROR_NOT_FOUND (named symbol not found)");
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  drop_cache(cache);
}

KF_TEST(open__refuses_a_manifest_of_a_newer_format) {
  char *cache = fx_tmpdir(), *man;
  kf_runtime *rt = NULL;
  fresh();
  KF_CHECK(fx_cache_add(cache, "m", "sm_90a", STD, NSTD, 2) == 0);
  man = fx_manifest_path(cache, "m", "sm_90a");
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_FORMAT && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), man);
  KF_CHECK_CONTAINS(kf_last_error(), "format 2 is newer");
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == 0);
  drop_cache(cache);
  free(man);
}

KF_TEST(open__refuses_a_malformed_manifest_naming_its_path) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  char *man = fx_manifest_path(cache, "m", "sm_90a");
  kf_runtime *rt = NULL;
  fresh();
  KF_CHECK(fx_write_file(man, "{\"format\": 1,\n \"model\": ", 24) == 0);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_BAD_MANIFEST && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), man);
  drop_cache(cache);
  free(man);
}

KF_TEST(open__reports_a_missing_driver_clearly) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  kf_runtime_options o;
  kf_runtime *rt = NULL;
  o = options(cache, "m", "/nonexistent/libcuda.so.1");
  o.backend = KF_BACKEND_CUDA;
  KF_CHECK(kf_runtime_open(&o, &rt) == KF_ERR_NO_DRIVER && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "cannot open the CUDA driver /nonexistent/libcuda.so.1");
  /* Auto-detection names both drivers it looked for. */
  o.backend = KF_BACKEND_AUTO;
  o.driver_path = NULL;
  setenv("KFORGE_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
  setenv("KFORGE_HIP_RUNTIME", "/nonexistent/libamdhip64.so", 1);
  KF_CHECK(kf_runtime_open(&o, &rt) == KF_ERR_NO_DRIVER && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "/nonexistent/libcuda.so.1");
  KF_CHECK_CONTAINS(kf_last_error(), "/nonexistent/libamdhip64.so");
  unsetenv("KFORGE_CUDA_DRIVER");
  unsetenv("KFORGE_HIP_RUNTIME");
  drop_cache(cache);
}

KF_TEST(open__refuses_a_device_ordinal_out_of_range) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  kf_runtime_options o;
  kf_runtime *rt = NULL;
  fresh();
  o = options(cache, "m", FAKE_CUDA_PATH);
  o.device = 1;
  KF_CHECK(kf_runtime_open(&o, &rt) == KF_ERR_NO_DEVICE && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "device 1 does not exist");
  setenv("FAKE_CUDA_INIT_ERROR", "100", 1);
  o.device = 0;
  o.backend = KF_BACKEND_CUDA;
  KF_CHECK(kf_runtime_open(&o, &rt) == KF_ERR_NO_DEVICE && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "cuInit(0) failed: CUDA_ERROR_NO_DEVICE");
  unsetenv("FAKE_CUDA_INIT_ERROR");
  drop_cache(cache);
}

KF_TEST(open__refuses_a_model_with_no_manifests_or_a_bad_name) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  kf_runtime_options o;
  kf_runtime *rt = NULL;
  fresh();
  o = options(cache, "other", FAKE_CUDA_PATH);
  KF_CHECK(kf_runtime_open(&o, &rt) == KF_ERR_NO_MANIFEST && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "no manifests for model 'other'");
  o.model = "../m";
  KF_CHECK(kf_runtime_open(&o, &rt) == KF_ERR_INVALID_ARGUMENT && rt == NULL);
  KF_CHECK(kf_runtime_open(NULL, &rt) == KF_ERR_INVALID_ARGUMENT);
  drop_cache(cache);
}

KF_TEST(find__picks_the_smallest_width_covering_rows) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  const int rows[] = {1, 2, 3, 4, 5, 7, 8}, want[] = {1, 2, 4, 4, 8, 8, 8};
  fresh();
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  for (int i = 0; i < 7; i++) {
    KF_CHECK(kf_kernel_find(rt, "norm", rows[i], &k) == KF_OK);
    KF_CHECK(kf_kernel_width(k) == want[i]);
  }
  KF_CHECK(kf_kernel_find(rt, "proj", 1, &k) == KF_OK);
  KF_CHECK_STR_EQ(kf_kernel_id(k), "m/proj/w4/sm_90a");
  kf_runtime_close(rt);
  drop_cache(cache);
}

KF_TEST(find__rows_above_the_largest_width_get_a_distinct_status) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  kf_runtime *rt = NULL;
  kf_kernel *k = (kf_kernel *)1;
  char reason[512];
  fresh();
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "norm", 9, &k) == KF_ERR_NO_WIDTH && k == NULL);
  KF_CHECK(kf_runtime_error(rt, reason, sizeof reason) == KF_ERR_NO_WIDTH);
  KF_CHECK_CONTAINS(reason, "largest width of kind 'norm' (8)");
  KF_CHECK(kf_kernel_find(rt, "proj", 5, &k) == KF_ERR_NO_WIDTH);
  KF_CHECK(kf_kernel_find(rt, "qkv", 1, &k) == KF_ERR_NO_KIND);
  KF_CHECK_CONTAINS(kf_last_error(), "kinds: norm, proj");
  KF_CHECK(kf_kernel_find(rt, "norm", 0, &k) == KF_ERR_INVALID_ARGUMENT);
  KF_CHECK(KF_ERR_NO_WIDTH != KF_ERR_NO_KIND);
  kf_runtime_close(rt);
  drop_cache(cache);
}

/* Gives every kernel of kind in cache's sm_90a manifest of model "m"
 * "page_size": page (after its width), as kforge writes it for a kernel
 * whose parameters read the shape's page_size. */
static void set_page_size(const char *cache, const char *kind, int page) {
  char *path = fx_manifest_path(cache, "m", "sm_90a"), want[128], *text, *out;
  FILE *f = fopen(path, "rb");
  long len;
  size_t used = 0;
  KF_CHECK(f != NULL);
  fseek(f, 0, SEEK_END);
  len = ftell(f);
  rewind(f);
  text = calloc((size_t)len + 1, 1);
  out = calloc((size_t)len * 2 + 1, 1);
  KF_CHECK(text && out && fread(text, 1, (size_t)len, f) == (size_t)len);
  fclose(f);
  snprintf(want, sizeof want, "\"kind\": \"%s\",\n      \"width\": ", kind);
  for (const char *at = text, *hit; *at; at = hit) {
    if (!(hit = strstr(at, want))) {
      strcpy(out + used, at);
      break;
    }
    const char *eol = strchr(hit, '\n') + 1;
    eol = strchr(eol, '\n') + 1; /* past the width's line */
    memcpy(out + used, at, (size_t)(eol - at));
    used += (size_t)(eol - at);
    used += (size_t)sprintf(out + used, "      \"page_size\": %d,\n", page);
    hit = eol;
  }
  KF_CHECK(strstr(out, "page_size") != NULL);
  KF_CHECK(fx_write_file(path, out, strlen(out)) == 0);
  free(text);
  free(out);
  free(path);
}

KF_TEST(find__a_kernel_built_for_a_page_size_serves_only_that_one) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1), reason[512];
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  kf_variant v;
  fresh();
  set_page_size(cache, "proj", 16);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  memset(&v, 0, sizeof v);
  /* any page size (0, NULL, plain find): the kernel as built */
  KF_CHECK(kf_kernel_find_ex(rt, "proj", 3, &v, &k) == KF_OK && kf_kernel_page_size(k) == 16);
  KF_CHECK(kf_kernel_find_ex(rt, "proj", 3, NULL, &k) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "proj", 3, &k) == KF_OK && kf_kernel_width(k) == 4);
  v.page_size = 16;
  KF_CHECK(kf_kernel_find_ex(rt, "proj", 3, &v, &k) == KF_OK && kf_kernel_width(k) == 4);
  /* another page size: refused, naming what it was built for */
  v.page_size = 1;
  k = (kf_kernel *)1;
  KF_CHECK(kf_kernel_find_ex(rt, "proj", 3, &v, &k) == KF_ERR_NO_PAGE_SIZE && k == NULL);
  KF_CHECK(kf_runtime_error(rt, reason, sizeof reason) == KF_ERR_NO_PAGE_SIZE);
  KF_CHECK_CONTAINS(reason, "kind 'proj' of model 'm' is built for KV-cache pages of 16 tokens");
  KF_CHECK_CONTAINS(reason, "not 1: list 1 in the description's page_sizes");
  KF_CHECK_STR_EQ(kf_strerror(KF_ERR_NO_PAGE_SIZE), "no kernel of this kind for that page size");
  /* kernels that take no page size serve any */
  KF_CHECK(kf_kernel_find_ex(rt, "norm", 3, &v, &k) == KF_OK && kf_kernel_page_size(k) == 0);
  KF_CHECK(kf_kernel_width(k) == 4);
  /* the other refusals keep their order: kind, then width */
  KF_CHECK(kf_kernel_find_ex(rt, "qkv", 1, &v, &k) == KF_ERR_NO_KIND);
  KF_CHECK(kf_kernel_find_ex(rt, "norm", 9, &v, &k) == KF_ERR_NO_WIDTH);
  v.page_size = -1;
  KF_CHECK(kf_kernel_find_ex(rt, "norm", 1, &v, &k) == KF_ERR_INVALID_ARGUMENT);
  kf_runtime_close(rt);
  drop_cache(cache);
}

KF_TEST(runtime__page_sizes_are_those_the_kernels_were_built_for) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  kf_runtime *rt = NULL;
  int sizes[4] = {-1, -1, -1, -1};
  fresh();
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK(kf_runtime_page_sizes(rt, sizes, 4) == 0 && sizes[0] == -1);
  kf_runtime_close(rt);
  set_page_size(cache, "proj", 64);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK(kf_runtime_page_sizes(rt, NULL, 0) == 1);
  KF_CHECK(kf_runtime_page_sizes(rt, sizes, 4) == 1 && sizes[0] == 64 && sizes[1] == -1);
  KF_CHECK(kf_runtime_page_sizes(NULL, sizes, 4) == 0);
  kf_runtime_close(rt);
  drop_cache(cache);
}

KF_TEST(open__refuses_a_page_size_that_is_no_positive_integer) {
  const char *arches[] = {"sm_90a"};
  const char *bad[] = {"0", "-16", "1.5", "\"16\""};
  fresh();
  for (int i = 0; i < 4; i++) {
    char *cache = std_cache(arches, 1), *path = fx_manifest_path(cache, "m", "sm_90a");
    kf_runtime *rt = NULL;
    set_page_size(cache, "proj", 16);
    FILE *f = fopen(path, "rb");
    char text[16384], fixed[16400];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    char *at = strstr(text, "\"page_size\": 16");
    KF_CHECK(at != NULL);
    snprintf(fixed, sizeof fixed, "%.*s\"page_size\": %s%s", (int)(at - text), text, bad[i],
             at + strlen("\"page_size\": 16"));
    KF_CHECK(fx_write_file(path, fixed, strlen(fixed)) == 0);
    KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_BAD_MANIFEST && rt == NULL);
    KF_CHECK_CONTAINS(kf_last_error(), "page_size");
    free(path);
    drop_cache(cache);
  }
}

KF_TEST(launch__uses_the_manifests_config_and_passes_the_arguments) {
  fx_spec specs[] = {{"norm", 4, NORM_PARAMS, 4096, NULL, 0, 0}};
  char *cache = fx_tmpdir(), sym[256];
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  uintptr_t x = 0x1000, y = 0x2000;
  float eps = 0.5f;
  int rows = 3;
  kf_arg args[] = {{&x, 8}, {&y, 8}, {&eps, 4}, {&rows, 4}};
  fq_launch l;
  float got_eps;
  fresh();
  KF_CHECK(fx_cache_add(cache, "m", "sm_90a", specs, 1, 1) == 0);
  fx_symbol("m/norm/w4/sm_90a", sym, sizeof sym);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "norm", 3, &k) == KF_OK);
  KF_CHECK(kf_kernel_launch(k, (void *)7, args, 4) == KF_OK);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "launches") == 1);
  fq_last(FAKE_CUDA_PATH, &l);
  KF_CHECK_STR_EQ(l.name, sym);
  KF_CHECK(l.grid[0] == 4 && l.grid[1] == 1 && l.grid[2] == 1);
  KF_CHECK(l.block[0] == 256 && l.block[1] == 1 && l.shared == 4096);
  KF_CHECK(l.stream == (void *)7 && l.nparams == 4);
  KF_CHECK(l.params[0] == 0x1000 && l.params[1] == 0x2000);
  memcpy(&got_eps, &l.params[2], sizeof got_eps);
  KF_CHECK(got_eps == 0.5f && l.params[3] == 3);
  kf_runtime_close(rt);
  drop_cache(cache);
}

KF_TEST(launch__refuses_a_wrong_argument_count_without_launching) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  uintptr_t x = 0x1000;
  int rows = 2;
  kf_arg args[] = {{&x, 8}, {&x, 8}, {&rows, 4}};
  char reason[512];
  fresh();
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "norm", 2, &k) == KF_OK);
  KF_CHECK(kf_kernel_launch(k, NULL, args, 3) == KF_ERR_ARGS);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "launches") == 0);
  KF_CHECK(kf_kernel_error(k, reason, sizeof reason) == KF_ERR_ARGS);
  KF_CHECK_CONTAINS(reason, "3 arguments given, its parameters are 4");
  KF_CHECK_CONTAINS(reason, "const float* x, float* y, float eps, int rows");
  KF_CHECK_STR_EQ(kf_last_error(), reason);
  kf_runtime_close(rt);
  drop_cache(cache);
}

KF_TEST(launch__refuses_a_wrong_argument_size_without_launching) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  uintptr_t x = 0x1000;
  int small = 1, rows = 2;
  kf_arg args[] = {{&x, 8}, {&small, 4}, {&small, 4}, {&rows, 4}};
  fresh();
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "norm", 2, &k) == KF_OK);
  KF_CHECK(kf_kernel_launch(k, NULL, args, 4) == KF_ERR_ARGS);
  KF_CHECK_CONTAINS(kf_last_error(), "argument 1 (float* y) is 4 bytes");
  args[1].size = 8;
  args[1].value = NULL;
  KF_CHECK(kf_kernel_launch(k, NULL, args, 4) == KF_ERR_ARGS);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "launches") == 0);
  args[1].value = &x;
  KF_CHECK(kf_kernel_launch(k, NULL, args, 4) == KF_OK);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "launches") == 1);
  kf_runtime_close(rt);
  drop_cache(cache);
}

KF_TEST(launch__refuses_rows_outside_one_to_width) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  uintptr_t x = 0x1000;
  float eps = 1;
  int rows = 5;
  kf_arg args[] = {{&x, 8}, {&x, 8}, {&eps, 4}, {&rows, 4}};
  fresh();
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "norm", 4, &k) == KF_OK);
  KF_CHECK(kf_kernel_launch(k, NULL, args, 4) == KF_ERR_ARGS);
  KF_CHECK_CONTAINS(kf_last_error(), "rows is 5, must be 1..4");
  rows = 0;
  KF_CHECK(kf_kernel_launch(k, NULL, args, 4) == KF_ERR_ARGS);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "launches") == 0);
  kf_runtime_close(rt);
  drop_cache(cache);
}

/* Opens a cache holding the one kernel spec (kind "attn", sm_90a) and
 * launches it once with 1 row; the fake refuses a launch of more than 48 KiB
 * of static (FAKE_CUDA_STATIC_SHARED) plus dynamic shared memory without the
 * opt-in. *st: the open's status; *launched: the dynamic shared memory the
 * launch passed; *config: what kf_kernel_launch_config says after it. */
static void open_and_launch(const fx_spec *spec, kf_status *st, unsigned *launched,
                            unsigned *config) {
  char *cache = fx_tmpdir();
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  uintptr_t o = 0x10;
  int rows = 1;
  kf_arg args[] = {{&o, 8}, {&rows, 4}};
  fq_reset(FAKE_CUDA_PATH);
  KF_CHECK(fx_cache_add(cache, "m", "sm_90a", spec, 1, 1) == 0);
  *st = open_cuda(cache, 0, &rt);
  if (*st == KF_OK) {
    KF_CHECK(kf_kernel_find(rt, "attn", 1, &k) == KF_OK);
    KF_CHECK(kf_kernel_launch(k, NULL, args, 2) == KF_OK);
    KF_CHECK(fq_stat(FAKE_CUDA_PATH, "launches") == 1);
    fq_launch l;
    fq_last(FAKE_CUDA_PATH, &l);
    if (launched)
      *launched = l.shared;
    if (config)
      KF_CHECK(kf_kernel_launch_config(k, NULL, NULL, config) == KF_OK);
    kf_runtime_close(rt);
  } else {
    KF_CHECK(rt == NULL);
  }
  fx_remove_tree(cache);
  free(cache);
}

/* A width-1 kernel (grid of 1 block) with launch.shared_bytes shared and
 * max_blocks_per_sm max_blocks. */
static void open_and_launch_shared(unsigned shared, unsigned max_blocks, kf_status *st,
                                   unsigned *launched, unsigned *config) {
  const fx_spec spec = {"attn", 1, "float* o; int rows", shared, NULL, max_blocks, 0};
  open_and_launch(&spec, st, launched, config);
}

KF_TEST(launch__opts_into_dynamic_shared_memory) {
  kf_status st = KF_OK;
  fresh();
  open_and_launch_shared(100 * 1024, 0, &st, NULL, NULL);
  KF_CHECK(st == KF_OK);
  /* 40 KiB static plus 16 KiB dynamic is over the 48 KiB a kernel gets
   * without opting in, though the dynamic part alone is not */
  setenv("FAKE_CUDA_STATIC_SHARED", "40960", 1);
  open_and_launch_shared(16 * 1024, 0, &st, NULL, NULL);
  KF_CHECK(st == KF_OK);
  unsetenv("FAKE_CUDA_STATIC_SHARED");
  /* more than the device allows is refused at open, naming the call */
  open_and_launch_shared(300 * 1024, 0, &st, NULL, NULL);
  KF_CHECK(st == KF_ERR_DRIVER);
  KF_CHECK_CONTAINS(kf_last_error(), "kernel m/attn/w1/sm_90a");
  KF_CHECK_CONTAINS(kf_last_error(), "cuFuncSetAttribute(");
  KF_CHECK_CONTAINS(kf_last_error(), "CUDA_ERROR_INVALID_VALUE");
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
}

KF_TEST(launch__pads_shared_memory_to_keep_max_blocks_per_sm) {
  kf_status st = KF_OK;
  unsigned launched = 0, config = 0;
  fresh();
  /* 228 KiB per SM, 1 KiB reserved per block, 45 KiB static: a third block
   * must not fit, so each takes more than 76 KiB (77825 bytes) */
  setenv("FAKE_CUDA_STATIC_SHARED", "46080", 1);
  open_and_launch_shared(0, 2, &st, &launched, &config);
  KF_CHECK(st == KF_OK);
  KF_CHECK(launched == 233472 / 3 + 1 - 46080 - 1024);
  KF_CHECK(config == launched);
  /* what the manifest asks for already keeps it: unchanged */
  open_and_launch_shared(40 * 1024, 2, &st, &launched, &config);
  KF_CHECK(st == KF_OK && launched == 40 * 1024 && config == 40 * 1024);
  /* one block per SM: more than half of it each */
  open_and_launch_shared(0, 1, &st, &launched, &config);
  KF_CHECK(st == KF_OK && launched == 233472 / 2 + 1 - 46080 - 1024);
  /* unless that is more than a block may have: uncapped, not refused */
  setenv("FAKE_CUDA_OPTIN", "100000", 1);
  open_and_launch_shared(0, 1, &st, &launched, &config);
  KF_CHECK(st == KF_OK && launched == 0);
  unsetenv("FAKE_CUDA_OPTIN");
  unsetenv("FAKE_CUDA_STATIC_SHARED");
  /* no cap asked: the manifest's */
  open_and_launch_shared(0, 0, &st, &launched, &config);
  KF_CHECK(st == KF_OK && launched == 0 && config == 0);
}

KF_TEST(launch__one_wave_keeps_the_grids_share_of_the_sms) {
  kf_status st = KF_OK;
  unsigned launched = 0, config = 0;
  fresh();
  setenv("FAKE_CUDA_STATIC_SHARED", "46080", 1);
  /* width 8: a grid of 8 blocks on 4 SMs, so at most 2 per SM */
  setenv("FAKE_CUDA_SMS", "4", 1);
  const fx_spec wide = {"attn", 8, "float* o; int rows", 0, NULL, 0, 1};
  open_and_launch(&wide, &st, &launched, &config);
  KF_CHECK(st == KF_OK && launched == 233472 / 3 + 1 - 46080 - 1024 && config == launched);
  /* with max_blocks_per_sm 1 as well, the smaller cap */
  const fx_spec both = {"attn", 8, "float* o; int rows", 0, NULL, 1, 1};
  open_and_launch(&both, &st, &launched, &config);
  KF_CHECK(st == KF_OK && launched == 233472 / 2 + 1 - 46080 - 1024);
  /* 8 blocks on 132 SMs: one each */
  setenv("FAKE_CUDA_SMS", "132", 1);
  open_and_launch(&wide, &st, &launched, &config);
  KF_CHECK(st == KF_OK && launched == 233472 / 2 + 1 - 46080 - 1024);
  unsetenv("FAKE_CUDA_SMS");
  unsetenv("FAKE_CUDA_STATIC_SHARED");
}

KF_TEST(launch__leaves_the_callers_context_as_it_was) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  uintptr_t x = 0x1000;
  float eps = 1;
  int rows = 1;
  kf_arg args[] = {{&x, 8}, {&x, 8}, {&eps, 4}, {&rows, 4}};
  int (*get_current)(void **) = (int (*)(void **))fq_sym(FAKE_CUDA_PATH, "cuCtxGetCurrent");
  void *ctx = (void *)1;
  fresh();
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "norm", 1, &k) == KF_OK);
  /* The fake refuses to launch without a current context; this thread has
   * none, before and after. */
  KF_CHECK(get_current(&ctx) == 0 && ctx == NULL);
  KF_CHECK(kf_kernel_launch(k, NULL, args, 4) == KF_OK);
  KF_CHECK(get_current(&ctx) == 0 && ctx == NULL);
  kf_runtime_close(rt);
  drop_cache(cache);
}

KF_TEST(lazy__loads_each_kernel_at_its_first_use_only) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  uintptr_t x = 0x1000;
  long long n = 64;
  int rows = 4;
  kf_arg args[] = {{&x, 8}, {&x, 8}, {&x, 8}, {&n, 8}, {&rows, 4}};
  fresh();
  KF_CHECK(open_cuda(cache, 1, &rt) == KF_OK);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == 0);
  KF_CHECK(kf_kernel_find(rt, "norm", 3, &k) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "norm", 4, &k) == KF_OK);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == 1);
  /* A kernel reached by index, not find, loads at its first launch. */
  for (int i = 0; i < kf_runtime_kernel_count(rt); i++) {
    KF_CHECK(kf_runtime_kernel(rt, i, &k) == KF_OK);
    if (strcmp(kf_kernel_kind(k), "proj") == 0)
      break;
  }
  KF_CHECK_STR_EQ(kf_kernel_kind(k), "proj");
  KF_CHECK(kf_kernel_launch(k, NULL, args, 5) == KF_OK);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == 2);
  kf_runtime_close(rt);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  drop_cache(cache);
}

KF_TEST(lazy__reports_a_damaged_object_at_find) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  char *obj = fx_object_path(cache, "m", "sm_90a", "norm", 4);
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  fresh();
  KF_CHECK(fx_flip_byte(obj, 12) == 0);
  KF_CHECK(open_cuda(cache, 1, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "norm", 3, &k) == KF_ERR_CHECKSUM && k == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "kernel m/norm/w4/sm_90a");
  KF_CHECK_CONTAINS(kf_last_error(), obj);
  /* Sticky: the object is not re-read and accepted later. */
  KF_CHECK(kf_kernel_find(rt, "norm", 4, &k) == KF_ERR_CHECKSUM);
  KF_CHECK(kf_kernel_find(rt, "norm", 2, &k) == KF_OK);
  kf_runtime_close(rt);
  drop_cache(cache);
  free(obj);
}

/* A snapshot of a tree: every path with its size, mode, mtime and bytes. */
typedef struct snap {
  char *text;
  size_t len, cap;
} snap;

static void snap_add(snap *s, const char *line) {
  size_t n = strlen(line);
  if (s->len + n + 1 > s->cap) {
    s->cap = (s->len + n + 1) * 2;
    s->text = realloc(s->text, s->cap);
  }
  memcpy(s->text + s->len, line, n + 1);
  s->len += n;
}

static void snap_tree(snap *s, const char *path) {
  struct stat st;
  char line[8192];
  if (lstat(path, &st) != 0)
    return;
  snprintf(line, sizeof line, "%s %o %lld %lld.%09ld\n", path, st.st_mode, (long long)st.st_size,
           (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  snap_add(s, line);
  if (S_ISREG(st.st_mode)) {
    FILE *f = fopen(path, "rb");
    size_t n = fread(line, 1, sizeof line - 1, f);
    line[n] = '\0';
    fclose(f);
    for (size_t i = 0; i < n; i++)
      if (line[i] == '\0')
        line[i] = '.';
    snap_add(s, line);
  } else if (S_ISDIR(st.st_mode)) {
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
      if (strcmp(names[i]->d_name, ".") && strcmp(names[i]->d_name, "..")) {
        char *child;
        if (asprintf(&child, "%s/%s", path, names[i]->d_name) >= 0) {
          snap_tree(s, child);
          free(child);
        }
      }
      free(names[i]);
    }
    free(names);
  }
}

static void chmod_tree(const char *path, int writable) {
  char *cmd;
  if (asprintf(&cmd, "chmod -R %s '%s'", writable ? "u+w" : "a-w", path) >= 0) {
    if (system(cmd) != 0)
      abort();
    free(cmd);
  }
}

KF_TEST(readonly__open_find_launch_never_write_the_cache) {
  const char *arches[] = {"sm_90a", "sm_100a"};
  char *cache = std_cache(arches, 2);
  snap before = {0}, after = {0};
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  kf_resources res;
  uintptr_t x = 0x1000;
  float eps = 1;
  int rows = 1;
  kf_arg args[] = {{&x, 8}, {&x, 8}, {&eps, 4}, {&rows, 4}};
  fresh();
  chmod_tree(cache, 0);
  snap_tree(&before, cache);
  /* mtimes have nanoseconds; let a write, if any, land on a later one. */
  usleep(20000);
  for (int lazy = 0; lazy < 2; lazy++) {
    KF_CHECK(open_cuda(cache, lazy, &rt) == KF_OK);
    KF_CHECK(kf_kernel_find(rt, "norm", 1, &k) == KF_OK);
    KF_CHECK(kf_kernel_launch(k, NULL, args, 4) == KF_OK);
    KF_CHECK(kf_kernel_resources(k, &res) == KF_OK);
    kf_runtime_close(rt);
  }
  snap_tree(&after, cache);
  KF_CHECK(before.len > 0);
  KF_CHECK_STR_EQ(after.text, before.text);
  chmod_tree(cache, 1);
  free(before.text);
  free(after.text);
  drop_cache(cache);
}

KF_TEST(introspection__params_launch_config_and_resources) {
  fx_spec specs[] = {{"proj", 4, PROJ_PARAMS, 512, NULL, 0, 0}};
  char *cache = fx_tmpdir(), *meta;
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  const char *name, *type;
  size_t size;
  unsigned grid[3], block[3], shared;
  kf_resources res;
  fresh();
  KF_CHECK(fx_cache_add(cache, "m", "sm_90a", specs, 1, 1) == 0);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "proj", 2, &k) == KF_OK);
  KF_CHECK(kf_kernel_param_count(k) == 5);
  KF_CHECK(kf_kernel_param(k, 3, &name, &type, &size) == KF_OK);
  KF_CHECK_STR_EQ(name, "n");
  KF_CHECK_STR_EQ(type, "long long");
  KF_CHECK(size == 8);
  KF_CHECK(kf_kernel_param(k, 5, &name, &type, &size) == KF_ERR_INVALID_ARGUMENT);
  KF_CHECK(kf_kernel_launch_config(k, grid, block, &shared) == KF_OK);
  KF_CHECK(grid[0] == 4 && block[0] == 256 && shared == 512);
  KF_CHECK(kf_kernel_resources(k, &res) == KF_OK);
  KF_CHECK(res.registers == 36 && res.spill_stores == 4 && res.spill_loads == 8 &&
           res.stack_bytes == 16 && res.shared_bytes == 1024);
  kf_runtime_close(rt);
  /* A missing meta.json fails introspection, not open. */
  meta = fx_meta_path(cache, "m", "sm_90a", "proj", 4);
  KF_CHECK(remove(meta) == 0);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "proj", 2, &k) == KF_OK);
  KF_CHECK(kf_kernel_resources(k, &res) == KF_ERR_BAD_META);
  KF_CHECK_CONTAINS(kf_last_error(), meta);
  kf_runtime_close(rt);
  drop_cache(cache);
  free(meta);
}

KF_TEST(errors__statuses_have_distinct_texts_and_handles_keep_theirs) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  kf_runtime *rt = NULL;
  kf_kernel *a = NULL, *b = NULL;
  char ra[512], rb[512];
  int rows = 1;
  kf_arg args[] = {{&rows, 4}};
  for (int i = 0; i <= KF_ERR_UNTRUSTED; i++)
    for (int j = 0; j < i; j++)
      KF_CHECK(strcmp(kf_strerror((kf_status)i), kf_strerror((kf_status)j)));
  fresh();
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "norm", 1, &a) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "norm", 2, &b) == KF_OK);
  KF_CHECK(kf_kernel_error(a, ra, sizeof ra) == KF_OK && ra[0] == '\0');
  KF_CHECK(kf_kernel_launch(a, NULL, args, 1) == KF_ERR_ARGS);
  KF_CHECK(kf_kernel_error(a, ra, sizeof ra) == KF_ERR_ARGS);
  KF_CHECK_CONTAINS(ra, "m/norm/w1/sm_90a");
  KF_CHECK(kf_kernel_error(b, rb, sizeof rb) == KF_OK && rb[0] == '\0');
  KF_CHECK(kf_runtime_error(rt, rb, sizeof rb) == KF_OK);
  kf_runtime_close(rt);
  drop_cache(cache);
}

static kf_status open_hip(const char *cache, kf_runtime **rt) {
  kf_runtime_options o = options(cache, "m", FAKE_HIP_PATH);
  o.backend = KF_BACKEND_HIP;
  return kf_runtime_open(&o, rt);
}

KF_TEST(hip__picks_the_manifest_whose_target_features_match) {
  const char *arches[] = {"gfx942", "gfx942:xnack+", "gfx942:xnack-", "gfx90a"};
  char *cache = std_cache(arches, 4);
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  uintptr_t x = 0x1000;
  float eps = 1;
  int rows = 2;
  kf_arg args[] = {{&x, 8}, {&x, 8}, {&eps, 4}, {&rows, 4}};
  setenv("FAKE_HIP_ARCH", "gfx942:sramecc+:xnack-", 1);
  fq_reset(FAKE_HIP_PATH);
  KF_CHECK(open_hip(cache, &rt) == KF_OK);
  KF_CHECK_STR_EQ(kf_runtime_arch(rt), "gfx942:xnack-");
  KF_CHECK_STR_EQ(kf_runtime_device_arch(rt), "gfx942:sramecc+:xnack-");
  KF_CHECK(kf_runtime_backend(rt) == KF_BACKEND_HIP);
  KF_CHECK(kf_kernel_find(rt, "norm", 2, &k) == KF_OK);
  KF_CHECK_STR_EQ(kf_kernel_id(k), "m/norm/w2/gfx942:xnack-");
  KF_CHECK(kf_kernel_launch(k, (void *)3, args, 4) == KF_OK);
  KF_CHECK(fq_stat(FAKE_HIP_PATH, "launches") == 1);
  kf_runtime_close(rt);
  KF_CHECK(fq_stat(FAKE_HIP_PATH, "live_modules") == 0);
  drop_cache(cache);
}

KF_TEST(hip__refuses_other_gfx_naming_what_it_runs_and_has) {
  const char *arches[] = {"gfx90a", "gfx942:xnack+"};
  char *cache = std_cache(arches, 2);
  kf_runtime *rt = NULL;
  setenv("FAKE_HIP_ARCH", "gfx942:sramecc+:xnack-", 1);
  KF_CHECK(open_hip(cache, &rt) == KF_ERR_NO_MANIFEST && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "device 0 is gfx942:sramecc+:xnack-");
  KF_CHECK_CONTAINS(kf_last_error(), "gfx942:xnack-, gfx942;");
  KF_CHECK_CONTAINS(kf_last_error(), "the cache has gfx90a, gfx942:xnack+");
  drop_cache(cache);
}

KF_TEST(hip__launch_selects_the_device_and_restores_the_callers) {
  const char *arches[] = {"gfx942"};
  char *cache = std_cache(arches, 1);
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  uintptr_t x = 0x1000;
  float eps = 1;
  int rows = 1, dev = -1;
  kf_arg args[] = {{&x, 8}, {&x, 8}, {&eps, 4}, {&rows, 4}};
  int (*set_device)(int) = (int (*)(int))fq_sym(FAKE_HIP_PATH, "hipSetDevice");
  int (*get_device)(int *) = (int (*)(int *))fq_sym(FAKE_HIP_PATH, "hipGetDevice");
  setenv("FAKE_HIP_ARCH", "gfx942:sramecc+:xnack-", 1);
  setenv("FAKE_HIP_DEVICES", "2", 1);
  fq_reset(FAKE_HIP_PATH);
  KF_CHECK(open_hip(cache, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "norm", 1, &k) == KF_OK);
  KF_CHECK(set_device(1) == 0);
  /* The fake refuses launches on device 1; the runtime's device is 0. */
  KF_CHECK(kf_kernel_launch(k, NULL, args, 4) == KF_OK);
  KF_CHECK(get_device(&dev) == 0 && dev == 1);
  KF_CHECK(set_device(0) == 0);
  kf_runtime_close(rt);
  unsetenv("FAKE_HIP_DEVICES");
  drop_cache(cache);
}

KF_TEST(auto__falls_back_to_hip_when_cuda_is_absent) {
  const char *arches[] = {"gfx942", "sm_90a"};
  char *cache = std_cache(arches, 2);
  kf_runtime_options o;
  kf_runtime *rt = NULL;
  o = options(cache, "m", NULL);
  setenv("FAKE_HIP_ARCH", "gfx942:sramecc+:xnack-", 1);
  setenv("KFORGE_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
  setenv("KFORGE_HIP_RUNTIME", FAKE_HIP_PATH, 1);
  KF_CHECK(kf_runtime_open(&o, &rt) == KF_OK);
  KF_CHECK(kf_runtime_backend(rt) == KF_BACKEND_HIP);
  KF_CHECK_STR_EQ(kf_runtime_arch(rt), "gfx942");
  kf_runtime_close(rt);
  /* With the CUDA driver there, it is preferred. */
  setenv("KFORGE_CUDA_DRIVER", FAKE_CUDA_PATH, 1);
  setenv("FAKE_CUDA_CC", "90", 1);
  KF_CHECK(kf_runtime_open(&o, &rt) == KF_OK);
  KF_CHECK(kf_runtime_backend(rt) == KF_BACKEND_CUDA);
  KF_CHECK_STR_EQ(kf_runtime_arch(rt), "sm_90a");
  kf_runtime_close(rt);
  unsetenv("KFORGE_CUDA_DRIVER");
  unsetenv("KFORGE_HIP_RUNTIME");
  drop_cache(cache);
}

/* ---- the manifest streamed into an eager open -------------------------- */

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  char *text;
  long n;
  if (!f)
    abort();
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  text = calloc(1, (size_t)n + 1);
  if (fread(text, 1, (size_t)n, f) != (size_t)n)
    abort();
  fclose(f);
  return text;
}

/* A cache of model "m" whose kind "k" has widths 1..n (entries sorted by
 * id: w1, w10, w11, ..., w2, ...); *man is its manifest's path. */
static char *wide_cache(int n, const fx_spec *extra, char **man) {
  fx_spec *specs = calloc((size_t)n + 1, sizeof *specs);
  char *cache = fx_tmpdir();
  for (int i = 0; i < n; i++)
    specs[i] = (fx_spec){"k", i + 1, "float* x; int rows", 0, NULL, 0, 0};
  if (extra)
    specs[n++] = *extra;
  if (fx_cache_add(cache, "m", "sm_90a", specs, n, 1) != 0)
    abort();
  free(specs);
  *man = fx_manifest_path(cache, "m", "sm_90a");
  return cache;
}

/* Where kernels[i] starts in a manifest fx_cache_add wrote. */
static char *entry(char *text, int i) {
  char *at = strstr(text, "\"kernels\"");
  for (int j = 0; j <= i && at; j++)
    at = strstr(at + 1, "\n    {");
  return at;
}

/* The description a manifest records, written into it (in place of the one
 * it has) as kforge build does. */
static void record_description(const char *man, const char *description) {
  char *text = slurp(man), *old = strstr(text, "\"description\""), *out;
  if (old) {
    char *end = strstr(old, "\n  ");
    memmove(old, end + 3, strlen(end + 3) + 1);
  }
  char *at = strstr(text, "\"arch\"");
  if (!at || asprintf(&out, "%.*s\"description\": \"%s\",\n  %s", (int)(at - text), text,
                      description, at) < 0)
    abort();
  if (fx_write_file(man, out, strlen(out)) != 0)
    abort();
  free(out);
  free(text);
}

KF_TEST(refusal__of_a_missing_kernel_names_the_build_command) {
  const char *arches[] = {"sm_100a"};
  char *cache = std_cache(arches, 1), *man = fx_manifest_path(cache, "m", "sm_100a");
  char *obj = fx_object_path(cache, "m", "sm_100a", "proj", 4), want[4096];
  kf_runtime_options o;
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  fresh();
  /* no manifest at all: the arch this device ranks first, a placeholder */
  o = options(cache, "other", FAKE_CUDA_PATH);
  KF_CHECK(kf_runtime_open(&o, &rt) == KF_ERR_NO_MANIFEST && rt == NULL);
  snprintf(want, sizeof want,
           " (build it with: kforge build --arch sm_90a --cache %s <the description of model "
           "'other'>)",
           cache);
  KF_CHECK_CONTAINS(kf_last_error(), want);
  /* another arch's manifest names its description, quoted for the shell */
  record_description(man, "/srv/it's models/m.json");
  KF_CHECK(open_cuda(cache, 1, &rt) == KF_ERR_NO_MANIFEST && rt == NULL);
  snprintf(want, sizeof want,
           "(build it with: kforge build --arch sm_90a --cache %s '/srv/it'\\''s models/m.json')",
           cache);
  KF_CHECK_CONTAINS(kf_last_error(), want);
  /* a manifest's object gone: its arch and description */
  setenv("FAKE_CUDA_CC", "100", 1);
  record_description(man, "/srv/models/m.json");
  KF_CHECK(unlink(obj) == 0);
  KF_CHECK(open_cuda(cache, 1, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "proj", 4, &k) == KF_ERR_IO && k == NULL);
  snprintf(want, sizeof want,
           "(build it with: kforge build --arch sm_100a --cache %s /srv/models/m.json)", cache);
  KF_CHECK_CONTAINS(kf_last_error(), "m/proj/w4/sm_100a");
  KF_CHECK_CONTAINS(kf_last_error(), want);
  kf_runtime_close(rt);
  drop_cache(cache);
  free(man);
  free(obj);
}

KF_TEST(open__bad_entry_midway_is_refused_and_what_loaded_is_unloaded) {
  char *man, *cache = wide_cache(10, NULL, &man), *text = slurp(man), *bad;
  kf_runtime *rt = (kf_runtime *)1;
  long retained;
  fresh();
  retained = fq_stat(FAKE_CUDA_PATH, "retained");
  /* kernels[5]'s checksum is no longer hex */
  bad = strdup(text);
  *(strstr(entry(bad, 5), "\"checksum\": \"") + 13) = 'g';
  KF_CHECK(fx_write_file(man, bad, strlen(bad)) == 0);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_BAD_MANIFEST && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), man);
  KF_CHECK_CONTAINS(kf_last_error(), "kernels[5].checksum: error: must be 32 hex digits");
  /* kernels[0..4] were loaded while kernels[5] was read, then unloaded */
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == 5);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "unloads") == 5);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "retained") == retained);
  KF_CHECK(open_cuda(cache, 1, &rt) == KF_ERR_BAD_MANIFEST && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "kernels[5].checksum: error: must be 32 hex digits");
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == 5);
  free(bad);

  /* a syntax error inside kernels[5]: refused before any load, by line */
  bad = strdup(text);
  char *colon = strstr(entry(bad, 5), "\"width\":") + 7, want[96];
  int line = 1, col = 1;
  *colon = ' '; /* cJSON stops at the value where ':' should be */
  for (const char *p = bad; p < colon + 2; p++)
    if (*p == '\n')
      line++, col = 1;
    else
      col++;
  snprintf(want, sizeof want, "sm_90a.json:%d:%d: error: malformed JSON in manifest", line, col);
  KF_CHECK(fx_write_file(man, bad, strlen(bad)) == 0);
  fq_reset(FAKE_CUDA_PATH);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_BAD_MANIFEST && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), want);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == 0);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  free(bad);

  /* and the same manifest, repaired, opens */
  KF_CHECK(fx_write_file(man, text, strlen(text)) == 0);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK && kf_runtime_kernel_count(rt) == 10);
  kf_runtime_close(rt);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  drop_cache(cache);
  free(text);
  free(man);
}

KF_TEST(open__repeated_kernel_id_after_many_good_ones_is_refused) {
  fx_spec again = {"k", 37, "float* x; int rows", 0, NULL, 0, 0};
  char *man, *cache = wide_cache(40, &again, &man);
  kf_runtime *rt = (kf_runtime *)1;
  fresh();
  for (int lazy = 0; lazy < 2; lazy++) {
    KF_CHECK(open_cuda(cache, lazy, &rt) == KF_ERR_BAD_MANIFEST && rt == NULL);
    KF_CHECK_CONTAINS(kf_last_error(), "id: error: 'm/k/w37/sm_90a' repeats kernels[");
    KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  }
  /* the eager open had loaded every kernel before the ids were compared */
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == 41);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "unloads") == 41);
  drop_cache(cache);
  free(man);
}

/* A load failure ahead of a bad entry: the manifest's reason wins, as when
 * the whole manifest was parsed before any load. */
KF_TEST(open__a_bad_entry_is_the_reason_even_after_a_damaged_object) {
  char *man, *cache = wide_cache(10, NULL, &man), *text = slurp(man);
  char *obj = fx_object_path(cache, "m", "sm_90a", "k", 10); /* kernels[1] */
  kf_runtime *rt = NULL;
  fresh();
  *(strstr(entry(text, 8), "\"symbol\": \"") + 11) = '9';
  KF_CHECK(fx_write_file(man, text, strlen(text)) == 0);
  KF_CHECK(fx_flip_byte(obj, 10) == 0);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_BAD_MANIFEST && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "kernels[8].symbol: error:");
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == 1);
  drop_cache(cache);
  free(text);
  free(obj);
  free(man);
}

KF_TEST(open__header_mismatch_is_refused_before_any_load) {
  const char *arches[] = {"sm_90"};
  char *cache = std_cache(arches, 1), *from = fx_manifest_path(cache, "m", "sm_90"), *to, *text;
  char *other = fx_manifest_path(cache, "other", "sm_90a");
  kf_runtime_options o;
  kf_runtime *rt = NULL;
  fresh();
  /* a manifest of arch sm_90 in the file for sm_90a */
  text = slurp(from);
  to = fx_manifest_path(cache, "m", "sm_90a");
  KF_CHECK(rename(from, to) == 0);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_BAD_MANIFEST && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "arch: error: 'sm_90' in the manifest file of another arch");
  /* model m's manifest in model other's directory */
  *strrchr(other, '/') = '\0';
  KF_CHECK(mkdir(other, 0755) == 0);
  *strchr(other + strlen(other), '\0') = '/';
  KF_CHECK(fx_write_file(other, text, strlen(text)) == 0);
  o = options(cache, "other", FAKE_CUDA_PATH);
  KF_CHECK(kf_runtime_open(&o, &rt) == KF_ERR_BAD_MANIFEST && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "model: error: 'm' in a manifest of model 'other'");
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == 0);
  drop_cache(cache);
  free(from);
  free(to);
  free(other);
  free(text);
}

KF_TEST(open__members_in_another_order_and_compact_json_load_alike) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1), *man = fx_manifest_path(cache, "m", "sm_90a");
  char *text = slurp(man), *moved, *flat, *o;
  char *kernels = strstr(text, "  \"kernels\"");
  char *close = strrchr(text, '}');
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  uintptr_t x = 0x1000;
  float eps = 1;
  int rows = 3, in_string = 0;
  kf_arg args[] = {{&x, 8}, {&x, 8}, {&eps, 4}, {&rows, 4}};
  fresh();
  /* "kernels" first, then the header; then no whitespace outside strings */
  KF_CHECK(kernels && close);
  KF_CHECK(asprintf(&moved, "{%.*s,\n%.*s}", (int)(close - kernels - 1), kernels,
                    (int)(kernels - text - 3), text + 1) > 0);
  flat = o = strdup(moved);
  for (const char *p = moved; *p; p++) {
    if (*p == '"' && p[-1] != '\\')
      in_string = !in_string;
    if (in_string || (*p != ' ' && *p != '\n'))
      *o++ = *p;
  }
  *o = '\0';
  KF_CHECK(strncmp(flat, "{\"kernels\":[{\"id\":", 18) == 0);
  KF_CHECK_CONTAINS(flat, "\"shared_bytes\":0}}],\"format\":1,\"model\":\"m\"");
  KF_CHECK(fx_write_file(man, flat, strlen(flat)) == 0);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK(kf_runtime_kernel_count(rt) == NSTD);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == NSTD);
  KF_CHECK(kf_kernel_find(rt, "norm", 3, &k) == KF_OK && kf_kernel_width(k) == 4);
  KF_CHECK(kf_kernel_param_count(k) == 4);
  KF_CHECK(kf_kernel_launch(k, NULL, args, 4) == KF_OK);
  kf_runtime_close(rt);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  drop_cache(cache);
  free(man);
  free(text);
  free(moved);
  free(flat);
}

/* ---- signatures parsed after the loads began ----------------------------- */

/* The generator's shape with its signatures last: the "params" of every
 * entry of man go, and "signatures": sigs (a JSON object) follows the
 * "kernels" array. */
static void sign_after_kernels(const char *man, const char *sigs) {
  char *text = slurp(man), *out = malloc(strlen(text) + strlen(sigs) + 64), *o = out;
  const char *p = text, *close = strrchr(text, '}');
  while (p < close) {
    if (strncmp(p, "      \"params\": ", 16) == 0) {
      p = strchr(p, '\n') + 1;
      continue;
    }
    *o++ = *p++;
  }
  while (o > out && (o[-1] == '\n' || o[-1] == ' '))
    o--;
  o += sprintf(o, ",\n  \"signatures\": %s\n}\n", sigs);
  if (fx_write_file(man, out, (size_t)(o - out)) != 0)
    abort();
  free(text);
  free(out);
}

#define K_SIG                                                                                      \
  "{\"params\": [{\"name\": \"x\", \"type\": \"float*\", \"size\": 8}, "                           \
  "{\"name\": \"rows\", \"type\": \"int\", \"size\": 4}]}"
#define PROJ_SIG                                                                                   \
  "{\"params\": [{\"name\": \"x\", \"type\": \"const kf_bf16*\", \"size\": 8}, "                   \
  "{\"name\": \"w\", \"type\": \"const kf_bf16*\", \"size\": 8}, "                                 \
  "{\"name\": \"y\", \"type\": \"kf_bf16*\", \"size\": 8}, "                                       \
  "{\"name\": \"n\", \"type\": \"long long\", \"size\": 8}, "                                      \
  "{\"name\": \"rows\", \"type\": \"int\", \"size\": 4}]}"

KF_TEST(open__signatures_after_the_kernels_reach_every_kernel_before_open_returns) {
  fx_spec proj = {"proj", 4, PROJ_PARAMS, 0, NULL, 0, 0};
  char *man, *cache = wide_cache(40, &proj, &man), *text;
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  const char *name, *type;
  size_t size;
  uintptr_t x = 0x1000;
  int rows = 2;
  kf_arg args[] = {{&x, 8}, {&rows, 4}};
  fresh();
  sign_after_kernels(man, "{\"k\": " K_SIG ", \"proj\": " PROJ_SIG "}");
  text = slurp(man);
  KF_CHECK(strstr(text, "\"params\"") > strstr(text, "\"kernels\""));
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == 41);
  for (int i = 0; i < 41; i++) {
    KF_CHECK(kf_runtime_kernel(rt, i, &k) == KF_OK);
    KF_CHECK(kf_kernel_param_count(k) == (i < 40 ? 2 : 5));
    KF_CHECK(kf_kernel_param(k, kf_kernel_param_count(k) - 1, &name, &type, &size) == KF_OK);
    KF_CHECK_STR_EQ(name, "rows");
  }
  KF_CHECK(kf_kernel_find(rt, "proj", 3, &k) == KF_OK);
  KF_CHECK(kf_kernel_param(k, 3, &name, &type, &size) == KF_OK);
  KF_CHECK_STR_EQ(name, "n");
  KF_CHECK_STR_EQ(type, "long long");
  KF_CHECK(size == 8);
  /* the trailing int rows is known: rows past the width are refused */
  KF_CHECK(kf_kernel_find(rt, "k", 1, &k) == KF_OK && kf_kernel_width(k) == 1);
  KF_CHECK(kf_kernel_launch(k, NULL, args, 2) == KF_ERR_ARGS);
  KF_CHECK_CONTAINS(kf_last_error(), "rows is 2, must be 1..1");
  rows = 1;
  KF_CHECK(kf_kernel_launch(k, NULL, args, 2) == KF_OK);
  kf_runtime_close(rt);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  drop_cache(cache);
  free(man);
  free(text);
}

KF_TEST(open__bad_signature_after_many_good_entries_is_refused_and_nothing_stays_loaded) {
  fx_spec proj = {"proj", 4, PROJ_PARAMS, 0, NULL, 0, 0};
  char *man, *cache = wide_cache(40, &proj, &man), *plain = slurp(man), *good;
  const char *bad_type = "signatures.k.params[0].type: error: unknown type 'double'";
  kf_runtime *rt = (kf_runtime *)1;
  long retained;
  fresh();
  retained = fq_stat(FAKE_CUDA_PATH, "retained");
  sign_after_kernels(man, "{\"k\": {\"params\": [{\"name\": \"x\", \"type\": \"double\", "
                          "\"size\": 8}]}, \"proj\": " PROJ_SIG "}");
  good = slurp(man);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_BAD_MANIFEST && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), man);
  KF_CHECK_CONTAINS(kf_last_error(), bad_type);
  /* the loads did not wait for the signatures; all were undone */
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == 41);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "unloads") == 41);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "retained") == retained);
  KF_CHECK(open_cuda(cache, 1, &rt) == KF_ERR_BAD_MANIFEST && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), bad_type);

  /* with a bad entry too, the signature is the reason, as when the
   * signatures were parsed before any entry */
  *(strstr(entry(good, 5), "\"checksum\": \"") + 13) = 'g';
  KF_CHECK(fx_write_file(man, good, strlen(good)) == 0);
  for (int lazy = 0; lazy < 2; lazy++) {
    KF_CHECK(open_cuda(cache, lazy, &rt) == KF_ERR_BAD_MANIFEST && rt == NULL);
    KF_CHECK_CONTAINS(kf_last_error(), bad_type);
    KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  }

  /* no signature for the last kernel's kind: that kernel is named */
  KF_CHECK(fx_write_file(man, plain, strlen(plain)) == 0);
  sign_after_kernels(man, "{\"k\": " K_SIG "}");
  fq_reset(FAKE_CUDA_PATH);
  for (int lazy = 0; lazy < 2; lazy++) {
    KF_CHECK(open_cuda(cache, lazy, &rt) == KF_ERR_BAD_MANIFEST && rt == NULL);
    KF_CHECK_CONTAINS(kf_last_error(), "kernels[40].params: error: missing, and \"signatures\" "
                                       "has no entry for kind 'proj'");
    KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  }
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == fq_stat(FAKE_CUDA_PATH, "unloads"));
  drop_cache(cache);
  free(man);
  free(good);
  free(plain);
}

/* ---- programmatic launches ---------------------------------------------- */

/* The std-style cache with the entry of `id` given launch.programmatic =
 * value (a JSON literal); *man is the manifest's path. */
/* A cache of model "m" for arch from specs, with `insert` put into kernel
 * id's launch object right after its shared_bytes member (the fixture writes
 * `"shared_bytes": <shared>`). Aborts when the fixture is not as expected. */
static char *cache_with_launch_member(const char *arch, const fx_spec *specs, int nspecs,
                                      const char *id, int shared, const char *insert, char **man) {
  char *cache = fx_tmpdir(), *text, *at, *edited, member[64];
  if (fx_cache_add(cache, "m", arch, specs, nspecs, 1) != 0)
    abort();
  *man = fx_manifest_path(cache, "m", arch);
  text = slurp(*man);
  snprintf(member, sizeof member, "\"shared_bytes\": %d", shared);
  at = strstr(text, id);
  at = at ? strstr(at, member) : NULL;
  if (!at)
    abort();
  at += strlen(member);
  if (asprintf(&edited, "%.*s, %s%s", (int)(at - text), text, insert, at) < 0)
    abort();
  if (fx_write_file(*man, edited, strlen(edited)) != 0)
    abort();
  free(text);
  free(edited);
  return cache;
}

static char *programmatic_cache(const char *id, const char *value, char **man) {
  fx_spec specs[] = {{"norm", 4, NORM_PARAMS, 0, NULL, 0, 0},
                     {"attn", 1, "float* o; int rows", 0, NULL, 0, 0}};
  char insert[64];
  snprintf(insert, sizeof insert, "\"programmatic\": %s", value);
  return cache_with_launch_member("sm_90a", specs, 2, id, 0, insert, man);
}

KF_TEST(launch__programmatic_kernels_go_through_culaunchkernelex_the_rest_do_not) {
  char *man, *cache = programmatic_cache("\"m/norm/w4/sm_90a\"", "true", &man), sym[256];
  kf_runtime *rt = NULL;
  kf_kernel *norm = NULL, *attn = NULL;
  uintptr_t x = 0x1000, y = 0x2000;
  float eps = 0.25f;
  int rows = 2, one = 1;
  kf_arg nargs[] = {{&x, 8}, {&y, 8}, {&eps, 4}, {&rows, 4}};
  kf_arg aargs[] = {{&x, 8}, {&one, 4}};
  fq_launch l;
  fresh();
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "norm", 2, &norm) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "attn", 1, &attn) == KF_OK);
  KF_CHECK(kf_kernel_launch(norm, (void *)3, nargs, 4) == KF_OK);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "launches") == 1);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "programmatic_launches") == 1);
  /* the configuration and arguments arrive as with cuLaunchKernel */
  fq_last(FAKE_CUDA_PATH, &l);
  fx_symbol("m/norm/w4/sm_90a", sym, sizeof sym);
  KF_CHECK_STR_EQ(l.name, sym);
  KF_CHECK(l.grid[0] == 4 && l.block[0] == 256 && l.shared == 0 && l.stream == (void *)3);
  KF_CHECK(l.nparams == 4 && l.params[0] == 0x1000 && l.params[1] == 0x2000 && l.params[3] == 2);
  KF_CHECK(kf_kernel_launch(attn, NULL, aargs, 2) == KF_OK);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "launches") == 2);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "programmatic_launches") == 1);
  kf_runtime_close(rt);
  drop_cache(cache);
  free(man);
}

KF_TEST(launch__programmatic_kernels_launch_ordinarily_on_a_driver_without_culaunchkernelex) {
  char *man, *cache = programmatic_cache("\"m/norm/w4/sm_90a\"", "true", &man);
  kf_runtime_options o = options(cache, "m", FAKE_CUDA_OLD_PATH);
  kf_runtime *rt = NULL;
  kf_kernel *norm = NULL;
  uintptr_t x = 0x1000, y = 0x2000;
  float eps = 0.25f;
  int rows = 2;
  kf_arg args[] = {{&x, 8}, {&y, 8}, {&eps, 4}, {&rows, 4}};
  fresh();
  fq_reset(FAKE_CUDA_OLD_PATH);
  KF_CHECK(fq_sym_or_null(FAKE_CUDA_OLD_PATH, "cuLaunchKernelEx") == NULL);
  o.backend = KF_BACKEND_CUDA;
  KF_CHECK(kf_runtime_open(&o, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "norm", 2, &norm) == KF_OK);
  KF_CHECK(kf_kernel_launch(norm, NULL, args, 4) == KF_OK);
  KF_CHECK(fq_stat(FAKE_CUDA_OLD_PATH, "launches") == 1);
  KF_CHECK(fq_stat(FAKE_CUDA_OLD_PATH, "programmatic_launches") == 0);
  kf_runtime_close(rt);
  drop_cache(cache);
  free(man);
}

KF_TEST(open__launch_programmatic_must_be_a_boolean) {
  char *man, *cache = programmatic_cache("\"m/attn/w1/sm_90a\"", "1", &man);
  kf_runtime *rt = NULL;
  fresh();
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_BAD_MANIFEST && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(),
                    "kernels[0].launch.programmatic: error: must be true or false");
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  drop_cache(cache);
  free(man);
}

/* ---- cooperative launches ----------------------------------------------- */

/* A cache of model "m" for arch holding norm w4 (grid 4) and attn w8 (grid
 * 8, 256 threads, 1024 bytes of dynamic shared memory), attn's launch given
 * `extra` (JSON members) after its shared_bytes; *man is the manifest. */
static char *cooperative_cache(const char *arch, const char *extra, char **man) {
  fx_spec specs[] = {{"norm", 4, NORM_PARAMS, 0, NULL, 0, 0},
                     {"attn", 8, "float* o; int rows", 1024, NULL, 0, 0}};
  char id[64];
  snprintf(id, sizeof id, "\"m/attn/w8/%s\"", arch);
  return cache_with_launch_member(arch, specs, 2, id, 1024, extra, man);
}

KF_TEST(launch__cooperative_kernels_that_fit_launch_with_the_cooperative_attribute) {
  char *man, *cache = cooperative_cache("sm_90a", "\"cooperative\": true", &man);
  kf_runtime *rt = NULL;
  kf_kernel *attn = NULL, *norm = NULL;
  uintptr_t x = 0x1000;
  float eps = 1;
  int rows = 3;
  kf_arg aargs[] = {{&x, 8}, {&rows, 4}};
  kf_arg nargs[] = {{&x, 8}, {&x, 8}, {&eps, 4}, {&rows, 4}};
  fq_launch l;
  fresh();
  /* 8 blocks, 4 SMs holding 2 each: exactly resident */
  setenv("FAKE_CUDA_SMS", "4", 1);
  setenv("FAKE_CUDA_BLOCKS_PER_SM", "2", 1);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  /* asked once, at open, for attn's block and dynamic shared memory */
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "occupancy_queries") == 1);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "occupancy_threads") == 256);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "occupancy_shared") == 1024);
  KF_CHECK(kf_kernel_find(rt, "attn", 5, &attn) == KF_OK);
  KF_CHECK(kf_kernel_launch(attn, (void *)2, aargs, 2) == KF_OK);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "cooperative_launches") == 1);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "programmatic_launches") == 0);
  fq_last(FAKE_CUDA_PATH, &l);
  KF_CHECK(l.grid[0] == 8 && l.block[0] == 256 && l.shared == 1024 && l.params[1] == 3);
  /* the other kernels launch as before */
  KF_CHECK(kf_kernel_find(rt, "norm", 4, &norm) == KF_OK);
  KF_CHECK(kf_kernel_launch(norm, NULL, nargs, 4) == KF_OK);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "launches") == 2);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "cooperative_launches") == 1);
  kf_runtime_close(rt);
  drop_cache(cache);
  free(man);
  unsetenv("FAKE_CUDA_SMS");
  unsetenv("FAKE_CUDA_BLOCKS_PER_SM");
}

KF_TEST(launch__persistent_kernels_take_the_blocks_the_device_holds_up_to_their_cap) {
  char *man,
      *cache = cooperative_cache("sm_90a", "\"cooperative\": true, \"persistent\": true", &man);
  kf_runtime *rt = NULL;
  kf_kernel *attn = NULL;
  uintptr_t x = 0x1000;
  int rows = 8;
  kf_arg args[] = {{&x, 8}, {&rows, 4}};
  unsigned grid[3], block[3], shared;
  fq_launch l;
  fresh();
  /* 3 SMs holding 2 each: 6 of the cap's 8 blocks */
  setenv("FAKE_CUDA_SMS", "3", 1);
  setenv("FAKE_CUDA_BLOCKS_PER_SM", "2", 1);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "attn", 8, &attn) == KF_OK);
  KF_CHECK(kf_kernel_launch_config(attn, grid, block, &shared) == KF_OK);
  KF_CHECK(grid[0] == 6 && grid[1] == 1 && grid[2] == 1 && block[0] == 256);
  KF_CHECK(kf_kernel_launch(attn, NULL, args, 2) == KF_OK);
  fq_last(FAKE_CUDA_PATH, &l);
  KF_CHECK(l.grid[0] == 6);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "cooperative_launches") == 1);
  kf_runtime_close(rt);
  /* 8 SMs holding 2 each: the cap */
  setenv("FAKE_CUDA_SMS", "8", 1);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "attn", 8, &attn) == KF_OK);
  KF_CHECK(kf_kernel_launch(attn, NULL, args, 2) == KF_OK);
  fq_last(FAKE_CUDA_PATH, &l);
  KF_CHECK(l.grid[0] == 8);
  kf_runtime_close(rt);
  /* no block fits an SM: refused, not launched with none */
  setenv("FAKE_CUDA_BLOCKS_PER_SM", "0", 1);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_CORESIDENCY && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "0 blocks per SM");
  drop_cache(cache);
  free(man);
  unsetenv("FAKE_CUDA_SMS");
  unsetenv("FAKE_CUDA_BLOCKS_PER_SM");
}

KF_TEST(open__refuses_a_persistent_flag_that_is_not_a_boolean) {
  char *man, *cache = cooperative_cache("sm_90a", "\"cooperative\": true, \"persistent\": 1", &man);
  kf_runtime *rt = NULL;
  fresh();
  KF_CHECK(open_cuda(cache, 0, &rt) != KF_OK && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "persistent");
  KF_CHECK_CONTAINS(kf_last_error(), "must be true or false");
  drop_cache(cache);
  free(man);
}

KF_TEST(launch__cooperative_and_programmatic_kernels_carry_both_attributes) {
  char *man,
      *cache = cooperative_cache("sm_90a", "\"programmatic\": true, \"cooperative\": true", &man);
  kf_runtime *rt = NULL;
  kf_kernel *attn = NULL;
  uintptr_t x = 0x1000;
  int rows = 8;
  kf_arg args[] = {{&x, 8}, {&rows, 4}};
  fresh();
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "attn", 8, &attn) == KF_OK);
  KF_CHECK(kf_kernel_launch(attn, NULL, args, 2) == KF_OK);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "cooperative_launches") == 1);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "programmatic_launches") == 1);
  kf_runtime_close(rt);
  drop_cache(cache);
  free(man);
}

KF_TEST(open__refuses_a_cooperative_kernel_whose_grid_cannot_be_resident) {
  char *man, *cache = cooperative_cache("sm_90a", "\"cooperative\": true", &man);
  kf_runtime *rt = NULL;
  fresh();
  /* 8 blocks, 7 SMs holding 1 each */
  setenv("FAKE_CUDA_SMS", "7", 1);
  setenv("FAKE_CUDA_BLOCKS_PER_SM", "1", 1);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_CORESIDENCY && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "kernel m/attn/w8/sm_90a: cooperative, its grid of 8 blocks "
                                     "cannot be resident at once: 1 blocks per SM");
  KF_CHECK_CONTAINS(kf_last_error(), "on 7 SMs hold 7");
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "launches") == 0);
  /* one SM more and it fits */
  setenv("FAKE_CUDA_SMS", "8", 1);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK && rt);
  kf_runtime_close(rt);
  drop_cache(cache);
  free(man);
  unsetenv("FAKE_CUDA_SMS");
  unsetenv("FAKE_CUDA_BLOCKS_PER_SM");
}

KF_TEST(find__lazily_refuses_a_cooperative_kernel_that_cannot_be_resident) {
  char *man, *cache = cooperative_cache("sm_90a", "\"cooperative\": true", &man);
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  char reason[512];
  fresh();
  setenv("FAKE_CUDA_SMS", "3", 1);
  setenv("FAKE_CUDA_BLOCKS_PER_SM", "2", 1);
  KF_CHECK(open_cuda(cache, 1, &rt) == KF_OK);
  KF_CHECK(kf_kernel_find(rt, "norm", 4, &k) == KF_OK && k);
  KF_CHECK(kf_kernel_find(rt, "attn", 8, &k) == KF_ERR_CORESIDENCY && k == NULL);
  KF_CHECK(kf_runtime_error(rt, reason, sizeof reason) == KF_ERR_CORESIDENCY);
  KF_CHECK_CONTAINS(reason, "kernel m/attn/w8/sm_90a: cooperative, its grid of 8 blocks cannot be "
                            "resident at once: 2 blocks per SM");
  KF_CHECK_CONTAINS(reason, "on 3 SMs hold 6");
  /* the refusal sticks and unloads what it loaded: norm's module only */
  KF_CHECK(kf_kernel_find(rt, "attn", 8, &k) == KF_ERR_CORESIDENCY);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 1);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "occupancy_queries") == 1);
  kf_runtime_close(rt);
  drop_cache(cache);
  free(man);
  unsetenv("FAKE_CUDA_SMS");
  unsetenv("FAKE_CUDA_BLOCKS_PER_SM");
}

KF_TEST(open__refuses_cooperative_kernels_on_a_driver_without_the_occupancy_query) {
  char *man, *cache = cooperative_cache("sm_90a", "\"cooperative\": true", &man);
  kf_runtime_options o = options(cache, "m", FAKE_CUDA_NOOCC_PATH);
  kf_runtime *rt = NULL;
  fresh();
  fq_reset(FAKE_CUDA_NOOCC_PATH);
  KF_CHECK(fq_sym_or_null(FAKE_CUDA_NOOCC_PATH, "cuOccupancyMaxActiveBlocksPerMultiprocessor") ==
           NULL);
  o.backend = KF_BACKEND_CUDA;
  KF_CHECK(kf_runtime_open(&o, &rt) == KF_ERR_CORESIDENCY && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "kernel m/attn/w8/sm_90a: cooperative, cannot check "
                                     "co-residency: the CUDA driver");
  KF_CHECK_CONTAINS(kf_last_error(), "lacks cuOccupancyMaxActiveBlocksPerMultiprocessor");
  KF_CHECK(fq_stat(FAKE_CUDA_NOOCC_PATH, "live_modules") == 0);
  /* nor without cuLaunchKernelEx, which carries the cooperative attribute */
  o.driver_path = FAKE_CUDA_OLD_PATH;
  fq_reset(FAKE_CUDA_OLD_PATH);
  KF_CHECK(kf_runtime_open(&o, &rt) == KF_ERR_CORESIDENCY && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "lacks cuLaunchKernelEx");
  KF_CHECK(fq_stat(FAKE_CUDA_OLD_PATH, "live_modules") == 0);
  drop_cache(cache);
  free(man);
}

KF_TEST(open__launch_cooperative_must_be_a_boolean) {
  char *man, *cache = cooperative_cache("sm_90a", "\"cooperative\": \"yes\"", &man);
  kf_runtime *rt = NULL;
  fresh();
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_BAD_MANIFEST && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "launch.cooperative: error: must be true or false");
  drop_cache(cache);
  free(man);
}

KF_TEST(hip__cooperative_kernels_are_checked_against_the_cus_and_launched_cooperatively) {
  char *man, *cache = cooperative_cache("gfx942", "\"cooperative\": true", &man);
  kf_runtime *rt = NULL;
  kf_kernel *k = NULL;
  uintptr_t x = 0x1000;
  int rows = 1;
  kf_arg args[] = {{&x, 8}, {&rows, 4}};
  setenv("FAKE_HIP_ARCH", "gfx942:sramecc+:xnack-", 1);
  fq_reset(FAKE_HIP_PATH);
  setenv("FAKE_HIP_CUS", "4", 1);
  setenv("FAKE_HIP_BLOCKS_PER_CU", "2", 1);
  KF_CHECK(open_hip(cache, &rt) == KF_OK);
  KF_CHECK(fq_stat(FAKE_HIP_PATH, "occupancy_threads") == 256);
  KF_CHECK(fq_stat(FAKE_HIP_PATH, "occupancy_shared") == 1024);
  KF_CHECK(kf_kernel_find(rt, "attn", 1, &k) == KF_OK);
  KF_CHECK(kf_kernel_launch(k, NULL, args, 2) == KF_OK);
  KF_CHECK(fq_stat(FAKE_HIP_PATH, "cooperative_launches") == 1);
  KF_CHECK(fq_stat(FAKE_HIP_PATH, "launches") == 1);
  kf_runtime_close(rt);
  /* the CU count comes from the device's properties: 3 CUs hold 6 */
  setenv("FAKE_HIP_CUS", "3", 1);
  KF_CHECK(open_hip(cache, &rt) == KF_ERR_CORESIDENCY && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "kernel m/attn/w8/gfx942: cooperative, its grid of 8 blocks "
                                     "cannot be resident at once: 2 blocks per SM");
  KF_CHECK_CONTAINS(kf_last_error(), "on 3 SMs hold 6");
  KF_CHECK(fq_stat(FAKE_HIP_PATH, "live_modules") == 0);
  unsetenv("FAKE_HIP_CUS");
  unsetenv("FAKE_HIP_BLOCKS_PER_CU");
  drop_cache(cache);
  free(man);
}

/* ---- buffers ------------------------------------------------------------ */

/* A cache of model "m" (sm_90a) holding norm w4 and attn w8 ("float* o;
 * const float* x; float* ws; int* sem; int rows"), attn's entry given
 * `buffers` (the JSON value of its "buffers" member); *man is the manifest. */
static char *buffers_cache(const char *buffers, char **man) {
  fx_spec specs[] = {
      {"norm", 4, NORM_PARAMS, 0, NULL, 0, 0},
      {"attn", 8, "float* o; const float* x; float* ws; int* sem; int rows", 0, NULL, 0, 0}};
  char *cache = fx_tmpdir(), *text, *at, *edited;
  if (fx_cache_add(cache, "m", "sm_90a", specs, 2, 1) != 0)
    abort();
  *man = fx_manifest_path(cache, "m", "sm_90a");
  text = slurp(*man);
  at = strstr(text, "\"m/attn/w8/sm_90a\"");
  at = at ? strchr(at, ',') : NULL;
  if (!at)
    abort();
  at += 1;
  if (asprintf(&edited, "%.*s \"buffers\": %s,%s", (int)(at - text), text, buffers, at) < 0)
    abort();
  if (fx_write_file(*man, edited, strlen(edited)) != 0)
    abort();
  free(text);
  free(edited);
  return cache;
}

KF_TEST(buffers__are_reported_with_their_parameter_size_and_init) {
  char *man, *cache = buffers_cache("[{\"arg\": \"ws\", \"bytes\": 266240, \"init\": \"none\"}, "
                                    "{\"arg\": \"sem\", \"bytes\": 32, \"init\": \"zero_once\"}]",
                                    &man);
  kf_runtime *rt = NULL;
  kf_kernel *attn = NULL, *norm = NULL;
  kf_buffer b;
  fresh();
  for (int lazy = 0; lazy < 2; lazy++) {
    KF_CHECK(open_cuda(cache, lazy, &rt) == KF_OK);
    KF_CHECK(kf_kernel_find(rt, "attn", 5, &attn) == KF_OK);
    KF_CHECK(kf_kernel_buffer_count(attn) == 2);
    KF_CHECK(kf_kernel_buffer(attn, 0, &b) == KF_OK);
    KF_CHECK_STR_EQ(b.arg, "ws");
    KF_CHECK(b.param == 2 && b.bytes == 266240 && b.zero_once == 0);
    KF_CHECK(kf_kernel_buffer(attn, 1, &b) == KF_OK);
    KF_CHECK_STR_EQ(b.arg, "sem");
    KF_CHECK(b.param == 3 && b.bytes == 32 && b.zero_once == 1);
    KF_CHECK(kf_kernel_buffer(attn, 2, &b) == KF_ERR_INVALID_ARGUMENT);
    KF_CHECK_CONTAINS(kf_last_error(), "no buffer 2 (2 buffers)");
    KF_CHECK(kf_kernel_buffer(attn, -1, &b) == KF_ERR_INVALID_ARGUMENT);
    KF_CHECK(kf_kernel_buffer(attn, 0, NULL) == KF_ERR_INVALID_ARGUMENT);
    /* a kernel without buffers has none */
    KF_CHECK(kf_kernel_find(rt, "norm", 4, &norm) == KF_OK);
    KF_CHECK(kf_kernel_buffer_count(norm) == 0);
    KF_CHECK(kf_kernel_buffer(norm, 0, &b) == KF_ERR_INVALID_ARGUMENT);
    kf_runtime_close(rt);
  }
  KF_CHECK(kf_kernel_buffer_count(NULL) == 0);
  drop_cache(cache);
  free(man);
}

KF_TEST(buffers__that_are_malformed_or_name_no_writable_pointer_refuse_the_manifest) {
  static const struct {
    const char *buffers, *reason;
  } cases[] = {
      {"{}", "kernels[0].buffers: error: must be an array"},
      {"[{\"arg\": \"nope\", \"bytes\": 4, \"init\": \"none\"}]",
       "kernels[0].buffers[0].arg: error: 'nope' is not a parameter of the kernel"},
      {"[{\"arg\": \"x\", \"bytes\": 4, \"init\": \"none\"}]",
       "kernels[0].buffers[0].arg: error: 'x' is 'const float*', not a writable pointer"},
      {"[{\"arg\": \"rows\", \"bytes\": 4, \"init\": \"none\"}]",
       "kernels[0].buffers[0].arg: error: 'rows' is 'int', not a writable pointer"},
      {"[{\"arg\": \"ws\", \"bytes\": 0, \"init\": \"none\"}]", "kernels[0].buffers[0].bytes"},
      {"[{\"arg\": \"ws\", \"bytes\": 1.5, \"init\": \"none\"}]", "kernels[0].buffers[0].bytes"},
      {"[{\"arg\": \"ws\", \"bytes\": 4}]", "kernels[0].buffers[0].init: error: missing"},
      {"[{\"arg\": \"ws\", \"bytes\": 4, \"init\": \"zero\"}]",
       "kernels[0].buffers[0].init: error: 'zero' is neither"},
      {"[{\"arg\": \"ws\", \"bytes\": 4, \"init\": \"none\"}, "
       "{\"arg\": \"ws\", \"bytes\": 8, \"init\": \"none\"}]",
       "kernels[0].buffers[1].arg: error: 'ws' repeats buffers[0]"},
      {"[7]", "kernels[0].buffers[0].arg: error: the element must be an object"},
  };
  fresh();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *man, *cache = buffers_cache(cases[i].buffers, &man);
    for (int lazy = 0; lazy < 2; lazy++) {
      kf_runtime *rt = NULL;
      KF_CHECK(open_cuda(cache, lazy, &rt) == KF_ERR_BAD_MANIFEST && rt == NULL);
      KF_CHECK_CONTAINS(kf_last_error(), cases[i].reason);
    }
    KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
    drop_cache(cache);
    free(man);
  }
}

/* ---- trust (docs/contracts.md, "Trust") ---- */

/* The entry directory of kernel norm/w4, malloc'd. */
static char *norm4_entry_dir(const char *cache) {
  char *obj = fx_object_path(cache, "m", "sm_90a", "norm", 4);
  *strrchr(obj, '/') = '\0';
  return obj;
}

KF_TEST(trust__refuses_an_entry_directory_linked_outside_the_cache) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1), *outside = fx_tmpdir();
  char *dir = norm4_entry_dir(cache), moved[4096];
  kf_runtime *rt = (kf_runtime *)1;
  fresh();
  snprintf(moved, sizeof moved, "%s/entry", outside);
  KF_CHECK(rename(dir, moved) == 0 && symlink(moved, dir) == 0);
  /* the object there is intact: only the link is wrong */
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_UNTRUSTED && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "kernel m/norm/w4/sm_90a");
  KF_CHECK_CONTAINS(kf_last_error(), dir);
  KF_CHECK_CONTAINS(kf_last_error(), "symbolic link");
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  drop_cache(cache);
  drop_cache(outside);
  free(dir);
}

KF_TEST(trust__a_fifo_object_is_refused_without_blocking) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  char *obj = fx_object_path(cache, "m", "sm_90a", "proj", 4);
  kf_runtime *rt = (kf_runtime *)1;
  fresh();
  KF_CHECK(unlink(obj) == 0 && mkfifo(obj, 0644) == 0);
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_IO && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "not a regular file");
  KF_CHECK_CONTAINS(kf_last_error(), obj);
  drop_cache(cache);
  free(obj);
}

KF_TEST(trust__refuses_group_or_world_writable_parts_unless_lax) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  char *man = fx_manifest_path(cache, "m", "sm_90a"), *dir = strdup(man);
  char *obj = fx_object_path(cache, "m", "sm_90a", "proj", 4);
  kf_runtime *rt = (kf_runtime *)1;
  kf_runtime_options o = options(cache, "m", FAKE_CUDA_PATH);
  fresh();
  *strrchr(dir, '/') = '\0'; /* manifests/m */
  unsetenv("KFORGE_LAX_PERMISSIONS");
  struct {
    const char *path;
    mode_t bad, good;
    const char *why;
  } parts[] = {{cache, 0770, 0700, "writable by group"},
               {man, 0646, 0644, "writable by others"},
               {dir, 0775, 0755, "writable by group"},
               {obj, 0664, 0644, "writable by group"}};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    char want[4200];
    KF_CHECK(chmod(parts[i].path, parts[i].bad) == 0);
    KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_UNTRUSTED && rt == NULL);
    snprintf(want, sizeof want, "%s: error: %s", parts[i].path, parts[i].why);
    KF_CHECK_CONTAINS(kf_last_error(), want);
    /* the opt-out: the option, and the environment */
    o.lax_permissions = 1;
    KF_CHECK(kf_runtime_open(&o, &rt) == KF_OK);
    kf_runtime_close(rt);
    o.lax_permissions = 0;
    setenv("KFORGE_LAX_PERMISSIONS", "1", 1);
    KF_CHECK(kf_runtime_open(&o, &rt) == KF_OK);
    kf_runtime_close(rt);
    unsetenv("KFORGE_LAX_PERMISSIONS");
    KF_CHECK(chmod(parts[i].path, parts[i].good) == 0);
  }
  KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
  kf_runtime_close(rt);
  drop_cache(cache);
  free(dir);
  free(man);
  free(obj);
}

KF_TEST(trust__refuses_an_object_owned_by_another_user) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1);
  char *obj = fx_object_path(cache, "m", "sm_90a", "norm", 2);
  kf_runtime *rt = (kf_runtime *)1;
  fresh();
  if (geteuid() == 0) { /* only root can give a file away */
    KF_CHECK(chown(obj, 65534, 65534) == 0);
    KF_CHECK(open_cuda(cache, 0, &rt) == KF_ERR_UNTRUSTED && rt == NULL);
    KF_CHECK_CONTAINS(kf_last_error(), "owned by uid 65534");
    KF_CHECK_CONTAINS(kf_last_error(), obj);
  } else { /* a file of this user is trusted: the rule's other half */
    KF_CHECK(open_cuda(cache, 0, &rt) == KF_OK);
    kf_runtime_close(rt);
  }
  drop_cache(cache);
  free(obj);
}

KF_TEST(trust__a_linked_manifest_directory_is_refused) {
  const char *arches[] = {"sm_90a"};
  char *cache = std_cache(arches, 1), *outside = fx_tmpdir();
  char *man = fx_manifest_path(cache, "m", "sm_90a"), moved[4096];
  kf_runtime *rt = (kf_runtime *)1;
  fresh();
  *strrchr(man, '/') = '\0'; /* manifests/m */
  snprintf(moved, sizeof moved, "%s/m", outside);
  KF_CHECK(rename(man, moved) == 0 && symlink(moved, man) == 0);
  KF_CHECK(open_cuda(cache, 1, &rt) == KF_ERR_UNTRUSTED && rt == NULL);
  KF_CHECK_CONTAINS(kf_last_error(), "symbolic link");
  drop_cache(cache);
  drop_cache(outside);
  free(man);
}

KF_TEST_MAIN()
