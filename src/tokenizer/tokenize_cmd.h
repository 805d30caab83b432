/* tokenize_cmd.h - `gtrain tokenize`: text to token ids (and ids back to text) through a Hugging
 * Face tokenizer.json (tokenizer.h), printed one line per document or written as one llm.c token
 * shard (data.h's writer).
 *
 *   gtrain tokenize --tokenizer FILE|DIR [--jsonl] [--add-special-tokens] [--decode]
 *                   [--skip-special-tokens] [--out shard.bin] [--threads N] [FILE...]
 *
 * Input: the FILEs in order, or standard input when there are none ("-" names it among them).
 *   encode           each FILE is one document, read whole (regular files only; stdin read to its
 *                    end); one line of space-separated decimal ids per document.
 *   --jsonl          each input line is one JSON string (decoded exactly: "\u0000" is a 0 byte;
 *                    whitespace around it allowed, a UTF-8 BOM at the start of a file too); one
 *                    line of ids per input line, an empty line for "". Anything else on a line
 *                    (a blank line too) is an error naming FILE:LINE.
 *   --decode         each input line holds ids: space- or tab-separated decimals, or with --jsonl
 *                    a JSON array of integers; each line's decoded text (tokenizer_decode, ids
 *                    outside the vocabulary skipped as HF does) is written as it is with no
 *                    separator (so `tokenize FILE | tokenize --decode` gives FILE back for a
 *                    lossless tokenizer), or with --jsonl as one JSON string a line
 *                    (json_string_encode: valid UTF-8).
 *   --add-special-tokens   the post-processor's ids (BOS...) around each document (encode only);
 *   --skip-special-tokens  special tokens left out of the decoded text (decode only).
 *   --out FILE       encode only: every document's ids, concatenated in input order, into one
 *                    llm.c shard: uint16 (GPT-2's layout) when tokenizer_vocab_size <= 65536,
 *                    else uint32 (Llama-3's). Written through a temporary file renamed when
 *                    complete: on any error (or SIGINT/SIGTERM) nothing is left behind. A
 *                    progress bar on stderr when it is a terminal; a summary line on stderr.
 *                    An input with no tokens at all is refused (the reader refuses empty shards).
 *
 * Documents (or lines) are read in batches (at most 65536 lines or 1024 documents, and about 16 MiB
 * of text, but always one whole document or line), encoded in parallel by OpenMP threads
 * (--threads N, default OpenMP's: OMP_NUM_THREADS or every core), each with its own TokEncoder;
 * each result goes to its index, and a batch is written in order before the next is read, so the
 * output is byte-identical for any thread count and memory stays bounded by the batch.
 * A bad input stops at the first failing document or line in input order: what came before it is
 * printed, the error is one line on stderr naming the file (and line), exit 2. Invalid UTF-8 is
 * tok_encode's error: the file and the byte offset in it, or with --jsonl FILE:LINE and the offset
 * in the line's decoded string. */
#ifndef GT_TOKENIZE_CMD_H
#define GT_TOKENIZE_CMD_H

#include "cli.h"

/* tokenize_command (cli.h): the options, their help and the parsing in cli_table.c's entry. */

/* --data FILE (tokenize_data.c): a training data file through the trainer's own reader (data.h),
 *   gtrain tokenize --data FILE --tokenizer FILE|DIR|none [--format auto|text|jsonl|json|parquet]
 *                   [--column text|prompt|completion|messages=COLUMN]... [--prompt-template T]
 *                   [--completion-template T] [--no-eos] [--chat-template FILE|DIR] [--mask|--render]
 * (the flags are data.format, data.columns.*, data.prompt_template, data.completion_template,
 * data.add_eos: false, data.chat_template), one line per example: its ids, or with --mask its
 * labels (the id where it trains, -100 where not), or with --render the text that was tokenized
 * (data_example_text: the rendered chat, the filled templates; a row of ids decoded, special
 * tokens kept) as one JSON string. Examples whole (never truncated to a seq_len).
 * Bad data: the trainer's one-line error, exit 2, nothing printed. */
int tokenize_data_command(const CliArgs *a);

#endif
