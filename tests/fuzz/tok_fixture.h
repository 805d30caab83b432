/* tok_fixture.h - a small tokenizer.json, written out in C, for the tokenizer fuzz targets: a
 * byte-level BPE (GPT-2's byte alphabet, Llama-3's Split pattern, a few merges, ignore_merges),
 * two added tokens (one special, one with lstrip/rstrip) and a BOS template. Lossless: decoding
 * its ids gives the text back. */
#ifndef GT_TOK_FIXTURE_H
#define GT_TOK_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* JSON-escaped UTF-8 of byte b's byte-level character into out. */
static inline void tok_fixture_char(int b, char *out) {
    int n = 0, c = -1;
    for (int x = 0; x < 256; x++) {
        int printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
        int cx = printable ? x : 256 + n++;
        if (x == b) c = cx;
    }
    if (c == '"' || c == '\\') sprintf(out, "\\%c", c);
    else if (c < 0x80) sprintf(out, "%c", c);
    else sprintf(out, "%c%c", 0xC0 | (c >> 6), 0x80 | (c & 0x3F));
}

/* A malloc'd tokenizer.json (the caller frees it). */
static inline char *tok_fixture_json(void) {
    static const char *const merges[][2] = {{"h", "e"}, {"Ġ", "t"}, {"Ġt", "he"}, {"i", "n"}, {"Ġ", "a"}, {"e", "r"}, {"Ġ", "Ġ"}, {"ĠĠ", "ĠĠ"}};
    size_t cap = 1 << 16, n = 0;
    char *j = malloc(cap);
    if (!j) return NULL;
    n += (size_t)snprintf(j + n, cap - n,
                          "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":["
                          "{\"id\":264,\"content\":\"<|bos|>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
                          "{\"id\":265,\"content\":\"<eot>\",\"single_word\":false,\"lstrip\":true,\"rstrip\":true,\"normalized\":false,\"special\":true}],"
                          "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
                          "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
                          "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]},"
                          "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<|bos|>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],"
                          "\"pair\":[],\"special_tokens\":{\"<|bos|>\":{\"id\":\"<|bos|>\",\"ids\":[264],\"tokens\":[\"<|bos|>\"]}}},"
                          "\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true},"
                          "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,"
                          "\"fuse_unk\":false,\"byte_fallback\":false,\"ignore_merges\":true,\"vocab\":{");
    for (int b = 0; b < 256; b++) {
        char c[8];
        tok_fixture_char(b, c);
        n += (size_t)snprintf(j + n, cap - n, "%s\"%s\":%d", b ? "," : "", c, b);
    }
    int nm = (int)(sizeof merges / sizeof merges[0]);
    for (int m = 0; m < nm; m++) n += (size_t)snprintf(j + n, cap - n, ",\"%s%s\":%d", merges[m][0], merges[m][1], 256 + m);
    n += (size_t)snprintf(j + n, cap - n, "},\"merges\":[");
    for (int m = 0; m < nm; m++) n += (size_t)snprintf(j + n, cap - n, "%s[\"%s\",\"%s\"]", m ? "," : "", merges[m][0], merges[m][1]);
    snprintf(j + n, cap - n, "]}}");
    return j;
}

#endif
