/* Shape limits of the CUDA backend's kernels that the configuration rules check before a run
 * (config/unsupported.c), so a setting past them is refused up front rather than by the op. */
#ifndef GT_CONFIG_CUDA_LIMITS_H
#define GT_CONFIG_CUDA_LIMITS_H

/* Mamba (k_mamba_conv.cu): the convolution's per-thread weight taps */
#define GT_CUDA_MAMBA_MAX_CONV 8

#endif
