/* Tests of runtime/rt_arch.c: which manifest arch a device can run, and how
 * well (docs/contracts.md, "Arch names"). */
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
  KF_CHECK(rt_arch_cuda_rank("sm_90", 9, 0) == 1);
  KF_CHECK(rt_arch_cuda_rank("sm_90", 9, 2) == 3);
  KF_CHECK(rt_arch_cuda_rank("sm_80", 8, 9) == 10);
  KF_CHECK(rt_arch_cuda_rank("sm_86", 8, 0) == -1);
  KF_CHECK(rt_arch_cuda_rank("sm_90", 10, 0) == -1);
  KF_CHECK(rt_arch_cuda_rank("sm_80", 9, 0) == -1);
}

KF_TEST(arch__exact_beats_plain_beats_older_minor) {
  int a = rt_arch_cuda_rank("sm_89", 8, 9), b = rt_arch_cuda_rank("sm_86", 8, 9);
  KF_CHECK(rt_arch_cuda_rank("sm_90a", 9, 0) < rt_arch_cuda_rank("sm_90", 9, 0));
  KF_CHECK(a >= 0 && b >= 0 && a < b);
}

KF_TEST(arch__malformed_cuda_names_run_nowhere) {
  const char *bad[] = {"sm_9", "sm_90b", "90", "sm_090", "sm_", "sm_9000", "compute_90", "sm_90a "};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    KF_CHECK(rt_arch_cuda_rank(bad[i], 9, 0) == -1);
  KF_CHECK(rt_arch_valid(KF_BACKEND_CUDA, "sm_90a"));
  KF_CHECK(!rt_arch_valid(KF_BACKEND_CUDA, "sm_090"));
  KF_CHECK(!rt_arch_valid(KF_BACKEND_CUDA, "gfx942"));
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
  rt_arch_hip_wanted("gfx942:sramecc+:xnack-", buf, sizeof buf);
  KF_CHECK_STR_EQ(buf, "gfx942:sramecc+:xnack-, gfx942:sramecc+, "
                       "gfx942:xnack-, gfx942");
}

KF_TEST_MAIN()
