/* The build's commit, from the header the gt_build_commit target regenerates every build. */
#include "core/build_info.h"

#include "gt_build_commit.h"

const char *gt_build_commit(void) {
    return GT_BUILD_COMMIT;
}
