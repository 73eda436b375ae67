/* Tests of runtime/rt_arch.c: the arch grammar, which manifest arch a device
 * can run, and how well (docs/contracts.md, "Arch names"). tests/gen/
 * test_arch.c checks the generator's table against the same rules. */
#include "kf_test.h"
#include "rt_internal.h"

KF_TEST(arch__sm_xya_runs_only_on_exactly_that_capability) {
  KF_CHECK(rt_arch_cuda_rank("sm_90a", 9, 0) == 0);
  KF_CHECK(rt_arch_cuda_rank("sm_90a", 9, 1) == -1);
  KF_CHECK(rt_arch_cuda_rank("sm_90a", 10, 0) == -1);
  KF_CHECK(rt_arch_cuda_rank("sm_100a", 10, 0) == 0);
  KF_CHECK(rt_arch_cuda_rank("sm_100a", 9, 0) == -1);
  KF_CHECK(rt_arch_cuda_rank("sm_120a", 12, 0) == 0);
}

KF_TEST(arch__plain_sm_xy_runs_on_later_minors_of_its_major) {
  KF_CHECK(rt_arch_cuda_rank("sm_90", 9, 0) == 11);
  KF_CHECK(rt_arch_cuda_rank("sm_90", 9, 2) == 13);
  KF_CHECK(rt_arch_cuda_rank("sm_80", 8, 9) == 20);
  KF_CHECK(rt_arch_cuda_rank("sm_86", 8, 0) == -1);
  KF_CHECK(rt_arch_cuda_rank("sm_90", 10, 0) == -1);
  KF_CHECK(rt_arch_cuda_rank("sm_80", 9, 0) == -1);
}

KF_TEST(arch__family_sm_xyf_runs_on_later_minors_of_its_major) {
  KF_CHECK(rt_arch_cuda_rank("sm_100f", 10, 0) == 1);
  KF_CHECK(rt_arch_cuda_rank("sm_100f", 10, 3) == 4);
  KF_CHECK(rt_arch_cuda_rank("sm_103f", 10, 3) == 1);
  KF_CHECK(rt_arch_cuda_rank("sm_103f", 10, 0) == -1);
  KF_CHECK(rt_arch_cuda_rank("sm_120f", 12, 1) == 2);
  KF_CHECK(rt_arch_cuda_rank("sm_100f", 11, 0) == -1);
  KF_CHECK(rt_arch_cuda_rank("sm_100f", 12, 0) == -1);
  KF_CHECK(rt_arch_cuda_rank("sm_100f", 9, 0) == -1);
}

KF_TEST(arch__exact_beats_family_beats_plain_beats_older_minor) {
  int a = rt_arch_cuda_rank("sm_89", 8, 9), b = rt_arch_cuda_rank("sm_86", 8, 9);
  KF_CHECK(rt_arch_cuda_rank("sm_90a", 9, 0) < rt_arch_cuda_rank("sm_90", 9, 0));
  KF_CHECK(a >= 0 && b >= 0 && a < b);
  /* on 10.3: sm_103a, then every sm_10Yf nearest first, then plain ones */
  KF_CHECK(rt_arch_cuda_rank("sm_103a", 10, 3) < rt_arch_cuda_rank("sm_103f", 10, 3));
  KF_CHECK(rt_arch_cuda_rank("sm_103f", 10, 3) < rt_arch_cuda_rank("sm_100f", 10, 3));
  KF_CHECK(rt_arch_cuda_rank("sm_100f", 10, 3) < rt_arch_cuda_rank("sm_103", 10, 3));
  KF_CHECK(rt_arch_cuda_rank("sm_103", 10, 3) < rt_arch_cuda_rank("sm_100", 10, 3));
}

KF_TEST(arch__malformed_cuda_names_run_nowhere) {
  const char *bad[] = {"sm_9",       "sm_90b",  "90",     "sm_090", "sm_",     "sm_9000",
                       "compute_90", "sm_90a ", "sm_90f", "sm_80a", "sm_90af", "sm_90a:xnack-"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    KF_CHECK(rt_arch_cuda_rank(bad[i], 9, 0) == -1);
    KF_CHECK(!rt_arch_valid(KF_BACKEND_CUDA, bad[i]));
  }
  KF_CHECK(rt_arch_valid(KF_BACKEND_CUDA, "sm_90a"));
  KF_CHECK(rt_arch_valid(KF_BACKEND_CUDA, "sm_100f"));
  KF_CHECK(!rt_arch_valid(KF_BACKEND_CUDA, "gfx942"));
  KF_CHECK(!rt_arch_valid(KF_BACKEND_HIP, "sm_90a"));
}

KF_TEST(arch__parse_gives_capability_variant_and_features) {
  rt_arch a;
  KF_CHECK(rt_arch_parse("sm_100f", &a) == 0);
  KF_CHECK(a.kind == RT_ARCH_CUDA && a.code == 100 && a.variant == RT_ARCH_FAMILY);
  KF_CHECK(rt_arch_major(&a) == 10 && rt_arch_minor(&a) == 0);
  KF_CHECK(rt_arch_parse("sm_121a", &a) == 0);
  KF_CHECK(a.code == 121 && a.variant == RT_ARCH_SPECIFIC && rt_arch_minor(&a) == 1);
  KF_CHECK(rt_arch_parse("sm_75", &a) == 0 && a.code == 75 && a.variant == RT_ARCH_PLAIN);
  KF_CHECK(rt_arch_parse("gfx942:sramecc+:xnack-", &a) == 0);
  KF_CHECK(a.kind == RT_ARCH_HIP && a.nfeatures == 2);
  KF_CHECK_STR_EQ(a.base, "gfx942");
  KF_CHECK_STR_EQ(a.feature[1], "xnack");
  KF_CHECK(a.feature_on[0] == '+' && a.feature_on[1] == '-');
  const char *bad[] = {"gfx942:xnack-:xnack+", "gfx942:", "gfx942:xnack", "gfx", "gfx94_2",
                       "gfx942:XNACK-",        ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    KF_CHECK(rt_arch_parse(bad[i], &a) == -1);
}

KF_TEST(arch__gfx_features_must_agree_with_the_device) {
  const char *dev = "gfx942:sramecc+:xnack-";
  KF_CHECK(rt_arch_hip_rank("gfx942", dev) >= 0);
  KF_CHECK(rt_arch_hip_rank("gfx942:xnack-", dev) >= 0);
  KF_CHECK(rt_arch_hip_rank("gfx942:xnack+", dev) == -1);
  KF_CHECK(rt_arch_hip_rank("gfx942:sramecc-:xnack-", dev) == -1);
  KF_CHECK(rt_arch_hip_rank("gfx90a", dev) == -1);
  KF_CHECK(rt_arch_hip_rank("gfx9420", dev) == -1);
  /* A device that does not report xnack can't run an object that needs a
   * setting of it. */
  KF_CHECK(rt_arch_hip_rank("gfx1100:xnack-", "gfx1100") == -1);
  KF_CHECK(rt_arch_hip_rank("gfx1100", "gfx1100") >= 0);
}

KF_TEST(arch__more_specific_gfx_manifest_ranks_better) {
  const char *dev = "gfx942:sramecc+:xnack-";
  int any = rt_arch_hip_rank("gfx942", dev);
  int one = rt_arch_hip_rank("gfx942:xnack-", dev);
  int both = rt_arch_hip_rank("gfx942:sramecc+:xnack-", dev);
  int reordered = rt_arch_hip_rank("gfx942:xnack-:sramecc+", dev);
  KF_CHECK(both < one && one < any);
  KF_CHECK(reordered == both);
}

KF_TEST(arch__wanted_lists_name_what_a_device_runs) {
  char buf[256];
  rt_arch_cuda_wanted(9, 0, buf, sizeof buf);
  KF_CHECK_STR_EQ(buf, "sm_90a, sm_90");
  rt_arch_cuda_wanted(9, 2, buf, sizeof buf);
  KF_CHECK_STR_EQ(buf, "sm_92a, sm_92, sm_91, sm_90");
  rt_arch_cuda_wanted(10, 3, buf, sizeof buf);
  KF_CHECK_STR_EQ(buf,
                  "sm_103a, sm_103f, sm_102f, sm_101f, sm_100f, sm_103, sm_102, sm_101, sm_100");
  rt_arch_cuda_wanted(8, 6, buf, sizeof buf);
  KF_CHECK_STR_EQ(buf, "sm_86, sm_85, sm_84, sm_83, sm_82, sm_81, sm_80");
  rt_arch_hip_wanted("gfx942:sramecc+:xnack-", buf, sizeof buf);
  KF_CHECK_STR_EQ(buf, "gfx942:sramecc+:xnack-, gfx942:sramecc+, "
                       "gfx942:xnack-, gfx942");
}

KF_TEST_MAIN()
