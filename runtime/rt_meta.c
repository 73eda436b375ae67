/* meta.json of a cache entry (docs/contracts.md, "meta.json"): only its
 * resource usage is read, on demand, for introspection. Loading never needs
 * it, so a server pays nothing for it at startup. */
#include "rt_internal.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

/* Parses text (freed here), the meta.json at path (which names it in
 * reasons). */
static kf_status meta_parse(const char *path, char *text, size_t len, kf_resources *res,
                            rt_err *err) {
  static const char *const names[] = {"registers", "spill_stores", "spill_loads", "stack_bytes",
                                      "shared_bytes"};
  int *fields[] = {&res->registers, &res->spill_stores, &res->spill_loads, &res->stack_bytes,
                   &res->shared_bytes};
  cJSON *root;
  const cJSON *format, *r;

  root = cJSON_ParseWithLength(text, len);
  free(text);
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return rt_err_set(err, KF_ERR_BAD_META, "%s: error: malformed JSON", path);
  }
  format = cJSON_GetObjectItemCaseSensitive(root, "format");
  if (!cJSON_IsNumber(format) || format->valuedouble < 1 ||
      format->valuedouble > KF_MANIFEST_FORMAT) {
    cJSON_Delete(root);
    return rt_err_set(err, KF_ERR_BAD_META, "%s: format: error: must be 1..%d", path,
                      KF_MANIFEST_FORMAT);
  }
  r = cJSON_GetObjectItemCaseSensitive(root, "resources");
  if (!cJSON_IsObject(r)) {
    cJSON_Delete(root);
    return rt_err_set(err, KF_ERR_BAD_META, "%s: resources: error: missing or not an object", path);
  }
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, names[i]);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 2147483647.0) {
      cJSON_Delete(root);
      return rt_err_set(err, KF_ERR_BAD_META,
                        "%s: resources.%s: error: must be a non-negative "
                        "integer",
                        path, names[i]);
    }
    *fields[i] = (int)v->valuedouble;
  }
  cJSON_Delete(root);
  return KF_OK;
}

kf_status rt_meta_load(const char *path, kf_resources *res, rt_err *err) {
  char *text;
  size_t len;
  if (rt_file_read(path, &text, &len, err) != KF_OK) {
    err->status = KF_ERR_BAD_META;
    return err->status;
  }
  return meta_parse(path, text, len, res, err);
}

kf_status rt_meta_load_at(const rt_root *r, const char *rel, kf_resources *res, rt_err *err) {
  char *text, *path;
  size_t len;
  kf_status st;
  if (rt_root_read(r, rel, 1, &text, &len, err) != KF_OK) {
    if (err->status != KF_ERR_UNTRUSTED && err->status != KF_ERR_NO_MEMORY)
      err->status = KF_ERR_BAD_META;
    return err->status;
  }
  if (!(path = rt_path_join(r->v1, rel))) {
    free(text);
    return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
  }
  st = meta_parse(path, text, len, res, err);
  free(path);
  return st;
}
