/* Tests of gen/manifest.c: the manifest's bytes as the runtime and every
 * reader expect them (member order, optional launch members written only
 * when they apply), a rewrite of the same manifest that changes nothing, and
 * a reader that keeps incomplete kernel records for `verify` to name. */
#include "gen_fixture.h"

#include "manifest.h"

#include <sys/stat.h>

static const char *const KEY = "0123456789abcdef0123456789abcdef";

static void sample(kf_manifest *m, int cluster) {
  kf_manifest_init(m, "fx", "sm_90a", "cuda");
  kf_manifest_signature *s = kf_manifest_add_signature(m, "add");
  kf_manifest_add_param(s, "x", "const float*", 8);
  kf_manifest_add_param(s, "rows", "int", 4);
  kf_manifest_kernel *k =
      kf_manifest_add_kernel(m, "fx/add/w2/sm_90a", "add", 2, KEY, "object.cubin",
                             "ffeeddccbbaa99887766554433221100", 4096, "kf_fx_add_w2");
  int64_t grid[3] = {4, 1, 1}, block[3] = {128, 1, 1};
  memcpy(k->launch.grid, grid, sizeof grid);
  memcpy(k->launch.block, block, sizeof block);
  k->launch.shared_bytes = 256;
  if (cluster) {
    k->launch.cluster[0] = 2;
    k->launch.programmatic = 1;
    k->launch.max_blocks_per_sm = 1;
  }
}

static char *write_sample(int cluster) {
  kf_manifest m;
  sample(&m, cluster);
  char *path = fx_path(fx_tmpdir(), "manifests/fx/sm_90a.json");
  if (kf_manifest_write(path, &m, NULL) != 0)
    fx_die("write %s: %s", path, strerror(errno));
  kf_manifest_free(&m);
  return path;
}

KF_TEST(manifest__is_written_in_its_documented_shape) {
  char *path = write_sample(0);
  char *text = fx_read(path);
  KF_CHECK_STR_EQ(text, "{\n"
                        "\t\"format\":\t1,\n"
                        "\t\"generator\":\t\"kforge " KFORGE_VERSION "\",\n"
                        "\t\"model\":\t\"fx\",\n"
                        "\t\"arch\":\t\"sm_90a\",\n"
                        "\t\"backend\":\t\"cuda\",\n"
                        "\t\"signatures\":\t{\n"
                        "\t\t\"add\":\t{\n"
                        "\t\t\t\"params\":\t[{\n"
                        "\t\t\t\t\t\"name\":\t\"x\",\n"
                        "\t\t\t\t\t\"type\":\t\"const float*\",\n"
                        "\t\t\t\t\t\"size\":\t8\n"
                        "\t\t\t\t}, {\n"
                        "\t\t\t\t\t\"name\":\t\"rows\",\n"
                        "\t\t\t\t\t\"type\":\t\"int\",\n"
                        "\t\t\t\t\t\"size\":\t4\n"
                        "\t\t\t\t}]\n"
                        "\t\t}\n"
                        "\t},\n"
                        "\t\"kernels\":\t[{\n"
                        "\t\t\t\"id\":\t\"fx/add/w2/sm_90a\",\n"
                        "\t\t\t\"kind\":\t\"add\",\n"
                        "\t\t\t\"width\":\t2,\n"
                        "\t\t\t\"key\":\t\"0123456789abcdef0123456789abcdef\",\n"
                        "\t\t\t\"object\":\t\"objects/01/0123456789abcdef0123456789abcdef/"
                        "object.cubin\",\n"
                        "\t\t\t\"meta\":\t\"objects/01/0123456789abcdef0123456789abcdef/"
                        "meta.json\",\n"
                        "\t\t\t\"checksum\":\t\"ffeeddccbbaa99887766554433221100\",\n"
                        "\t\t\t\"size\":\t4096,\n"
                        "\t\t\t\"symbol\":\t\"kf_fx_add_w2\",\n"
                        "\t\t\t\"launch\":\t{\n"
                        "\t\t\t\t\"grid\":\t[4, 1, 1],\n"
                        "\t\t\t\t\"block\":\t[128, 1, 1],\n"
                        "\t\t\t\t\"shared_bytes\":\t256\n"
                        "\t\t\t}\n"
                        "\t\t}]\n"
                        "}");
  free(text);
  free(path);
}

KF_TEST(manifest__optional_launch_members_are_written_when_they_apply) {
  char *path = write_sample(1);
  char *text = fx_read(path);
  KF_CHECK_CONTAINS(text, "\t\t\t\t\"shared_bytes\":\t256,\n"
                          "\t\t\t\t\"programmatic\":\ttrue,\n"
                          "\t\t\t\t\"max_blocks_per_sm\":\t1,\n"
                          "\t\t\t\t\"cluster\":\t[2, 1, 1]\n");
  free(text);
  free(path);
}

KF_TEST(manifest__a_kernels_page_size_follows_its_width_and_reads_back) {
  kf_manifest m;
  sample(&m, 0);
  m.kernels[0].page_size = 16;
  char *text = kf_manifest_text(&m);
  KF_CHECK_CONTAINS(text, "\t\t\t\"width\":\t2,\n"
                          "\t\t\t\"page_size\":\t16,\n"
                          "\t\t\t\"key\":");
  kf_manifest back;
  char *err = NULL;
  KF_CHECK(kf_manifest_parse(text, strlen(text), &back, &err) == 0 && back.nkernels == 1);
  if (back.nkernels == 1)
    KF_CHECK(back.kernels[0].page_size == 16);
  kf_manifest_free(&back);
  free(err);
  free(text);
  kf_manifest_free(&m);
  /* 0 (the kernel takes no page size): no member */
  sample(&m, 0);
  text = kf_manifest_text(&m);
  KF_CHECK(strstr(text, "page_size") == NULL);
  free(text);
  kf_manifest_free(&m);
}

KF_TEST(manifest__the_default_page_size_of_several_is_in_the_header_and_reads_back) {
  kf_manifest m;
  sample(&m, 0);
  m.page_size = 16;
  m.kernels[0].page_size = 1;
  char *text = kf_manifest_text(&m);
  KF_CHECK_CONTAINS(text, "\"backend\":\t\"cuda\",\n");
  KF_CHECK_CONTAINS(text, "\t\"page_size\":\t16,\n");
  KF_CHECK(strstr(text, "\t\"page_size\":\t16") < strstr(text, "\"kernels\""));
  kf_manifest back;
  char *err = NULL;
  KF_CHECK(kf_manifest_parse(text, strlen(text), &back, &err) == 0);
  KF_CHECK(back.page_size == 16 && back.nkernels == 1 && back.kernels[0].page_size == 1);
  kf_manifest_free(&back);
  free(err);
  free(text);
  kf_manifest_free(&m);
}

KF_TEST(manifest__layer_types_are_written_after_the_header_when_there_are_some) {
  kf_manifest m;
  sample(&m, 0);
  kf_strv kinds = {0};
  kf_strv_push(&kinds, "add");
  kf_strv_push(&kinds, "mul");
  kf_manifest_add_layer_type(&m, "dense", 1, &kinds, NULL);
  kf_manifest_add_layer_type(&m, "moe", 45, &kinds, "moe_layer");
  kf_strv_free(&kinds);
  char *text = kf_manifest_text(&m);
  KF_CHECK_CONTAINS(text, "\t\"backend\":\t\"cuda\",\n"
                          "\t\"layer_types\":\t[{\n"
                          "\t\t\t\"name\":\t\"dense\",\n"
                          "\t\t\t\"count\":\t1,\n"
                          "\t\t\t\"kinds\":\t[\"add\", \"mul\"]\n"
                          "\t\t}, {\n"
                          "\t\t\t\"name\":\t\"moe\",\n"
                          "\t\t\t\"count\":\t45,\n"
                          "\t\t\t\"kinds\":\t[\"add\", \"mul\"],\n"
                          "\t\t\t\"layer\":\t\"moe_layer\"\n");
  free(text);
  kf_manifest_free(&m);
  /* none: no member (the sample's documented shape above) */
  sample(&m, 0);
  text = kf_manifest_text(&m);
  KF_CHECK(strstr(text, "layer_types") == NULL);
  free(text);
  kf_manifest_free(&m);
}

KF_TEST(manifest__rewriting_the_same_manifest_leaves_the_file_alone) {
  char *path = write_sample(0);
  struct stat before, after;
  KF_CHECK(stat(path, &before) == 0);
  kf_manifest m;
  sample(&m, 0);
  KF_CHECK(truncate(path, before.st_size) == 0); /* same bytes, known mtime */
  struct timespec old[2] = {{1, 0}, {1, 0}};
  KF_CHECK(utimensat(AT_FDCWD, path, old, 0) == 0);
  KF_CHECK(kf_manifest_write(path, &m, NULL) == 0);
  KF_CHECK(stat(path, &after) == 0);
  KF_CHECK(after.st_mtime == 1);
  kf_manifest_free(&m);
  free(path);
}

KF_TEST(manifest__load_reads_back_what_was_written) {
  char *path = write_sample(1);
  kf_manifest m;
  char *err = NULL;
  KF_CHECK(kf_manifest_load(path, &m, &err) == 0);
  KF_CHECK(err == NULL);
  KF_CHECK_STR_EQ(m.model, "fx");
  KF_CHECK_STR_EQ(m.backend, "cuda");
  KF_CHECK(m.nsignatures == 1 && m.signatures[0].nparams == 2);
  KF_CHECK_STR_EQ(m.signatures[0].params[0].type, "const float*");
  KF_CHECK(m.nkernels == 1);
  const kf_manifest_kernel *k = &m.kernels[0];
  KF_CHECK_STR_EQ(k->id, "fx/add/w2/sm_90a");
  KF_CHECK_STR_EQ(k->key, KEY);
  KF_CHECK_STR_EQ(k->checksum, "ffeeddccbbaa99887766554433221100");
  KF_CHECK(k->width == 2 && k->size == 4096);
  KF_CHECK(k->launch.has_dims && k->launch.grid[0] == 4 && k->launch.block[0] == 128);
  KF_CHECK(k->launch.cluster[0] == 2 && k->launch.cluster[1] == 1);
  KF_CHECK(k->launch.programmatic && !k->launch.one_wave);
  kf_manifest_free(&m);
  free(path);
}

KF_TEST(manifest__load_keeps_incomplete_kernels_with_their_gaps) {
  char *path = fx_write(fx_tmpdir(), "m.json",
                        "{\"kernels\": [{\"id\": \"a/b/w1/sm_90a\", \"key\": 7},"
                        " {\"key\": \"k\", \"launch\": {\"grid\": [1, 2]}}]}");
  kf_manifest m;
  char *err = NULL;
  KF_CHECK(kf_manifest_load(path, &m, &err) == 0);
  KF_CHECK(m.nkernels == 2);
  KF_CHECK_STR_EQ(m.kernels[0].id, "a/b/w1/sm_90a");
  KF_CHECK(m.kernels[0].key == NULL); /* not a string */
  KF_CHECK(m.kernels[1].id == NULL && m.kernels[1].checksum == NULL);
  KF_CHECK(!m.kernels[1].launch.has_dims);
  kf_manifest_free(&m);
  free(path);
}

KF_TEST(manifest__load_refuses_what_is_not_a_manifest) {
  const char *dir = fx_tmpdir();
  char *bad = fx_write(dir, "bad.json", "{\"kernels\": {}}");
  char *text = fx_write(dir, "text.json", "not json");
  char *gone = fx_path(dir, "gone.json");
  kf_manifest m;
  char *err = NULL;
  KF_CHECK(kf_manifest_load(bad, &m, &err) == -1);
  KF_CHECK_STR_EQ(err, "not a valid manifest");
  KF_CHECK(m.nkernels == 0);
  kf_manifest_free(&m);
  free(err);
  KF_CHECK(kf_manifest_load(text, &m, &err) == -1);
  KF_CHECK_STR_EQ(err, "not a valid manifest");
  kf_manifest_free(&m);
  free(err);
  KF_CHECK(kf_manifest_load(gone, &m, &err) == -1);
  KF_CHECK_CONTAINS(err, "cannot read ");
  KF_CHECK_CONTAINS(err, "No such file");
  kf_manifest_free(&m);
  free(err);
  free(bad);
  free(text);
  free(gone);
}

KF_TEST_MAIN()
