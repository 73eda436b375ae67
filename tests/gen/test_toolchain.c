/* Tests of gen/toolchain.c: the compile command, the device pass's flags
 * that libclang replays (target macros, forced includes), the identity that
 * enters every key, and whether a toolchain can target an arch.
 *
 * The toolchain is probed once per process and cached, so every case that
 * needs another environment (a fake nvcc, NVCC_APPEND_FLAGS) runs in a fresh
 * process of this binary (FX_CHILD). Uses the real nvcc and hipcc. */
#include "gen_fixture.h"

#include "toolchain.h"

#include <dirent.h>

static int has(const kf_strv *v, const char *s) { return kf_strv_contains(v, s); }

/* Whether a is immediately followed by b in v. */
static int has_pair(const kf_strv *v, const char *a, const char *b) {
  for (size_t i = 0; i + 1 < v->n; i++)
    if (!strcmp(v->v[i], a) && !strcmp(v->v[i + 1], b))
      return 1;
  return 0;
}

static kf_toolchain *cuda(void) {
  kf_toolchain *tc = kf_toolchain_get(KF_BACKEND_CUDA);
  if (tc->error)
    fx_die("nvcc: %s", tc->error);
  return tc;
}

/* The device flags for arch with one include directory. */
static int device_flags_in(kf_toolchain *tc, const char *arch, const char *dir, kf_strv *flags) {
  kf_strv dirs = {0}, args = {0};
  kf_strv_push(&dirs, dir);
  kf_toolchain_compile_args(tc, arch, &dirs, &args);
  char *err = NULL;
  int r = kf_toolchain_device_flags(tc, arch, &args, flags, &err);
  if (r != 0)
    fprintf(stderr, "device flags for %s: %s\n", arch, err);
  free(err);
  kf_strv_free(&dirs);
  kf_strv_free(&args);
  return r;
}

static int device_flags(kf_toolchain *tc, const char *arch, kf_strv *flags) {
  return device_flags_in(tc, arch, "/kf-test/include dir", flags);
}

KF_TEST(toolchain__compile_args_for_cuda_and_hip) {
  kf_toolchain c = {0}, h = {0};
  c.backend = KF_BACKEND_CUDA;
  h.backend = KF_BACKEND_HIP;
  kf_strv dirs = {0}, ca = {0}, ha = {0};
  kf_strv_push(&dirs, "/a");
  kf_strv_push(&dirs, "/b");
  kf_toolchain_compile_args(&c, "sm_90a", &dirs, &ca);
  kf_toolchain_compile_args(&h, "gfx942:xnack-", &dirs, &ha);
  const char *want_c[] = {
      "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "--ptxas-options=-v",
      "-I/a",       "-I/b"};
  KF_CHECK(ca.n == 7);
  for (size_t i = 0; i < 7; i++)
    KF_CHECK_STR_EQ(ca.v[i], want_c[i]);
  KF_CHECK(has(&ha, "--offload-arch=gfx942:xnack-"));
  KF_CHECK(has(&ha, "--genco"));
  KF_CHECK_STR_EQ(ha.v[ha.n - 2], "-I/a");
  KF_CHECK_STR_EQ(ha.v[ha.n - 1], "-I/b");
  KF_CHECK(!has(&ha, "-nogpulib"));
  /* a plain clang: the device object alone, without device libraries */
  kf_toolchain p = {0};
  p.backend = KF_BACKEND_HIP;
  p.plain_clang = 1;
  kf_strv pa = {0};
  kf_toolchain_compile_args(&p, "gfx942", &dirs, &pa);
  const char *want_p[] = {"-std=c++17",
                          "-O3",
                          "--offload-arch=gfx942",
                          "--offload-device-only",
                          "--no-gpu-bundle-output",
                          "-nogpulib",
                          "-DKF_NO_DEVICE_LIBS",
                          "-Rpass-analysis=kernel-resource-usage",
                          "-I/a",
                          "-I/b"};
  KF_CHECK(pa.n == 10);
  for (size_t i = 0; i < 10 && i < pa.n; i++)
    KF_CHECK_STR_EQ(pa.v[i], want_p[i]);
  kf_strv_free(&pa);
  kf_strv_free(&dirs);
  kf_strv_free(&ca);
  kf_strv_free(&ha);
}

KF_TEST(toolchain__device_flags_for_sm_90a_define_cuda_arch_900) {
  kf_strv flags = {0};
  KF_CHECK(device_flags(cuda(), "sm_90a", &flags) == 0);
  KF_CHECK(has(&flags, "-D__CUDA_ARCH__=900"));
  KF_CHECK(has_pair(&flags, "-include", "cuda_runtime.h"));
  KF_CHECK(has(&flags, "-D__CUDA_ARCH_FEAT_SM90_ALL")); /* the 'a' of sm_90a */
  KF_CHECK(has(&flags, "-I/kf-test/include dir"));      /* ours, one word */
  KF_CHECK(has(&flags, "-D__CUDACC__"));
  KF_CHECK(!has(&flags, "-o"));
  kf_strv_free(&flags);
}

KF_TEST(toolchain__device_flags_for_sm_100a_define_cuda_arch_1000) {
  kf_strv flags = {0};
  KF_CHECK(device_flags(cuda(), "sm_100a", &flags) == 0);
  KF_CHECK(has(&flags, "-D__CUDA_ARCH__=1000"));
  KF_CHECK(!has(&flags, "-D__CUDA_ARCH__=900"));
  KF_CHECK(has_pair(&flags, "-include", "cuda_runtime.h"));
  kf_strv_free(&flags);
}

/* one `nvcc --dryrun` per distinct (arch, arguments) in a process */
KF_TEST(toolchain__device_flags_are_cached_per_arguments) {
  kf_toolchain *tc = cuda();
  kf_strv a = {0}, b = {0}, c = {0};
  size_t before = tc->pass_cache.n;
  KF_CHECK(device_flags_in(tc, "sm_90a", "/kf-test/cache-probe", &a) == 0);
  KF_CHECK(tc->pass_cache.n == before + 1);
  KF_CHECK(device_flags_in(tc, "sm_90a", "/kf-test/cache-probe", &b) == 0);
  KF_CHECK(tc->pass_cache.n == before + 1);
  KF_CHECK(a.n == b.n);
  for (size_t i = 0; i < a.n; i++)
    KF_CHECK_STR_EQ(a.v[i], b.v[i]);
  KF_CHECK(device_flags_in(tc, "sm_90a", "/kf-test/cache-probe-2", &c) == 0);
  KF_CHECK(tc->pass_cache.n == before + 2);
  KF_CHECK(has(&c, "-I/kf-test/cache-probe-2"));
  kf_strv_free(&a);
  kf_strv_free(&b);
  kf_strv_free(&c);
}

KF_TEST(toolchain__real_nvcc_accepts_the_arches_it_lists) {
  kf_toolchain *tc = cuda();
  KF_CHECK(kf_toolchain_check_arch(tc, "sm_90a") == NULL);
  KF_CHECK(kf_toolchain_check_arch(tc, "sm_90") == NULL);
  KF_CHECK(kf_toolchain_check_arch(tc, "sm_100a") == NULL);
  KF_CHECK(kf_toolchain_check_arch(tc, "sm_90a") == NULL); /* cached answer */
}

KF_TEST(toolchain__identity_names_versions_and_environment) {
  kf_toolchain *tc = cuda();
  KF_CHECK(tc->identity.n >= 2);
  KF_CHECK(!strncmp(tc->identity.v[0], "compiler=", 9));
  KF_CHECK_CONTAINS(tc->identity.v[0], "release ");
  int host = 0, env = 0;
  for (size_t i = 0; i < tc->identity.n; i++) {
    host |= !strncmp(tc->identity.v[i], "host_compiler=", 14);
    env |= !strncmp(tc->identity.v[i], "env.NVCC_APPEND_FLAGS", 21);
    KF_CHECK(!strstr(tc->identity.v[i], "/usr/local/cuda")); /* no install path */
  }
  KF_CHECK(host && env);
}

/* contracts.md: files inside the toolchain's own install are covered by its
 * identity; everything else of the closure is hashed. */
KF_TEST(toolchain__covers_its_install_and_the_system_headers_only) {
  kf_toolchain *tc = cuda();
  KF_CHECK(tc->prefix);
  char *inside = kf_xasprintf("%s/targets/x86_64-linux/include/cuda_runtime.h", tc->prefix);
  KF_CHECK(kf_toolchain_covers(tc, inside));
  char *sibling = kf_xasprintf("%s-other/include/x.h", tc->prefix);
  KF_CHECK(!kf_toolchain_covers(tc, sibling));
  KF_CHECK(kf_toolchain_covers(tc, "/usr/include/stdio.h"));
  KF_CHECK(!kf_toolchain_covers(tc, "/tmp/kf/templates/x.cuh"));
  KF_CHECK(!kf_toolchain_covers(tc, "/home/dev/kforge/templates/x.cuh"));
  free(inside);
  free(sibling);
}

/* /usr/local/include holds what users install themselves (CUTLASS, say); a
 * new version there must change the keys of kernels that include it. */
KF_TEST(toolchain__does_not_cover_user_installed_headers) {
  kf_toolchain *tc = cuda();
  KF_CHECK(!kf_toolchain_covers(tc, "/usr/local/include/cutlass/cutlass.h"));
}

/* ---- in fresh processes ---- */

/* Prints the CUDA identity, one "id=<line>" per line, and the error. */
FX_CHILD(print_identity) {
  kf_toolchain *tc = kf_toolchain_get(KF_BACKEND_CUDA);
  for (size_t i = 0; i < tc->identity.n; i++)
    printf("id=%s\n", tc->identity.v[i]);
  printf("error=%s\n", tc->error ? tc->error : "");
  return 0;
}

/* Prints "<arch>=<reason or ok>" for sm_100a, sm_90a and sm_80. */
FX_CHILD(print_cuda_arch_checks) {
  kf_toolchain *tc = kf_toolchain_get(KF_BACKEND_CUDA);
  const char *arches[] = {"sm_100a", "sm_90a", "sm_80"};
  for (int i = 0; i < 3; i++) {
    const char *why = kf_toolchain_check_arch(tc, arches[i]);
    printf("%s=%s\n", arches[i], why ? why : "ok");
  }
  return 0;
}

/* Computes the HIP device flags for gfx90a; prints "flags=<n>". */
FX_CHILD(probe_hip_device_flags) {
  kf_toolchain *tc = kf_toolchain_get(KF_BACKEND_HIP);
  kf_strv flags = {0};
  if (tc->error || device_flags(tc, "gfx90a", &flags) != 0)
    return 1;
  printf("flags=%zu\n", flags.n);
  kf_strv_free(&flags);
  return 0;
}

/* Prints "gfx90a=<reason or ok>". */
FX_CHILD(print_hip_arch_check) {
  kf_toolchain *tc = kf_toolchain_get(KF_BACKEND_HIP);
  const char *why = tc->error ? tc->error : kf_toolchain_check_arch(tc, "gfx90a");
  printf("gfx90a=%s\n", why ? why : "ok");
  return 0;
}

FX_CHILDREN(FX_CHILD_ENTRY(print_identity), FX_CHILD_ENTRY(print_cuda_arch_checks),
            FX_CHILD_ENTRY(probe_hip_device_flags), FX_CHILD_ENTRY(print_hip_arch_check))

/* The identity lines printed by a child with env, joined (caller frees). */
static char *identity_with(const char *const *env) {
  char *out = NULL;
  if (fx_run_child("print_identity", env, &out) != 0) {
    free(out);
    return NULL;
  }
  char *err = fx_line_value(out, "error");
  if (!err || *err) {
    free(err);
    free(out);
    return NULL;
  }
  free(err);
  return out;
}

/* Writes script as an executable `name` in a fresh directory, runs child
 * with `var`=<its path>, and returns what the child printed (caller frees);
 * *path gets the script's path when path is not NULL (caller frees). Dies
 * (failing the test) when the child does. */
static char *run_with_fake_compiler(const char *var, const char *name, const char *script,
                                    const char *child, char **path) {
  char *fake = fx_write(fx_tmpdir(), name, script);
  if (chmod(fake, 0755) != 0)
    fx_die("chmod %s: %s", fake, strerror(errno));
  char *env_var = kf_xasprintf("%s=%s", var, fake);
  const char *env[] = {env_var, NULL};
  char *out = NULL;
  if (fx_run_child(child, env, &out) != 0)
    fx_die("child %s failed:\n%s", child, out ? out : "");
  free(env_var);
  if (path)
    *path = fake;
  else
    free(fake);
  return out;
}

KF_TEST(toolchain__nvcc_append_flags_changes_the_identity) {
  const char *unset[] = {"NVCC_APPEND_FLAGS", "KFORGE_NVCC", NULL};
  const char *lineinfo[] = {"NVCC_APPEND_FLAGS=-lineinfo", "KFORGE_NVCC", NULL};
  const char *literal[] = {"NVCC_APPEND_FLAGS=unset", "KFORGE_NVCC", NULL};
  const char *empty[] = {"NVCC_APPEND_FLAGS=", "KFORGE_NVCC", NULL};
  char *a = identity_with(unset), *b = identity_with(lineinfo);
  char *c = identity_with(literal), *d = identity_with(empty);
  KF_CHECK(a && b && c && d);
  KF_CHECK(strcmp(a, b) != 0);
  KF_CHECK(strcmp(a, c) != 0); /* set to the word "unset" is not unset */
  KF_CHECK(strcmp(a, d) != 0); /* set but empty is not unset either */
  KF_CHECK(strcmp(b, c) != 0);
  KF_CHECK_CONTAINS(b, "-lineinfo");
  free(a);
  free(b);
  free(c);
  free(d);
}

/* The identity says what nvcc is, not where this machine keeps it. */
KF_TEST(toolchain__identity_does_not_depend_on_where_nvcc_was_found) {
  const char *via_default[] = {"KFORGE_NVCC", "PATH=/usr/bin:/bin", NULL};
  const char *via_forced[] = {"KFORGE_NVCC=/usr/local/cuda-13.0/bin/nvcc", "PATH=/usr/bin:/bin",
                              NULL};
  const char *via_path[] = {"KFORGE_NVCC", "PATH=/usr/local/cuda/bin:/usr/bin:/bin", NULL};
  if (!kf_path_exists("/usr/local/cuda-13.0/bin/nvcc"))
    fx_die("this test expects CUDA 13.0 at /usr/local/cuda-13.0");
  char *a = identity_with(via_default), *b = identity_with(via_forced),
       *c = identity_with(via_path);
  KF_CHECK(a && b && c);
  KF_CHECK_STR_EQ(a, b);
  KF_CHECK_STR_EQ(a, c);
  free(a);
  free(b);
  free(c);
}

/* A fake nvcc whose --list-gpu-code stops at sm_90: sm_100a is refused with
 * a reason naming it and the fix. */
KF_TEST(toolchain__check_arch_rejects_an_arch_nvcc_does_not_list) {
  char *out =
      run_with_fake_compiler("KFORGE_NVCC", "nvcc",
                             "#!/bin/sh\n"
                             "case \"$1\" in\n"
                             "--version) printf 'nvcc: NVIDIA (R) Cuda compiler driver\\n"
                             "Cuda compilation tools, release 12.2, V12.2.140\\n' ;;\n"
                             "--list-gpu-code) printf 'sm_80\\nsm_86\\nsm_89\\nsm_90\\n' ;;\n"
                             "*) exit 1 ;;\n"
                             "esac\n",
                             "print_cuda_arch_checks", NULL);
  char *sm100 = fx_line_value(out, "sm_100a");
  char *sm90 = fx_line_value(out, "sm_90a");
  char *sm80 = fx_line_value(out, "sm_80");
  KF_CHECK(sm100 && sm90 && sm80);
  KF_CHECK_CONTAINS(sm100, "cannot build for sm_100a");
  KF_CHECK_CONTAINS(sm100, "--list-gpu-code");
  KF_CHECK_CONTAINS(sm100, "a newer CUDA toolkit is needed");
  KF_CHECK_CONTAINS(sm100, "12.2"); /* names the toolkit it has */
  KF_CHECK_STR_EQ(sm90, "ok");
  KF_CHECK_STR_EQ(sm80, "ok");
  free(sm100);
  free(sm90);
  free(sm80);
  free(out);
}

KF_TEST(toolchain__a_compiler_that_is_not_nvcc_is_an_error) {
  char *fake = NULL;
  char *out =
      run_with_fake_compiler("KFORGE_NVCC", "nvcc", "#!/bin/sh\necho 'some other tool 1.0'\n",
                             "print_cuda_arch_checks", &fake);
  char *why = fx_line_value(out, "sm_90a");
  char *want = kf_xasprintf("%s --version did not answer like nvcc", fake);
  KF_CHECK_STR_EQ(why, want);
  free(want);
  free(why);
  free(out);
  const char *missing[] = {"KFORGE_NVCC=/nonexistent/nvcc", NULL};
  KF_CHECK(fx_run_child("print_cuda_arch_checks", missing, &out) == 0);
  why = fx_line_value(out, "sm_90a");
  KF_CHECK_CONTAINS(why, "/nonexistent/nvcc");
  free(why);
  free(out);
  free(fake);
}

/* ---- HIP ---- */

static kf_toolchain *hip(void) {
  kf_toolchain *tc = kf_toolchain_get(KF_BACKEND_HIP);
  if (tc->error)
    fx_die("hipcc: %s", tc->error);
  return tc;
}

KF_TEST(toolchain__hipcc_rejects_gfx950_saying_a_newer_rocm_is_needed) {
  const char *why = kf_toolchain_check_arch(hip(), "gfx950");
  KF_CHECK(why);
  KF_CHECK_CONTAINS(why, "cannot build for gfx950");
  KF_CHECK_CONTAINS(why, "a newer ROCm toolchain is needed");
  KF_CHECK_CONTAINS(why, "gfx950'"); /* clang's own words are kept */
}

KF_TEST(toolchain__hipcc_accepts_gfx90a) {
  kf_toolchain *tc = hip();
  KF_CHECK(kf_toolchain_check_arch(tc, "gfx90a") == NULL);
  KF_CHECK(kf_toolchain_check_arch(tc, "gfx90a:xnack-") == NULL);
}

/* A ROCm whose clang knows the target but that has no device library for it
 * (Debian's 5.2 and gfx1100): the real hipcc pointed at an empty library
 * directory when it only preprocesses, as the arch check does. */
KF_TEST(toolchain__hipcc_without_the_device_library_says_so) {
  const char *empty = fx_tmpdir();
  char *script = kf_xasprintf("#!/bin/sh\n"
                              "case \" $* \" in\n"
                              "  *\" -E \"*) exec %s --rocm-device-lib-path=%s \"$@\" ;;\n"
                              "esac\n"
                              "exec %s \"$@\"\n",
                              hip()->compiler, empty, hip()->compiler);
  char *out = run_with_fake_compiler("KFORGE_HIPCC", "hipcc", script, "print_hip_arch_check", NULL);
  char *why = fx_line_value(out, "gfx90a");
  KF_CHECK(why);
  KF_CHECK_CONTAINS(why, "cannot build for gfx90a");
  KF_CHECK_CONTAINS(why, "has no device library for this target");
  KF_CHECK_CONTAINS(why, "cannot find ROCm device library"); /* clang's own words */
  free(why);
  free(out);
  free(script);
}

KF_TEST(toolchain__hip_device_flags_replay_a_device_only_parse) {
  kf_toolchain *tc = hip();
  kf_strv flags = {0};
  KF_CHECK(device_flags(tc, "gfx90a", &flags) == 0);
  KF_CHECK(has_pair(&flags, "-x", "hip"));
  KF_CHECK(has(&flags, "--offload-arch=gfx90a"));
  KF_CHECK(has(&flags, "--cuda-device-only"));
  KF_CHECK(has(&flags, "-nogpulib"));
  KF_CHECK(has_pair(&flags, "-I", "/kf-test/include dir") || has(&flags, "-I/kf-test/include dir"));
  kf_strv_free(&flags);
}

/* A distribution's hipcc lives in /usr/bin: its "install" is not all of
 * /usr, and /usr/local/include is still the user's. */
KF_TEST(toolchain__hip_does_not_cover_user_installed_headers) {
  kf_toolchain *tc = hip();
  KF_CHECK(!kf_toolchain_covers(tc, "/usr/local/include/cutlass/cutlass.h"));
  KF_CHECK(!kf_toolchain_covers(tc, "/usr/src/myproject/templates/x.cuh"));
  KF_CHECK(kf_toolchain_covers(tc, "/usr/include/hip/hip_runtime.h"));
}

/* `clang -###` makes temporary directories named after its input; a probe
 * run once per build must not leave two behind in $TMPDIR every time. */
KF_TEST(toolchain__hip_device_pass_probe_leaves_nothing_behind) {
  const char *tmp = fx_tmpdir();
  char *env_tmp = kf_xasprintf("TMPDIR=%s", tmp);
  const char *env[] = {env_tmp, NULL};
  char *out = NULL;
  KF_CHECK(fx_run_child("probe_hip_device_flags", env, &out) == 0);
  char *n = fx_line_value(out, "flags");
  KF_CHECK(n && atoi(n) > 0);
  DIR *d = opendir(tmp);
  KF_CHECK(d);
  int entries = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      fprintf(stderr, "left in $TMPDIR: %s\n", e->d_name);
      entries++;
    }
  closedir(d);
  KF_CHECK(entries == 0);
  free(n);
  free(out);
  free(env_tmp);
}

KF_TEST(toolchain__hip_identity_names_the_compiler_version) {
  kf_toolchain *tc = hip();
  KF_CHECK(tc->identity.n > 1);
  KF_CHECK_CONTAINS(tc->identity.v[0], "clang version");
  int env = 0;
  for (size_t i = 0; i < tc->identity.n; i++)
    env |= !strncmp(tc->identity.v[i], "env.HIPCC_COMPILE_FLAGS_APPEND", 30);
  KF_CHECK(env);
}

KF_TEST_MAIN()
