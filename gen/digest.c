/* digest.c: include closure and token hashing through libclang, dependency
 * records for no-op builds, and the key records (see digest.h).
 *
 * Why libclang replaying the device pass: the closure must be the set of
 * files the compiler's device pass really reads for this target, with the
 * same -I order and target macros. nvcc's device pass is a plain C++
 * preprocessing whose flags `nvcc --dryrun` prints; libclang parses with
 * exactly those flags (toolchain.c), and its inclusion list is the closure. */
#define _GNU_SOURCE
#include "digest.h"
#include "arch.h"

#include "json.h"
#include "libclang.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <xxhash.h>

#define KEY_SCHEME "kforge-key-v1"

/* ---- records ---- */

void kf_records_add(kf_records *r, const char *tag, const char *name, const char *value) {
  r->v = kf_xpush(r->v, r->n, sizeof *r->v);
  r->v[r->n].tag = kf_xstrdup(tag);
  r->v[r->n].name = kf_xstrdup(name);
  r->v[r->n].value = kf_xstrdup(value);
  r->n++;
}

void kf_records_free(kf_records *r) {
  for (size_t i = 0; i < r->n; i++) {
    free(r->v[i].tag);
    free(r->v[i].name);
    free(r->v[i].value);
  }
  free(r->v);
  r->v = NULL;
  r->n = 0;
}

static void update_field(XXH3_state_t *st, const char *s) {
  uint64_t n = strlen(s);
  XXH3_128bits_update(st, &n, sizeof n);
  XXH3_128bits_update(st, s, n);
}

void kf_records_key(const kf_records *r, char out[33]) {
  XXH3_state_t *st = XXH3_createState();
  XXH3_128bits_reset(st);
  for (size_t i = 0; i < r->n; i++) {
    update_field(st, r->v[i].tag);
    update_field(st, r->v[i].name);
    update_field(st, r->v[i].value);
  }
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  kf_hex128(&h, out);
}

void kf_record_hash(const kf_record *rec, char out[17]) {
  kf_hex64(XXH3_64bits(rec->value, strlen(rec->value)), out);
}

/* ---- compile setup ---- */

static char *real_or_abs(const char *p) {
  char buf[PATH_MAX];
  if (realpath(p, buf))
    return kf_xstrdup(buf);
  return kf_path_absolute(p);
}

static void add_root(kf_compile_setup *cs, const char *dir, char *label) {
  char *r = real_or_abs(dir);
  if (kf_strv_contains(&cs->roots, r)) {
    free(r);
    free(label);
    return;
  }
  kf_strv_push_owned(&cs->roots, r);
  kf_strv_push_owned(&cs->labels, label);
}

void kf_compile_setup_init(kf_compile_setup *cs, const kf_instance *in, const kf_toolchain *tc,
                           const char *out_dir, const char *templates_dir,
                           const kf_strv *extra_template_dirs, const kf_strv *defines) {
  memset(cs, 0, sizeof *cs);
  int t = 0;
  for (size_t i = 0; i < in->model->template_dirs.n; i++)
    add_root(cs, in->model->template_dirs.v[i], kf_xasprintf("@tdir%d", t++));
  for (size_t i = 0; i < extra_template_dirs->n; i++)
    add_root(cs, extra_template_dirs->v[i], kf_xasprintf("@tdir%d", t++));
  add_root(cs, templates_dir, kf_xstrdup("@templates"));
  for (size_t i = 0; i < in->model->include_dirs.n; i++)
    add_root(cs, in->model->include_dirs.v[i], kf_xasprintf("@inc%zu", i));
  kf_toolchain_compile_args(tc, in->arch, &cs->roots, &cs->compile_args);
  for (size_t i = 0; defines && i < defines->n; i++)
    kf_strv_push_owned(&cs->compile_args, kf_xasprintf("-D%s", defines->v[i]));
  for (size_t i = 0; i < cs->compile_args.n; i++) {
    const char *a = cs->compile_args.v[i];
    char *k = NULL;
    if (!strncmp(a, "-I", 2))
      for (size_t r = 0; r < cs->roots.n && !k; r++)
        if (!strcmp(a + 2, cs->roots.v[r]))
          k = kf_xasprintf("-I%s", cs->labels.v[r]);
    kf_strv_push_owned(&cs->key_args, k ? k : kf_xstrdup(a));
  }
  char *out_abs = real_or_abs(out_dir);
  cs->source_path = kf_path_join(out_abs, in->rel_source);
  free(out_abs);
}

void kf_compile_setup_free(kf_compile_setup *cs) {
  kf_strv_free(&cs->roots);
  kf_strv_free(&cs->labels);
  kf_strv_free(&cs->compile_args);
  kf_strv_free(&cs->key_args);
  free(cs->source_path);
}

/* ---- digest state ---- */

struct kf_digest {
  char *deps_dir;
  int write_deps;
  CXIndex index;
  kf_strv absent_ok;             /* paths already seen absent in this run */
  kf_strv retokenised;           /* "path\nsize\nmtime\n<tokens>" checked this run */
  struct shared_closure *shared; /* closures parsed in this run */
  kf_closure_share share;        /* between machines (get NULL: none) */
};

kf_digest *kf_digest_new(const char *deps_dir, int write_deps) {
  kf_digest *d = kf_xcalloc(1, sizeof *d);
  d->deps_dir = deps_dir ? kf_xstrdup(deps_dir) : NULL;
  d->write_deps = write_deps;
  return d;
}

/* libclang, once the first parse has loaded it (every lc-> call below runs
 * after a get_index that succeeded) */
static const kf_libclang *lc;

/* The index, loading libclang first. Returns NULL with *err. */
static CXIndex get_index(kf_digest *d, char **err) {
  if (!lc && !(lc = kf_libclang_get(err)))
    return NULL;
  if (!d->index)
    d->index = lc->createIndex(0, 0);
  return d->index;
}

/* ---- tokens ---- */

/* Hashes a file's tokens, skipping comments. Whitespace does not count,
 * except where it changes meaning: the end of a preprocessor directive, and
 * the space between a macro's name and '(' (function-like or not). */
static void hash_file_tokens(CXTranslationUnit tu, CXFile file, char out[33]) {
  size_t size = 0;
  const char *text = lc->getFileContents(tu, file, &size);
  XXH3_state_t *st = XXH3_createState();
  XXH3_128bits_reset(st);
  if (text && size) {
    CXSourceLocation b = lc->getLocationForOffset(tu, file, 0);
    CXSourceLocation e = lc->getLocationForOffset(tu, file, (unsigned)size);
    CXToken *toks = NULL;
    unsigned n = 0;
    lc->tokenize(tu, lc->getRange(b, e), &toks, &n);
    int in_directive = 0, define_name_next = 0;
    unsigned prev_end = 0;
    unsigned prev_line = 0;
    for (unsigned i = 0; i < n; i++) {
      CXSourceRange r = lc->getTokenExtent(tu, toks[i]);
      unsigned off_b, off_e, line;
      lc->getSpellingLocation(lc->getRangeStart(r), NULL, &line, NULL, &off_b);
      lc->getSpellingLocation(lc->getRangeEnd(r), NULL, NULL, NULL, &off_e);
      /* a directive ends at a newline that no backslash continues */
      if (in_directive && i > 0) {
        for (unsigned o = prev_end; o < off_b && o < size; o++) {
          if (text[o] != '\n')
            continue;
          unsigned q = o;
          while (q > 0 && text[q - 1] == '\r')
            q--;
          if (q == 0 || text[q - 1] != '\\') {
            XXH3_128bits_update(st, "\0\n", 2);
            in_directive = 0;
            break;
          }
        }
      }
      CXTokenKind kind = lc->getTokenKind(toks[i]);
      if (kind == CXToken_Comment) {
        prev_end = off_e;
        continue;
      }
      CXString sp = lc->getTokenSpelling(tu, toks[i]);
      const char *s = lc->getCString(sp);
      if (!in_directive && !strcmp(s, "#") && (i == 0 || line != prev_line)) {
        in_directive = 1;
        XXH3_128bits_update(st, "\0#", 2);
      }
      if (define_name_next == 2 && !strcmp(s, "(") && off_b == prev_end)
        XXH3_128bits_update(st, "\0(", 2); /* function-like macro */
      define_name_next = define_name_next == 1 ? 2 : 0;
      if (in_directive && !strcmp(s, "define"))
        define_name_next = 1;
      uint32_t len = (uint32_t)strlen(s);
      XXH3_128bits_update(st, &len, sizeof len);
      XXH3_128bits_update(st, s, len);
      lc->disposeString(sp);
      prev_end = off_e;
      prev_line = line;
    }
    if (in_directive) /* the file ends the directive: as a newline would */
      XXH3_128bits_update(st, "\0\n", 2);
    lc->disposeTokens(tu, toks, n);
  }
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  kf_hex128(&h, out);
}

static const char *const lex_args[] = {"-x", "c++", "-std=c++17"};

/* Token hash of a single file, lexed on its own (no includes followed). */
static int hash_file_alone(kf_digest *d, const char *path, const char *text, size_t len,
                           char out[33]) {
  char *why = NULL;
  CXIndex index = get_index(d, &why);
  free(why); /* a parse, which comes first or next, reports it */
  if (!index)
    return -1;
  struct CXUnsavedFile uf = {path, text, (unsigned long)len};
  CXTranslationUnit tu = NULL;
  enum CXErrorCode ec = lc->parseTranslationUnit2(
      index, path, lex_args, 3, text ? &uf : NULL, text ? 1 : 0,
      CXTranslationUnit_SingleFileParse | CXTranslationUnit_Incomplete |
          CXTranslationUnit_SkipFunctionBodies | CXTranslationUnit_KeepGoing,
      &tu);
  if (ec != CXError_Success || !tu)
    return -1;
  CXFile f = lc->getFile(tu, path);
  if (!f) {
    lc->disposeTranslationUnit(tu);
    return -1;
  }
  hash_file_tokens(tu, f, out);
  lc->disposeTranslationUnit(tu);
  return 0;
}

/* ---- closure ---- */

typedef struct {
  char *path; /* realpath */
  char *name; /* rooted name: @templates/x.cuh */
  char tokens[33];
  long long size;
  long long mtime_ns;
} closure_file;

typedef struct {
  closure_file *files;
  size_t nfiles;
  kf_strv absent;
  char source_tokens[33];
} closure;

static void closure_free(closure *c) {
  for (size_t i = 0; i < c->nfiles; i++) {
    free(c->files[i].path);
    free(c->files[i].name);
  }
  free(c->files);
  kf_strv_free(&c->absent);
  memset(c, 0, sizeof *c);
}

static int stat_file(const char *path, long long *size, long long *mtime_ns) {
  struct stat st;
  if (stat(path, &st) != 0)
    return -1;
  *size = (long long)st.st_size;
  *mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
  return 0;
}

typedef struct {
  kf_digest *d;
  kf_toolchain *tc;
  const kf_compile_setup *cs;
  CXTranslationUnit tu;
  closure *c;
  const char *source_real;
  int failed;
  char *err;
} walk_ctx;

/* path relative to dir (both absolute and normalised), with "..". */
static char *relative_path(const char *dir, const char *path) {
  size_t common = 0, i = 0;
  for (; dir[i] && path[i] && dir[i] == path[i]; i++)
    if (dir[i] == '/')
      common = i;
  if (!dir[i] && path[i] == '/')
    common = i;
  kf_buf b = {0};
  for (const char *p = dir + common; *p; p++)
    if (*p == '/')
      kf_buf_puts(&b, "../");
  kf_buf_puts(&b, path + common + 1);
  return kf_buf_take(&b);
}

static const char *rooted_name(const kf_compile_setup *cs, const char *real, const char *src_dir,
                               char **owned) {
  for (size_t r = 0; r < cs->roots.n; r++) {
    const char *rel = kf_path_under(real, cs->roots.v[r]);
    if (rel) {
      *owned = kf_xasprintf("%s/%s", cs->labels.v[r], rel);
      return *owned;
    }
  }
  const char *rel = kf_path_under(real, src_dir);
  if (rel) {
    *owned = kf_xasprintf("@src/%s", rel);
    return *owned;
  }
  /* outside every root. System-wide places have the same path on every
   * machine; anything else (a checkout's "../shared/x.h") is named from the
   * nearest include root, so that no checkout path enters the key */
  if (!strncmp(real, "/usr/", 5) || !strncmp(real, "/opt/", 5)) {
    *owned = kf_xasprintf("@abs%s", real);
    return *owned;
  }
  char *best = NULL;
  for (size_t r = 0; r < cs->roots.n; r++) {
    char *rel = relative_path(cs->roots.v[r], real);
    char *name = kf_xasprintf("%s/%s", cs->labels.v[r], rel);
    free(rel);
    if (!best || strlen(name) < strlen(best)) {
      free(best);
      best = name;
    } else {
      free(name);
    }
  }
  *owned = best ? best : kf_xasprintf("@abs%s", real);
  return *owned;
}

/* The include name as spelled at the directive (between quotes or <>). */
static char *spelled_include(CXTranslationUnit tu, CXSourceLocation loc) {
  CXFile f;
  unsigned off;
  lc->getSpellingLocation(loc, &f, NULL, NULL, &off);
  if (!f)
    return NULL;
  size_t size;
  const char *text = lc->getFileContents(tu, f, &size);
  if (!text || off >= size)
    return NULL;
  const char *p = text + off;
  const char *end = text + size;
  /* the location points at the directive's file name or just before it */
  while (p < end && *p != '"' && *p != '<' && *p != '\n')
    p++;
  if (p >= end || *p == '\n')
    return NULL;
  char close = *p == '<' ? '>' : '"';
  const char *q = ++p;
  while (q < end && *q != close && *q != '\n')
    q++;
  if (q >= end || *q != close)
    return NULL;
  return kf_xstrndup(p, (size_t)(q - p));
}

static void visit_inclusion(CXFile included, CXSourceLocation *stack, unsigned depth,
                            CXClientData data) {
  walk_ctx *w = data;
  CXString fn = lc->getFileName(included);
  const char *name = lc->getCString(fn);
  char real[PATH_MAX];
  if (!name || !realpath(name, real)) {
    lc->disposeString(fn);
    return;
  }
  lc->disposeString(fn);
  char *src_dir = kf_path_dirname(w->source_real);
  /* negative entries: our include directories searched before the one that
   * matched, so that a header appearing there later forces a re-parse */
  if (depth > 0) {
    char *spelled = spelled_include(w->tu, stack[0]);
    if (spelled) {
      size_t sl = strlen(spelled);
      size_t rl = strlen(real);
      char *found_dir = NULL;
      if (rl > sl + 1 && !strcmp(real + rl - sl, spelled) && real[rl - sl - 1] == '/')
        found_dir = kf_xstrndup(real, rl - sl - 1);
      /* quoted includes look in the includer's directory first */
      CXFile inc_file;
      lc->getSpellingLocation(stack[0], &inc_file, NULL, NULL, NULL);
      kf_strv search = {0};
      if (inc_file) {
        CXString ifn = lc->getFileName(inc_file);
        char ireal[PATH_MAX];
        if (lc->getCString(ifn) && realpath(lc->getCString(ifn), ireal)) {
          char *idir = kf_path_dirname(ireal);
          if (!kf_toolchain_covers(w->tc, idir))
            kf_strv_push_owned(&search, idir);
          else
            free(idir);
        }
        lc->disposeString(ifn);
      }
      for (size_t r = 0; r < w->cs->roots.n; r++)
        kf_strv_push(&search, w->cs->roots.v[r]);
      for (size_t s = 0; s < search.n; s++) {
        if (found_dir && !strcmp(search.v[s], found_dir))
          break;
        char *cand = kf_path_join(search.v[s], spelled);
        if (!kf_strv_contains(&w->c->absent, cand) && !kf_path_exists(cand))
          kf_strv_push_owned(&w->c->absent, cand);
        else
          free(cand);
      }
      kf_strv_free(&search);
      free(found_dir);
      free(spelled);
    }
  }
  if (kf_toolchain_covers(w->tc, real) || !strcmp(real, w->source_real) || (depth == 0)) {
    free(src_dir);
    return;
  }
  for (size_t i = 0; i < w->c->nfiles; i++)
    if (!strcmp(w->c->files[i].path, real)) {
      free(src_dir);
      return;
    }
  closure_file cf = {0};
  cf.path = kf_xstrdup(real);
  char *owned = NULL;
  rooted_name(w->cs, real, src_dir, &owned);
  cf.name = owned;
  free(src_dir);
  if (stat_file(real, &cf.size, &cf.mtime_ns) != 0) {
    free(cf.path);
    free(cf.name);
    return;
  }
  hash_file_tokens(w->tu, included, cf.tokens);
  w->c->files = kf_xpush(w->c->files, w->c->nfiles, sizeof *w->c->files);
  w->c->files[w->c->nfiles++] = cf;
}

static int cmp_closure_file(const void *a, const void *b) {
  return strcmp(((const closure_file *)a)->name, ((const closure_file *)b)->name);
}

#define PREDEFS_PATH "/kforge-virtual/host-predefined-macros.h"

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void add_absent(closure *c, const char *dir, const char *name) {
  char *cand = kf_path_join(dir, name);
  if (!kf_strv_contains(&c->absent, cand) && !kf_path_exists(cand))
    kf_strv_push_owned(&c->absent, cand);
  else
    free(cand);
}

/* Every name a file mentions in #include, #include_next or __has_include:
 * where it does not exist on the search path (the file's own directory,
 * then the include roots), its appearance must be noticed. */
static void scan_include_names(const kf_compile_setup *cs, closure *c, const char *path,
                               const char *text) {
  char *dir = kf_path_dirname(path);
  for (const char *p = text; (p = strstr(p, "include")) != NULL; p += 7) {
    const char *q = p + 7;
    if (!strncmp(q, "_next", 5))
      q += 5;
    while (*q == ' ' || *q == '\t' || *q == '(')
      q++;
    if (*q != '"' && *q != '<')
      continue;
    char close = *q == '<' ? '>' : '"';
    const char *e = strchr(q + 1, close);
    const char *nl = strchr(q + 1, '\n');
    if (!e || (nl && nl < e) || e == q + 1 || e - q > 256)
      continue;
    char *name = kf_xstrndup(q + 1, (size_t)(e - q - 1));
    if (name[0] != '/') {
      add_absent(c, dir, name);
      for (size_t r = 0; r < cs->roots.n; r++)
        add_absent(c, cs->roots.v[r], name);
    }
    free(name);
  }
  free(dir);
}

/* The major version of the libclang that parses (16 for clang 16.0.6). */
static int libclang_major(void) {
  static int major = -1;
  if (major < 0) {
    CXString v = lc->getClangVersion();
    const char *t = lc->getCString(v);
    const char *p = t ? strstr(t, "version ") : NULL;
    major = p ? atoi(p + 8) : 0;
    lc->disposeString(v);
  }
  return major;
}

/* Parses the source like the device pass and collects its closure. */
static int parse_closure(kf_digest *d, const kf_instance *in, kf_toolchain *tc,
                         const kf_compile_setup *cs, closure *c, char **err) {
  CXIndex index = get_index(d, err);
  if (!index)
    return -1;
  kf_strv pass = {0};
  if (kf_toolchain_device_flags(tc, in->arch, &cs->compile_args, &pass, err) != 0)
    return -1;
  /* clang is not gcc: for nvcc, whose device pass is the host compiler's
   * preprocessor, drop clang's own macros and take the host compiler's
   * (from a header that exists only in memory) */
  kf_strv flags = {0};
  struct CXUnsavedFile uf[2] = {{cs->source_path, in->source, (unsigned long)in->source_len},
                                {PREDEFS_PATH, NULL, 0}};
  char *predefs = kf_toolchain_host_predefs(tc, &pass, err);
  if (tc->backend == KF_BACKEND_CUDA && !predefs) {
    kf_strv_free(&pass);
    return -1;
  }
  /* a gfx processor newer than this libclang (gfx942, gfx950 for clang 16):
   * parse as an older one of the same generation, with the real compiler's
   * macros for the arch (__gfx942__, its wavefront size) instead of ours */
  const char *parse_as = kf_arch_parse_as(in->arch, libclang_major());
  if (tc->backend == KF_BACKEND_HIP && strcmp(parse_as, in->arch) != 0) {
    predefs = kf_toolchain_hip_predefs(tc, in->arch, &pass, err);
    if (!predefs) {
      kf_strv_free(&pass);
      return -1;
    }
    char *target = kf_xasprintf("--offload-arch=%s", in->arch);
    for (size_t i = 0; i < pass.n; i++)
      if (!strcmp(pass.v[i], target)) {
        free(pass.v[i]);
        pass.v[i] = kf_xasprintf("--offload-arch=%s", parse_as);
      }
    free(target);
  }
  if (predefs) {
    kf_strv_push(&flags, "-undef");
    kf_strv_push(&flags, "-include");
    kf_strv_push(&flags, PREDEFS_PATH);
    uf[1].Contents = predefs;
    uf[1].Length = (unsigned long)strlen(predefs);
  }
  for (size_t i = 0; i < pass.n; i++)
    kf_strv_push(&flags, pass.v[i]);
  kf_strv_push(&flags, "-Wno-everything");
  kf_strv_free(&pass);
  long long t0 = now_ns();
  CXTranslationUnit tu = NULL;
  enum CXErrorCode ec = lc->parseTranslationUnit2(
      index, cs->source_path, (const char *const *)flags.v, (int)flags.n, uf, predefs ? 2 : 1,
      CXTranslationUnit_DetailedPreprocessingRecord | CXTranslationUnit_Incomplete |
          CXTranslationUnit_SkipFunctionBodies | CXTranslationUnit_KeepGoing,
      &tu);
  kf_strv_free(&flags);
  free(predefs);
  if (ec != CXError_Success || !tu) {
    *err = kf_xasprintf("libclang could not parse %s (error %d)", in->rel_source, (int)ec);
    return -1;
  }
  CXFile main_file = lc->getFile(tu, cs->source_path);
  if (!main_file) {
    lc->disposeTranslationUnit(tu);
    *err = kf_xasprintf("libclang lost the source %s", cs->source_path);
    return -1;
  }
  hash_file_tokens(tu, main_file, c->source_tokens);
  /* the source's own path may not exist yet (keys writes nothing) */
  char real[PATH_MAX];
  char *src_real = realpath(cs->source_path, real) ? kf_xstrdup(real) : kf_xstrdup(cs->source_path);
  walk_ctx w = {d, tc, cs, tu, c, src_real, 0, NULL};
  lc->getInclusions(tu, visit_inclusion, &w);
  /* names our files try to include, found or not (#include of a missing
   * header, __has_include): each becoming a file later re-parses */
  scan_include_names(cs, c, src_real, in->source);
  for (size_t i = 0; i < c->nfiles; i++) {
    size_t len;
    char *text = kf_read_file(c->files[i].path, &len);
    if (text)
      scan_include_names(cs, c, c->files[i].path, text);
    free(text);
    /* a file written since the parse began may not be what libclang read:
     * record no mtime, so that the next run checks its tokens again */
    if (c->files[i].mtime_ns >= t0)
      c->files[i].mtime_ns = 0;
  }
  free(src_real);
  /* a missing include is an error the compiler will report; the closure is
   * still what the compiler would read, so no error here */
  lc->disposeTranslationUnit(tu);
  if (c->nfiles > 1)
    qsort(c->files, c->nfiles, sizeof *c->files, cmp_closure_file);
  kf_strv_sort(&c->absent);
  return 0;
}

/* Sources that differ only outside preprocessor directives (kf_params
 * values, the entry's name and arguments) have the same include closure: the
 * generated source defines no macros, so nothing but its directive lines,
 * the compile arguments and its directory can change what it includes. One
 * parse per such class serves every width and model that shares it. */
struct shared_closure {
  uint64_t sig;
  closure c;
  struct shared_closure *next;
};

/* Hashes every line of source whose first non-blank character is '#' with
 * update (XXH3's 64- or 128-bit). */
static void hash_directives(XXH3_state_t *st, const char *source,
                            XXH_errorcode (*update)(XXH3_state_t *, const void *, size_t)) {
  const char *p = source;
  while (*p) {
    const char *eol = strchr(p, '\n');
    size_t n = eol ? (size_t)(eol - p) : strlen(p);
    const char *q = p;
    while (q < p + n && (*q == ' ' || *q == '\t'))
      q++;
    if (q < p + n && *q == '#')
      update(st, p, n + 1);
    p += n + (eol ? 1 : 0);
  }
}

static uint64_t closure_signature(const kf_instance *in, const kf_compile_setup *cs) {
  XXH3_state_t *st = XXH3_createState();
  XXH3_64bits_reset(st);
  char *dir = kf_path_dirname(cs->source_path);
  XXH3_64bits_update(st, dir, strlen(dir) + 1);
  free(dir);
  XXH3_64bits_update(st, in->arch, strlen(in->arch) + 1);
  for (size_t i = 0; i < cs->compile_args.n; i++)
    XXH3_64bits_update(st, cs->compile_args.v[i], strlen(cs->compile_args.v[i]) + 1);
  hash_directives(st, in->source, XXH3_64bits_update);
  uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

static void closure_copy(closure *dst, const closure *src) {
  memset(dst, 0, sizeof *dst);
  dst->files = kf_xcalloc(src->nfiles ? src->nfiles : 1, sizeof *dst->files);
  for (size_t i = 0; i < src->nfiles; i++) {
    dst->files[i] = src->files[i];
    dst->files[i].path = kf_xstrdup(src->files[i].path);
    dst->files[i].name = kf_xstrdup(src->files[i].name);
  }
  dst->nfiles = src->nfiles;
  for (size_t i = 0; i < src->absent.n; i++)
    kf_strv_push(&dst->absent, src->absent.v[i]);
  memcpy(dst->source_tokens, src->source_tokens, 33);
}

static int retokenised(kf_digest *d, const char *path, long long size, long long mtime,
                       char out[33]);

/* ---- closures shared between machines ----
 *
 * A closure class (closure_signature) keyed without anything of this
 * machine: the arch, the key's arguments (include roots as labels), the
 * toolchain identity, libclang's identity and the source's directive
 * lines. Its text names every file and every absent candidate by label
 * (rooted_name), with the files' token hashes. A builder takes it only when
 * every named file exists here with those tokens and every candidate is
 * still absent: the compiler then reads the same files in the same places
 * as on the machine that parsed, so the closure is what a parse here would
 * give. Anything else (a header edited since, another layout) and it
 * parses, and shares what it found. */

void kf_digest_set_share(kf_digest *d, const kf_closure_share *share) { d->share = *share; }

static void id_update(XXH3_state_t *st, const char *s) {
  XXH3_128bits_update(st, s, strlen(s) + 1);
}

/* libclang's identity, which lexes and preprocesses: the file kforge
 * opens (its name carries the full version on Debian, libclang-16.so.16.0.6)
 * without loading it. */
static void id_update_libclang(XXH3_state_t *st) { id_update(st, kf_libclang_name()); }

/* The shared name of a closure class: "closure-" and 32 hex digits. */
static void portable_id(const kf_instance *in, const kf_toolchain *tc, const kf_compile_setup *cs,
                        char out[41]) {
  XXH3_state_t *st = XXH3_createState();
  XXH3_128bits_reset(st);
  id_update(st, "kforge-closure-v1");
  id_update(st, in->arch);
  for (size_t i = 0; i < cs->key_args.n; i++)
    id_update(st, cs->key_args.v[i]);
  for (size_t i = 0; i < tc->identity.n; i++)
    id_update(st, tc->identity.v[i]);
  id_update_libclang(st);
  hash_directives(st, in->source, XXH3_128bits_update);
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  memcpy(out, "closure-", 8);
  kf_hex128(&h, out + 8);
}

/* The token hash of a text (a generated source, a header): shared under
 * "source-" and the hash of libclang's identity and the bytes (it is a
 * function of them), else lexed here and shared. Returns 0 or -1. */
static int tokens_of_text(kf_digest *d, const char *path, const char *text, size_t text_len,
                          char out[33]) {
  char name[41] = "";
  if (d->share.get) {
    XXH3_state_t *st = XXH3_createState();
    XXH3_128bits_reset(st);
    id_update(st, "kforge-source-v1");
    id_update_libclang(st);
    XXH3_128bits_update(st, text, text_len);
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    memcpy(name, "source-", 7);
    kf_hex128(&h, name + 7);
    size_t len = 0;
    char *got = d->share.get(d->share.ctx, name, &len);
    int ok = got && len == 32 && strspn(got, "0123456789abcdef") == 32;
    if (ok)
      memcpy(out, got, 33);
    free(got);
    if (ok)
      return 0;
  }
  if (hash_file_alone(d, path, text, text_len, out) != 0)
    return -1;
  if (name[0] && d->share.put)
    d->share.put(d->share.ctx, name, out);
  return 0;
}

static int source_tokens(kf_digest *d, const kf_instance *in, const kf_compile_setup *cs,
                         char out[33]) {
  return tokens_of_text(d, cs->source_path, in->source, in->source_len, out);
}

/* The closure's shared text, or NULL when a file or candidate has no name
 * that means the same place on another machine (caller frees). */
static char *portable_text(const kf_compile_setup *cs, const closure *c) {
  char *src_dir = kf_path_dirname(cs->source_path);
  cJSON *root = cJSON_CreateObject();
  cJSON *files = cJSON_AddArrayToObject(root, "files");
  cJSON *absent = cJSON_AddArrayToObject(root, "absent");
  int ok = 1;
  for (size_t i = 0; i < c->nfiles; i++) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "name", c->files[i].name);
    cJSON_AddStringToObject(f, "tokens", c->files[i].tokens);
    cJSON_AddItemToArray(files, f);
  }
  for (size_t i = 0; i < c->absent.n && ok; i++) {
    char *name = NULL;
    rooted_name(cs, c->absent.v[i], src_dir, &name);
    ok = strncmp(name, "@abs/", 5) != 0 || !strncmp(name, "@abs/usr/", 9) ||
         !strncmp(name, "@abs/opt/", 9);
    cJSON_AddItemToArray(absent, cJSON_CreateString(name));
    free(name);
  }
  char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  free(src_dir);
  return text;
}

/* The place a shared name means here, or NULL for a name this setup has no
 * root for (caller frees). */
static char *place_of(const kf_compile_setup *cs, const char *src_dir, const char *name) {
  const char *slash = strchr(name, '/');
  if (!slash || name[0] != '@' || strlen(name) > PATH_MAX)
    return NULL;
  size_t ln = (size_t)(slash - name);
  if (ln == 4 && !strncmp(name, "@abs", 4))
    return !strncmp(slash, "/usr/", 5) || !strncmp(slash, "/opt/", 5) ? kf_xstrdup(slash) : NULL;
  if (ln == 4 && !strncmp(name, "@src", 4))
    return kf_path_join(src_dir, slash + 1);
  for (size_t r = 0; r < cs->labels.n; r++)
    if (strlen(cs->labels.v[r]) == ln && !strncmp(cs->labels.v[r], name, ln))
      return kf_path_join(cs->roots.v[r], slash + 1);
  return NULL;
}

/* Takes a shared closure text if it holds here (see above). Returns 0 with
 * c filled (source tokens still to be hashed), or -1 (c empty). */
static int from_portable(kf_digest *d, const kf_compile_setup *cs, const char *text, size_t len,
                         closure *c) {
  cJSON *root = cJSON_ParseWithLength(text, len);
  const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
  const cJSON *absent = cJSON_GetObjectItemCaseSensitive(root, "absent");
  char *src_dir = kf_path_dirname(cs->source_path);
  int ok = cJSON_IsArray(files) && cJSON_IsArray(absent);
  memset(c, 0, sizeof *c);
  for (const cJSON *a = ok ? absent->child : NULL; a && ok; a = a->next) {
    char *place = cJSON_IsString(a) ? place_of(cs, src_dir, a->valuestring) : NULL;
    ok = place && !kf_path_exists(place);
    if (ok)
      kf_strv_push(&c->absent, place);
    free(place);
  }
  for (const cJSON *f = ok ? files->child : NULL; f && ok; f = f->next) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(f, "name");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(f, "tokens");
    char *place = cJSON_IsString(n) ? place_of(cs, src_dir, n->valuestring) : NULL;
    char real[PATH_MAX], *same = NULL;
    closure_file cf = {0};
    ok = place && cJSON_IsString(t) && strlen(t->valuestring) == 32 && realpath(place, real) &&
         stat_file(real, &cf.size, &cf.mtime_ns) == 0;
    /* the name this machine gives the file must be the shared one */
    ok = ok && !strcmp(rooted_name(cs, real, src_dir, &same), n->valuestring);
    ok = ok && retokenised(d, real, cf.size, cf.mtime_ns, cf.tokens) &&
         !strcmp(cf.tokens, t->valuestring);
    free(same);
    free(place);
    if (ok) {
      cf.path = kf_xstrdup(real);
      cf.name = kf_xstrdup(n->valuestring);
      c->files = kf_xpush(c->files, c->nfiles, sizeof *c->files);
      c->files[c->nfiles++] = cf;
    }
  }
  cJSON_Delete(root);
  free(src_dir);
  if (!ok)
    closure_free(c);
  return ok ? 0 : -1;
}

int kf_digest_shared_check(const char *root, const char *text, size_t len) {
  kf_compile_setup cs = {0};
  kf_strv_push(&cs.roots, root);
  kf_strv_push(&cs.labels, "@templates");
  cs.source_path = kf_path_join(root, "out/k.cu");
  kf_digest *d = kf_digest_new(NULL, 0);
  closure c = {0};
  int ok = from_portable(d, &cs, text, len, &c) == 0;
  closure_free(&c);
  kf_digest_free(d);
  kf_compile_setup_free(&cs);
  return ok;
}

/* The closure of an instance: shared within the run, else shared by
 * another machine, else parsed (and then shared). */
static int closure_for(kf_digest *d, const kf_instance *in, kf_toolchain *tc,
                       const kf_compile_setup *cs, closure *c, int *parsed, char **err) {
  uint64_t sig = closure_signature(in, cs);
  for (struct shared_closure *s = d->shared; s; s = s->next) {
    if (s->sig != sig)
      continue;
    closure_copy(c, &s->c);
    if (source_tokens(d, in, cs, c->source_tokens) != 0) {
      *err = kf_xasprintf("libclang could not tokenise %s", in->rel_source);
      return -1;
    }
    return 0;
  }
  char id[41] = "";
  int from_share = 0;
  if (d->share.get) {
    portable_id(in, tc, cs, id);
    size_t len = 0;
    char *text = d->share.get(d->share.ctx, id, &len);
    from_share = text && from_portable(d, cs, text, len, c) == 0;
    free(text);
    if (from_share && source_tokens(d, in, cs, c->source_tokens) != 0) {
      closure_free(c);
      from_share = 0;
    }
  }
  if (!from_share) {
    if (parse_closure(d, in, tc, cs, c, err) != 0)
      return -1;
    *parsed = 1;
    char *text = id[0] && d->share.put ? portable_text(cs, c) : NULL;
    if (text)
      d->share.put(d->share.ctx, id, text);
    free(text);
  }
  struct shared_closure *s = kf_xcalloc(1, sizeof *s);
  s->sig = sig;
  closure_copy(&s->c, c);
  s->next = d->shared;
  d->shared = s;
  return 0;
}

/* ---- dependency records ---- */

static char *deps_path(const kf_digest *d, const kf_toolchain *tc, const kf_compile_setup *cs,
                       const char *arch) {
  XXH3_state_t *st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, cs->source_path, strlen(cs->source_path) + 1);
  XXH3_64bits_update(st, arch, strlen(arch) + 1);
  for (size_t i = 0; i < cs->compile_args.n; i++)
    XXH3_64bits_update(st, cs->compile_args.v[i], strlen(cs->compile_args.v[i]) + 1);
  /* the closure also depends on what the compiler does with those args
   * (its version, NVCC_APPEND_FLAGS …): a record is only for one identity */
  for (size_t i = 0; i < tc->identity.n; i++)
    XXH3_64bits_update(st, tc->identity.v[i], strlen(tc->identity.v[i]) + 1);
  char hex[17];
  kf_hex64(XXH3_64bits_digest(st), hex);
  XXH3_freeState(st);
  return kf_xasprintf("%s/%.2s/%s.json", d->deps_dir, hex, hex);
}

/* The token hash of a file as it is now, computed once per run. */
static int retokenised(kf_digest *d, const char *path, long long size, long long mtime,
                       char out[33]) {
  char *tag = kf_xasprintf("%s\n%lld\n%lld\n", path, size, mtime);
  size_t tl = strlen(tag);
  for (size_t i = 0; i < d->retokenised.n; i++)
    if (!strncmp(d->retokenised.v[i], tag, tl)) {
      memcpy(out, d->retokenised.v[i] + tl, 33);
      free(tag);
      return 1;
    }
  size_t flen;
  char *ftext = kf_read_file(path, &flen);
  int ok = ftext && tokens_of_text(d, path, ftext, flen, out) == 0;
  free(ftext);
  if (ok)
    kf_strv_push_owned(&d->retokenised, kf_xasprintf("%s%s", tag, out));
  free(tag);
  return ok;
}

/* Loads a record and checks it against the file system. Returns 1 when it
 * still holds (c filled, token hashes refreshed for touched files), 0 when a
 * re-parse is needed. *dirty says the record should be rewritten. */
static int deps_load(kf_digest *d, const char *path, const char *source_raw, closure *c,
                     int *dirty) {
  size_t len;
  char *text = kf_read_file(path, &len);
  if (!text)
    return 0;
  cJSON *root = cJSON_ParseWithLength(text, len);
  free(text);
  if (!root)
    return 0;
  int ok = 0;
  const cJSON *raw = cJSON_GetObjectItemCaseSensitive(root, "source_raw");
  const cJSON *tok = cJSON_GetObjectItemCaseSensitive(root, "source_tokens");
  const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
  const cJSON *absent = cJSON_GetObjectItemCaseSensitive(root, "absent");
  if (!cJSON_IsString(raw) || strcmp(raw->valuestring, source_raw) != 0 || !cJSON_IsString(tok) ||
      strlen(tok->valuestring) != 32 || !cJSON_IsArray(files) || !cJSON_IsArray(absent))
    goto out;
  memcpy(c->source_tokens, tok->valuestring, 33);
  for (const cJSON *a = absent->child; a; a = a->next) {
    if (!cJSON_IsString(a))
      goto out;
    if (!kf_strv_contains(&d->absent_ok, a->valuestring)) {
      if (kf_path_exists(a->valuestring))
        goto out; /* a header now shadows one on the include path */
      kf_strv_push(&d->absent_ok, a->valuestring);
    }
    kf_strv_push(&c->absent, a->valuestring);
  }
  for (const cJSON *f = files->child; f; f = f->next) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(f, "path");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(f, "name");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(f, "tokens");
    const cJSON *sz = cJSON_GetObjectItemCaseSensitive(f, "size");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(f, "mtime_ns");
    if (!cJSON_IsString(p) || !cJSON_IsString(n) || !cJSON_IsString(t) || !cJSON_IsNumber(sz) ||
        !cJSON_IsString(mt) || strlen(t->valuestring) != 32)
      goto out;
    closure_file cf = {0};
    cf.path = kf_xstrdup(p->valuestring);
    cf.name = kf_xstrdup(n->valuestring);
    memcpy(cf.tokens, t->valuestring, 33);
    c->files = kf_xpush(c->files, c->nfiles, sizeof *c->files);
    c->files[c->nfiles++] = cf;
    closure_file *cur = &c->files[c->nfiles - 1];
    long long size, mtime;
    if (stat_file(cur->path, &size, &mtime) != 0)
      goto out; /* a closure file vanished */
    cur->size = size;
    cur->mtime_ns = mtime;
    if (size == kf_i64_of_double(sz->valuedouble) && mtime == strtoll(mt->valuestring, NULL, 10))
      continue;
    /* touched: re-tokenise this file alone (once per run: many sources
     * share a header); same tokens, same closure */
    char now[33];
    if (!retokenised(d, cur->path, size, mtime, now))
      goto out;
    if (strcmp(now, cur->tokens) != 0)
      goto out;
    *dirty = 1;
  }
  ok = 1;
out:
  cJSON_Delete(root);
  if (!ok)
    closure_free(c);
  return ok;
}

int kf_digest_deps_check(const char *path, const char *source_raw) {
  kf_digest *d = kf_digest_new(NULL, 0);
  closure c = {0};
  int dirty = 0;
  int ok = deps_load(d, path, source_raw, &c, &dirty);
  closure_free(&c);
  kf_digest_free(d);
  return ok;
}

static void deps_save(const char *path, const char *source_raw, const closure *c) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "format", 1);
  cJSON_AddStringToObject(root, "source_raw", source_raw);
  cJSON_AddStringToObject(root, "source_tokens", c->source_tokens);
  cJSON *files = cJSON_AddArrayToObject(root, "files");
  for (size_t i = 0; i < c->nfiles; i++) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "path", c->files[i].path);
    cJSON_AddStringToObject(f, "name", c->files[i].name);
    cJSON_AddStringToObject(f, "tokens", c->files[i].tokens);
    cJSON_AddNumberToObject(f, "size", (double)c->files[i].size);
    char mt[32];
    snprintf(mt, sizeof mt, "%lld", c->files[i].mtime_ns);
    cJSON_AddStringToObject(f, "mtime_ns", mt);
    cJSON_AddItemToArray(files, f);
  }
  cJSON *absent = cJSON_AddArrayToObject(root, "absent");
  for (size_t i = 0; i < c->absent.n; i++)
    cJSON_AddItemToArray(absent, cJSON_CreateString(c->absent.v[i]));
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  char *dir = kf_path_dirname(path);
  if (kf_mkdir_p(dir) == 0)
    kf_write_file_replace(path, text, strlen(text)); /* best effort: only a speed-up */
  free(dir);
  free(text);
}

/* ---- the key ---- */

int kf_digest_instance(kf_digest *d, const kf_instance *in, kf_toolchain *tc,
                       const kf_compile_setup *cs, kf_records *out, char key[33], int *reparsed,
                       char **err) {
  *err = NULL;
  if (reparsed)
    *reparsed = 0;
  char source_raw[33];
  kf_hash128_hex(in->source, in->source_len, source_raw);
  closure c = {0};
  char *dpath = d->deps_dir ? deps_path(d, tc, cs, in->arch) : NULL;
  int dirty = 0;
  if (!dpath || !deps_load(d, dpath, source_raw, &c, &dirty)) {
    int parsed = 0;
    if (closure_for(d, in, tc, cs, &c, &parsed, err) != 0) {
      free(dpath);
      closure_free(&c);
      return -1;
    }
    if (reparsed)
      *reparsed = parsed;
    dirty = 1;
  }
  if (dpath && dirty && d->write_deps)
    deps_save(dpath, source_raw, &c);
  free(dpath);

  kf_records_add(out, "scheme", "", KEY_SCHEME);
  kf_records_add(out, "target", "arch", in->arch);
  kf_records_add(out, "source", "generated", c.source_tokens);
  for (size_t i = 0; i < c.nfiles; i++)
    kf_records_add(out, "file", c.files[i].name, c.files[i].tokens);
  for (size_t i = 0; i < cs->key_args.n; i++) {
    char idx[32];
    snprintf(idx, sizeof idx, "%02u", (unsigned)i);
    kf_records_add(out, "arg", idx, cs->key_args.v[i]);
  }
  for (size_t i = 0; i < tc->identity.n; i++) {
    const char *line = tc->identity.v[i];
    const char *eq = strchr(line, '=');
    const char *sp = strchr(line, ' ');
    const char *cut = eq && (!sp || eq < sp) ? eq : sp;
    char *name = cut ? kf_xstrndup(line, (size_t)(cut - line)) : kf_xstrdup(line);
    kf_records_add(out, "tool", name, cut ? cut + 1 : "");
    free(name);
  }
  kf_records_add(out, "param", "template", in->kernel->tmpl->name);
  char wbuf[16];
  snprintf(wbuf, sizeof wbuf, "%d", in->width);
  kf_records_add(out, "param", "W", wbuf);
  for (size_t i = 0; i < in->kernel->tmpl->nparams; i++) {
    char v[64];
    kf_value_format(in->kernel->values[i], v, sizeof v);
    kf_records_add(out, "param", in->kernel->tmpl->params[i].name, v);
  }
  kf_records_key(out, key);
  closure_free(&c);
  return 0;
}

void kf_digest_free(kf_digest *d) {
  if (!d)
    return;
  if (d->index)
    lc->disposeIndex(d->index);
  free(d->deps_dir);
  kf_strv_free(&d->absent_ok);
  kf_strv_free(&d->retokenised);
  while (d->shared) {
    struct shared_closure *next = d->shared->next;
    closure_free(&d->shared->c);
    free(d->shared);
    d->shared = next;
  }
  free(d);
}
