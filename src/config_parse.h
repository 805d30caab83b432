/* config_parse.h - private to config.c and config_yaml.c: the context of one config load (the
 * file's text, its YAML parser, where each key got its value) and the YAML reader's entry points. */
#ifndef GT_CONFIG_PARSE_H
#define GT_CONFIG_PARSE_H

#include <yaml.h>

#include "config_schema.h"

typedef struct {
    RunConfig *cfg;
    const char *file; /* the config path as given, for messages */
    const char *buf;
    size_t len;
    yaml_parser_t parser;
    bool file_seen[GT_CONFIG_MAX_KEYS];
    int line[GT_CONFIG_MAX_KEYS], col[GT_CONFIG_MAX_KEYS];
    GtError *err;
} CfgCtx;

/* "run.yaml:3:5: key: msg" or "--set key: msg" for key i */
int cfg_key_error(const CfgCtx *c, int i, const char *msg);
/* the config file's bytes (at most 1 MiB) */
int cfg_read_file(const char *path, char **out, size_t *out_len, GtError *err);
/* NUL bytes and tabs refused, with their line and column */
int cfg_prescan(const CfgCtx *c);
/* the YAML document in c->parser -> c->cfg, key by key through the schema */
int cfg_parse_document(CfgCtx *c);
/* one --set "key=value" */
int cfg_apply_set(CfgCtx *c, const char *set);

#endif
