/* A minimal unit-test harness for kforge's C tests.
 *
 * A test file defines cases with KF_TEST(name) { ... } and ends with
 * KF_TEST_MAIN(). CMake (kf_add_c_tests) finds every KF_TEST line and
 * registers one ctest test per case, so ctest's count is the real number of
 * cases. Run a binary with a case name to run that case, with none to run all.
 * A failed check prints file:line and the expression, and fails the case. */
#ifndef KF_TEST_H
#define KF_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*kf_test_fn)(void);
struct kf_test_case {
  const char *name;
  kf_test_fn fn;
};

extern struct kf_test_case kf_test_cases[];
extern int kf_test_count;
extern int kf_test_failed;

#define KF_TEST_MAX 256

#define KF_TEST(name)                                                                              \
  static void kf_test_##name(void);                                                                \
  __attribute__((constructor)) static void kf_test_register_##name(void) {                         \
    if (kf_test_count < KF_TEST_MAX)                                                               \
      kf_test_cases[kf_test_count++] = (struct kf_test_case){#name, kf_test_##name};               \
  }                                                                                                \
  static void kf_test_##name(void)

#define KF_CHECK(cond)                                                                             \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      kf_test_failed = 1;                                                                          \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

#define KF_CHECK_STR_EQ(a, b)                                                                      \
  do {                                                                                             \
    const char *kf_a_ = (a), *kf_b_ = (b);                                                         \
    if (!kf_a_ || !kf_b_ || strcmp(kf_a_, kf_b_) != 0) {                                           \
      fprintf(stderr, "%s:%d: check failed: %s == %s\n  left:  %s\n  right: %s\n", __FILE__,       \
              __LINE__, #a, #b, kf_a_ ? kf_a_ : "(null)", kf_b_ ? kf_b_ : "(null)");               \
      kf_test_failed = 1;                                                                          \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

#define KF_CHECK_CONTAINS(hay, needle)                                                             \
  do {                                                                                             \
    const char *kf_h_ = (hay), *kf_n_ = (needle);                                                  \
    if (!kf_h_ || !strstr(kf_h_, kf_n_)) {                                                         \
      fprintf(stderr, "%s:%d: check failed: '%s' contains '%s'\n", __FILE__, __LINE__,             \
              kf_h_ ? kf_h_ : "(null)", kf_n_);                                                    \
      kf_test_failed = 1;                                                                          \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

#define KF_TEST_MAIN()                                                                             \
  struct kf_test_case kf_test_cases[KF_TEST_MAX];                                                  \
  int kf_test_count;                                                                               \
  int kf_test_failed;                                                                              \
  int main(int argc, char **argv) {                                                                \
    int ran = 0, failed = 0;                                                                       \
    for (int i = 0; i < kf_test_count; i++) {                                                      \
      if (argc > 1 && strcmp(argv[1], kf_test_cases[i].name) != 0)                                 \
        continue;                                                                                  \
      kf_test_failed = 0;                                                                          \
      kf_test_cases[i].fn();                                                                       \
      ran++;                                                                                       \
      if (kf_test_failed) {                                                                        \
        failed++;                                                                                  \
        fprintf(stderr, "FAIL %s\n", kf_test_cases[i].name);                                       \
      }                                                                                            \
    }                                                                                              \
    if (ran == 0) {                                                                                \
      fprintf(stderr, "no test named %s\n", argc > 1 ? argv[1] : "(any)");                         \
      return 2;                                                                                    \
    }                                                                                              \
    printf("%d passed, %d failed\n", ran - failed, failed);                                        \
    return failed ? 1 : 0;                                                                         \
  }

#endif /* KF_TEST_H */
