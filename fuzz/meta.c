/* fuzz/meta.c: an entry's meta.json, read by the generator
 * (kf_entry_meta_load for `explain` and `ls`, kf_cache_check_entry for
 * `build` and `verify`, which also reads the object it names) and by the
 * runtime (rt_meta_load, for kf_kernel_resources). */
#include "fuzz_common.h"

#include "cache.h"
#include "rt_internal.h"

#define KEY "0123456789abcdef0123456789abcdef"

static kf_cache cache;
static char *entry;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_init();
  kf_cache_init(&cache, fz_path("cache"));
  entry = kf_cache_entry_dir(&cache, KEY);
  if (kf_mkdir_p(entry) != 0)
    abort();
  /* an object the meta may name, so that its check is reached too */
  char *obj = kf_path_join(entry, "object.cubin");
  fz_write(obj, "kforge", 6);
  free(obj);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *path = kf_path_join(entry, "meta.json");
  fz_write(path, data, size);

  kf_entry_meta m;
  kf_entry_meta_load(&cache, KEY, &m);
  kf_entry_meta_free(&m);

  char *why = NULL;
  kf_cache_check_entry(&cache, KEY, &m, &why);
  kf_entry_meta_free(&m);
  free(why);

  kf_resources res;
  rt_err err = {0};
  rt_meta_load(path, &res, &err);
  free(path);
  return 0;
}
