/* fuzz/deps.c: a dependency record (<cache>/v1/deps/<hh>/<hash>.json, the
 * include closure a no-op build trusts instead of re-parsing; gen/digest.c)
 * read and checked against the file system as a build does. "@T@" in the
 * input stands for the harness's temporary directory, which holds one
 * header, h.cuh, so that records naming it can hold or go stale. */
#include "fuzz_common.h"

#include "digest.h"

#define SOURCE_RAW "00112233445566778899aabbccddeeff"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_init();
  fz_write_header();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t dlen = strlen(fz_dir);
  char *text = malloc(size * (dlen > 3 ? dlen : 3) / 3 + 1);
  if (!text)
    abort();
  size_t n = 0;
  for (size_t i = 0; i < size;) {
    if (i + 3 <= size && !memcmp(data + i, "@T@", 3)) {
      memcpy(text + n, fz_dir, dlen);
      n += dlen;
      i += 3;
    } else {
      text[n++] = (char)data[i++];
    }
  }
  const char *path = fz_path("record.json");
  fz_write(path, text, n);
  free(text);
  kf_digest_deps_check(path, SOURCE_RAW);
  unlink(path);
  return 0;
}
