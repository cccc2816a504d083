// Runs the chunked SSD launchers of backend/cuda/k_mamba_ssd.cu on the host (the stand-in
// cuda_common.cuh beside it) on random inputs, half the heads slow-decaying, and writes inputs
// and outputs for ssd_compare.py. Usage: ssd_harness B T H P G S CHUNK FILE
#include "backend/cuda/cuda_common.cuh"
#include <cstdio>
#include <cstdlib>
#include <random>
extern "C" void gt_cuda_mamba_ssd_fwd(gt_backend *b, gt_stream *s, void *y, const void *xbc, const void *zxbcdt, const void *dt_bias, const void *A_log, const void *D, float *ws, gt_mamba_shape sh);
extern "C" void gt_cuda_mamba_ssd_bwd(gt_backend *b, gt_stream *s, void *dxbc, void *dzxbcdt, float *ddt_bias, float *dA_log, float *dD, const void *dy, const void *xbc, const void *zxbcdt, const void *dt_bias, const void *A_log, const void *D, float *ws, gt_mamba_shape sh, int accumulate);
int main(int argc, char **argv) {
    gt_mamba_shape sh = {atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), 4, atoi(argv[7])};
    size_t N = (size_t)sh.B * sh.T, C = gt_mamba_conv(sh), in = gt_mamba_in(sh), di = gt_mamba_inner(sh), H = sh.H;
    std::mt19937 rng(1); std::normal_distribution<float> nd;
    auto vec = [&](size_t n) { std::vector<float> v(n); for (auto &x : v) x = nd(rng); return v; };
    auto xbc = vec(N * C), zx = vec(N * in), dy = vec(N * di), bias = vec(H), Alog = vec(H), D = vec(H);
    for (size_t h = 1; h < H; h += 2) { Alog[h] -= 4; bias[h] -= 3; }
    std::vector<float> y(N * di, NAN), dxbc(N * C, NAN), dz(N * in, 7.0f), gb(H, NAN), ga(H, NAN), gd(H, NAN);
    std::vector<float> ws(gt_mamba_ssd_ws_floats(sh), NAN);
    gt_cuda_mamba_ssd_fwd(nullptr, nullptr, y.data(), xbc.data(), zx.data(), bias.data(), Alog.data(), D.data(), ws.data(), sh);
    std::fill(ws.begin(), ws.end(), NAN);
    gt_cuda_mamba_ssd_bwd(nullptr, nullptr, dxbc.data(), dz.data(), gb.data(), ga.data(), gd.data(), dy.data(), xbc.data(), zx.data(), bias.data(), Alog.data(), D.data(), ws.data(), sh, 0);
    FILE *f = fopen(argv[8], "wb");
    for (auto *v : {&xbc, &zx, &dy, &bias, &Alog, &D, &y, &dxbc, &dz, &gb, &ga, &gd}) fwrite(v->data(), 4, v->size(), f);
    fclose(f);
    return 0;
}
