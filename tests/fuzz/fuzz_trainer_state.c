/* fuzz_trainer_state.c - libFuzzer target: a checkpoint's trainer_state.json reader
 * (checkpoint_read_state on a temp directory holding the input). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/gtrain-fuzz-state-XXXXXX");
    if (!mkdtemp(dir)) return 0;
    char path[128];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    FILE *f = fopen(path, "wb");
    if (f) {
        bool ok = fwrite(data, 1, size, f) == size;
        if (fclose(f) == 0 && ok) {
            TrainerState st;
            GtError err = {0};
            if (checkpoint_read_state(dir, &st, &err) == 0) {
                if (st.global_step < 0 || st.effective_batch < 1 || st.world_size < 1 ||
                    st.per_device_train_batch_size < 1 || st.gradient_accumulation_steps < 1 || st.adam_t < 0)
                    abort();
            } else if (err.code == 0 || !err.msg[0]) {
                abort();
            }
        }
        unlink(path);
    }
    rmdir(dir);
    return 0;
}
