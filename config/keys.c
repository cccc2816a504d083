/* The key table itself, plus lookup ("did you mean"), defaults and the environment.
 * Adding a key = adding one row here; parsing, printing and the reference follow from it. */
#include "config/keys.h"

#include "config/cuda_keys.h"
#include "config/gpus.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define F(field) offsetof(gt_config, field), sizeof(((gt_config *)0)->field)
#define BIG 1e9
#define HUGE_U64 1.8446744073709552e19

static const char *const k_graph_impl[] = {"none", "local", "transformer_engine", NULL};
/* order = GT_SCOPE_* bit order */
static const char *const k_scopes[] = {"full_iteration", "attn",           "mlp",   "moe",
                                       "moe_router",     "moe_preprocess", "mamba", NULL};
static const char *const k_recompute_gran[] = {"none", "full", "selective", NULL};
static const char *const k_recompute_method[] = {"uniform", "block", "none", NULL};
/* order = GT_RECOMPUTE_* bit order */
static const char *const k_recompute_modules[] = {
    "core_attn", "mlp", "moe", "moe_act", "layernorm", "shared_experts", NULL};
static const char *const k_dispatcher[] = {"allgather", "alltoall", "flex", NULL};
static const char *const k_dtype[] = {"bf16",   "fp32",  "fp8_cs", "fp8_mx",
                                      "fp8_ds", "nvfp4", "fp8_sc", NULL};
/* order = gt_fp8_format_setting, gt_fp8_recipe, gt_amax_algo */
static const char *const k_fp8_format[] = {"none", "e4m3", "hybrid", NULL};
static const char *const k_fp8_recipe[] = {"none",      "tensorwise", "delayed",
                                           "blockwise", "mxfp8",      NULL};
static const char *const k_amax_algo[] = {"most_recent", "max", NULL};
static const char *const k_state_dtype[] = {"fp32", "bf16", NULL};
static const char *const k_lazy_rows[] = {"auto", "off", NULL};
/* order = gt_lr_style, gt_wsd_style; Megatron's spellings */
static const char *const k_lr_style[] = {"constant", "linear", "cosine", "inverse-square-root",
                                         "WSD",      NULL};
static const char *const k_wsd_style[] = {"exponential", "linear", "cosine", "minus_sqrt", NULL};
static const char *const k_device[] = {"auto", "cpu", "cuda", NULL};
static const char *const k_capture_failure[] = {"stop", "eager", NULL};
static const char *const k_data_source[] = {"mock", "shards", NULL};
/* runtime.cuda.*: order = the gt_cuda_* enums of config.h */
static const char *const k_cuda_attention[] = {"auto", "cudnn", "mma", "reference", NULL};
static const char *const k_cuda_attention_bwd[] = {"auto", "wgmma",     "cudnn",
                                                   "mma",  "reference", NULL};
static const char *const k_cuda_moe_gemm[] = {"auto", "wgmma", "mma", "reference", NULL};
static const char *const k_cuda_pdl[] = {"auto", "on", "off", NULL};
static const char *const k_cuda_graph_memset[] = {"auto", "kernel", "node", NULL};

/* clang-format off */
static const gt_key k_keys[] = {
    /* ---- model shape ---- */
    {"model.num_layers", GT_KEY_INT, F(model.num_layers), "8", NULL, 1, 100000, "Number of transformer layers.", NULL},
    {"model.hidden_size", GT_KEY_INT, F(model.hidden_size), "512", NULL, 1, BIG, "Model width d_model.", NULL},
    {"model.num_attention_heads", GT_KEY_INT, F(model.num_attention_heads), "8", NULL, 1, 100000, "Attention (query) heads; must divide hidden_size.", NULL},
    {"model.kv_channels", GT_KEY_INT, F(model.kv_channels), "0", NULL, 0, 100000, "Attention head size (Hugging Face's head_dim): qkv is (heads + 2 x groups) x kv_channels wide, the output projection's input heads x kv_channels; null or 0 = hidden_size / num_attention_heads. The GPU's attention kernels take 64 and 128.", "0"},
    {"model.num_query_groups", GT_KEY_INT, F(model.num_query_groups), "0", NULL, 0, 100000, "Key/value heads for grouped-query attention; 0 = num_attention_heads.", "0"},
    {"model.ffn_hidden_size", GT_KEY_INT, F(model.ffn_hidden_size), "1536", NULL, 0, BIG, "Width of the dense SwiGLU MLP.", NULL},
    {"model.vocab_size", GT_KEY_INT, F(model.vocab_size), "32768", NULL, 1, BIG, "Vocabulary size (embedding and output head rows).", NULL},
    {"model.seq_length", GT_KEY_INT, F(model.seq_length), "256", NULL, 1, 10000000, "Sequence length; fixed for the whole run (graphs need static shapes).", NULL},
    {"model.rotary_base", GT_KEY_DOUBLE, F(model.rotary_base), "10000", NULL, 1, 1e12, "Rotary embedding base (theta).", NULL},
    {"model.rope_scaling", GT_KEY_BOOL, F(model.rope_scaling), "false", NULL, 0, 0, "Llama 3.1 rotary scaling (Megatron's apply_rope_scaling: low_freq_factor 1, high_freq_factor 4, original max position 8192).", "false"},
    {"model.rope_scaling_factor", GT_KEY_DOUBLE, F(model.rope_scaling_factor), "8", NULL, 1, 1e6, "Llama 3.1 rotary scaling factor (read with model.rope_scaling).", NULL},
    {"model.qk_layernorm", GT_KEY_BOOL, F(model.qk_layernorm), "false", NULL, 0, 0, "RMSNorm over the head size of every query and key head before rope, with weights q_layernorm and k_layernorm [head size] a layer and the model's epsilon (Qwen3's q_norm, k_norm).", "false"},
    {"model.share_embeddings_and_output_weights", GT_KEY_BOOL, F(model.share_embeddings_and_output_weights), "false", NULL, 0, 0, "Tied embeddings: the output head is the embedding table (its gradient the sum of both uses); the embedding rows are then never lazy.", "false"},
    {"model.layernorm_epsilon", GT_KEY_DOUBLE, F(model.norm_epsilon), "1e-05", NULL, 0, 1, "RMSNorm epsilon.", NULL},
    {"model.init_method_std", GT_KEY_DOUBLE, F(model.init_method_std), "0.02", NULL, 0, 10, "Standard deviation of the normal weight initialisation.", NULL},
    {"model.hybrid_override_pattern", GT_KEY_STRING, F(model.layer_pattern), "", NULL, 0, 0, "Hybrid layer pattern, one char per layer: * attention, - dense MLP, E MoE, M Mamba; empty = attention + MLP/MoE every layer.", NULL},
    {"model.attention_dropout", GT_KEY_DOUBLE, F(model.attention_dropout), "0", NULL, 0, 1, "Dropout probability on attention probabilities.", "0"},
    {"model.hidden_dropout", GT_KEY_DOUBLE, F(model.hidden_dropout), "0", NULL, 0, 1, "Dropout probability on attention and MLP outputs.", "0"},
    {"model.add_bias_linear", GT_KEY_BOOL, F(model.add_bias_linear), "false", NULL, 0, 0, "Biases on the linear layers.", NULL},
    {"model.add_qkv_bias", GT_KEY_BOOL, F(model.add_qkv_bias), "false", NULL, 0, 0, "Bias on the QKV projection only.", NULL},
    {"model.compute_dtype", GT_KEY_ENUM, F(model.compute_dtype), "bf16", k_dtype, 0, 0, "Compute precision (Bridge's -c): bf16, fp32, or an fp8 recipe: fp8_cs current (tensorwise) scaling, fp8_ds delayed scaling, fp8_sc blockwise (1x128 / 128x128), fp8_mx and nvfp4 (Blackwell formats).", NULL},
    {"model.fp8", GT_KEY_ENUM, F(model.fp8), "none", k_fp8_format, 0, 0, "FP8 format (Megatron's fp8): e4m3 everywhere, or hybrid (E4M3 forward, E5M2 gradients); none = hybrid under an fp8 compute_dtype, as Bridge's fp8 recipes set.", "none"},
    {"model.fp8_recipe", GT_KEY_ENUM, F(model.fp8_recipe), "none", k_fp8_recipe, 0, 0, "FP8 scaling recipe (Megatron's fp8_recipe); none = the one model.compute_dtype names (fp8_cs tensorwise, fp8_ds delayed, fp8_sc blockwise, fp8_mx mxfp8).", "none"},
    {"model.fp8_margin", GT_KEY_INT, F(model.fp8_margin), "0", NULL, 0, 64, "Delayed scaling: scale = (fp8_max / amax) / 2^margin.", "0"},
    {"model.fp8_amax_history_len", GT_KEY_INT, F(model.fp8_amax_history_len), "1", NULL, 1, 65536, "Delayed scaling: steps of amax history kept per tensor (on the device).", NULL},
    {"model.fp8_amax_compute_algo", GT_KEY_ENUM, F(model.fp8_amax_compute_algo), "most_recent", k_amax_algo, 0, 0, "Delayed scaling: the amax a scale comes from, max of the history or its most recent entry.", NULL},
    {"model.first_last_layers_bf16", GT_KEY_BOOL, F(model.first_last_layers_bf16), "false", NULL, 0, 0, "Keep the first and last layers' linear GEMMs in bf16 under fp8 (Megatron's first_last_layers_bf16).", NULL},
    {"model.num_layers_at_start_in_bf16", GT_KEY_INT, F(model.num_layers_at_start_in_bf16), "1", NULL, 0, 100000, "With first_last_layers_bf16: leading layers kept in bf16.", NULL},
    {"model.num_layers_at_end_in_bf16", GT_KEY_INT, F(model.num_layers_at_end_in_bf16), "1", NULL, 0, 100000, "With first_last_layers_bf16: trailing layers kept in bf16.", NULL},
    /* ---- MoE ---- */
    {"model.num_moe_experts", GT_KEY_INT, F(model.num_moe_experts), "0", NULL, 0, 100000, "Experts per MoE layer; 0 = dense model.", NULL},
    {"model.moe_router_topk", GT_KEY_INT, F(model.moe_router_topk), "2", NULL, 1, 1024, "Experts each token is routed to.", NULL},
    {"model.moe_ffn_hidden_size", GT_KEY_INT, F(model.moe_ffn_hidden_size), "0", NULL, 0, BIG, "Width of each expert's MLP; 0 = ffn_hidden_size.", "0"},
    {"model.moe_layer_freq", GT_KEY_INT, F(model.moe_layer_freq), "1", NULL, 1, 100000, "Every n-th layer is MoE (1 = all layers), the others dense.", NULL},
    {"model.moe_token_dispatcher_type", GT_KEY_ENUM, F(model.moe_token_dispatcher_type), "alltoall", k_dispatcher, 0, 0, "How tokens reach their experts.", NULL},
    {"model.moe_expert_capacity_factor", GT_KEY_DOUBLE, F(model.moe_expert_capacity_factor), "0", NULL, -1, 1000, "Drop-and-pad capacity per expert (x fair share); <= 0 = unset (dropless).", "0"},
    {"model.moe_pad_expert_input_to_capacity", GT_KEY_BOOL, F(model.moe_pad_expert_input_to_capacity), "false", NULL, 0, 0, "Pad every expert's input to its capacity (static shapes).", NULL},
    {"model.moe_aux_loss_coeff", GT_KEY_DOUBLE, F(model.moe_aux_loss_coeff), "0", NULL, 0, 1000, "Load-balancing auxiliary loss coefficient.", "0"},
    {"model.moe_router_pre_softmax", GT_KEY_BOOL, F(model.moe_router_pre_softmax), "false", NULL, 0, 0, "Router order: true = softmax over all experts, then top-k, weights not renormalized (Qwen3-MoE's norm_topk_prob=false); false = top-k, then softmax over the k (the same weights as softmax, top-k, renormalize).", NULL},
    {"model.moe_router_topk_scaling_factor", GT_KEY_DOUBLE, F(model.moe_router_topk_scaling_factor), "0", NULL, 0, 1e6, "Multiplies the top-k routing weights (after the softmax, in either order); null or 0 = unscaled.", "0"},
    {"model.moe_router_padding_for_fp8", GT_KEY_BOOL, F(model.moe_router_padding_for_fp8), "false", NULL, 0, 0, "Pad the routing map for fp8 expert GEMMs (syncs with the host).", NULL},
    /* ---- Mamba-2 ---- */
    {"model.mamba_state_dim", GT_KEY_INT, F(model.mamba_state_dim), "128", NULL, 1, 4096, "Mamba SSM state size per head (d_state).", NULL},
    {"model.mamba_head_dim", GT_KEY_INT, F(model.mamba_head_dim), "64", NULL, 1, 4096, "Mamba head size P.", NULL},
    {"model.mamba_num_groups", GT_KEY_INT, F(model.mamba_num_groups), "8", NULL, 1, 4096, "Groups sharing one B and C projection; must divide the Mamba heads.", NULL},
    {"model.mamba_num_heads", GT_KEY_INT, F(model.mamba_num_heads), "0", NULL, 0, 100000, "Mamba heads; 0 = mamba_expand * hidden_size / mamba_head_dim.", "0"},
    {"model.mamba_d_conv", GT_KEY_INT, F(model.mamba_d_conv), "4", NULL, 1, 64, "Width of the Mamba causal convolution (MambaMixer's d_conv).", NULL},
    {"model.mamba_expand", GT_KEY_INT, F(model.mamba_expand), "2", NULL, 1, 64, "Mamba inner width over hidden_size, when mamba_num_heads is derived (MambaMixer's expand).", NULL},
    {"model.mamba_chunk_size", GT_KEY_INT, F(model.mamba_chunk_size), "128", NULL, 1, 65536, "SSD chunk length of chunked scan kernels (MambaMixer's chunk_size); results do not depend on it.", NULL},
    /* ---- recompute, offloading, wgrad ---- */
    {"model.recompute_granularity", GT_KEY_ENUM, F(model.recompute_granularity), "none", k_recompute_gran, 0, 0, "Activation recompute: none, full (whole layers) or selective (recompute_modules).", NULL},
    {"model.recompute_method", GT_KEY_ENUM, F(model.recompute_method), "none", k_recompute_method, 0, 0, "How full recompute picks layers: uniform (chunks of recompute_num_layers) or block (the first recompute_num_layers of each stage); none = unset.", NULL},
    {"model.recompute_modules", GT_KEY_SET, F(model.recompute_modules), "core_attn", k_recompute_modules, 0, 0, "Sub-modules recomputed under selective recompute.", NULL},
    {"model.recompute_num_layers", GT_KEY_INT, F(model.recompute_num_layers), "0", NULL, 0, 100000, "Layers recomputed under full recompute; 0 = unset.", "0"},
    {"model.cpu_offloading", GT_KEY_BOOL, F(model.cpu_offloading), "false", NULL, 0, 0, "Offload activations/weights to host memory.", NULL},
    {"model.delay_wgrad_compute", GT_KEY_BOOL, F(model.delay_wgrad_compute), "false", NULL, 0, 0, "Delay weight-gradient GEMMs to overlap communication.", NULL},
    {"model.gradient_accumulation_fusion", GT_KEY_BOOL, F(model.gradient_accumulation_fusion), "false", NULL, 0, 0, "Fuse weight-gradient accumulation into the fp32 main_grad GEMM.", NULL},
    /* ---- parallelism ---- */
    {"model.tensor_model_parallel_size", GT_KEY_INT, F(model.tensor_model_parallel_size), "1", NULL, 1, 100000, "Tensor-parallel size.", NULL},
    {"model.pipeline_model_parallel_size", GT_KEY_INT, F(model.pipeline_model_parallel_size), "1", NULL, 1, 100000, "Pipeline-parallel size.", NULL},
    {"model.expert_model_parallel_size", GT_KEY_INT, F(model.expert_model_parallel_size), "1", NULL, 1, 100000, "Expert-parallel size.", NULL},
    {"model.context_parallel_size", GT_KEY_INT, F(model.context_parallel_size), "1", NULL, 1, 100000, "Context-parallel size.", NULL},
    /* ---- Megatron's uneven pipeline stages and vocabulary padding ---- */
    {"model.num_layers_in_first_pipeline_stage", GT_KEY_INT, F(model.num_layers_in_first_pipeline_stage), "0", NULL, 0, 100000, "Layers of the first pipeline stage when stages are uneven; 0 = unset (num_layers / pp each).", "0"},
    {"model.num_layers_in_last_pipeline_stage", GT_KEY_INT, F(model.num_layers_in_last_pipeline_stage), "0", NULL, 0, 100000, "Layers of the last pipeline stage when stages are uneven; 0 = unset.", "0"},
    {"model.should_pad_vocab", GT_KEY_BOOL, F(model.should_pad_vocab), "false", NULL, 0, 0, "Pad vocab_size to a multiple of make_vocab_size_divisible_by x tensor_model_parallel_size (Bridge's default is false).", NULL},
    {"model.make_vocab_size_divisible_by", GT_KEY_INT, F(model.make_vocab_size_divisible_by), "128", NULL, 1, 1000000, "Vocabulary padding multiple (per tensor-parallel rank) used when should_pad_vocab is true.", NULL},
    {"ddp.data_parallel_size", GT_KEY_INT, F(ddp.data_parallel_size), "0", NULL, 0, 1000000, "Data-parallel size; 0 = num_gpus / (tp * pp * cp).", "0"},
    /* ---- CUDA graphs (Bridge's keys) ---- */
    {"model.cuda_graph_impl", GT_KEY_ENUM, F(model.cuda_graph_impl), "none", k_graph_impl, 0, 0, "CUDA graphs: none (eager), local (one full-iteration graph) or transformer_engine (per-layer scoped graphs).", NULL},
    {"model.cuda_graph_scope", GT_KEY_SET, F(model.cuda_graph_scope), "", k_scopes, 0, 0, "What is captured: full_iteration (local) or any of attn, mlp, moe, moe_router, moe_preprocess, mamba (transformer_engine).", NULL},
    {"model.cuda_graph_warmup_steps", GT_KEY_INT, F(model.cuda_graph_warmup_steps), "3", NULL, 0, 1000000, "Eager steps before capture.", NULL},
    {"model.use_te_rng_tracker", GT_KEY_BOOL, F(model.use_te_rng_tracker), "false", NULL, 0, 0, "Graph-safe (device-counter) RNG for the model; required by graphs.", NULL},
    {"rng.te_rng_tracker", GT_KEY_BOOL, F(rng.te_rng_tracker), "false", NULL, 0, 0, "Graph-safe RNG tracker at initialisation; required by graphs.", NULL},
    {"rng.seed", GT_KEY_U64, F(rng.seed), "1234", NULL, 0, HUGE_U64, "Random seed (initialisation, dropout, mock data).", NULL},
    /* ---- training ---- */
    {"train.micro_batch_size", GT_KEY_INT, F(train.micro_batch_size), "4", NULL, 1, 1000000, "Sequences per micro-batch; fixed (graphs need static shapes).", NULL},
    {"train.global_batch_size", GT_KEY_INT, F(train.global_batch_size), "4", NULL, 1, 100000000, "Sequences per optimizer step over all data-parallel ranks and micro-batches.", NULL},
    {"train.train_iters", GT_KEY_INT, F(train.train_iters), "100", NULL, 1, 1000000000, "Optimizer steps to train.", NULL},
    {"train.eval_interval", GT_KEY_INT, F(train.eval_interval), "0", NULL, 0, 1000000000, "Evaluate every n steps; 0 = never.", "0"},
    {"train.eval_iters", GT_KEY_INT, F(train.eval_iters), "0", NULL, 0, 1000000000, "Batches per evaluation.", NULL},
    {"train.exit_interval", GT_KEY_INT, F(train.exit_interval), "0", NULL, 0, 1000000000, "Stop (saving a checkpoint when checkpoint.save is set) after the first step whose number is divisible by this, as Megatron does; 0 = never.", "0"},
    {"train.exit_duration_in_mins", GT_KEY_DOUBLE, F(train.exit_duration_in_mins), "0", NULL, 0, 1e9, "Stop (saving a checkpoint when checkpoint.save is set) after the first step that ends this many minutes after training started; 0 = never.", "0"},
    /* ---- checks ---- */
    {"rerun_state_machine.check_for_nan_in_loss", GT_KEY_BOOL, F(rerun_state_machine.check_for_nan_in_loss), "true", NULL, 0, 0, "Stop on a NaN/Inf loss (a device-side check here, so it survives graph capture).", NULL},
    {"ddp.bucket_size", GT_KEY_INT, F(ddp.bucket_size), "0", NULL, 0, 1000000000, "Gradient elements per data-parallel reduction bucket; 0 (null) = Megatron's max(40M, 1M x data-parallel size).", "0"},
    {"ddp.overlap_grad_reduce", GT_KEY_BOOL, F(ddp.overlap_grad_reduce), "false", NULL, 0, 0, "Data parallelism: each gradient bucket's reduction starts on the communication stream as soon as the backward has written its last gradient, while the backward goes on (the same sums, bit for bit).", NULL},
    {"ddp.overlap_param_gather", GT_KEY_BOOL, F(ddp.overlap_param_gather), "false", NULL, 0, 0, "With optimizer.use_distributed_optimizer and ddp.overlap_grad_reduce: each bucket's parameter all-gather runs while the optimizer steps the following buckets (the same bits).", NULL},
    {"ddp.force_collectives", GT_KEY_BOOL, F(ddp.force_collectives), "false", NULL, 0, 0, "A run started without a launcher goes through the data-parallel path with a communicator of one rank (NCCL on a GPU, captured in the graphs as in a larger world): checks that path on one GPU; the losses are those of the run without it.", NULL},
    {"dist.distributed_timeout_minutes", GT_KEY_INT, F(ddp.timeout_minutes), "10", NULL, 1, 100000, "How long a rank waits for the others (the NCCL id rendezvous, host-side agreements) and how long a training step may take on every rank before the NCCL watchdog aborts the communicator.", NULL},
    {"dist.nccl_id_file", GT_KEY_STRING, F(ddp.nccl_id_file), "", NULL, 0, 0, "A path on a filesystem every rank sees: rank 0 writes NCCL's unique id there, the others poll for it (srun without MPI); empty = MPI's broadcast under mpirun, TCP at MASTER_ADDR:MASTER_PORT under torchrun.", NULL},
    {"ddp.check_for_nan_in_grad", GT_KEY_BOOL, F(ddp.check_for_nan_in_grad), "true", NULL, 0, 0, "Skip the update and stop on NaN/Inf gradients (device-side).", NULL},
    /* ---- optimizer and schedule ---- */
    {"optimizer.lr", GT_KEY_DOUBLE, F(optimizer.lr), "0.0003", NULL, 0, 100, "Peak learning rate (AdamW).", NULL},
    {"optimizer.min_lr", GT_KEY_DOUBLE, F(optimizer.min_lr), "3e-05", NULL, 0, 100, "Learning rate at the end of decay.", NULL},
    {"optimizer.weight_decay", GT_KEY_DOUBLE, F(optimizer.weight_decay), "0.1", NULL, 0, 100, "Decoupled weight decay.", NULL},
    {"optimizer.adam_beta1", GT_KEY_DOUBLE, F(optimizer.adam_beta1), "0.9", NULL, 0, 0.999999, "Adam beta1.", NULL},
    {"optimizer.adam_beta2", GT_KEY_DOUBLE, F(optimizer.adam_beta2), "0.95", NULL, 0, 0.999999999, "Adam beta2.", NULL},
    {"optimizer.adam_eps", GT_KEY_DOUBLE, F(optimizer.adam_eps), "1e-08", NULL, 1e-30, 1, "Adam epsilon.", NULL},
    {"optimizer.clip_grad", GT_KEY_DOUBLE, F(optimizer.clip_grad), "1", NULL, -1, 1e9, "Global gradient-norm clip; <= 0 = no clipping.", "0"},
    {"optimizer.use_distributed_optimizer", GT_KEY_BOOL, F(optimizer.use_distributed_optimizer), "false", NULL, 0, 0, "Data parallelism: each rank allocates and steps only its shard of every gradient bucket of the master weights and Adam moments (about 1/N of the optimizer state), then the parameters are all-gathered (README, \"Data parallelism\"); one process: the whole state is its shard.", NULL},
    {"optimizer.use_precision_aware_optimizer", GT_KEY_BOOL, F(optimizer.use_precision_aware_optimizer), "false", NULL, 0, 0, "Allow the Adam moments in a lower precision (exp_avg_dtype, exp_avg_sq_dtype); the update math stays fp32.", NULL},
    {"optimizer.exp_avg_dtype", GT_KEY_ENUM, F(optimizer.exp_avg_dtype), "fp32", k_state_dtype, 0, 0, "Storage of Adam's first moment: fp32, or bf16 with use_precision_aware_optimizer (2 bytes a parameter less to keep and to stream each step).", NULL},
    {"optimizer.exp_avg_sq_dtype", GT_KEY_ENUM, F(optimizer.exp_avg_sq_dtype), "fp32", k_state_dtype, 0, 0, "Storage of Adam's second moment: fp32, or bf16 with use_precision_aware_optimizer.", NULL},
    {"optimizer.lazy_embedding_rows", GT_KEY_ENUM, F(optimizer.lazy_embedding_rows), "auto", k_lazy_rows, 0, 0, "Embedding rows a step leaves untouched get AdamW's update when next read (auto, same bits, where only the model writes the gradients), or every row every step (off: to bisect).", NULL},
    /* ---- learning-rate schedule (Megatron's OptimizerParamScheduler) ---- */
    {"scheduler.lr_decay_style", GT_KEY_ENUM, F(scheduler.lr_decay_style), "cosine", k_lr_style, 0, 0, "Learning-rate decay after warmup: constant, linear, cosine, inverse-square-root (lr * sqrt(warmup / step), at least min_lr) or WSD (warmup, stable at lr, then lr_wsd_decay_iters of annealing to min_lr).", NULL},
    {"scheduler.lr_warmup_iters", GT_KEY_INT, F(scheduler.lr_warmup_iters), "10", NULL, 0, 1000000000, "Linear warmup steps (from lr_warmup_init to lr); step s of the warmup gets init + (lr - init) (s + 1) / warmup.", NULL},
    {"scheduler.lr_warmup_fraction", GT_KEY_DOUBLE, F(scheduler.lr_warmup_fraction), "-1", NULL, -1, 1000, "Warmup steps as a fraction (0..1) of the decay steps, rounded down to whole steps; needs lr_warmup_iters=0 (Megatron's rule); -1 = unset.", "-1"},
    {"scheduler.lr_warmup_init", GT_KEY_DOUBLE, F(scheduler.lr_warmup_init), "0", NULL, 0, 100, "Learning rate the warmup starts from (at most optimizer.lr).", NULL},
    {"scheduler.lr_decay_iters", GT_KEY_INT, F(scheduler.lr_decay_iters), "0", NULL, 0, 1000000000, "Steps over which the rate decays; 0 = train_iters.", "0"},
    {"scheduler.lr_wsd_decay_style", GT_KEY_ENUM, F(scheduler.lr_wsd_decay_style), "exponential", k_wsd_style, 0, 0, "WSD's annealing: exponential (2 * 0.5^r - 1), linear, cosine or minus_sqrt (1 - sqrt r), r the annealing's progress.", NULL},
    {"scheduler.lr_wsd_decay_iters", GT_KEY_INT, F(scheduler.lr_wsd_decay_iters), "0", NULL, 0, 1000000000, "WSD: steps of annealing, the last ones of the decay steps; required with WSD; 0 = unset.", "0"},
    {"scheduler.override_opt_param_scheduler", GT_KEY_BOOL, F(scheduler.override_opt_param_scheduler), "false", NULL, 0, 0, "At resume, train on with this configuration's schedule where it differs from the checkpoint's (else such a resume is refused).", NULL},
    {"scheduler.use_checkpoint_opt_param_scheduler", GT_KEY_BOOL, F(scheduler.use_checkpoint_opt_param_scheduler), "false", NULL, 0, 0, "At resume, train on with the checkpoint's schedule, whatever this configuration's schedule keys say.", NULL},
    /* ---- data ---- */
    {"dataset.source", GT_KEY_ENUM, F(dataset.source), "mock", k_data_source, 0, 0, "mock (random token ids, like Bridge's mock data) or shards (prepare-data output).", NULL},
    {"dataset.data_path", GT_KEY_STRING, F(dataset.data_path), "", NULL, 0, 0, "Shard prefix or directory when dataset.source=shards; or a Megatron indexed-dataset prefix (PREFIX.idx/.bin) or blend \"W1 PREFIX1 W2 PREFIX2\".", NULL},
    {"dataset.seq_length", GT_KEY_INT, F(dataset.seq_length), "0", NULL, 0, 10000000, "Bridge's dataset sequence length; it must equal model.seq_length (0 = the same).", "0"},
    {"dataset.split", GT_KEY_STRING, F(dataset.split), "969,30,1", NULL, 0, 0, "Train,validation,test shares of Megatron indexed datasets' sequences (normalized).", NULL},
    {"dataset.shuffle", GT_KEY_BOOL, F(dataset.shuffle), "true", NULL, 0, 0, "Shuffle sequences each epoch.", NULL},
    {"dataset.packed_sequence", GT_KEY_BOOL, F(dataset.packed_sequence), "false", NULL, 0, 0, "Pack several documents per sequence (variable cu_seqlens).", NULL},
    {"dataset.pad_to_max_length", GT_KEY_BOOL, F(dataset.pad_to_max_length), "false", NULL, 0, 0, "Pad packed sequences to seq_length (static shapes).", NULL},
    {"dataset.pad_cu_seqlens", GT_KEY_BOOL, F(dataset.pad_cu_seqlens), "false", NULL, 0, 0, "Pad the cu_seqlens array to a fixed length (static shapes).", NULL},
    /* ---- checkpoints and logging ---- */
    {"checkpoint.save", GT_KEY_STRING, F(checkpoint.save), "", NULL, 0, 0, "Directory to save checkpoints to; empty = never.", NULL},
    {"checkpoint.load", GT_KEY_STRING, F(checkpoint.load), "", NULL, 0, 0, "Directory (or file) to resume from: its latest_checkpointed_iteration.txt names the iteration; set it to checkpoint.save to resume a restarted job automatically (fresh start while it is empty); empty = fresh start.", NULL},
    {"checkpoint.most_recent_k", GT_KEY_INT, F(checkpoint.most_recent_k), "-1", NULL, -1, 1000000000, "Keep only the newest k iteration folders of checkpoint.save; -1 = keep all (Megatron's).", "-1"},
    {"checkpoint.overwrite", GT_KEY_BOOL, F(checkpoint.overwrite), "false", NULL, 0, 0, "graphtrain's own: let a run that does not resume from checkpoint.save delete the checkpoints already there (otherwise it is refused).", NULL},
    {"checkpoint.save_interval", GT_KEY_INT, F(checkpoint.save_interval), "0", NULL, 0, 1000000000, "Save every n steps; 0 = only at the end.", "0"},
    {"logger.log_interval", GT_KEY_INT, F(logger.log_interval), "10", NULL, 1, 1000000000, "Print and record metrics every n steps.", NULL},
    {"logger.metrics_file", GT_KEY_STRING, F(logger.metrics_file), "", NULL, 0, 0, "JSONL metrics file; empty = none.", NULL},
    {"logger.tensorboard_dir", GT_KEY_STRING, F(logger.tensorboard_dir), "", NULL, 0, 0, "Folder for TensorBoard event files (loss, lr, grad norm, throughput, memory every log_interval); empty = none.", NULL},
    /* ---- environment the rules read ---- */
    {"env.expandable_segments", GT_KEY_BOOL, F(env.expandable_segments), "false", NULL, 0, 0, "Allocator expandable segments (from PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True).", NULL},
    {"env.nccl_graph_register", GT_KEY_TRI, F(env.nccl_graph_register), "unset", NULL, 0, 1, "NCCL_GRAPH_REGISTER: 0, 1 or unset (NCCL's default, on).", NULL},
    /* ---- graphtrain's own ---- */
    {"runtime.device", GT_KEY_ENUM, F(runtime.device), "auto", k_device, 0, 0, "Backend: auto (CUDA when present), cpu (fp32 reference) or cuda.", NULL},
    {"runtime.num_gpus", GT_KEY_INT, F(runtime.num_gpus), "1", NULL, 1, 100000, "GPUs to use (Bridge's -ng).", NULL},
    {"runtime.deterministic", GT_KEY_BOOL, F(runtime.deterministic), "true", NULL, 0, 0, "Deterministic kernels (eager and graph runs bitwise equal); every kernel is deterministic today, false only prints a note.", NULL},
    {"runtime.gpu", GT_KEY_STRING, F(runtime.gpu), "", gt_gpu_names, 0, 0, "GPU the config targets (Bridge's -g: h100, h200, b200, gb200, gb300); empty = this machine's.", NULL},
    {"runtime.gemm_table", GT_KEY_STRING, F(runtime.gemm_table), "", NULL, 0, 0, "cuBLASLt algorithm table written by graphtrain tune-gemm (a relative path is looked up from the working folder, then the recipes folder); empty = cuBLASLt's heuristic. Applied only on the device and library version it was made with.", NULL},
    /* ---- CUDA kernel choices (config/kernel_choice.h); GT_CUDA_* are their environment aliases (config/cuda_keys.c) ---- */
    {"runtime.cuda.attention", GT_KEY_ENUM, F(runtime.cuda.attention), "auto", k_cuda_attention, 0, 0, "Attention forward on the GPU: auto (cuDNN where it takes the shape, else the mma kernels for head size 64), cudnn, mma, or reference (the slow fp32 SIMT kernels the GPU tests compare with). Alias: GT_CUDA_ATTN.", NULL},
    {"runtime.cuda.attention_bwd", GT_KEY_ENUM, F(runtime.cuda.attention_bwd), "auto", k_cuda_attention_bwd, 0, 0, "Attention backward on the GPU: auto (after cuDNN's forward the wgmma kernels for head size 64 on compute capability 9.0, else cuDNN's; otherwise the forward's kernels), wgmma, cudnn (needs cuDNN's forward), mma or reference. Alias: GT_CUDA_ATTN_BWD.", NULL},
    {"runtime.cuda.moe_gemm", GT_KEY_ENUM, F(runtime.cuda.moe_gemm), "auto", k_cuda_moe_gemm, 0, 0, "MoE grouped GEMMs on the GPU: auto (wgmma on compute capability 9.0, else mma; both need expert sizes that are multiples of 8), wgmma, mma or reference (slow fp32). Alias: GT_CUDA_MOE.", NULL},
    {"runtime.cuda.pdl", GT_KEY_ENUM, F(runtime.cuda.pdl), "auto", k_cuda_pdl, 0, 0, "Programmatic dependent launch between the backend's kernels: auto (on from compute capability 9.0), on or off. Alias: GT_CUDA_PDL.", NULL},
    {"runtime.cuda.graph_memset", GT_KEY_ENUM, F(runtime.cuda.graph_memset), "auto", k_cuda_graph_memset, 0, 0, "Memset nodes of captured graphs: auto or kernel (rewritten as kernel nodes writing the same bytes), or node (left as memset nodes). Alias: GT_CUDA_GRAPH_MEMSET.", NULL},
    {"graphs.capture_failure", GT_KEY_ENUM, F(graphs.capture_failure), "stop", k_capture_failure, 0, 0, "When capture fails: stop with the error, or continue eagerly.", NULL},
    {"graphs.max_shape_buckets", GT_KEY_INT, F(runtime.max_shape_buckets), "4", NULL, 1, 64, "Most distinct batch shapes that get their own graph.", NULL},
    {"debug.inject_nan_at_step", GT_KEY_INT, F(runtime.inject_nan_at_step), "-1", NULL, -1, 1000000000, "Test hook: make the loss NaN at this step; -1 = off.", "-1"},
    {"debug.capture_check", GT_KEY_BOOL, F(runtime.debug_capture_check), "false", NULL, 0, 0, "Run one step under global-mode capture to catch host syncs.", NULL},
};
/* clang-format on */

/* Other spellings users write for the same key: our struct's field names, Bridge's
 * harness names. */
static const struct {
    const char *alias, *name;
} k_aliases[] = {
    {"model.norm_epsilon", "model.layernorm_epsilon"},
    {"model.layer_pattern", "model.hybrid_override_pattern"},
    {"model.rotary_emb_base", "model.rotary_base"},
    {"model.num_experts", "model.num_moe_experts"},
    {"dataset.data_prefix", "dataset.data_path"},
    {"dataset.sequence_length", "dataset.seq_length"},
    {"graphs.warmup_steps", "model.cuda_graph_warmup_steps"},
};

const gt_key *gt_config_keys(size_t *count) {
    if (count) *count = sizeof k_keys / sizeof k_keys[0];
    return k_keys;
}

const gt_key *gt_config_find_key(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof k_keys / sizeof k_keys[0]; i++)
        if (!strcmp(k_keys[i].name, name)) return &k_keys[i];
    for (size_t i = 0; i < sizeof k_aliases / sizeof k_aliases[0]; i++)
        if (!strcmp(k_aliases[i].alias, name)) return gt_config_find_key(k_aliases[i].name);
    return NULL;
}

/* Levenshtein distance of the first 63 characters, or cap + 1 as soon as it must exceed cap
 * (the suggester only cares about close names; fuzzed input must stay cheap). */
static size_t edit_distance(const char *a, const char *b, size_t cap) {
    enum { N = 64 };
    size_t la = strlen(a), lb = strlen(b);
    if (la >= N) la = N - 1;
    if (lb >= N) lb = N - 1;
    if ((la > lb ? la - lb : lb - la) > cap) return cap + 1;
    size_t prev[N], cur[N];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        size_t row_min = cur[0];
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            if (cur[j] < row_min) row_min = cur[j];
        }
        if (row_min > cap) return cap + 1;
        memcpy(prev, cur, (lb + 1) * sizeof prev[0]);
    }
    return prev[lb];
}

static const char *last_part(const char *s) {
    const char *dot = strrchr(s, '.');
    return dot ? dot + 1 : s;
}

const char *gt_config_suggest_key(const char *name) {
    if (!name || !*name) return NULL;
    size_t len = strlen(last_part(name));
    const size_t limit = len < 6 ? 2 : len / 3 + 1;
    const char *best = NULL;
    size_t best_d = limit + 1;
    for (size_t i = 0; i < sizeof k_keys / sizeof k_keys[0]; i++) {
        const char *k = k_keys[i].name;
        /* the right field under the wrong (or no) section: "cuda_graph_scope" */
        if (!strcmp(last_part(k), last_part(name))) return k;
        size_t d = edit_distance(name, k, best_d);
        /* the field alone, one step worse than a whole-name match */
        size_t d2 = edit_distance(last_part(name), last_part(k), best_d) + 1;
        /* a truncated or extended name: micro_batch -> micro_batch_size */
        size_t ln = strlen(last_part(name)), lk = strlen(last_part(k));
        size_t shorter = ln < lk ? ln : lk;
        if (shorter >= 5 && !strncmp(last_part(name), last_part(k), shorter)) d2 = 2;
        if (d2 < d) d = d2;
        if (d < best_d) best_d = d, best = k;
    }
    return best_d <= limit ? best : NULL;
}

void gt_config_defaults(gt_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < sizeof k_keys / sizeof k_keys[0]; i++) {
        gt_error err = {0};
        /* the table's defaults are tested to parse (tests/config/test_config.c), so this cannot
         * fail */
        (void)gt_config_set(cfg, k_keys[i].name, k_keys[i].def, &err);
    }
}

void gt_config_read_env(gt_config *cfg) {
    const char *alloc = getenv("PYTORCH_CUDA_ALLOC_CONF");
    cfg->env.expandable_segments = false;
    cfg->env.expandable_segments_bad = false;
    if (alloc) {
        /* PyTorch's syntax: comma-separated "name:value" pairs; PyTorch itself accepts only
         * True or False here, so anything else is reported by the rules, not read as off */
        const char *p = strstr(alloc, "expandable_segments:");
        if (p) {
            p += strlen("expandable_segments:");
            size_t n = strcspn(p, ",");
            if (n == 4 && !strncmp(p, "True", 4))
                cfg->env.expandable_segments = true;
            else if (!(n == 5 && !strncmp(p, "False", 5)))
                cfg->env.expandable_segments_bad = true;
        }
    }
    const char *reg = getenv("NCCL_GRAPH_REGISTER");
    cfg->env.nccl_graph_register = -1;
    cfg->env.nccl_graph_register_bad = false;
    if (reg && *reg) {
        char *end = NULL;
        long v = strtol(reg, &end, 10);
        if (end == reg || *end != '\0')
            cfg->env.nccl_graph_register_bad = true; /* reported by the rules */
        else
            cfg->env.nccl_graph_register = v != 0;
    }
    gt_config_read_cuda_env(cfg);
}
