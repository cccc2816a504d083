/* `graphtrain export --to hf`: a checkpoint's fp32 master weights as a Hugging Face folder
 * (see hf_convert.h). The configuration comes from the iteration's run_config.txt, so the
 * folder describes exactly the model the weights were trained as. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/keys.h"
#include "core/atomic_file.h"
#include "core/json.h"
#include "model/hf_names.h"
#include "train/checkpoint.h"
#include "train/ckpt_dir.h"
#include "train/hf_convert.h"
#include "train/hf_tokenizer_out.h"

#define HF_INDEX_FILE "model.safetensors.index.json"

/* "  model.num_layers   = 8" -> key, value (quotes and the empty list "[]" read as empty) */
static int parse_line(char *line, char **key, char **value) {
    char *eq = strstr(line, " = ");
    if (!eq || line[0] == '#') return 0;
    *eq = '\0';
    char *k = line, *v = eq + 3;
    while (*k == ' ')
        k++;
    for (char *e = eq - 1; e >= k && *e == ' '; e--)
        *e = '\0';
    size_t n = strlen(v);
    while (n && (v[n - 1] == '\n' || v[n - 1] == '\r'))
        v[--n] = '\0';
    if (!strcmp(v, "\"\"") || !strcmp(v, "[]")) v[0] = '\0';
    *key = k;
    *value = v;
    return 1;
}

int gt_hf_checkpoint_config(const char *ckpt, gt_config *cfg, char *file, size_t n, gt_error *err) {
    long long iter;
    int rc = gt_ckpt_resolve(ckpt, file, n, &iter, err);
    if (rc) return gt_error_wrap(err, "--checkpoint %s: ", ckpt);
    char path[1100];
    snprintf(path, sizeof path, "%s", file);
    char *slash = strrchr(path, '/');
    if (slash)
        snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "%s", GT_CKPT_CONFIG_FILE);
    else
        snprintf(path, sizeof path, "%s", GT_CKPT_CONFIG_FILE);
    FILE *f = fopen(path, "r");
    if (!f)
        return gt_error_set(
            err, GT_ERR_IO,
            "cannot open %s (%s): the checkpoint's configuration is needed to name "
            "its tensors; export a checkpoint written by graphtrain train or import",
            path, strerror(errno));
    gt_config_defaults(cfg);
    char line[1200];
    int lineno = 0;
    rc = GT_OK;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        char *key, *value;
        if (!parse_line(line, &key, &value)) continue;
        if (strncmp(key, "model.", 6) && strncmp(key, "train.", 6) && strncmp(key, "rng.", 4) &&
            strcmp(key, "dataset.data_path"))
            continue;
        rc = gt_config_set(cfg, key, value, err);
        if (rc) gt_error_wrap(err, "%s:%d: ", path, lineno);
    }
    fclose(f);
    return rc;
}

static int write_json(const char *dir, const char *name, cJSON *j, gt_error *err) {
    if (!j) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory writing %s", name);
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = gt_json_write_file(path, j, err);
    cJSON_Delete(j);
    return rc;
}

/* Shards of at most max bytes each (a tensor larger than that gets a shard of its own). */
static int count_shards(const gt_hf_map *map, gt_st_dtype dt, uint64_t max, int *shard_of) {
    int shard = 0;
    uint64_t used = 0;
    for (int i = 0; i < map->n; i++) {
        uint64_t b = (uint64_t)gt_hf_numel(&map->t[i]) * gt_st_dtype_bytes(dt);
        if (used > 0 && used + b > max) {
            shard++;
            used = 0;
        }
        used += b;
        shard_of[i] = shard;
    }
    return shard + 1;
}

static void shard_name(char *buf, size_t n, int shard, int shards) {
    if (shards == 1)
        snprintf(buf, n, "model.safetensors");
    else
        snprintf(buf, n, "model-%05d-of-%05d.safetensors", shard + 1, shards);
}

static int write_shards(const gt_hf_map *map, const float *master, const char *out,
                        const gt_hf_export_opts *o, int *n_shards, gt_error *err) {
    int *shard_of = malloc((size_t)map->n * sizeof *shard_of);
    gt_st_tensor *t = calloc((size_t)map->n, sizeof *t);
    cJSON *index = cJSON_CreateObject();
    cJSON *meta = index ? cJSON_AddObjectToObject(index, "metadata") : NULL;
    cJSON *wmap = index ? cJSON_AddObjectToObject(index, "weight_map") : NULL;
    int rc = shard_of && t && meta && wmap ? GT_OK
                                           : gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    int shards = rc ? 0 : count_shards(map, o->dtype, o->max_shard_bytes, shard_of);
    uint64_t total = 0;
    for (int i = 0; !rc && i < map->n; i++) {
        const gt_hf_tensor *h = &map->t[i];
        snprintf(t[i].name, sizeof t[i].name, "%s", h->name);
        t[i].dtype = o->dtype;
        t[i].ndim = h->ndim;
        t[i].shape[0] = h->shape[0];
        t[i].shape[1] = h->shape[1];
        t[i].data = master + h->offset;
        total += (uint64_t)gt_hf_numel(h) * gt_st_dtype_bytes(o->dtype);
        char name[64];
        shard_name(name, sizeof name, shard_of[i], shards);
        if (!cJSON_AddStringToObject(wmap, h->name, name))
            rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    }
    for (int s = 0, first = 0; !rc && s < shards; s++) {
        int last = first;
        while (last < map->n && shard_of[last] == s)
            last++;
        char name[64], path[1100];
        shard_name(name, sizeof name, s, shards);
        snprintf(path, sizeof path, "%s/%s", out, name);
        rc = gt_st_write(path, t + first, last - first, err);
        first = last;
    }
    if (!rc && shards > 1) {
        if (!cJSON_AddItemToObject(meta, "total_size", gt_json_u64(total)))
            rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
        if (!rc) {
            rc = write_json(out, HF_INDEX_FILE, index, err);
            index = NULL;
        }
    }
    cJSON_Delete(index);
    free(t);
    free(shard_of);
    *n_shards = shards;
    return rc;
}

/* A folder written before with other shard counts keeps no stale weights beside the new. */
static void remove_old(const char *out, int shards) {
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", out, HF_INDEX_FILE);
    if (shards == 1) remove(path);
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    if (shards > 1) remove(path);
}

/* The tokenizer of the checkpoint's data (PREFIX.vocab beside dataset.data_path's shards, as
 * prepare-data wrote it) as tokenizer.json and tokenizer_config.json. No known tokenizer is
 * not an error: the weights are exported and a note says what is missing. */
static int write_tokenizer(const gt_config *cfg, const char *out, FILE *log, gt_error *err) {
    const char *prefix = cfg->dataset.data_path;
    char path[1100];
    snprintf(path, sizeof path, "%s.vocab", prefix);
    if (!prefix[0] || access(path, R_OK)) {
        if (log)
            fprintf(log,
                    "note: no tokenizer files written: the checkpoint's data has no "
                    "vocabulary file (%s)\n",
                    prefix[0] ? path : "it was trained without dataset.data_path");
        return GT_OK;
    }
    gt_tokenizer *tk = NULL;
    int rc = gt_tokenizer_load(&tk, path, err);
    if (rc) return gt_error_wrap(err, "export --to hf: the data's tokenizer: ");
    if (!gt_hf_tokenizer_usable(tk)) {
        if (log)
            fprintf(log,
                    "note: no tokenizer files written: %s was made from a Hugging Face "
                    "tokenizer.json; copy that file beside the export\n",
                    path);
        gt_tokenizer_destroy(tk);
        return GT_OK;
    }
    rc = write_json(out, "tokenizer.json", gt_hf_tokenizer_json(tk), err);
    if (!rc)
        rc = write_json(out, "tokenizer_config.json",
                        gt_hf_tokenizer_config_json(tk, cfg->model.seq_length), err);
    if (!rc && log) fprintf(log, "wrote tokenizer.json and tokenizer_config.json from %s\n", path);
    gt_tokenizer_destroy(tk);
    return rc;
}

int gt_hf_export(const char *ckpt, const char *out, const gt_hf_export_opts *o, FILE *log,
                 gt_error *err) {
    gt_config *cfg = malloc(sizeof *cfg);
    if (!cfg) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    char file[1100];
    gt_hf_map map = {0};
    gt_ckpt_meta meta = {0};
    float *master = NULL, *m = NULL, *v = NULL;
    int rc = gt_hf_checkpoint_config(ckpt, cfg, file, sizeof file, err);
    if (!rc) {
        rc = gt_hf_map_create(&map, cfg, err);
        if (rc) gt_error_wrap(err, "export --to hf: the checkpoint's model: ");
    }
    if (!rc) rc = gt_ckpt_read(file, &meta, &master, &m, &v, err);
    free(m);
    free(v);
    if (!rc && meta.n_params != map.n_params)
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "%s holds %llu parameters but its run_config.txt describes a model of "
                          "%zu; the folder is inconsistent",
                          file, (unsigned long long)meta.n_params, map.n_params);
    if (!rc) rc = gt_mkdirs(out, err);
    int shards = 0;
    if (!rc) rc = write_shards(&map, master, out, o, &shards, err);
    if (!rc) remove_old(out, shards);
    if (!rc) rc = write_json(out, "config.json", gt_hf_config_json(cfg, &map), err);
    if (!rc) rc = write_json(out, "generation_config.json", gt_hf_generation_config_json(cfg), err);
    if (!rc) rc = write_tokenizer(cfg, out, log, err);
    if (!rc && log)
        fprintf(log, "exported %s (step %lld) to %s: %s, %d tensors in %d file%s (%s)\n", file,
                (long long)meta.state.step, out, gt_hf_arch_name(map.arch), map.n, shards,
                shards == 1 ? "" : "s", gt_st_dtype_name(o->dtype));
    free(master);
    gt_hf_map_destroy(&map);
    free(cfg);
    return rc;
}
