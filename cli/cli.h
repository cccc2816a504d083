/* Commands of the graphtrain binary; each takes the arguments after its name. */
#ifndef GT_CLI_CLI_H
#define GT_CLI_CLI_H

int gt_cmd_validate(int argc, char **argv);
int gt_cmd_recipes(int argc, char **argv);
int gt_cmd_train(int argc, char **argv);
int gt_cmd_bench(int argc, char **argv);
int gt_cmd_prepare_data(int argc, char **argv);
int gt_cmd_tune_gemm(int argc, char **argv);
int gt_cmd_export(int argc, char **argv);
int gt_cmd_import(int argc, char **argv);
int gt_cmd_generate(int argc, char **argv);
int gt_cmd_logits(int argc, char **argv);

/* cmd_train.c, shared with cmd_bench.c: the launcher's world against runtime.num_gpus /
 * ddp.data_parallel_size (1 takes the world's size, another number must match), and the
 * communicator of this process with its NCCL rendezvous (ddp.nccl_id_file, the job's tag). */
#include "config/config.h"
#include "dist/comm.h"
int gt_cli_reconcile_world(gt_config *cfg, const gt_world *w, gt_error *err);
int gt_cli_make_comm(gt_comm **comm, const gt_world *w, const gt_config *cfg, gt_error *err);

#endif
