/* What the running binary is: graphtrain's version and the git commit it was built from, for
 * records that must say which code produced them (the metrics file's first record). */
#ifndef GT_CORE_BUILD_INFO_H
#define GT_CORE_BUILD_INFO_H

/* The release number; include/graphtrain.h's GT_VERSION is the same (a test holds them
 * together). */
#define GT_BUILD_VERSION "0.1.0"

/* The short commit hash, "-dirty" when built with uncommitted changes, or "unknown" when the
 * build had no git checkout. */
const char *gt_build_commit(void);

#endif
