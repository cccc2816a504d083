/* The configuration struct. Every field is reached through one key table (config/keys.c):
 * parsing YAML recipes, key=value overrides, printing and the README reference all read it.
 * Names mirror Megatron Bridge's nesting so `cfg.model.cuda_graph_impl` there is
 * `model.cuda_graph_impl` here. */
#ifndef GT_CONFIG_CONFIG_H
#define GT_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GT_PATH_MAX 512
#define GT_PATTERN_MAX 256

typedef enum { GT_GRAPH_IMPL_NONE, GT_GRAPH_IMPL_LOCAL, GT_GRAPH_IMPL_TE } gt_graph_impl;

/* model.cuda_graph_scope is a set, stored as bits. */
enum {
    GT_SCOPE_FULL_ITERATION = 1u << 0,
    GT_SCOPE_ATTN = 1u << 1,
    GT_SCOPE_MLP = 1u << 2,
    GT_SCOPE_MOE = 1u << 3,
    GT_SCOPE_MOE_ROUTER = 1u << 4,
    GT_SCOPE_MOE_PREPROCESS = 1u << 5,
    GT_SCOPE_MAMBA = 1u << 6,
};

typedef enum {
    GT_RECOMPUTE_NONE,
    GT_RECOMPUTE_FULL,
    GT_RECOMPUTE_SELECTIVE
} gt_recompute_granularity;
/* NONE = unset (Bridge's None); full recompute needs one of the other two */
typedef enum {
    GT_RECOMPUTE_METHOD_UNIFORM,
    GT_RECOMPUTE_METHOD_BLOCK,
    GT_RECOMPUTE_METHOD_NONE
} gt_recompute_method;

/* model.recompute_modules is a set, stored as bits. */
enum {
    GT_RECOMPUTE_CORE_ATTN = 1u << 0,
    GT_RECOMPUTE_MLP = 1u << 1,
    GT_RECOMPUTE_MOE = 1u << 2,
    GT_RECOMPUTE_MOE_ACT = 1u << 3,
    GT_RECOMPUTE_LAYERNORM = 1u << 4,
    GT_RECOMPUTE_SHARED_EXPERTS = 1u << 5,
};

typedef enum { GT_DISPATCHER_ALLGATHER, GT_DISPATCHER_ALLTOALL, GT_DISPATCHER_FLEX } gt_dispatcher;
typedef enum {
    GT_DTYPE_BF16,
    GT_DTYPE_FP32,
    GT_DTYPE_FP8_CS, /* fp8 current scaling */
    GT_DTYPE_FP8_MX, /* fp8 MX block scaling */
    GT_DTYPE_FP8_DS, /* fp8 delayed scaling */
    GT_DTYPE_NVFP4,  /* NVIDIA fp4 (Bridge's -c nvfp4) */
    GT_DTYPE_FP8_SC, /* fp8 blockwise ("subchannel") scaling, DeepSeek-V3 style */
} gt_compute_dtype;
/* model.fp8: Megatron's FP8 format (none = unset: hybrid under an fp8 compute_dtype) */
typedef enum { GT_FP8_FORMAT_NONE, GT_FP8_FORMAT_E4M3, GT_FP8_FORMAT_HYBRID } gt_fp8_format_setting;
/* model.fp8_recipe, in Megatron's names (none = unset: model.compute_dtype decides) */
typedef enum {
    GT_FP8_RECIPE_NONE,
    GT_FP8_RECIPE_TENSORWISE,
    GT_FP8_RECIPE_DELAYED,
    GT_FP8_RECIPE_BLOCKWISE,
    GT_FP8_RECIPE_MXFP8,
} gt_fp8_recipe;
/* model.fp8_amax_compute_algo */
typedef enum { GT_AMAX_MOST_RECENT, GT_AMAX_MAX } gt_amax_algo;
/* scheduler.lr_decay_style, in Megatron's spelling order */
typedef enum {
    GT_LR_CONSTANT,
    GT_LR_LINEAR,
    GT_LR_COSINE,
    GT_LR_INVERSE_SQRT,
    GT_LR_WSD
} gt_lr_style;
/* scheduler.lr_wsd_decay_style: WSD's annealing phase */
typedef enum { GT_WSD_EXPONENTIAL, GT_WSD_LINEAR, GT_WSD_COSINE, GT_WSD_MINUS_SQRT } gt_wsd_style;
/* storage of an optimizer state (the math is fp32 either way) */
typedef enum { GT_STATE_FP32, GT_STATE_BF16 } gt_state_dtype;
/* optimizer.lazy_embedding_rows: auto = lazy where it applies, off = AdamW over every row */
typedef enum { GT_LAZY_ROWS_AUTO, GT_LAZY_ROWS_OFF } gt_lazy_rows_setting;
/* bytes an element of such a state takes */
static inline size_t gt_state_dtype_bytes(gt_state_dtype d) {
    return d == GT_STATE_BF16 ? 2 : 4;
}
typedef enum { GT_DEVICE_AUTO, GT_DEVICE_CPU, GT_DEVICE_CUDA } gt_device_kind;
typedef enum { GT_CAPTURE_FAIL_STOP, GT_CAPTURE_FAIL_EAGER } gt_capture_failure;
typedef enum { GT_DATA_MOCK, GT_DATA_SHARDS } gt_data_source;

/* The FP8 recipe a compute dtype names (GT_FP8_RECIPE_NONE: bf16, fp32, nvfp4) */
static inline gt_fp8_recipe gt_compute_dtype_fp8_recipe(gt_compute_dtype d) {
    switch (d) {
    case GT_DTYPE_FP8_CS:
        return GT_FP8_RECIPE_TENSORWISE;
    case GT_DTYPE_FP8_DS:
        return GT_FP8_RECIPE_DELAYED;
    case GT_DTYPE_FP8_SC:
        return GT_FP8_RECIPE_BLOCKWISE;
    case GT_DTYPE_FP8_MX:
        return GT_FP8_RECIPE_MXFP8;
    default:
        return GT_FP8_RECIPE_NONE;
    }
}

typedef struct gt_model_config {
    /* by size (8-byte, 4-byte, the pattern, bools), so the struct carries no padding */
    double rotary_base;
    double rope_scaling_factor; /* Llama 3.1 rotary scaling's factor (with rope_scaling) */
    double norm_epsilon;
    double init_method_std;
    double attention_dropout;
    double hidden_dropout;
    double moe_expert_capacity_factor; /* <= 0: unset (dropless) */
    double moe_aux_loss_coeff;
    double moe_router_topk_scaling_factor; /* 0: unset (null), weights unscaled */
    /* shape */
    int num_layers;
    int hidden_size;
    int num_attention_heads;
    int num_query_groups; /* kv heads; 0 = same as num_attention_heads */
    int kv_channels;      /* head size; 0 (null) = hidden_size / num_attention_heads */
    int ffn_hidden_size;
    int vocab_size;
    int seq_length;
    gt_compute_dtype compute_dtype;
    /* FP8 (Megatron's keys; compute_dtype names the recipe) */
    gt_fp8_format_setting fp8;
    gt_fp8_recipe fp8_recipe;
    int fp8_margin;
    int fp8_amax_history_len;
    gt_amax_algo fp8_amax_compute_algo;
    int num_layers_at_start_in_bf16;
    int num_layers_at_end_in_bf16;
    /* MoE */
    int num_moe_experts; /* 0 = dense model */
    int moe_router_topk;
    int moe_ffn_hidden_size;
    int moe_layer_freq; /* every n-th layer is MoE (1 = all) */
    gt_dispatcher moe_token_dispatcher_type;
    /* Mamba-2 mixers ('M' layers): Megatron's TransformerConfig keys, and MambaMixer's
     * constructor arguments (d_conv, expand, chunk_size) under mamba_* names */
    int mamba_state_dim;
    int mamba_head_dim;
    int mamba_num_groups;
    int mamba_num_heads; /* 0 = mamba_expand * hidden_size / mamba_head_dim */
    int mamba_d_conv;
    int mamba_expand;
    int mamba_chunk_size;
    /* recompute */
    gt_recompute_granularity recompute_granularity;
    gt_recompute_method recompute_method;
    uint32_t recompute_modules; /* GT_RECOMPUTE_* bits */
    int recompute_num_layers;
    /* parallelism */
    int tensor_model_parallel_size;
    int pipeline_model_parallel_size;
    int expert_model_parallel_size;
    int context_parallel_size;
    int num_layers_in_first_pipeline_stage; /* 0 = unset (even stages) */
    int num_layers_in_last_pipeline_stage;  /* 0 = unset */
    int make_vocab_size_divisible_by;
    /* CUDA graphs (Bridge's keys) */
    gt_graph_impl cuda_graph_impl;
    uint32_t cuda_graph_scope; /* GT_SCOPE_* bits */
    int cuda_graph_warmup_steps;
    /* hybrid layer pattern, Megatron's hybrid_override_pattern alphabet: '*' attention,
     * '-' dense MLP, 'E' MoE, 'M' Mamba; empty = every layer attention + (MLP or MoE). */
    char layer_pattern[GT_PATTERN_MAX];
    bool add_bias_linear;
    bool add_qkv_bias;
    bool share_embeddings_and_output_weights; /* the head is the embedding table */
    bool rope_scaling; /* Llama 3.1 frequency scaling of the rotary embedding */
    bool qk_layernorm; /* RMSNorm of every q and k head before rope (Qwen3) */
    bool first_last_layers_bf16;
    bool moe_pad_expert_input_to_capacity;
    bool moe_router_pre_softmax;     /* softmax over all experts, top-k, no renormalization */
    bool moe_router_padding_for_fp8; /* pad routing maps for fp8 GEMMs (a host sync) */
    bool cpu_offloading;
    bool delay_wgrad_compute;
    bool gradient_accumulation_fusion;
    /* vocabulary padding (Megatron: to a multiple of divisible_by x tp) */
    bool should_pad_vocab;
    bool use_te_rng_tracker;
} gt_model_config;

typedef struct gt_train_config {
    int micro_batch_size;
    int global_batch_size;
    int train_iters;
    int eval_interval; /* 0 = never */
    int eval_iters;
    int exit_interval;            /* 0 = never; stop at the first step divisible by it */
    double exit_duration_in_mins; /* 0 = never; stop once this much wall time has passed */
} gt_train_config;

typedef struct gt_rng_config {
    uint64_t seed;
    bool te_rng_tracker;
} gt_rng_config;

typedef struct gt_ddp_config {
    bool check_for_nan_in_grad;
    int data_parallel_size; /* 0 = derived from num_gpus / (tp * pp * cp) */
    int bucket_size;        /* gradient elements per reduction bucket; 0 = Megatron's default */
    /* Megatron's overlap: each bucket reduced as the backward ends it; with the distributed
     * optimizer, each bucket's parameter all-gather during the next buckets' steps */
    bool overlap_grad_reduce;
    bool overlap_param_gather;
    /* dist/ (README, "Data parallelism"): a run without a launcher through the communicator
     * (NCCL on a GPU); NCCL's unique id through this file ("" = MPI or TCP); every wait's
     * deadline (dist.distributed_timeout_minutes) */
    bool force_collectives;
    int timeout_minutes;
    char nccl_id_file[GT_PATH_MAX];
} gt_ddp_config;

typedef struct gt_rerun_config {
    bool check_for_nan_in_loss;
} gt_rerun_config;

typedef struct gt_optimizer_config {
    double lr;
    double min_lr;
    double weight_decay;
    double adam_beta1;
    double adam_beta2;
    double adam_eps;
    double clip_grad; /* <= 0: no clipping */
    /* Megatron's precision-aware optimizer: the Adam moments may be stored in bf16 */
    bool use_precision_aware_optimizer;
    bool use_distributed_optimizer; /* data-parallel ranks step shards of the state */
    gt_state_dtype exp_avg_dtype;
    gt_state_dtype exp_avg_sq_dtype;
    gt_lazy_rows_setting lazy_embedding_rows; /* optimizer.lazy_embedding_rows */
} gt_optimizer_config;

typedef struct gt_scheduler_config {
    gt_lr_style lr_decay_style;
    int lr_warmup_iters;
    int lr_decay_iters; /* 0 = train_iters */
    double lr_warmup_init;
    double lr_warmup_fraction; /* of the decay iterations; -1 = unset (Megatron's None) */
    gt_wsd_style lr_wsd_decay_style;
    int lr_wsd_decay_iters; /* 0 = unset */
    /* at resume, a schedule unlike the checkpoint's: take the configured one (override) or
     * the checkpoint's (use_checkpoint); neither = refuse */
    bool override_opt_param_scheduler;
    bool use_checkpoint_opt_param_scheduler;
} gt_scheduler_config;

typedef struct gt_dataset_config {
    gt_data_source source;
    char data_path[GT_PATH_MAX]; /* shard prefix or directory, or Megatron prefix / blend */
    int seq_length;              /* Bridge's dataset.seq_length; 0 = model.seq_length */
    char split[64];              /* Megatron train,valid,test shares of indexed datasets */
    bool shuffle;
    bool packed_sequence;
    bool pad_to_max_length;
    bool pad_cu_seqlens;
} gt_dataset_config;

typedef struct gt_checkpoint_config {
    char save[GT_PATH_MAX]; /* directory; empty = never save */
    char load[GT_PATH_MAX]; /* directory; empty = fresh start */
    int save_interval;      /* 0 = only at the end */
    int most_recent_k;      /* newest iterations kept; -1 = all */
    bool overwrite;         /* a fresh run may delete the checkpoints already in save */
} gt_checkpoint_config;

typedef struct gt_logger_config {
    int log_interval;
    char metrics_file[GT_PATH_MAX];    /* JSONL; empty = none */
    char tensorboard_dir[GT_PATH_MAX]; /* TensorBoard event files; empty = none */
} gt_logger_config;

/* runtime.cuda.*: the CUDA backend's kernel choices (config/kernel_choice.h decides what auto
 * means for a device and shape). Value i of each enum is the i-th allowed name of its key. */
typedef enum {
    GT_CUDA_ATTN_AUTO,
    GT_CUDA_ATTN_CUDNN,
    GT_CUDA_ATTN_MMA,
    GT_CUDA_ATTN_REFERENCE
} gt_cuda_attention;
typedef enum {
    GT_CUDA_ATTN_BWD_AUTO,
    GT_CUDA_ATTN_BWD_WGMMA,
    GT_CUDA_ATTN_BWD_CUDNN,
    GT_CUDA_ATTN_BWD_MMA,
    GT_CUDA_ATTN_BWD_REFERENCE
} gt_cuda_attention_bwd;
typedef enum {
    GT_CUDA_MOE_AUTO,
    GT_CUDA_MOE_WGMMA,
    GT_CUDA_MOE_MMA,
    GT_CUDA_MOE_REFERENCE
} gt_cuda_moe_gemm;
typedef enum { GT_CUDA_PDL_AUTO, GT_CUDA_PDL_ON, GT_CUDA_PDL_OFF } gt_cuda_pdl;
typedef enum {
    GT_CUDA_MEMSET_AUTO,
    GT_CUDA_MEMSET_KERNEL,
    GT_CUDA_MEMSET_NODE
} gt_cuda_graph_memset;
#define GT_CUDA_CHOICES 5 /* the runtime.cuda.* keys */
typedef struct gt_cuda_config {
    gt_cuda_attention attention;         /* runtime.cuda.attention (forward) */
    gt_cuda_attention_bwd attention_bwd; /* runtime.cuda.attention_bwd */
    gt_cuda_moe_gemm moe_gemm;           /* runtime.cuda.moe_gemm (grouped GEMMs) */
    gt_cuda_pdl pdl;                     /* runtime.cuda.pdl (programmatic dependent launch) */
    gt_cuda_graph_memset graph_memset;   /* runtime.cuda.graph_memset */
} gt_cuda_config;

/* Environment settings the rules read. Taken from the environment when the config is
 * created, overridable in the config. */
typedef struct gt_env_config {
    bool expandable_segments;     /* PYTORCH_CUDA_ALLOC_CONF contains expandable_segments:True */
    bool expandable_segments_bad; /* its value there was neither True nor False (no key) */
    int nccl_graph_register;      /* NCCL_GRAPH_REGISTER; -1 = unset (NCCL's default, on) */
    bool nccl_graph_register_bad; /* the environment's value was not a whole number (no key) */
    /* The runtime.cuda.* aliases (GT_CUDA_ATTN ...), in key order: the text of each variable
     * as read when the config was created, "" when unset. gt_config_apply_cuda_env merges them
     * into runtime.cuda (config/cuda_keys.c). */
    char cuda_env[GT_CUDA_CHOICES][32];
} gt_env_config;

/* graphtrain's graphs.* keys, beyond Bridge. */
typedef struct gt_graphs_config {
    gt_capture_failure capture_failure; /* graphs.capture_failure */
} gt_graphs_config;

/* graphtrain's own keys, beyond Bridge. */
typedef struct gt_runtime_config {
    gt_device_kind device;
    int num_gpus;
    int max_shape_buckets;        /* graphs.max_shape_buckets */
    bool deterministic;           /* deterministic attention backward etc. */
    int inject_nan_at_step;       /* test hook: -1 = off */
    bool debug_capture_check;     /* run one step under global-mode capture */
    char gpu[32];                 /* runtime.gpu: Bridge's -g (h100, b200...); "" = this GPU */
    char gemm_table[GT_PATH_MAX]; /* runtime.gemm_table: tuned GEMM algorithms; "" = none */
    gt_cuda_config cuda;          /* runtime.cuda.* */
} gt_runtime_config;

typedef struct gt_config {
    gt_model_config model;
    gt_train_config train;
    gt_rng_config rng;
    gt_ddp_config ddp;
    gt_rerun_config rerun_state_machine;
    gt_optimizer_config optimizer;
    gt_scheduler_config scheduler;
    gt_dataset_config dataset;
    gt_checkpoint_config checkpoint;
    gt_logger_config logger;
    gt_env_config env;
    gt_graphs_config graphs;
    gt_runtime_config runtime;
} gt_config;

/* The attention head size: model.kv_channels, or hidden_size / num_attention_heads when it is
 * null (0), as Megatron derives it. */
static inline int gt_model_head_size(const gt_model_config *m) {
    if (m->kv_channels > 0) return m->kv_channels;
    return m->num_attention_heads > 0 ? m->hidden_size / m->num_attention_heads : 0;
}

#endif
