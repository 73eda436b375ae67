/* json.h: loading JSON files with cJSON and reporting problems in the two
 * shapes users see: "FILE:LINE:COL: error: …" for syntax and
 * "FILE: json.path: error: …" for meaning. */
#ifndef KF_JSON_H
#define KF_JSON_H

#include <cjson/cJSON.h>

/* Parses the file at path (display names it in messages). Returns the tree
 * (caller frees with cJSON_Delete) or NULL after printing the error. */
cJSON *kf_json_load(const char *path, const char *display);
/* Parses text; same reporting as kf_json_load. */
/* Parses text, which must have a NUL at text[len]; same reporting. */
cJSON *kf_json_parse(const char *text, size_t len, const char *display);

/* Checks that every member of obj is one of allowed (NULL-terminated) and
 * that no member repeats. Reports each offender (with a "did you mean" hint)
 * and returns the number of problems. */
int kf_json_check_members(const char *display, const char *path, const cJSON *obj,
                          const char *const *allowed);

/* Which members of obj repeat the name of an earlier member: an array with
 * one flag per member, in order (caller frees), their number in *n. Linear
 * time, for objects of any size. */
unsigned char *kf_json_duplicates(const cJSON *obj, size_t *n);
/* Checks that no member of obj repeats (linear: a config may hold many).
 * Reports each repeat after the first at "path.name" and returns their
 * number. */
int kf_json_check_unique(const char *display, const char *path, const cJSON *obj);

/* A copy of obj's string member name (caller frees), or NULL when it is
 * absent or not a string. */
char *kf_json_dup_string(const cJSON *obj, const char *name);

/* Short name of a JSON value's type, for messages ("a string", "a number"). */
const char *kf_json_type_name(const cJSON *v);

#endif /* KF_JSON_H */
