/* test_data_order.c - data.shuffle = false: training rows in file order, epoch after epoch
 * (data_fill_train with shuffle false), against the order computed here from the examples / bytes
 * this test writes: jsonl example i % n, packed jsonl row i % rows, text windows i % W of the stream
 * at w * seq_len, for the global row i = step * effective_batch + g, whatever the micro-batch / rank
 * split, the seed or the step the rows are asked at (what a resume does); and through the binary, a
 * run in file order resumed from a checkpoint is the unbroken run bit for bit, while resuming it
 * with the order changed is refused (the order is part of the run's identity, as the seed is). */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include "test_util.h"

#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "run_util.h"
#include "test_backend_select.h"

enum { N_EX = 7, T_ROW = 8, MAX_LEN = 16 };

/* Example e: a prompt of e % 3 + 1 tokens 1 + e, then (e * 5) % 4 + 1 completion tokens 40 + e + k
 * (rows of 2 .. 7 tokens), except example 6: 1 + 9 tokens, cut to seq_len + 1 = 9. */
static int example_ids(int e, int *ids, int *plen) {
    int p = e % 3 + 1, c = (e * 5) % 4 + 1 + (e == 6 ? 6 : 0); /* example 6 is truncated (10 > 9) */
    for (int k = 0; k < p; k++) ids[k] = 1 + e;
    for (int k = 0; k < c; k++) ids[p + k] = 40 + e + k;
    *plen = p;
    return p + c;
}

static char *jsonl_text(void) {
    static char buf[4096];
    buf[0] = 0;
    for (int e = 0; e < N_EX; e++) {
        int ids[MAX_LEN], plen, len = example_ids(e, ids, &plen);
        strcat(buf, "{\"prompt_ids\": [");
        for (int k = 0; k < len; k++) {
            char num[48];
            snprintf(num, sizeof num, "%s%d", k == plen ? "], \"completion_ids\": [" : k ? ", " : "", ids[k]);
            strcat(buf, num);
        }
        strcat(buf, "]}\n");
    }
    return buf;
}

static DataSource *open_mem(const char *name, const void *buf, size_t n, DataFormat fmt, bool packing, int T) {
    DataSource *d = NULL;
    GtError err = {0};
    cr_assert_eq(data_open_memory(&d, name, buf, n, fmt, packing, T, 256, DATA_SPLIT_ALL, 0.0, &err), 0, "%s",
                 err.msg);
    return d;
}

/* Rows of steps 0 .. n_steps-1 (effective batch eb) asked in three splits -- whole steps, one row
 * at a time from the last step down (a resume asks a later step first), and "ranks" of 2 rows with
 * another seed -- must all equal want(i) for the global row i. */
typedef void (*WantFn)(long i, int *tok, int *tgt);

static void check_order(const DataSource *d, long eb, long n_steps, WantFn want) {
    const int T = data_seq_len(d);
    int *a = malloc(sizeof(int) * (size_t)(eb * T)), *ag = malloc(sizeof(int) * (size_t)(eb * T));
    int wt[MAX_LEN], wg[MAX_LEN];
    cr_assert(a && ag && T <= MAX_LEN);
    for (int split = 0; split < 3; split++)
        for (long k = 0; k < n_steps; k++) {
            long step = split == 1 ? n_steps - 1 - k : k;
            if (split == 0) data_fill_train(d, 1, false, step, eb, 0, (int)eb, a, ag);
            if (split == 1)
                for (long g = eb - 1; g >= 0; g--) data_fill_train(d, 5, false, step, eb, g, 1, a + g * T, ag + g * T);
            if (split == 2)
                for (long g = 0; g < eb; g += 2)
                    data_fill_train(d, 0xfeedull, false, step, eb, g, (int)(g + 2 <= eb ? 2 : 1), a + g * T, ag + g * T);
            for (long g = 0; g < eb; g++) {
                long i = step * eb + g;
                want(i, wt, wg);
                for (int t = 0; t < T; t++) {
                    cr_assert_eq(a[g * T + t], wt[t], "split %d step %ld row %ld (global %ld) token %d: %d, want %d",
                                 split, step, g, i, t, a[g * T + t], wt[t]);
                    cr_assert_eq(ag[g * T + t], wg[t], "split %d step %ld row %ld (global %ld) target %d: %d, want %d",
                                 split, step, g, i, t, ag[g * T + t], wg[t]);
                }
            }
        }
    free(a);
    free(ag);
}

/* jsonl: global row i is example i % N_EX, prompt then completion, cut to T + 1, padded with 0;
 * a target is the next token where that token is a completion token, else -100. */
static void want_jsonl(long i, int *tok, int *tgt) {
    int ids[MAX_LEN], plen, len = example_ids((int)(i % N_EX), ids, &plen);
    if (len > T_ROW + 1) len = T_ROW + 1;
    for (int t = 0; t < T_ROW; t++) {
        tok[t] = t < len ? ids[t] : 0;
        tgt[t] = t + 1 < len && t + 1 >= plen ? ids[t + 1] : -100;
    }
}

Test(data, shuffle_false_jsonl_in_file_order) {
    const char *text = jsonl_text();
    DataSource *d = open_mem("order.jsonl", text, strlen(text), DATA_JSONL, false, T_ROW);
    cr_assert_eq(data_num_tokens(d), N_EX);
    check_order(d, 3, 6, want_jsonl);  /* 18 rows: past the end of epoch 1 */
    check_order(d, 8, 3, want_jsonl);  /* an effective batch larger than the file */
    check_order(d, 1, 15, want_jsonl); /* one row per step */
    data_close(d);
}

/* text: W = floor((n - 1) / T) windows, window w = bytes [w*T, w*T + T] */
static uint8_t g_text[203];
enum { TXT_T = 10 };

static void want_text(long i, int *tok, int *tgt) {
    long W = (long)(sizeof g_text - 1) / TXT_T, s = (i % W) * TXT_T;
    for (int t = 0; t < TXT_T; t++) {
        tok[t] = g_text[s + t];
        tgt[t] = g_text[s + t + 1];
    }
}

Test(data, shuffle_false_text_consecutive_windows) {
    uint32_t x = 12345;
    for (size_t k = 0; k < sizeof g_text; k++) {
        x = x * 1664525u + 1013904223u;
        g_text[k] = (uint8_t)(x >> 24);
    }
    DataSource *d = open_mem("order.txt", g_text, sizeof g_text, DATA_TEXT, false, TXT_T);
    check_order(d, 7, 7, want_text); /* 49 rows over 20 windows: wraps twice */
    check_order(d, 4, 6, want_text);
    data_close(d);
}

/* token shards (llm.c's two layouts, written here byte by byte), train split: the first 3/4 */
static uint32_t g_shard_tok[301];
static long g_shard_train;
enum { SH_T = 16 };

static void want_shard(long i, int *tok, int *tgt) {
    long W = (g_shard_train - 1) / SH_T, s = (i % W) * SH_T;
    for (int t = 0; t < SH_T; t++) {
        tok[t] = (int)g_shard_tok[s + t];
        tgt[t] = (int)g_shard_tok[s + t + 1];
    }
}

Test(data, shuffle_false_token_shards_consecutive_windows) {
    const int n = (int)(sizeof g_shard_tok / sizeof g_shard_tok[0]);
    static uint8_t buf[1024 + 4 * 301];
    for (int layout = 0; layout < 2; layout++) { /* GPT-2 (uint16), Llama-3 (uint32) */
        const int wide = layout == 1;
        const int32_t hdr[3] = {wide ? 20240801 : 20240520, wide ? 7 : 1, n};
        memset(buf, 0, sizeof buf);
        for (int k = 0; k < 3; k++)
            for (int b = 0; b < 4; b++) buf[4 * k + b] = (uint8_t)((uint32_t)hdr[k] >> (8 * b));
        uint32_t x = 99u + (uint32_t)layout;
        for (int k = 0; k < n; k++) {
            x = x * 1664525u + 1013904223u;
            g_shard_tok[k] = wide ? 70000u + (x >> 20) : x >> 17; /* > 65535 only in the wide layout */
            for (int b = 0; b < (wide ? 4 : 2); b++)
                buf[1024 + (size_t)k * (wide ? 4 : 2) + (size_t)b] = (uint8_t)(g_shard_tok[k] >> (8 * b));
        }
        size_t len = 1024 + (size_t)n * (wide ? 4 : 2);
        DataSource *d = NULL;
        GtError err = {0};
        cr_assert_eq(data_open_memory(&d, "order.bin", buf, len, DATA_TOKENS, false, SH_T, 1 << 21, DATA_SPLIT_TRAIN,
                                      0.25, &err), 0, "%s", err.msg);
        g_shard_train = (long)data_num_tokens(d);
        cr_assert_eq(g_shard_train, (long)(n * 0.75), "the train split is the first 3/4 of the tokens");
        check_order(d, 5, 6, want_shard); /* 30 rows over floor((225 - 1) / 16) = 14 windows */
        data_close(d);
    }
}

/* packed jsonl: the packed rows (test_packing.c checks them against a naive first-fit
 * decreasing) in their order, row i % rows, epoch after epoch */
static DataSource *g_pk_src;
enum { PK_T = 12 };

static void want_packed(long i, int *tok, int *tgt) {
    data_fill_eval(g_pk_src, (long)(i % data_num_eval_windows(g_pk_src)), 1, tok, tgt);
}

Test(data, shuffle_false_packed_rows_in_order) {
    const char *text = jsonl_text();
    DataSource *d = open_mem("order.jsonl", text, strlen(text), DATA_JSONL, true, PK_T);
    g_pk_src = d;
    cr_assert_lt(data_num_eval_windows(d), N_EX, "several examples a row");
    check_order(d, 3, 9, want_packed); /* 27 rows over fewer packed rows: wraps */
    data_close(d);
}

Test(data, shuffle_false_run_resumes_in_order_and_refuses_a_changed_order, .timeout = 120) {
    Ws w;
    ws_init(&w);
    char ref[400], from[500], od[420];
    /* the reliability fixture (text, save_steps 1, last 3 kept) in file order, 6 steps */
    reference_run(&w, ref, sizeof ref, "data.shuffle=false", "max_steps=6", NULL);
    snprintf(from, sizeof from, "resume_from_checkpoint=%s/checkpoint-4", ref);
    snprintf(od, sizeof od, "output_dir=%s", w.out);
    int st = run(&w, NULL, "resumed", "data.shuffle=false", "max_steps=6", from, od, NULL);
    expect_exit(&w, "resumed", st, 0);
    expect_same_run(ref, w.out, 6);
    st = run(&w, NULL, "reshuffled", "data.shuffle=true", "max_steps=8", "resume_from_checkpoint=latest", od, NULL);
    expect_one_line(&w, "reshuffled", st, 2, "output_dir", "a different run");
    ws_fini(&w);
}
