/* data.h - token sources: byte-level text, llm.c token shards, SFT records (jsonl lines, JSON
 * array elements); deterministic sampling; the llm.c shard writer.
 *
 * A DataSource is read fully into memory at open time and is immutable afterwards: the fill
 * functions keep no state, so they are thread-safe and a run's rows depend only on their
 * arguments (which is what makes accumulation splits, several ranks and resume exact).
 *
 * Formats
 *   text    the file's bytes are the tokens (vocab 256).
 *   tokens  llm.c shards (dev/data/data_common.py, write_datafile): int32 header[256]
 *           (little-endian), header[2] = token count, then count little-endian tokens, in one of
 *           two layouts:
 *             GPT-2    header[0] = 20240520 (magic), header[1] = 1 (version), uint16 tokens; the
 *                      file size must be exactly 1024 + 2*count;
 *             Llama-3  header[0] = 20240801, header[1] = 7, uint32 tokens; the file size must
 *                      be exactly 1024 + 4*count.
 *           Any other magic, or a version that is not its magic's, is refused; so is a count of 0
 *           or above INT32_MAX. Every token must be < vocab_size. The path may be a glob(3)
 *           pattern: the matching shards, in sorted order, are concatenated; they must all share
 *           one layout (a uint32 shard among uint16 ones is refused, naming both: the two
 *           layouts come from different tokenizers, so a mix is almost surely a mistake).
 *   With a tokenizer (DataText.tok, from the run's `tokenizer`), text is tokenized as Hugging
 *   Face's encode(text, add_special_tokens=True) does: text is the whole file as one document (BOS
 *   once at its start, as the tokenizer's post-processor adds it); the split then counts tokens.
 *   jsonl   SFT: one JSON object per line, {"prompt": str, "completion": str} (byte-level tokens)
 *           or {"prompt_ids": [int...], "completion_ids": [int...]}. Blank lines are skipped.
 *           A string's tokens are all its bytes after JSON unescaping: "\u0000" is token 0 (it
 *           does not end the string), raw bytes (also invalid UTF-8) are kept as they are. Keys
 *           are compared exactly (after unescaping); a top-level key given twice is an error
 *           (keys inside nested values are not read). Other top-level keys are ignored.
 *           Templates (DataText.prompt_template / completion_template, e.g. "Q: {query}\nA:" and
 *           "{response}"): the prompt and completion are the templates with each {field} replaced by
 *           that string member of the line ({{ and }} are literal braces); a missing or non-string
 *           field is an error naming the line. Without templates they are "prompt" and
 *           "completion". With a tokenizer the example's tokens are encode(prompt + completion)
 *           with special tokens (BOS), then EOS when add_eos (unless already last), and the
 *           prompt's tokens are masked, as the Alpaca/PiSSA/MetaMath SFT scripts and TRL do; where
 *           the prompt ends is TRL 1.16's common_prefix_length: the tokens that encode(prompt) and
 *           encode(prompt + completion) share (a token merging across the boundary trains).
 *           Every example keeps a per-token train mask (data_example).
 *           Records and their kind (one converter for every source: a jsonl line, a JSON array
 *           element): a record is an object of named members; data.columns (DataText.col_*) maps
 *           gtrain's names text, prompt, completion, messages to the file's (e.g. prompt: query,
 *           completion: response for MetaMathQA; unmapped, the name itself). The kind is decided
 *           once, as TRL decides a dataset's type from its first row: a kind named in data.columns
 *           (only one may be); else the first record's members: prompt/completion/prompt_ids/
 *           completion_ids -> prompt-completion; else messages -> conversational; else text ->
 *           language modeling; else prompt-completion (whose error says what is expected).
 *           Templates take precedence over all (every record is prompt-completion through them).
 *           A later record without its kind's mapped column, or with one of another type, is an
 *           error naming the row.
 *             text      {"text": str}: every token trains (TRL's language modeling rows):
 *                       byte-level its bytes; with a tokenizer encode(text) with special tokens,
 *                       then EOS as above, every token (BOS too) with its label.
 *             messages  [{"role": str, "content": str}...]: rendered with the chat template
 *                       (DataText.chat_template, else the tokenizer directory's
 *                       tokenizer_config.json; bos_token/eos_token its BOS/EOS strings), the text
 *                       tokenized without special tokens (TRL 1.16 does so; no EOS added), and a
 *                       token trains when it overlaps an assistant span of the renderer
 *                       (assistant_only_loss: TRL's assistant_only_loss=True), or every token
 *                       (false). Spans map to tokens through the tokens' bytes: a byte-level
 *                       tokenizer (Llama-3, Qwen) or none; another is refused naming the row. A
 *                       template's raise_exception is an error naming the row.
 *   json    One JSON array of such objects (MetaMathQA-395K.json), streamed: read in 1 MiB chunks
 *           (a larger element grows the window to hold it), each element parsed, converted and
 *           dropped, so memory holds one element and the tokens, never the file. Messages name
 *           rows "FILE: element N" (N from 1), and syntax between elements by byte offset. A UTF-8
 *           BOM and whitespace around the array are allowed, nothing else after it.
 *   auto    (format DATA_AUTO) by the path's extension: data_format_for_path.
 *   parquet A file or a glob(3) of files (parquet.h), rows read a row group at a time, each row of
 *           the mapped columns (else the first kind whose columns the files have: prompt/
 *           completion, messages, text) converted as a record; rows are named "FILE: row N", N
 *           from 0 within its file (a glob of several files: the glob is named, with the row
 *           within the file being read).
 *   Rows (jsonl, json): each example becomes one row of seq_len+1 tokens, truncated to seq_len+1
 *           and padded with token 0; labels are -100 where the mask is 0 and on the padding.
 *           Packed (packing = true; ignored by text/tokens): the split's examples, kept as above
 *           (truncated to seq_len+1), are packed whole into rows of seq_len by first-fit decreasing
 *           (data_pack.c; HF's DataCollatorWithFlattening, TRL's padding_free): an example of n
 *           tokens fills n-1 positions (inputs e[0..n-2], targets e[1..n-1] under its labels) with
 *           positions 0..n-2, attends only to itself (the ops' per-token positions, backend.h), and
 *           no target crosses an example boundary; the rest of a row is padding (token 0, target
 *           -100, positions 0.. as a segment of its own). Rows then go as examples do (below).
 *           The split that is opened must hold a target that is not -100: at least one example
 *           with a completion token within seq_len+1 tokens (packed or not); otherwise it is an error naming the file
 *           (and the split). Some such examples are a warning.
 *
 * Split (no separate val file): DATA_SPLIT_TRAIN keeps the first floor(n * (1 - val_fraction))
 * tokens (text/tokens) or examples (jsonl, packed or not), DATA_SPLIT_VAL the rest, DATA_SPLIT_ALL
 * everything.
 *
 * Files must be regular files: a FIFO, device, socket or directory is refused without blocking
 * (src/infile.h), also when a glob matches it.
 * Errors are one line naming the file (and the line, byte offset or shard) and what was expected;
 * code GT_EXIT_BAD_INPUT for bad input, GT_EXIT_FAILURE for I/O or out-of-memory failures.
 * Header fields are checked against the real file size before anything is sized by them. */
#ifndef GT_DATA_H
#define GT_DATA_H

#include "common.h"
#include "config.h"
#include "tokenizer.h"

enum { DATA_SPLIT_ALL = 0, DATA_SPLIT_TRAIN = 1, DATA_SPLIT_VAL = 2 };

#define DATA_SHARD_MAGIC 20240520 /* llm.c's GPT-2 layout: uint16 tokens */
#define DATA_SHARD_VERSION 1
#define DATA_SHARD_MAGIC_U32 20240801 /* llm.c's Llama-3 layout: uint32 tokens */
#define DATA_SHARD_VERSION_U32 7
#define DATA_SHARD_HEADER_BYTES 1024
#define DATA_SHARD_MAX_TOKENS INT32_MAX /* header[2] is an int32 (llm.c asserts len(toks) < 2**31) */
#define DATA_IGNORE_INDEX (-100)
#define DATA_PAD_TOKEN 0

typedef struct DataSource DataSource;

/* How text becomes tokens: tok NULL = byte-level (every byte a token); templates for jsonl
 * ("" = the "prompt" / "completion" members); add_eos: append eos_id after a completion
 * (tokenizer only). */
typedef struct DataText {
    const Tokenizer *tok;
    const char *prompt_template, *completion_template;
    bool add_eos;
    int eos_id;
    /* records (jsonl/json/parquet): the file's column for gtrain's text, prompt, completion and
     * messages (NULL or "": the name itself) */
    const char *col_text, *col_prompt, *col_completion, *col_messages;
    const char *chat_template; /* messages: a template file or directory; NULL/"": the tokenizer's own */
    bool assistant_only_loss;  /* messages: only the assistant turns train (else every token) */
    bool keep_text;            /* records: keep each example's text as it was tokenized (data_example_text) */
    /* generation prompts (gtrain eval; records only): each record's prompt alone -- prompt_template
     * filled, else the prompt column, else (col_messages, or a first record with messages and no
     * prompt) the messages rendered with add_generation_prompt -- as encode(prompt) with special
     * tokens (messages: the rendered text without), no target; the col_answer member (a string, or a
     * number as written) kept as the example's text (data_example_text). A missing prompt or answer,
     * an empty prompt, or one of more than seq_len tokens is an error naming the row. */
    bool gen_prompts;
    const char *col_answer; /* NULL or "": "answer" */
} DataText;

/* data.format auto: by path's extension: .jsonl, .json, .parquet, .bin (tokens), else text */
DataFormat data_format_for_path(const char *path);

/* A template's syntax: {name} references (name: no braces, not empty), {{ and }} literal braces.
 * 0, or -1 with "expected ..., found ... at offset N" in why. */
int data_template_why(const char *tmpl, char *why, size_t cap);

/* data_open with text through `text` (NULL: byte-level, as data_open). */
int data_open_text(DataSource **out, const char *path, DataFormat format, bool packing, int seq_len, int vocab_size,
                   int split, double val_fraction, const DataText *text, GtError *err);
int data_open_memory_text(DataSource **out, const char *name, const void *buf, size_t len, DataFormat format,
                          bool packing, int seq_len, int vocab_size, int split, double val_fraction,
                          const DataText *text, GtError *err);

int data_open(DataSource **out, const char *path, DataFormat format, bool packing, int seq_len, int vocab_size,
              int split, double val_fraction, GtError *err);

/* The same as data_open, on a file's contents already in memory (one file: tokens format takes
 * a single shard). name is used in messages only. For fuzzing and tests. */
int data_open_memory(DataSource **out, const char *name, const void *buf, size_t len,
                     DataFormat format, bool packing, int seq_len, int vocab_size, int split,
                     double val_fraction, GtError *err);

void data_close(DataSource *d); /* NULL is fine */

/* tokens (text/tokens) or examples (jsonl, packed or not) of the chosen split */
uint64_t data_num_tokens(const DataSource *d);
DataFormat data_format(const DataSource *d);
/* What the opened split holds: jsonl: examples, their tokens as kept (truncated to seq_len+1,
 * packed or not) and before truncation, the examples truncated, the examples with no target
 * token (no completion token within seq_len+1: they train nothing);
 * text/tokens: examples 0, tokens = tokens_full = the split's tokens. */
typedef struct {
    uint64_t examples, tokens, tokens_full, truncated, no_target;
    uint64_t packed_rows, packed_tokens; /* packed: the rows, and the input positions examples fill */
} DataStats;
void data_stats(const DataSource *d, DataStats *s);
/* Examples sources (jsonl, json, parquet): the opened split's examples, and example e's tokens (as
 * kept: truncated to seq_len+1 unless packed), its train mask (mask[j] = 1: label j is tok[j], the
 * token trains where it is predicted; 0: label -100) and its length (the return value). */
uint64_t data_num_examples(const DataSource *d);
int32_t data_example(const DataSource *d, uint64_t e, const int32_t **tok, const uint8_t **mask);
/* Example e's text as it was tokenized (DataText.keep_text): the rendered messages, the prompt and
 * completion text (templates filled) end to end, or a text row's text; *len its bytes. NULL when
 * no text was kept: not asked for, or a row of token ids. */
const char *data_example_text(const DataSource *d, uint64_t e, size_t *len);
/* training rows that make one epoch: examples (unpacked jsonl), packed rows, or tokens / seq_len */
double data_rows_per_epoch(const DataSource *d);
int data_seq_len(const DataSource *d);

/* Training rows. Row g (0 <= g < effective_batch) of optimizer step `step` is global row
 * i = step * effective_batch + g; it depends only on (seed, shuffle, step, g) -- for jsonl and for
 * shuffle = false only on (seed, shuffle, i) -- never on how the step is cut into micro-batches or
 * ranks, so it is the same after a resume.
 * shuffle = true:
 *   text/tokens: window start s uniform in [0, n - seq_len - 1] from a counter-based RNG
 *                (splitmix64 of seed, step, g); inputs = x[s .. s+T-1], targets = x[s+1 .. s+T].
 *   jsonl:       epoch = i / n_rows; the row is perm_epoch(i % n_rows), perm_epoch a seeded
 *                bijection of [0, n_rows) (a keyed Feistel network with cycle walking, seeded by
 *                (seed, epoch)); rows: examples (inputs = row[0 .. T-1], targets = labels[1 .. T]),
 *                or packed rows.
 * shuffle = false (file order, epoch after epoch; seed unused):
 *   text/tokens: window w = i % W, W = floor((n - 1) / seq_len): the eval windows of
 *                data_fill_eval, start w * seq_len, consecutive and non-overlapping, wrapping;
 *   jsonl:       row i % n_rows (examples in file order, or packed rows in packing order).
 * Writes rows first_row .. first_row + n_rows - 1 into tokens[n_rows * T], targets[n_rows * T]. */
void data_fill_train(const DataSource *d, uint64_t seed, bool shuffle, long step, long effective_batch,
                     long first_row, int n_rows, int *tokens, int *targets);
/* The same, with each token's position into positions[n_rows * T] (NULL: not written): t for
 * unpacked rows and windows; packed rows restart at 0 with each example (data_pack.c). */
void data_fill_train_pos(const DataSource *d, uint64_t seed, bool shuffle, long step, long effective_batch,
                         long first_row, int n_rows, int *tokens, int *targets, int *positions);
/* jsonl packed into rows (packing = true): the rows need positions (model_step_pos) */
bool data_packed(const DataSource *d);

/* Eval windows, a fixed documented set: text/tokens: window w starts at w * seq_len and holds
 * seq_len + 1 tokens (consecutive, non-overlapping targets), count = floor((n - 1) / seq_len);
 * jsonl: example w, count = n_examples; packed jsonl: packed row w, count = the rows.
 * Windows at or beyond the count are filled with token 0
 * and target -100 (they count for nothing), so a last partial batch can be padded. */
long data_num_eval_windows(const DataSource *d);
void data_fill_eval(const DataSource *d, long first_window, int n_rows, int *tokens, int *targets);
void data_fill_eval_pos(const DataSource *d, long first_window, int n_rows, int *tokens, int *targets,
                        int *positions);

/* ---------------------------------------------------------------------------------------------
 * Writing llm.c shards (either layout above), atomically: the tokens go to a fresh temporary file
 * beside path (path.tmp.XXXXXX, mode 0644), which is fsync'ed and renamed to path only when
 * complete; on any failure it is removed, so path is either the whole new shard or as it was. */

typedef enum {
    DATA_SHARD_AUTO = 0, /* data_write_token_shard only: uint16 when every token is < 65536, else uint32 */
    DATA_SHARD_U16,      /* GPT-2's layout (magic 20240520, version 1) */
    DATA_SHARD_U32,      /* Llama-3's layout (magic 20240801, version 7) */
} DataShardLayout;

typedef struct DataShardWriter DataShardWriter;

/* Start a shard at path in layout U16 or U32 (AUTO is refused: the layout is in the first bytes
 * written). Errors (code 1) name path. */
int data_shard_writer_open(DataShardWriter **out, const char *path, DataShardLayout layout, GtError *err);
/* Append n tokens. A token that does not fit the layout (>= 65536 in U16), or a total above
 * DATA_SHARD_MAX_TOKENS, is code 2; a write error code 1. After an error only abort is valid. */
int data_shard_writer_append(DataShardWriter *w, const uint32_t *tokens, size_t n, GtError *err);
uint64_t data_shard_writer_count(const DataShardWriter *w); /* tokens appended so far */
/* Write the header, fsync, rename to path; frees w (also on failure, after removing the
 * temporary file). */
int data_shard_writer_commit(DataShardWriter *w, GtError *err);
/* Remove the temporary file and free w; NULL is fine. */
void data_shard_writer_abort(DataShardWriter *w);

/* The whole shard in one call: tokens[n] in the given layout (AUTO: U16 when every token fits). */
int data_write_token_shard(const char *path, const uint32_t *tokens, size_t n, DataShardLayout layout,
                           GtError *err);

#endif
