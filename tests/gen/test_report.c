/* Tests of gen/report.c: every diagnostic has the place first, then one
 * level word, then the message, one line each. */
#include "gen_fixture.h"

#include "report.h"

KF_TEST(report__formats_file_path_and_message) {
  fx_capture_begin();
  kf_error("models/x.json", "layers[3].head_dim", "must be a multiple of %d, got %d", 8, 100);
  kf_error("models/x.json", "", "a description must be a JSON object");
  char *out = fx_capture_end();
  KF_CHECK_STR_EQ(out,
                  "models/x.json: layers[3].head_dim: error: must be a multiple of 8, got 100\n"
                  "models/x.json: error: a description must be a JSON object\n");
  free(out);
}

KF_TEST(report__without_a_file_names_the_command) {
  fx_capture_begin();
  kf_error(NULL, NULL, "unknown command '%s'", "bild");
  kf_warning(NULL, NULL, "%s: cache entry is damaged", "m/k/w1/sm_90a");
  kf_note(NULL, NULL, "manifest %s not updated", "m/sm_90a");
  char *out = fx_capture_end();
  KF_CHECK_STR_EQ(out, "kforge: error: unknown command 'bild'\n"
                       "kforge: warning: m/k/w1/sm_90a: cache entry is damaged\n"
                       "kforge: note: manifest m/sm_90a not updated\n");
  free(out);
}

KF_TEST(report__level_word_follows_the_place) {
  fx_capture_begin();
  kf_diag(KF_WARNING, "templates/t.json", "params.N", "unused");
  kf_diag(KF_NOTE, "models/m.json", NULL, "from family %s", "qwen3");
  kf_error_pos("models/m.json", 3, 7, "expected ',' after member");
  char *out = fx_capture_end();
  KF_CHECK_STR_EQ(out, "templates/t.json: params.N: warning: unused\n"
                       "models/m.json: note: from family qwen3\n"
                       "models/m.json:3:7: error: expected ',' after member\n");
  free(out);
}

KF_TEST(report__usage_error_prints_the_usage_after_the_message) {
  fx_capture_begin();
  kf_usage_error("usage: kforge ls\n", "unexpected argument '%s'", "x");
  char *out = fx_capture_end();
  KF_CHECK_STR_EQ(out, "kforge: error: unexpected argument 'x'\nusage: kforge ls\n");
  free(out);
}

KF_TEST_MAIN()
