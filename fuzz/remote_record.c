/* fuzz/remote_record.c: what a remote serves as a record, read by the
 * generator (gen/remote_entry.c: an entry's record and a manifest's, with
 * and without trusted keys) and, as <arch>.json.sig beside a manifest, by
 * the runtime when KFORGE_TRUSTED_KEYS is set (runtime/rt_sign.c). */
#include "fuzz_common.h"

#include "remote_entry.h"
#include "rt_internal.h"

#define KEY "0123456789abcdef0123456789abcdef"
#define TRUSTED "377e4bd4f903b8360625f76acd738d7d6f4e95210717b6edfb414379f73d380e"
#define MANIFEST "manifests/m/sm_90a.json"

static kf_tier plain, trusting;
static rt_root root;
static char *sig_path;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_init();
  if (kf_sign_init() != 0)
    abort();
  kf_strv_push(&trusting.trust.keys, TRUSTED);
  setenv("KFORGE_TRUSTED_KEYS", TRUSTED, 1);
  char *dir = kf_xasprintf("%s/v1/manifests/m", fz_path("cache"));
  if (kf_mkdir_p(dir) != 0)
    abort();
  free(dir);
  char *man = kf_xasprintf("%s/v1/%s", fz_path("cache"), MANIFEST);
  fz_write(man, "{}", 2);
  sig_path = kf_xasprintf("%s.sig", man);
  free(man);
  rt_err err = {0};
  if (rt_root_open(&root, fz_path("cache"), 1, &err) != KF_OK)
    abort();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  kf_remote_record rec;
  free(kf_remote_record_check(&plain, KEY, text, size, &rec));
  free(kf_remote_record_check(&trusting, KEY, text, size, &rec));
  char sha[65];
  long long n = 0;
  free(kf_remote_manifest_record_check(&plain, "m", "sm_90a", text, size, sha, &n));
  free(kf_remote_manifest_record_check(&trusting, "m", "sm_90a", text, size, sha, &n));
  fz_write(sig_path, data, size);
  rt_err err = {0};
  rt_manifest_check_signature(&root, MANIFEST, "{}", 2, &err);
  return 0;
}
