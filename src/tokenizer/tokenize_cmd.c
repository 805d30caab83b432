/* tokenize_cmd.c - `gtrain tokenize` (see tokenize_cmd.h): inputs read in batches of documents or
 * lines, each batch encoded (or decoded) in parallel into per-item results, then written in input
 * order to stdout or to one llm.c shard. */
#define _POSIX_C_SOURCE 200809L
#include "tokenize_cmd.h"

#include <errno.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"
#include "json_string.h"
#include "outguard.h"
#include "tokenizer.h"

#define BATCH_LINES 65536
#define BATCH_DOCUMENTS 1024
#define BATCH_BYTES ((uint64_t)16 << 20)
#define MAX_LINE_BYTES ((size_t)1 << 30)
#define READ_CHUNK_BYTES ((size_t)1 << 20)
#define MAX_THREADS 4096

typedef enum { MODE_ENCODE_DOCUMENTS, MODE_ENCODE_JSONL, MODE_DECODE_IDS, MODE_DECODE_JSONL } TokenizeMode;

typedef struct {
    const char *tokenizer, *out;
    bool jsonl, add_special, decode, skip_special;
    int threads; /* 0: OpenMP's default */
    const char *const *inputs; /* "-" is stdin */
    int n_inputs;
} TokenizeOptions;

/* One document or one line of a batch, and what became of it. */
typedef struct {
    const char *text; /* documents: `owned`; lines: into the batch's arena (set once the batch is read) */
    size_t off, len;
    uint8_t *owned;
    int input;   /* index into the inputs */
    size_t line; /* 1-based line of its input (line modes), 0 for a document */
    TokIds ids;  /* encode: its ids; decode: the ids read */
    GtBytes out; /* what is printed for it */
    GtError *err;  /* set when it failed */
} Item;

typedef struct {
    Item *items; /* kept across batches: their buffers are reused */
    size_t n, cap;
    GtBytes arena; /* line modes: the lines' text */
    uint64_t bytes;  /* input bytes in the batch */
} Batch;

/* Line modes: the input being read, a chunk at a time. */
typedef struct {
    FILE *f;
    bool close_f;
    int input; /* index of the input it reads, -1 when none is open */
    size_t line;
    char *buf;
    size_t start, end;
    bool eof;
} LineReader;

typedef struct {
    const TokenizeOptions *o;
    TokenizeMode mode;
    const Tokenizer *tok;
    const char **names; /* the inputs as messages name them ("<stdin>" for "-") */
} Context;

typedef struct {
    bool on;
    double t0, last;
    uint64_t total; /* bytes of all inputs, 0 when unknown (stdin) */
} Progress;

/* ---------------------------------------------------------------------------------------------
 * options (their table: TOKENIZE_OPTIONS in cli_table.c) */

/* the options of one form only: --data FILE's, and the others' */
static const char *const DATA_ONLY[] = {"format", "column", "prompt-template", "completion-template", "no-eos",
                                        "chat-template", "mask", "render", NULL};
static const char *const TEXT_ONLY[] = {"jsonl", "add-special-tokens", "decode", "skip-special-tokens", "out", "threads",
                                        NULL};

/* Returns 0 to run, else the exit status of a usage error. */
static int parse_options(const CliArgs *a, TokenizeOptions *o) {
    for (int i = 0; DATA_ONLY[i]; i++)
        if (cli_given(a, DATA_ONLY[i])) return cli_error(a->cmd, "--%s: only with --data FILE", DATA_ONLY[i]);
    o->tokenizer = cli_value(a, "tokenizer");
    o->out = cli_value(a, "out");
    o->jsonl = cli_given(a, "jsonl");
    o->add_special = cli_given(a, "add-special-tokens");
    o->decode = cli_given(a, "decode");
    o->skip_special = cli_given(a, "skip-special-tokens");
    const char *threads = cli_value(a, "threads");
    long long v = 0;
    if (threads && !cli_parse_count(threads, 1, MAX_THREADS, &v))
        return cli_error(a->cmd, "--threads: expected an integer in [1, %d], found \"%s\"", MAX_THREADS, threads);
    o->threads = (int)v;
    if (!o->tokenizer || !*o->tokenizer)
        return cli_error(a->cmd, "--tokenizer FILE|DIR is required: a tokenizer.json, or a directory holding one%s",
                         o->tokenizer ? "; found \"\"" : "");
    if (o->out && !*o->out) return cli_error(a->cmd, "--out: expected a file name, found \"\"");
    if (o->decode && o->add_special) return cli_error(a->cmd, "--add-special-tokens: only when encoding (not with --decode)");
    if (o->decode && o->out) return cli_error(a->cmd, "--out: only when encoding (a shard holds ids, --decode prints text)");
    if (o->skip_special && !o->decode) return cli_error(a->cmd, "--skip-special-tokens: only with --decode");
    for (int i = 0; i < a->n_operands; i++)
        if (!*a->operands[i]) return cli_error(a->cmd, "an input file named \"\", expected a path or -");
    o->inputs = (const char *const *)a->operands;
    o->n_inputs = a->n_operands;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * reading inputs */

static const char *input_name(const char *arg) { return strcmp(arg, "-") == 0 ? "<stdin>" : arg; }

/* All of stdin into a fresh buffer. */
static int read_stream(FILE *f, const char *name, uint8_t **buf, size_t *len, GtError *err) {
    size_t cap = READ_CHUNK_BYTES, n = 0;
    uint8_t *b = malloc(cap);
    if (!b) return gt_error(err, GT_EXIT_FAILURE, "%s: out of host memory", name);
    for (;;) {
        if (n == cap) {
            uint8_t *nb = cap <= SIZE_MAX / 2 ? realloc(b, cap * 2) : NULL;
            if (!nb) {
                free(b);
                return gt_error(err, GT_EXIT_FAILURE, "%s: out of host memory reading %zu bytes", name, n);
            }
            b = nb;
            cap *= 2;
        }
        size_t got = fread(b + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(b);
        return gt_error(err, GT_EXIT_FAILURE, "%s: read error: %s", name, strerror(errno));
    }
    *buf = b;
    *len = n;
    return 0;
}

static Item *batch_add(Batch *b) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        b->items = gt_xrealloc(b->items, cap * sizeof *b->items);
        memset(b->items + b->cap, 0, (cap - b->cap) * sizeof *b->items);
        b->cap = cap;
    }
    Item *it = &b->items[b->n++];
    it->text = NULL;
    it->off = it->len = 0;
    it->owned = NULL;
    it->line = 0;
    it->ids.n = 0;
    it->out.n = 0;
    it->err = NULL;
    return it;
}

/* What the last batch owned is released (the items' reusable buffers stay). */
static void batch_clear(Batch *b) {
    for (size_t i = 0; i < b->n; i++) {
        free(b->items[i].owned);
        free(b->items[i].err);
        b->items[i].owned = NULL;
        b->items[i].err = NULL;
    }
    b->n = 0;
    b->arena.n = 0;
    b->bytes = 0;
}

static void batch_free(Batch *b) {
    batch_clear(b);
    for (size_t i = 0; i < b->cap; i++) {
        tok_ids_free(&b->items[i].ids);
        gt_bytes_free(&b->items[i].out);
    }
    free(b->items);
    gt_bytes_free(&b->arena);
}

/* Documents: the next inputs, whole, from *next on. */
static int read_document_batch(const Context *c, Batch *b, int *next, GtError *err) {
    while (*next < c->o->n_inputs && b->n < BATCH_DOCUMENTS && b->bytes < BATCH_BYTES) {
        int i = (*next)++;
        uint8_t *buf;
        size_t len;
        int rc = strcmp(c->o->inputs[i], "-") == 0
                     ? read_stream(stdin, c->names[i], &buf, &len, err)
                     : gt_read_input(c->o->inputs[i], "input file", UINT64_MAX, &buf, &len, err);
        if (rc != 0) return -1;
        Item *it = batch_add(b);
        it->owned = buf;
        it->text = (const char *)buf;
        it->len = len;
        it->input = i;
        b->bytes += len;
    }
    return 0;
}

/* Open the next input of a line mode into r; false when there is none left. */
static int reader_open(const Context *c, LineReader *r, int i, GtError *err) {
    r->input = i;
    r->line = 0;
    r->start = r->end = 0;
    r->eof = false;
    if (strcmp(c->o->inputs[i], "-") == 0) {
        r->f = stdin;
        r->close_f = false;
        return 0;
    }
    uint64_t size;
    int fd = gt_open_input(c->o->inputs[i], "input file", &size, err);
    if (fd < 0) return -1;
    r->f = fdopen(fd, "rb");
    if (!r->f) {
        close(fd);
        return gt_error(err, GT_EXIT_FAILURE, "%s: cannot open: %s", c->o->inputs[i], strerror(errno));
    }
    r->close_f = true;
    return 0;
}

static void reader_close(LineReader *r) {
    if (r->f && r->close_f) fclose(r->f);
    r->f = NULL;
    r->input = -1;
}

/* The next line of r (without its '\n') appended to arena, its length in *len: 1, or 0 at the
 * end of the input, -1 on error. */
static int reader_next(const Context *c, LineReader *r, GtBytes *arena, size_t *len, GtError *err) {
    size_t got = 0;
    bool any = false;
    for (;;) {
        if (r->start < r->end) {
            any = true;
            char *nl = memchr(r->buf + r->start, '\n', r->end - r->start);
            size_t take = nl ? (size_t)(nl - (r->buf + r->start)) : r->end - r->start;
            if (got + take > MAX_LINE_BYTES)
                return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%zu: line longer than %zu MiB", c->names[r->input],
                                r->line + 1, MAX_LINE_BYTES >> 20);
            gt_bytes_put(arena, r->buf + r->start, take);
            got += take;
            r->start += take;
            if (nl) {
                r->start++;
                break;
            }
        }
        if (r->eof) break;
        r->start = 0;
        r->end = fread(r->buf, 1, READ_CHUNK_BYTES, r->f);
        if (r->end == 0) {
            if (ferror(r->f))
                return gt_error(err, GT_EXIT_FAILURE, "%s: read error: %s", c->names[r->input], strerror(errno));
            r->eof = true;
        }
    }
    if (!any) return 0;
    r->line++;
    *len = got;
    return 1;
}

/* Lines: the next lines of the inputs, from r's input on (*next: the input to open after it). */
static int read_line_batch(const Context *c, Batch *b, LineReader *r, int *next, GtError *err) {
    while (b->n < BATCH_LINES && b->bytes < BATCH_BYTES) {
        if (r->input < 0) {
            if (*next >= c->o->n_inputs) break;
            if (reader_open(c, r, (*next)++, err) != 0) return -1;
        }
        size_t off = b->arena.n, len = 0;
        int rc = reader_next(c, r, &b->arena, &len, err);
        if (rc < 0) return -1;
        if (rc == 0) {
            reader_close(r);
            continue;
        }
        Item *it = batch_add(b);
        it->off = off;
        it->len = len;
        it->input = r->input;
        it->line = r->line;
        b->bytes += len + 1;
    }
    for (size_t i = 0; i < b->n; i++) b->items[i].text = b->arena.p ? b->arena.p + b->items[i].off : "";
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * one item */

static bool json_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n'; }

static const char *json_start_name(const char *p, const char *end) {
    if (p >= end) return "an empty line";
    switch (*p) {
    case '{': return "an object";
    case '[': return "an array";
    case '"': return "a malformed string";
    case 't': case 'f': return "a boolean";
    case 'n': return "null";
    default: return (*p == '-' || (*p >= '0' && *p <= '9')) ? "a number" : "text that is not JSON";
    }
}

/* The JSON string that is the whole line s[n] (whitespace around it allowed), decoded into out. */
static int parse_string_line(const char *s, size_t n, bool first_line, GtBytes *out, const char *name, size_t line,
                             GtError *err) {
    const char *p = s, *end = s + n;
    if (first_line && n >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3;
    while (p < end && json_space(*p)) p++;
    const char *start = p;
    if (p >= end || *p != '"' || json_string_decode(&p, end, out) != 0)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%zu:%zu: found %s, expected one JSON string a line", name, line,
                        (size_t)(start - s) + 1, json_start_name(start, end));
    while (p < end && json_space(*p)) p++;
    if (p < end)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%zu:%zu: text after the JSON string, expected one string a line",
                        name, line, (size_t)(p - s) + 1);
    return 0;
}

/* A decimal id at *pp (digits only), <= INT32_MAX; -1 when there is none or it is too large. */
static long parse_id(const char **pp, const char *end) {
    const char *p = *pp;
    long v = 0;
    if (p >= end || *p < '0' || *p > '9') return -1;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        v = 10 * v + (*p - '0');
        if (v > INT32_MAX) return -1;
    }
    *pp = p;
    return v;
}

static int bad_id(const char *s, const char *p, const char *end, const char *name, size_t line, const char *form,
                  GtError *err) {
    size_t k = 0;
    while (p + k < end && k < 12 && !json_space(p[k]) && p[k] != ',' && p[k] != ']') k++;
    return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%zu:%zu: found \"%.*s\", expected %s", name, line, (size_t)(p - s) + 1,
                    (int)k, p, form);
}

/* ids separated by spaces or tabs (a trailing '\r' allowed) */
static int parse_plain_ids(const char *s, size_t n, TokIds *ids, const char *name, size_t line, GtError *err) {
    const char *p = s, *end = s + n;
    static const char form[] = "a token id (a decimal integer in [0, 2147483647]) or a space";
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\t' || (*p == '\r' && p + 1 == end))) p++;
        if (p >= end) return 0;
        const char *at = p;
        long v = parse_id(&p, end);
        if (v < 0 || (p < end && *p != ' ' && *p != '\t' && *p != '\r')) return bad_id(s, at, end, name, line, form, err);
        tok_ids_push(ids, (int32_t)v);
    }
}

/* a JSON array of non-negative integers */
static int parse_json_ids(const char *s, size_t n, TokIds *ids, const char *name, size_t line, GtError *err) {
    const char *p = s, *end = s + n;
    static const char form[] = "a token id (an integer in [0, 2147483647])";
    while (p < end && json_space(*p)) p++;
    if (p >= end || *p != '[')
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%zu:%zu: found %s, expected a JSON array of token ids a line", name,
                        line, (size_t)(p - s) + 1, json_start_name(p, end));
    p++;
    while (p < end && json_space(*p)) p++;
    if (p < end && *p == ']') {
        p++;
    } else {
        for (;;) {
            const char *at = p;
            long v = parse_id(&p, end);
            /* JSON's integer grammar: no leading zeros, and no fraction or exponent for an id */
            if (v < 0 || (*at == '0' && p - at > 1) || (p < end && (*p == '.' || *p == 'e' || *p == 'E')))
                return bad_id(s, at, end, name, line, form, err);
            tok_ids_push(ids, (int32_t)v);
            while (p < end && json_space(*p)) p++;
            if (p < end && *p == ',') {
                p++;
                while (p < end && json_space(*p)) p++;
                continue;
            }
            if (p < end && *p == ']') {
                p++;
                break;
            }
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%zu:%zu: expected ',' or ']' in the array of token ids", name,
                            line, (size_t)(p - s) + 1);
        }
    }
    while (p < end && json_space(*p)) p++;
    if (p < end)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%zu:%zu: text after the array, expected one array a line", name,
                        line, (size_t)(p - s) + 1);
    return 0;
}

/* ids as one line of space-separated decimals */
static void format_ids(GtBytes *out, const TokIds *ids) {
    char num[16];
    for (size_t i = 0; i < ids->n; i++) {
        uint32_t v = (uint32_t)ids->ids[i];
        int k = (int)sizeof num;
        do num[--k] = (char)('0' + v % 10);
        while ((v /= 10) > 0);
        if (i) num[--k] = ' ';
        gt_bytes_put(out, num + k, sizeof num - (size_t)k);
    }
    gt_bytes_put(out, "\n", 1);
}

static void process_item(const Context *c, Item *it, TokEncoder *enc, GtBytes *scratch) {
    const TokenizeOptions *o = c->o;
    const char *file = c->names[it->input];
    char where[GT_PATH_MAX + 32];
    if (it->line) snprintf(where, sizeof where, "%s:%zu", file, it->line);
    GtError e = {0};
    int rc = 0;
    switch (c->mode) {
    case MODE_ENCODE_DOCUMENTS:
        rc = tok_encode(enc, file, it->text, it->len, o->add_special, &it->ids, &e);
        break;
    case MODE_ENCODE_JSONL:
        scratch->n = 0;
        rc = parse_string_line(it->text, it->len, it->line == 1, scratch, file, it->line, &e);
        if (rc == 0) rc = tok_encode(enc, where, scratch->p ? scratch->p : "", scratch->n, o->add_special, &it->ids, &e);
        break;
    case MODE_DECODE_IDS:
    case MODE_DECODE_JSONL: {
        rc = c->mode == MODE_DECODE_JSONL ? parse_json_ids(it->text, it->len, &it->ids, file, it->line, &e)
                                          : parse_plain_ids(it->text, it->len, &it->ids, file, it->line, &e);
        char *text = NULL;
        size_t len = 0;
        if (rc == 0) rc = tokenizer_decode(c->tok, it->ids.ids, it->ids.n, o->skip_special, &text, &len, &e);
        if (rc == 0 && c->mode == MODE_DECODE_JSONL) {
            json_string_encode(&it->out, text, len);
            gt_bytes_put(&it->out, "\n", 1);
        } else if (rc == 0) {
            gt_bytes_put(&it->out, text, len);
        }
        free(text);
        break;
    }
    }
    if (rc != 0) {
        it->err = gt_xmalloc(sizeof *it->err);
        *it->err = e;
        if (!it->err->code) it->err->code = GT_EXIT_FAILURE;
        return;
    }
    if (!o->decode && !o->out) format_ids(&it->out, &it->ids);
}

/* ---------------------------------------------------------------------------------------------
 * progress */

/* "812", "12.3k", "4.56M" */
static const char *format_rate(char *buf, size_t cap, double v) {
    if (v >= 1e6) snprintf(buf, cap, "%.2fM", v / 1e6);
    else if (v >= 1e3) snprintf(buf, cap, "%.1fk", v / 1e3);
    else snprintf(buf, cap, "%.0f", v);
    return buf;
}

static void progress_show(Progress *p, uint64_t done, uint64_t tokens) {
    if (!p->on) return;
    double now = gt_now_seconds();
    if (now - p->last < 0.1) return;
    p->last = now;
    double el = now - p->t0;
    char d[32], t[32], rate[32];
    format_rate(rate, sizeof rate, el > 0 ? (double)tokens / el : 0);
    gt_format_bytes(d, sizeof d, done);
    if (p->total) {
        int width = 30, fill = (int)((double)width * (double)(done < p->total ? done : p->total) / (double)p->total);
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '-';
        bar[width] = '\0';
        fprintf(stderr, "\r\033[Ktokenize [%s] %s / %s, %s tokens/s", bar, d, gt_format_bytes(t, sizeof t, p->total),
                rate);
    } else {
        fprintf(stderr, "\r\033[Ktokenize %s, %s tokens/s", d, rate);
    }
    fflush(stderr);
}

static void progress_clear(const Progress *p) {
    if (p->on) fputs("\r\033[K", stderr);
}

/* ---------------------------------------------------------------------------------------------
 * the run */

/* the batch's results, in order: printed or appended to the shard; the first failing item's error */
static int write_batch(const Batch *b, DataShardWriter *w, uint64_t *tokens, GtError *err) {
    for (size_t i = 0; i < b->n; i++) {
        const Item *it = &b->items[i];
        if (it->err) {
            *err = *it->err;
            return -1;
        }
        if (w) {
            /* the tokenizer's ids are int32 in [0, TOKENIZER_MAX_ID]: the same bits as uint32 */
            if (data_shard_writer_append(w, (const uint32_t *)it->ids.ids, it->ids.n, err) != 0) return -1;
        } else if (it->out.n && fwrite(it->out.p, 1, it->out.n, stdout) != it->out.n) {
            return gt_error(err, GT_EXIT_FAILURE, "tokenize: cannot write to standard output: %s", strerror(errno));
        }
        *tokens += it->ids.n;
    }
    return 0;
}

static uint64_t inputs_total_bytes(const TokenizeOptions *o) {
    uint64_t total = 0;
    for (int i = 0; i < o->n_inputs; i++) {
        uint64_t size;
        GtError ignored;
        if (strcmp(o->inputs[i], "-") == 0) return 0;
        int fd = gt_open_input(o->inputs[i], "input file", &size, &ignored);
        if (fd < 0) return 0; /* the error comes when it is read */
        close(fd);
        total += size;
    }
    return total;
}

static int run(const Context *c, GtError *err) {
    const TokenizeOptions *o = c->o;
    const int n_threads = omp_get_max_threads();
    TokEncoder **enc = gt_xcalloc((size_t)n_threads, sizeof *enc);
    GtBytes *scratch = gt_xcalloc((size_t)n_threads, sizeof *scratch);
    for (int t = 0; t < n_threads; t++) enc[t] = tok_encoder_new(c->tok);
    Batch b = {0};
    LineReader r = {.input = -1};
    bool lines = c->mode != MODE_ENCODE_DOCUMENTS;
    if (lines) r.buf = gt_xmalloc(READ_CHUNK_BYTES);
    DataShardWriter *w = NULL;
    const int vocab = tokenizer_vocab_size(c->tok);
    const DataShardLayout layout = vocab <= 65536 ? DATA_SHARD_U16 : DATA_SHARD_U32;
    Progress prog = {.on = o->out && isatty(STDERR_FILENO), .t0 = gt_now_seconds()};
    if (prog.on) prog.total = inputs_total_bytes(o);
    uint64_t done_bytes = 0, tokens = 0, items = 0;
    int next = 0, rc = 0;
    if (o->out && data_shard_writer_open(&w, o->out, layout, err) != 0) {
        rc = -1;
        goto out;
    }
    for (;;) {
        if (gt_stop_signal()) {
            rc = gt_error(err, GT_EXIT_FAILURE, "tokenize: stopped by signal %d%s", gt_stop_signal(),
                          o->out ? "; no shard written" : "");
            break;
        }
        batch_clear(&b);
        /* a read error ends the batch: what was read before it is still processed, so the first
         * failure in input order is the one reported */
        GtError read_err = {0};
        int read_rc = lines ? read_line_batch(c, &b, &r, &next, &read_err) : read_document_batch(c, &b, &next, &read_err);
        const int chunk = lines ? 64 : 1;
#pragma omp parallel for schedule(dynamic, chunk)
        for (long i = 0; i < (long)b.n; i++) {
            const int t = omp_get_thread_num();
            process_item(c, &b.items[i], enc[t], &scratch[t]);
        }
        if ((rc = write_batch(&b, w, &tokens, err)) != 0) break;
        if (read_rc != 0) {
            *err = read_err;
            rc = -1;
            break;
        }
        if (b.n == 0) break;
        items += b.n;
        done_bytes += b.bytes;
        progress_show(&prog, done_bytes, tokens);
    }
    if (rc == 0 && w && data_shard_writer_count(w) == 0)
        rc = gt_error(err, GT_EXIT_BAD_INPUT, "%s: no tokens to write (the input holds no text), and a shard with none "
                      "is refused by the reader", o->out);
    progress_clear(&prog);
    if (rc == 0 && w) {
        DataShardWriter *done = w;
        w = NULL;
        rc = data_shard_writer_commit(done, err);
        if (rc == 0) {
            double sec = gt_now_seconds() - prog.t0;
            char in[32], sz[32];
            uint64_t shard_bytes = DATA_SHARD_HEADER_BYTES + tokens * (layout == DATA_SHARD_U32 ? 4u : 2u);
            fprintf(stderr, "tokenize: %s: %llu documents, %llu tokens (%s), %s read, %s written, %.2f s, %.0f tokens/s\n",
                    o->out, (unsigned long long)items, (unsigned long long)tokens,
                    layout == DATA_SHARD_U32 ? "uint32, llm.c's Llama-3 layout" : "uint16, llm.c's GPT-2 layout",
                    gt_format_bytes(in, sizeof in, done_bytes), gt_format_bytes(sz, sizeof sz, shard_bytes), sec,
                    sec > 0 ? (double)tokens / sec : 0.0);
        }
    }
    if (rc == 0 && !o->out && fflush(stdout) != 0)
        rc = gt_error(err, GT_EXIT_FAILURE, "tokenize: cannot write to standard output: %s", strerror(errno));
out:
    data_shard_writer_abort(w);
    reader_close(&r);
    free(r.buf);
    batch_free(&b);
    for (int t = 0; t < n_threads; t++) {
        tok_encoder_free(enc[t]);
        gt_bytes_free(&scratch[t]);
    }
    free(enc);
    free(scratch);
    return rc;
}

/* --out, before any work: a new name in an existing directory or a regular file, never one of the
 * inputs (the text files, standard input, the tokenizer file or its directory's files); then the
 * temporaries a killed tokenize left beside it are removed. */
static int check_out(const TokenizeOptions *o, GtError *err) {
    OutGuard g = {0};
    out_guard_add(&g, o->tokenizer, "tokenizer");
    for (int i = 0; i < o->n_inputs; i++) {
        const bool std_in = strcmp(o->inputs[i], "-") == 0;
        const int before = g.n;
        out_guard_add(&g, std_in ? "/dev/stdin" : o->inputs[i], std_in ? "input" : "input file");
        if (std_in && g.n > before) snprintf(g.in[before].path, sizeof g.in[before].path, "<stdin>");
    }
    int rc = out_guard_file(&g, o->out, "tokenize: --out", err);
    out_guard_free(&g);
    if (rc == 0) {
        char dir[GT_PATH_MAX], prefix[GT_PATH_MAX + 8];
        const char *slash = strrchr(o->out, '/');
        snprintf(prefix, sizeof prefix, "%s.tmp.", slash ? slash + 1 : o->out);
        gt_parent_dir(dir, sizeof dir, o->out);
        out_guard_clean_stale(dir, prefix);
    }
    return rc;
}

int tokenize_command(CliArgs *a) {
    if (cli_given(a, "data")) {
        for (int i = 0; TEXT_ONLY[i]; i++)
            if (cli_given(a, TEXT_ONLY[i])) return cli_error(a->cmd, "--%s: not with --data FILE", TEXT_ONLY[i]);
        return tokenize_data_command(a);
    }
    TokenizeOptions o = {0};
    int prc = parse_options(a, &o);
    if (prc != 0) return prc;
    static const char *const stdin_only[1] = {"-"};
    if (o.n_inputs == 0) {
        o.inputs = stdin_only;
        o.n_inputs = 1;
    }
    if (o.threads > 0) omp_set_num_threads(o.threads);
    Context c = {.o = &o, .names = gt_xcalloc((size_t)o.n_inputs, sizeof(char *))};
    c.mode = o.decode ? (o.jsonl ? MODE_DECODE_JSONL : MODE_DECODE_IDS)
                      : (o.jsonl ? MODE_ENCODE_JSONL : MODE_ENCODE_DOCUMENTS);
    for (int i = 0; i < o.n_inputs; i++) c.names[i] = input_name(o.inputs[i]);
    GtError err = {0};
    Tokenizer *tok = NULL;
    int rc = o.out ? check_out(&o, &err) : 0;
    if (rc == 0) rc = tokenizer_load(&tok, o.tokenizer, &err);
    if (rc == 0) {
        c.tok = tok;
        rc = run(&c, &err);
    }
    tokenizer_free(tok);
    free(c.names);
    return rc != 0 ? cli_fail(&err) : GT_EXIT_OK;
}
