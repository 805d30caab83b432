/* main.c - the gtrain binary: the CPU runtime set up, the stop signals installed, then the command
 * line dispatched through the command table (cli.h, cli_table.c). */
#include "blas_setup.h"
#include "cli.h"
#include "common.h"

int main(int argc, char **argv) {
    cpu_runtime_setup(argc, argv);
    gt_signals_install(); /* from the start: a SIGTERM while loading still ends cleanly */
    return cli_main(argc, argv);
}
