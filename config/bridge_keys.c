/* Megatron Bridge's keys that are not graphtrain's own (ConfigContainer's model, train,
 * optimizer, scheduler, checkpoint, logger, dataset, rng and ddp sections), so a real Bridge
 * override file never meets "unknown key": each is understood (values that change nothing
 * here, or the one graphtrain runs) or refused as not supported yet, with the reason. */
#include "config/bridge_keys.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef struct bridge_key {
    const char *name;
    /* values understood, '|'-separated: "*" any (the setting changes nothing here), "null"
     * any spelling of None, true/false any spelling of a boolean; NULL: none */
    const char *accept;
    const char *why; /* what graphtrain does instead, or what is missing */
} bridge_key;

#define MULTI "it needs the multi-GPU runtime, which graphtrain does not have yet"
#define FP8                                                                                        \
    "not implemented: graphtrain's fp8 is model.compute_dtype fp8_cs, fp8_ds or fp8_sc with fp8 "  \
    "GEMMs only"
#define NO_EFFECT "a performance or host-side setting with no counterpart here; it changes nothing"
#define FUSED "graphtrain picks its own kernels (runtime.*); results do not depend on this"
#define ONE_GPU "on one GPU there is nothing to communicate; it changes nothing"
#define OWN_CKPT "graphtrain writes its own checkpoint format (train/checkpoint.c)"
#define TB "graphtrain writes its own fixed set of TensorBoard scalars (README, \"Metrics\")"
#define WANDB "Weights & Biases logging is not implemented; metrics go to logger.metrics_file"
#define MLA "multi-latent attention is not implemented (graphtrain's attention is GQA)"

/* clang-format off */
static const bridge_key k_bridge[] = {
    /* ---- model: TransformerConfig / ModelParallelConfig / GPTModelProvider ---- */
    {"model.normalization", "RMSNorm", "graphtrain's layers use RMSNorm"},
    {"model.position_embedding_type", "rope", "graphtrain uses rotary position embeddings"},
    {"model.max_position_embeddings", "*", "rotary embeddings have no position table, so the size changes nothing (model.seq_length is the length)"},
    {"model.gated_linear_unit", "true", "graphtrain's dense MLP is SwiGLU (gated)"},
    {"model.bf16", "true", "graphtrain computes in bf16 (model.compute_dtype)"},
    {"model.fp16", "false", "fp16 with loss scaling is not implemented; use bf16"},
    {"model.params_dtype", "*", "graphtrain keeps fp32 master weights and bf16 copies whatever this says"},
    {"model.pipeline_dtype", "*", "pipeline parallelism is not implemented, so this changes nothing"},
    {"model.autocast_dtype", "null", "mixed precision is set by model.compute_dtype"},
    {"model.fp8_param", "false", FP8},
    {"model.fp8_wgrad", "true", "graphtrain's fp8 recipes compute the weight gradients in fp8; weight gradients in bf16 under fp8 are not implemented"},
    {"model.fp8_dot_product_attention", "false", FP8},
    {"model.fp8_multi_head_attention", "false", FP8},
    {"model.fp4", "null", FP8},
    {"model.fp4_recipe", "*", "only read with model.fp4; " FP8},
    {"model.sequence_parallel", "false", "sequence parallelism splits activations over tensor-parallel ranks; " MULTI},
    {"model.virtual_pipeline_model_parallel_size", "null", "interleaved (virtual) pipeline stages are not implemented; " MULTI},
    {"model.pipeline_model_parallel_layout", "null", "custom pipeline layouts are not implemented; " MULTI},
    {"model.expert_tensor_parallel_size", "null|1", "expert tensor parallelism is not implemented; " MULTI},
    {"model.hierarchical_context_parallel_sizes", "null", "context parallelism is not implemented; " MULTI},
    {"model.cp_comm_type", "*", "only read with context parallelism, which is refused on its own"},
    {"model.tp_comm_overlap", "false", "tensor-parallel communication overlap needs tensor parallelism; " MULTI},
    {"model.overlap_p2p_comm", "*", "only read with pipeline parallelism, which is refused on its own"},
    {"model.batch_p2p_comm", "*", "only read with pipeline parallelism, which is refused on its own"},
    {"model.account_for_embedding_in_pipeline_split", "*", "only read with pipeline parallelism, which is refused on its own"},
    {"model.account_for_loss_in_pipeline_split", "*", "only read with pipeline parallelism, which is refused on its own"},
    {"model.defer_embedding_wgrad_compute", "false", "deferring the embedding weight gradient is not implemented"},
    {"model.distribute_saved_activations", "false", "needs tensor parallelism; " MULTI},
    {"model.layernorm_zero_centered_gamma", "false", "zero-centred RMSNorm gains are not implemented"},
    {"model.apply_query_key_layer_scaling", "false", "query-key layer scaling (an fp16 aid) is not implemented"},
    {"model.attention_softmax_in_fp32", "*", "graphtrain's attention softmax is fp32 either way"},
    {"model.softmax_scale", "null", "graphtrain scales attention scores by 1/sqrt(head size)"},
    {"model.window_size", "null", "sliding-window attention is not implemented"},
    {"model.rotary_percent", "1|1.0", "partial rotary embeddings are not implemented (every head dimension rotates)"},
    {"model.rotary_interleaved", "false", "interleaved rotary embeddings are not implemented"},
    {"model.seq_len_interpolation_factor", "null", "rotary position interpolation is not implemented"},
    {"model.multi_latent_attention", "false", MLA},
    {"model.q_lora_rank", "null", MLA},
    {"model.kv_lora_rank", NULL, MLA},
    {"model.qk_head_dim", NULL, MLA},
    {"model.qk_pos_emb_head_dim", NULL, MLA},
    {"model.v_head_dim", NULL, MLA},
    {"model.mtp_num_layers", "null|0", "multi-token prediction is not implemented"},
    {"model.mtp_loss_scaling_factor", "*", "only read with mtp_num_layers, which must be unset here"},
    {"model.hybrid_attention_ratio", "0|0.0", "write the layers out with model.hybrid_override_pattern"},
    {"model.hybrid_mlp_ratio", "0|0.0", "write the layers out with model.hybrid_override_pattern"},
    {"model.moe_router_load_balancing_type", "aux_loss", "graphtrain's router has the auxiliary load-balancing loss (model.moe_aux_loss_coeff)"},
    {"model.moe_router_score_function", "softmax", "graphtrain's router scores with a softmax"},
    {"model.moe_router_enable_expert_bias", "false", "expert-bias (aux-loss-free) balancing is not implemented"},
    {"model.moe_router_num_groups", "null", "group-limited routing is not implemented"},
    {"model.moe_router_group_topk", "null", "group-limited routing is not implemented"},
    {"model.moe_router_dtype", "*", "graphtrain's router computes in fp32 whatever this says"},
    {"model.moe_z_loss_coeff", "null|0|0.0", "the router z-loss is not implemented"},
    {"model.moe_input_jitter_eps", "null", "router input jitter is not implemented"},
    {"model.moe_token_drop_policy", "probs", "with a capacity factor graphtrain drops the lowest-probability tokens"},
    {"model.moe_shared_expert_intermediate_size", "null", "shared experts are not implemented"},
    {"model.moe_shared_expert_overlap", "false", "shared experts are not implemented"},
    {"model.moe_grouped_gemm", "*", FUSED},
    {"model.moe_permute_fusion", "*", FUSED},
    {"model.moe_apply_probs_on_input", "false", "graphtrain weights expert outputs by the routing probabilities"},
    {"model.moe_enable_deepep", "false", "DeepEP dispatch needs expert parallelism; " MULTI},
    {"model.moe_layer_recompute", "false", "activation recompute is not implemented"},
    {"model.moe_extended_tp", "false", "needs tensor parallelism; " MULTI},
    {"model.bias_activation_fusion", "*", FUSED},
    {"model.bias_dropout_fusion", "*", FUSED},
    {"model.masked_softmax_fusion", "*", FUSED},
    {"model.apply_rope_fusion", "*", FUSED},
    {"model.persist_layer_norm", "*", FUSED},
    {"model.memory_efficient_layer_norm", "*", FUSED},
    {"model.cross_entropy_loss_fusion", "*", FUSED},
    {"model.cross_entropy_fusion_impl", "*", FUSED},
    {"model.attention_backend", "*", FUSED},
    {"model.transformer_impl", "*", FUSED},
    {"model.deterministic_mode", "*", "graphtrain's kernels are deterministic whatever this says (runtime.deterministic)"},
    {"model.use_cpu_initialization", "*", NO_EFFECT},
    {"model.perform_initialization", "true", "graphtrain always initialises the weights (model.init_method_std)"},
    {"model.init_model_with_meta_device", "*", NO_EFFECT},
    {"model.calculate_per_token_loss", "false", "graphtrain averages the loss over the batch's tokens the standard way"},
    {"model.fp16_lm_cross_entropy", "false", "the cross entropy is computed in fp32"},
    {"model.parallel_output", "*", ONE_GPU},
    {"model.cuda_graph_retain_backward_graph", "false", "retained backward graphs are not implemented"},
    {"model.cuda_graph_use_single_mempool", "*", "graphtrain's graphs use the static arena, no memory pool (DESIGN.md principle 1)"},
    {"model.enable_cuda_graph", NULL, "an older spelling; use model.cuda_graph_impl=local (or transformer_engine)"},
    {"model.external_cuda_graph", NULL, "an older spelling; use model.cuda_graph_impl=transformer_engine"},
    {"model.fine_grained_activation_offloading", "false", "activation offloading is not implemented"},
    {"model.cpu_offloading_num_layers", "*", "only read with model.cpu_offloading, which is refused on its own"},
    /* ---- train: TrainingConfig ---- */
    {"train.rampup_batch_size", "null", "batch-size ramp-up is not implemented (graphs need a static batch)"},
    {"train.decrease_batch_size_if_needed", "false", "the batch never changes here"},
    {"train.train_samples", "null", "give the length in steps with train.train_iters"},
    {"train.eval_samples", "null", "give evaluation length in batches with train.eval_iters"},
    {"train.skip_train", "false", "evaluation-only runs are not implemented"},
    {"train.empty_unused_memory_level", "*", "graphtrain has no caching allocator to empty (static arena)"},
    {"train.manual_gc", "*", NO_EFFECT},
    {"train.manual_gc_interval", "*", NO_EFFECT},
    {"train.manual_gc_eval", "*", NO_EFFECT},
    {"train.exit_signal_handler", "*", "graphtrain always finishes the step, saves and exits on SIGINT and SIGTERM"},
    {"train.exit_signal", "*", "graphtrain always finishes the step, saves and exits on SIGINT and SIGTERM"},
    {"train.check_weight_hash_across_dp_replicas_interval", "null", "needs data parallelism; " MULTI},
    {"train.train_sync_interval", "*", "graphtrain's host never waits on the device between steps"},
    {"train.iterations_to_skip", "null", "skipping iterations is not implemented"},
    /* ---- optimizer: OptimizerConfig ---- */
    {"optimizer.optimizer", "adam", "graphtrain's optimizer is AdamW (Megatron's adam with decoupled weight decay)"},
    {"optimizer.overlap_param_gather_with_optimizer_step", "*", ONE_GPU},
    {"optimizer.bf16", "true", "graphtrain computes in bf16 (model.compute_dtype)"},
    {"optimizer.fp16", "false", "fp16 with loss scaling is not implemented; use bf16"},
    {"optimizer.params_dtype", "*", "graphtrain keeps fp32 master weights whatever this says"},
    {"optimizer.main_grads_dtype", "*", "graphtrain's gradients are fp32 whatever this says"},
    {"optimizer.main_params_dtype", "*", "graphtrain's master weights are fp32 whatever this says"},
    {"optimizer.loss_scale", "null", "loss scaling (fp16) is not implemented"},
    {"optimizer.initial_loss_scale", "*", "only read with fp16, which is refused"},
    {"optimizer.min_loss_scale", "*", "only read with fp16, which is refused"},
    {"optimizer.loss_scale_window", "*", "only read with fp16, which is refused"},
    {"optimizer.hysteresis", "*", "only read with fp16, which is refused"},
    {"optimizer.sgd_momentum", "*", "only read by SGD; graphtrain's optimizer is AdamW"},
    {"optimizer.decoupled_lr", "null", "a separate learning rate for the embedding and head is not implemented"},
    {"optimizer.decoupled_min_lr", "null", "a separate learning rate for the embedding and head is not implemented"},
    {"optimizer.optimizer_cpu_offload", "false", "optimizer offloading to host memory is not implemented"},
    {"optimizer.optimizer_offload_fraction", "*", "only read with optimizer_cpu_offload, which must be off here"},
    {"optimizer.use_torch_optimizer_for_cpu_offload", "*", "only read with optimizer_cpu_offload, which must be off here"},
    {"optimizer.overlap_cpu_optimizer_d2h_h2d", "*", "only read with optimizer_cpu_offload, which must be off here"},
    {"optimizer.pin_cpu_grads", "*", "only read with optimizer_cpu_offload, which must be off here"},
    {"optimizer.pin_cpu_params", "*", "only read with optimizer_cpu_offload, which must be off here"},
    {"optimizer.store_param_remainders", "*", NO_EFFECT},
    {"optimizer.barrier_with_L1_time", "*", NO_EFFECT},
    {"optimizer.log_num_zeros_in_grad", "false", "counting zero gradients is not implemented"},
    /* ---- scheduler: SchedulerConfig (the sched branch turns the first four into keys) ---- */
    {"scheduler.lr_warmup_samples", "0|null", "give warmup in steps with scheduler.lr_warmup_iters"},
    {"scheduler.lr_decay_samples", "null", "give decay in steps with scheduler.lr_decay_iters"},
    {"scheduler.lr_wsd_decay_samples", "null", "give the length in steps"},
    {"scheduler.start_weight_decay", "null", "a weight-decay schedule is not implemented (optimizer.weight_decay is constant)"},
    {"scheduler.end_weight_decay", "null", "a weight-decay schedule is not implemented (optimizer.weight_decay is constant)"},
    {"scheduler.weight_decay_incr_style", "constant", "a weight-decay schedule is not implemented (optimizer.weight_decay is constant)"},
    /* ---- checkpoint: CheckpointConfig (the safety branch turns most_recent_k into a key) ---- */
    {"checkpoint.ckpt_format", NULL, OWN_CKPT "; drop the key"},
    {"checkpoint.pretrained_checkpoint", "null", "starting from pretrained weights is not implemented; use checkpoint.load with a graphtrain checkpoint"},
    {"checkpoint.finetune", "false", "fine-tuning resets are not implemented"},
    {"checkpoint.load_optim", "true", "graphtrain always restores the optimizer state"},
    {"checkpoint.load_rng", "true", "graphtrain always restores the RNG state"},
    {"checkpoint.save_optim", "true", "graphtrain always saves the optimizer state"},
    {"checkpoint.save_rng", "true", "graphtrain always saves the RNG state"},
    {"checkpoint.load_main_params_from_ckpt", "false", "graphtrain restores master weights with the rest"},
    {"checkpoint.exit_on_missing_checkpoint", "false", "graphtrain stops with an error when checkpoint.load has no checkpoint"},
    {"checkpoint.non_persistent_save_interval", "null", "non-persistent checkpoints are not implemented"},
    {"checkpoint.non_persistent_ckpt_type", "null", "non-persistent checkpoints are not implemented"},
    {"checkpoint.async_save", "false", "asynchronous saving is not implemented"},
    {"checkpoint.fully_parallel_save", "*", "one process writes the checkpoint; " ONE_GPU},
    {"checkpoint.fully_parallel_load", "*", "one process reads the checkpoint; " ONE_GPU},
    {"checkpoint.ckpt_assume_constant_structure", "*", NO_EFFECT},
    {"checkpoint.dist_ckpt_strictness", "*", OWN_CKPT},
    {"checkpoint.ckpt_step", "null", "loading a chosen step is not implemented; checkpoint.load takes the latest"},
    {"checkpoint.use_checkpoint_args", "false", "graphtrain takes the model from this configuration"},
    {"checkpoint.auto_detect_ckpt_format", "false", OWN_CKPT},
    {"checkpoint.replication", "false", "checkpoint replication needs several nodes; " MULTI},
    {"checkpoint.save_tokenizer_assets", "*", NO_EFFECT},
    /* ---- logger: LoggerConfig (tensorboard_dir is a graphtrain key) ---- */
    {"logger.tensorboard_log_interval", "*", TB},
    {"logger.tensorboard_queue_size", "*", TB},
    {"logger.log_timers_to_tensorboard", "*", TB},
    {"logger.log_loss_scale_to_tensorboard", "*", TB},
    {"logger.log_validation_ppl_to_tensorboard", "*", TB},
    {"logger.log_memory_to_tensorboard", "*", TB},
    {"logger.log_world_size_to_tensorboard", "*", TB},
    {"logger.log_learning_rate_to_tensorboard", "*", TB},
    {"logger.wandb_project", "null", WANDB},
    {"logger.wandb_exp_name", "null", WANDB},
    {"logger.wandb_entity", "null", WANDB},
    {"logger.wandb_save_dir", "null", WANDB},
    {"logger.log_throughput", "*", "graphtrain's progress line always shows throughput"},
    {"logger.log_params_norm", "false", "logging the parameter norm is not implemented"},
    {"logger.log_progress", "false", "progress.txt is not written"},
    {"logger.log_energy", "false", "energy logging is not implemented"},
    {"logger.timing_log_level", "0", "per-phase timers are not implemented"},
    {"logger.timing_log_option", "*", "only read with timers, which are not implemented"},
    {"logger.logging_level", "*", NO_EFFECT},
    {"logger.filter_warnings", "*", NO_EFFECT},
    {"logger.modules_to_filter", "*", NO_EFFECT},
    {"logger.set_level_for_all_loggers", "*", NO_EFFECT},
    {"logger.save_config_filepath", "null", "saving the configuration to a file is not implemented; `graphtrain validate` prints it"},
    /* ---- dataset: GPTDatasetConfig and DataloaderConfig ---- */
    {"dataset.random_seed", NULL, "the data order follows rng.seed; drop the key and set rng.seed"},
    {"dataset.blend", "null", "dataset blends are not implemented; give one prefix in dataset.data_path"},
    {"dataset.blend_per_split", "null", "dataset blends are not implemented; give one prefix in dataset.data_path"},
    {"dataset.path_to_cache", "null", "graphtrain builds no index cache"},
    {"dataset.mmap_bin_files", "*", "graphtrain always memory-maps its shards"},
    {"dataset.reset_position_ids", "false", "resetting positions at document ends is not implemented"},
    {"dataset.reset_attention_mask", "false", "document-level attention masks are not implemented"},
    {"dataset.eod_mask_loss", "false", "masking the loss at end-of-document tokens is not implemented"},
    {"dataset.create_attention_mask", "*", "the causal mask is built inside the attention kernel"},
    {"dataset.add_extra_token_to_sequence", "true", "graphtrain reads seq_length + 1 tokens per sequence for the shifted labels"},
    {"dataset.drop_last_partial_validation_sequence", "*", NO_EFFECT},
    {"dataset.num_dataset_builder_threads", "*", NO_EFFECT},
    {"dataset.object_storage_cache_path", "null", "object storage is not implemented"},
    {"dataset.dataloader_type", "single|cyclic|null", "external data loaders are not implemented"},
    {"dataset.num_workers", "*", NO_EFFECT},
    {"dataset.pin_memory", "*", "graphtrain always stages batches in pinned host memory"},
    {"dataset.persistent_workers", "*", NO_EFFECT},
    {"dataset.data_sharding", "*", ONE_GPU},
    {"dataset.skip_getting_attention_mask_from_dataset", "*", "the causal mask is built inside the attention kernel"},
    {"dataset.mid_level_dataset_surplus", "*", NO_EFFECT},
    /* ---- rng: RNGConfig ---- */
    {"rng.data_parallel_random_init", "false", "needs data parallelism; " MULTI},
    {"rng.inference_rng_tracker", "false", "inference is not implemented"},
    /* ---- ddp: DistributedDataParallelConfig ---- */
    {"ddp.grad_reduce_in_fp32", "*", "graphtrain's gradients are fp32 whatever this says"},
    {"ddp.align_param_gather", "*", ONE_GPU},
    {"ddp.use_distributed_optimizer", "*", "graphtrain reads optimizer.use_distributed_optimizer (Bridge sets both alike)"},
    {"ddp.num_distributed_optimizer_instances", "1", "needs data parallelism; " MULTI},
    {"ddp.pad_buckets_for_high_nccl_busbw", "*", ONE_GPU},
    {"ddp.average_in_collective", "*", ONE_GPU},
    {"ddp.gradient_reduce_div_fusion", "*", ONE_GPU},
    {"ddp.check_for_large_grads", "false", "the large-gradient check is not implemented"},
    {"ddp.use_custom_fsdp", "false", "FSDP is not implemented; " MULTI},
    {"ddp.use_megatron_fsdp", "false", "FSDP is not implemented; " MULTI},
    {"ddp.data_parallel_sharding_strategy", "no_shard", "FSDP sharding is not implemented; " MULTI},
    {"ddp.outer_dp_sharding_strategy", "*", "only read with FSDP, which must be off here"},
    {"ddp.suggested_communication_unit_size", "*", ONE_GPU},
    {"ddp.preserve_fp32_weights", "*", "graphtrain keeps fp32 master weights always"},
    {"ddp.keep_fp8_transpose_cache", "false", FP8},
    {"ddp.reuse_grad_buf_for_mxfp8_param_ag", "false", FP8},
    {"ddp.nccl_ub", "false", "NCCL user buffers need the multi-GPU runtime; " MULTI},
    {"ddp.fsdp_double_buffer", "false", "FSDP is not implemented; " MULTI},
    {"ddp.disable_symmetric_registration", "*", ONE_GPU},
};
/* clang-format on */

static void trim(const char *s, char *buf, size_t n) {
    while (*s == ' ' || *s == '\t')
        s++;
    size_t len = strlen(s);
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\n'))
        len--;
    if (len >= n) len = n - 1;
    memcpy(buf, s, len);
    buf[len] = '\0';
}

static int is_null_text(const char *v) {
    return !*v || !strcmp(v, "~") || !strcasecmp(v, "null") || !strcmp(v, "None") ||
           !strcmp(v, "[]");
}

static int bool_text(const char *v) {
    if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on")) return 1;
    if (!strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off")) return 0;
    return -1;
}

/* Is value one of accept's '|'-separated forms? */
static int accepted(const char *accept, const char *value) {
    if (!accept) return 0;
    char v[256];
    trim(value, v, sizeof v);
    const char *p = accept;
    while (*p) {
        size_t len = strcspn(p, "|");
        char one[64];
        snprintf(one, sizeof one, "%.*s", (int)len, p);
        if (!strcmp(one, "*")) return 1;
        if (!strcmp(one, "null") && is_null_text(v)) return 1;
        if ((!strcmp(one, "true") || !strcmp(one, "false")) && bool_text(v) == (one[0] == 't'))
            return 1;
        if (!strcmp(one, v)) return 1;
        p += len;
        if (*p == '|') p++;
    }
    return 0;
}

int gt_bridge_key_check(const char *name, const char *value, char *msg, size_t n) {
    for (size_t i = 0; i < sizeof k_bridge / sizeof k_bridge[0]; i++) {
        const bridge_key *b = &k_bridge[i];
        if (strcmp(b->name, name)) continue;
        if (accepted(b->accept, value ? value : "")) return GT_BRIDGE_KEY_UNDERSTOOD;
        char forms[128] = "";
        if (b->accept)
            snprintf(forms, sizeof forms, " (understood here: %s; or drop the key)", b->accept);
        snprintf(msg, n, "%s: a Bridge key graphtrain does not support yet%s%.64s%s: %s%s", name,
                 b->accept ? " with the value '" : "", b->accept && value ? value : "",
                 b->accept ? "'" : "", b->why, forms);
        return GT_BRIDGE_KEY_REFUSED;
    }
    return GT_BRIDGE_KEY_UNKNOWN;
}

const char *gt_bridge_key_name(size_t i) {
    return i < sizeof k_bridge / sizeof k_bridge[0] ? k_bridge[i].name : NULL;
}
