/* The CUDA kernel choosers (kernel_choice.h): each setting of runtime.cuda.attention,
 * attention_bwd, moe_gemm and pdl resolved for a device and a shape, or refused with the key,
 * the reason and a value that would work. */
#include "config/kernel_choice.h"

#include <string.h>

const char *gt_kernel_name(gt_kernel k) {
    switch (k) {
    case GT_KERNEL_CUDNN:
        return "cudnn";
    case GT_KERNEL_WGMMA:
        return "wgmma";
    case GT_KERNEL_MMA:
        return "mma";
    case GT_KERNEL_REFERENCE:
        return "reference";
    case GT_KERNEL_NONE:
        break;
    }
    return "none";
}

static int known(const gt_cuda_caps *d) {
    return d->cc_major > 0;
}
/* the sm_90a (wgmma) code runs on compute capability 9.0 only; an unknown device may be one */
static int may_run_sm90a(const gt_cuda_caps *d) {
    return !known(d) || (d->cc_major == 9 && d->cc_minor == 0);
}
static int is_sm90(const gt_cuda_caps *d) {
    return known(d) && d->cc_major == 9 && d->cc_minor == 0;
}

int gt_attn_reference_hd_ok(int hd) {
    return hd == 64 || hd == 128;
}

int gt_attn_cudnn_shape_ok(const gt_attn_shape *sh) {
    return sh->p == 0.0f && sh->T > 0 && sh->T % 128 == 0 && sh->hd > 0 && sh->hd % 8 == 0 &&
           sh->hd <= 256;
}

static int cudnn_takes(const gt_cuda_caps *d, const gt_attn_shape *sh) {
    return d->cudnn && !sh->cudnn_declined && gt_attn_cudnn_shape_ok(sh);
}

/* why cuDNN does not run this shape, for messages */
static const char *cudnn_reason(const gt_cuda_caps *d, const gt_attn_shape *sh) {
    if (!d->cudnn) return "this graphtrain has no usable cuDNN";
    if (sh->p != 0.0f) return "cuDNN's dropout mask is not the reference's (attention dropout > 0)";
    if (sh->T <= 0 || sh->T % 128 != 0) return "cuDNN needs seq_length % 128 == 0";
    if (sh->hd % 8 != 0 || sh->hd > 256)
        return "cuDNN takes head sizes that are multiples of 8 up to 256";
    if (sh->cudnn_declined) return "cuDNN built no plan for this shape";
    return "cuDNN takes it";
}

int gt_choose_attention_fwd(const gt_cuda_caps *d, gt_cuda_attention setting,
                            const gt_attn_shape *sh, gt_kernel *out, gt_error *err) {
    *out = GT_KERNEL_NONE;
    switch (setting) {
    case GT_CUDA_ATTN_REFERENCE:
        if (!gt_attn_reference_hd_ok(sh->hd))
            return gt_error_set(err, GT_ERR_INVALID,
                                "runtime.cuda.attention=reference: the reference attention "
                                "kernels take head size 64 or 128, not %d; use cudnn (no "
                                "attention dropout, seq_length %% 128 == 0)",
                                sh->hd);
        *out = GT_KERNEL_REFERENCE;
        return GT_OK;
    case GT_CUDA_ATTN_MMA:
        if (sh->hd != GT_ATTN_MMA_HD)
            return gt_error_set(err, GT_ERR_INVALID,
                                "runtime.cuda.attention=mma: the mma attention kernels take head "
                                "size 64, not %d; use auto or cudnn (no attention dropout, "
                                "seq_length %% 128 == 0), or reference (slow)",
                                sh->hd);
        *out = GT_KERNEL_MMA;
        return GT_OK;
    case GT_CUDA_ATTN_CUDNN:
        if (!cudnn_takes(d, sh))
            return gt_error_set(err, GT_ERR_INVALID,
                                "runtime.cuda.attention=cudnn cannot run attention with T=%d "
                                "hd=%d dropout %g: %s; use auto%s",
                                sh->T, sh->hd, (double)sh->p, cudnn_reason(d, sh),
                                sh->hd == GT_ATTN_MMA_HD ? " or mma" : " or reference (slow)");
        *out = GT_KERNEL_CUDNN;
        return GT_OK;
    case GT_CUDA_ATTN_AUTO:
        if (cudnn_takes(d, sh))
            *out = GT_KERNEL_CUDNN;
        else if (sh->hd == GT_ATTN_MMA_HD)
            *out = GT_KERNEL_MMA;
        else
            return gt_error_set(err, GT_ERR_INVALID,
                                "runtime.cuda.attention=auto has no fast kernel for head size "
                                "%d here (T=%d, dropout %g): %s, and the mma kernels take head "
                                "size 64 only; set runtime.cuda.attention=reference (the slow "
                                "fp32 kernels, head size 64 or 128) or change the shape",
                                sh->hd, sh->T, (double)sh->p, cudnn_reason(d, sh));
        return GT_OK;
    }
    return gt_error_set(err, GT_ERR_INVALID,
                        "runtime.cuda.attention has no value %d; use auto, cudnn, mma or "
                        "reference",
                        (int)setting);
}

static int wgmma_bwd_takes(const gt_attn_shape *sh) {
    return sh->hd == 64 && sh->p == 0.0f && sh->T > 0 && sh->T % 128 == 0;
}

int gt_choose_attention_bwd(const gt_cuda_caps *d, gt_cuda_attention_bwd setting, gt_kernel fwd,
                            const gt_attn_shape *sh, gt_kernel *out, gt_error *err) {
    *out = GT_KERNEL_NONE;
    switch (setting) {
    case GT_CUDA_ATTN_BWD_AUTO:
        if (fwd == GT_KERNEL_CUDNN)
            *out = is_sm90(d) && wgmma_bwd_takes(sh) ? GT_KERNEL_WGMMA : GT_KERNEL_CUDNN;
        else if (fwd == GT_KERNEL_MMA || fwd == GT_KERNEL_REFERENCE)
            *out = fwd;
        else
            return gt_error_set(err, GT_ERR_INVALID,
                                "runtime.cuda.attention_bwd=auto follows the forward, which "
                                "chose no kernel; fix runtime.cuda.attention first");
        return GT_OK;
    case GT_CUDA_ATTN_BWD_WGMMA:
        if (!may_run_sm90a(d))
            return gt_error_set(err, GT_ERR_INVALID,
                                "runtime.cuda.attention_bwd=wgmma needs compute capability 9.0 "
                                "(sm_90a code), which this GPU (%d.%d) is not; use auto or "
                                "cudnn",
                                d->cc_major, d->cc_minor);
        if (!wgmma_bwd_takes(sh))
            return gt_error_set(err, GT_ERR_INVALID,
                                "runtime.cuda.attention_bwd=wgmma takes head size 64 without "
                                "attention dropout and seq_length %% 128 == 0 (here hd=%d "
                                "T=%d dropout %g); use auto",
                                sh->hd, sh->T, (double)sh->p);
        *out = GT_KERNEL_WGMMA;
        return GT_OK;
    case GT_CUDA_ATTN_BWD_CUDNN:
        if (fwd != GT_KERNEL_CUDNN)
            return gt_error_set(err, GT_ERR_INVALID,
                                "runtime.cuda.attention_bwd=cudnn needs cuDNN's forward, but "
                                "runtime.cuda.attention chose %s for this shape; use auto (or "
                                "runtime.cuda.attention=cudnn)",
                                gt_kernel_name(fwd));
        *out = GT_KERNEL_CUDNN;
        return GT_OK;
    case GT_CUDA_ATTN_BWD_MMA:
        if (sh->hd != GT_ATTN_MMA_HD)
            return gt_error_set(err, GT_ERR_INVALID,
                                "runtime.cuda.attention_bwd=mma: the mma attention kernels take "
                                "head size 64, not %d; use auto",
                                sh->hd);
        *out = GT_KERNEL_MMA;
        return GT_OK;
    case GT_CUDA_ATTN_BWD_REFERENCE:
        if (!gt_attn_reference_hd_ok(sh->hd))
            return gt_error_set(err, GT_ERR_INVALID,
                                "runtime.cuda.attention_bwd=reference: the reference attention "
                                "kernels take head size 64 or 128, not %d; use auto",
                                sh->hd);
        *out = GT_KERNEL_REFERENCE;
        return GT_OK;
    }
    return gt_error_set(err, GT_ERR_INVALID,
                        "runtime.cuda.attention_bwd has no value %d; use auto, wgmma, cudnn, "
                        "mma or reference",
                        (int)setting);
}

int gt_choose_moe_gemm(const gt_cuda_caps *d, gt_cuda_moe_gemm setting, int n, int k,
                       gt_kernel *out, gt_error *err) {
    *out = GT_KERNEL_NONE;
    const char *name = setting == GT_CUDA_MOE_AUTO    ? "auto"
                       : setting == GT_CUDA_MOE_WGMMA ? "wgmma"
                       : setting == GT_CUDA_MOE_MMA   ? "mma"
                                                      : "reference";
    if (setting == GT_CUDA_MOE_REFERENCE) {
        *out = GT_KERNEL_REFERENCE;
        return GT_OK;
    }
    if (setting != GT_CUDA_MOE_AUTO && setting != GT_CUDA_MOE_WGMMA && setting != GT_CUDA_MOE_MMA)
        return gt_error_set(err, GT_ERR_INVALID,
                            "runtime.cuda.moe_gemm has no value %d; use auto, wgmma, mma or "
                            "reference",
                            (int)setting);
    if (setting == GT_CUDA_MOE_WGMMA && !may_run_sm90a(d))
        return gt_error_set(err, GT_ERR_INVALID,
                            "runtime.cuda.moe_gemm=wgmma needs compute capability 9.0 (sm_90a "
                            "code), which this GPU (%d.%d) is not; use auto or mma",
                            d->cc_major, d->cc_minor);
    if (n <= 0 || k <= 0 || n % 8 != 0 || k % 8 != 0)
        return gt_error_set(err, GT_ERR_INVALID,
                            "runtime.cuda.moe_gemm=%s: the tensor-core grouped GEMMs need both "
                            "sizes to be multiples of 8, here %d x %d (model.hidden_size and "
                            "twice or once model.moe_ffn_hidden_size); use expert widths that "
                            "are multiples of 8, or runtime.cuda.moe_gemm=reference (slow)",
                            name, n, k);
    if (setting == GT_CUDA_MOE_AUTO)
        *out = is_sm90(d) ? GT_KERNEL_WGMMA : GT_KERNEL_MMA;
    else
        *out = setting == GT_CUDA_MOE_WGMMA ? GT_KERNEL_WGMMA : GT_KERNEL_MMA;
    return GT_OK;
}

int gt_choose_pdl(const gt_cuda_caps *d, gt_cuda_pdl setting, int *on, gt_error *err) {
    *on = 0;
    switch (setting) {
    case GT_CUDA_PDL_AUTO:
        *on = !known(d) || d->cc_major >= 9;
        return GT_OK;
    case GT_CUDA_PDL_ON:
        if (known(d) && d->cc_major < 9)
            return gt_error_set(err, GT_ERR_INVALID,
                                "runtime.cuda.pdl=on needs compute capability 9.0 or newer, "
                                "which this GPU (%d.%d) is not; use auto or off",
                                d->cc_major, d->cc_minor);
        *on = 1;
        return GT_OK;
    case GT_CUDA_PDL_OFF:
        return GT_OK;
    }
    return gt_error_set(err, GT_ERR_INVALID,
                        "runtime.cuda.pdl has no value %d; use auto, on or off", (int)setting);
}

int gt_choose_graph_memset(gt_cuda_graph_memset setting) {
    return setting != GT_CUDA_MEMSET_NODE;
}

void gt_cuda_caps_of_gpu(const char *gpu, gt_cuda_caps *d) {
    static const struct {
        const char *name;
        int major, minor;
    } k_gpus[] = {{"a100", 8, 0},  {"h100", 9, 0},   {"h200", 9, 0},  {"gh200", 9, 0},
                  {"b200", 10, 0}, {"gb200", 10, 0}, {"b300", 10, 3}, {"gb300", 10, 3}};
    memset(d, 0, sizeof *d);
    d->cudnn = 1;
    for (size_t i = 0; gpu && i < sizeof k_gpus / sizeof k_gpus[0]; i++)
        if (!strcmp(gpu, k_gpus[i].name)) {
            d->cc_major = k_gpus[i].major;
            d->cc_minor = k_gpus[i].minor;
        }
}
