/* `graphtrain import --from hf`: a Hugging Face folder (config.json and safetensors, one file
 * or sharded with model.safetensors.index.json; F32, BF16 or F16) as an initial checkpoint
 * (see hf_convert.h). Every tensor the model needs must be there with its exact shape, and a
 * tensor the model has no place for is refused by name: nothing is silently dropped. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/keys.h"
#include "core/json.h"
#include "core/read_file.h"
#include "model/hf_names.h"
#include "train/checkpoint.h"
#include "train/ckpt_dir.h"
#include "train/hf_convert.h"
#include "train/trainer_sched.h"

#define HF_MAX_JSON (64u << 20)
#define HF_MAX_SHARDS 1024

/* Keys import sets, written to model.yaml so a training run takes the same shapes. */
static const char *const k_model_keys[] = {"model.num_layers",
                                           "model.hidden_size",
                                           "model.num_attention_heads",
                                           "model.num_query_groups",
                                           "model.ffn_hidden_size",
                                           "model.vocab_size",
                                           "model.share_embeddings_and_output_weights",
                                           "model.layernorm_epsilon",
                                           "model.rotary_base",
                                           "model.rope_scaling",
                                           "model.rope_scaling_factor",
                                           "model.qk_layernorm",
                                           "model.add_bias_linear",
                                           "model.add_qkv_bias",
                                           "model.num_moe_experts",
                                           "model.moe_ffn_hidden_size",
                                           "model.moe_router_topk",
                                           "model.moe_layer_freq",
                                           "model.moe_aux_loss_coeff",
                                           NULL};

typedef struct shard_set {
    gt_st_file files[HF_MAX_SHARDS];
    int n;
} shard_set;

static int read_json(const char *path, cJSON **out, gt_error *err) {
    char *text;
    size_t n;
    int rc = gt_read_file(path, HF_MAX_JSON, &text, &n, err);
    if (rc) return rc;
    *out = cJSON_ParseWithLength(text, n);
    free(text);
    if (!*out) return gt_error_set(err, GT_ERR_INVALID, "%s is not valid JSON", path);
    return GT_OK;
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static int has_file(const shard_set *s, const char *name) {
    for (int i = 0; i < s->n; i++) {
        const char *base = strrchr(s->files[i].path, '/');
        if (!strcmp(base ? base + 1 : s->files[i].path, name)) return 1;
    }
    return 0;
}

/* model.safetensors, or every file the index's weight_map names */
static int open_shards(const char *dir, shard_set *s, gt_error *err) {
    char path[1100];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (!file_exists(path)) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (!file_exists(path))
            return gt_error_set(err, GT_ERR_IO,
                                "%s has neither model.safetensors nor "
                                "model.safetensors.index.json; import reads safetensors weights "
                                "(convert .bin weights with transformers' save_pretrained)",
                                dir);
        int rc = gt_st_open(&s->files[0], path, err);
        if (!rc) s->n = 1;
        return rc;
    }
    cJSON *index;
    int rc = read_json(path, &index, err);
    if (rc) return rc;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
    if (!cJSON_IsObject(wm))
        rc = gt_error_set(err, GT_ERR_INVALID, "%s has no \"weight_map\" object", path);
    for (const cJSON *e = wm ? wm->child : NULL; !rc && e; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/'))
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "%s: weight_map entry '%s' must name a file in the folder", path,
                              e->string);
        else if (!has_file(s, e->valuestring)) {
            if (s->n == HF_MAX_SHARDS)
                rc = gt_error_set(err, GT_ERR_INVALID, "%s names more than %d files", path,
                                  HF_MAX_SHARDS);
            char sp[1200];
            snprintf(sp, sizeof sp, "%s/%s", dir, e->valuestring);
            if (!rc) rc = gt_st_open(&s->files[s->n], sp, err);
            if (!rc) s->n++;
        }
    }
    cJSON_Delete(index);
    return rc;
}

static void close_shards(shard_set *s) {
    for (int i = 0; i < s->n; i++)
        gt_st_close(&s->files[i]);
    s->n = 0;
}

static const gt_st_tensor *find(const shard_set *s, const char *name, int *file) {
    for (int i = 0; i < s->n; i++) {
        const gt_st_tensor *t = gt_st_find(&s->files[i], name);
        if (t) {
            *file = i;
            return t;
        }
    }
    return NULL;
}

static int in_map(const gt_hf_map *map, const char *name) {
    for (int i = 0; i < map->n; i++)
        if (!strcmp(map->t[i].name, name)) return 1;
    return 0;
}

/* Old Llama checkpoints carry the rotary inverse frequencies, which graphtrain computes. */
static int derived(const char *name) {
    const char *suffix = "rotary_emb.inv_freq";
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && !strcmp(name + n - k, suffix);
}

static int load_weights(const gt_hf_map *map, const shard_set *s, const char *dir, float *master,
                        gt_error *err) {
    for (int i = 0; i < s->n; i++)
        for (int j = 0; j < s->files[i].n; j++) {
            const char *name = s->files[i].tensors[j].name;
            if (!in_map(map, name) && !derived(name))
                return gt_error_set(err, GT_ERR_INVALID,
                                    "%s: tensor %s has no place in the %s graphtrain builds from "
                                    "config.json; an option graphtrain does not express is in "
                                    "use (or config.json does not match the weights)",
                                    s->files[i].path, name, gt_hf_arch_name(map->arch));
        }
    for (int i = 0; i < map->n; i++) {
        const gt_hf_tensor *h = &map->t[i];
        int f = 0;
        const gt_st_tensor *t = find(s, h->name, &f);
        if (!t)
            return gt_error_set(err, GT_ERR_INVALID, "%s: tensor %s is missing from the weights",
                                dir, h->name);
        int same = t->ndim == h->ndim && t->shape[0] == h->shape[0] &&
                   (h->ndim == 1 || t->shape[1] == h->shape[1]);
        if (!same)
            return gt_error_set(err, GT_ERR_INVALID,
                                "%s: tensor %s has shape [%lld, %lld] (%d-D); config.json implies "
                                "[%lld, %lld] (%d-D)",
                                s->files[f].path, h->name, (long long)t->shape[0],
                                (long long)(t->ndim > 1 ? t->shape[1] : 1), t->ndim,
                                (long long)h->shape[0], (long long)h->shape[1], h->ndim);
        int rc = gt_st_read(&s->files[f], t, master + h->offset, err);
        if (rc) return rc;
    }
    return GT_OK;
}

static int write_model_yaml(const char *out, const gt_config *cfg, const char *dir, gt_error *err) {
    char path[1100];
    snprintf(path, sizeof path, "%s/model.yaml", out);
    FILE *f = fopen(path, "w");
    if (!f) return gt_error_set(err, GT_ERR_IO, "cannot write %s", path);
    fprintf(f, "# the model of %s (graphtrain import --from hf); train it with --config %s\n", dir,
            path);
    fprintf(f, "model:\n");
    for (int i = 0; k_model_keys[i]; i++) {
        const gt_key *k = gt_config_find_key(k_model_keys[i]);
        char v[128];
        if (!k) continue;
        gt_config_format_value(cfg, k, v, sizeof v);
        fprintf(f, "  %s: %s\n", k_model_keys[i] + 6, v);
    }
    int bad = ferror(f);
    if (fclose(f) || bad) return gt_error_set(err, GT_ERR_IO, "writing %s failed", path);
    return GT_OK;
}

static int write_checkpoint(const char *out, const gt_config *cfg, const float *master, size_t n,
                            gt_error *err) {
    char file[1100];
    long long iter;
    gt_error none = {0};
    if (gt_ckpt_resolve(out, file, sizeof file, &iter, &none) != GT_ERR_IO)
        return gt_error_set(err, GT_ERR_INVALID,
                            "--out %s already holds a checkpoint; import into a new folder", out);
    float *zeros = calloc(n, sizeof *zeros);
    if (!zeros) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    gt_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.fingerprint = gt_ckpt_fingerprint(cfg, n, meta.shape, sizeof meta.shape);
    snprintf(meta.settings, sizeof meta.settings, "imported from Hugging Face weights");
    meta.n_params = n;
    meta.seed = cfg->rng.seed;
    meta.state.nan_step = -1;
    meta.state.inject_nan = -1;
    meta.sched = gt_trainer_ckpt_sched(cfg);
    char dir[GT_PATH_MAX + 32];
    gt_ckpt_dir d = {.lock_fd = -1, .most_recent_k = -1};
    snprintf(d.save, sizeof d.save, "%s", out);
    gt_ckpt_iter_path(out, 0, dir, sizeof dir);
    int rc = gt_ckpt_write(dir, &meta, master, zeros, zeros, err);
    if (!rc) rc = gt_ckpt_dir_commit(&d, 0, cfg, err);
    free(zeros);
    return rc;
}

int gt_hf_import(const char *dir, const char *out, FILE *log, gt_error *err) {
    gt_config *cfg = malloc(sizeof *cfg);
    shard_set *s = calloc(1, sizeof *s);
    if (!cfg || !s) {
        free(cfg);
        free(s);
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    }
    gt_config_defaults(cfg);
    char path[1100];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *hf = NULL;
    gt_hf_map map = {0};
    float *master = NULL;
    int rc = read_json(path, &hf, err);
    if (!rc) rc = gt_hf_config_apply(cfg, hf, dir, err);
    cJSON_Delete(hf);
    if (!rc) rc = gt_hf_map_create(&map, cfg, err);
    if (!rc) rc = open_shards(dir, s, err);
    if (!rc) {
        master = calloc(map.n_params, sizeof *master);
        if (!master) rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    }
    if (!rc) rc = load_weights(&map, s, dir, master, err);
    if (!rc) rc = write_checkpoint(out, cfg, master, map.n_params, err);
    if (!rc) rc = write_model_yaml(out, cfg, dir, err);
    if (!rc && log)
        fprintf(log,
                "imported %s (%s, %d tensors, %d file%s) into %s/iter_0000000; train with "
                "--config %s/model.yaml checkpoint.load=%s\n",
                dir, gt_hf_arch_name(map.arch), map.n, s->n, s->n == 1 ? "" : "s", out, out, out);
    if (rc) gt_error_wrap(err, "import --from hf %s: ", dir);
    close_shards(s);
    free(s);
    free(master);
    gt_hf_map_destroy(&map);
    free(cfg);
    return rc;
}
