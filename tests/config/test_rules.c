/* Every validation rule both ways: a config that trips it and the nearest config that passes
 * it. Each case becomes two named cmocka tests ("<rule>: trips" / "<rule>: passes"). */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/keys.h"
#include "config/rules.h"

/* graph-safe RNG keys on, so cases about other rules do not also trip that one */
#define RNG "model.use_te_rng_tracker=true rng.te_rng_tracker=true "
#define TE RNG "model.cuda_graph_impl=transformer_engine "
#define LOCAL RNG "model.cuda_graph_impl=local model.cuda_graph_scope=full_iteration "
#define MOE "model.num_moe_experts=8 model.moe_router_topk=2 model.moe_ffn_hidden_size=256 "
#define DROP_PAD "model.moe_expert_capacity_factor=1.0 model.moe_pad_expert_input_to_capacity=true "

typedef struct rule_case {
    const char *rule;
    gt_severity severity;
    const char *trips;  /* overrides (space-separated) on top of the defaults */
    const char *passes; /* the nearest config without the problem */
} rule_case;

static const rule_case k_cases[] = {
    /* graphs (Bridge / Megatron) */
    {"graphs_need_rng_tracker", GT_SEVERITY_ERROR,
     "model.cuda_graph_impl=transformer_engine model.cuda_graph_scope=attn",
     TE "model.cuda_graph_scope=attn"},
    {"full_iteration_needs_local", GT_SEVERITY_ERROR, TE "model.cuda_graph_scope=full_iteration",
     LOCAL},
    {"full_iteration_alone", GT_SEVERITY_ERROR, LOCAL "model.cuda_graph_scope=full_iteration,attn",
     LOCAL},
    {"local_needs_full_iteration", GT_SEVERITY_ERROR,
     RNG "model.cuda_graph_impl=local model.cuda_graph_scope=attn",
     TE "model.cuda_graph_scope=attn"},
    {"transformer_engine_needs_scope", GT_SEVERITY_ERROR, TE "model.cuda_graph_scope=[]",
     TE "model.cuda_graph_scope=attn"},
    {"moe_excludes_moe_router", GT_SEVERITY_ERROR,
     TE MOE DROP_PAD "model.cuda_graph_scope=moe,moe_router",
     TE MOE DROP_PAD "model.cuda_graph_scope=attn,moe"},
    {"moe_preprocess_needs_moe_router", GT_SEVERITY_ERROR,
     TE MOE "model.cuda_graph_scope=attn,moe_preprocess",
     TE MOE "model.cuda_graph_scope=attn,moe_router,moe_preprocess"},
    {"moe_scopes_need_moe_layers", GT_SEVERITY_ERROR, TE "model.cuda_graph_scope=attn,moe_router",
     TE MOE "model.cuda_graph_scope=attn,moe_router"},
    /* Bridge: dropless MoE may not graph the experts; attn,moe_router,moe_preprocess instead */
    {"moe_scope_needs_drop_and_pad", GT_SEVERITY_ERROR, TE MOE "model.cuda_graph_scope=attn,moe",
     TE MOE DROP_PAD "model.cuda_graph_scope=attn,moe"},
    {"moe_preprocess_no_host_sync", GT_SEVERITY_ERROR,
     TE MOE DROP_PAD "model.moe_token_dispatcher_type=alltoall "
                     "model.cuda_graph_scope=attn,moe_router,moe_preprocess",
     TE MOE "model.moe_token_dispatcher_type=alltoall "
            "model.cuda_graph_scope=attn,moe_router,moe_preprocess"},
    {"moe_preprocess_no_fp8_router_padding", GT_SEVERITY_ERROR,
     TE MOE "model.moe_router_padding_for_fp8=true "
            "model.cuda_graph_scope=attn,moe_router,moe_preprocess",
     TE MOE "model.moe_router_padding_for_fp8=false "
            "model.cuda_graph_scope=attn,moe_router,moe_preprocess"},
    {"mlp_scope_needs_dense_layers", GT_SEVERITY_ERROR, TE MOE "model.cuda_graph_scope=attn,mlp",
     TE MOE "model.moe_layer_freq=2 model.cuda_graph_scope=attn,mlp"},
    {"mamba_scope_needs_mamba_layers", GT_SEVERITY_ERROR, TE "model.cuda_graph_scope=attn,mamba",
     TE
     "model.num_layers=6 model.hybrid_override_pattern=*-M*-M model.cuda_graph_scope=attn,mamba"},
    {"attn_scope_needs_attention_layers", GT_SEVERITY_ERROR,
     TE "model.num_layers=4 model.hybrid_override_pattern=M-M- model.cuda_graph_scope=attn",
     TE "model.num_layers=4 model.hybrid_override_pattern=*-M- model.cuda_graph_scope=attn"},
    {"full_recompute_needs_full_iteration", GT_SEVERITY_ERROR,
     TE "model.cuda_graph_scope=attn model.recompute_granularity=full model.recompute_num_layers=2",
     LOCAL "model.recompute_granularity=full model.recompute_num_layers=2"},
    {"moe_recompute_not_with_moe_router", GT_SEVERITY_ERROR,
     TE MOE "model.cuda_graph_scope=attn,moe_router model.recompute_granularity=selective "
            "model.recompute_modules=moe",
     TE MOE "model.cuda_graph_scope=attn,moe_router model.recompute_granularity=selective "
            "model.recompute_modules=core_attn"},
    {"recompute_module_not_in_model", GT_SEVERITY_ERROR,
     "model.recompute_granularity=selective model.recompute_modules=core_attn,moe_act",
     MOE "model.recompute_granularity=selective model.recompute_modules=core_attn,moe_act"},
    {"cpu_offloading_with_graphs", GT_SEVERITY_ERROR,
     TE "model.cuda_graph_scope=attn model.cpu_offloading=true",
     "model.cuda_graph_impl=none model.cpu_offloading=true"},
    {"overlap_param_gather_needs_distributed_optimizer", GT_SEVERITY_ERROR,
     "ddp.overlap_grad_reduce=true ddp.overlap_param_gather=true",
     "ddp.overlap_grad_reduce=true ddp.overlap_param_gather=true "
     "optimizer.use_distributed_optimizer=true"},
    {"overlap_param_gather_needs_overlap_grad_reduce", GT_SEVERITY_ERROR,
     "optimizer.use_distributed_optimizer=true ddp.overlap_param_gather=true",
     "optimizer.use_distributed_optimizer=true ddp.overlap_param_gather=true "
     "ddp.overlap_grad_reduce=true"},
    {"delay_wgrad_needs_gradient_accumulation_fusion", GT_SEVERITY_ERROR,
     TE "model.cuda_graph_scope=attn model.delay_wgrad_compute=true "
        "model.gradient_accumulation_fusion=false",
     TE "model.cuda_graph_scope=attn model.delay_wgrad_compute=true "
        "model.gradient_accumulation_fusion=true"},
    {"delay_wgrad_attn_needs_no_bias", GT_SEVERITY_ERROR,
     TE "model.cuda_graph_scope=attn model.delay_wgrad_compute=true "
        "model.gradient_accumulation_fusion=true model.add_qkv_bias=true",
     TE "model.cuda_graph_scope=attn model.delay_wgrad_compute=true "
        "model.gradient_accumulation_fusion=true model.add_qkv_bias=false"},
    {"expandable_segments_need_nccl_graph_register_0", GT_SEVERITY_ERROR,
     TE "model.cuda_graph_scope=attn env.expandable_segments=true env.nccl_graph_register=unset",
     TE "model.cuda_graph_scope=attn env.expandable_segments=true env.nccl_graph_register=0"},
    {"graphs_need_padded_packed_sequences", GT_SEVERITY_ERROR,
     TE "model.cuda_graph_scope=attn dataset.packed_sequence=true",
     TE "model.cuda_graph_scope=attn dataset.packed_sequence=true dataset.pad_to_max_length=true "
        "dataset.pad_cu_seqlens=true"},
    {"warmup_steps_bound", GT_SEVERITY_ERROR,
     TE "model.cuda_graph_scope=attn model.cuda_graph_warmup_steps=10 train.train_iters=10",
     TE "model.cuda_graph_scope=attn model.cuda_graph_warmup_steps=3 train.train_iters=10"},
    /* where graphtrain lifts a Bridge limitation: a note, not an error */
    {"nan_checks_inside_full_iteration", GT_SEVERITY_NOTE,
     LOCAL "rerun_state_machine.check_for_nan_in_loss=true",
     LOCAL "rerun_state_machine.check_for_nan_in_loss=false ddp.check_for_nan_in_grad=false"},
    {"dropless_moe_in_full_iteration", GT_SEVERITY_NOTE, LOCAL MOE, LOCAL MOE DROP_PAD},
    {"scope_cleared_without_impl", GT_SEVERITY_NOTE, "model.cuda_graph_scope=attn",
     TE "model.cuda_graph_scope=attn"},
    /* shapes and run settings */
    {"heads_divide_hidden_size", GT_SEVERITY_ERROR, "model.hidden_size=500",
     "model.hidden_size=512"},
    {"query_groups_divide_heads", GT_SEVERITY_ERROR, "model.num_query_groups=3",
     "model.num_query_groups=4"},
    {"layer_pattern_alphabet", GT_SEVERITY_ERROR,
     "model.num_layers=4 model.hybrid_override_pattern=*-X-",
     "model.num_layers=4 model.hybrid_override_pattern=*-*-"},
    {"layer_pattern_length", GT_SEVERITY_ERROR,
     "model.num_layers=4 model.hybrid_override_pattern=*-*",
     "model.num_layers=3 model.hybrid_override_pattern=*-*"},
    {"pattern_moe_needs_experts", GT_SEVERITY_ERROR,
     "model.num_layers=4 model.hybrid_override_pattern=*E*E",
     MOE "model.num_layers=4 model.hybrid_override_pattern=*E*E"},
    {"dense_layers_need_ffn_hidden_size", GT_SEVERITY_ERROR, "model.ffn_hidden_size=0",
     "model.ffn_hidden_size=1536"},
    {"moe_topk_le_experts", GT_SEVERITY_ERROR, MOE "model.moe_router_topk=9",
     MOE "model.moe_router_topk=8"},
    {"moe_needs_expert_ffn", GT_SEVERITY_ERROR,
     MOE "model.moe_ffn_hidden_size=0 model.ffn_hidden_size=0", MOE "model.ffn_hidden_size=0"},
    {"expert_parallel_divides_experts", GT_SEVERITY_ERROR, MOE "model.expert_model_parallel_size=3",
     MOE "model.expert_model_parallel_size=4"},
    {"parallel_sizes_fit_gpus", GT_SEVERITY_ERROR,
     "runtime.num_gpus=6 model.tensor_model_parallel_size=4",
     "runtime.num_gpus=8 model.tensor_model_parallel_size=4"},
    {"global_batch_divisible", GT_SEVERITY_ERROR,
     "train.micro_batch_size=4 train.global_batch_size=6",
     "train.micro_batch_size=4 train.global_batch_size=8"},
    {"shards_need_data_path", GT_SEVERITY_ERROR, "dataset.source=shards",
     "dataset.source=shards dataset.data_path=data/x"},
    {"min_lr_le_lr", GT_SEVERITY_ERROR, "optimizer.lr=0.001 optimizer.min_lr=0.01",
     "optimizer.lr=0.01 optimizer.min_lr=0.001"},
    /* the learning-rate schedule (Megatron's asserts) */
    {"warmup_fraction_excludes_warmup_iters", GT_SEVERITY_ERROR,
     "scheduler.lr_warmup_fraction=0.1 scheduler.lr_warmup_iters=5",
     "scheduler.lr_warmup_fraction=0.1 scheduler.lr_warmup_iters=0"},
    {"warmup_fraction_in_unit_range", GT_SEVERITY_ERROR,
     "scheduler.lr_warmup_fraction=1.5 scheduler.lr_warmup_iters=0",
     "scheduler.lr_warmup_fraction=1 scheduler.lr_warmup_iters=0"},
    {"warmup_fraction_in_unit_range", GT_SEVERITY_ERROR,
     "scheduler.lr_warmup_fraction=-0.5 scheduler.lr_warmup_iters=0",
     "scheduler.lr_warmup_fraction=0 scheduler.lr_warmup_iters=0"},
    {"warmup_init_le_lr", GT_SEVERITY_ERROR, "optimizer.lr=0.001 scheduler.lr_warmup_init=0.002",
     "optimizer.lr=0.001 scheduler.lr_warmup_init=0.001"},
    {"wsd_needs_decay_iters", GT_SEVERITY_ERROR, "scheduler.lr_decay_style=WSD",
     "scheduler.lr_decay_style=WSD scheduler.lr_wsd_decay_iters=20"},
    {"wsd_decay_iters_within_decay_iters", GT_SEVERITY_ERROR,
     "train.train_iters=100 scheduler.lr_decay_style=WSD scheduler.lr_wsd_decay_iters=101",
     "train.train_iters=100 scheduler.lr_decay_style=WSD scheduler.lr_wsd_decay_iters=100"},
    {"wsd_keys_without_wsd", GT_SEVERITY_NOTE, "scheduler.lr_wsd_decay_iters=20",
     "scheduler.lr_decay_style=WSD scheduler.lr_wsd_decay_iters=20"},
    {"override_or_use_checkpoint_scheduler", GT_SEVERITY_ERROR,
     "scheduler.override_opt_param_scheduler=true "
     "scheduler.use_checkpoint_opt_param_scheduler=true",
     "scheduler.use_checkpoint_opt_param_scheduler=true"},
    {"moment_dtype_needs_precision_aware", GT_SEVERITY_ERROR, "optimizer.exp_avg_sq_dtype=bf16",
     "optimizer.exp_avg_sq_dtype=bf16 optimizer.use_precision_aware_optimizer=true"},
    {"eval_needs_iters", GT_SEVERITY_ERROR, "train.eval_interval=10 train.eval_iters=0",
     "train.eval_interval=10 train.eval_iters=2"},
    /* Megatron's arithmetic (config/rules_megatron.c) */
    {"data_parallel_size_matches_world", GT_SEVERITY_ERROR,
     "runtime.num_gpus=8 model.tensor_model_parallel_size=2 ddp.data_parallel_size=2",
     "runtime.num_gpus=8 model.tensor_model_parallel_size=2 ddp.data_parallel_size=4"},
    {"expert_parallel_fits_gpus", GT_SEVERITY_ERROR,
     MOE "runtime.num_gpus=4 model.expert_model_parallel_size=8",
     MOE "runtime.num_gpus=8 model.expert_model_parallel_size=8"},
    {"tp_divides_heads", GT_SEVERITY_ERROR,
     "runtime.num_gpus=16 model.num_attention_heads=8 model.tensor_model_parallel_size=16 "
     "model.ffn_hidden_size=1536 model.vocab_size=32768",
     "runtime.num_gpus=8 model.num_attention_heads=8 model.tensor_model_parallel_size=8"},
    {"tp_divides_query_groups", GT_SEVERITY_ERROR,
     "runtime.num_gpus=4 model.num_query_groups=2 model.tensor_model_parallel_size=4",
     "runtime.num_gpus=4 model.num_query_groups=4 model.tensor_model_parallel_size=4"},
    {"tp_divides_ffn", GT_SEVERITY_ERROR,
     "runtime.num_gpus=4 model.ffn_hidden_size=1538 model.tensor_model_parallel_size=4",
     "runtime.num_gpus=4 model.ffn_hidden_size=1536 model.tensor_model_parallel_size=4"},
    {"tp_divides_vocab", GT_SEVERITY_ERROR,
     "runtime.num_gpus=2 model.vocab_size=50257 model.tensor_model_parallel_size=2",
     "runtime.num_gpus=2 model.vocab_size=50432 model.tensor_model_parallel_size=2"},
    {"cp_divides_seq", GT_SEVERITY_ERROR,
     "runtime.num_gpus=4 model.seq_length=260 model.context_parallel_size=4",
     "runtime.num_gpus=4 model.seq_length=256 model.context_parallel_size=4"},
    {"pp_divides_layers", GT_SEVERITY_ERROR,
     "runtime.num_gpus=4 model.num_layers=10 model.pipeline_model_parallel_size=4",
     "runtime.num_gpus=4 model.num_layers=10 model.pipeline_model_parallel_size=4 "
     "model.num_layers_in_first_pipeline_stage=1 model.num_layers_in_last_pipeline_stage=3"},
    {"uneven_pipeline_stages_fit", GT_SEVERITY_ERROR,
     "model.num_layers=8 model.num_layers_in_first_pipeline_stage=2",
     "runtime.num_gpus=2 model.num_layers=8 model.pipeline_model_parallel_size=2 "
     "model.num_layers_in_first_pipeline_stage=2"},
    {"expert_parallel_needs_moe", GT_SEVERITY_ERROR,
     "runtime.num_gpus=2 model.expert_model_parallel_size=2",
     MOE "runtime.num_gpus=2 model.expert_model_parallel_size=2"},
    {"full_recompute_needs_method", GT_SEVERITY_ERROR,
     "model.recompute_granularity=full model.recompute_num_layers=1",
     "model.recompute_granularity=full model.recompute_num_layers=1 "
     "model.recompute_method=uniform"},
    {"full_recompute_num_layers_range", GT_SEVERITY_ERROR,
     "model.recompute_granularity=full model.recompute_method=block "
     "runtime.num_gpus=2 model.pipeline_model_parallel_size=2 model.recompute_num_layers=5",
     "model.recompute_granularity=full model.recompute_method=block "
     "runtime.num_gpus=2 model.pipeline_model_parallel_size=2 model.recompute_num_layers=4"},
    {"recompute_layers_need_full", GT_SEVERITY_ERROR,
     "model.recompute_method=uniform model.recompute_num_layers=1",
     "model.recompute_granularity=full model.recompute_method=uniform "
     "model.recompute_num_layers=1"},
    {"selective_recompute_forbids_num_layers", GT_SEVERITY_ERROR,
     "model.recompute_granularity=selective model.recompute_num_layers=2",
     "model.recompute_granularity=selective model.recompute_num_layers=null"},
    /* valid settings this engine cannot run yet (config/unsupported.c): errors, not notes */
    {"engine_no_mamba", GT_SEVERITY_ERROR,
     "model.num_layers=2 model.hybrid_override_pattern=*M model.mamba_d_conv=16",
     "model.num_layers=2 model.hybrid_override_pattern=*M model.mamba_d_conv=4"},
    {"engine_no_fp8_blockwise_shape", GT_SEVERITY_ERROR,
     "model.compute_dtype=fp8_sc model.ffn_hidden_size=1000",
     "model.compute_dtype=fp8_sc model.ffn_hidden_size=1024"},
    {"engine_no_fp8_blockwise_shape", GT_SEVERITY_ERROR,
     "model.compute_dtype=fp8_sc runtime.device=cuda train.micro_batch_size=3 "
     "model.seq_length=100",
     "model.compute_dtype=fp8_sc runtime.device=cpu train.micro_batch_size=3 "
     "model.seq_length=100"},
    {"engine_no_fp8_blockwise_shape", GT_SEVERITY_ERROR,
     "model.compute_dtype=fp8_sc runtime.device=cuda model.num_attention_heads=32 "
     "model.num_query_groups=2", /* qkv width 512 + 2 x 2 x 16 */
     "model.compute_dtype=fp8_sc runtime.device=cuda model.num_attention_heads=32 "
     "model.num_query_groups=4"},
    {"engine_fp8_blackwell_format", GT_SEVERITY_ERROR, "model.compute_dtype=nvfp4",
     "model.compute_dtype=fp8_cs"},
    {"engine_fp8_blackwell_format", GT_SEVERITY_ERROR,
     "model.compute_dtype=fp8_mx runtime.device=cpu",
     "model.compute_dtype=fp8_ds runtime.device=cpu"},
    {"engine_no_fp8_blockwise_moe", GT_SEVERITY_ERROR,
     MOE "model.compute_dtype=fp8_sc runtime.device=cpu",
     MOE "model.compute_dtype=fp8_cs runtime.device=cpu"},
    {"engine_no_fp8_blockwise_moe", GT_SEVERITY_ERROR,
     MOE "model.compute_dtype=fp8_sc runtime.device=cpu",
     MOE "model.compute_dtype=fp8_ds runtime.device=cpu"},
    {"engine_no_mamba_full_recompute", GT_SEVERITY_ERROR,
     "model.num_layers=2 model.hybrid_override_pattern=*M runtime.device=cpu "
     "model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1",
     "model.num_layers=2 model.hybrid_override_pattern=*M runtime.device=cpu "
     "model.recompute_granularity=selective model.recompute_modules=core_attn"},
    /* 8 heads of 64: in_proj's width 2 x 512 + 2 x 8 x 128 + 8 = 3080, not a multiple of 16 */
    {"engine_no_fp8_mamba", GT_SEVERITY_ERROR,
     "model.num_layers=2 model.hybrid_override_pattern=*M runtime.device=cuda "
     "model.compute_dtype=fp8_cs model.mamba_num_heads=8",
     "model.num_layers=2 model.hybrid_override_pattern=*M runtime.device=cuda "
     "model.compute_dtype=fp8_cs model.mamba_num_heads=16"},
    {"engine_no_fp8_mamba", GT_SEVERITY_ERROR,
     "model.num_layers=2 model.hybrid_override_pattern=*M runtime.device=cuda "
     "model.compute_dtype=fp8_ds model.mamba_num_heads=8",
     "model.num_layers=2 model.hybrid_override_pattern=*M runtime.device=cpu "
     "model.compute_dtype=fp8_ds model.mamba_num_heads=8"},
    /* fp8 keys against model.compute_dtype (config/rules_fp8.c) */
    {"fp8_needs_fp8_compute_dtype", GT_SEVERITY_ERROR, "model.fp8=hybrid model.compute_dtype=bf16",
     "model.fp8=hybrid model.compute_dtype=fp8_cs runtime.device=cpu"},
    {"fp8_recipe_matches_compute_dtype", GT_SEVERITY_ERROR,
     "model.fp8_recipe=delayed model.compute_dtype=fp8_cs runtime.device=cpu",
     "model.fp8_recipe=delayed model.compute_dtype=fp8_ds runtime.device=cpu"},
    {"fp8_first_last_layers_leave_none", GT_SEVERITY_ERROR,
     "model.num_layers=2 model.compute_dtype=fp8_cs model.first_last_layers_bf16=true",
     "model.num_layers=3 model.compute_dtype=fp8_cs model.first_last_layers_bf16=true"},
    {"engine_no_tensor_parallel", GT_SEVERITY_ERROR,
     "runtime.num_gpus=2 model.tensor_model_parallel_size=2", "model.tensor_model_parallel_size=1"},
    {"engine_no_pipeline_parallel", GT_SEVERITY_ERROR,
     "runtime.num_gpus=2 model.pipeline_model_parallel_size=2",
     "model.pipeline_model_parallel_size=1"},
    {"engine_no_context_parallel", GT_SEVERITY_ERROR,
     "runtime.num_gpus=2 model.context_parallel_size=2", "model.context_parallel_size=1"},
    {"engine_no_expert_parallel", GT_SEVERITY_ERROR,
     MOE "runtime.num_gpus=2 model.expert_model_parallel_size=2",
     MOE "model.expert_model_parallel_size=1"},
    {"engine_no_cpu_offloading", GT_SEVERITY_ERROR, "model.cpu_offloading=true",
     "model.cpu_offloading=false"},
    {"engine_no_packed_sequences", GT_SEVERITY_ERROR, "dataset.packed_sequence=true",
     "dataset.packed_sequence=false"},
    {"engine_no_vocab_padding", GT_SEVERITY_ERROR, "model.should_pad_vocab=true",
     "model.should_pad_vocab=false"},
    {"engine_gpu_computes_bf16", GT_SEVERITY_NOTE, "model.compute_dtype=fp32",
     "model.compute_dtype=bf16"},
    {"engine_wgrad_always_deferred", GT_SEVERITY_NOTE,
     "model.delay_wgrad_compute=true model.gradient_accumulation_fusion=true",
     "model.delay_wgrad_compute=false"},
    {"engine_always_deterministic", GT_SEVERITY_NOTE, "runtime.deterministic=false",
     "runtime.deterministic=true"},
    {"engine_gpu_head_size", GT_SEVERITY_NOTE,
     "model.hidden_size=128 model.num_attention_heads=4 model.num_query_groups=4 "
     "model.seq_length=64",
     "model.hidden_size=128 model.num_attention_heads=2 model.num_query_groups=2 "
     "model.seq_length=64"},
    /* the CUDA kernel choices (config/cuda_keys.c): errors where the run is on the GPU */
    {"cuda_moe_gemm_choice", GT_SEVERITY_ERROR,
     "runtime.device=cuda " MOE "model.moe_ffn_hidden_size=100",
     "runtime.device=cuda " MOE "model.moe_ffn_hidden_size=100 runtime.cuda.moe_gemm=reference"},
    {"cuda_attention_choice", GT_SEVERITY_ERROR,
     "runtime.device=cuda model.hidden_size=1024 model.num_attention_heads=8 "
     "model.attention_dropout=0.1",
     "runtime.device=cuda model.hidden_size=1024 model.num_attention_heads=8 "
     "model.attention_dropout=0.1 runtime.cuda.attention=reference"},
    /* model.kv_channels: a head size no GPU attention kernel takes (64 and 128 do) */
    {"cuda_attention_choice", GT_SEVERITY_ERROR, "runtime.device=cuda model.kv_channels=20",
     "runtime.device=cuda model.kv_channels=128"},
    {"cuda_attention_bwd_choice", GT_SEVERITY_ERROR,
     "runtime.device=cuda runtime.gpu=b200 runtime.cuda.attention_bwd=wgmma",
     "runtime.device=cuda runtime.gpu=h200 runtime.cuda.attention_bwd=wgmma"},
    /* cuda_pdl_choice trips only below compute capability 9.0, a GPU runtime.gpu no longer
     * names (h100 ... gb300); test_kernel_choice covers that refusal */
    {"cuda_keys_unused_on_cpu", GT_SEVERITY_NOTE, "runtime.device=cpu runtime.cuda.attention=mma",
     "runtime.device=cpu runtime.cuda.attention=auto"},
};
#define N_CASES (sizeof k_cases / sizeof k_cases[0])

/* defaults + space-separated overrides, applied in order; fails the test on a bad one */
static void config_with(gt_config *cfg, const char *overrides) {
    gt_config_defaults(cfg);
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", overrides);
    char *save = NULL;
    for (char *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        gt_error err = {0};
        if (gt_config_override(cfg, tok, &err) != GT_OK) fail_msg("override %s: %s", tok, err.msg);
    }
    /* no gt_config_finalize: validation must stand on its own (library users may skip it) */
}

static const gt_finding *find(const gt_report *r, const char *rule) {
    for (int i = 0; i < r->count; i++)
        if (!strcmp(r->findings[i].rule, rule)) return &r->findings[i];
    return NULL;
}

static void run_trips(void **state) {
    const rule_case *c = *state;
    gt_config cfg;
    config_with(&cfg, c->trips);
    gt_report r;
    int errors = gt_config_validate(&cfg, &r);
    const gt_finding *f = find(&r, c->rule);
    if (!f) fail_msg("rule %s did not trip on: %s", c->rule, c->trips);
    assert_int_equal(f->severity, c->severity);
    assert_true(f->n_keys > 0);
    assert_true(strlen(f->message) > 10);
    assert_true(strlen(f->fix) > 10);
    if (c->severity == GT_SEVERITY_ERROR) assert_true(errors > 0);
}

static void run_passes(void **state) {
    const rule_case *c = *state;
    gt_config cfg;
    config_with(&cfg, c->passes);
    gt_report r;
    gt_config_validate(&cfg, &r);
    if (find(&r, c->rule))
        fail_msg("rule %s tripped on the passing config: %s", c->rule, c->passes);
}

static void test_every_violation_is_reported_together(void **state) {
    (void)state;
    gt_config cfg;
    /* 1 no RNG tracker, 2 full_iteration with transformer_engine, 3 full_iteration with attn,
     * 4 cpu offloading with graphs, 5 heads do not divide hidden size, 6 cpu offloading is
     * not implemented */
    config_with(&cfg, "model.cuda_graph_impl=transformer_engine "
                      "model.cuda_graph_scope=full_iteration,attn model.cpu_offloading=true "
                      "model.hidden_size=500");
    gt_report r;
    assert_int_equal(gt_config_validate(&cfg, &r), 6);
    assert_true(gt_report_has(&r, "engine_no_cpu_offloading"));
    assert_true(gt_report_has(&r, "graphs_need_rng_tracker"));
    assert_true(gt_report_has(&r, "full_iteration_needs_local"));
    assert_true(gt_report_has(&r, "full_iteration_alone"));
    assert_true(gt_report_has(&r, "cpu_offloading_with_graphs"));
    assert_true(gt_report_has(&r, "heads_divide_hidden_size"));
}

/* Megatron's world size is tp * pp * cp * dp on one GPU too: tp 2 cannot fit in 1 GPU */
static void test_one_gpu_cannot_hold_tensor_parallel_2(void **state) {
    (void)state;
    gt_config cfg;
    config_with(&cfg, "model.tensor_model_parallel_size=2");
    gt_report r;
    gt_config_validate(&cfg, &r);
    assert_true(gt_report_has(&r, "parallel_sizes_fit_gpus"));
    assert_true(gt_report_has(&r, "engine_no_tensor_parallel"));
}

/* A setting graphtrain cannot run is an error marked as a "not supported yet" refusal, naming
 * the key and its value, and counted apart from the rules a configuration breaks. */
static void test_unsupported_settings_are_errors_counted_apart(void **state) {
    (void)state;
    gt_config cfg;
    config_with(&cfg, "model.compute_dtype=fp8_sc model.ffn_hidden_size=1000 "
                      "dataset.packed_sequence=true "
                      "dataset.pad_to_max_length=true dataset.pad_cu_seqlens=true "
                      "train.global_batch_size=6");
    gt_report r;
    assert_int_equal(gt_config_validate(&cfg, &r), 3);
    assert_int_equal(r.unsupported, 2);
    const gt_finding *f = find(&r, "engine_no_fp8_blockwise_shape");
    assert_non_null(f);
    assert_true(f->unsupported);
    assert_string_equal(f->keys[0], "model.compute_dtype");
    assert_non_null(strstr(f->message, "model.compute_dtype=fp8_sc"));
    assert_non_null(strstr(f->fix, "-c fp8_cs"));
    assert_false(find(&r, "global_batch_divisible")->unsupported);
    char *text = NULL;
    size_t tn = 0;
    FILE *out = open_memstream(&text, &tn);
    gt_report_print(&r, out);
    fclose(out);
    assert_non_null(strstr(text, "3 errors (2 settings graphtrain cannot run yet)"));
    free(text);
}

static void test_defaults_are_valid_without_notes(void **state) {
    (void)state;
    gt_config cfg;
    config_with(&cfg, "");
    gt_report r;
    assert_int_equal(gt_config_validate(&cfg, &r), 0);
    assert_int_equal(r.notes, 0);
}

static void test_blackwell_lifts_nccl_register_rule_for_local_only(void **state) {
    (void)state;
    gt_config cfg;
    gt_report r;
    config_with(&cfg, LOCAL "env.expandable_segments=true runtime.gpu=gb200");
    gt_config_validate(&cfg, &r);
    assert_false(gt_report_has(&r, "expandable_segments_need_nccl_graph_register_0"));
    config_with(&cfg,
                TE "model.cuda_graph_scope=attn env.expandable_segments=true runtime.gpu=gb200");
    gt_config_validate(&cfg, &r);
    assert_true(gt_report_has(&r, "expandable_segments_need_nccl_graph_register_0"));
}

static void test_report_prints_keys_why_and_fix_as_text_and_json(void **state) {
    (void)state;
    gt_config cfg;
    config_with(&cfg, TE "model.cuda_graph_scope=moe,moe_router " MOE DROP_PAD);
    gt_report r;
    assert_int_equal(gt_config_validate(&cfg, &r), 1);
    char *text = NULL, *json = NULL;
    size_t tn = 0, jn = 0;
    FILE *f = open_memstream(&text, &tn);
    gt_report_print(&r, f);
    fclose(f);
    f = open_memstream(&json, &jn);
    gt_report_print_json(&r, f);
    fclose(f);
    assert_non_null(strstr(text, "error [moe_excludes_moe_router] model.cuda_graph_scope"));
    assert_non_null(strstr(text, "fix: "));
    assert_non_null(strstr(text, "1 error"));
    assert_non_null(strstr(json, "\"rule\": \"moe_excludes_moe_router\""));
    assert_non_null(strstr(json, "\"keys\": [\"model.cuda_graph_scope\"]"));
    assert_non_null(strstr(json, "\"fix\": "));
    free(text);
    free(json);
}

int main(void) {
    static struct CMUnitTest tests[2 * N_CASES + 6];
    static char names[2 * N_CASES][128];
    size_t n = 0;
    for (size_t i = 0; i < N_CASES; i++) {
        snprintf(names[2 * i], sizeof names[0], "%s: trips", k_cases[i].rule);
        snprintf(names[2 * i + 1], sizeof names[0], "%s: passes", k_cases[i].rule);
        tests[n++] = (struct CMUnitTest){names[2 * i], run_trips, NULL, NULL, (void *)&k_cases[i]};
        tests[n++] =
            (struct CMUnitTest){names[2 * i + 1], run_passes, NULL, NULL, (void *)&k_cases[i]};
    }
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_every_violation_is_reported_together);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_defaults_are_valid_without_notes);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_one_gpu_cannot_hold_tensor_parallel_2);
    tests[n++] =
        (struct CMUnitTest)cmocka_unit_test(test_unsupported_settings_are_errors_counted_apart);
    tests[n++] =
        (struct CMUnitTest)cmocka_unit_test(test_blackwell_lifts_nccl_register_rule_for_local_only);
    tests[n++] =
        (struct CMUnitTest)cmocka_unit_test(test_report_prints_keys_why_and_fix_as_text_and_json);
    return _cmocka_run_group_tests("rules", tests, n, NULL, NULL);
}
