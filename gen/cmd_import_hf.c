/* cmd_import_hf.c: `kforge import-hf` — turns a Hugging Face config.json
 * into a description of the matching family. The family preset decides which
 * shape fields a description carries; each is taken from the config under
 * the same name, or from the few places Hugging Face spells it otherwise. */
#include "commands.h"
#include "json.h"
#include "paths.h"
#include "report.h"
#include "session.h"

#include <ctype.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kforge import-hf CONFIG.json [-o OUT.json] [--name NAME] [--page-size N[,N...]]\n"
    "                        [--families DIR]\n"
    "Writes a description of the family that matches the config's model_type (llama,\n"
    "mistral (family llama), qwen2, qwen3, qwen3_moe, mixtral, glm4_moe) to OUT.json, or to\n"
    "standard output. Where a description\n"
    "in the directory above the families (models/) has the same family and shape, its\n"
    "tuning fields are copied, and standard error names it. A config field that changes\n"
    "the math and that the family does not implement (biases, another activation, rotary\n"
    "scaling or dtype, a sliding window, quantized weights, a shared expert) is refused,\n"
    "exit 2. --page-size: the tokens per page of the serving engine's KV cache (the\n"
    "shape's page_size; the family's default when not given; kforge build checks it\n"
    "against the attention templates: 1, 2, 4, 8, 16, 32 or 64); a list such as 16,1\n"
    "builds the kinds that read it once per size (the description's page_sizes), the\n"
    "first being the one served when a caller names none.\n";

static const struct {
  const char *model_type;
  const char *family;
} families[] = {
    {"llama", "llama"},     {"mistral", "llama"}, /* the Llama layer; a binding window is refused */
    {"qwen2", "qwen2"},     {"qwen3", "qwen3"},       {"qwen3_moe", "qwen3_moe"},
    {"mixtral", "mixtral"}, {"glm4_moe", "glm4_moe"}, {NULL, NULL}};

/* Where a family's shape field comes from in a config.json: a member path,
 * tried in order. */
static const struct {
  const char *field;
  const char *paths[3];
} aliases[] = {
    {"dtype", {"torch_dtype", "dtype", NULL}},
    {"rope_scaling_factor", {"rope_scaling.factor", "rope_parameters.factor", NULL}},
    {"rope_low_freq_factor",
     {"rope_scaling.low_freq_factor", "rope_parameters.low_freq_factor", NULL}},
    {"rope_high_freq_factor",
     {"rope_scaling.high_freq_factor", "rope_parameters.high_freq_factor", NULL}},
    {"rope_original_max_position_embeddings",
     {"rope_scaling.original_max_position_embeddings",
      "rope_parameters.original_max_position_embeddings", NULL}},
    {"rope_theta", {"rope_theta", "rope_parameters.rope_theta", NULL}},
    {"num_experts",
     {"num_experts", "num_local_experts", "n_routed_experts"}}, /* Mixtral, GLM-4.5 */
    {"moe_intermediate_size", {"moe_intermediate_size", "intermediate_size", NULL}}, /* Mixtral */
    {NULL, {NULL}},
};

/* ---- fields that change the math ---- */

/* Members of a config that would make a model run other math than the
 * families implement (dense GQA decoder, SiLU MLP without biases, full
 * attention, bf16 weights). Each is refused when its value is other than
 * the ones listed as harmless: null, false, 0, or the text given. */
static const struct {
  const char *field;
  const char *harmless;    /* a string value that is fine, or NULL */
  const char *implemented; /* the families that implement it, space-separated, or NULL */
  const char *why;
} math_fields[] = {
    /* GLM-4.5's attention_bias: q, k and v (its o_proj has none) */
    {"attention_bias", NULL, "glm4_moe", "biases on the q, k, v and o projections"},
    {"mlp_bias", NULL, NULL, "biases on the MLP projections"},
    {"hidden_act", "silu", NULL, "another MLP activation than silu"},
    {"quantization_config", NULL, NULL, "quantized weights (the kernels read bf16 weights)"},
    {"partial_rotary_factor", NULL, "glm4_moe", "rotary embedding on part of each head"},
    {"attn_logit_softcapping", NULL, NULL, "soft-capped attention logits"},
    {"query_pre_attn_scalar", NULL, NULL, "another attention scale than 1/sqrt(head_dim)"},
    {"use_qk_norm", NULL, "qwen3 qwen3_moe", "an RMSNorm on q and k"},
    {"num_experts", NULL, "qwen3_moe mixtral glm4_moe", "a mixture of experts"},
    {"num_local_experts", NULL, "qwen3_moe mixtral", "a mixture of experts"},
    {"num_experts_per_tok", NULL, "qwen3_moe mixtral glm4_moe", "a mixture of experts"},
    {"moe_intermediate_size", NULL, "qwen3_moe mixtral glm4_moe", "a mixture of experts"},
    {"n_routed_experts", NULL, "glm4_moe", "DeepSeek-style routed experts"},
    {"n_shared_experts", NULL, "glm4_moe", "a shared expert"},
    {"first_k_dense_replace", NULL, "glm4_moe", "dense layers before the experts' layers"},
    {"shared_expert_intermediate_size", NULL, NULL, "a shared expert"},
    {NULL, NULL, NULL, NULL},
};

/* 1 when family is one of the space-separated names in list (NULL: none). */
static int implements(const char *list, const char *family) {
  size_t n = strlen(family);
  for (const char *p = list; p && *p;) {
    size_t len = strcspn(p, " ");
    if (len == n && !strncmp(p, family, n))
      return 1;
    p += len + (p[len] == ' ');
  }
  return 0;
}

/* 1 when v says the feature is off: null, false, 0, or the harmless text. */
static int harmless(const cJSON *v, const char *text) {
  if (cJSON_IsNull(v) || cJSON_IsFalse(v))
    return 1;
  if (cJSON_IsNumber(v))
    return v->valuedouble == 0;
  if (cJSON_IsString(v))
    return text && !strcmp(v->valuestring, text);
  return 0;
}

/* A short text of a config value for messages. */
static void show(const cJSON *v, char *buf, size_t n) {
  if (cJSON_IsString(v)) {
    snprintf(buf, n, "\"%.60s\"", v->valuestring);
    return;
  }
  char *t = cJSON_PrintUnformatted(v);
  snprintf(buf, n, "%.60s%s", t ? t : "?", t && strlen(t) > 60 ? "..." : "");
  free(t);
}

/* rope_scaling (or rope_parameters): none, "default", or the Llama 3 rule
 * when the family takes its fields; each member must be one imported. */
static int check_rope(const char *in, const cJSON *cfg, const cJSON *fam, const char *family) {
  static const char *const groups[] = {"rope_scaling", "rope_parameters", NULL};
  static const char *const llama3_members[] = {
      "rope_type",        "type",
      "factor",           "low_freq_factor",
      "high_freq_factor", "original_max_position_embeddings",
      "rope_theta",       NULL};
  const cJSON *opt = cJSON_GetObjectItemCaseSensitive(fam, "optional_fields");
  int family_has_llama3 = cJSON_GetObjectItemCaseSensitive(opt, "rope_scaling_factor") != NULL;
  int errors = 0;
  for (int g = 0; groups[g]; g++) {
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, groups[g]);
    if (!rs || cJSON_IsNull(rs))
      continue;
    if (!cJSON_IsObject(rs)) {
      kf_error(in, groups[g], "must be an object or null, got %s", kf_json_type_name(rs));
      errors++;
      continue;
    }
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    const char *tyname = "rope_type";
    if (!ty) {
      ty = cJSON_GetObjectItemCaseSensitive(rs, "type");
      tyname = "type";
    }
    const char *t = cJSON_IsString(ty) ? ty->valuestring : NULL;
    char *p = kf_xasprintf("%s.%s", groups[g], tyname);
    int plain = t && !strcmp(t, "default");
    int llama3 = t && !strcmp(t, "llama3");
    if (!plain && !(llama3 && family_has_llama3)) {
      char got[80];
      if (ty)
        show(ty, got, sizeof got);
      else
        snprintf(got, sizeof got, "nothing");
      kf_error(in, p,
               "family %s implements %s, got %s; a model with other rotary scaling (yarn, "
               "linear, dynamic, longrope...) would run with the wrong positions",
               family,
               family_has_llama3 ? "no scaling or the Llama 3 rule (\"llama3\")" : "no scaling",
               got);
      errors++;
    }
    free(p);
    for (const cJSON *m = rs->child; m; m = m->next) {
      int known = 0;
      for (int k = 0; llama3_members[k]; k++)
        known |= !strcmp(m->string, llama3_members[k]);
      if (!known && !harmless(m, NULL)) {
        char *mp = kf_xasprintf("%s.%s", groups[g], m->string);
        kf_error(in, mp, "family %s has no such rotary setting", family);
        free(mp);
        errors++;
      }
    }
  }
  return errors;
}

/* Every field of the config that changes the math and that the family does
 * not implement, each reported at its name; returns their number. */
static int check_math(const char *in, const cJSON *cfg, const cJSON *fam, const char *family) {
  int errors = 0;
  for (int i = 0; math_fields[i].field; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, math_fields[i].field);
    if (!v || harmless(v, math_fields[i].harmless))
      continue;
    if (implements(math_fields[i].implemented, family))
      continue;
    char got[80];
    show(v, got, sizeof got);
    kf_error(in, math_fields[i].field, "family %s does not implement %s, got %s", family,
             math_fields[i].why, got);
    errors++;
  }
  /* torch_dtype (or dtype): the templates implement bf16 only */
  for (int i = 0; i < 2; i++) {
    const char *name = i ? "dtype" : "torch_dtype";
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, name);
    if (v && !(cJSON_IsString(v) && !strcmp(v->valuestring, "bfloat16"))) {
      char got[80];
      show(v, got, sizeof got);
      kf_error(in, name, "the templates implement bfloat16 only, got %s", got);
      errors++;
    }
  }
  /* sliding-window attention: Qwen configs carry a window that
   * use_sliding_window turns off; Mistral-style ones set it alone. A window
   * no shorter than max_position_embeddings never binds, so it is full
   * attention. */
  const cJSON *sw = cJSON_GetObjectItemCaseSensitive(cfg, "sliding_window");
  const cJSON *use = cJSON_GetObjectItemCaseSensitive(cfg, "use_sliding_window");
  const cJSON *maxpos = cJSON_GetObjectItemCaseSensitive(cfg, "max_position_embeddings");
  int never_binds = cJSON_IsNumber(sw) && cJSON_IsNumber(maxpos) && maxpos->valuedouble > 0 &&
                    sw->valuedouble >= maxpos->valuedouble;
  if (sw && !harmless(sw, NULL) && !cJSON_IsFalse(use) && !never_binds) {
    char got[80];
    show(sw, got, sizeof got);
    kf_error(in, "sliding_window",
             "family %s does not implement sliding-window attention, got %s%s (a window "
             "shorter than max_position_embeddings)",
             family, got, use ? " with use_sliding_window true" : "");
    errors++;
  }
  const cJSON *lt = cJSON_GetObjectItemCaseSensitive(cfg, "layer_types");
  int i = 0;
  for (const cJSON *e = cJSON_IsArray(lt) ? lt->child : NULL; e; e = e->next, i++)
    if (!cJSON_IsString(e) || strcmp(e->valuestring, "full_attention") != 0) {
      char got[80], *p = kf_xasprintf("layer_types[%d]", i);
      show(e, got, sizeof got);
      kf_error(in, p, "family %s implements full attention in every layer, got %s", family, got);
      free(p);
      errors++;
      break;
    }
  return errors + check_rope(in, cfg, fam, family);
}

static const cJSON *lookup_path(const cJSON *root, const char *path) {
  char *copy = kf_xstrdup(path);
  const cJSON *cur = root;
  char *save = NULL;
  for (char *t = strtok_r(copy, ".", &save); t && cur; t = strtok_r(NULL, ".", &save))
    cur = cJSON_IsObject(cur) ? cJSON_GetObjectItemCaseSensitive(cur, t) : NULL;
  free(copy);
  return cur;
}

static cJSON *convert_value(const char *field, const cJSON *v) {
  if (!strcmp(field, "dtype") && cJSON_IsString(v)) {
    /* check_math lets bfloat16 alone through */
    return cJSON_CreateString(!strcmp(v->valuestring, "bfloat16") ? "bf16" : v->valuestring);
  }
  if (cJSON_IsBool(v)) /* norm_topk_prob: true, as the families' 0 / 1 */
    return cJSON_CreateNumber(cJSON_IsTrue(v) ? 1 : 0);
  return cJSON_Duplicate(v, 1);
}

/* The length of path without its trailing '/'s (a lone "/" keeps its). */
static size_t len_without_slashes(const char *path) {
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/')
    len--;
  return len;
}

/* The last component of path, less a trailing '/'. */
static char *last_component(const char *path) {
  const size_t len = len_without_slashes(path);
  size_t start = len;
  while (start > 0 && path[start - 1] != '/')
    start--;
  return kf_xstrndup(path + start, len - start);
}

/* A name from where the config lies: for a file named config.json, its
 * folder, or NAME in the Hugging Face hub cache's
 * models--ORG--NAME/snapshots/REV/config.json; else the file's name less
 * ".config.json" or ".json". */
static char *name_from_path(const char *path) {
  char *base = last_component(path);
  if (strcmp(base, "config.json") != 0) {
    size_t len = strlen(base);
    if (len > 12 && !strcmp(base + len - 12, ".config.json"))
      base[len - 12] = '\0';
    else if (len > 5 && !strcmp(base + len - 5, ".json"))
      base[len - 5] = '\0';
    return base;
  }
  free(base);
  char *dir = kf_path_dirname(path);
  char *real = realpath(dir, NULL); /* "." and ".." name nothing */
  const char *d = real ? real : dir;
  const char *hub = strstr(d, "/models--");
  char *name;
  if (hub && strstr(hub, "/snapshots/")) {
    /* models--ORG--NAME: NAME follows the "--" after ORG */
    char *component = kf_xstrndup(hub + 9, strcspn(hub + 9, "/"));
    const char *sep = strstr(component, "--");
    name = kf_xstrdup(sep && sep[2] ? sep + 2 : component);
    free(component);
  } else {
    name = last_component(d);
  }
  free(real);
  free(dir);
  return name;
}

/* The model's name: the last component of the config's _name_or_path, else
 * name_from_path; lower case, with every character but [a-z0-9._-] made '-'. */
static char *name_from(const cJSON *cfg, const char *cfg_path) {
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(cfg, "_name_or_path");
  char *src = cJSON_IsString(n) && *n->valuestring ? last_component(n->valuestring)
                                                   : name_from_path(cfg_path);
  kf_buf b = {0};
  for (const char *p = src; *p && b.len < 64; p++) {
    char c = (char)tolower((unsigned char)*p);
    if (!isalnum((unsigned char)c) && c != '.' && c != '-' && c != '_')
      c = '-';
    kf_buf_add(&b, &c, 1);
  }
  free(src);
  return kf_buf_take(&b);
}

/* Whether every required shape field of the family that sizes a kernel has
 * the same value in both shapes: the norm's epsilon and the rotary base are
 * values the kernels compute with, not sizes, and change no tuning choice
 * (Mistral-7B is Llama-3.1-8B's shape with another rope_theta). */
static int same_shape(const cJSON *fam, const cJSON *a, const cJSON *b) {
  const cJSON *fields = cJSON_GetObjectItemCaseSensitive(fam, "shape_fields");
  for (const cJSON *f = fields ? fields->child : NULL; f; f = f->next) {
    if (!strcmp(f->string, "rms_norm_eps") || !strcmp(f->string, "rope_theta"))
      continue;
    const cJSON *va = cJSON_GetObjectItemCaseSensitive(a, f->string);
    const cJSON *vb = cJSON_GetObjectItemCaseSensitive(b, f->string);
    if (!va || !vb || !cJSON_Compare(va, vb, 1))
      return 0;
  }
  return 1;
}

/* Copies into shape the fields the family marks "tuning" (measured choices
 * such as o_proj_k_split) from the first description, in name order, under
 * models_dir with the same family and shape. Returns its path (caller frees)
 * or NULL. Descriptions that do not parse are passed over: they are not this
 * command's input. */
static char *copy_tuning(const char *models_dir, const char *family, const cJSON *fam,
                         cJSON *shape) {
  char *pattern = kf_xasprintf("%s/*.json", models_dir);
  glob_t g;
  char *from = NULL;
  if (glob(pattern, 0, NULL, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc && !from; i++) {
      char *text = kf_read_file(g.gl_pathv[i], NULL);
      cJSON *d = text ? cJSON_Parse(text) : NULL;
      free(text);
      const cJSON *df = cJSON_GetObjectItemCaseSensitive(d, "family");
      const cJSON *ds = cJSON_GetObjectItemCaseSensitive(d, "shape");
      if (cJSON_IsString(df) && !strcmp(df->valuestring, family) && cJSON_IsObject(ds) &&
          same_shape(fam, shape, ds)) {
        from = kf_xstrdup(g.gl_pathv[i]);
        const cJSON *opt = cJSON_GetObjectItemCaseSensitive(fam, "optional_fields");
        for (const cJSON *o = opt ? opt->child : NULL; o; o = o->next) {
          const cJSON *v = cJSON_GetObjectItemCaseSensitive(ds, o->string);
          if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "tuning")) && v &&
              !cJSON_GetObjectItemCaseSensitive(shape, o->string))
            cJSON_AddItemToObject(shape, o->string, cJSON_Duplicate(v, 1));
        }
      }
      cJSON_Delete(d);
    }
    globfree(&g);
  }
  free(pattern);
  return from;
}

int kf_import_hf_convert(const cJSON *cfg, const char *in, const char *fam_dir, const char *name,
                         cJSON **desc_out, cJSON **fam_out) {
  int rc = 2;
  cJSON *desc = NULL, *fam = NULL;
  char *fam_path = NULL, *model_name = NULL;
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
  const char *family = NULL;
  for (int i = 0; families[i].model_type && cJSON_IsString(mt); i++)
    if (!strcmp(families[i].model_type, mt->valuestring))
      family = families[i].family;
  if (!family) {
    kf_error(in, "model_type",
             "no kforge family for model_type %s%s%s (supported: llama, mistral, qwen2, qwen3, "
             "qwen3_moe, mixtral, glm4_moe)",
             cJSON_IsString(mt) ? "\"" : "", cJSON_IsString(mt) ? mt->valuestring : "(missing)",
             cJSON_IsString(mt) ? "\"" : "");
    goto done;
  }
  /* Qwen3-MoE configs can make some layers dense; the qwen3_moe family's
   * layers are all mixtures of experts */
  const cJSON *step = cJSON_GetObjectItemCaseSensitive(cfg, "decoder_sparse_step");
  const cJSON *dense = cJSON_GetObjectItemCaseSensitive(cfg, "mlp_only_layers");
  if (step && !(cJSON_IsNumber(step) && step->valuedouble == 1)) {
    kf_error(in, "decoder_sparse_step",
             "only 1 is supported (every layer a mixture of experts; family %s)", family);
    goto done;
  }
  if (dense && !(cJSON_IsArray(dense) && cJSON_GetArraySize(dense) == 0)) {
    kf_error(in, "mlp_only_layers",
             "dense layers among the experts' are not supported (family %s): must be []", family);
    goto done;
  }
  /* DeepSeek-V3-style group-limited routing (the experts in groups, the
   * choice within the best topk_group groups): the families route over all
   * experts, which is the same only with one group */
  static const char *const groups[] = {"n_group", "topk_group", NULL};
  for (int g = 0; groups[g]; g++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, groups[g]);
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 1)) {
      char got[80];
      show(v, got, sizeof got);
      kf_error(in, groups[g],
               "family %s routes over all experts (one group), got %s: group-limited routing "
               "is not implemented",
               family, got);
      goto done;
    }
  }
  fam_path = kf_xasprintf("%s/%s.json", fam_dir, family);
  fam = kf_json_load(fam_path, fam_path);
  if (!fam)
    goto done;
  if (kf_json_check_unique(in, "", cfg) || check_math(in, cfg, fam, family))
    goto done;
  model_name = name ? kf_xstrdup(name) : name_from(cfg, in);
  desc = cJSON_CreateObject();
  cJSON_AddStringToObject(desc, "name", model_name);
  cJSON_AddStringToObject(desc, "family", family);
  cJSON *shape = cJSON_AddObjectToObject(desc, "shape");
  const char *lists[2] = {"shape_fields", "optional_fields"};
  int missing = 0;
  for (int li = 0; li < 2; li++) {
    const cJSON *fields = cJSON_GetObjectItemCaseSensitive(fam, lists[li]);
    for (const cJSON *f = fields ? fields->child : NULL; f; f = f->next) {
      const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, f->string);
      for (int a = 0; !v && aliases[a].field; a++)
        if (!strcmp(aliases[a].field, f->string))
          for (int p = 0; !v && aliases[a].paths[p]; p++)
            v = lookup_path(cfg, aliases[a].paths[p]);
      cJSON *val = v && !cJSON_IsNull(v) ? convert_value(f->string, v) : NULL;
      /* Hugging Face leaves these out when they take their usual values */
      if (!val && !strcmp(f->string, "num_key_value_heads"))
        val = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(cfg, "num_attention_heads"), 1);
      if (!val && !strcmp(f->string, "head_dim")) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(cfg, "hidden_size");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(cfg, "num_attention_heads");
        if (cJSON_IsNumber(h) && cJSON_IsNumber(n) && n->valueint > 0)
          val = cJSON_CreateNumber(h->valueint / n->valueint);
      }
      if (val)
        cJSON_AddItemToObject(shape, f->string, val);
      else if (li == 0) {
        kf_error(in, f->string, "missing; family %s needs it", family);
        missing++;
      }
    }
  }
  if (missing)
    goto done;
  rc = 0;
done:
  if (rc == 0) {
    *desc_out = desc;
    *fam_out = fam;
  } else {
    cJSON_Delete(desc);
    cJSON_Delete(fam);
  }
  free(fam_path);
  free(model_name);
  return rc;
}

int kf_cmd_import_hf(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *name = NULL, *fam_dir = kf_default_families_dir();
  int pages[16], npages = 0; /* none: the family's default */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strcmp(a, "-o") && i + 1 < argc)
      out = argv[++i];
    else if (!strcmp(a, "--name") && i + 1 < argc)
      name = argv[++i];
    else if (!strcmp(a, "--families") && i + 1 < argc)
      fam_dir = argv[++i];
    else if (!strcmp(a, "--page-size") && i + 1 < argc) {
      const char *arg = argv[++i];
      npages = 0;
      for (const char *at = arg;; at++) {
        char *end;
        errno = 0;
        long v = strtol(at, &end, 10);
        int dup = 0;
        for (int k = 0; k < npages; k++)
          dup |= pages[k] == v;
        if (errno || end == at || !isdigit((unsigned char)*at) || v < 1 || v > 1 << 20 || dup ||
            npages == (int)(sizeof pages / sizeof pages[0]) || (*end && *end != ',')) {
          kf_usage_error(usage,
                         "--page-size '%s': expected tokens per page, or a list of different "
                         "ones such as 16,1 (at most %zu)",
                         arg, sizeof pages / sizeof pages[0]);
          return 2;
        }
        pages[npages++] = (int)v;
        if (!*end)
          break;
        at = end;
      }
    } else if (a[0] != '-' && !in)
      in = a;
    else {
      kf_usage_error(usage, "unexpected argument '%s'", a);
      return 2;
    }
  }
  if (!in) {
    kf_usage_error(usage, "no config.json given");
    return 2;
  }
  cJSON *cfg = kf_json_load(in, in);
  if (!cfg)
    return 2;
  cJSON *desc = NULL, *fam = NULL;
  int rc = kf_import_hf_convert(cfg, in, fam_dir, name, &desc, &fam);
  if (rc != 0)
    goto done;
  rc = 2;
  const char *family = cJSON_GetObjectItemCaseSensitive(desc, "family")->valuestring;
  const char *model_name = cJSON_GetObjectItemCaseSensitive(desc, "name")->valuestring;
  cJSON *shape = cJSON_GetObjectItemCaseSensitive(desc, "shape");
  if (npages) {
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(fam, "optional_fields");
    if (!cJSON_GetObjectItemCaseSensitive(opt, "page_size")) {
      kf_error(NULL, "--page-size", "family %s has no page_size field", family);
      goto done;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(shape, "page_size");
    cJSON_AddNumberToObject(shape, "page_size", pages[0]);
    if (npages > 1)
      cJSON_AddItemToObject(desc, "page_sizes", cJSON_CreateIntArray(pages, npages));
  }
  char *fam_trimmed = kf_xstrndup(fam_dir, len_without_slashes(fam_dir)); /* models/families/ */
  char *models_dir = kf_path_dirname(fam_trimmed);
  free(fam_trimmed);
  char *tuned_from = copy_tuning(models_dir, family, fam, shape);
  if (tuned_from)
    kf_note(NULL, NULL, "tuning fields from %s (same family and shape)", tuned_from);
  free(tuned_from);
  free(models_dir);
  char *text = cJSON_Print(desc);
  if (out) {
    size_t n = strlen(text);
    text = kf_xrealloc(text, n + 2);
    text[n] = '\n';
    text[n + 1] = '\0';
    if (kf_write_file_atomic(out, text, n + 1) != 0) {
      kf_error(NULL, NULL, "cannot write %s: %s", out, strerror(errno));
      free(text);
      goto done;
    }
    kf_note(NULL, NULL, "wrote %s (model %s, family %s)", out, model_name, family);
  } else {
    puts(text);
  }
  free(text);
  rc = 0;
done:
  cJSON_Delete(cfg);
  cJSON_Delete(fam);
  cJSON_Delete(desc);
  return rc;
}
