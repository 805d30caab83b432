/* fuzz_tokenizer_special.c - libFuzzer target: the files beside a tokenizer.json that name its
 * BOS/EOS/PAD (tokenizer_special.c): the input is written, by its first byte, as
 * tokenizer_config.json, special_tokens_map.json, generation_config.json or config.json of a
 * scratch directory holding tok_fixture.h's tokenizer.json, which is then loaded. Must hold: a
 * refusal has code 2 and a one-line message naming the file; an accepted one gives ids inside the
 * vocabulary (or -1) and a line that describes them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "tok_fixture.h"
#include "tokenizer.h"

static char g_dir[64];
static const char *const FILES[] = {"tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                                    "config.json"};

static void cleanup(void) { fuzz_rm_tree(g_dir); }

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/gtrain-fuzz-toksp-XXXXXX");
    if (!mkdtemp(g_dir)) abort();
    atexit(cleanup);
    char *json = tok_fixture_json();
    fuzz_put(g_dir, "tokenizer.json", json, strlen(json));
    free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dir[0]) setup();
    if (size < 1) return 0;
    const char *name = FILES[data[0] % 4];
    for (int i = 0; i < 4; i++) {
        char p[128];
        snprintf(p, sizeof p, "%s/%s", g_dir, FILES[i]);
        unlink(p);
    }
    fuzz_put(g_dir, name, data + 1, size - 1);
    Tokenizer *t = NULL;
    GtError err = {0};
    if (tokenizer_load(&t, g_dir, &err) == 0) {
        const int ids[3] = {tokenizer_bos_id(t), tokenizer_eos_id(t), tokenizer_pad_id(t)};
        for (int k = 0; k < 3; k++)
            if (ids[k] < -1 || ids[k] >= tokenizer_vocab_size(t)) abort();
        char line[600];
        if (strncmp(tokenizer_special_line(t, line, sizeof line), "special tokens:", 15) != 0) abort();
        tokenizer_free(t);
    } else if (err.code != GT_EXIT_BAD_INPUT || !err.msg[0] || strchr(err.msg, '\n') || !strstr(err.msg, name)) {
        abort(); /* refused without one line naming the file */
    }
    return 0;
}
