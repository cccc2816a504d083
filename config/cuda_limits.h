/* Shape limits of the CUDA backend's kernels that the configuration rules check before a run
 * (config/unsupported.c), so a setting past them is refused up front rather than by the op. */
#ifndef GT_CONFIG_CUDA_LIMITS_H
#define GT_CONFIG_CUDA_LIMITS_H

/* Mamba (k_mamba.cu): the convolution's per-thread weight taps, and the SSD scan's fp32 state
 * of one head, mamba_head_dim x mamba_state_dim, which lives in one block's shared memory */
#define GT_CUDA_MAMBA_MAX_CONV 8
#define GT_CUDA_MAMBA_MAX_STATE 32768

#endif
