/* cmd_remote.h: what the remote-reading commands (pull, ls --remote)
 * share. */
#ifndef KF_CMD_REMOTE_H
#define KF_CMD_REMOTE_H

#include "cli.h"

/* The (model, arch) pairs the inputs name: a description (MODEL.json) gives
 * its name and arches (--arch replaces them), a bare model name takes
 * --arch. Names must be safe path components. Returns 0, or 2 after
 * reporting (with usage for a usage error). */
int kf_remote_targets(kf_cli *cli, const char *usage, kf_strv *models, kf_strv *arches);

#endif /* KF_CMD_REMOTE_H */
