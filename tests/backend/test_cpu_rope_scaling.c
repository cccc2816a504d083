/* Llama 3.1's rotary scaling on the CPU reference (rope_scaled_fwd / rope_scaled_bwd): each
 * pair's frequency is Hugging Face's llama3 rule (written here from its definition), the
 * high frequencies stay exactly unscaled, and the backward is the adjoint. */
#define FD_EPS 1e-2
#define FD_FLOOR 1e-2
#define FD_REL_TOL 2e-3
#include "cpu_op_fixture.h"

#include <string.h>

static int setup(void **state) {
    return fixture_setup(state, 777u);
}
static int teardown(void **state) {
    return fixture_teardown(state, 1);
}

/* transformers' _compute_llama3_parameters for one frequency */
static double hf_llama3(double f, double factor) {
    double orig = 8192, low = 1, high = 4, pi = 3.14159265358979323846;
    double wavelen = 2 * pi / f;
    double scaled = wavelen > orig / low ? f / factor : f;
    double smooth = (orig / wavelen - low) / (high - low);
    double smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
    int medium = !(wavelen < orig / high) && !(wavelen > orig / low);
    return medium ? smoothed : scaled;
}

/* q head 0 of token t = 1 holds (1, 0) in every pair: the output pair is (cos f, sin f) */
static void test_scaled_frequencies_follow_transformers_llama3_rule(void **state) {
    fixture *f = *state;
    int B = 1, T = 2, H = 1, KV = 1, hd = 128, C = (H + 2 * KV) * hd, half = hd / 2;
    float theta = 500000.0f, factor = 8.0f;
    float *x = zeros((size_t)T * C);
    for (int i = 0; i < half; i++)
        x[C + i] = 1.0f;
    f->b->ops->rope_scaled_fwd(f->b, f->s, x, B, T, H, KV, hd, theta, factor);
    int kept = 0, divided = 0, blended = 0;
    for (int i = 0; i < half; i++) {
        double base = pow((double)theta, -2.0 * i / hd), want = hf_llama3(base, factor);
        double got = atan2(x[C + i + half], x[C + i]);
        assert_float_equal(got, want, 1e-6 + 1e-6 * want);
        kept += want == base;
        divided += want == base / factor;
        blended += want != base && want != base / factor;
    }
    /* hd 128 at base 500000 reaches every regime of the rule */
    assert_true(kept > 0 && divided > 0 && blended > 0);
    free(x);
}

static void test_scaled_rope_keeps_high_frequencies_bitwise(void **state) {
    fixture *f = *state;
    int B = 2, T = 6, H = 2, KV = 1, hd = 8;
    size_t n = (size_t)B * T * (H + 2 * KV) * hd;
    /* theta 10: every wavelength is below 8192 / 4, so no frequency changes */
    float *x = rand_buf(f, n, 1), *y = malloc(n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    f->b->ops->rope_fwd(f->b, f->s, x, B, T, H, KV, hd, 10.0f);
    f->b->ops->rope_scaled_fwd(f->b, f->s, y, B, T, H, KV, hd, 10.0f, 8.0f);
    assert_memory_equal(x, y, n * sizeof *x);
    free(x), free(y);
}

typedef struct ctx {
    fixture *f;
    float *qkv, *tmp, *g;
    size_t n;
} ctx;

static double loss(void *p) {
    ctx *c = p;
    memcpy(c->tmp, c->qkv, c->n * sizeof(float));
    c->f->b->ops->rope_scaled_fwd(c->f->b, c->f->s, c->tmp, 1, 5, 2, 1, 64, 500000.0f, 8.0f);
    return dotd(c->g, c->tmp, c->n);
}

static void test_scaled_rope_backward_is_the_adjoint(void **state) {
    fixture *f = *state;
    size_t n = (size_t)5 * (2 + 2) * 64;
    ctx c = {f, rand_buf(f, n, 1), zeros(n), rand_buf(f, n, 1), n};
    float *d = malloc(n * sizeof *d);
    memcpy(d, c.g, n * sizeof *d);
    f->b->ops->rope_scaled_bwd(f->b, f->s, d, 1, 5, 2, 1, 64, 500000.0f, 8.0f);
    assert_true(fd_max_err(loss, &c, c.qkv, n, d, "scaled rope dqkv") < FD_REL_TOL);
    free(c.qkv), free(c.tmp), free(c.g), free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scaled_frequencies_follow_transformers_llama3_rule),
        cmocka_unit_test(test_scaled_rope_keeps_high_frequencies_bitwise),
        cmocka_unit_test(test_scaled_rope_backward_is_the_adjoint),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
