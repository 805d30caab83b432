/* model_json.c - the cJSON field helpers of the model JSON readers (model_desc.c for GPT-2,
 * model_desc_llama.c for the Llama family): each field is looked up once and a duplicate is
 * refused, values are checked for type and range, and every refusal is one line
 * "PATH: FIELD: expected ..., found ..." with code GT_EXIT_BAD_INPUT. */
#include "model_desc_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void mj_line_col(const char *buf, size_t len, size_t off, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < off && i < len; i++) {
        if (buf[i] == '\n')
            l++, c = 1;
        else
            c++;
    }
    *line = l;
    *col = c;
}

const char *mj_type_name(const cJSON *j) {
    if (!j) return "nothing";
    if (cJSON_IsNull(j)) return "null";
    if (cJSON_IsBool(j)) return cJSON_IsTrue(j) ? "true" : "false";
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsObject(j)) return "an object";
    return "an invalid value";
}

const char *mj_quote(const char *s, char *buf, size_t cap) {
    size_t o = 0;
    buf[o++] = '"';
    for (const char *p = s; *p && o + 8 < cap; p++) {
        if (p - s >= 48) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        unsigned char ch = (unsigned char)*p;
        if (ch < 0x20 || ch == 0x7f)
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", ch);
        else
            buf[o++] = (char)ch;
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}

const char *mj_num(double v, char *buf, size_t cap) {
    snprintf(buf, cap, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, cap, "%.17g", v);
    return buf;
}

const char *mj_found(const cJSON *j, char *buf, size_t cap) {
    if (cJSON_IsNumber(j))
        mj_num(j->valuedouble, buf, cap);
    else if (cJSON_IsString(j))
        mj_quote(j->valuestring, buf, cap);
    else
        snprintf(buf, cap, "%s", mj_type_name(j));
    return buf;
}

int mj_get(const cJSON *obj, const char *name, const char *label, const cJSON **out, const char *path,
           GtError *err) {
    const cJSON *found = NULL;
    *out = NULL;
    for (const cJSON *it = obj->child; it; it = it->next) {
        if (it->string && strcmp(it->string, name) == 0) {
            if (found)
                return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected the field once, found it twice", path,
                                label ? label : name);
            found = it;
        }
    }
    *out = found;
    return 0;
}

int mj_get_int(const cJSON *obj, const char *name, const char *label, bool required, int lo, int hi, int *out,
               bool *present, const char *path, GtError *err) {
    const cJSON *j = NULL;
    char f[MJ_FOUND_MAX];
    if (!label) label = name;
    if (mj_get(obj, name, label, &j, path, err)) return -1;
    if (present) *present = false;
    if (!j || (!required && cJSON_IsNull(j))) {
        if (required)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected an integer in [%d, %d], found no such field", path,
                            label, lo, hi);
        return 0;
    }
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || floor(j->valuedouble) != j->valuedouble ||
        j->valuedouble < lo || j->valuedouble > hi)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected an integer in [%d, %d], found %s", path, label, lo, hi,
                        mj_found(j, f, sizeof f));
    *out = (int)j->valuedouble;
    if (present) *present = true;
    return 0;
}

int mj_get_bool(const cJSON *obj, const char *name, const char *label, bool null_ok, bool *out, bool *present,
                const char *path, GtError *err) {
    const cJSON *j = NULL;
    char f[MJ_FOUND_MAX];
    if (!label) label = name;
    if (mj_get(obj, name, label, &j, path, err)) return -1;
    if (present) *present = false;
    if (!j || (null_ok && cJSON_IsNull(j))) return 0;
    if (!cJSON_IsBool(j))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected true or false, found %s", path, label,
                        mj_found(j, f, sizeof f));
    *out = cJSON_IsTrue(j);
    if (present) *present = true;
    return 0;
}

int mj_get_number(const cJSON *obj, const char *name, const char *label, bool null_ok, const char *what,
                  double *out, bool *present, const char *path, GtError *err) {
    const cJSON *j = NULL;
    char f[MJ_FOUND_MAX];
    if (!label) label = name;
    if (mj_get(obj, name, label, &j, path, err)) return -1;
    if (present) *present = false;
    if (!j || (null_ok && cJSON_IsNull(j))) return 0;
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected %s, found %s", path, label, what,
                        mj_found(j, f, sizeof f));
    *out = j->valuedouble;
    if (present) *present = true;
    return 0;
}

int mj_check_nesting(const char *json, size_t len, const char *path, GtError *err) {
    long at = gt_json_too_deep(json, len, MODEL_JSON_MAX_DEPTH);
    if (at < 0) return 0;
    int line, col;
    mj_line_col(json, len, (size_t)at, &line, &col);
    return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%d:%d: expected JSON nested at most %d deep, found deeper nesting", path,
                    line, col, MODEL_JSON_MAX_DEPTH);
}
