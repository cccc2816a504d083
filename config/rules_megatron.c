/* Megatron's arithmetic rules (TransformerConfig.__post_init__, the parallel state's rank
 * generator and the training batch calculator): world size, data-parallel size, global batch,
 * tensor/context/pipeline/expert divisibility and activation recompute. They hold whether or
 * not graphtrain can run the parallelism yet, and report alongside the unsupported table. */
#include "config/rules.h"

#define KEYS GT_KEYS
#define add gt_report_add

static void check_world(const gt_config *c, gt_report *r) {
    const gt_model_config *m = &c->model;
    const long tp = m->tensor_model_parallel_size, pp = m->pipeline_model_parallel_size;
    const long cp = m->context_parallel_size, ep = m->expert_model_parallel_size;
    const long gpus = c->runtime.num_gpus, model_par = tp * pp * cp;
    long dp = 0; /* 0: cannot be derived */
    if (gpus % model_par)
        add(r, GT_SEVERITY_ERROR, "parallel_sizes_fit_gpus",
            KEYS("runtime.num_gpus", "model.tensor_model_parallel_size",
                 "model.pipeline_model_parallel_size", "model.context_parallel_size"),
            "make runtime.num_gpus a multiple of tp * pp * cp (the data-parallel size is "
            "num_gpus / (tp * pp * cp)), or lower the parallel sizes",
            "the world size is tp * pp * cp * dp, but num_gpus %ld is not a multiple of "
            "tp %ld * pp %ld * cp %ld = %ld, so the data-parallel size %ld/%ld is not whole",
            gpus, tp, pp, cp, model_par, gpus, model_par);
    else
        dp = gpus / model_par;
    const int dp_set = c->ddp.data_parallel_size;
    if (dp && dp_set > 0 && dp_set != dp)
        add(r, GT_SEVERITY_ERROR, "data_parallel_size_matches_world",
            KEYS("ddp.data_parallel_size", "runtime.num_gpus", "model.tensor_model_parallel_size",
                 "model.pipeline_model_parallel_size", "model.context_parallel_size"),
            "set ddp.data_parallel_size=0 (derived), or change runtime.num_gpus to tp * pp * cp * "
            "data_parallel_size",
            "ddp.data_parallel_size %d disagrees with num_gpus / (tp * pp * cp) = %ld / %ld = %ld",
            dp_set, gpus, model_par, dp);
    /* experts: the expert-tensor (= tp) x expert x pipeline grid must tile the world too */
    if (ep > 1 && gpus % (tp * ep * pp))
        add(r, GT_SEVERITY_ERROR, "expert_parallel_fits_gpus",
            KEYS("model.expert_model_parallel_size", "runtime.num_gpus",
                 "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size"),
            "make runtime.num_gpus a multiple of tp * ep * pp, or lower the expert-parallel size",
            "num_gpus %ld is not a multiple of tp %ld * ep %ld * pp %ld = %ld (Megatron's "
            "expert rank grid)",
            gpus, tp, ep, pp, tp * ep * pp);
    long used_dp = dp_set > 0 ? dp_set : dp ? dp : 1;
    long per_step = (long)c->train.micro_batch_size * used_dp;
    if (c->train.global_batch_size % per_step)
        add(r, GT_SEVERITY_ERROR, "global_batch_divisible",
            KEYS("train.global_batch_size", "train.micro_batch_size", "ddp.data_parallel_size",
                 "runtime.num_gpus"),
            "make global_batch_size a multiple of micro_batch_size x data-parallel size (the "
            "quotient is the number of accumulated micro-batches)",
            "global batch = micro batch x dp x accumulation steps, but global_batch_size %d is "
            "not a multiple of micro_batch_size %d x data-parallel size %ld",
            c->train.global_batch_size, c->train.micro_batch_size, used_dp);
}

static void check_tensor_context(const gt_config *c, gt_report *r) {
    const gt_model_config *m = &c->model;
    const int tp = m->tensor_model_parallel_size, cp = m->context_parallel_size;
    const int groups = m->num_query_groups > 0 ? m->num_query_groups : m->num_attention_heads;
    if (tp > 1 && m->num_attention_heads % tp)
        add(r, GT_SEVERITY_ERROR, "tp_divides_heads",
            KEYS("model.num_attention_heads", "model.tensor_model_parallel_size"),
            "pick a tensor_model_parallel_size that divides num_attention_heads",
            "num_attention_heads %d is not divisible by tensor_model_parallel_size %d",
            m->num_attention_heads, tp);
    if (tp > 1 && groups % tp)
        add(r, GT_SEVERITY_ERROR, "tp_divides_query_groups",
            KEYS("model.num_query_groups", "model.tensor_model_parallel_size"),
            "pick a tensor_model_parallel_size that divides num_query_groups",
            "num_query_groups %d is not divisible by tensor_model_parallel_size %d", groups, tp);
    if (tp > 1 && (m->ffn_hidden_size % tp || m->moe_ffn_hidden_size % tp))
        add(r, GT_SEVERITY_ERROR, "tp_divides_ffn",
            KEYS("model.ffn_hidden_size", "model.moe_ffn_hidden_size",
                 "model.tensor_model_parallel_size"),
            "make ffn_hidden_size and moe_ffn_hidden_size multiples of tensor_model_parallel_size",
            "the MLP widths (ffn_hidden_size %d, moe_ffn_hidden_size %d) are split over %d "
            "tensor-parallel ranks and must divide evenly",
            m->ffn_hidden_size, m->moe_ffn_hidden_size, tp);
    if (tp > 1 && !m->should_pad_vocab && m->vocab_size % tp)
        add(r, GT_SEVERITY_ERROR, "tp_divides_vocab",
            KEYS("model.vocab_size", "model.tensor_model_parallel_size", "model.should_pad_vocab"),
            "set model.vocab_size to a multiple of make_vocab_size_divisible_by x tp (Megatron's "
            "padding), or model.should_pad_vocab=true",
            "the vocabulary-parallel embedding splits vocab_size %d over %d ranks; Megatron pads "
            "it to a multiple of make_vocab_size_divisible_by %d x tp = %d, here %d",
            m->vocab_size, tp, m->make_vocab_size_divisible_by,
            m->make_vocab_size_divisible_by * tp,
            (m->vocab_size + m->make_vocab_size_divisible_by * tp - 1) /
                (m->make_vocab_size_divisible_by * tp) * (m->make_vocab_size_divisible_by * tp));
    if (cp > 1 && m->seq_length % (2 * cp))
        add(r, GT_SEVERITY_ERROR, "cp_divides_seq",
            KEYS("model.seq_length", "model.context_parallel_size"),
            "make seq_length a multiple of 2 x context_parallel_size",
            "context parallelism splits each sequence into 2 x cp = %d chunks (load-balanced "
            "causal attention), but seq_length %d is not a multiple of it",
            2 * cp, m->seq_length);
}

static void check_pipeline_experts(const gt_config *c, gt_report *r) {
    const gt_model_config *m = &c->model;
    const int pp = m->pipeline_model_parallel_size, ep = m->expert_model_parallel_size;
    const int first = m->num_layers_in_first_pipeline_stage;
    const int last = m->num_layers_in_last_pipeline_stage;
    int layers = m->num_layers, stages = pp;
    if (first) layers -= first, stages--;
    if (last) layers -= last, stages--;
    if ((first || last) && (pp == 1 || stages < 0 || layers < 0 || (stages == 0 && layers)))
        add(r, GT_SEVERITY_ERROR, "uneven_pipeline_stages_fit",
            KEYS("model.num_layers_in_first_pipeline_stage",
                 "model.num_layers_in_last_pipeline_stage", "model.pipeline_model_parallel_size",
                 "model.num_layers"),
            "set the uneven-stage keys only with pipeline_model_parallel_size > 1, to sizes that "
            "leave the remaining layers for the middle stages (0 = unset)",
            "num_layers_in_first_pipeline_stage %d and num_layers_in_last_pipeline_stage %d do "
            "not fit %d layers over %d pipeline stages",
            first, last, m->num_layers, pp);
    else if (stages > 0 && layers % stages)
        add(r, GT_SEVERITY_ERROR, "pp_divides_layers",
            KEYS("model.num_layers", "model.pipeline_model_parallel_size",
                 "model.num_layers_in_first_pipeline_stage",
                 "model.num_layers_in_last_pipeline_stage"),
            "make num_layers a multiple of pipeline_model_parallel_size, or give the first/last "
            "stage its own size (num_layers_in_first_pipeline_stage, "
            "num_layers_in_last_pipeline_stage) so the rest divides",
            "%d layers do not divide evenly over %d pipeline stages", layers, stages);
    if (ep > 1 && m->num_moe_experts == 0)
        add(r, GT_SEVERITY_ERROR, "expert_parallel_needs_moe",
            KEYS("model.expert_model_parallel_size", "model.num_moe_experts"),
            "set model.expert_model_parallel_size=1 for a dense model, or set num_moe_experts",
            "expert_model_parallel_size %d needs MoE layers, but num_moe_experts is 0", ep);
    if (m->num_moe_experts > 0 && m->num_moe_experts % ep)
        add(r, GT_SEVERITY_ERROR, "expert_parallel_divides_experts",
            KEYS("model.expert_model_parallel_size", "model.num_moe_experts"),
            "pick expert_model_parallel_size dividing num_moe_experts",
            "num_moe_experts %d is not divisible by expert_model_parallel_size %d",
            m->num_moe_experts, ep);
}

static void check_recompute(const gt_config *c, gt_report *r) {
    const gt_model_config *m = &c->model;
    const int per_stage = m->num_layers / m->pipeline_model_parallel_size;
    if (m->recompute_granularity == GT_RECOMPUTE_FULL) {
        if (m->recompute_method == GT_RECOMPUTE_METHOD_NONE)
            add(r, GT_SEVERITY_ERROR, "full_recompute_needs_method",
                KEYS("model.recompute_method", "model.recompute_granularity"),
                "set model.recompute_method=uniform or block",
                "recompute_granularity=full needs recompute_method uniform (chunks of "
                "recompute_num_layers) or block (the first recompute_num_layers of each stage)");
        if (m->recompute_num_layers < 1 || m->recompute_num_layers > per_stage)
            add(r, GT_SEVERITY_ERROR, "full_recompute_num_layers_range",
                KEYS("model.recompute_num_layers", "model.recompute_granularity",
                     "model.num_layers", "model.pipeline_model_parallel_size"),
                "set model.recompute_num_layers between 1 and num_layers / pp",
                "recompute_granularity=full needs recompute_num_layers between 1 and the layers "
                "of a pipeline stage (%d), but it is %d%s",
                per_stage, m->recompute_num_layers, m->recompute_num_layers ? "" : " (unset)");
    }
    /* the reverse: the layer-picking keys belong to full recompute, and a run with them set
     * otherwise would not recompute the layers they name */
    if (m->recompute_granularity != GT_RECOMPUTE_FULL &&
        (m->recompute_method != GT_RECOMPUTE_METHOD_NONE ||
         (m->recompute_granularity == GT_RECOMPUTE_NONE && m->recompute_num_layers > 0)))
        add(r, GT_SEVERITY_ERROR, "recompute_layers_need_full",
            KEYS("model.recompute_method", "model.recompute_num_layers",
                 "model.recompute_granularity"),
            "set model.recompute_granularity=full, or unset model.recompute_method and "
            "model.recompute_num_layers (null)",
            "model.recompute_method and model.recompute_num_layers pick the layers of full "
            "recompute, but model.recompute_granularity is %s",
            m->recompute_granularity == GT_RECOMPUTE_SELECTIVE ? "selective" : "none");
    if (m->recompute_granularity == GT_RECOMPUTE_SELECTIVE && m->recompute_num_layers > 0)
        add(r, GT_SEVERITY_ERROR, "selective_recompute_forbids_num_layers",
            KEYS("model.recompute_num_layers", "model.recompute_granularity"),
            "unset model.recompute_num_layers (null), or use recompute_granularity=full",
            "recompute_granularity=selective recomputes recompute_modules in every layer; "
            "recompute_num_layers (%d) must be unset",
            m->recompute_num_layers);
}

/* Megatron's DistributedDataParallelConfig: the parameter all-gather is the distributed
 * optimizer's, and its overlap rides on the gradient reduction's */
static void check_overlap(const gt_config *c, gt_report *r) {
    if (!c->ddp.overlap_param_gather) return;
    if (!c->optimizer.use_distributed_optimizer)
        add(r, GT_SEVERITY_ERROR, "overlap_param_gather_needs_distributed_optimizer",
            KEYS("ddp.overlap_param_gather", "optimizer.use_distributed_optimizer"),
            "set optimizer.use_distributed_optimizer=true, or ddp.overlap_param_gather=false",
            "ddp.overlap_param_gather overlaps the distributed optimizer's parameter all-gather; "
            "without it there is none (Megatron's rule)");
    if (!c->ddp.overlap_grad_reduce)
        add(r, GT_SEVERITY_ERROR, "overlap_param_gather_needs_overlap_grad_reduce",
            KEYS("ddp.overlap_param_gather", "ddp.overlap_grad_reduce"),
            "set ddp.overlap_grad_reduce=true, or ddp.overlap_param_gather=false",
            "ddp.overlap_param_gather needs ddp.overlap_grad_reduce (Megatron's rule)");
}

void gt_check_megatron_rules(const gt_config *c, gt_report *r) {
    check_overlap(c, r);
    check_world(c, r);
    check_tensor_context(c, r);
    check_pipeline_experts(c, r);
    check_recompute(c, r);
}
