/* The median of a set of timings (bench steps, tune-gemm's step and GEMM samples). */
#ifndef GT_CORE_MEDIAN_H
#define GT_CORE_MEDIAN_H

/* Median of v[0..n) (the mean of the two middle values for even n; 0 for n <= 0). Sorts v in
 * place. */
double gt_median(double *v, int n);

#endif
