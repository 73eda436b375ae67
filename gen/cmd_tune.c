/* cmd_tune.c: `kforge tune` — the candidates of every tuning parameter of a
 * description's kernels, built by kforge into a tuning directory, then timed
 * on the GPU by the Python binding (python -m kforge.tune), which writes the
 * tuning file (docs/cli.md, "kforge tune"; tuning.h).
 *
 * A unit is one (template, arch, width, shape): the kernels of the
 * descriptions that share it are tuned once. Each candidate of a unit (one
 * value of each tuning parameter, the schema's "tuning" lists multiplied
 * out) is a description of its own with one kernel, so a candidate its
 * template refuses (a static_assert, a launch it cannot make) fails alone:
 * its manifest is missing and the timer skips it. */
#define _GNU_SOURCE
#include "cli.h"
#include "commands.h"
#include "json.h"
#include "report.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

static const char usage[] =
    "usage: kforge tune [--arch ARCH] [--dir DIR] [--out FILE] [--build-only | --time-only]\n"
    "                   [--widths LIST] [--budget SECONDS] [-j N] [--template-dir DIR] [-I DIR]\n"
    "                   MODEL.json...\n"
    "Builds every candidate value of the tuning parameters that the template schemas\n"
    "declare (\"tuning\"), for each kernel of the descriptions at each width (--widths:\n"
    "only those), into DIR/cache (default DIR: ./tune), then times them on this machine's\n"
    "GPU with the Python binding ($KFORGE_PYTHON, else python3, -m kforge.tune; it needs\n"
    "torch) and writes the fastest that computes the right result to the tuning file\n"
    "--out (default DIR/tuning.json), which `kforge build --tuning FILE` applies.\n"
    "--build-only stops after the build (a builder without a GPU: run `kforge tune\n"
    "--time-only` or `python3 -m kforge.tune DIR` on the GPU machine); --time-only times\n"
    "what DIR holds.\n"
    "Timing is resumable: candidates DIR/results.json has for this device are not timed\n"
    "again. --budget stops timing after that many seconds; units left untimed get no\n"
    "entry. Exit 0, 1 when no candidate built or the timer failed, 2 on bad input.\n";

typedef struct {
  const char *dir, *out, *budget, *widths;
  int build_only, time_only;
} tune_opts;

static int extra(const char *opt, const char *val, void *ctx) {
  tune_opts *o = ctx;
  if (!strcmp(opt, "--build-only") && !val)
    o->build_only = 1;
  else if (!strcmp(opt, "--time-only") && !val)
    o->time_only = 1;
  else if (!strcmp(opt, "--dir") && val)
    o->dir = val;
  else if (!strcmp(opt, "--out") && val)
    o->out = val;
  else if (!strcmp(opt, "--budget") && val)
    o->budget = val;
  else if (!strcmp(opt, "--widths") && val)
    o->widths = val;
  else
    return -1;
  return 0;
}

/* Whether width w is in the comma-separated list (NULL: every width). */
static int in_widths(const char *list, int w) {
  if (!list)
    return 1;
  for (const char *p = list; *p;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end != p && v == w)
      return 1;
    p = *end ? end + 1 : end;
  }
  return 0;
}

/* ---- units ---- */

typedef struct {
  const kf_kernel_desc *k; /* the first kernel that has it */
  const kf_model *m;
  const char *arch;
  int width;
  char name[17]; /* hash of template, arch and shape */
  kf_strv kernels;
} unit;

static void shape_hash(const kf_kernel_desc *k, const char *arch, char out[17]) {
  kf_buf b = {0};
  kf_buf_printf(&b, "%s|%s", k->tmpl->name, arch);
  for (size_t i = 0; i < k->tmpl->nparams; i++)
    if (!k->tmpl->params[i].tuning) {
      char v[64];
      kf_value_format(k->values[i], v, sizeof v);
      kf_buf_printf(&b, "|%s=%s", k->tmpl->params[i].name, v);
    }
  kf_hex64(XXH3_64bits(b.data, b.len), out);
  free(b.data);
}

static int has_tuning(const kf_template *t) {
  for (size_t i = 0; i < t->nparams; i++)
    if (t->params[i].tuning)
      return 1;
  return 0;
}

static size_t ncandidates(const kf_template *t) {
  size_t n = 1;
  for (size_t i = 0; i < t->nparams; i++)
    if (t->params[i].tuning)
      n *= t->params[i].n_tuning;
  return n;
}

/* Candidate c's value of each parameter of u (c counted in mixed radix over
 * the tuning lists, the first tuning parameter fastest). */
static void candidate_values(const unit *u, size_t c, kf_value *out) {
  const kf_template *t = u->k->tmpl;
  for (size_t i = 0; i < t->nparams; i++) {
    out[i] = u->k->values[i];
    if (t->params[i].tuning) {
      out[i] = (kf_value){0, t->params[i].tuning[c % t->params[i].n_tuning], 0};
      c /= t->params[i].n_tuning;
    }
  }
}

static void add_value(cJSON *o, const char *name, kf_value v) {
  cJSON_AddItemToObject(o, name, cJSON_CreateNumber(v.is_float ? v.f : (double)v.i));
}

static cJSON *dirs_json(const kf_strv *dirs) {
  cJSON *a = cJSON_CreateArray();
  for (size_t i = 0; i < dirs->n; i++)
    cJSON_AddItemToArray(a, cJSON_CreateString(dirs->v[i]));
  return a;
}

/* Candidate c of unit u as a description: one kernel, kind "k". */
static cJSON *candidate_description(const unit *u, size_t c, const char *model_name) {
  const kf_template *t = u->k->tmpl;
  kf_value *vals = kf_xcalloc(t->nparams ? t->nparams : 1, sizeof *vals);
  candidate_values(u, c, vals);
  cJSON *d = cJSON_CreateObject();
  cJSON_AddStringToObject(d, "name", model_name);
  cJSON_AddItemToObject(d, "shape", cJSON_CreateObject());
  cJSON *w = cJSON_AddArrayToObject(d, "widths");
  cJSON_AddItemToArray(w, cJSON_CreateNumber(u->width));
  cJSON *a = cJSON_AddArrayToObject(d, "arches");
  cJSON_AddItemToArray(a, cJSON_CreateString(u->arch));
  cJSON *ks = cJSON_AddArrayToObject(d, "kernels");
  cJSON *k = cJSON_CreateObject();
  cJSON_AddStringToObject(k, "kind", "k");
  cJSON_AddStringToObject(k, "template", t->name);
  cJSON *p = cJSON_AddObjectToObject(k, "params");
  for (size_t i = 0; i < t->nparams; i++)
    add_value(p, t->params[i].name, vals[i]);
  cJSON_AddItemToArray(ks, k);
  /* the model's own template and include directories (absolute) */
  if (u->m->template_dirs.n)
    cJSON_AddItemToObject(d, "template_dirs", dirs_json(&u->m->template_dirs));
  if (u->m->include_dirs.n)
    cJSON_AddItemToObject(d, "include_dirs", dirs_json(&u->m->include_dirs));
  free(vals);
  return d;
}

static unit *find_unit(unit *units, size_t n, const kf_kernel_desc *k, const char *arch, int width,
                       const char *name) {
  for (size_t i = 0; i < n; i++)
    if (units[i].width == width && !strcmp(units[i].name, name) && !strcmp(units[i].arch, arch) &&
        !strcmp(units[i].k->tmpl->name, k->tmpl->name))
      return &units[i];
  return NULL;
}

static int write_json(const char *path, cJSON *j) {
  char *text = cJSON_Print(j);
  kf_buf b = {0};
  kf_buf_printf(&b, "%s\n", text);
  int rc = kf_write_file_atomic(path, b.data, b.len);
  if (rc != 0)
    kf_error(path, NULL, "cannot write: %s", strerror(errno));
  free(text);
  free(b.data);
  return rc;
}

/* The build of the candidates, in this process: `kforge build` over the
 * candidate descriptions, its output (a refused candidate's compiler errors
 * are expected) in DIR/build.log. Returns build's status, or -1. */
static int build_candidates(const kf_cli *cli, const char *dir, const kf_strv *descs) {
  char *cache = kf_path_join(dir, "cache"), *out = kf_path_join(dir, "sources");
  char *log = kf_path_join(dir, "build.log"), jobs[16];
  snprintf(jobs, sizeof jobs, "%d", cli->jobs);
  kf_strv argv = {0};
  const char *fixed[] = {"build",
                         "--cache",
                         cache,
                         "--out",
                         out,
                         "-j",
                         jobs,
                         "--templates",
                         cli->mopt.templates_dir,
                         "--families",
                         cli->mopt.families_dir};
  for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
    kf_strv_push(&argv, fixed[i]);
  for (size_t i = 0; i < cli->mopt.extra_template_dirs.n; i++) {
    kf_strv_push(&argv, "--template-dir");
    kf_strv_push(&argv, cli->mopt.extra_template_dirs.v[i]);
  }
  for (size_t i = 0; i < cli->mopt.extra_include_dirs.n; i++) {
    kf_strv_push(&argv, "-I");
    kf_strv_push(&argv, cli->mopt.extra_include_dirs.v[i]);
  }
  for (size_t i = 0; i < cli->defines.n; i++) {
    kf_strv_push(&argv, "--define");
    kf_strv_push(&argv, cli->defines.v[i]);
  }
  for (size_t i = 0; i < descs->n; i++)
    kf_strv_push(&argv, descs->v[i]);
  int rc = -1;
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (saved < 0 || fd < 0) {
    kf_error(log, NULL, "cannot write: %s", strerror(errno));
  } else {
    dup2(fd, STDERR_FILENO);
    int saved_out = dup(STDOUT_FILENO);
    dup2(fd, STDOUT_FILENO);
    rc = kf_cmd_build((int)argv.n, argv.v);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, STDOUT_FILENO);
    close(saved_out);
    dup2(saved, STDERR_FILENO);
  }
  if (fd >= 0)
    close(fd);
  if (saved >= 0)
    close(saved);
  kf_strv_free(&argv);
  free(cache);
  free(out);
  free(log);
  return rc;
}

/* Writes the units' candidate descriptions under DIR/descriptions and
 * DIR/plan.json (docs/cli.md); builds them unless time_only. */
static int prepare(const kf_cli *cli, const tune_opts *o, unit *units, size_t nunits) {
  char *ddir = kf_path_join(o->dir, "descriptions");
  if (kf_mkdir_p(ddir) != 0) {
    kf_error(ddir, NULL, "cannot create: %s", strerror(errno));
    free(ddir);
    return 2;
  }
  cJSON *plan = cJSON_CreateObject();
  cJSON_AddNumberToObject(plan, "kforge_tune_plan", 1);
  char *cache = kf_path_join(o->dir, "cache");
  char *abs_cache = kf_path_absolute(cache);
  free(cache);
  cJSON *jus = cJSON_AddArrayToObject(plan, "units");
  kf_strv descs = {0};
  size_t total = 0;
  for (size_t i = 0; i < nunits; i++) {
    const unit *u = &units[i];
    const kf_template *t = u->k->tmpl;
    cJSON *ju = cJSON_CreateObject();
    cJSON_AddStringToObject(ju, "template", t->name);
    cJSON_AddStringToObject(ju, "arch", u->arch);
    cJSON_AddNumberToObject(ju, "W", u->width);
    cJSON *shape = cJSON_AddObjectToObject(ju, "shape");
    cJSON *current = cJSON_CreateObject();
    for (size_t p = 0; p < t->nparams; p++)
      add_value(t->params[p].tuning ? current : shape, t->params[p].name, u->k->values[p]);
    cJSON_AddItemToObject(ju, "current", current);
    cJSON_AddItemToObject(ju, "kernels", dirs_json(&u->kernels));
    cJSON *cands = cJSON_AddArrayToObject(ju, "candidates");
    size_t n = ncandidates(t);
    kf_value *vals = kf_xcalloc(t->nparams ? t->nparams : 1, sizeof *vals);
    for (size_t c = 0; c < n; c++) {
      char *name = kf_xasprintf("tune-%s-%s-w%d-c%zu", t->name, u->name, u->width, c);
      for (char *q = name; *q; q++)
        if (*q == '_')
          *q = '-';
      char *file = kf_xasprintf("%s/%s.json", ddir, name);
      cJSON *d = candidate_description(u, c, name);
      int bad = write_json(file, d);
      cJSON_Delete(d);
      if (bad) {
        free(file);
        free(name);
        free(vals);
        cJSON_Delete(plan);
        kf_strv_free(&descs);
        free(abs_cache);
        free(ddir);
        return 2;
      }
      kf_strv_push(&descs, file);
      cJSON *jc = cJSON_CreateObject();
      cJSON_AddStringToObject(jc, "model", name);
      cJSON *params = cJSON_AddObjectToObject(jc, "params");
      candidate_values(u, c, vals);
      for (size_t p = 0; p < t->nparams; p++)
        if (t->params[p].tuning)
          add_value(params, t->params[p].name, vals[p]);
      cJSON_AddItemToArray(cands, jc);
      free(file);
      free(name);
      total++;
    }
    free(vals);
    cJSON_AddItemToArray(jus, ju);
  }
  int rc = 0;
  if (!o->time_only) {
    fprintf(stderr,
            "kforge tune: building %zu candidates of %zu units into %s/cache (log: %s/build.log)\n",
            total, nunits, o->dir, o->dir);
    if (build_candidates(cli, o->dir, &descs) < 0)
      rc = 2;
  }
  /* which candidates built: those whose manifest the build wrote */
  size_t built = 0;
  for (cJSON *ju = jus->child; ju; ju = ju->next) {
    cJSON *cands = cJSON_GetObjectItemCaseSensitive(ju, "candidates");
    const char *arch = cJSON_GetObjectItemCaseSensitive(ju, "arch")->valuestring;
    for (cJSON *jc = cands->child; jc; jc = jc->next) {
      const char *name = cJSON_GetObjectItemCaseSensitive(jc, "model")->valuestring;
      char *man = kf_xasprintf("%s/v1/manifests/%s/%s.json", abs_cache, name, arch);
      int ok = kf_path_exists(man);
      cJSON_AddBoolToObject(jc, "built", ok);
      built += ok;
      free(man);
    }
  }
  if (rc == 0) {
    char *pp = kf_path_join(o->dir, "plan.json");
    if (write_json(pp, plan) != 0)
      rc = 2;
    free(pp);
  }
  if (rc == 0)
    fprintf(stderr, "kforge tune: %zu of %zu candidates built%s\n", built, total,
            built < total ? " (the others' templates refused them: see build.log)" : "");
  if (rc == 0 && built == 0 && total > 0)
    rc = 1;
  cJSON_Delete(plan);
  kf_strv_free(&descs);
  free(abs_cache);
  free(ddir);
  return rc;
}

/* Runs the timer: $KFORGE_PYTHON -m kforge.tune DIR --out FILE [--budget S]. */
static int time_candidates(const tune_opts *o) {
  const char *py = getenv("KFORGE_PYTHON");
  if (!py || !*py)
    py = "python3";
  char *out = o->out ? kf_xstrdup(o->out) : kf_path_join(o->dir, "tuning.json");
  const char *argv[9];
  int n = 0;
  argv[n++] = py;
  argv[n++] = "-m";
  argv[n++] = "kforge.tune";
  argv[n++] = o->dir;
  argv[n++] = "--out";
  argv[n++] = out;
  if (o->budget) {
    argv[n++] = "--budget";
    argv[n++] = o->budget;
  }
  argv[n] = NULL;
  fflush(stdout);
  fflush(stderr);
  execvp(py, (char *const *)argv);
  kf_error(NULL, NULL,
           "cannot run %s (%s): the timing needs Python with the kforge binding and torch "
           "(docs/install.md); or time the candidates elsewhere: python3 -m kforge.tune %s",
           py, strerror(errno), o->dir);
  free(out);
  return 1;
}

int kf_cmd_tune(int argc, char **argv) {
  kf_cli cli;
  tune_opts o = {.dir = "tune"};
  int rc = kf_cli_parse(&cli, argc, argv, usage, extra, &o);
  if (rc != 0)
    return rc == 1 ? 0 : rc;
  if (o.build_only && o.time_only) {
    kf_usage_error(usage, "--build-only and --time-only exclude each other");
    kf_cli_free(&cli);
    return 2;
  }
  if (o.budget) {
    char *end;
    double b = strtod(o.budget, &end);
    if (*end || !(b > 0)) {
      kf_usage_error(usage, "--budget needs a number of seconds above 0, got '%s'", o.budget);
      kf_cli_free(&cli);
      return 2;
    }
  }
  if (o.widths) {
    for (const char *p = o.widths;;) {
      char *end;
      long v = strtol(p, &end, 10);
      if (end == p || v < 1 || v > KF_MAX_WIDTH || (*end && *end != ',')) {
        kf_usage_error(usage, "--widths needs widths from 1 to %d, comma-separated, got '%s'",
                       KF_MAX_WIDTH, o.widths);
        kf_cli_free(&cli);
        return 2;
      }
      if (!*end)
        break;
      p = end + 1;
    }
  }
  if (cli.inputs.n == 0 && !o.time_only) {
    kf_usage_error(usage, "no description given");
    kf_cli_free(&cli);
    return 2;
  }
  if (o.time_only) {
    kf_cli_free(&cli);
    return time_candidates(&o);
  }
  kf_model **models = kf_xcalloc(cli.inputs.n, sizeof *models);
  size_t nmodels = 0;
  int bad = 0;
  for (size_t i = 0; i < cli.inputs.n; i++) {
    models[nmodels] = kf_model_load(cli.inputs.v[i], &cli.mopt);
    if (models[nmodels])
      nmodels++;
    else
      bad = 1;
  }
  unit *units = NULL;
  size_t nunits = 0;
  for (size_t mi = 0; !bad && mi < nmodels; mi++) {
    const kf_model *m = models[mi];
    for (size_t ki = 0; ki < m->nkernels; ki++) {
      const kf_kernel_desc *k = &m->kernels[ki];
      if (k->nphases || !has_tuning(k->tmpl))
        continue; /* a layer kind runs its phases' choices */
      for (size_t wi = 0; wi < m->nwidths; wi++)
        for (size_t ai = 0; ai < m->arches.n && in_widths(o.widths, m->widths[wi]); ai++) {
          const char *arch = m->arches.v[ai];
          char name[17];
          shape_hash(k, arch, name);
          unit *u = find_unit(units, nunits, k, arch, m->widths[wi], name);
          if (!u) {
            units = kf_xpush(units, nunits, sizeof *units);
            u = &units[nunits++];
            memset(u, 0, sizeof *u);
            *u = (unit){.k = k, .m = m, .arch = arch, .width = m->widths[wi]};
            memcpy(u->name, name, sizeof name);
          }
          char *id = kf_xasprintf("%s/%s/w%d/%s", m->name, k->kind, m->widths[wi], arch);
          kf_strv_push(&u->kernels, id);
          free(id);
        }
    }
  }
  if (!bad && nunits == 0) {
    kf_error(NULL, NULL,
             "no kernel of these descriptions has a tuning parameter (a template "
             "schema's \"tuning\")");
    rc = 2;
  } else if (bad) {
    rc = 2;
  } else {
    rc = prepare(&cli, &o, units, nunits);
  }
  for (size_t i = 0; i < nunits; i++)
    kf_strv_free(&units[i].kernels);
  free(units);
  for (size_t i = 0; i < nmodels; i++)
    kf_model_free(models[i]);
  free(models);
  if (rc == 0 && !o.build_only) {
    kf_cli_free(&cli);
    return time_candidates(&o);
  }
  if (rc == 0)
    fprintf(stderr,
            "kforge tune: time them on the GPU machine with: kforge tune --time-only --dir %s"
            " (or python3 -m kforge.tune %s)\n",
            o.dir, o.dir);
  kf_cli_free(&cli);
  return rc;
}
