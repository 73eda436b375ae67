/* fuzz/shared.c: another machine's shared include closure (the body of a
 * "closure-" record on a remote, gen/digest.c), taken or not against the
 * file system as a build does. The harness's temporary directory is the
 * setup's one include root, "@templates", and holds one header, h.cuh. */
#include "fuzz_common.h"

#include "digest.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_init();
  fz_write_header();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kf_digest_shared_check(fz_dir, (const char *)data, size);
  return 0;
}
