/* Memset nodes of a captured graph turned into kernel nodes.
 *
 * cuBLASLt puts a memset node in front of its cooperative GEMM kernels (it zeroes a counter
 * at the start of the workspace), cuDNN one in front of each attention call, and the
 * backend's own memset0 captures as one too. In kernel traces, the edges around a memset node
 * leave the GPU idle for microseconds (in front of it and behind it), while a kernel-to-kernel
 * edge costs well under a microsecond. So after capture, each memset node is replaced by a
 * node of k_graph_fill writing the same bytes, with the same edges; with programmatic launch on
 * (runtime.cuda.pdl), an in-edge from a kernel node becomes programmatic, since k_graph_fill waits
 * for its predecessor (GT_PDL_ENTRY) before it writes. Nothing is computed differently. Off with
 * runtime.cuda.graph_memset=node.
 *
 * The gain is measured in docs/design.md, "Memset nodes become fill kernels". (Under the
 * CUPTI tracer of `scripts/gpu.sh timeline`, such a graph shows a hole after its first node
 * that untraced runs do not have.) */
#include "backend/cuda/cuda_common.cuh"

#include <vector>

#define FILL_THREADS 256
#define FILL_MAX_BLOCKS 1024

/* dst[y * pitch + x * elem] = value for x < width, y < height (elem 1, 2 or 4 bytes, the
 * value's low bytes); 16-byte stores where a row allows. */
__global__ void k_graph_fill(char *dst, size_t pitch, unsigned value, unsigned elem, size_t width,
                             size_t height) {
    GT_PDL_ENTRY();
    unsigned word = elem == 1   ? (value & 0xffu) * 0x01010101u
                    : elem == 2 ? (value & 0xffffu) * 0x00010001u
                                : value;
    size_t row_bytes = width * elem;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t y = 0; y < height; y++) {
        char *row = dst + y * pitch;
        size_t vec = ((uintptr_t)row & 15u) == 0 ? row_bytes / 16 : 0;
        uint4 w4 = make_uint4(word, word, word, word);
        for (size_t i = tid; i < vec; i += stride)
            ((uint4 *)row)[i] = w4;
        /* the tail past the last 16-byte store, element by element */
        for (size_t i = vec * 16 / elem + tid; i < width; i += stride) {
            if (elem == 4)
                ((unsigned *)row)[i] = word;
            else if (elem == 2)
                ((unsigned short *)row)[i] = (unsigned short)word;
            else
                row[i] = (char)word;
        }
    }
}

static int is_kernel(cudaGraphNode_t n) {
    cudaGraphNodeType t;
    return cudaGraphNodeGetType(n, &t) == cudaSuccess && t == cudaGraphNodeTypeKernel;
}

/* Replaces memset node m by a k_graph_fill node; *done is 0 when m was left as it is (an
 * element size the kernel does not write). */
static cudaError_t replace_memset(cudaGraph_t g, cudaGraphNode_t m, int pdl, int *done) {
    *done = 0;
    cudaMemsetParams mp;
    cudaError_t e = cudaGraphMemsetNodeGetParams(m, &mp);
    if (e != cudaSuccess) return e;
    if (mp.elementSize != 1 && mp.elementSize != 2 && mp.elementSize != 4) return cudaSuccess;
    size_t nin = 0, nout = 0;
    if ((e = cudaGraphNodeGetDependencies(m, NULL, NULL, &nin)) != cudaSuccess) return e;
    if ((e = cudaGraphNodeGetDependentNodes(m, NULL, NULL, &nout)) != cudaSuccess) return e;
    std::vector<cudaGraphNode_t> in(nin + 1), out(nout + 1);
    std::vector<cudaGraphEdgeData> ein(nin + 1), eout(nout + 1);
    if (nin && (e = cudaGraphNodeGetDependencies(m, in.data(), ein.data(), &nin)) != cudaSuccess)
        return e;
    if (nout &&
        (e = cudaGraphNodeGetDependentNodes(m, out.data(), eout.data(), &nout)) != cudaSuccess)
        return e;
    char *dst = (char *)mp.dst;
    size_t pitch = mp.pitch, width = mp.width, height = mp.height;
    unsigned value = mp.value, elem = mp.elementSize;
    void *args[] = {&dst, &pitch, &value, &elem, &width, &height};
    size_t vec = width * elem / 16 + 1;
    size_t blocks = (vec + FILL_THREADS - 1) / FILL_THREADS;
    cudaKernelNodeParams kp = {};
    kp.func = (void *)k_graph_fill;
    kp.gridDim = dim3((unsigned)(blocks < FILL_MAX_BLOCKS ? blocks : FILL_MAX_BLOCKS));
    kp.blockDim = dim3(FILL_THREADS);
    kp.kernelParams = args;
    cudaGraphNode_t k;
    if ((e = cudaGraphAddKernelNode(&k, g, NULL, 0, &kp)) != cudaSuccess) return e;
    for (size_t i = 0; i < nin; i++) {
        cudaGraphEdgeData ed = ein[i];
        if (pdl && ed.type == cudaGraphDependencyTypeDefault && is_kernel(in[i])) {
            ed.from_port = cudaGraphKernelNodePortProgrammatic;
            ed.type = cudaGraphDependencyTypeProgrammatic;
        }
        if ((e = cudaGraphAddDependencies(g, &in[i], &k, &ed, 1)) != cudaSuccess) return e;
    }
    for (size_t i = 0; i < nout; i++)
        if ((e = cudaGraphAddDependencies(g, &k, &out[i], &eout[i], 1)) != cudaSuccess) return e;
    e = cudaGraphDestroyNode(m);
    *done = e == cudaSuccess;
    return e;
}

extern "C" int gt_cuda_graph_memsets_to_kernels(cudaGraph_t g, int pdl, int *replaced,
                                                gt_error *err) {
    *replaced = 0;
    size_t n = 0;
    cudaError_t e = cudaGraphGetNodes(g, NULL, &n);
    std::vector<cudaGraphNode_t> nodes(n + 1);
    if (e == cudaSuccess) e = cudaGraphGetNodes(g, nodes.data(), &n);
    for (size_t i = 0; e == cudaSuccess && i < n; i++) {
        cudaGraphNodeType t;
        e = cudaGraphNodeGetType(nodes[i], &t);
        if (e != cudaSuccess || t != cudaGraphNodeTypeMemset) continue;
        int done = 0;
        e = replace_memset(g, nodes[i], pdl, &done);
        *replaced += done;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        return gt_error_set(err, GT_ERR_DEVICE,
                            "replacing a captured memset node by a kernel failed: %s (%s); set "
                            "runtime.cuda.graph_memset=node to keep the memset nodes",
                            cudaGetErrorName(e), cudaGetErrorString(e));
    }
    return GT_OK;
}
