/* Tests of gen/json.c: syntax errors as "FILE:LINE:COL: error: …" pointing
 * at the offending character with a hint in the terms of the mistake, and
 * member checks (duplicates, unknown fields with "did you mean"). */
#include "gen_fixture.h"

#include "json.h"

/* Parses text as display "m.json"; returns what was printed on stderr
 * (caller frees) and whether parsing succeeded through *ok. */
static char *parse_err(const char *text, int *ok) {
  fx_capture_begin();
  cJSON *root = kf_json_parse(text, strlen(text), "m.json");
  char *out = fx_capture_end();
  *ok = root != NULL;
  cJSON_Delete(root);
  return out;
}

/* Expects text to fail with exactly one line "m.json:<where>: error: <what>". */
static int syntax_error_is(const char *text, const char *where, const char *what) {
  int ok;
  char *out = parse_err(text, &ok);
  char *want = kf_xasprintf("m.json:%s: error: %s\n", where, what);
  int good = !ok && !strcmp(out, want);
  if (!good)
    fprintf(stderr, "want: %sgot:  %s", want, out);
  free(want);
  free(out);
  return good;
}

KF_TEST(json__trailing_comma_points_at_the_closing_bracket) {
  KF_CHECK(syntax_error_is("{\n  \"a\": 1,\n}\n", "3:1",
                           "trailing ',' before '}' is not allowed in JSON"));
  KF_CHECK(syntax_error_is("{\"w\": [1, 2,]}", "1:13",
                           "trailing ',' before ']' is not allowed in JSON"));
  KF_CHECK(syntax_error_is("{\n  \"a\": 1,\n\n    }", "4:5",
                           "trailing ',' before '}' is not allowed in JSON"));
}

KF_TEST(json__missing_comma_points_at_the_next_member) {
  KF_CHECK(syntax_error_is("{\n  \"a\": 1\n  \"b\": 2\n}\n", "3:3", "expected ',' after member"));
  KF_CHECK(syntax_error_is("{\"a\": \"x\"\n\t\"b\": 2}", "2:2", "expected ',' after member"));
}

KF_TEST(json__nul_escape_in_a_string_is_an_error_where_it_stands) {
  const char *nul = "a string may not contain \\u0000 (NUL): it would cut the string short";
  KF_CHECK(syntax_error_is("{\"name\": \"mal\\u0000probe\"}", "1:14", nul));
  KF_CHECK(syntax_error_is("{\n  \"arches\": [\"sm_90a\\u0000x\"]\n}", "2:21", nul));
  KF_CHECK(syntax_error_is("{\"hidden_size\\u0000 / 0\": 1}", "1:14", nul));
  /* an escaped backslash followed by the letters u0000 is no NUL */
  int ok;
  char *out = parse_err("{\"a\": \"x\\\\u0000\"}", &ok);
  KF_CHECK(ok);
  KF_CHECK_STR_EQ(out, "");
  free(out);
}

KF_TEST(json__single_quotes_are_named) {
  KF_CHECK(syntax_error_is("{\n  'name': 1\n}\n", "2:3",
                           "strings must use double quotes, not single quotes"));
  KF_CHECK(syntax_error_is("{\"name\": 'x'}", "1:10",
                           "strings must use double quotes, not single quotes"));
}

KF_TEST(json__comments_are_named) {
  KF_CHECK(syntax_error_is("{\n  // the model\n  \"a\": 1\n}\n", "2:3",
                           "comments are not allowed in JSON"));
  KF_CHECK(
      syntax_error_is("{\"a\": 1, /* x */ \"b\": 2}", "1:10", "comments are not allowed in JSON"));
}

KF_TEST(json__unclosed_brace_reports_end_of_file) {
  KF_CHECK(syntax_error_is("{\n  \"a\": 1\n", "3:1",
                           "unexpected end of file (an unclosed '{', '[' or string?)"));
  KF_CHECK(syntax_error_is("{\"a\": [1, 2", "1:12",
                           "unexpected end of file (an unclosed '{', '[' or string?)"));
  KF_CHECK(syntax_error_is("{\"a\": \"abc", "1:11",
                           "unexpected end of file (an unclosed '{', '[' or string?)"));
}

KF_TEST(json__missing_value_and_colon_are_named) {
  KF_CHECK(syntax_error_is("{\"a\": }", "1:7", "expected a value after ':'"));
  KF_CHECK(syntax_error_is("{\"a\" 1}", "1:6", "expected ':' or ',' after string, got '1'"));
}

KF_TEST(json__garbage_after_the_document_is_an_error) {
  KF_CHECK(syntax_error_is("{}\n}", "2:1", "unexpected '}'"));
  KF_CHECK(syntax_error_is("{} x", "1:4", "unexpected 'x'"));
}

KF_TEST(json__valid_text_parses_silently) {
  int ok;
  char *out = parse_err("{\"a\": [1, 2.5, \"x\"], \"b\": {\"c\": null}}", &ok);
  KF_CHECK(ok);
  KF_CHECK_STR_EQ(out, "");
  free(out);
}

KF_TEST(json__load_reports_a_missing_file) {
  const char *dir = fx_tmpdir();
  char *p = fx_path(dir, "absent.json");
  fx_capture_begin();
  cJSON *root = kf_json_load(p, "models/absent.json");
  char *out = fx_capture_end();
  KF_CHECK(root == NULL);
  KF_CHECK_STR_EQ(out, "models/absent.json: error: cannot read: No such file or directory\n");
  free(out);
  free(p);
}

KF_TEST(json__load_refuses_a_nul_byte) {
  const char *dir = fx_tmpdir();
  char *p = fx_path(dir, "bin.json");
  FILE *f = fopen(p, "wb");
  KF_CHECK(f && fwrite("{}\0{}", 1, 5, f) == 5 && fclose(f) == 0);
  fx_capture_begin();
  cJSON *root = kf_json_load(p, "bin.json");
  char *out = fx_capture_end();
  KF_CHECK(root == NULL);
  KF_CHECK_CONTAINS(out, "bin.json: error: not a text file");
  free(out);
  free(p);
}

KF_TEST(json__load_reports_syntax_with_the_display_name) {
  const char *dir = fx_tmpdir();
  char *p = fx_write(dir, "x.json", "{\n  \"a\": 1,\n}\n");
  fx_capture_begin();
  cJSON *root = kf_json_load(p, "models/x.json");
  char *out = fx_capture_end();
  KF_CHECK(root == NULL);
  KF_CHECK_STR_EQ(out,
                  "models/x.json:3:1: error: trailing ',' before '}' is not allowed in JSON\n");
  free(out);
  free(p);
}

static const char *const allowed[] = {"name", "widths", "arches", "kernels", NULL};

/* Runs kf_json_check_members on text; returns stderr, problems in *n. */
static char *check_members(const char *text, const char *path, int *n) {
  cJSON *root = cJSON_Parse(text);
  if (!root)
    fx_die("bad test JSON: %s", text);
  fx_capture_begin();
  *n = kf_json_check_members("m.json", path, root, allowed);
  char *out = fx_capture_end();
  cJSON_Delete(root);
  return out;
}

KF_TEST(json__duplicate_member_is_reported_with_its_path) {
  int n;
  char *out = check_members("{\"name\": \"a\", \"widths\": [1], \"name\": \"b\"}", "", &n);
  KF_CHECK(n == 1);
  KF_CHECK_STR_EQ(out, "m.json: name: error: duplicate member \"name\"\n");
  free(out);
  out = check_members("{\"name\": 1, \"name\": 2}", "kernels[3]", &n);
  KF_CHECK(n == 1);
  KF_CHECK_STR_EQ(out, "m.json: kernels[3].name: error: duplicate member \"name\"\n");
  free(out);
}

KF_TEST(json__unknown_field_suggests_the_closest_name) {
  int n;
  char *out = check_members("{\"name\": \"a\", \"widht\": [1]}", "", &n);
  KF_CHECK(n == 1);
  KF_CHECK_STR_EQ(out,
                  "m.json: widht: error: unknown field \"widht\" (did you mean \"widths\"?)\n");
  free(out);
  out = check_members("{\"arch\": [1]}", "x", &n);
  KF_CHECK(n == 1);
  KF_CHECK_STR_EQ(out,
                  "m.json: x.arch: error: unknown field \"arch\" (did you mean \"arches\"?)\n");
  free(out);
}

KF_TEST(json__unknown_field_far_from_any_lists_the_allowed_ones) {
  int n;
  char *out = check_members("{\"zzzzzzzz\": 1}", "", &n);
  KF_CHECK(n == 1);
  KF_CHECK_STR_EQ(out, "m.json: zzzzzzzz: error: unknown field \"zzzzzzzz\"; allowed: name, "
                       "widths, arches, kernels\n");
  free(out);
}

KF_TEST(json__every_problem_is_counted) {
  int n;
  char *out = check_members("{\"name\": 1, \"colour\": 2, \"name\": 3, \"kernel\": 4, \"name\": 5}",
                            "", &n);
  KF_CHECK(n == 4);
  KF_CHECK(fx_count_lines_with(out, "duplicate member \"name\"") == 2);
  KF_CHECK(fx_count_lines_with(out, "unknown field \"colour\"") == 1);
  KF_CHECK(fx_count_lines_with(out, "unknown field \"kernel\" (did you mean \"kernels\"?)") == 1);
  free(out);
}

KF_TEST(json__type_names_read_as_phrases) {
  cJSON *root = cJSON_Parse("[\"s\", 1, true, null, [], {}]");
  KF_CHECK(root);
  const char *want[] = {"a string", "a number", "a boolean", "null", "an array", "an object"};
  int i = 0;
  for (const cJSON *e = root->child; e; e = e->next, i++)
    KF_CHECK_STR_EQ(kf_json_type_name(e), want[i]);
  KF_CHECK_STR_EQ(kf_json_type_name(NULL), "nothing");
  cJSON_Delete(root);
}

KF_TEST_MAIN()
