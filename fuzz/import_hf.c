/* fuzz/import_hf.c: a Hugging Face config.json as `kforge import-hf` reads
 * it (gen/cmd_import_hf.c): parsed with the generator's JSON loader, then
 * turned into a description of its family with the shipped presets. */
#include "fuzz_common.h"

#include "commands.h"
#include "json.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_init();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (memchr(data, '\0', size)) /* kf_json_load refuses it before parsing */
    return 0;
  char *text = fz_cstr(data, size);
  cJSON *cfg = kf_json_parse(text, size, "config.json");
  free(text);
  if (!cfg)
    return 0;
  cJSON *desc = NULL, *fam = NULL;
  if (kf_import_hf_convert(cfg, "config.json", KFORGE_SOURCE_DIR "/models/families", NULL, &desc,
                           &fam) == 0) {
    char *out = cJSON_Print(desc);
    free(out);
    cJSON_Delete(desc);
    cJSON_Delete(fam);
  }
  cJSON_Delete(cfg);
  return 0;
}
