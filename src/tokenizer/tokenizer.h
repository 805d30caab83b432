/* tokenizer.h - Hugging Face tokenizer.json (BPE: byte-level as GPT-2/Llama-3/Qwen2, and
 * SentencePiece-style with byte fallback as Llama-2/Mistral) in C: encode and decode exactly as
 * Hugging Face's tokenizers library does.
 *
 * The pipeline is HF's, step for step (tokenizers/src/tokenizer/mod.rs, encode_single_sequence):
 *   1. added tokens whose `normalized` is false are found in the raw text (leftmost-longest;
 *      `single_word`, `lstrip`, `rstrip` as HF applies them); the pieces between them are
 *   2. normalized (NFC/NFD/NFKC/NFKD, Prepend, Replace, Sequence), then added
 *      tokens whose `normalized` is true are found in the normalized pieces;
 *   3. pre-tokenized (ByteLevel with GPT-2's regex or none, Split with a regex or a string and
 *      every SplitDelimiterBehavior, Metaspace, Digits, Sequence);
 *   4. each pre-token goes through the BPE model (merges by rank, continuing_subword_prefix,
 *      end_of_word_suffix, ignore_merges, byte_fallback, unk_token, fuse_unk);
 *   5. the post-processor (TemplateProcessing, ByteLevel, Sequence) adds BOS/EOS when asked.
 * Regular expressions are Oniguruma's (as HF's), Unicode normalization and categories utf8proc's
 * (with HF's Unicode 9.0 cut: tokenizer_unicode.c), a character's Unicode age ICU's.
 * A tokenizer.json field this code does not implement, or implements differently, is refused at
 * load with one line naming its JSON path (code GT_EXIT_BAD_INPUT): never a silent difference.
 *
 * A Tokenizer is immutable after load and may be shared by threads; each thread encodes through
 * its own TokEncoder (a word cache and scratch buffers). */
#ifndef GT_TOKENIZER_H
#define GT_TOKENIZER_H

#include "common.h"

typedef struct Tokenizer Tokenizer;
typedef struct TokEncoder TokEncoder;

/* The largest tokenizer.json read, and the largest token id accepted (ids index embeddings). */
#define TOKENIZER_MAX_FILE_BYTES ((uint64_t)256 << 20)
#define TOKENIZER_MAX_ID ((1 << 24) - 1)

/* path: a tokenizer.json, or a directory holding one. Errors name the file and the JSON path. */
int tokenizer_load(Tokenizer **out, const char *path, GtError *err);
/* The same on a file's contents in memory (name is used in messages only; for fuzzing/tests). */
int tokenizer_load_memory(Tokenizer **out, const char *name, const char *json, size_t len, GtError *err);
void tokenizer_free(Tokenizer *t); /* NULL is fine */

/* The tokenizer a run uses (the config's `tokenizer`): "none" -> *out NULL (byte-level); a path ->
 * that tokenizer.json or directory; "" -> the tokenizer.json beside model (model a directory, or a
 * config.json in one), else *out NULL. */
int tokenizer_load_for_model(Tokenizer **out, const char *setting, const char *model_path, GtError *err);

/* 1 + the largest id of the model's vocabulary, the added tokens and the post-processor. */
int tokenizer_vocab_size(const Tokenizer *t);
const char *tokenizer_path(const Tokenizer *t);
/* The token's string (the vocabulary's spelling, e.g. "Ġthe", "<0x0A>", "<|eot_id|>"), or NULL. */
const char *tokenizer_id_to_token(const Tokenizer *t, int id);
/* The id of a token string (added tokens first, then the model's vocabulary), or -1. */
int tokenizer_token_to_id(const Tokenizer *t, const char *token);
bool tokenizer_is_special(const Tokenizer *t, int id);
/* The ids the post-processor puts before and after a single sequence (TemplateProcessing's
 * `single`; none for ByteLevel or no post-processor). the counts may be 0. */
void tokenizer_template_ids(const Tokenizer *t, const int **before, int *n_before, const int **after, int *n_after);
/* BOS, EOS and PAD ids (-1: none) as Hugging Face takes them: tokenizer_config.json's bos_token,
 * eos_token, pad_token, else special_tokens_map.json's, else generation_config.json's bos_token_id,
 * eos_token_id (a list: its first), pad_token_id, else config.json's, each file beside the
 * tokenizer.json (tokenizer_special.c). Only when none of those files exists (or the tokenizer
 * was loaded from memory): BOS the post-processor's first special token, EOS its last after $A,
 * else the added special token named </s>, <|end_of_text|>, <|endoftext|>, <|im_end|>, <|eot_id|>
 * (first present); no PAD. EOS is what SFT data appends after a completion (TRL: eos_token). */
int tokenizer_bos_id(const Tokenizer *t);
int tokenizer_eos_id(const Tokenizer *t);
int tokenizer_pad_id(const Tokenizer *t);
/* "special tokens: bos 128000 <|begin_of_text|> (tokenizer_config.json), eos ..., pad none" */
const char *tokenizer_special_line(const Tokenizer *t, char *buf, size_t cap);
/* tokenizer.json's bytes as tokenizer_load read them (*len 0 and NULL from memory) */
const uint8_t *tokenizer_raw(const Tokenizer *t, size_t *len);

/* A growable id list. */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} TokIds;
void tok_ids_push(TokIds *v, int32_t id);
void tok_ids_free(TokIds *v);

TokEncoder *tok_encoder_new(const Tokenizer *t);
void tok_encoder_free(TokEncoder *e); /* NULL is fine */

/* Append the ids of text[0..len) to out (which is not cleared). add_special_tokens applies the
 * post-processor (HF's encode(text, add_special_tokens=True)). Invalid UTF-8 is an error naming
 * `name` and the byte offset (code 2); nothing is appended then. */
int tok_encode(TokEncoder *e, const char *name, const char *text, size_t len, bool add_special_tokens,
               TokIds *out, GtError *err);

/* Token offsets: 2 per token (start, end), byte offsets into the text given to tok_encode_offsets. */
typedef struct {
    size_t *v;
    size_t n, cap; /* n: tokens (v holds 2n) */
} TokOffsets;
void tok_offsets_free(TokOffsets *o);

/* tok_encode, and each appended token's [start, end) in text[0..len) appended to offs, as HF's
 * Encoding.offsets (in bytes): through the normalizers' alignments, the pre-tokenizers' splits and
 * the model's pieces (a piece of a character, a byte-fallback token, spans the whole character);
 * an added token its matched span (lstrip/rstrip's whitespace included); the post-processor's
 * tokens (0, 0). A Unicode normalizer that changes a run of text gives each token of the run the
 * run's whole span (HF aligns a composed character to its first source character). Offsets are
 * computed only on this path: tok_encode does not pay for them. */
int tok_encode_offsets(TokEncoder *e, const char *name, const char *text, size_t len, bool add_special_tokens,
                       TokIds *out, TokOffsets *offs, GtError *err);

/* HF's decode(ids, skip_special_tokens): the decoder chain over the ids' token strings. *out is
 * a fresh NUL-terminated string (freed by the caller; *out_len without the NUL). An id outside
 * the vocabulary is skipped (as HF does). */
int tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, bool skip_special_tokens, char **out,
                     size_t *out_len, GtError *err);

/* Offset of the first byte that is not valid UTF-8 (overlong forms, surrogates and code points
 * above U+10FFFF are invalid, as in Rust's str), or -1 when all of text[0..len) is valid. */
long tok_utf8_invalid_at(const char *text, size_t len);

#endif
