/* The Mamba unit of hybrid models ('M' in model.hybrid_override_pattern), as Megatron's
 * MambaLayer + MambaMixer compute it: rmsnorm -> in_proj (z, x, B, C, dt) -> causal conv1d + SiLU
 * over xBC -> SSD scan (dt bias + softplus, A = -exp(A_log), D skip) -> RMSNorm gated by z ->
 * out_proj -> dropout -> residual add. Also its shapes from the mamba_* keys and its init. The two
 * projections are linear layers (model_fp8.h: fp8 under an fp8 recipe); the scan stays in the
 * activations' precision with fp32 state. */
#include <math.h>
#include <string.h>

#include "core/philox.h"
#include "model/model_internal.h"

/* MambaMixer's constructor defaults for the initial values */
#define MAMBA_A_INIT_LO 1.0
#define MAMBA_A_INIT_HI 16.0
#define MAMBA_DT_MIN 0.001
#define MAMBA_DT_MAX 0.1
#define MAMBA_DT_FLOOR 1e-4
/* Philox counter words of the uniform draws (the normal ones use "INIT" alone) */
#define MAMBA_INIT_STREAM 0x494E4954u  /* "INIT" */
#define MAMBA_UNIFORM_WORD 0x4D414D42u /* "MAMB" */

int gt_mamba_check_dims(gt_model *m, gt_error *err) {
    const gt_model_config *mc = &m->cfg.model;
    gt_model_dims *dm = &m->dm;
    int any = 0;
    for (int l = 0; l < m->num_layers; l++)
        any |= m->layers[l].has_mamba;
    memset(&dm->ms, 0, sizeof dm->ms);
    if (!any) return GT_OK;
#define NEED(cond, ...)                                                                            \
    do {                                                                                           \
        if (!(cond)) return gt_error_set(err, GT_ERR_INVALID, __VA_ARGS__);                        \
    } while (0)
    NEED(mc->mamba_state_dim > 0, "model.mamba_state_dim is %d; it must be > 0",
         mc->mamba_state_dim);
    NEED(mc->mamba_head_dim > 0, "model.mamba_head_dim is %d; it must be > 0", mc->mamba_head_dim);
    NEED(mc->mamba_num_groups > 0, "model.mamba_num_groups is %d; it must be > 0",
         mc->mamba_num_groups);
    NEED(mc->mamba_d_conv > 0, "model.mamba_d_conv is %d; it must be > 0", mc->mamba_d_conv);
    NEED(mc->mamba_chunk_size > 0, "model.mamba_chunk_size is %d; it must be > 0",
         mc->mamba_chunk_size);
    NEED(mc->mamba_num_heads >= 0, "model.mamba_num_heads is %d; it must be >= 0 (0 = derived)",
         mc->mamba_num_heads);
    int heads = mc->mamba_num_heads;
    if (heads == 0) {
        long inner = (long)mc->mamba_expand * mc->hidden_size;
        NEED(mc->mamba_expand > 0 && inner % mc->mamba_head_dim == 0,
             "model.mamba_expand %d x model.hidden_size %d is not divisible by "
             "model.mamba_head_dim %d; change one of them or set model.mamba_num_heads",
             mc->mamba_expand, mc->hidden_size, mc->mamba_head_dim);
        NEED(inner / mc->mamba_head_dim <= 1000000, "model.mamba_expand %d is too large",
             mc->mamba_expand);
        heads = (int)(inner / mc->mamba_head_dim);
    }
    NEED(heads % mc->mamba_num_groups == 0,
         "the Mamba heads (%d, model.mamba_num_heads or expand x hidden_size / head_dim) are not "
         "divisible by model.mamba_num_groups %d",
         heads, mc->mamba_num_groups);
    double in =
        2.0 * heads * mc->mamba_head_dim + 2.0 * mc->mamba_num_groups * mc->mamba_state_dim + heads;
    NEED(in * dm->N < 2147483647.0,
         "a Mamba layer's input projection (%.0f columns) x %d tokens is too large; lower "
         "train.micro_batch_size or the mamba_* sizes",
         in, dm->N);
#undef NEED
    dm->ms = (gt_mamba_shape){dm->B,
                              dm->T,
                              heads,
                              mc->mamba_head_dim,
                              mc->mamba_num_groups,
                              mc->mamba_state_dim,
                              mc->mamba_d_conv,
                              mc->mamba_chunk_size};
    return GT_OK;
}

/* Uniform in [0, 1) for element idx of the flat array, keyed by (seed, idx) like normal_at */
static double uniform_at(uint64_t seed, uint64_t idx) {
    gt_philox4 c = {{(uint32_t)idx, (uint32_t)(idx >> 32), MAMBA_INIT_STREAM, MAMBA_UNIFORM_WORD}};
    gt_philox4 r = gt_philox4x32_10(c, seed);
    return (double)(r.v[0] >> 8) / 16777216.0;
}

static double normal_at(uint64_t seed, uint64_t idx) {
    gt_philox4 c = {{(uint32_t)idx, (uint32_t)(idx >> 32), MAMBA_INIT_STREAM, MAMBA_UNIFORM_WORD}};
    gt_philox4 r = gt_philox4x32_10(c, seed);
    double u1 = ((double)(r.v[1] >> 8) + 1.0) / 16777216.0; /* (0, 1] */
    double u2 = (double)(r.v[2] >> 8) / 16777216.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925286766559 * u2);
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

int gt_mamba_init_tensor(const gt_model *m, int i, uint64_t seed, float *p, size_t lo, size_t hi) {
    const gt_model_tensor_desc *t = &m->tensors[i];
    if (!strstr(t->name, ".mamba.")) return 0;
    double std = m->cfg.model.init_method_std;
    double conv_bound = 1.0 / sqrt((double)m->dm.ms.K); /* PyTorch's Conv1d default */
    for (size_t j = lo; j < hi; j++) {
        uint64_t idx = t->offset + j;
        double u = uniform_at(seed, idx), v;
        if (ends_with(t->name, ".in_proj_w"))
            v = std * normal_at(seed, idx);
        else if (ends_with(t->name, ".out_proj_w")) /* Megatron's output_layer_init_method */
            v = std / sqrt(2.0 * m->num_layers) * normal_at(seed, idx);
        else if (ends_with(t->name, ".conv1d_w") || ends_with(t->name, ".conv1d_b"))
            v = (2.0 * u - 1.0) * conv_bound;
        else if (ends_with(t->name, ".A_log"))
            v = log(MAMBA_A_INIT_LO + u * (MAMBA_A_INIT_HI - MAMBA_A_INIT_LO));
        else if (ends_with(t->name, ".dt_bias")) {
            /* dt log-uniform in [dt_min, dt_max], floored; the bias is softplus's inverse */
            double dt = exp(log(MAMBA_DT_MIN) + u * (log(MAMBA_DT_MAX) - log(MAMBA_DT_MIN)));
            if (dt < MAMBA_DT_FLOOR) dt = MAMBA_DT_FLOOR;
            v = dt + log(-expm1(-dt));
        } else /* D and both norm weights */
            v = 1.0;
        p[j] = (float)v;
    }
    return 1;
}

void gt_mamba_fwd(gt_model *m, gt_stream *s, int layer, int train, gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    const gt_mamba_shape ms = dm->ms;
    gt_mamba_block *mb = &m->layers[layer].mamba;
    const void *x = m->res[mb->res_in];
#define P(t) gt_model_param(m, mb->t)
    b->ops->rmsnorm_fwd(b, s, mb->ln, mb->rstd, x, P(norm_w), dm->N, dm->d, dm->eps);
    gt_linear_fwd(m, s, layer, GT_LIN_MAMBA_IN, mb->zxbcdt, mb->ln, mb->in_w, -1, NULL, train, st);
    b->ops->mamba_conv_fwd(b, s, mb->xbc, mb->zxbcdt, P(conv_w), P(conv_b), ms);
    b->ops->mamba_ssd_fwd(b, s, mb->y, mb->xbc, mb->zxbcdt, P(dt_bias), P(A_log), P(D), m->sc.mws,
                          mb->ssd, ms);
    b->ops->mamba_gated_norm_fwd(b, s, mb->g, mb->grstd, mb->y, mb->zxbcdt, P(gnorm_w), dm->eps,
                                 ms);
#undef P
    gt_model_proj_residual(m, s, m->res[mb->res_out], x, mb->g, mb->out_w, -1, gt_mamba_inner(ms),
                           layer, GT_SITE_MAMBA_OUT, train, st);
}

/* dzxbcdt (sc.bb) is filled slice by slice: z by the gated norm, dt by the scan, xBC by the
 * convolution; then in_proj's gradients read it whole. */
void gt_mamba_bwd(gt_model *m, gt_stream *s, int layer, gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    const gt_mamba_shape ms = dm->ms;
    gt_mamba_block *mb = &m->layers[layer].mamba;
    int acc = m->grad_acc;
    void *dz = m->sc.bb;
#define P(t) gt_model_param(m, mb->t)
#define G(t) gt_model_grad(m, mb->t)
    const void *dy = gt_model_branch_grad(m, s, mb->res_out, layer, GT_SITE_MAMBA_OUT, st);
    gt_linear_bwd_weight(m, s, layer, GT_LIN_MAMBA_OUT, mb->out_w, -1, dy, mb->g, st);
    gt_linear_bwd_data(m, s, layer, GT_LIN_MAMBA_OUT, m->sc.a, dy, mb->out_w, 0, st);
    b->ops->mamba_gated_norm_bwd(b, s, m->sc.mdy, dz, G(gnorm_w), m->sc.a, mb->y, mb->zxbcdt,
                                 P(gnorm_w), mb->grstd, m->sc.mws, ms, acc);
    b->ops->mamba_ssd_bwd(b, s, m->sc.mdxbc, dz, G(dt_bias), G(A_log), G(D), m->sc.mdy, mb->xbc,
                          mb->zxbcdt, P(dt_bias), P(A_log), P(D), m->sc.mws, mb->ssd, ms, acc);
    b->ops->mamba_conv_bwd(b, s, dz, G(conv_w), G(conv_b), m->sc.mdxbc, mb->zxbcdt, P(conv_w),
                           P(conv_b), ms, acc);
    gt_linear_bwd_weight(m, s, layer, GT_LIN_MAMBA_IN, mb->in_w, -1, dz, mb->ln, st);
    gt_linear_bwd_data(m, s, layer, GT_LIN_MAMBA_IN, m->sc.dln, dz, mb->in_w, 0, st);
#undef P
#undef G
    gt_model_norm_bwd(m, s, mb->res_in, mb->res_out, mb->norm_w, mb->dw_part, mb->rstd);
}
