/* Tests of gen/arch.c against the runtime's rules: every arch the generator
 * accepts (its table, enumerated, not copied here) must be a name the
 * runtime parses the same way and picks on the device the name is for, and
 * nvcc must be told to build it for its own variant (docs/contracts.md,
 * "Arch names"). Uses the real nvcc for the last. */
#include "gen_fixture.h"

#include "arch.h"
#include "toolchain.h"

/* KF_CHECK that also names the arch it failed for. */
#define CHECK_FOR(arch, cond)                                                                      \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      fprintf(stderr, "for %s:\n", (arch));                                                        \
    KF_CHECK(cond);                                                                                \
  } while (0)

/* Compute capabilities (10*major+minor) of every sm_* name in the table:
 * the devices the cases below try each name on. */
static int table_capabilities(int *out, int max) {
  int n = 0;
  for (const char *const *t = kf_arch_table; *t; t++) {
    rt_arch a;
    if (rt_arch_parse(*t, &a) != 0 || a.kind != RT_ARCH_CUDA)
      continue;
    int seen = 0;
    for (int i = 0; i < n; i++)
      seen |= out[i] == a.code;
    if (!seen && n < max)
      out[n++] = a.code;
  }
  return n;
}

/* Whether name is one of the entries of a ", "-separated list. */
static int lists(const char *list, const char *name) {
  char *padded = kf_xasprintf(", %s,", list), *want = kf_xasprintf(", %s,", name);
  int found = strstr(padded, want) != NULL;
  free(padded);
  free(want);
  return found;
}

KF_TEST(arch__every_known_arch_is_one_the_runtime_picks_on_its_device) {
  size_t n = 0;
  for (const char *const *t = kf_arch_table; *t; t++, n++) {
    rt_arch a;
    char wanted[512];
    CHECK_FOR(*t, kf_arch_known(*t));
    CHECK_FOR(*t, rt_arch_parse(*t, &a) == 0);
    KF_CHECK_STR_EQ(a.base, *t);
    if (a.kind == RT_ARCH_CUDA) {
      CHECK_FOR(*t, !kf_arch_is_hip(*t));
      CHECK_FOR(*t, rt_arch_cuda_rank(*t, rt_arch_major(&a), rt_arch_minor(&a)) >= 0);
      rt_arch_cuda_wanted(rt_arch_major(&a), rt_arch_minor(&a), wanted, sizeof wanted);
    } else {
      CHECK_FOR(*t, a.kind == RT_ARCH_HIP);
      CHECK_FOR(*t, kf_arch_is_hip(*t));
      CHECK_FOR(*t, rt_arch_hip_rank(*t, *t) >= 0);
      char *dev = kf_xasprintf("%s:sramecc+:xnack-", *t);
      CHECK_FOR(*t, rt_arch_hip_rank(*t, dev) >= 0);
      free(dev);
      rt_arch_hip_wanted(*t, wanted, sizeof wanted);
    }
    /* the runtime's "no manifest" reason names it for that device */
    CHECK_FOR(*t, lists(wanted, *t));
  }
  KF_CHECK(n > 0);
  KF_CHECK(kf_arch_known("sm_100f")); /* the family target of the contract */
}

KF_TEST(arch__every_known_cuda_arch_runs_exactly_where_its_variant_says) {
  int caps[64];
  int ncaps = table_capabilities(caps, 64);
  KF_CHECK(ncaps > 1);
  for (const char *const *t = kf_arch_table; *t; t++) {
    rt_arch a;
    if (rt_arch_parse(*t, &a) != 0 || a.kind != RT_ARCH_CUDA)
      continue;
    for (int i = 0; i < ncaps; i++) {
      int major = caps[i] / 10, minor = caps[i] % 10;
      int rank = rt_arch_cuda_rank(*t, major, minor);
      int runs = a.variant == RT_ARCH_SPECIFIC
                     ? caps[i] == a.code
                     : major == rt_arch_major(&a) && minor >= rt_arch_minor(&a);
      if ((rank >= 0) != runs)
        fprintf(stderr, "on %d.%d: rank %d\n", major, minor, rank);
      CHECK_FOR(*t, (rank >= 0) == runs);
      /* only the arch-specific name of the device itself ranks first */
      CHECK_FOR(*t, (rank == 0) == (runs && a.variant == RT_ARCH_SPECIFIC));
    }
  }
  KF_CHECK(rt_arch_cuda_rank("sm_90a", 10, 0) == -1);
  KF_CHECK(rt_arch_cuda_rank("sm_100f", 10, 3) >= 0);
  KF_CHECK(rt_arch_cuda_rank("sm_100f", 11, 0) == -1);
}

KF_TEST(arch__known_gfx_features_parse_the_same_on_both_sides) {
  static const char *const settings[] = {":xnack-", ":xnack+", ":sramecc+", ":sramecc-:xnack+"};
  for (const char *const *t = kf_arch_table; *t; t++) {
    /* RDNA processors take no target features (kf_arch_check) */
    if (!kf_arch_is_hip(*t) || !strncmp(*t, "gfx1", 4))
      continue;
    for (size_t s = 0; s < sizeof settings / sizeof settings[0]; s++) {
      if (!strcmp(*t, "gfx900") && strstr(settings[s], "sramecc"))
        continue; /* gfx900 takes xnack only */
      char *name = kf_xasprintf("%s%s", *t, settings[s]);
      rt_arch a;
      KF_CHECK(kf_arch_known(name));
      KF_CHECK(rt_arch_parse(name, &a) == 0 && a.kind == RT_ARCH_HIP);
      KF_CHECK_STR_EQ(a.base, *t);
      KF_CHECK(rt_arch_hip_rank(name, name) >= 0);
      /* the same processor with xnack set the other way can't run it */
      char *other = kf_xasprintf("%s:xnack%c", *t, strstr(name, "xnack-") ? '+' : '-');
      if (strstr(name, "xnack"))
        KF_CHECK(rt_arch_hip_rank(name, other) == -1);
      free(other);
      free(name);
    }
  }
}

KF_TEST(arch__features_must_be_ones_the_processor_takes_each_once) {
  char why[1024];
  KF_CHECK(kf_arch_check("gfx942:sramecc+:xnack-", why, sizeof why) == 0);
  KF_CHECK(kf_arch_check("gfx900:xnack+", why, sizeof why) == 0);
  KF_CHECK(kf_arch_check("gfx942:xnack-:xnack+", why, sizeof why) == -1);
  KF_CHECK_STR_EQ(why, "target feature xnack is set more than once in \"gfx942:xnack-:xnack+\"");
  KF_CHECK(kf_arch_check("gfx942:xnack+:sramecc-:xnack+", why, sizeof why) == -1);
  KF_CHECK_CONTAINS(why, "target feature xnack is set more than once");
  KF_CHECK(kf_arch_check("gfx1100:xnack+", why, sizeof why) == -1);
  KF_CHECK_STR_EQ(why, "gfx1100 has no target feature xnack (it takes none)");
  KF_CHECK(kf_arch_check("gfx900:sramecc-", why, sizeof why) == -1);
  KF_CHECK_STR_EQ(why, "gfx900 has no target feature sramecc (it takes xnack)");
  KF_CHECK(!kf_arch_known("gfx1201:sramecc+"));
  KF_CHECK(kf_arch_check("sm_91", why, sizeof why) == -1);
  KF_CHECK_CONTAINS(why, "unknown arch \"sm_91\"; known: sm_75");
}

KF_TEST(arch__unknown_names_are_refused_and_the_known_list_is_the_table) {
  /* in the grammar but not in the table */
  KF_CHECK(!kf_arch_known("sm_91"));
  KF_CHECK(!kf_arch_known("gfx942:foo+"));
  KF_CHECK(!kf_arch_known("gfx9999"));
  /* not in the grammar: no family targets before 10.0, no arch-specific
   * ones before 9.0, a feature set twice, target features on an sm_* name */
  const char *bad[] = {"sm_90f",
                       "sm_80a",
                       "sm_100af",
                       "sm_100 ",
                       "sm_90a:xnack-",
                       "compute_90",
                       "gfx942:xnack-:xnack+",
                       "gfx942:",
                       "",
                       "SM_90A"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    rt_arch a;
    KF_CHECK(!kf_arch_known(bad[i]));
    KF_CHECK(rt_arch_parse(bad[i], &a) == -1);
  }
  const char *list = kf_arch_known_list();
  size_t n = 0;
  for (const char *const *t = kf_arch_table; *t; t++, n++)
    KF_CHECK(lists(list, *t));
  size_t commas = 0;
  for (const char *p = list; *p; p++)
    commas += *p == ',';
  KF_CHECK(commas + 1 == n);
}

KF_TEST(arch__predicates_read_the_parsed_capability) {
  KF_CHECK(kf_arch_sm("sm_100f") == 100);
  KF_CHECK(kf_arch_sm("sm_90a") == 90);
  KF_CHECK(kf_arch_sm("sm_75") == 75);
  KF_CHECK(kf_arch_sm("gfx942") == 0);
  KF_CHECK(kf_arch_sm("sm_9x") == 0);
  KF_CHECK(!kf_arch_has_mma("sm_75"));
  KF_CHECK(kf_arch_has_mma("sm_80"));
  KF_CHECK(kf_arch_has_mma("sm_121f"));
  KF_CHECK(!kf_arch_has_mma("gfx950"));
  KF_CHECK(kf_arch_is_hip("gfx942:xnack-"));
  KF_CHECK(!kf_arch_is_hip("sm_90a"));
}

/* A block's shared memory (AMD's LDS): what decides whether a layer kernel
 * runs two attention items side by side (plan.c). */
KF_TEST(arch__block_shared_memory_per_vendor_and_generation) {
  KF_CHECK(kf_arch_block_shared_max("sm_90a") == 227 * 1024);
  KF_CHECK(kf_arch_block_shared_max("sm_100f") == 227 * 1024);
  KF_CHECK(kf_arch_block_shared_max("sm_80") == 163 * 1024);
  KF_CHECK(kf_arch_block_shared_max("sm_89") == 99 * 1024);
  KF_CHECK(kf_arch_block_shared_max("sm_120a") == 99 * 1024);
  KF_CHECK(kf_arch_block_shared_max("sm_75") == 64 * 1024);
  KF_CHECK(kf_arch_block_shared_max("gfx90a") == 64 * 1024);
  KF_CHECK(kf_arch_block_shared_max("gfx942:xnack-") == 64 * 1024);
  KF_CHECK(kf_arch_block_shared_max("gfx950") == 160 * 1024);
  KF_CHECK(kf_arch_block_shared_max("gfx1100") == 64 * 1024);
  KF_CHECK(kf_arch_block_shared_max("sm_9x") == 0);
}

/* A processor newer than the parser's LLVM is parsed as an older one of its
 * generation; one it knows, and any sm_* arch, as itself. */
KF_TEST(arch__newer_gfx_processors_are_parsed_as_an_older_one_by_an_older_llvm) {
  KF_CHECK(kf_arch_first_llvm("gfx950") == 20);
  KF_CHECK(kf_arch_first_llvm("gfx942:xnack-") == 17);
  KF_CHECK(kf_arch_first_llvm("gfx90a") == 0);
  KF_CHECK(kf_arch_first_llvm("sm_100a") == 0);
  KF_CHECK_STR_EQ(kf_arch_parse_as("gfx950", 16), "gfx940");
  KF_CHECK_STR_EQ(kf_arch_parse_as("gfx950", 19), "gfx940");
  KF_CHECK_STR_EQ(kf_arch_parse_as("gfx950", 20), "gfx950");
  KF_CHECK_STR_EQ(kf_arch_parse_as("gfx942:xnack-", 16), "gfx940");
  KF_CHECK_STR_EQ(kf_arch_parse_as("gfx942:xnack-", 17), "gfx942:xnack-");
  KF_CHECK_STR_EQ(kf_arch_parse_as("gfx1201", 16), "gfx1102");
  KF_CHECK_STR_EQ(kf_arch_parse_as("gfx90a", 16), "gfx90a");
  KF_CHECK_STR_EQ(kf_arch_parse_as("sm_100a", 16), "sm_100a");
}

/* nvcc builds each known sm_* name for its own variant: the virtual
 * architecture of the same letter, and the target macros that say so. */
KF_TEST(arch__nvcc_builds_every_known_cuda_arch_as_its_variant) {
  kf_toolchain *tc = kf_toolchain_get(KF_BACKEND_CUDA);
  if (tc->error)
    fx_die("nvcc: %s", tc->error);
  int built = 0, family = 0;
  for (const char *const *t = kf_arch_table; *t; t++) {
    rt_arch a;
    if (rt_arch_parse(*t, &a) != 0 || a.kind != RT_ARCH_CUDA)
      continue;
    const char *why = kf_toolchain_check_arch(tc, *t);
    if (why) {
      fprintf(stderr, "not built here: %s\n", why);
      continue;
    }
    const char *letter = a.variant == RT_ARCH_SPECIFIC ? "a"
                         : a.variant == RT_ARCH_FAMILY ? "f"
                                                       : "";
    kf_strv dirs = {0}, args = {0}, flags = {0};
    kf_toolchain_compile_args(tc, *t, &dirs, &args);
    char *gencode = kf_xasprintf("-gencode=arch=compute_%d%s,code=%s", a.code, letter, *t);
    KF_CHECK(kf_strv_contains(&args, gencode));
    char *err = NULL;
    KF_CHECK(kf_toolchain_device_flags(tc, *t, &args, &flags, &err) == 0);
    if (err)
      fprintf(stderr, "%s: %s\n", *t, err);
    char *arch_macro = kf_xasprintf("-D__CUDA_ARCH__=%d", a.code * 10);
    char *specific = kf_xasprintf("-D__CUDA_ARCH_SPECIFIC__=%d", a.code * 10);
    char *fam = kf_xasprintf("-D__CUDA_ARCH_FAMILY_SPECIFIC__=%d", a.code * 10);
    KF_CHECK(kf_strv_contains(&flags, arch_macro));
    KF_CHECK(kf_strv_contains(&flags, specific) == (a.variant == RT_ARCH_SPECIFIC));
    /* an arch-specific target has its family's features too */
    KF_CHECK(kf_strv_contains(&flags, fam) == (a.variant != RT_ARCH_PLAIN));
    built++;
    family += a.variant == RT_ARCH_FAMILY;
    free(arch_macro);
    free(specific);
    free(fam);
    free(err);
    free(gencode);
    kf_strv_free(&dirs);
    kf_strv_free(&args);
    kf_strv_free(&flags);
  }
  KF_CHECK(built > 0);
  KF_CHECK(family > 0);
}

KF_TEST_MAIN()
