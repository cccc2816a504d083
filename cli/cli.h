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

#endif
