/* The CUDA kernel choosers on made-up devices: what auto picks for each op family, each
 * explicit value where it runs, and every refusal with the key and a value that would work. */
#include "testlib.h"

#include <string.h>

#include "config/kernel_choice.h"

static const gt_cuda_caps H200 = {9, 0, 1};
static const gt_cuda_caps H200_NO_CUDNN = {9, 0, 0};
static const gt_cuda_caps B200 = {10, 0, 1};
static const gt_cuda_caps A100 = {8, 0, 1};

/* the gpt124m attention: head size 64, T 1024, no dropout */
static const gt_attn_shape GPT = {1024, 64, 0.0f, 0};

static gt_kernel fwd_ok(const gt_cuda_caps *d, gt_cuda_attention s, gt_attn_shape sh) {
    gt_kernel k = GT_KERNEL_NONE;
    gt_error err = {0};
    if (gt_choose_attention_fwd(d, s, &sh, &k, &err) != GT_OK) fail_msg("refused: %s", err.msg);
    return k;
}
static gt_kernel bwd_ok(const gt_cuda_caps *d, gt_cuda_attention_bwd s, gt_kernel fwd,
                        gt_attn_shape sh) {
    gt_kernel k = GT_KERNEL_NONE;
    gt_error err = {0};
    if (gt_choose_attention_bwd(d, s, fwd, &sh, &k, &err) != GT_OK)
        fail_msg("refused: %s", err.msg);
    return k;
}
static gt_kernel moe_ok(const gt_cuda_caps *d, gt_cuda_moe_gemm s, int n, int k) {
    gt_kernel out = GT_KERNEL_NONE;
    gt_error err = {0};
    if (gt_choose_moe_gemm(d, s, n, k, &out, &err) != GT_OK) fail_msg("refused: %s", err.msg);
    return out;
}
/* a refusal whose message names the key and the value that would work */
#define REFUSED(call, key, fix)                                                                    \
    do {                                                                                           \
        gt_error err_ = {0};                                                                       \
        assert_int_equal((call), GT_ERR_INVALID);                                                  \
        if (!strstr(err_.msg, key) || !strstr(err_.msg, fix))                                      \
            fail_msg("message lacks '%s' or '%s': %s", key, fix, err_.msg);                        \
    } while (0)

static void test_auto_attention_is_cudnn_then_wgmma_backward_on_h200(void **state) {
    (void)state;
    gt_kernel f = fwd_ok(&H200, GT_CUDA_ATTN_AUTO, GPT);
    assert_int_equal(f, GT_KERNEL_CUDNN);
    assert_int_equal(bwd_ok(&H200, GT_CUDA_ATTN_BWD_AUTO, f, GPT), GT_KERNEL_WGMMA);
    /* head size 128: cuDNN both ways (the wgmma backward takes 64 only) */
    gt_attn_shape hd128 = {8192, 128, 0.0f, 0};
    f = fwd_ok(&H200, GT_CUDA_ATTN_AUTO, hd128);
    assert_int_equal(f, GT_KERNEL_CUDNN);
    assert_int_equal(bwd_ok(&H200, GT_CUDA_ATTN_BWD_AUTO, f, hd128), GT_KERNEL_CUDNN);
}

static void test_auto_attention_backward_is_cudnn_off_sm90(void **state) {
    (void)state;
    gt_kernel f = fwd_ok(&B200, GT_CUDA_ATTN_AUTO, GPT);
    assert_int_equal(f, GT_KERNEL_CUDNN);
    assert_int_equal(bwd_ok(&B200, GT_CUDA_ATTN_BWD_AUTO, f, GPT), GT_KERNEL_CUDNN);
}

static void test_auto_attention_is_mma_where_cudnn_does_not_take_the_shape(void **state) {
    (void)state;
    gt_attn_shape dropout = {1024, 64, 0.1f, 0}, short_t = {64, 64, 0.0f, 0};
    gt_attn_shape declined = {1024, 64, 0.0f, 1};
    assert_int_equal(fwd_ok(&H200, GT_CUDA_ATTN_AUTO, dropout), GT_KERNEL_MMA);
    assert_int_equal(fwd_ok(&H200, GT_CUDA_ATTN_AUTO, short_t), GT_KERNEL_MMA);
    assert_int_equal(fwd_ok(&H200, GT_CUDA_ATTN_AUTO, declined), GT_KERNEL_MMA);
    assert_int_equal(fwd_ok(&H200_NO_CUDNN, GT_CUDA_ATTN_AUTO, GPT), GT_KERNEL_MMA);
    /* the backward follows the own forward */
    assert_int_equal(bwd_ok(&H200, GT_CUDA_ATTN_BWD_AUTO, GT_KERNEL_MMA, short_t), GT_KERNEL_MMA);
}

static void test_auto_attention_refuses_head_size_128_with_dropout(void **state) {
    (void)state;
    /* only the removed WMMA kernels took it: the fix names reference */
    gt_attn_shape sh = {1024, 128, 0.1f, 0};
    gt_kernel k;
    REFUSED(gt_choose_attention_fwd(&H200, GT_CUDA_ATTN_AUTO, &sh, &k, &err_),
            "runtime.cuda.attention", "reference");
    assert_int_equal(fwd_ok(&H200, GT_CUDA_ATTN_REFERENCE, sh), GT_KERNEL_REFERENCE);
}

static void test_explicit_attention_values_run_where_they_can(void **state) {
    (void)state;
    assert_int_equal(fwd_ok(&H200, GT_CUDA_ATTN_MMA, GPT), GT_KERNEL_MMA);
    assert_int_equal(fwd_ok(&H200, GT_CUDA_ATTN_CUDNN, GPT), GT_KERNEL_CUDNN);
    assert_int_equal(fwd_ok(&H200, GT_CUDA_ATTN_REFERENCE, GPT), GT_KERNEL_REFERENCE);
    assert_int_equal(bwd_ok(&H200, GT_CUDA_ATTN_BWD_CUDNN, GT_KERNEL_CUDNN, GPT), GT_KERNEL_CUDNN);
    assert_int_equal(bwd_ok(&H200, GT_CUDA_ATTN_BWD_WGMMA, GT_KERNEL_MMA, GPT), GT_KERNEL_WGMMA);
    assert_int_equal(bwd_ok(&H200, GT_CUDA_ATTN_BWD_MMA, GT_KERNEL_CUDNN, GPT), GT_KERNEL_MMA);
    assert_int_equal(bwd_ok(&H200, GT_CUDA_ATTN_BWD_REFERENCE, GT_KERNEL_CUDNN, GPT),
                     GT_KERNEL_REFERENCE);
    assert_int_equal(bwd_ok(&H200, GT_CUDA_ATTN_BWD_AUTO, GT_KERNEL_REFERENCE, GPT),
                     GT_KERNEL_REFERENCE);
}

static void test_cudnn_attention_is_refused_without_cudnn_or_for_its_shapes(void **state) {
    (void)state;
    gt_kernel k;
    REFUSED(gt_choose_attention_fwd(&H200_NO_CUDNN, GT_CUDA_ATTN_CUDNN, &GPT, &k, &err_),
            "runtime.cuda.attention=cudnn", "mma");
    gt_attn_shape dropout = {1024, 64, 0.1f, 0};
    REFUSED(gt_choose_attention_fwd(&H200, GT_CUDA_ATTN_CUDNN, &dropout, &k, &err_),
            "runtime.cuda.attention=cudnn", "auto");
    gt_attn_shape short_t = {100, 128, 0.0f, 0};
    REFUSED(gt_choose_attention_fwd(&H200, GT_CUDA_ATTN_CUDNN, &short_t, &k, &err_),
            "seq_length % 128", "reference");
    /* cuDNN's backward needs its forward */
    REFUSED(gt_choose_attention_bwd(&H200, GT_CUDA_ATTN_BWD_CUDNN, GT_KERNEL_MMA, &GPT, &k, &err_),
            "runtime.cuda.attention_bwd=cudnn", "auto");
}

static void test_mma_and_reference_attention_refuse_head_sizes_they_lack(void **state) {
    (void)state;
    gt_attn_shape hd128 = {1024, 128, 0.0f, 0}, hd96 = {1024, 96, 0.0f, 0};
    gt_kernel k;
    REFUSED(gt_choose_attention_fwd(&H200, GT_CUDA_ATTN_MMA, &hd128, &k, &err_),
            "runtime.cuda.attention=mma", "cudnn");
    REFUSED(gt_choose_attention_fwd(&H200, GT_CUDA_ATTN_REFERENCE, &hd96, &k, &err_),
            "runtime.cuda.attention=reference", "cudnn");
    REFUSED(
        gt_choose_attention_bwd(&H200, GT_CUDA_ATTN_BWD_MMA, GT_KERNEL_CUDNN, &hd128, &k, &err_),
        "runtime.cuda.attention_bwd=mma", "auto");
    REFUSED(gt_choose_attention_bwd(&H200, GT_CUDA_ATTN_BWD_REFERENCE, GT_KERNEL_CUDNN, &hd96, &k,
                                    &err_),
            "runtime.cuda.attention_bwd=reference", "auto");
}

static void test_wgmma_attention_backward_is_refused_off_sm90_and_for_its_shapes(void **state) {
    (void)state;
    gt_kernel k;
    REFUSED(
        gt_choose_attention_bwd(&B200, GT_CUDA_ATTN_BWD_WGMMA, GT_KERNEL_CUDNN, &GPT, &k, &err_),
        "runtime.cuda.attention_bwd=wgmma", "cudnn");
    gt_attn_shape dropout = {1024, 64, 0.1f, 0};
    REFUSED(
        gt_choose_attention_bwd(&H200, GT_CUDA_ATTN_BWD_WGMMA, GT_KERNEL_MMA, &dropout, &k, &err_),
        "runtime.cuda.attention_bwd=wgmma", "auto");
}

static void test_auto_moe_gemm_is_wgmma_on_sm90_and_mma_elsewhere(void **state) {
    (void)state;
    assert_int_equal(moe_ok(&H200, GT_CUDA_MOE_AUTO, 768, 1024), GT_KERNEL_WGMMA);
    assert_int_equal(moe_ok(&B200, GT_CUDA_MOE_AUTO, 768, 1024), GT_KERNEL_MMA);
    assert_int_equal(moe_ok(&A100, GT_CUDA_MOE_AUTO, 768, 1024), GT_KERNEL_MMA);
    assert_int_equal(moe_ok(&H200, GT_CUDA_MOE_MMA, 768, 1024), GT_KERNEL_MMA);
    assert_int_equal(moe_ok(&H200, GT_CUDA_MOE_WGMMA, 768, 1024), GT_KERNEL_WGMMA);
}

static void test_moe_gemm_refuses_widths_not_a_multiple_of_8_except_reference(void **state) {
    (void)state;
    gt_kernel k;
    REFUSED(gt_choose_moe_gemm(&H200, GT_CUDA_MOE_AUTO, 2 * 100, 1020, &k, &err_),
            "runtime.cuda.moe_gemm=auto", "reference");
    REFUSED(gt_choose_moe_gemm(&H200, GT_CUDA_MOE_MMA, 1024, 100, &k, &err_),
            "runtime.cuda.moe_gemm=mma", "multiples of 8");
    assert_int_equal(moe_ok(&H200, GT_CUDA_MOE_REFERENCE, 1020, 100), GT_KERNEL_REFERENCE);
}

static void test_wgmma_moe_gemm_is_refused_off_sm90(void **state) {
    (void)state;
    gt_kernel k;
    REFUSED(gt_choose_moe_gemm(&B200, GT_CUDA_MOE_WGMMA, 768, 1024, &k, &err_),
            "runtime.cuda.moe_gemm=wgmma", "mma");
}

static void test_unknown_setting_values_are_refused(void **state) {
    (void)state;
    gt_kernel k;
    int on;
    REFUSED(gt_choose_attention_fwd(&H200, (gt_cuda_attention)9, &GPT, &k, &err_),
            "runtime.cuda.attention", "auto");
    REFUSED(
        gt_choose_attention_bwd(&H200, (gt_cuda_attention_bwd)9, GT_KERNEL_CUDNN, &GPT, &k, &err_),
        "runtime.cuda.attention_bwd", "auto");
    REFUSED(gt_choose_moe_gemm(&H200, (gt_cuda_moe_gemm)9, 8, 8, &k, &err_),
            "runtime.cuda.moe_gemm", "auto");
    REFUSED(gt_choose_pdl(&H200, (gt_cuda_pdl)9, &on, &err_), "runtime.cuda.pdl", "auto");
}

static void test_pdl_is_on_from_sm90_and_refused_below(void **state) {
    (void)state;
    int on = -1;
    gt_error err = {0};
    assert_int_equal(gt_choose_pdl(&H200, GT_CUDA_PDL_AUTO, &on, &err), GT_OK);
    assert_int_equal(on, 1);
    assert_int_equal(gt_choose_pdl(&A100, GT_CUDA_PDL_AUTO, &on, &err), GT_OK);
    assert_int_equal(on, 0);
    assert_int_equal(gt_choose_pdl(&H200, GT_CUDA_PDL_OFF, &on, &err), GT_OK);
    assert_int_equal(on, 0);
    REFUSED(gt_choose_pdl(&A100, GT_CUDA_PDL_ON, &on, &err_), "runtime.cuda.pdl=on", "off");
}

static void test_graph_memset_node_keeps_memset_nodes(void **state) {
    (void)state;
    assert_int_equal(gt_choose_graph_memset(GT_CUDA_MEMSET_AUTO), 1);
    assert_int_equal(gt_choose_graph_memset(GT_CUDA_MEMSET_KERNEL), 1);
    assert_int_equal(gt_choose_graph_memset(GT_CUDA_MEMSET_NODE), 0);
}

static void test_gpu_names_give_their_compute_capability(void **state) {
    (void)state;
    gt_cuda_caps d;
    gt_cuda_caps_of_gpu("h200", &d);
    assert_int_equal(d.cc_major, 9);
    gt_cuda_caps_of_gpu("gb200", &d);
    assert_int_equal(d.cc_major, 10);
    gt_cuda_caps_of_gpu("", &d);
    assert_int_equal(d.cc_major, 0);
    /* an unknown device refuses nothing that some GPU runs */
    assert_int_equal(moe_ok(&d, GT_CUDA_MOE_WGMMA, 8, 8), GT_KERNEL_WGMMA);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_attention_is_cudnn_then_wgmma_backward_on_h200),
        cmocka_unit_test(test_auto_attention_backward_is_cudnn_off_sm90),
        cmocka_unit_test(test_auto_attention_is_mma_where_cudnn_does_not_take_the_shape),
        cmocka_unit_test(test_auto_attention_refuses_head_size_128_with_dropout),
        cmocka_unit_test(test_explicit_attention_values_run_where_they_can),
        cmocka_unit_test(test_cudnn_attention_is_refused_without_cudnn_or_for_its_shapes),
        cmocka_unit_test(test_mma_and_reference_attention_refuse_head_sizes_they_lack),
        cmocka_unit_test(test_wgmma_attention_backward_is_refused_off_sm90_and_for_its_shapes),
        cmocka_unit_test(test_auto_moe_gemm_is_wgmma_on_sm90_and_mma_elsewhere),
        cmocka_unit_test(test_moe_gemm_refuses_widths_not_a_multiple_of_8_except_reference),
        cmocka_unit_test(test_wgmma_moe_gemm_is_refused_off_sm90),
        cmocka_unit_test(test_unknown_setting_values_are_refused),
        cmocka_unit_test(test_pdl_is_on_from_sm90_and_refused_below),
        cmocka_unit_test(test_graph_memset_node_keeps_memset_nodes),
        cmocka_unit_test(test_gpu_names_give_their_compute_capability),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
