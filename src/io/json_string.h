/* json_string.h - JSON strings read and written exactly: every byte of a decoded string kept
 * (a "\u0000" is a 0 byte, not the end of the string, where cJSON's NUL-terminated strings would
 * stop), and text written as a JSON string that is valid UTF-8. The SFT jsonl reader (data_jsonl.c)
 * and `gtrain tokenize` (tokenize_cmd.c) share these. Nothing here keeps global state: safe from
 * several threads on different buffers (cJSON's parser is not: it records a global error). */
#ifndef GT_JSON_STRING_H
#define GT_JSON_STRING_H

#include "common.h"

/* The string whose opening quote is at *pp (within [*pp, end)): its bytes appended to out (NULL:
 * only skipped), *pp moved past the closing quote. \uXXXX becomes UTF-8 (surrogate pairs joined,
 * \u0000 a 0 byte; a lone surrogate is malformed); raw bytes are kept as they are (as cJSON, raw
 * control characters and invalid UTF-8 are not refused here). -1 on malformed text. */
int json_string_decode(const char **pp, const char *end, GtBytes *out);

/* text[0..len) appended to out as a JSON string, quotes included, as Python's
 * json.dumps(text, ensure_ascii=False) writes it: \" \\ \b \f \n \r \t, other bytes below 0x20 as
 * \u00XX, everything else as it is. A byte sequence that is not valid UTF-8 becomes U+FFFD, one
 * for each maximal invalid subpart (as Rust's String::from_utf8_lossy), so out is valid UTF-8. */
void json_string_encode(GtBytes *out, const char *text, size_t len);

#endif
