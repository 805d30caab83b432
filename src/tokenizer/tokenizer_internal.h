/* tokenizer_internal.h - the parts of a loaded tokenizer.json, shared by the reader
 * (tokenizer_json.c), the encoder (tokenizer.c), the BPE model (tokenizer_bpe.c) and the
 * decoders (tokenizer_decode.c). Each component is the data HF's serialized form holds. */
#ifndef GT_TOKENIZER_INTERNAL_H
#define GT_TOKENIZER_INTERNAL_H

#include <cjson/cJSON.h>
#include <oniguruma.h>

#include "tokenizer.h"

/* A byte string -> int map (open addressing; keys are owned copies). */
typedef struct {
    char **keys;
    uint32_t *lens;
    int32_t *vals;
    uint32_t *hashes;
    uint32_t cap; /* a power of two; 0 before the first insert */
    uint32_t n;
} TokStrMap;

/* Returns the existing value's slot, inserting (key -> val) when absent; *inserted says which. */
int32_t *tok_strmap_put(TokStrMap *m, const char *key, size_t len, int32_t val, bool *inserted);
const int32_t *tok_strmap_get(const TokStrMap *m, const char *key, size_t len);
void tok_strmap_free(TokStrMap *m);
uint32_t tok_hash_bytes(const char *s, size_t len);

/* One compiled Oniguruma pattern (HF's SysRegex: ONIG_SYNTAX_DEFAULT, UTF-8, no options). */
typedef struct {
    regex_t *re;
    char *where;     /* "file: json.path" of the pattern, for errors */
    char *literal;   /* a String pattern (not empty): searched as bytes, not through the regex */
    size_t literal_len;
} TokRegex;

/* Bounds on one find_iter: Oniguruma's retries per match position (a tenth of onig's default,
 * which HF keeps: ordinary patterns need tens; a backtracking one reaches 10M only after tens of
 * seconds, its retries being counted sparsely), and CPU time, looked at between positions:
 * TOK_REGEX_BASE_SECONDS plus TOK_REGEX_SECONDS_PER_MB for each MB of text, 100 times what
 * ordinary patterns need (and room for sanitizer builds). */
#define TOK_REGEX_RETRY_LIMIT_IN_MATCH 1000000ul
#define TOK_REGEX_BASE_SECONDS 1.0
#define TOK_REGEX_SECONDS_PER_MB 20.0

/* HF's onig find_iter over text[0..len): calls emit(start, end) for each match, in order,
 * with HF's rule for empty matches. Returns 0, or -1 on a match error, a pattern that ran past
 * its limits (err names r->where) or a stop signal (err filled). */
typedef void (*TokMatchFn)(void *ctx, size_t start, size_t end);
int tok_regex_find_iter(const TokRegex *r, const char *text, size_t len, TokMatchFn emit, void *ctx, GtError *err);

enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_WITH_PREVIOUS, SPLIT_MERGED_WITH_NEXT, SPLIT_CONTIGUOUS };
enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

typedef enum { NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD, NORM_PREPEND, NORM_REPLACE } NormKind;
typedef struct {
    NormKind kind;
    char *str;     /* PREPEND: the prefix; REPLACE: the content */
    size_t str_len;
    TokRegex re;   /* REPLACE */
} TokNormalizer;

typedef enum { PRE_BYTE_LEVEL, PRE_SPLIT, PRE_METASPACE, PRE_DIGITS } PreKind;
typedef struct {
    PreKind kind;
    bool add_prefix_space, use_regex; /* BYTE_LEVEL */
    TokRegex re;                      /* SPLIT (a String pattern is compiled escaped, as HF does);
                                         BYTE_LEVEL with use_regex: GPT-2's pattern */
    int behavior;                     /* SPLIT */
    bool invert;                      /* SPLIT */
    char replacement[5];              /* METASPACE: one character, UTF-8 */
    size_t replacement_len;
    int prepend_scheme;               /* METASPACE */
    bool split;                       /* METASPACE */
    bool individual_digits;           /* DIGITS */
} TokPreTokenizer;

typedef enum { DEC_BYTE_LEVEL, DEC_METASPACE, DEC_REPLACE, DEC_BYTE_FALLBACK, DEC_FUSE, DEC_STRIP } DecKind;
typedef struct {
    DecKind kind;
    char replacement[5]; /* METASPACE */
    size_t replacement_len;
    int prepend_scheme;  /* METASPACE */
    TokRegex re;         /* REPLACE */
    char *content;       /* REPLACE: the replacement; STRIP: one character */
    size_t content_len;
    int start, stop;     /* STRIP */
} TokDecoder;

typedef struct {
    char *content;
    size_t len;
    int id;
    bool single_word, lstrip, rstrip, normalized, special;
    char *match;       /* what is searched for: content, or its normalized form */
    size_t match_len;
} TokAddedToken;

/* Leftmost-longest matching of the added tokens of one kind (normalized or not), as HF's
 * AddedVocabulary (aho_corasick, MatchKind::LeftmostLongest): an Aho-Corasick automaton over the
 * tokens' match strings (tokenizer_added.c). Node 0 is the root; children are sibling lists, the
 * root's a table. */
typedef struct {
    int *tokens;        /* indices into Tokenizer.added */
    int n;
    int32_t root_next[256];
    int32_t *child, *sibling, *fail, *out; /* out: the longest token that ends the node's string */
    uint32_t *depth;
    uint8_t *byte;
    uint32_t n_nodes, cap_nodes;
} TokAddedSet;

/* Adds token tok (index into added) to the set's automaton; returns the index of a token whose
 * match string is the same (the token is then not added), else -1. Call tok_added_finish after
 * the last. */
int tok_added_insert(TokAddedSet *set, const TokAddedToken *added, int tok);
/* The failure links and outputs; 0, or -1 when a stop signal came (err filled, naming file). */
int tok_added_finish(TokAddedSet *set, const TokAddedToken *added, const char *file, GtError *err);
/* The leftmost-longest match in s[from..len): true with its span and token index. */
bool tok_added_find(const TokAddedSet *set, const TokAddedToken *added, const char *s, size_t len, size_t from,
                    size_t *start, size_t *end, int *tok);
void tok_added_free(TokAddedSet *set);

/* The BPE model. */
typedef struct {
    TokStrMap vocab;
    char **id_to_token;  /* [vocab_size]: the vocabulary's key of each id (not owned), or NULL */
    uint32_t *id_len;
    int vocab_size;      /* 1 + the largest id of the model's vocabulary */
    int vocab_count;     /* entries in the vocabulary (HF's get_vocab_size) */
    /* merges: (a, b) -> (rank, new_id) */
    uint64_t *merge_keys; /* a << 32 | b, UINT64_MAX empty */
    uint32_t *merge_rank;
    int32_t *merge_new;
    uint32_t merge_cap;
    uint8_t *in_merge;    /* [vocab_size]: 1 where the id is either side of some merge */
    int unk_id;           /* -1 without unk_token */
    char *prefix, *suffix; /* continuing_subword_prefix, end_of_word_suffix (NULL when null) */
    size_t prefix_len, suffix_len;
    bool fuse_unk, byte_fallback, ignore_merges;
    int byte_ids[256];    /* byte_fallback: the ids of <0x00> .. <0xFF>, -1 where missing */
} TokBpe;

bool tok_bpe_merge_get(const TokBpe *m, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id);
void tok_bpe_merge_put(TokBpe *m, int32_t a, int32_t b, uint32_t rank, int32_t new_id);
void tok_bpe_free(TokBpe *m);

/* The 256-entry byte-level alphabet (GPT-2's bytes_to_unicode): byte -> UTF-8 of its char. */
typedef struct {
    char utf8[256][3];
    uint8_t len[256];
    int16_t byte_of[256 + 68]; /* code point -> the byte it stands for, -1 for none */
} TokByteAlphabet;
void tok_make_byte_alphabet(TokByteAlphabet *a);

struct Tokenizer {
    char path[GT_PATH_MAX];
    TokBpe bpe;
    TokNormalizer *norms;
    int n_norms;
    TokPreTokenizer *pres;
    int n_pres;
    TokDecoder *decs;
    int n_decs;
    bool has_decoder;
    TokAddedToken *added;
    int n_added;
    TokStrMap added_by_content;  /* content -> index into added */
    TokAddedSet raw_set, norm_set;
    int *special_of_id;          /* [vocab_size]: 1 where the id is an added special token */
    int *tmpl_before, *tmpl_after;
    int n_before, n_after;
    int vocab_size;
    /* decode: each id's string (an added token's content over the model's), or NULL */
    const char **token_str;
    uint32_t *token_len;
    /* single_word/lstrip/rstrip: HF's \w and \s (Rust regex, Unicode), through Oniguruma */
    TokRegex word_char, space_char;
    TokByteAlphabet alphabet;
    /* tokenizer.json as it was read (tokenizer_load; NULL from memory): what a run saves */
    uint8_t *raw;
    size_t raw_len;
    /* BOS, EOS, PAD (-1: none) and the file each came from (tokenizer_special.c) */
    int special_id[3];
    char special_from[3][32];
    bool special_files; /* from the files beside tokenizer.json, not the fallback rules */
};

/* tokenizer_special.c: the fallback BOS/EOS/PAD (post-processor, names); then, when any of
 * tokenizer_config.json, special_tokens_map.json, generation_config.json, config.json is in dir,
 * Hugging Face's from them (0, or -1 with err naming the file and key, code 2). */
void tok_special_defaults(Tokenizer *t);
int tok_special_from_files(Tokenizer *t, const char *dir, GtError *err);


/* UTF-8 helpers: the length of the (valid) character starting at s[0]; its code point. */
size_t tok_utf8_len(unsigned char lead);
int32_t tok_utf8_decode(const char *s, size_t *n);
/* Rust's String::from_utf8_lossy onto *buf: each maximal invalid subpart becomes one U+FFFD. */
void tok_utf8_lossy_append(const char *text, size_t len, GtBytes *out);

/* BPE on one pre-token (a word); appends its ids. The encoder's cache is keyed by the word.
 * lens (NULL: not wanted; else room for len entries): each appended token's bytes in word. */
int tok_bpe_word(TokEncoder *e, const char *word, size_t len, TokIds *out, uint32_t *lens, GtError *err);
/* Cache and scratch of one encoder thread, owned by tokenizer_bpe.c. */
typedef struct TokBpeScratch TokBpeScratch;
TokBpeScratch *tok_bpe_scratch_new(void);
void tok_bpe_scratch_free(TokBpeScratch *s);
const Tokenizer *tok_encoder_tokenizer(const TokEncoder *e);
TokBpeScratch *tok_encoder_bpe(TokEncoder *e);

/* Compile an Oniguruma pattern; escaped: a literal string (HF's regex::escape). The error
 * names path (the JSON path). */
int tok_regex_compile(TokRegex *r, const char *pattern, size_t len, bool escaped, const char *file,
                      const char *path, GtError *err);
void tok_regex_free(TokRegex *r);

/* The tokenizer's normalizers on s[0..len): the result (in the encoder's buffer, valid until the
 * next call) in *out, *n bytes. */
int tok_normalize(TokEncoder *e, const char *s, size_t len, const char **out, size_t *n, GtError *err);

/* NFC/NFD/NFKC/NFKD (kind) of s[0..len) into *out (*n bytes, capacity *cap, NUL-terminated), with
 * HF's Unicode 9.0 tables (tokenizer_unicode.c). */
int tok_unicode_normalize(int kind, const char *s, size_t len, char **out, size_t *n, size_t *cap, GtError *err);
/* Offsets: the alignments o (2 per byte, room for n bytes) of out[0..n), what normalization
 * `kind` made of in[0..n_in) whose alignments are al_in. The text is cut before each ASCII
 * character (which composes with nothing before it) and the cuts normalized apart; an unchanged
 * cut keeps its alignments, a changed one gives each of its bytes the cut's whole span. Cuts that
 * do not add up to out: the whole input's span everywhere (never narrower than HF's). */
int tok_unicode_realign(int kind, const char *in, size_t n_in, const size_t *al_in, const char *out, size_t n,
                        size_t *o, GtError *err);

/* tokenizer_json.c: the normalizer, pre-tokenizer, decoder and model sections of root. */
int tok_read_components(Tokenizer *t, const char *file, const cJSON *root, GtError *err);
void tok_components_free(Tokenizer *t);

#endif
