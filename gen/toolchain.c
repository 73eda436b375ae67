/* toolchain.c: probing nvcc and hipcc. The identity (what enters every key)
 * is the compiler's own version text, the host compiler's version and the
 * environment variables the compiler reads; never a path on this machine. */
#define _GNU_SOURCE
#include "toolchain.h"

#include "amdgpu.h"
#include "arch.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

/* Environment variables that change what the compilers do. */
static const char *const cuda_env[] = {"NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "NVCC_CCBIN",
                                       NULL};
static const char *const hip_env[] = {"HIPCC_COMPILE_FLAGS_APPEND",
                                      "HIPCC_LINK_FLAGS_APPEND",
                                      "HIP_CLANG_PATH",
                                      "HIP_PLATFORM",
                                      "HIP_PATH",
                                      "ROCM_PATH",
                                      "HIP_DEVICE_LIB_PATH",
                                      "DEVICE_LIB_PATH",
                                      "HIP_COMPILER",
                                      "HIP_RUNTIME",
                                      "HIPCC_VERBOSE",
                                      NULL};

static char *find_on_path(const char *name) {
  const char *path = getenv("PATH");
  if (!path)
    return NULL;
  char *copy = kf_xstrdup(path);
  char *save = NULL;
  for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    char *p = kf_path_join(d, name);
    if (access(p, X_OK) == 0) {
      free(copy);
      return p;
    }
    free(p);
  }
  free(copy);
  return NULL;
}

static char *first_line(const char *s) {
  const char *nl = strchr(s, '\n');
  return nl ? kf_xstrndup(s, (size_t)(nl - s)) : kf_xstrdup(s);
}

static char *trim_copy(const char *s) {
  while (isspace((unsigned char)*s))
    s++;
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1]))
    n--;
  return kf_xstrndup(s, n);
}

/* The version lines of a compiler's --version output, without banners that
 * carry build dates only ("Copyright"). */
static char *version_text(const char *exe, const char *flag) {
  char *out = NULL;
  char *argv[] = {(char *)exe, (char *)flag, NULL};
  int rc = kf_run_capture(argv, &out);
  if (rc != 0 || !out) {
    free(out);
    return NULL;
  }
  kf_buf b = {0};
  char *save = NULL;
  for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    /* keep what names the version; drop banners, install paths and noise
     * that helper scripts print on stderr */
    if (!strstr(line, "version") && !strstr(line, "release") && strncmp(line, "Build", 5) != 0 &&
        strncmp(line, "Target:", 7) != 0)
      continue;
    char *t = trim_copy(line);
    if (*t)
      kf_buf_printf(&b, "%s%s", b.len ? "; " : "", t);
    free(t);
  }
  free(out);
  return kf_buf_take(&b);
}

static void add_env_identity(kf_toolchain *tc, const char *const *names) {
  for (const char *const *n = names; *n; n++) {
    const char *v = getenv(*n);
    /* "=value" when set, so that a variable set to "unset" differs from one
     * that is not set */
    kf_strv_push_owned(&tc->identity,
                       v ? kf_xasprintf("env.%s==%s", *n, v) : kf_xasprintf("env.%s unset", *n));
  }
}

/* A compiler named by KFORGE_NVCC / KFORGE_HIPCC (var): NULL, with *error
 * saying so, when the path it gives, or the name on PATH, does not exist. */
static char *forced_compiler(const char *var, const char *value, char **error) {
  char *on_path = strchr(value, '/') ? NULL : find_on_path(value);
  if (strchr(value, '/') ? access(value, F_OK) != 0 : !on_path) {
    *error = kf_xasprintf("%s: %s: not found%s", var, value, strchr(value, '/') ? "" : " on PATH");
    return NULL;
  }
  free(on_path);
  return kf_xstrdup(value);
}

/* How one backend's compiler driver is found and recognised. */
typedef struct {
  const char *var;          /* the environment variable that names it */
  const char *name;         /* looked up on PATH */
  const char *default_path; /* tried last */
  const char *not_found;    /* the reason when none is found, with the fix */
  const char *answer;       /* a word its --version output contains ("" for any) */
} compiler_spec;

static const compiler_spec nvcc_spec = {
    "KFORGE_NVCC", "nvcc", "/usr/local/cuda/bin/nvcc",
    "nvcc not found (set KFORGE_NVCC, put nvcc on PATH, or install CUDA at /usr/local/cuda)",
    "release"};
static const compiler_spec hipcc_spec = {
    "KFORGE_HIPCC", "hipcc", "/opt/rocm/bin/hipcc",
    "hipcc not found (set KFORGE_HIPCC, put hipcc on PATH, or install ROCm: apt-get install "
    "hipcc libamdhip64-dev)",
    ""};

/* Asks exe (owned by tc from here) its version and records it:
 * tc->compiler, tc->prefix (the install the driver lives in: <prefix>/bin)
 * and the identity's compiler record. Returns the version text (caller
 * frees), or NULL with tc->error set when --version does not contain
 * `answer` (what `name` answers). */
static char *identify(kf_toolchain *tc, char *exe, const char *name, const char *answer) {
  tc->compiler = exe;
  char *ver = version_text(exe, "--version");
  if (!ver || !*ver || !strstr(ver, answer)) {
    tc->error = kf_xasprintf("%s --version did not answer like %s", exe, name);
    free(ver);
    return NULL;
  }
  kf_strv_push_owned(&tc->identity, kf_xasprintf("compiler=%s", ver));
  char real[PATH_MAX];
  if (realpath(exe, real)) {
    char *bin = kf_path_dirname(real);
    tc->prefix = kf_path_dirname(bin);
    free(bin);
  }
  return ver;
}

/* Finds the compiler (its variable, then PATH, then the default path) and
 * identifies it. Returns the version text (caller frees), or NULL with
 * tc->error set. */
static char *find_compiler(kf_toolchain *tc, const compiler_spec *c) {
  const char *forced = getenv(c->var);
  char *exe =
      forced && *forced ? forced_compiler(c->var, forced, &tc->error) : find_on_path(c->name);
  if (tc->error)
    return NULL;
  if (!exe && access(c->default_path, X_OK) == 0)
    exe = kf_xstrdup(c->default_path);
  if (!exe) {
    tc->error = kf_xstrdup(c->not_found);
    return NULL;
  }
  return identify(tc, exe, c->name, c->answer);
}

static void probe_cuda(kf_toolchain *tc) {
  char *ver = find_compiler(tc, &nvcc_spec);
  if (!ver)
    return;
  const char *rel = strstr(ver, "release ");
  tc->short_name =
      rel ? kf_xasprintf("CUDA %.*s", (int)strcspn(rel + 8, ","), rel + 8) : kf_xstrdup("nvcc");
  free(ver);
  /* the host compiler nvcc runs: NVCC_CCBIN, else gcc on PATH */
  const char *ccbin = getenv("NVCC_CCBIN");
  char *host = version_text(ccbin && *ccbin ? ccbin : "gcc", "--version");
  char *host_line = host ? first_line(host) : kf_xstrdup("unknown");
  kf_strv_push_owned(&tc->identity, kf_xasprintf("host_compiler=%s", host_line));
  free(host);
  free(host_line);
  add_env_identity(tc, cuda_env);
}

/* What a HIP driver's version text makes of tc: hipcc ("HIP version: …",
 * then its clang's) or a plain clang ("clang version …"), which builds with
 * -nogpulib. */
static void describe_hip(kf_toolchain *tc, const char *ver) {
  const char *hv = strstr(ver, "HIP version: ");
  const char *cv = strstr(ver, "clang version ");
  tc->plain_clang = !hv && cv;
  if (tc->plain_clang)
    tc->short_name = kf_xasprintf("clang %.*s", (int)strcspn(cv + 14, "; "), cv + 14);
  else
    tc->short_name =
        kf_xasprintf("HIP %.*s, clang %.*s", hv ? (int)strcspn(hv + 13, "; ") : 1,
                     hv ? hv + 13 : "?", cv ? (int)strcspn(cv + 14, "; ") : 1, cv ? cv + 14 : "?");
  tc->readelf = kf_amdgpu_find_readelf(cv ? atoi(cv + 14) : 0);
  add_env_identity(tc, hip_env);
}

static void probe_hip(kf_toolchain *tc) {
  char *ver = find_compiler(tc, &hipcc_spec);
  if (!ver)
    return;
  describe_hip(tc, ver);
  free(ver);
}

kf_toolchain *kf_toolchain_get(int backend) {
  static kf_toolchain *cached[2];
  if (!cached[backend]) {
    kf_toolchain *tc = kf_xcalloc(1, sizeof *tc);
    tc->backend = backend;
    if (backend == KF_BACKEND_CUDA)
      probe_cuda(tc);
    else
      probe_hip(tc);
    cached[backend] = tc;
  }
  return cached[backend];
}

/* The newest clang-N (N >= 17, which targets gfx942) on PATH, or NULL
 * (caller frees). */
static char *newest_clang(void) {
  for (int n = 40; n >= 17; n--) {
    char name[16];
    snprintf(name, sizeof name, "clang-%d", n);
    char *p = find_on_path(name);
    if (p)
      return p;
  }
  return NULL;
}

/* The HIP compilers, in the order they are tried for an arch: hipcc
 * (KFORGE_HIPCC, PATH, /opt/rocm), then, unless KFORGE_HIPCC names the
 * one compiler to use, the newest clang-N on PATH as a plain HIP driver. */
static size_t hip_candidates(kf_toolchain ***out) {
  static kf_toolchain *list[2];
  static size_t n;
  if (!n) {
    list[n++] = kf_toolchain_get(KF_BACKEND_HIP);
    const char *forced = getenv("KFORGE_HIPCC");
    char *clang = forced && *forced ? NULL : newest_clang();
    if (clang) {
      kf_toolchain *tc = kf_xcalloc(1, sizeof *tc);
      tc->backend = KF_BACKEND_HIP;
      char *ver = identify(tc, clang, "clang", "clang version");
      if (ver)
        describe_hip(tc, ver);
      free(ver);
      list[n++] = tc;
    }
  }
  *out = list;
  return n;
}

kf_toolchain *kf_toolchain_for_arch(const char *arch, const char **why) {
  if (!kf_arch_is_hip(arch)) {
    kf_toolchain *tc = kf_toolchain_get(KF_BACKEND_CUDA);
    if (why)
      *why = kf_toolchain_check_arch(tc, arch);
    return tc;
  }
  kf_toolchain **list;
  size_t n = hip_candidates(&list);
  for (size_t i = 0; i < n; i++)
    if (!kf_toolchain_check_arch(list[i], arch)) {
      if (why)
        *why = NULL;
      return list[i];
    }
  if (why) {
    /* every compiler tried, each with its reason, once per arch */
    static kf_strv reasons;
    const char *hit = NULL;
    size_t alen = strlen(arch);
    for (size_t i = 0; i < reasons.n && !hit; i++)
      if (!strncmp(reasons.v[i], arch, alen) && reasons.v[i][alen] == '\n')
        hit = reasons.v[i] + alen + 1;
    if (!hit) {
      kf_buf b = {0};
      kf_buf_printf(&b, "%s\n", arch);
      if (n > 1)
        kf_buf_printf(&b, "no installed HIP compiler can build for %s: ", arch);
      for (size_t i = 0; i < n; i++)
        kf_buf_printf(&b, "%s%s", i ? "; " : "", kf_toolchain_check_arch(list[i], arch));
      int llvm = kf_arch_first_llvm(arch);
      if (llvm > 0)
        kf_buf_printf(&b, " (%.*s needs LLVM %d or later%s)", (int)strcspn(arch, ":"), arch, llvm,
                      llvm >= 20 ? ", as in ROCm 6.4 or later" : "");
      kf_strv_push_owned(&reasons, kf_buf_take(&b));
      hit = reasons.v[reasons.n - 1] + alen + 1;
    }
    *why = hit;
  }
  return list[0];
}

static const char *cache_get(const kf_strv *c, const char *key) {
  size_t n = strlen(key);
  for (size_t i = 0; i < c->n; i++)
    if (!strncmp(c->v[i], key, n) && c->v[i][n] == '\n')
      return c->v[i] + n + 1;
  return NULL;
}

/* nvcc's target options for an arch name: the virtual architecture of the
 * same capability and variant, and the name itself as the real one
 * (sm_90a -> compute_90a/sm_90a, sm_100f -> compute_100f/sm_100f). */
static char *cuda_gencode(const char *arch) {
  rt_arch a;
  rt_arch_parse(arch, &a); /* a known name: the model's loader checked it */
  return kf_xasprintf("-gencode=arch=compute_%d%s,code=%s", a.code,
                      a.variant == RT_ARCH_SPECIFIC ? "a"
                      : a.variant == RT_ARCH_FAMILY ? "f"
                                                    : "",
                      a.base);
}

const char *kf_toolchain_check_arch(kf_toolchain *tc, const char *arch) {
  if (tc->error)
    return tc->error;
  const char *hit = cache_get(&tc->arch_cache, arch);
  if (hit)
    return *hit ? hit : NULL;
  char *reason = NULL;
  char *out = NULL;
  if (tc->backend == KF_BACKEND_CUDA) {
    /* nvcc lists the real architectures it can build for */
    char *argv[] = {tc->compiler, "--list-gpu-code", NULL};
    int rc = kf_run_capture(argv, &out);
    /* it lists sm_90, not the arch-specific sm_90a / family sm_100f forms:
     * look for the plain name of the same capability */
    rt_arch a;
    char *want = rt_arch_parse(arch, &a) == 0 ? kf_xasprintf("sm_%d", a.code) : kf_xstrdup(arch);
    if (rc == 0 && out) {
      int found = 0;
      char *save = NULL;
      for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        char *t = trim_copy(l);
        found |= !strcmp(t, want);
        free(t);
      }
      if (!found)
        reason = kf_xasprintf("%s (%s) cannot build for %s: it is not in `nvcc --list-gpu-code`; "
                              "a newer CUDA toolkit is needed",
                              tc->compiler, tc->short_name, arch);
    }
    free(want);
  } else {
    /* hipcc's clang: ask it to compile nothing for the target. Without
     * -nogpulib the driver also looks for the target's device library, which
     * a distribution's ROCm may lack for a target its clang knows. */
    char *target = kf_xasprintf("--offload-arch=%s", arch);
    char *argv[] = {tc->compiler, "-x",   "hip",       "--cuda-device-only",
                    "-E",         target, "/dev/null", "-o",
                    "/dev/null",  NULL,   NULL};
    if (tc->plain_clang) /* it builds without device libraries */
      argv[9] = "-nogpulib";
    int rc = kf_run_capture(argv, &out);
    if (rc != 0) {
      /* clang's own words, e.g. "invalid target ID 'gfx950'" or "cannot find
       * ROCm device library for gfx1100" */
      const char *e = out ? strstr(out, "error: ") : NULL;
      char *line = e ? kf_xstrndup(e + 7, strcspn(e + 7, ";\n")) : kf_xstrdup("no reason given");
      const char *need = strstr(line, "device library")
                             ? "its ROCm installation has no device library for this target"
                         : tc->plain_clang ? "a newer clang is needed"
                                           : "a newer ROCm toolchain is needed";
      reason = kf_xasprintf("%s (%s) cannot build for %s: %s (%s)", tc->compiler, tc->short_name,
                            arch, need, line);
      free(line);
    }
    free(target);
  }
  free(out);
  kf_strv_push_owned(&tc->arch_cache, kf_xasprintf("%s\n%s", arch, reason ? reason : ""));
  free(reason);
  const char *r = cache_get(&tc->arch_cache, arch);
  return r && *r ? r : NULL;
}

void kf_toolchain_compile_args(const kf_toolchain *tc, const char *arch,
                               const kf_strv *include_dirs, kf_strv *out) {
  kf_strv_push(out, "-std=c++17");
  kf_strv_push(out, "-O3");
  if (tc->backend == KF_BACKEND_CUDA) {
    kf_strv_push_owned(out, cuda_gencode(arch));
    kf_strv_push(out, "-cubin");
    kf_strv_push(out, "--ptxas-options=-v");
  } else {
    kf_strv_push_owned(out, kf_xasprintf("--offload-arch=%s", arch));
    if (tc->plain_clang) {
      /* the device code object itself (an ELF, no bundle), built without
       * device libraries: kf_portability.cuh defines the few functions of
       * theirs that the HIP headers call */
      kf_strv_push(out, "--offload-device-only");
      kf_strv_push(out, "--no-gpu-bundle-output");
      kf_strv_push(out, "-nogpulib");
      kf_strv_push(out, "-DKF_NO_DEVICE_LIBS");
    } else {
      kf_strv_push(out, "--genco");
    }
    kf_strv_push(out, "-Rpass-analysis=kernel-resource-usage");
  }
  for (size_t i = 0; i < include_dirs->n; i++)
    kf_strv_push_owned(out, kf_xasprintf("-I%s", include_dirs->v[i]));
}

/* Splits a command line as nvcc prints it (double quotes group). */
static void split_command(const char *s, kf_strv *out) {
  while (*s) {
    while (isspace((unsigned char)*s))
      s++;
    if (!*s)
      break;
    kf_buf w = {0};
    while (*s && !isspace((unsigned char)*s)) {
      if (*s == '"') {
        s++;
        while (*s && *s != '"') {
          if (*s == '\\' && s[1])
            s++;
          kf_buf_add(&w, s++, 1);
        }
        if (*s == '"')
          s++;
      } else {
        kf_buf_add(&w, s++, 1);
      }
    }
    kf_strv_push_owned(out, kf_buf_take(&w));
  }
}

/* Keeps the preprocessing-relevant options of a compiler command line. */
static void keep_preprocessor_flags(const kf_strv *words, size_t start, kf_strv *flags) {
  static const char *const with_arg[] = {"-D",       "-U",         "-I", "-isystem", "-iquote",
                                         "-include", "-idirafter", "-x", NULL};
  for (size_t i = start; i < words->n; i++) {
    const char *w = words->v[i];
    int took = 0;
    for (const char *const *f = with_arg; *f; f++) {
      if (!strcmp(w, *f) && i + 1 < words->n) {
        kf_strv_push(flags, w);
        kf_strv_push(flags, words->v[++i]);
        took = 1;
        break;
      }
      size_t n = strlen(*f);
      if (!strncmp(w, *f, n) && w[n] && n == 2) {
        kf_strv_push(flags, w);
        took = 1;
        break;
      }
    }
    if (took)
      continue;
    if (!strncmp(w, "-std=", 5) || !strncmp(w, "-O", 2) || !strcmp(w, "-m64") ||
        !strncmp(w, "-f", 2) || !strncmp(w, "--cuda-", 7) || !strncmp(w, "--offload-arch=", 15) ||
        !strcmp(w, "-nogpulib") || !strncmp(w, "--rocm-path=", 12) || !strncmp(w, "--hip-", 6))
      kf_strv_push(flags, w);
    else if (!strcmp(w, "-o"))
      i++;
  }
}

int kf_toolchain_device_flags(kf_toolchain *tc, const char *arch, const kf_strv *compile_args,
                              kf_strv *flags, char **err) {
  XXH3_state_t *st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, arch, strlen(arch) + 1);
  for (size_t i = 0; i < compile_args->n; i++)
    XXH3_64bits_update(st, compile_args->v[i], strlen(compile_args->v[i]) + 1);
  char key[17];
  kf_hex64(XXH3_64bits_digest(st), key);
  XXH3_freeState(st);
  const char *hit = cache_get(&tc->pass_cache, key);
  if (hit) {
    split_command(hit, flags);
    return 0;
  }
  kf_strv argv = {0};
  kf_strv_push(&argv, tc->compiler);
  if (tc->backend == KF_BACKEND_CUDA)
    kf_strv_push(&argv, "--dryrun");
  else
    kf_strv_push(&argv, "-###");
  for (size_t i = 0; i < compile_args->n; i++)
    kf_strv_push(&argv, compile_args->v[i]);
  kf_strv_push(&argv, "-o");
  kf_strv_push(&argv, "/dev/null");
  /* hipcc's driver wants the input to exist; an empty one will do. It
   * lives in a private directory that is also the compiler's TMPDIR: clang
   * -### makes temporary directories named after its input there. */
  const char *tmpdir = getenv("TMPDIR");
  char *dir = kf_xasprintf("%s/kforge-probe-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
  if (!mkdtemp(dir)) {
    *err = kf_xasprintf("cannot create a directory for the device-pass probe: %s", strerror(errno));
    free(dir);
    kf_strv_free(&argv);
    return -1;
  }
  char *probe =
      kf_xasprintf("%s/kforge_probe.%s", dir, tc->backend == KF_BACKEND_CUDA ? "cu" : "hip");
  int pfd = open(probe, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (pfd >= 0)
    close(pfd);
  kf_strv_push_owned(&argv, probe);
  kf_strv_push_owned(&argv, NULL);
  char *tmp_env = kf_xasprintf("TMPDIR=%s", dir);
  char *env[] = {tmp_env, NULL};
  char *out = NULL;
  int rc = kf_run_capture_env(argv.v, env, &out);
  argv.n--; /* the NULL terminator */
  kf_strv_free(&argv);
  free(tmp_env);
  kf_remove_tree(dir);
  free(dir);
  kf_strv words = {0};
  int found = 0;
  if (out) {
    char *save = NULL;
    for (char *line = strtok_r(out, "\n", &save); line && !found;
         line = strtok_r(NULL, "\n", &save)) {
      if (tc->backend == KF_BACKEND_CUDA) {
        /* nvcc: "#$ gcc -D__CUDA_ARCH__=900 … -E -x c++ … probe.cu -o …" */
        if (strncmp(line, "#$ ", 3) != 0 || !strstr(line, " -E ") ||
            !strstr(line, "-D__CUDA_ARCH__="))
          continue;
        split_command(line + 3, &words);
        if (words.n && !tc->host_cc)
          tc->host_cc = kf_xstrdup(words.v[0]);
        found = 1;
      } else {
        /* clang -###: the cc1 line of the device pass */
        if (!strstr(line, "\"-cc1\"") || !strstr(line, "amdgcn-amd-amdhsa\"") ||
            !strstr(line, "\"-fcuda-is-device\""))
          continue;
        split_command(line, &words);
        found = 1;
      }
    }
  }
  free(out);
  if (!found) {
    *err = kf_xasprintf("could not find the device pass in `%s %s` (exit %d)", tc->compiler,
                        tc->backend == KF_BACKEND_CUDA ? "--dryrun" : "-###", rc);
    kf_strv_free(&words);
    return -1;
  }
  kf_strv kept = {0};
  if (tc->backend == KF_BACKEND_CUDA) {
    keep_preprocessor_flags(&words, 1, &kept);
  } else {
    /* cc1 spells target macros itself; replay as a HIP device-only parse */
    kf_strv_push(&kept, "-x");
    kf_strv_push(&kept, "hip");
    kf_strv_push_owned(&kept, kf_xasprintf("--offload-arch=%s", arch));
    kf_strv_push(&kept, "--cuda-device-only");
    kf_strv_push(&kept, "-nogpulib");
    for (size_t i = 1; i < words.n; i++) {
      const char *w = words.v[i];
      if ((!strcmp(w, "-D") || !strcmp(w, "-U") || !strcmp(w, "-I") ||
           !strcmp(w, "-internal-isystem") || !strcmp(w, "-include") ||
           !strcmp(w, "-internal-externc-isystem")) &&
          i + 1 < words.n) {
        const char *opt = !strncmp(w, "-internal", 9) ? "-isystem" : w;
        kf_strv_push(&kept, opt);
        kf_strv_push(&kept, words.v[++i]);
      } else if (!strncmp(w, "-D", 2) || !strncmp(w, "-I", 2) || !strncmp(w, "-std=", 5)) {
        kf_strv_push(&kept, w);
      }
    }
  }
  kf_strv_free(&words);
  kf_buf joined = {0};
  for (size_t i = 0; i < kept.n; i++) {
    kf_buf_puts(&joined, i ? " \"" : "\"");
    for (const char *p = kept.v[i]; *p; p++) {
      if (*p == '"' || *p == '\\')
        kf_buf_add(&joined, "\\", 1);
      kf_buf_add(&joined, p, 1);
    }
    kf_buf_puts(&joined, "\"");
    kf_strv_push(flags, kept.v[i]);
  }
  kf_strv_push_owned(&tc->pass_cache, kf_xasprintf("%s\n%s", key, joined.data ? joined.data : ""));
  kf_buf_free(&joined);
  kf_strv_free(&kept);
  return 0;
}

/* The output of `argv -dM -E … /dev/null` (argv NULL-free, consumed),
 * cached per argv. Returns it (caller frees), or NULL with *err set. */
static char *predefs_of(kf_toolchain *tc, kf_strv *argv, const char *lang, char **err) {
  XXH3_state_t *st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (size_t i = 0; i < argv->n; i++)
    XXH3_64bits_update(st, argv->v[i], strlen(argv->v[i]) + 1);
  char key[17];
  kf_hex64(XXH3_64bits_digest(st), key);
  XXH3_freeState(st);
  const char *hit = cache_get(&tc->predefs_cache, key);
  if (hit) {
    kf_strv_free(argv);
    return kf_xstrdup(hit);
  }
  kf_strv_push(argv, "-dM");
  kf_strv_push(argv, "-E");
  kf_strv_push(argv, "-x");
  kf_strv_push(argv, lang);
  kf_strv_push(argv, "/dev/null");
  kf_strv_push_owned(argv, NULL);
  char *out = NULL;
  int rc = kf_run_capture(argv->v, &out);
  argv->n--;
  if (rc != 0 || !out || !strstr(out, "#define __")) {
    *err = kf_xasprintf("cannot read the predefined macros of %s (exit %d)", argv->v[0], rc);
    kf_strv_free(argv);
    free(out);
    return NULL;
  }
  kf_strv_free(argv);
  kf_strv_push_owned(&tc->predefs_cache, kf_xasprintf("%s\n%s", key, out));
  return out;
}

/* Whether a flag changes the predefined macros: the standard, optimisation,
 * machine and feature flags. */
static int changes_predefs(const char *f) {
  return !strncmp(f, "-std=", 5) || !strncmp(f, "-O", 2) || !strcmp(f, "-m64") ||
         !strncmp(f, "-f", 2);
}

char *kf_toolchain_host_predefs(kf_toolchain *tc, const kf_strv *device_flags, char **err) {
  if (tc->backend != KF_BACKEND_CUDA)
    return NULL;
  kf_strv argv = {0};
  kf_strv_push(&argv, tc->host_cc ? tc->host_cc : "gcc");
  for (size_t i = 0; i < device_flags->n; i++)
    if (changes_predefs(device_flags->v[i]))
      kf_strv_push(&argv, device_flags->v[i]);
  char *out = predefs_of(tc, &argv, "c++", err);
  if (out && !strstr(out, "#define __GNUC__")) {
    *err = kf_xasprintf("%s did not predefine __GNUC__", tc->host_cc ? tc->host_cc : "gcc");
    free(out);
    return NULL;
  }
  return out;
}

char *kf_toolchain_hip_predefs(kf_toolchain *tc, const char *arch, const kf_strv *device_flags,
                               char **err) {
  kf_strv argv = {0};
  kf_strv_push(&argv, tc->compiler);
  kf_strv_push(&argv, "--cuda-device-only");
  kf_strv_push_owned(&argv, kf_xasprintf("--offload-arch=%s", arch));
  /* the target's macros, not those of the headers a HIP compile includes */
  kf_strv_push(&argv, "-nogpuinc");
  kf_strv_push(&argv, "-nogpulib");
  for (size_t i = 0; i < device_flags->n; i++)
    if (changes_predefs(device_flags->v[i]))
      kf_strv_push(&argv, device_flags->v[i]);
  return predefs_of(tc, &argv, "hip", err);
}

int kf_toolchain_covers(const kf_toolchain *tc, const char *abs_path) {
  /* the host's own headers (glibc, libstdc++, compiler resource dirs); not
   * /usr/local/include, where users install third-party libraries */
  static const char *const system_dirs[] = {"/usr/include", "/usr/lib/gcc", "/usr/lib/llvm-",
                                            "/usr/lib/clang", NULL};
  /* a distribution's compiler in /usr/bin does not make all of /usr its
   * install: the system dirs below cover what it ships */
  if (tc->prefix && strcmp(tc->prefix, "/usr") != 0 && kf_path_under(abs_path, tc->prefix))
    return 1;
  for (const char *const *d = system_dirs; *d; d++)
    if (!strncmp(abs_path, *d, strlen(*d)))
      return 1;
  return 0;
}
