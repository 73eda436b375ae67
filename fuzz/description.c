/* fuzz/description.c: a layer description as `kforge build` loads it
 * (gen/model.c): the description, the family preset it names and the
 * template schemas its kernels name, every parameter checked and every
 * launch expression evaluated. The input is the description, optionally
 * followed by "\n#family\n" and a family preset (written under the name the
 * description gives, beside it, where a local preset is looked up first),
 * optionally followed by "\n#schema\n" and a template schema (written under
 * its own "template" name in a template directory searched before the
 * shipped templates/). Without them the shipped presets and templates are
 * read. */
#include "fuzz_common.h"

#include "model.h"

#include <cjson/cJSON.h>

static int plain(const char *s) {
  if (!*s || strlen(s) > 64 || s[0] == '.')
    return 0;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '.' ||
          *p == '-'))
      return 0;
  return 1;
}

/* The string member name of the JSON in data, when it is a plain name. */
static int member_name(const uint8_t *data, size_t size, const char *member, char *out, size_t n) {
  cJSON *root = cJSON_ParseWithLength((const char *)data, size);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, member);
  int ok = cJSON_IsString(v) && plain(v->valuestring);
  if (ok)
    snprintf(out, n, "%s", v->valuestring);
  cJSON_Delete(root);
  return ok;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_init();
  mkdir(fz_path("d"), 0755);
  mkdir(fz_path("d/families"), 0755);
  mkdir(fz_path("t"), 0755);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *fam, *schema = NULL;
  size_t desc_len, fam_len, schema_len = 0;
  fz_split(data, size, "\n#family\n", &fam, &desc_len, &fam_len);
  if (fam)
    fz_split(fam, fam_len, "\n#schema\n", &schema, &fam_len, &schema_len);

  char path[3][4200] = {"", "", ""}, name[80];
  snprintf(path[0], sizeof path[0], "%s", fz_path("d/m.json"));
  fz_write(path[0], data, desc_len);
  if (fam && member_name(data, desc_len, "family", name, sizeof name)) {
    char rel[120];
    snprintf(rel, sizeof rel, "d/families/%s.json", name);
    snprintf(path[1], sizeof path[1], "%s", fz_path(rel));
    fz_write(path[1], fam, fam_len);
  }
  char header[4200] = "";
  if (schema && member_name(schema, schema_len, "template", name, sizeof name)) {
    char rel[120];
    snprintf(rel, sizeof rel, "t/%s.json", name);
    snprintf(path[2], sizeof path[2], "%s", fz_path(rel));
    fz_write(path[2], schema, schema_len);
    if (member_name(schema, schema_len, "header", name, sizeof name)) {
      snprintf(rel, sizeof rel, "t/%s", name);
      snprintf(header, sizeof header, "%s", fz_path(rel));
      if (strcmp(header, path[2]) != 0)
        fz_write(header, "", 0);
      else
        header[0] = '\0';
    }
  }

  kf_model_options opt = {0};
  opt.templates_dir = KFORGE_SOURCE_DIR "/templates";
  opt.families_dir = KFORGE_SOURCE_DIR "/models/families";
  kf_strv_push(&opt.extra_template_dirs, fz_path("t"));
  kf_model *m = kf_model_load(path[0], &opt);
  kf_model_free(m);
  kf_strv_free(&opt.extra_template_dirs);

  for (int i = 0; i < 3; i++)
    if (path[i][0])
      unlink(path[i]);
  if (header[0])
    unlink(header);
  return 0;
}
