/* commands.h: the `kforge` subcommands, one file each (cmd_*.c). Each takes
 * argc/argv with argv[0] the command's name and returns the exit status. */
#ifndef KF_COMMANDS_H
#define KF_COMMANDS_H

int kf_cmd_build(int argc, char **argv);
int kf_cmd_warm(int argc, char **argv);
int kf_cmd_publish(int argc, char **argv);
int kf_cmd_pull(int argc, char **argv);
int kf_cmd_keygen(int argc, char **argv);
int kf_cmd_stats(int argc, char **argv);
int kf_cmd_keys(int argc, char **argv);
int kf_cmd_lint(int argc, char **argv);
int kf_cmd_toolchains(int argc, char **argv);
int kf_cmd_explain(int argc, char **argv);
int kf_cmd_ls(int argc, char **argv);
int kf_cmd_ls_remote(int argc, char **argv);
int kf_cmd_verify(int argc, char **argv);
int kf_cmd_gc(int argc, char **argv);
int kf_cmd_import_hf(int argc, char **argv);
int kf_cmd_tune(int argc, char **argv);

/* import-hf's conversion, apart from the command line (the fuzzer calls
 * it): a parsed config.json (named in in messages) into a description of its
 * family, with the family's preset from fam_dir; name NULL takes it from the
 * config. Returns 0 with *desc and *fam (caller deletes both), or 2 after
 * reporting what is wrong (nothing to free). Reads only fam_dir. */
#include <cjson/cJSON.h>
int kf_import_hf_convert(const cJSON *cfg, const char *in, const char *fam_dir, const char *name,
                         cJSON **desc_out, cJSON **fam_out);

#endif /* KF_COMMANDS_H */
