/* The tensor maps of the warpgroup-MMA kernels' TMA copies (wgmma.cuh). */
#include "backend/cuda/wgmma.cuh"

/* cuTensorMapEncodeTiled, from the driver through the runtime */
static PFN_cuTensorMapEncodeTiled_v12000 wg_encode;

cudaError_t gt_wg_maps_init(void) {
    if (wg_encode) return cudaSuccess;
    void *fn = NULL;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                     cudaEnableDefault, &found);
    if (e != cudaSuccess) return e;
    if (found != cudaDriverEntryPointSuccess || !fn) return cudaErrorSymbolNotFound;
    wg_encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    return cudaSuccess;
}

int gt_wg_map(CUtensorMap *m, const bf16 *p, uint64_t d0, uint64_t d1, uint64_t d2, int b0,
              int b1) {
    cuuint64_t dims[3] = {d0, d1, d2}, strides[2] = {d0 * 2, d0 * d1 * 2};
    cuuint32_t box[3] = {(cuuint32_t)b0, (cuuint32_t)b1, 1}, unit[3] = {1, 1, 1};
    return wg_encode && wg_encode(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, (void *)p, dims, strides,
                                  box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
