/* cmd_remote.h: what the remote-reading commands (pull, ls --remote)
 * share. */
#ifndef KF_CMD_REMOTE_H
#define KF_CMD_REMOTE_H

#include "cli.h"
#include "remote_entry.h"

/* The (model, arch) pairs the inputs name: a description (MODEL.json) gives
 * its name and arches (--arch replaces them), a bare model name takes
 * --arch. Names must be safe path components. Returns 0, or 2 after
 * reporting (with usage for a usage error). */
int kf_remote_targets(kf_cli *cli, const char *usage, kf_strv *models, kf_strv *arches);
/* A remote-reading command's start: at least one input, its targets
 * (kf_remote_targets) and the remotes opened read-only with the trusted
 * keys into *t (to be freed either way). Returns 0, or 2 after reporting. */
int kf_remote_command_open(kf_cli *cli, const char *usage, kf_strv *models, kf_strv *arches,
                           kf_tier *t);

#endif /* KF_CMD_REMOTE_H */
