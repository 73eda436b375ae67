/* fuzz/code_object.c: an AMD code object as `kforge build` reads its
 * resource figures (gen/amdgpu.c): the input is taken as the object (a
 * clang offload bundle or an ELF) for the arch's ELF, and as llvm-readelf's
 * rendering of its metadata note for the kernel's figures. */
#include "fuzz_common.h"

#include "amdgpu.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t off, n;
  if (kf_amdgpu_elf((const char *)data, size, "gfx90a:xnack-", &off, &n) == 0 &&
      (off > size || n > size - off))
    abort(); /* the ELF must lie inside the input */
  char *text = malloc(size + 1);
  if (!text)
    abort();
  memcpy(text, data, size);
  text[size] = '\0';
  kf_meta_resources r = KF_META_RESOURCES_NONE;
  if (kf_amdgpu_note_figures(text, "kf_a", &r) == 0 && (r.registers < 0 || r.sgprs < 0))
    abort(); /* figures read must be figures */
  free(text);
  return 0;
}
