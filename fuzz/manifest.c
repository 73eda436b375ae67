/* fuzz/manifest.c: a manifest (<cache>/v1/manifests/<model>/<arch>.json),
 * read three ways: the runtime's whole parse of a text
 * (rt_manifest_parse), the runtime's streamed steps from a file in the order
 * an eager open takes them (header, entries, the signatures part-way through
 * at a point the input picks, the rest), and the generator's reader
 * (gen/manifest.c) that `ls`, `verify` and `explain` use. */
#include "fuzz_common.h"

#include "manifest.h"
#include "rt_internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_init();
  return 0;
}

static void streamed(const char *path, size_t size) {
  rt_manifest m;
  rt_err err = {0};
  if (rt_manifest_open(path, &m, &err) == KF_OK) {
    int sigs_at = m.nkernels ? (int)(size % (size_t)(m.nkernels + 1)) : 0;
    kf_status st = KF_OK;
    for (int i = 0; i < m.nkernels && st == KF_OK; i++) {
      if (i == sigs_at)
        st = rt_manifest_signatures(&m, &err);
      if (st == KF_OK)
        st = rt_manifest_kernel(&m, i, &err);
    }
    if (st == KF_OK)
      rt_manifest_finish(&m, &err);
  }
  rt_manifest_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rt_manifest whole;
  rt_err err = {0};
  rt_manifest_parse("m.json", (const char *)data, size, &whole, &err);
  rt_manifest_free(&whole);

  const char *path = fz_path("m.json");
  fz_write(path, data, size);
  streamed(path, size);

  kf_manifest gm;
  char *why = NULL;
  kf_manifest_load(path, &gm, &why);
  free(why);
  kf_manifest_free(&gm);
  unlink(path);
  return 0;
}
