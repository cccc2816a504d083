/* The data's tokenizer as Hugging Face files for `graphtrain export --to hf`: tokenizer.json
 * (byte-level BPE) and tokenizer_config.json; see hf_tokenizer_out.c. */
#ifndef GT_TRAIN_HF_TOKENIZER_OUT_H
#define GT_TRAIN_HF_TOKENIZER_OUT_H

#include <cjson/cJSON.h>

#include "data/tokenizer.h"

/* 0 for a vocabulary that cannot encode (read back from the .vocab of a Hugging Face
 * tokenizer.json, whose options live only in that file): its tokenizer.json is the original */
int gt_hf_tokenizer_usable(const gt_tokenizer *tk);
/* tokenizer.json and tokenizer_config.json for tk (NULL when out of memory). */
cJSON *gt_hf_tokenizer_json(const gt_tokenizer *tk);
cJSON *gt_hf_tokenizer_config_json(const gt_tokenizer *tk, int model_max_length);

#endif
