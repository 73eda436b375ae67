/* commands.h: the `kforge` subcommands, one file each (cmd_*.c). Each takes
 * argc/argv with argv[0] the command's name and returns the exit status. */
#ifndef KF_COMMANDS_H
#define KF_COMMANDS_H

int kf_cmd_build(int argc, char **argv);
int kf_cmd_warm(int argc, char **argv);
int kf_cmd_keys(int argc, char **argv);
int kf_cmd_explain(int argc, char **argv);
int kf_cmd_ls(int argc, char **argv);
int kf_cmd_verify(int argc, char **argv);
int kf_cmd_gc(int argc, char **argv);
int kf_cmd_import_hf(int argc, char **argv);

#endif /* KF_COMMANDS_H */
