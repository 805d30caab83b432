/* fail.cpp - gtcsim::fail (gtcsim.h): the CUDA simulator's one way to stop on a misuse, shared by
 * its runtime and the stand-in runtimes of the NCCL model's own tests (tests/cudasim/). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "gtcsim.h"

void gtcsim::fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("gtcsim: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    abort();
}
