/* Megatron Bridge's keys: a real Bridge override file loads without "unknown key"; each Bridge
 * key graphtrain has no key for is understood (a value that changes nothing here) or refused
 * as "a Bridge key graphtrain does not support yet" with the reason. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/bridge_keys.h"
#include "config/keys.h"
#include "config/rules.h"

static int load_text(gt_config *cfg, const char *text, gt_error *err) {
    gt_config_defaults(cfg);
    return gt_config_load_yaml_string(cfg, text, strlen(text), "bridge.yaml", err);
}

/* The sections of a Bridge ConfigContainer dump, with values a one-GPU bf16 run has */
static const char k_bridge_file[] =
    "model:\n"
    "  num_layers: 4\n  hidden_size: 256\n  num_attention_heads: 4\n  ffn_hidden_size: 768\n"
    "  normalization: RMSNorm\n  position_embedding_type: rope\n"
    "  max_position_embeddings: 8192\n  gated_linear_unit: true\n"
    "  share_embeddings_and_output_weights: false\n  bf16: true\n  fp16: false\n"
    "  fp8: null\n  sequence_parallel: false\n  virtual_pipeline_model_parallel_size: null\n"
    "  bias_activation_fusion: true\n  masked_softmax_fusion: true\n"
    "  apply_rope_fusion: true\n  cross_entropy_loss_fusion: true\n"
    "  make_vocab_size_divisible_by: 128\n  should_pad_vocab: false\n"
    "  tensor_model_parallel_size: 1\n  pipeline_model_parallel_size: 1\n"
    "train:\n  train_iters: 20\n  micro_batch_size: 2\n  global_batch_size: 2\n"
    "  exit_duration_in_mins: null\n  manual_gc: true\n  manual_gc_interval: 100\n"
    "  rampup_batch_size: null\n"
    "optimizer:\n  optimizer: adam\n  lr: 3.0e-4\n  use_distributed_optimizer: true\n"
    "  overlap_param_gather_with_optimizer_step: false\n  bf16: true\n  fp16: false\n"
    "scheduler:\n  lr_decay_style: cosine\n  lr_warmup_iters: 2\n  lr_warmup_init: 0.0\n"
    "  override_opt_param_scheduler: false\n"
    "checkpoint:\n  save_interval: 10\n  load_optim: true\n  async_save: false\n"
    "  fully_parallel_save: true\n"
    "logger:\n  log_interval: 5\n  tensorboard_dir: null\n  wandb_project: null\n"
    "  log_throughput: true\n  timing_log_level: 0\n"
    "dataset:\n  sequence_length: 256\n  split: null\n  reset_position_ids: false\n"
    "  reset_attention_mask: false\n  eod_mask_loss: false\n  num_workers: 8\n"
    "  dataloader_type: single\n"
    "rng:\n  seed: 1234\n  te_rng_tracker: false\n  data_parallel_random_init: false\n"
    "ddp:\n  grad_reduce_in_fp32: true\n  overlap_grad_reduce: true\n"
    "  overlap_param_gather: true\n  use_distributed_optimizer: true\n"
    "  check_for_nan_in_grad: true\n  bucket_size: null\n";

static void test_a_bridge_override_file_loads_and_validates(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    if (load_text(&c, k_bridge_file, &err) != GT_OK) fail_msg("%s", err.msg);
    gt_config_finalize(&c);
    gt_report r;
    if (gt_config_validate(&c, &r)) {
        gt_report_print(&r, stderr);
        fail_msg("the Bridge file does not validate");
    }
    assert_int_equal(c.dataset.seq_length, 256);
}

static void test_bridge_keys_graphtrain_cannot_run_are_refused_with_the_reason(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    assert_int_equal(
        load_text(&c,
                  "model:\n  normalization: LayerNorm\n  layernorm_zero_centered_gamma: true\n"
                  "optimizer:\n  optimizer: sgd\n"
                  "checkpoint:\n  ckpt_format: torch_dist\n"
                  "scheduler:\n  lr_wsd_decay_samples: 1000\n"
                  "ddp:\n  use_megatron_fsdp: true\n",
                  &err),
        GT_ERR_INVALID);
    assert_int_equal(err.count, 6);
    assert_null(strstr(err.msg, "unknown key"));
    const char *keys[] = {
        "model.normalization",    "model.layernorm_zero_centered_gamma", "optimizer.optimizer",
        "checkpoint.ckpt_format", "scheduler.lr_wsd_decay_samples",      "ddp.use_megatron_fsdp"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char want[128];
        snprintf(want, sizeof want, "%s: a Bridge key graphtrain does not support yet", keys[i]);
        if (!strstr(err.msg, want))
            fail_msg("%s is not refused as a Bridge key:\n%s", keys[i], err.msg);
    }
    assert_non_null(strstr(err.msg, "with the value 'LayerNorm': graphtrain's layers use RMSNorm"));
    /* a Bridge key's wrong section is still unknown (with a suggestion), not a Bridge key */
    gt_config_defaults(&c);
    assert_int_equal(gt_config_set(&c, "model.ckpt_format", "torch_dist", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "unknown key"));
}

static void test_dataset_seq_length_must_equal_the_models(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    assert_int_equal(
        load_text(&c, "model:\n  seq_length: 128\ndataset:\n  seq_length: 256\n", &err), GT_OK);
    gt_report r;
    gt_config_validate(&c, &r);
    assert_true(gt_report_has(&r, "dataset_seq_length_matches_model"));
    assert_int_equal(gt_config_set(&c, "dataset.sequence_length", "128", &err), GT_OK);
    gt_config_validate(&c, &r);
    assert_false(gt_report_has(&r, "dataset_seq_length_matches_model"));
}

/* When a key becomes graphtrain's own (the sched, metrics and safety branches add some), its
 * line in config/bridge_keys.c must go: the table is for keys graphtrain lacks. */
static void test_no_bridge_table_key_shadows_a_graphtrain_key(void **state) {
    (void)state;
    for (size_t i = 0; gt_bridge_key_name(i); i++) {
        const char *name = gt_bridge_key_name(i);
        if (gt_config_find_key(name))
            fail_msg("%s is a graphtrain key now: remove its line from config/bridge_keys.c", name);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(name, gt_bridge_key_name(j))) fail_msg("%s is listed twice", name);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_bridge_override_file_loads_and_validates),
        cmocka_unit_test(test_bridge_keys_graphtrain_cannot_run_are_refused_with_the_reason),
        cmocka_unit_test(test_dataset_seq_length_must_equal_the_models),
        cmocka_unit_test(test_no_bridge_table_key_shadows_a_graphtrain_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
