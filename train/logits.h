/* The logits a checkpoint's model gives a token sequence, on a chosen backend (graphtrain
 * logits): the forward pass without dropout, for checks against other implementations
 * (bench/hf_parity.py compares them with transformers'), with the mean next-token cross
 * entropy of the sequence. */
#ifndef GT_TRAIN_LOGITS_H
#define GT_TRAIN_LOGITS_H

#include <stdint.h>

#include "config/config.h"
#include "core/error.h"

/* Logits [T, V] (malloc'ed fp32, *V set) of tokens[T] under checkpoint ckpt on device
 * (GT_DEVICE_CPU: the fp32 reference; GT_DEVICE_CUDA: bf16 parameters and activations; auto:
 * CUDA when usable); *loss = mean over t < T-1 of -log softmax(logits[t])[tokens[t+1]], in
 * double from the logits as returned. */
int gt_checkpoint_logits(const char *ckpt, gt_device_kind device, const int32_t *tokens, int T,
                         float **logits, int *V, double *loss, gt_error *err);

#endif
