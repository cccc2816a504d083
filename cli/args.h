/* Command-line configuration shared by validate, train and bench: --recipe, --config,
 * Bridge's performance-harness flags and key=value overrides, resolved into one gt_config. */
#ifndef GT_CLI_ARGS_H
#define GT_CLI_ARGS_H

#include <stddef.h>
#include <stdio.h>

#include "config/config.h"
#include "core/error.h"

/* Parses --recipe NAME|PATH, --config FILE, Bridge harness flags, key=value overrides (overrides
 * win; applied in order recipe, config, harness flags, overrides); leaves unknown --flags for
 * the caller in *rest.
 *
 * argv[0] is the command name (main passes argv + 1), and is skipped; rest_argv (room for argc
 * pointers) receives argv[0] first, then every argument not consumed here (unknown flags,
 * their values, plain words), in order, so the caller can parse it with getopt.
 * cfg is filled from scratch: defaults, then the environment (env.*), then the sources above,
 * then gt_config_finalize. Harness flags: -m/--model_family_name, -mr/--model_recipe_name
 * (selects recipes/<name>.yaml when no --recipe is given), --task (pretrain), -g/--gpu,
 * -c/--compute_dtype, -ng/--num_gpus, --cuda_graph_impl (auto-enables model.use_te_rng_tracker
 * and rng.te_rng_tracker unless none, as Bridge's harness does), --cuda_graph_scope a,b,c,
 * -tp -pp -cp -ep -et -vp (the parallel sizes), -gb -mb (batch sizes), -sl (seq_length);
 * -mr is case-insensitive; -d/--dryrun is refused by name (validate is the dry run).
 * Flags take their value as the next argument or after '='. Returns GT_OK, GT_ERR_INVALID
 * (bad flag or value) or GT_ERR_IO (recipe/config file unreadable).
 *
 * Bad settings (a key=value override, or a key or value in a YAML file that was read whole)
 * are all collected into err, each keeping its earlier value; a missing recipe, an unreadable
 * or malformed file or a bad harness flag stops at once. *checkable (when not NULL) says
 * whether cfg can go through gt_config_validate: 1 on success and after bad settings only
 * (cfg is then finalized, so the caller can report the rules' findings with them), else 0. */
int gt_cli_load_config(int argc, char **argv, gt_config *cfg, int *rest_argc, char **rest_argv,
                       int *checkable, gt_error *err);

/* After bad settings: checks cfg (see *checkable above) against every rule and, if any rule
 * fails, prints a heading and the report to out. Returns the number of errors. */
int gt_cli_report_other_errors(const gt_config *cfg, FILE *out);

/* Resolves a recipe name to a file: a name containing '/' or ending in .yaml is a path;
 * otherwise <dir>/<name>.yaml for dir in $GT_RECIPE_DIR, ./recipes, <executable>/../recipes. */
int gt_cli_find_recipe(const char *name, char *path, size_t n, gt_error *err);

/* The first recipe folder that exists (same search order); GT_OK or GT_ERR_IO. */
int gt_cli_recipe_dir(char *dir, size_t n, gt_error *err);

#endif
