/* The validation rules: Bridge's and Megatron's CUDA-graph constraints (the seed skill and
 * reference/anchors-graph-systems.md), shape sanity, and notes where graphtrain differs
 * (lifts a Bridge limitation, or cannot run a valid setting yet). Every rule runs; none
 * stops the others, so a user sees all problems at once. */
#include "config/rules.h"

#include "config/cuda_keys.h"
#include "config/gpus.h"

#include <string.h>

#define KEYS GT_KEYS

#define add gt_report_add

/* What the model contains, from the layer pattern or (without one) from the MoE keys. */
typedef struct layers {
    bool attention, dense_mlp, moe, mamba;
} layers;

static layers model_layers(const gt_model_config *m) {
    layers l = {0};
    if (m->layer_pattern[0]) {
        l.attention = strchr(m->layer_pattern, '*') != NULL;
        l.dense_mlp = strchr(m->layer_pattern, '-') != NULL;
        l.moe = strchr(m->layer_pattern, 'E') != NULL;
        l.mamba = strchr(m->layer_pattern, 'M') != NULL;
    } else {
        l.attention = true;
        l.moe = m->num_moe_experts > 0;
        l.dense_mlp = m->num_moe_experts == 0 || m->moe_layer_freq > 1;
    }
    return l;
}

static const char *impl_name(gt_graph_impl i) {
    return i == GT_GRAPH_IMPL_LOCAL ? "local"
           : i == GT_GRAPH_IMPL_TE  ? "transformer_engine"
                                    : "none";
}

/* ---- graph rules (Bridge / Megatron) ---- */
static void check_graph_rules(const gt_config *c, gt_report *r) {
    const gt_model_config *m = &c->model;
    const uint32_t s = m->cuda_graph_scope;
    const bool on = m->cuda_graph_impl != GT_GRAPH_IMPL_NONE;
    const bool local = m->cuda_graph_impl == GT_GRAPH_IMPL_LOCAL;
    const bool te = m->cuda_graph_impl == GT_GRAPH_IMPL_TE;
    const bool full = (s & GT_SCOPE_FULL_ITERATION) != 0;
    const layers l = model_layers(m);

    if (!on) {
        if (s)
            add(r, GT_SEVERITY_NOTE, "scope_cleared_without_impl",
                KEYS("model.cuda_graph_impl", "model.cuda_graph_scope"),
                "set model.cuda_graph_impl to local or transformer_engine to capture graphs",
                "model.cuda_graph_impl is none, so model.cuda_graph_scope is ignored (Bridge "
                "empties the list)");
        return;
    }
    if (!m->use_te_rng_tracker || !c->rng.te_rng_tracker)
        add(r, GT_SEVERITY_ERROR, "graphs_need_rng_tracker",
            KEYS("model.cuda_graph_impl", "model.use_te_rng_tracker", "rng.te_rng_tracker"),
            "set model.use_te_rng_tracker=true rng.te_rng_tracker=true (the --cuda_graph_impl "
            "harness flag sets both)",
            "CUDA graphs need the graph-safe RNG tracker, or dropout masks would freeze across "
            "replays (Bridge asserts in gpt_provider.py)");
    if (full && !local)
        add(r, GT_SEVERITY_ERROR, "full_iteration_needs_local",
            KEYS("model.cuda_graph_scope", "model.cuda_graph_impl"),
            "set model.cuda_graph_impl=local, or use per-layer scopes (attn, mlp, ...) with "
            "transformer_engine",
            "scope full_iteration is captured by the local implementation only, but "
            "cuda_graph_impl is %s",
            impl_name(m->cuda_graph_impl));
    if (full && (s & ~(uint32_t)GT_SCOPE_FULL_ITERATION))
        add(r, GT_SEVERITY_ERROR, "full_iteration_alone", KEYS("model.cuda_graph_scope"),
            "use model.cuda_graph_scope=full_iteration alone, or drop it and keep the "
            "per-layer scopes",
            "full_iteration already captures the whole step; it cannot be combined with "
            "per-layer scopes");
    if (local && !full)
        add(r, GT_SEVERITY_ERROR, "local_needs_full_iteration",
            KEYS("model.cuda_graph_impl", "model.cuda_graph_scope"),
            "set model.cuda_graph_scope=full_iteration, or model.cuda_graph_impl="
            "transformer_engine for per-layer scopes",
            "cuda_graph_impl=local captures the full iteration only; its scope must be "
            "full_iteration");
    if (te && !s)
        add(r, GT_SEVERITY_ERROR, "transformer_engine_needs_scope",
            KEYS("model.cuda_graph_impl", "model.cuda_graph_scope"),
            "name the scopes, e.g. model.cuda_graph_scope=attn (dense) or "
            "attn,moe_router,moe_preprocess (dropless MoE)",
            "cuda_graph_impl=transformer_engine with an empty cuda_graph_scope captures "
            "nothing");
    if ((s & GT_SCOPE_MOE) && (s & GT_SCOPE_MOE_ROUTER))
        add(r, GT_SEVERITY_ERROR, "moe_excludes_moe_router", KEYS("model.cuda_graph_scope"),
            "keep one: moe (drop-and-pad MoE) or moe_router (+ moe_preprocess)",
            "scopes moe and moe_router are mutually exclusive (moe already contains the "
            "router)");
    if ((s & GT_SCOPE_MOE_PREPROCESS) && !(s & GT_SCOPE_MOE_ROUTER))
        add(r, GT_SEVERITY_ERROR, "moe_preprocess_needs_moe_router", KEYS("model.cuda_graph_scope"),
            "add moe_router to model.cuda_graph_scope",
            "scope moe_preprocess requires scope moe_router");
    if ((s & (GT_SCOPE_MOE | GT_SCOPE_MOE_ROUTER | GT_SCOPE_MOE_PREPROCESS)) && !l.moe)
        add(r, GT_SEVERITY_ERROR, "moe_scopes_need_moe_layers",
            KEYS("model.cuda_graph_scope", "model.num_moe_experts",
                 "model.hybrid_override_pattern"),
            "drop moe, moe_router and moe_preprocess from the scope (use attn, mlp), or make "
            "the model MoE (model.num_moe_experts > 0)",
            "MoE scopes (moe, moe_router, moe_preprocess) are set but the model has no MoE "
            "layers");
    if ((s & GT_SCOPE_MOE) && l.moe &&
        (m->moe_expert_capacity_factor <= 0 || !m->moe_pad_expert_input_to_capacity))
        add(r, GT_SEVERITY_ERROR, "moe_scope_needs_drop_and_pad",
            KEYS("model.cuda_graph_scope", "model.moe_expert_capacity_factor",
                 "model.moe_pad_expert_input_to_capacity"),
            "for dropless MoE use model.cuda_graph_scope=attn,moe_router,moe_preprocess "
            "(Bridge's advice); or set model.moe_expert_capacity_factor (e.g. 1.0) and "
            "model.moe_pad_expert_input_to_capacity=true",
            "scope moe graphs the experts, whose token counts change every step unless "
            "drop-and-pad fixes them; this MoE is %s",
            m->moe_expert_capacity_factor <= 0 ? "dropless (no capacity factor)"
                                               : "not padded to capacity");
    if ((s & GT_SCOPE_MOE_PREPROCESS) && l.moe &&
        m->moe_token_dispatcher_type == GT_DISPATCHER_ALLTOALL && m->moe_expert_capacity_factor > 0)
        add(r, GT_SEVERITY_ERROR, "moe_preprocess_no_host_sync",
            KEYS("model.cuda_graph_scope", "model.moe_token_dispatcher_type",
                 "model.moe_expert_capacity_factor"),
            "drop moe_preprocess from the scope, or use the dropless alltoall dispatcher "
            "(moe_expert_capacity_factor unset)",
            "the alltoall dispatcher with a capacity factor copies token counts to the host "
            "in its preprocess step, which cannot be captured");
    if ((s & GT_SCOPE_MOE_PREPROCESS) && l.moe && m->moe_router_padding_for_fp8)
        add(r, GT_SEVERITY_ERROR, "moe_preprocess_no_fp8_router_padding",
            KEYS("model.cuda_graph_scope", "model.moe_router_padding_for_fp8"),
            "set model.moe_router_padding_for_fp8=false, or drop moe_preprocess from the scope",
            "router padding for fp8 reads token counts on the host in the preprocess step, "
            "which cannot be captured");
    if (local && full && l.moe && m->moe_expert_capacity_factor <= 0)
        add(r, GT_SEVERITY_NOTE, "dropless_moe_in_full_iteration",
            KEYS("model.cuda_graph_scope", "model.moe_expert_capacity_factor"),
            "nothing to change; with Bridge use transformer_engine + "
            "attn,moe_router,moe_preprocess instead",
            "in Bridge, dropless MoE limits graphs to the dense modules (its dispatcher syncs "
            "with the host); graphtrain keeps expert offsets on the device, so the full "
            "iteration, experts included, is captured");
    if ((s & GT_SCOPE_MLP) && !l.dense_mlp)
        add(r, GT_SEVERITY_ERROR, "mlp_scope_needs_dense_layers",
            KEYS("model.cuda_graph_scope", "model.num_moe_experts", "model.moe_layer_freq",
                 "model.hybrid_override_pattern"),
            "drop mlp from the scope; for MoE layers use moe_router,moe_preprocess (dropless) "
            "or moe (drop-and-pad)",
            "scope mlp graphs dense MLP layers, but every layer of this model is MoE");
    if ((s & GT_SCOPE_MAMBA) && !l.mamba)
        add(r, GT_SEVERITY_ERROR, "mamba_scope_needs_mamba_layers",
            KEYS("model.cuda_graph_scope", "model.hybrid_override_pattern"),
            "drop mamba from the scope, or give a hybrid pattern with M layers",
            "scope mamba is set but the model has no Mamba layers");
    if ((s & GT_SCOPE_ATTN) && !l.attention)
        add(r, GT_SEVERITY_ERROR, "attn_scope_needs_attention_layers",
            KEYS("model.cuda_graph_scope", "model.hybrid_override_pattern"),
            "drop attn from the scope, or put * layers in the hybrid pattern",
            "scope attn is set but the hybrid pattern has no attention layers");
    if (te && m->recompute_granularity == GT_RECOMPUTE_FULL)
        add(r, GT_SEVERITY_ERROR, "full_recompute_needs_full_iteration",
            KEYS("model.recompute_granularity", "model.recompute_num_layers",
                 "model.cuda_graph_impl", "model.cuda_graph_scope"),
            "use selective recompute (model.recompute_granularity=selective with "
            "model.recompute_modules), switch to local + full_iteration, or turn graphs off",
            "full (layer) recompute%s is only supported with the full-iteration graph, not "
            "with transformer_engine scopes (MCore: \"full recompute is only supported with "
            "full iteration CUDA graph\")",
            m->recompute_num_layers > 0 ? " with recompute_num_layers" : "");
    const bool selective = m->recompute_granularity == GT_RECOMPUTE_SELECTIVE;
    /* MCore: a recomputed module lies wholly inside or outside a graph; the MoE module spans
     * the router, so its recompute cannot run with the router graphed apart (moe_act stays in
     * the experts and may) */
    if (te && selective && (m->recompute_modules & GT_RECOMPUTE_MOE) && (s & GT_SCOPE_MOE_ROUTER))
        add(r, GT_SEVERITY_ERROR, "moe_recompute_not_with_moe_router",
            KEYS("model.recompute_modules", "model.cuda_graph_scope"),
            "remove moe from model.recompute_modules (moe_act may stay), or moe_router from the "
            "scope",
            "MoE recompute is not supported with the moe_router graph scope (MCore: a "
            "recomputed module may not cross a graph's boundary)");
    /* no rule against dropout in a recomputed module inside a graph: the recomputed forward
     * draws its masks from the same Philox counters (seed, site, micro-batch, step) as the
     * forward, in a replay as eagerly (tests/train/test_recompute_graphs.c) */
    if (m->cpu_offloading)
        add(r, GT_SEVERITY_ERROR, "cpu_offloading_with_graphs",
            KEYS("model.cpu_offloading", "model.cuda_graph_impl"),
            "set model.cpu_offloading=false or model.cuda_graph_impl=none",
            "CPU offloading is incompatible with CUDA graphs (MCore transformer_config.py)");
    if (te && m->delay_wgrad_compute && (s & (GT_SCOPE_ATTN | GT_SCOPE_MOE_ROUTER))) {
        if (!m->gradient_accumulation_fusion)
            add(r, GT_SEVERITY_ERROR, "delay_wgrad_needs_gradient_accumulation_fusion",
                KEYS("model.delay_wgrad_compute", "model.gradient_accumulation_fusion",
                     "model.cuda_graph_scope"),
                "set model.gradient_accumulation_fusion=true, or model.delay_wgrad_compute="
                "false",
                "delay_wgrad_compute with attn or moe_router in the graph scope needs "
                "gradient_accumulation_fusion");
        if ((s & GT_SCOPE_ATTN) && (m->add_bias_linear || m->add_qkv_bias))
            add(r, GT_SEVERITY_ERROR, "delay_wgrad_attn_needs_no_bias",
                KEYS("model.delay_wgrad_compute", "model.add_bias_linear", "model.add_qkv_bias",
                     "model.cuda_graph_scope"),
                "set model.add_bias_linear=false model.add_qkv_bias=false, or "
                "model.delay_wgrad_compute=false",
                "delay_wgrad_compute with the attn graph scope does not support attention "
                "biases");
    }
    /* arch >= sm_100 (Blackwell): MCore skips the NCCL_GRAPH_REGISTER check for `local` */
    const gt_gpu_spec *gpu = gt_gpu_find(c->runtime.gpu);
    bool blackwell = gpu && gpu->sm >= 100;
    if (c->env.expandable_segments && c->env.nccl_graph_register != 0 && (te || !blackwell))
        add(r, GT_SEVERITY_ERROR, "expandable_segments_need_nccl_graph_register_0",
            KEYS("env.expandable_segments", "env.nccl_graph_register", "model.cuda_graph_impl"),
            "export NCCL_GRAPH_REGISTER=0 (or env.nccl_graph_register=0), or drop "
            "expandable_segments:True from PYTORCH_CUDA_ALLOC_CONF",
            "allocator expandable segments with NCCL graph registration (NCCL_GRAPH_REGISTER "
            "%s) cause illegal memory accesses and hangs in captured collectives%s",
            c->env.nccl_graph_register < 0 ? "unset, i.e. on" : "=1",
            te ? " (asserted for transformer_engine on every GPU)"
               : " (asserted for local on GPUs before sm_100)");
    if (c->dataset.packed_sequence && (!c->dataset.pad_to_max_length || !c->dataset.pad_cu_seqlens))
        add(r, GT_SEVERITY_ERROR, "graphs_need_padded_packed_sequences",
            KEYS("dataset.packed_sequence", "dataset.pad_to_max_length", "dataset.pad_cu_seqlens"),
            "set dataset.pad_to_max_length=true dataset.pad_cu_seqlens=true, or "
            "dataset.packed_sequence=false",
            "graphs need static shapes, but unpadded packed sequences change length (and "
            "cu_seqlens) every batch, forcing a re-capture each step");
    int steps = c->train.train_iters;
    if (c->train.exit_interval > 0 && c->train.exit_interval < steps)
        steps = c->train.exit_interval;
    if (m->cuda_graph_warmup_steps >= steps)
        add(r, GT_SEVERITY_ERROR, "warmup_steps_bound",
            KEYS("model.cuda_graph_warmup_steps", "train.train_iters", "train.exit_interval"),
            "lower model.cuda_graph_warmup_steps (3 is Bridge's default) or train longer",
            "capture happens after %d eager warmup steps, but the run has only %d steps: no "
            "graph would ever be replayed",
            m->cuda_graph_warmup_steps, steps);
    if (local && full &&
        (c->rerun_state_machine.check_for_nan_in_loss || c->ddp.check_for_nan_in_grad))
        add(r, GT_SEVERITY_NOTE, "nan_checks_inside_full_iteration",
            KEYS("rerun_state_machine.check_for_nan_in_loss", "ddp.check_for_nan_in_grad",
                 "model.cuda_graph_scope"),
            "nothing to change; Bridge configs that set them false also work",
            "Bridge requires NaN checks off with a full_iteration graph; graphtrain runs them "
            "as device kernels inside the graph (docs/design.md principle 5), so they stay on");
}

/* ---- shape and run sanity (not graph-specific) ---- */
static void check_shape_rules(const gt_config *c, gt_report *r) {
    if (c->env.nccl_graph_register_bad)
        add(r, GT_SEVERITY_ERROR, "nccl_graph_register_not_a_number",
            KEYS("env.nccl_graph_register"),
            "export NCCL_GRAPH_REGISTER=0 or 1 (or unset it), or set env.nccl_graph_register",
            "the environment variable NCCL_GRAPH_REGISTER is not a whole number, so whether "
            "NCCL registers graph buffers cannot be told");
    if (c->env.expandable_segments_bad)
        add(r, GT_SEVERITY_ERROR, "expandable_segments_not_true_or_false",
            KEYS("env.expandable_segments"),
            "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or :False), or set "
            "env.expandable_segments",
            "PYTORCH_CUDA_ALLOC_CONF's expandable_segments is neither True nor False (PyTorch "
            "accepts only those), so whether the allocator expands segments cannot be told");
    const gt_model_config *m = &c->model;
    if (m->kv_channels <= 0 && m->hidden_size % m->num_attention_heads)
        add(r, GT_SEVERITY_ERROR, "heads_divide_hidden_size",
            KEYS("model.hidden_size", "model.num_attention_heads", "model.kv_channels"),
            "pick num_attention_heads that divides hidden_size, or set model.kv_channels (the "
            "head size)",
            "hidden_size %d is not divisible by num_attention_heads %d", m->hidden_size,
            m->num_attention_heads);
    if (m->num_query_groups > 0 && m->num_attention_heads % m->num_query_groups)
        add(r, GT_SEVERITY_ERROR, "query_groups_divide_heads",
            KEYS("model.num_query_groups", "model.num_attention_heads"),
            "pick num_query_groups that divides num_attention_heads (0 = one per head)",
            "num_attention_heads %d is not divisible by num_query_groups %d",
            m->num_attention_heads, m->num_query_groups);
    if (m->layer_pattern[0]) {
        size_t len = strlen(m->layer_pattern);
        size_t bad = strspn(m->layer_pattern, "*-EM");
        if (bad < len)
            add(r, GT_SEVERITY_ERROR, "layer_pattern_alphabet",
                KEYS("model.hybrid_override_pattern"),
                "use only * (attention), - (dense MLP), E (MoE), M (Mamba)",
                "hybrid_override_pattern has '%c' at position %zu", m->layer_pattern[bad], bad);
        else if ((int)len != m->num_layers)
            add(r, GT_SEVERITY_ERROR, "layer_pattern_length",
                KEYS("model.hybrid_override_pattern", "model.num_layers"),
                "give one character per layer, or set num_layers to the pattern length",
                "hybrid_override_pattern has %zu characters but num_layers is %d", len,
                m->num_layers);
        if (strchr(m->layer_pattern, 'E') && m->num_moe_experts == 0)
            add(r, GT_SEVERITY_ERROR, "pattern_moe_needs_experts",
                KEYS("model.hybrid_override_pattern", "model.num_moe_experts"),
                "set model.num_moe_experts, or replace E by - in the pattern",
                "the hybrid pattern has MoE layers (E) but num_moe_experts is 0");
    }
    layers l = model_layers(m);
    if (l.dense_mlp && m->ffn_hidden_size <= 0)
        add(r, GT_SEVERITY_ERROR, "dense_layers_need_ffn_hidden_size",
            KEYS("model.ffn_hidden_size"),
            "set model.ffn_hidden_size (Llama: about 8/3 x hidden_size)",
            "the model has dense MLP layers but ffn_hidden_size is 0");
    if (m->num_moe_experts > 0) {
        if (m->moe_router_topk > m->num_moe_experts)
            add(r, GT_SEVERITY_ERROR, "moe_topk_le_experts",
                KEYS("model.moe_router_topk", "model.num_moe_experts"),
                "lower model.moe_router_topk or add experts",
                "moe_router_topk %d exceeds num_moe_experts %d", m->moe_router_topk,
                m->num_moe_experts);
        if (m->moe_ffn_hidden_size <= 0 && m->ffn_hidden_size <= 0)
            add(r, GT_SEVERITY_ERROR, "moe_needs_expert_ffn",
                KEYS("model.moe_ffn_hidden_size", "model.ffn_hidden_size"),
                "set model.moe_ffn_hidden_size",
                "MoE experts have no width (both "
                "moe_ffn_hidden_size and ffn_hidden_size are 0)");
    }
    if (c->dataset.seq_length > 0 && c->dataset.seq_length != m->seq_length)
        add(r, GT_SEVERITY_ERROR, "dataset_seq_length_matches_model",
            KEYS("dataset.seq_length", "model.seq_length"),
            "set dataset.seq_length to model.seq_length (or drop it)",
            "dataset.seq_length %d differs from model.seq_length %d (Bridge requires them equal)",
            c->dataset.seq_length, m->seq_length);
    if (c->dataset.source == GT_DATA_SHARDS && !c->dataset.data_path[0])
        add(r, GT_SEVERITY_ERROR, "shards_need_data_path",
            KEYS("dataset.source", "dataset.data_path"),
            "set dataset.data_path to the prefix prepare-data wrote, or dataset.source=mock",
            "dataset.source=shards needs dataset.data_path");
    if (c->optimizer.min_lr > c->optimizer.lr)
        add(r, GT_SEVERITY_ERROR, "min_lr_le_lr", KEYS("optimizer.min_lr", "optimizer.lr"),
            "set optimizer.min_lr <= optimizer.lr", "min_lr %g is above the peak lr %g",
            c->optimizer.min_lr, c->optimizer.lr);
    if (!c->optimizer.use_precision_aware_optimizer &&
        (c->optimizer.exp_avg_dtype != GT_STATE_FP32 ||
         c->optimizer.exp_avg_sq_dtype != GT_STATE_FP32))
        add(r, GT_SEVERITY_ERROR, "moment_dtype_needs_precision_aware",
            KEYS("optimizer.exp_avg_dtype", "optimizer.exp_avg_sq_dtype",
                 "optimizer.use_precision_aware_optimizer"),
            "set optimizer.use_precision_aware_optimizer=true, or both moment dtypes to fp32",
            "Adam moments in bf16 (exp_avg_dtype %s, exp_avg_sq_dtype %s) need the "
            "precision-aware optimizer, which is off",
            c->optimizer.exp_avg_dtype == GT_STATE_BF16 ? "bf16" : "fp32",
            c->optimizer.exp_avg_sq_dtype == GT_STATE_BF16 ? "bf16" : "fp32");
    if (c->train.eval_interval > 0 && c->train.eval_iters == 0)
        add(r, GT_SEVERITY_ERROR, "eval_needs_iters",
            KEYS("train.eval_interval", "train.eval_iters"),
            "set train.eval_iters > 0, or train.eval_interval=0",
            "evaluation every %d steps with eval_iters=0 evaluates nothing",
            c->train.eval_interval);
}

/* ---- the learning-rate schedule: Megatron's asserts (OptimizerParamScheduler, arguments.py)
 * as findings ---- */
static void check_schedule_rules(const gt_config *c, gt_report *r) {
    const gt_scheduler_config *s = &c->scheduler;
    const bool fraction = s->lr_warmup_fraction != -1.0;
    const bool wsd = s->lr_decay_style == GT_LR_WSD;
    const int decay = s->lr_decay_iters > 0 ? s->lr_decay_iters : c->train.train_iters;
    if (fraction && s->lr_warmup_iters != 0)
        add(r, GT_SEVERITY_ERROR, "warmup_fraction_excludes_warmup_iters",
            KEYS("scheduler.lr_warmup_fraction", "scheduler.lr_warmup_iters"),
            "set scheduler.lr_warmup_iters=0 (graphtrain's default is 10, Megatron's 0), or "
            "drop scheduler.lr_warmup_fraction",
            "lr_warmup_fraction %g and lr_warmup_iters %d both set the warmup; Megatron takes "
            "one of them",
            s->lr_warmup_fraction, s->lr_warmup_iters);
    if (fraction && (s->lr_warmup_fraction < 0 || s->lr_warmup_fraction > 1))
        add(r, GT_SEVERITY_ERROR, "warmup_fraction_in_unit_range",
            KEYS("scheduler.lr_warmup_fraction"),
            "give a fraction between 0 and 1 (0.01 = the first 1% of the decay steps), or -1 "
            "to unset it",
            "lr_warmup_fraction %g is not a fraction of the decay steps", s->lr_warmup_fraction);
    if (s->lr_warmup_init > c->optimizer.lr)
        add(r, GT_SEVERITY_ERROR, "warmup_init_le_lr",
            KEYS("scheduler.lr_warmup_init", "optimizer.lr"),
            "set scheduler.lr_warmup_init <= optimizer.lr (0 is Megatron's default)",
            "the warmup would fall from lr_warmup_init %g to the peak lr %g", s->lr_warmup_init,
            c->optimizer.lr);
    if (wsd && s->lr_wsd_decay_iters == 0)
        add(r, GT_SEVERITY_ERROR, "wsd_needs_decay_iters",
            KEYS("scheduler.lr_decay_style", "scheduler.lr_wsd_decay_iters"),
            "set scheduler.lr_wsd_decay_iters (the annealing steps at the end of the decay, "
            "e.g. a tenth of them)",
            "lr_decay_style WSD anneals over lr_wsd_decay_iters steps, which is unset");
    if (wsd && s->lr_wsd_decay_iters > decay)
        add(r, GT_SEVERITY_ERROR, "wsd_decay_iters_within_decay_iters",
            KEYS("scheduler.lr_wsd_decay_iters", "scheduler.lr_decay_iters", "train.train_iters"),
            "lower scheduler.lr_wsd_decay_iters to at most the decay steps, or decay longer",
            "WSD's %d annealing steps are the last of the decay steps, but there are only %d "
            "(lr_decay_iters, or train_iters when it is 0)",
            s->lr_wsd_decay_iters, decay);
    if (!wsd && s->lr_wsd_decay_iters > 0)
        add(r, GT_SEVERITY_NOTE, "wsd_keys_without_wsd",
            KEYS("scheduler.lr_wsd_decay_iters", "scheduler.lr_decay_style"),
            "set scheduler.lr_decay_style=WSD to anneal, or drop scheduler.lr_wsd_decay_iters",
            "lr_wsd_decay_iters is set but lr_decay_style is not WSD, so it changes nothing");
    if (s->override_opt_param_scheduler && s->use_checkpoint_opt_param_scheduler)
        add(r, GT_SEVERITY_ERROR, "override_or_use_checkpoint_scheduler",
            KEYS("scheduler.override_opt_param_scheduler",
                 "scheduler.use_checkpoint_opt_param_scheduler"),
            "keep one: override (this configuration's schedule) or use_checkpoint (the "
            "checkpoint's)",
            "both override_opt_param_scheduler and use_checkpoint_opt_param_scheduler are set "
            "(Megatron asserts they are not)");
}

/* ---- recompute: the modules of model.recompute_modules the model has (Megatron accepts a
 * module only where it exists) ---- */
static void refuse_module(gt_report *r, const char *module, const char *lacks) {
    add(r, GT_SEVERITY_ERROR, "recompute_module_not_in_model",
        KEYS("model.recompute_modules", "model.recompute_granularity"),
        "drop it from model.recompute_modules",
        "model.recompute_modules has %s, but this model has no %s", module, lacks);
}

static void check_recompute_modules(const gt_config *c, gt_report *r) {
    const gt_model_config *m = &c->model;
    if (m->recompute_granularity != GT_RECOMPUTE_SELECTIVE) return;
    const layers l = model_layers(m);
    uint32_t mods = m->recompute_modules;
    if ((mods & GT_RECOMPUTE_CORE_ATTN) && !l.attention)
        refuse_module(r, "core_attn", "attention layers");
    if ((mods & GT_RECOMPUTE_MLP) && !l.dense_mlp) refuse_module(r, "mlp", "dense MLP layers");
    if ((mods & GT_RECOMPUTE_MOE) && !l.moe) refuse_module(r, "moe", "MoE layers");
    if ((mods & GT_RECOMPUTE_MOE_ACT) && !l.moe) refuse_module(r, "moe_act", "MoE layers");
    if (mods & GT_RECOMPUTE_SHARED_EXPERTS)
        refuse_module(r, "shared_experts", "shared experts (graphtrain's MoE has none)");
}

/* ---- where graphtrain runs a setting differently without running less (notes); what it
 * cannot run at all is config/unsupported.c's table ---- */
static void check_engine_notes(const gt_config *c, gt_report *r) {
    const gt_model_config *m = &c->model;
    if (m->compute_dtype == GT_DTYPE_FP32 && c->runtime.device != GT_DEVICE_CPU)
        add(r, GT_SEVERITY_NOTE, "engine_gpu_computes_bf16", KEYS("model.compute_dtype"),
            "use model.compute_dtype=bf16, or runtime.device=cpu for fp32 compute",
            "on the GPU graphtrain computes in bf16 with fp32 master weights, gradients and "
            "moments; fp32 compute is the CPU backend");
    if (m->delay_wgrad_compute)
        add(r, GT_SEVERITY_NOTE, "engine_wgrad_always_deferred", KEYS("model.delay_wgrad_compute"),
            "nothing to change",
            "graphtrain leaves the dense layers' weight gradients to the end of the backward "
            "and batches them over the layers whatever this key says (nothing to overlap on "
            "one GPU; recompute keeps those whose operands it recomputes); "
            "delay_wgrad_compute is validated (Bridge's rules) but changes nothing");
    if (!c->runtime.deterministic)
        add(r, GT_SEVERITY_NOTE, "engine_always_deterministic", KEYS("runtime.deterministic"),
            "nothing to change; set runtime.deterministic=true to silence this note",
            "graphtrain has no faster non-deterministic kernels yet (cuDNN's atomic dQ "
            "backward is not wired in): every run stays deterministic");
}

int gt_config_validate(const gt_config *cfg, gt_report *report) {
    memset(report, 0, sizeof *report);
    check_graph_rules(cfg, report);
    check_shape_rules(cfg, report);
    check_recompute_modules(cfg, report);
    gt_check_megatron_rules(cfg, report);
    check_schedule_rules(cfg, report);
    check_engine_notes(cfg, report);
    gt_config_check_cuda(cfg, report); /* the kernel choices: config/cuda_keys.c */
    gt_check_fp8_rules(cfg, report);
    gt_check_unsupported(cfg, report);
    return report->errors;
}
