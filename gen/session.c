/* session.c: loading, keying and the parallel compile engine behind `build`,
 * `warm`, `keys` and `explain` (see session.h).
 *
 * The main thread emits and keys units one after another (libclang runs
 * there only) and hands each miss to a pool of workers as soon as its key is
 * known, so parsing overlaps compiling. A worker takes the key's flock,
 * checks the cache again (another builder may have published meanwhile),
 * runs the compiler with no shell into a private tmp directory, writes
 * meta.json and renames the directory into place. */
#define _GNU_SOURCE
#include "session.h"
#include "report.h"

#include "json.h"
#include "paths.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#ifndef KFORGE_SOURCE_DIR
#define KFORGE_SOURCE_DIR "."
#endif
#ifndef KFORGE_VERSION
#define KFORGE_VERSION "0.1.0"
#endif

/* ---- options ---- */

static void split_list(const char *s, kf_strv *out) {
  char *copy = kf_xstrdup(s);
  char *save = NULL;
  for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
    if (*t && !kf_strv_contains(out, t))
      kf_strv_push(out, t);
  free(copy);
}

/* NAME or NAME=VALUE, NAME an identifier: what `-D` means to every compiler
 * kforge drives, so a tuning variant cannot smuggle in another option. */
static int valid_define(const char *d) {
  if (!(*d == '_' || (*d >= 'A' && *d <= 'Z') || (*d >= 'a' && *d <= 'z')))
    return 0;
  for (d++; *d && *d != '='; d++)
    if (!(*d == '_' || (*d >= 'A' && *d <= 'Z') || (*d >= 'a' && *d <= 'z') ||
          (*d >= '0' && *d <= '9')))
      return 0;
  return 1;
}

int kf_cli_parse(kf_cli *cli, int argc, char **argv, const char *usage,
                 int (*extra)(const char *opt, const char *val, void *ctx), void *ctx) {
  memset(cli, 0, sizeof *cli);
  cli->mopt.templates_dir = kf_default_templates_dir();
  cli->mopt.families_dir = kf_default_families_dir();
  cli->out_dir = "kernels-out";
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  cli->jobs = ncpu > 0 ? (int)ncpu : 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = NULL;
    char *opt = NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      kf_cli_free(cli);
      return 1;
    }
    if (a[0] != '-' || !strcmp(a, "-")) {
      kf_strv_push(&cli->inputs, a);
      continue;
    }
    if (!strcmp(a, "--")) {
      for (i++; i < argc; i++)
        kf_strv_push(&cli->inputs, argv[i]);
      break;
    }
    /* --opt=value, --opt value, -Ivalue, -I value, -jN, -j N */
    const char *eq = strchr(a, '=');
    if (a[1] == '-' && eq) {
      opt = kf_xstrndup(a, (size_t)(eq - a));
      val = eq + 1;
    } else if (a[1] != '-' && a[2] != '\0' &&
               (a[1] == 'I' || a[1] == 'j' || a[1] == 'o' || a[1] == 'D')) {
      opt = kf_xstrndup(a, 2);
      val = a + 2;
    } else {
      opt = kf_xstrdup(a);
    }
    static const char *const flags[] = {"--json", NULL};
    int is_flag = 0;
    for (const char *const *f = flags; *f; f++)
      is_flag |= !strcmp(opt, *f);
    if (extra && !val && extra(opt, NULL, ctx) == 0) {
      free(opt);
      continue;
    }
    if (!is_flag && !val) {
      if (i + 1 >= argc) {
        kf_usage_error(usage, "option %s needs a value", opt);
        free(opt);
        kf_cli_free(cli);
        return 2;
      }
      val = argv[++i];
    }
    int ok = 1;
    if (!strcmp(opt, "--json"))
      cli->json = 1;
    else if (!strcmp(opt, "--cache"))
      cli->cache_dir = val;
    else if (!strcmp(opt, "--out"))
      cli->out_dir = val;
    else if (!strcmp(opt, "--arch"))
      split_list(val, &cli->mopt.arches);
    else if (!strcmp(opt, "-I") || !strcmp(opt, "--include-dir"))
      kf_strv_push(&cli->mopt.extra_include_dirs, val);
    else if (!strcmp(opt, "--template-dir"))
      kf_strv_push(&cli->mopt.extra_template_dirs, val);
    else if (!strcmp(opt, "--templates"))
      cli->mopt.templates_dir = val;
    else if (!strcmp(opt, "--families"))
      cli->mopt.families_dir = val;
    else if (!strcmp(opt, "-D") || !strcmp(opt, "--define")) {
      if (!valid_define(val)) {
        kf_error(NULL, NULL, "--define needs NAME or NAME=VALUE with NAME a C identifier, got '%s'",
                 val);
        free(opt);
        kf_cli_free(cli);
        return 2;
      }
      kf_strv_push(&cli->defines, val);
    } else if (!strcmp(opt, "-j") || !strcmp(opt, "--jobs")) {
      char *end;
      long j = strtol(val, &end, 10);
      if (*end || j < 1 || j > 1024) {
        kf_error(NULL, NULL, "-j needs a number of jobs from 1 to 1024, got '%s'", val);
        free(opt);
        kf_cli_free(cli);
        return 2;
      }
      cli->jobs = (int)j;
    } else if (extra && extra(opt, val, ctx) == 0) {
      /* claimed */
    } else
      ok = 0;
    if (!ok) {
      kf_usage_error(usage, "unknown option '%s'", opt);
      free(opt);
      kf_cli_free(cli);
      return 2;
    }
    free(opt);
  }
  return 0;
}

void kf_cli_free(kf_cli *cli) {
  kf_strv_free(&cli->mopt.arches);
  kf_strv_free(&cli->mopt.extra_include_dirs);
  kf_strv_free(&cli->mopt.extra_template_dirs);
  kf_strv_free(&cli->defines);
  kf_strv_free(&cli->inputs);
}

/* ---- loading and keying ---- */

int kf_session_load(kf_session *s, kf_cli *cli, int write_deps) {
  memset(s, 0, sizeof *s);
  s->cli = cli;
  kf_cache_init(&s->cache, cli->cache_dir);
  int bad = 0;
  s->models = kf_xcalloc(cli->inputs.n ? cli->inputs.n : 1, sizeof *s->models);
  for (size_t i = 0; i < cli->inputs.n; i++) {
    kf_model *m = kf_model_load(cli->inputs.v[i], &cli->mopt);
    if (!m) {
      bad = 1;
      continue;
    }
    for (size_t k = 0; k < s->nmodels; k++)
      if (!strcmp(s->models[k]->name, m->name)) {
        kf_error(m->path, "name", "model \"%s\" is also described by %s", m->name,
                 s->models[k]->path);
        bad = 1;
      }
    s->models[s->nmodels++] = m;
  }
  if (bad)
    return 2;
  for (size_t i = 0; i < s->nmodels; i++)
    kf_plan_add_model(&s->plan, s->models[i]);
  kf_plan_sort(&s->plan); /* one order by id across descriptions */
  s->units = kf_xcalloc(s->plan.n ? s->plan.n : 1, sizeof *s->units);
  char *deps = kf_path_join(s->cache.v1, "deps");
  s->digest = kf_digest_new(deps, write_deps);
  free(deps);
  for (size_t i = 0; i < s->plan.n; i++) {
    kf_unit *u = &s->units[i];
    u->in = &s->plan.v[i];
    u->tc = kf_toolchain_get(kf_arch_is_hip(u->in->arch) ? KF_BACKEND_HIP : KF_BACKEND_CUDA);
    kf_compile_setup_init(&u->cs, u->in, u->tc, cli->out_dir, cli->mopt.templates_dir,
                          &cli->mopt.extra_template_dirs, &cli->defines);
  }
  return 0;
}

void kf_session_report(kf_session *s, const kf_unit *u) {
  /* a toolchain that cannot build an arch fails every kernel of it alike:
   * say so once per reason */
  for (size_t i = 0; i < s->reported.n; i++)
    if (!strcmp(s->reported.v[i], u->error))
      return;
  kf_strv_push(&s->reported, u->error);
  kf_error(NULL, NULL, "%s: %s", u->in->id, u->error);
}

int kf_session_key(kf_session *s, kf_unit *u) {
  if (u->keyed)
    return 0;
  const char *why = kf_toolchain_check_arch(u->tc, u->in->arch);
  if (why) {
    u->error = kf_xstrdup(why);
    return -1;
  }
  char *err = NULL;
  int reparsed = 0;
  if (kf_digest_instance(s->digest, u->in, u->tc, &u->cs, &u->records, u->key, &reparsed, &err) !=
      0) {
    u->error = err;
    return -1;
  }
  s->reparsed += reparsed;
  u->keyed = 1;
  return 0;
}

void kf_session_free(kf_session *s) {
  if (s->units)
    for (size_t i = 0; i < s->plan.n; i++) {
      kf_compile_setup_free(&s->units[i].cs);
      kf_records_free(&s->units[i].records);
      free(s->units[i].error);
    }
  free(s->units);
  kf_plan_free(&s->plan);
  for (size_t i = 0; i < s->nmodels; i++)
    kf_model_free(s->models[i]);
  free(s->models);
  kf_digest_free(s->digest);
  kf_cache_free(&s->cache);
  kf_strv_free(&s->reported);
}

/* ---- compiling ---- */

struct kf_job {
  kf_unit *unit; /* the first unit with this key; others share the result */
  int state;
  kf_job *next;
};

typedef struct {
  kf_session *s;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  kf_job *head, *tail;
  int closing;
  int done, total; /* progress */
  int tty;
} pool;

static void parse_resources(const char *out, cJSON *res) {
  long regs = -1, stack = 0, spill_st = 0, spill_ld = 0, smem = 0;
  /* ptxas -v: "Used 32 registers, used 1 barriers, 512 bytes smem" and
   * "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads";
   * clang's resource remarks: "VGPRs: 32", "ScratchSize [bytes/lane]: 0",
   * "LDS Size [bytes/block]: 512".
   * Values are taken only from complete matches at the start of a word. */
  for (const char *p = out; p && *p; p++) {
    if (p != out && p[-1] != ' ' && p[-1] != '\n' && p[-1] != ':')
      continue;
    long a, b, c;
    int n = 0;
    if (sscanf(p, "Used %ld registers%n", &a, &n) == 1 && n > 0)
      regs = a;
    else if (n = 0,
             sscanf(p, "%ld bytes stack frame, %ld bytes spill stores, %ld bytes spill loads%n", &a,
                    &b, &c, &n) == 3 &&
                 n > 0) {
      stack = a;
      spill_st = b;
      spill_ld = c;
    } else if (n = 0, sscanf(p, "%ld bytes smem%n", &a, &n) == 1 && n > 0)
      smem = a;
    else if (!strncmp(p, "VGPRs: ", 7))
      regs = strtol(p + 7, NULL, 10);
    else if (!strncmp(p, "ScratchSize [bytes/lane]: ", 26))
      stack = strtol(p + 26, NULL, 10);
    else if (!strncmp(p, "LDS Size [bytes/block]: ", 24))
      smem = strtol(p + 24, NULL, 10);
  }
  cJSON_AddNumberToObject(res, "registers", (double)regs);
  cJSON_AddNumberToObject(res, "stack_bytes", (double)stack);
  cJSON_AddNumberToObject(res, "spill_stores", (double)spill_st);
  cJSON_AddNumberToObject(res, "spill_loads", (double)spill_ld);
  cJSON_AddNumberToObject(res, "shared_bytes", (double)smem);
}

static cJSON *records_json(const kf_records *r) {
  cJSON *arr = cJSON_CreateArray();
  for (size_t i = 0; i < r->n; i++) {
    cJSON *o = cJSON_CreateObject();
    char h[17];
    kf_record_hash(&r->v[i], h);
    cJSON_AddStringToObject(o, "tag", r->v[i].tag);
    cJSON_AddStringToObject(o, "name", r->v[i].name);
    cJSON_AddStringToObject(o, "hash", h);
    if (strcmp(r->v[i].tag, "file") != 0 && strcmp(r->v[i].tag, "source") != 0)
      cJSON_AddStringToObject(o, "value", r->v[i].value);
    cJSON_AddItemToArray(arr, o);
  }
  return arr;
}

static const char *object_name(const kf_unit *u) {
  return u->tc->backend == KF_BACKEND_HIP ? "object.hsaco" : "object.cubin";
}

/* Remembers a good entry's checksum and size for the manifest, so that
 * it is not read and hashed a second time. */
static void take_entry(kf_unit *u, const cJSON *meta) {
  snprintf(u->checksum, sizeof u->checksum, "%s",
           cJSON_GetObjectItemCaseSensitive(meta, "checksum")->valuestring);
  u->size = (long long)cJSON_GetObjectItemCaseSensitive(meta, "size")->valuedouble;
}

/* Compiles one key into the cache. Runs on a worker thread. */
static int compile_job(pool *p, kf_unit *u, char **err) {
  const kf_cache *c = &p->s->cache;
  int fd = kf_cache_lock(c, u->key);
  if (fd < 0) {
    *err = kf_xasprintf("cannot lock %s: %s", u->key, strerror(errno));
    return KF_UNIT_FAILED;
  }
  char *why = NULL;
  cJSON *found = NULL;
  int st = kf_cache_check_entry(c, u->key, &found, &why);
  if (st == KF_ENTRY_OK) {
    take_entry(u, found);
    cJSON_Delete(found);
    kf_cache_unlock(fd);
    return KF_UNIT_CACHED; /* another builder published it meanwhile */
  }
  if (st == KF_ENTRY_DAMAGED) {
    kf_warning(NULL, NULL, "%s: cache entry %s is damaged (%s); rebuilding", u->in->id, u->key,
               why);
    kf_cache_remove_entry(c, u->key);
  }
  free(why);
  char *tmp = kf_cache_tmpdir(c, u->key);
  if (!tmp) {
    *err = kf_xasprintf("cannot create a directory in %s/tmp: %s", c->v1, strerror(errno));
    kf_cache_unlock(fd);
    return KF_UNIT_FAILED;
  }
  char *obj = kf_path_join(tmp, object_name(u));
  kf_strv argv = {0};
  kf_strv_push(&argv, u->tc->compiler);
  for (size_t i = 0; i < u->cs.compile_args.n; i++)
    kf_strv_push(&argv, u->cs.compile_args.v[i]);
  kf_strv_push(&argv, "-o");
  kf_strv_push(&argv, obj);
  kf_strv_push(&argv, u->cs.source_path);
  kf_strv_push_owned(&argv, NULL);
  double t0 = kf_now();
  char *output = NULL;
  int rc = kf_run_capture(argv.v, &output);
  double secs = kf_now() - t0;
  argv.n--;
  int result = KF_UNIT_FAILED;
  size_t olen = 0;
  char *bytes = rc == 0 ? kf_read_file(obj, &olen) : NULL;
  if (rc != 0 || !bytes) {
    if (rc < 0)
      *err = kf_xasprintf("cannot run %s: %s", u->tc->compiler, strerror(errno));
    else
      *err = kf_xasprintf("%s failed (exit %d) on %s:\n%s", u->tc->compiler, rc, u->cs.source_path,
                          output ? output : "");
    kf_remove_tree(tmp);
    goto out;
  }
  cJSON *meta = cJSON_CreateObject();
  cJSON_AddNumberToObject(meta, "format", 1);
  cJSON_AddStringToObject(meta, "key", u->key);
  cJSON_AddStringToObject(meta, "kernel_id", u->in->id);
  cJSON_AddStringToObject(meta, "object", object_name(u));
  char sum[33];
  kf_hash128_hex(bytes, olen, sum);
  cJSON_AddStringToObject(meta, "checksum", sum);
  cJSON_AddNumberToObject(meta, "size", (double)olen);
  cJSON *cmd = cJSON_AddArrayToObject(meta, "command");
  for (size_t i = 0; i < argv.n; i++)
    cJSON_AddItemToArray(cmd, cJSON_CreateString(argv.v[i]));
  cJSON_AddStringToObject(meta, "compiler_output", output ? output : "");
  cJSON_AddNumberToObject(meta, "compile_seconds", secs);
  parse_resources(output, cJSON_AddObjectToObject(meta, "resources"));
  cJSON_AddItemToObject(meta, "inputs", records_json(&u->records));
  char *text = cJSON_Print(meta);
  cJSON_Delete(meta);
  char *mp = kf_path_join(tmp, "meta.json");
  int werr = kf_write_file_atomic(mp, text, strlen(text));
  free(mp);
  free(text);
  if (werr != 0 || kf_cache_publish(c, u->key, tmp) != 0) {
    *err = kf_xasprintf("cannot publish %s into %s: %s", u->key, c->v1, strerror(errno));
    kf_remove_tree(tmp);
    goto out;
  }
  memcpy(u->checksum, sum, sizeof u->checksum);
  u->size = (long long)olen;
  result = KF_UNIT_COMPILED;
out:
  free(bytes);
  free(output);
  free(obj);
  free(tmp);
  kf_strv_free(&argv);
  kf_cache_unlock(fd);
  return result;
}

static void *worker(void *arg) {
  pool *p = arg;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    while (!p->head && !p->closing)
      pthread_cond_wait(&p->cv, &p->mu);
    kf_job *j = p->head;
    if (!j) {
      pthread_mutex_unlock(&p->mu);
      return NULL;
    }
    p->head = j->next;
    if (!p->head)
      p->tail = NULL;
    if (p->tty) {
      fprintf(stderr, "\r\033[K[%d/%d] compiling %s", p->done, p->total, j->unit->in->id);
      fflush(stderr);
    }
    pthread_mutex_unlock(&p->mu);
    char *err = NULL;
    int st = compile_job(p, j->unit, &err);
    pthread_mutex_lock(&p->mu);
    j->state = st;
    j->unit->error = err;
    p->done++;
    if (err) {
      if (p->tty)
        fputs("\r\033[K", stderr);
      kf_error(NULL, NULL, "%s: %s", j->unit->in->id, err);
    }
    pthread_mutex_unlock(&p->mu);
  }
}

static cJSON *manifest_entry(const kf_unit *u) {
  cJSON *e = cJSON_CreateObject();
  cJSON_AddStringToObject(e, "id", u->in->id);
  cJSON_AddStringToObject(e, "kind", u->in->kernel->kind);
  cJSON_AddNumberToObject(e, "width", u->in->width);
  cJSON_AddStringToObject(e, "key", u->key);
  char *obj = kf_xasprintf("objects/%.2s/%s/%s", u->key, u->key, object_name(u));
  char *mp = kf_xasprintf("objects/%.2s/%s/meta.json", u->key, u->key);
  cJSON_AddStringToObject(e, "object", obj);
  cJSON_AddStringToObject(e, "meta", mp);
  free(obj);
  free(mp);
  cJSON_AddStringToObject(e, "checksum", u->checksum);
  cJSON_AddNumberToObject(e, "size", (double)u->size);
  cJSON_AddStringToObject(e, "symbol", u->in->symbol);
  cJSON *launch = cJSON_AddObjectToObject(e, "launch");
  cJSON *g = cJSON_AddArrayToObject(launch, "grid");
  cJSON *b = cJSON_AddArrayToObject(launch, "block");
  for (int d = 0; d < 3; d++) {
    cJSON_AddItemToArray(g, cJSON_CreateNumber((double)u->in->grid[d]));
    cJSON_AddItemToArray(b, cJSON_CreateNumber((double)u->in->block[d]));
  }
  cJSON_AddNumberToObject(launch, "shared_bytes", (double)u->in->shared_bytes);
  if (u->in->programmatic)
    cJSON_AddTrueToObject(launch, "programmatic");
  if (u->in->one_wave)
    cJSON_AddTrueToObject(launch, "one_wave");
  if (u->in->max_blocks_per_sm > 0)
    cJSON_AddNumberToObject(launch, "max_blocks_per_sm", (double)u->in->max_blocks_per_sm);
  if (u->in->cluster[0] * u->in->cluster[1] * u->in->cluster[2] > 1) {
    cJSON *c = cJSON_AddArrayToObject(launch, "cluster");
    for (int d = 0; d < 3; d++)
      cJSON_AddItemToArray(c, cJSON_CreateNumber((double)u->in->cluster[d]));
  }
  return e;
}

/* Writes the manifest of one (model, arch) if all its kernels built; a
 * manifest with a kernel missing is never written (the old one stays). */
static void write_manifest(kf_session *s, const kf_model *m, const char *arch) {
  int all_ok = 1;
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "format", 1);
  cJSON_AddStringToObject(root, "generator", "kforge " KFORGE_VERSION);
  cJSON_AddStringToObject(root, "model", m->name);
  cJSON_AddStringToObject(root, "arch", arch);
  cJSON_AddStringToObject(root, "backend", kf_arch_is_hip(arch) ? "hip" : "cuda");
  /* one parameter list per kind (all its kernels share the template's
   * arguments): a manifest of hundreds of kernels stays quick to parse */
  cJSON *sigs = cJSON_AddObjectToObject(root, "signatures");
  cJSON *kernels = cJSON_AddArrayToObject(root, "kernels");
  for (size_t k = 0; k < s->plan.n; k++) {
    kf_unit *u = &s->units[k];
    if (u->in->model != m || strcmp(u->in->arch, arch) != 0)
      continue;
    if (!cJSON_GetObjectItemCaseSensitive(sigs, u->in->kernel->kind)) {
      cJSON *params =
          cJSON_AddArrayToObject(cJSON_AddObjectToObject(sigs, u->in->kernel->kind), "params");
      const kf_template *t = u->in->kernel->tmpl;
      for (size_t i = 0; i < t->nargs; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "name", t->args[i].name);
        cJSON_AddStringToObject(p, "type", t->args[i].type);
        cJSON_AddNumberToObject(p, "size", t->args[i].size);
        cJSON_AddItemToArray(params, p);
      }
    }
    if (u->state == KF_UNIT_FAILED || !u->checksum[0]) {
      all_ok = 0;
      continue;
    }
    cJSON_AddItemToArray(kernels, manifest_entry(u));
  }
  if (all_ok) {
    char *path = kf_cache_manifest_path(&s->cache, m->name, arch);
    char *dir = kf_path_dirname(path);
    char *text = cJSON_Print(root);
    if (kf_mkdir_p(dir) != 0 || kf_write_if_changed(path, text, strlen(text), NULL) != 0)
      kf_error(NULL, NULL, "cannot write manifest %s: %s", path, strerror(errno));
    free(text);
    free(dir);
    free(path);
  } else {
    kf_note(NULL, NULL, "manifest %s/%s not updated: some of its kernels failed", m->name, arch);
  }
  cJSON_Delete(root);
}

static void write_manifests(kf_session *s) {
  for (size_t i = 0; i < s->nmodels; i++)
    for (size_t a = 0; a < s->models[i]->arches.n; a++)
      write_manifest(s, s->models[i], s->models[i]->arches.v[a]);
}

int kf_session_build(kf_session *s, int *n_cached, int *n_compiled, int *n_failed) {
  char *err = NULL;
  *n_cached = *n_compiled = *n_failed = 0;
  if (kf_cache_prepare(&s->cache, &err) != 0) {
    kf_error(NULL, NULL, "cache %s is not writable: %s", s->cache.root, err);
    free(err);
    return 2;
  }
  pool p = {0};
  p.s = s;
  pthread_mutex_init(&p.mu, NULL);
  pthread_cond_init(&p.cv, NULL);
  p.tty = isatty(2);
  int nthreads = s->cli->jobs;
  if ((size_t)nthreads > s->plan.n)
    nthreads = s->plan.n ? (int)s->plan.n : 1;
  pthread_t *threads = kf_xcalloc((size_t)nthreads, sizeof *threads);
  for (int t = 0; t < nthreads; t++)
    pthread_create(&threads[t], NULL, worker, &p);
  kf_job *jobs = kf_xcalloc(s->plan.n ? s->plan.n : 1, sizeof *jobs);
  size_t njobs = 0;
  int rc = 0;
  for (size_t i = 0; i < s->plan.n; i++) {
    kf_unit *u = &s->units[i];
    /* emit: rewritten only when its content changes */
    char *dir = kf_path_dirname(u->cs.source_path);
    if (kf_mkdir_p(dir) != 0 ||
        kf_write_if_changed(u->cs.source_path, u->in->source, u->in->source_len, NULL) != 0) {
      kf_error(NULL, NULL, "cannot write %s: %s", u->cs.source_path, strerror(errno));
      free(dir);
      u->state = KF_UNIT_FAILED;
      rc = 2;
      continue;
    }
    free(dir);
    if (kf_session_key(s, u) != 0) {
      kf_session_report(s, u);
      u->state = KF_UNIT_FAILED;
      continue;
    }
    /* identical instantiations compile once */
    for (size_t j = 0; j < njobs; j++)
      if (!strcmp(jobs[j].unit->key, u->key))
        u->job = &jobs[j];
    if (u->job)
      continue;
    char *why = NULL;
    cJSON *found = NULL;
    int st = kf_cache_check_entry(&s->cache, u->key, &found, &why);
    free(why);
    if (st == KF_ENTRY_OK) {
      take_entry(u, found);
      cJSON_Delete(found);
      u->state = KF_UNIT_CACHED;
      kf_cache_touch(&s->cache, u->key);
      continue;
    }
    kf_job *j = &jobs[njobs++];
    j->unit = u;
    u->job = j;
    pthread_mutex_lock(&p.mu);
    p.total++;
    if (p.tail)
      p.tail->next = j;
    else
      p.head = j;
    p.tail = j;
    pthread_cond_signal(&p.cv);
    pthread_mutex_unlock(&p.mu);
  }
  pthread_mutex_lock(&p.mu);
  p.closing = 1;
  pthread_cond_broadcast(&p.cv);
  pthread_mutex_unlock(&p.mu);
  for (int t = 0; t < nthreads; t++)
    pthread_join(threads[t], NULL);
  free(threads);
  if (p.tty)
    fputs("\r\033[K", stderr);
  for (size_t i = 0; i < s->plan.n; i++) {
    kf_unit *u = &s->units[i];
    if (u->job && u->state == KF_UNIT_PENDING) {
      int st = u->job->state;
      if (u->job->unit != u && st == KF_UNIT_FAILED && !u->error)
        u->error = kf_xstrdup("an identical kernel failed to compile");
      u->state = st == KF_UNIT_PENDING ? KF_UNIT_FAILED : st;
      if (u->job->unit != u) { /* the same entry as the unit that built it */
        memcpy(u->checksum, u->job->unit->checksum, sizeof u->checksum);
        u->size = u->job->unit->size;
      }
    }
    if (u->state == KF_UNIT_CACHED)
      (*n_cached)++;
    else if (u->state == KF_UNIT_COMPILED)
      (*n_compiled)++;
    else
      (*n_failed)++;
  }
  write_manifests(s);
  free(jobs);
  pthread_mutex_destroy(&p.mu);
  pthread_cond_destroy(&p.cv);
  if (rc)
    return rc;
  return *n_failed ? 1 : 0;
}
