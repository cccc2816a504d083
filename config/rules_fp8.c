/* The fp8 keys against each other: model.compute_dtype (Bridge's -c) names the recipe, and
 * Megatron's fp8 / fp8_recipe keys, where set, must say the same, so a Bridge file that sets
 * them is run as written or refused, never half applied. */
#include "config/rules.h"

static const char *const k_recipe_name[] = {"none", "tensorwise", "delayed", "blockwise", "mxfp8"};

void gt_check_fp8_rules(const gt_config *cfg, gt_report *r) {
    const gt_model_config *m = &cfg->model;
    gt_fp8_recipe named = gt_compute_dtype_fp8_recipe(m->compute_dtype);
    if (m->fp8 != GT_FP8_FORMAT_NONE && named == GT_FP8_RECIPE_NONE)
        gt_report_add(r, GT_SEVERITY_ERROR, "fp8_needs_fp8_compute_dtype",
                      GT_KEYS("model.fp8", "model.compute_dtype"),
                      "set model.compute_dtype to an fp8 recipe (-c fp8_cs, fp8_ds or fp8_sc), or "
                      "model.fp8=null",
                      "model.fp8 asks for fp8, but model.compute_dtype is not an fp8 recipe; "
                      "graphtrain selects fp8 by model.compute_dtype, as Bridge's -c does");
    if (m->fp8_recipe != GT_FP8_RECIPE_NONE && m->fp8_recipe != named)
        gt_report_add(r, GT_SEVERITY_ERROR, "fp8_recipe_matches_compute_dtype",
                      GT_KEYS("model.fp8_recipe", "model.compute_dtype"),
                      "drop model.fp8_recipe (model.compute_dtype chooses: fp8_cs tensorwise, "
                      "fp8_ds delayed, fp8_sc blockwise), or set the -c that names it",
                      "model.fp8_recipe=%s, but model.compute_dtype names %s",
                      k_recipe_name[m->fp8_recipe], k_recipe_name[named]);
    if (named != GT_FP8_RECIPE_NONE && m->first_last_layers_bf16 &&
        m->num_layers_at_start_in_bf16 + m->num_layers_at_end_in_bf16 >= m->num_layers)
        gt_report_add(r, GT_SEVERITY_ERROR, "fp8_first_last_layers_leave_none",
                      GT_KEYS("model.first_last_layers_bf16", "model.num_layers_at_start_in_bf16",
                              "model.num_layers_at_end_in_bf16", "model.num_layers"),
                      "lower num_layers_at_start_in_bf16 / num_layers_at_end_in_bf16, or set "
                      "model.compute_dtype=bf16",
                      "the bf16 layers at the start (%d) and end (%d) cover all %d layers: no "
                      "layer would compute in fp8",
                      m->num_layers_at_start_in_bf16, m->num_layers_at_end_in_bf16, m->num_layers);
}
