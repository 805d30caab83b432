/* parquet.c - the parquet reader's file/glob/row API (parquet.h): footers read at open, the
 * requested columns resolved by name in every file's schema (flat string/integer leaves and
 * list<struct<role, content>> message columns, with their definition/repetition level thresholds),
 * then rows assembled one row group at a time from the requested leaves' decoded chunks
 * (parquet_page.c). Only the requested columns' chunks are read. */
#include "parquet_internal.h"

#include <errno.h>
#include <glob.h>
#include <stdlib.h>
#include <unistd.h>

#define PQ_MAX_SCHEMA_DEPTH 64

typedef struct {
    PqKind kind;
    int n_leaves;
    int leaf[2];          /* flat: leaf[0]; messages: role, content */
    int type[2];          /* the leaves' physical types */
    int max_def[2], max_rep[2];
    int d_row, d_list, d_elem; /* messages: the def levels at which the row, a list entry, the struct are there */
    int unsigned_bits;         /* 32 or 64: an unsigned integer column (UINT_32 / UINT_64) */
} ColPlan;

typedef struct {
    char *path;
    uint64_t size, footer_start;
    PqFileMeta meta;
    ColPlan *plan; /* [n_columns] */
} PqFile;

typedef struct {
    PqLeafData d;
    size_t lv, val; /* cursors: the next level and the next value */
} LeafCursor;

struct ParquetReader {
    int n_files, n_columns;
    PqFile *files;
    char **columns;
    PqKind *kinds;
    uint64_t num_rows;
    const uint8_t *mem; /* parquet_open_memory's buffer */
    /* reading state */
    int file_i, rg;
    int fd;
    int64_t rg_rows, rg_row;
    uint64_t file_row, cur_row;
    int cur_file;
    LeafCursor *cur;  /* [n_columns][2] */
    PqMessage **msgs; /* [n_columns] */
    size_t *cap_msgs;
};

static ssize_t pread_full(int fd, void *buf, size_t n, uint64_t off) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

/* ---- schema ---- */

typedef struct {
    int *def, *rep, *leaf, *next; /* per schema element */
    int n_leaves;
} Tree;

static int walk(const PqFileMeta *m, Tree *t, int i, int def, int rep, int depth, int *pos, const char *file,
                GtError *err) {
    const PqSchemaElem *e = &m->schema[i];
    if (depth > PQ_MAX_SCHEMA_DEPTH)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: schema: expected at most %d levels of nesting, found more", file,
                        PQ_MAX_SCHEMA_DEPTH);
    if (i > 0) {
        if (e->repetition < 0)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: schema element %d (%s): expected a repetition type, found none",
                            file, i, e->name);
        def += e->repetition != PQR_REQUIRED;
        rep += e->repetition == PQR_REPEATED;
    }
    t->def[i] = def;
    t->rep[i] = rep;
    t->leaf[i] = -1;
    (*pos)++;
    if (e->num_children == 0 && i > 0) {
        if (e->type < 0)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: schema element %d (%s): expected a type or children, found neither",
                            file, i, e->name);
        t->leaf[i] = t->n_leaves++;
    }
    for (int k = 0; k < e->num_children; k++) {
        if (*pos >= m->n_schema)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: schema: expected %d children of element %d (%s), found the end of the schema",
                            file, e->num_children, i, e->name);
        if (walk(m, t, *pos, def, rep, depth + 1, pos, file, err)) return -1;
    }
    t->next[i] = *pos;
    return 0;
}

static const char *type_name(int type) {
    static const char *const names[] = {"boolean", "int32", "int64", "int96", "float", "double", "byte_array",
                                        "fixed_len_byte_array"};
    return type >= 0 && type < 8 ? names[type] : "unknown";
}

static int is_decimal(const PqSchemaElem *e) {
    return e->converted_type == PQ_CONVERTED_DECIMAL || e->logical_type == PQ_LOGICAL_DECIMAL;
}

static int find_child(const PqFileMeta *m, const Tree *t, int parent, const char *name) {
    for (int c = parent + 1; c < t->next[parent]; c = t->next[c])
        if (!strcmp(m->schema[c].name, name)) return c;
    return -1;
}

static int n_children(const Tree *t, int parent) {
    int n = 0;
    for (int c = parent + 1; c < t->next[parent]; c = t->next[c]) n++;
    return n;
}

static int plan_column(const PqFileMeta *m, const Tree *t, const char *file, const char *col, ColPlan *p, GtError *err) {
    static const char expected[] = "a string, an integer or a list<struct<role: string, content: string>> column";
    memset(p, 0, sizeof *p);
    int e = find_child(m, t, 0, col);
    if (e < 0) {
        char names[300] = "";
        size_t used = 0;
        for (int c = 1; c < t->next[0] && used < sizeof names - 1; c = t->next[c]) {
            int w = snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", m->schema[c].name);
            if (w < 0) break;
            used += (size_t)w;
        }
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: column \"%s\": expected a column of that name, found none (its columns: %s)",
                        file, col, names);
    }
    const PqSchemaElem *s = &m->schema[e];
    if (s->repetition == PQR_REPEATED)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: column \"%s\": expected %s, found a repeated %s field", file, col,
                        expected, s->num_children ? "group" : type_name(s->type));
    if (t->leaf[e] >= 0) {
        if (s->type == PQT_BYTE_ARRAY && !is_decimal(s)) p->kind = PQ_STRING;
        else if ((s->type == PQT_INT32 || s->type == PQT_INT64 || s->type == PQT_BOOLEAN) && !is_decimal(s)) p->kind = PQ_INT;
        else
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: column \"%s\": expected %s, found a %s%s column", file, col,
                            expected, is_decimal(s) ? "decimal " : "", type_name(s->type));
        if (s->converted_type == PQ_CONVERTED_UINT_32 && s->type == PQT_INT32) p->unsigned_bits = 32;
        if (s->converted_type == PQ_CONVERTED_UINT_64 && s->type == PQT_INT64) p->unsigned_bits = 64;
        p->n_leaves = 1;
        p->leaf[0] = t->leaf[e];
        p->type[0] = s->type;
        p->max_def[0] = t->def[e];
        p->max_rep[0] = 0;
        return 0;
    }
    /* a group: list<struct<role, content>>, 3-level (list/element) or 2-level (the repeated group is the struct) */
    int l = e + 1, el = -1;
    if (n_children(t, e) == 1 && m->schema[l].repetition == PQR_REPEATED && m->schema[l].num_children > 0) {
        int first = l + 1;
        if (n_children(t, l) == 1 && m->schema[first].num_children > 0 && m->schema[first].repetition != PQR_REPEATED)
            el = first;
        else if (find_child(m, t, l, "role") >= 0)
            el = l;
    }
    int role = el >= 0 ? find_child(m, t, el, "role") : -1, content = el >= 0 ? find_child(m, t, el, "content") : -1;
    int leaves[2] = {role, content};
    for (int k = 0; k < 2; k++) {
        int x = leaves[k];
        if (x < 0 || t->leaf[x] < 0 || m->schema[x].type != PQT_BYTE_ARRAY || m->schema[x].repetition == PQR_REPEATED ||
            is_decimal(&m->schema[x]))
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: column \"%s\": expected %s, found a %s without %s string field",
                            file, col, expected, el >= 0 ? "list of structs" : n_children(t, e) == 1 && m->schema[l].repetition == PQR_REPEATED ? "list" : "struct",
                            k ? "a content" : "a role");
        p->leaf[k] = t->leaf[x];
        p->type[k] = PQT_BYTE_ARRAY;
        p->max_def[k] = t->def[x];
        p->max_rep[k] = t->rep[x];
    }
    p->kind = PQ_MESSAGES;
    p->n_leaves = 2;
    p->d_row = t->def[e];
    p->d_list = t->def[l];
    p->d_elem = t->def[el];
    return 0;
}

/* The footer's checks that need the schema: every row group has a chunk per leaf; the requested
 * leaves' chunks are in the file, before the footer, of the schema's type. */
static int check_file(PqFile *f, int n_columns, int n_leaves, GtError *err) {
    for (int g = 0; g < f->meta.n_row_groups; g++) {
        const PqRowGroupMeta *rg = &f->meta.row_groups[g];
        if (rg->n_columns != n_leaves)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: row group %d: expected %d column chunks (one per leaf column), found %d",
                            f->path, g, n_leaves, rg->n_columns);
        for (int c = 0; c < n_columns; c++)
            for (int k = 0; k < f->plan[c].n_leaves; k++) {
                const PqChunkMeta *cm = &rg->columns[f->plan[c].leaf[k]];
                if (!cm->has_meta || cm->external)
                    return gt_error(err, GT_EXIT_BAD_INPUT, "%s: row group %d, leaf column %d: expected its metadata in this file, found %s",
                                    f->path, g, f->plan[c].leaf[k], cm->external ? "a chunk in another file" : "none");
                if (cm->type != f->plan[c].type[k])
                    return gt_error(err, GT_EXIT_BAD_INPUT, "%s: row group %d, leaf column %d: expected type %s as the schema says, found %s",
                                    f->path, g, f->plan[c].leaf[k], type_name(f->plan[c].type[k]), type_name(cm->type));
                int64_t start = pq_chunk_start(cm);
                if (cm->total_compressed_size == 0 && cm->num_values == 0) continue; /* an empty chunk: nothing to read */
                if (start < 4 || (uint64_t)start > f->footer_start ||
                    (uint64_t)cm->total_compressed_size > f->footer_start - (uint64_t)start)
                    return gt_error(err, GT_EXIT_BAD_INPUT,
                                    "%s: row group %d, leaf column %d: expected a column chunk within bytes [4, %llu), found %lld bytes at byte %lld",
                                    f->path, g, f->plan[c].leaf[k], (unsigned long long)f->footer_start,
                                    (long long)cm->total_compressed_size, (long long)start);
            }
    }
    return 0;
}

/* The footer of f (bytes from fd, or mem) parsed and the columns planned */
static int open_file(ParquetReader *r, PqFile *f, int fd, const uint8_t *mem, GtError *err) {
    uint8_t tail[8], head[4];
    if (f->size < 12)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected a parquet file (PAR1 ... footer PAR1, 12 bytes at least), found %llu bytes",
                        f->path, (unsigned long long)f->size);
    if (mem) {
        memcpy(head, mem, 4);
        memcpy(tail, mem + f->size - 8, 8);
    } else if (pread_full(fd, head, 4, 0) != 4 || pread_full(fd, tail, 8, f->size - 8) != 8) {
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: cannot read the file's ends: %s", f->path, errno ? strerror(errno) : "it shrank");
    }
    if (memcmp(head, "PAR1", 4))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s, byte 0: expected the parquet magic PAR1, found %02x %02x %02x %02x", f->path,
                        head[0], head[1], head[2], head[3]);
    if (memcmp(tail + 4, "PAR1", 4))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s, byte %llu: expected the parquet magic PAR1 at the end, found %s", f->path,
                        (unsigned long long)(f->size - 4), memcmp(tail + 4, "PARE", 4) ? "other bytes" : "PARE (an encrypted footer)");
    uint32_t flen = (uint32_t)tail[0] | (uint32_t)tail[1] << 8 | (uint32_t)tail[2] << 16 | (uint32_t)tail[3] << 24;
    if ((uint64_t)flen > f->size - 12)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s, byte %llu: expected a footer length of at most %llu (the file's size less 12), found %u",
                        f->path, (unsigned long long)(f->size - 8), (unsigned long long)(f->size - 12), flen);
    f->footer_start = f->size - 8 - flen;
    const uint8_t *fb = mem ? mem + f->footer_start : NULL;
    uint8_t *owned = NULL;
    if (!mem) {
        owned = malloc(flen ? flen : 1);
        if (!owned) return gt_error(err, GT_EXIT_FAILURE, "%s: out of memory for a footer of %u bytes", f->path, flen);
        if (pread_full(fd, owned, flen, f->footer_start) != (ssize_t)flen) {
            free(owned);
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: cannot read the footer", f->path);
        }
        fb = owned;
    }
    int rc = pq_parse_footer(&f->meta, fb, flen, f->footer_start, f->path, err);
    free(owned);
    if (rc) return -1;
    const PqFileMeta *m = &f->meta;
    if (m->n_schema < 1 || m->schema[0].num_children < 1)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: footer: expected a schema with a root and columns, found %s", f->path,
                        m->n_schema < 1 ? "an empty schema" : "no columns");
    Tree t = {0};
    size_t ns = (size_t)m->n_schema;
    t.def = gt_xcalloc(ns, sizeof(int));
    t.rep = gt_xcalloc(ns, sizeof(int));
    t.leaf = gt_xcalloc(ns, sizeof(int));
    t.next = gt_xcalloc(ns, sizeof(int));
    int pos = 0;
    rc = walk(m, &t, 0, 0, 0, 0, &pos, f->path, err);
    if (!rc && pos != m->n_schema)
        rc = gt_error(err, GT_EXIT_BAD_INPUT, "%s: schema: expected %d elements under the root, found %d", f->path, pos, m->n_schema);
    f->plan = gt_xcalloc((size_t)(r->n_columns ? r->n_columns : 1), sizeof *f->plan);
    for (int c = 0; c < r->n_columns && !rc; c++) rc = plan_column(m, &t, f->path, r->columns[c], &f->plan[c], err);
    if (!rc) rc = check_file(f, r->n_columns, t.n_leaves, err);
    free(t.def);
    free(t.rep);
    free(t.leaf);
    free(t.next);
    if (rc) return -1;
    int64_t sum = 0;
    for (int g = 0; g < m->n_row_groups; g++) {
        if (m->row_groups[g].num_rows > INT64_MAX - sum)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: footer: expected row counts that add up, found an overflow", f->path);
        sum += m->row_groups[g].num_rows;
    }
    if (sum != m->num_rows)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: footer: expected num_rows %lld to be the row groups' sum, found %lld", f->path,
                        (long long)m->num_rows, (long long)sum);
    return 0;
}

static ParquetReader *reader_new(const char *const *columns, int n_columns) {
    ParquetReader *r = gt_xcalloc(1, sizeof *r);
    r->n_columns = n_columns;
    r->columns = gt_xcalloc((size_t)(n_columns ? n_columns : 1), sizeof *r->columns);
    for (int c = 0; c < n_columns; c++) r->columns[c] = gt_xstrdup(columns[c]);
    r->kinds = gt_xcalloc((size_t)(n_columns ? n_columns : 1), sizeof *r->kinds);
    r->cur = gt_xcalloc((size_t)(n_columns ? n_columns : 1) * 2, sizeof *r->cur);
    r->msgs = gt_xcalloc((size_t)(n_columns ? n_columns : 1), sizeof *r->msgs);
    r->cap_msgs = gt_xcalloc((size_t)(n_columns ? n_columns : 1), sizeof *r->cap_msgs);
    r->fd = -1;
    r->rg = -1;
    return r;
}

/* After every file's footer: the kinds agree across files, the total row count */
static int finish_open(ParquetReader *r, GtError *err) {
    for (int i = 0; i < r->n_files; i++) {
        if (r->files[i].meta.num_rows < 0 || (uint64_t)r->files[i].meta.num_rows > UINT64_MAX - r->num_rows)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: footer: expected a row count that adds up, found %lld", r->files[i].path,
                            (long long)r->files[i].meta.num_rows);
        r->num_rows += (uint64_t)r->files[i].meta.num_rows;
        for (int c = 0; c < r->n_columns; c++) {
            PqKind k = r->files[i].plan[c].kind;
            if (i == 0) r->kinds[c] = k;
            else if (k != r->kinds[c]) {
                static const char *const kn[] = {"null", "string", "integer", "messages"};
                return gt_error(err, GT_EXIT_BAD_INPUT, "%s: column \"%s\": expected a %s column as in %s, found a %s column",
                                r->files[i].path, r->columns[c], kn[r->kinds[c]], r->files[0].path, kn[k]);
            }
        }
    }
    return 0;
}

int parquet_open_memory(ParquetReader **out, const char *name, const void *buf, size_t len, const char *const *columns,
                        int n_columns, GtError *err) {
    *out = NULL;
    ParquetReader *r = reader_new(columns, n_columns);
    r->mem = buf;
    r->n_files = 1;
    r->files = gt_xcalloc(1, sizeof *r->files);
    r->files[0].path = gt_xstrdup(name);
    r->files[0].size = len;
    if (open_file(r, &r->files[0], -1, buf, err) || finish_open(r, err)) {
        parquet_close(r);
        return -1;
    }
    *out = r;
    return 0;
}

int parquet_open(ParquetReader **out, const char *path, const char *const *columns, int n_columns, GtError *err) {
    *out = NULL;
    ParquetReader *r = reader_new(columns, n_columns);
    glob_t g;
    memset(&g, 0, sizeof g);
    int globbed = strpbrk(path, "*?[") != NULL;
    if (globbed) {
        int grc = glob(path, GLOB_ERR, NULL, &g);
        if (grc == GLOB_NOMATCH || (grc == 0 && g.gl_pathc == 0)) {
            globfree(&g);
            parquet_close(r);
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected parquet files matching the pattern, found none", path);
        }
        if (grc) {
            globfree(&g);
            parquet_close(r);
            return gt_error(err, GT_EXIT_FAILURE, "%s: cannot expand the pattern (%s)", path,
                            grc == GLOB_NOSPACE ? "out of memory" : "a read error");
        }
        if (g.gl_pathc > INT32_MAX) g.gl_pathc = INT32_MAX;
        r->n_files = (int)g.gl_pathc;
    } else {
        r->n_files = 1;
    }
    r->files = gt_xcalloc((size_t)r->n_files, sizeof *r->files);
    int rc = 0;
    for (int i = 0; i < r->n_files && !rc; i++) {
        PqFile *f = &r->files[i];
        f->path = gt_xstrdup(globbed ? g.gl_pathv[i] : path);
        int fd = gt_open_input(f->path, "parquet file", &f->size, err);
        if (fd < 0) {
            rc = -1;
            break;
        }
        errno = 0;
        rc = open_file(r, f, fd, NULL, err);
        close(fd);
    }
    if (globbed) globfree(&g);
    if (!rc) rc = finish_open(r, err);
    if (rc) {
        parquet_close(r);
        return -1;
    }
    *out = r;
    return 0;
}

uint64_t parquet_num_rows(const ParquetReader *r) { return r->num_rows; }
PqKind parquet_column_kind(const ParquetReader *r, int column) {
    return column >= 0 && column < r->n_columns ? r->kinds[column] : PQ_NULL;
}
const char *parquet_current_file(const ParquetReader *r) {
    return r->n_files ? r->files[r->cur_file].path : "";
}
uint64_t parquet_current_row(const ParquetReader *r) { return r->cur_row; }

static void clear_row_group(ParquetReader *r) {
    for (int i = 0; i < 2 * r->n_columns; i++) {
        pq_leaf_clear(&r->cur[i].d);
        r->cur[i].lv = r->cur[i].val = 0;
    }
}

/* Read and decode row group g of the current file's requested leaves */
static int load_row_group(ParquetReader *r, int g, GtError *err) {
    PqFile *f = &r->files[r->file_i];
    const PqRowGroupMeta *rg = &f->meta.row_groups[g];
    clear_row_group(r);
    for (int c = 0; c < r->n_columns; c++) {
        const ColPlan *p = &f->plan[c];
        for (int k = 0; k < p->n_leaves; k++) {
            const PqChunkMeta *cm = &rg->columns[p->leaf[k]];
            LeafCursor *lc = &r->cur[2 * c + k];
            lc->d.type = p->type[k];
            lc->d.max_def = p->max_def[k];
            lc->d.max_rep = p->max_rep[k];
            int64_t start = pq_chunk_start(cm);
            size_t n = (size_t)cm->total_compressed_size;
            uint8_t *chunk;
            int own = 0;
            if (r->mem) {
                chunk = (uint8_t *)(uintptr_t)(r->mem + start);
            } else {
                chunk = malloc(n ? n : 1);
                if (!chunk)
                    return gt_error(err, GT_EXIT_FAILURE, "%s: out of memory for a column chunk of %zu bytes", f->path, n);
                if (pread_full(r->fd, chunk, n, (uint64_t)start) != (ssize_t)n) {
                    free(chunk);
                    return gt_error(err, GT_EXIT_BAD_INPUT, "%s: row group %d, column %s: cannot read %zu bytes at byte %lld (%s)",
                                    f->path, g, r->columns[c], n, (long long)start, errno ? strerror(errno) : "the file shrank");
                }
                own = 1;
            }
            char colname[300];
            snprintf(colname, sizeof colname, "%s%s", r->columns[c],
                     p->kind == PQ_MESSAGES ? (k ? " (content)" : " (role)") : "");
            PqWhere w = {.file = f->path, .column = colname, .row_group = g};
            if (pq_decode_chunk(&lc->d, cm, chunk, n, own, (uint64_t)start, &w, err)) return -1;
        }
    }
    r->rg = g;
    r->rg_rows = rg->num_rows;
    r->rg_row = 0;
    return 0;
}

static int row_fail(const ParquetReader *r, int c, GtError *err, const char *what) {
    return gt_error(err, GT_EXIT_BAD_INPUT, "%s: row group %d, column %s, row %llu: %s", r->files[r->file_i].path, r->rg,
                    r->columns[c], (unsigned long long)r->file_row, what);
}

static int flat_value(ParquetReader *r, int c, PqValue *v, GtError *err) {
    LeafCursor *lc = &r->cur[2 * c];
    PqLeafData *d = &lc->d;
    if (lc->lv >= d->n_levels) return row_fail(r, c, err, "expected a value, found the end of the column chunk");
    int present = !d->max_def || d->def[lc->lv] == d->max_def;
    lc->lv++;
    memset(v, 0, sizeof *v);
    if (!present) {
        v->kind = PQ_NULL;
        return 0;
    }
    if (lc->val >= d->n_vals) return row_fail(r, c, err, "expected a value, found none left");
    if (d->type == PQT_BYTE_ARRAY) {
        v->kind = PQ_STRING;
        v->s = d->strs[lc->val].s;
        v->len = d->strs[lc->val].len;
    } else {
        const ColPlan *p = &r->files[r->file_i].plan[c];
        v->kind = PQ_INT;
        v->i = d->ints[lc->val];
        if (p->unsigned_bits == 32) v->i = (int64_t)(uint32_t)v->i;
        if (p->unsigned_bits == 64 && v->i < 0) {
            char msg[160];
            snprintf(msg, sizeof msg, "expected an unsigned integer below 2^63, found %llu", (unsigned long long)v->i);
            return row_fail(r, c, err, msg);
        }
    }
    lc->val++;
    return 0;
}

/* One list entry of a messages leaf: 0 no entry (null or empty), 1 an entry (s, n: its string, NULL when null) */
static int msg_entry(const ColPlan *p, LeafCursor *lc, const char **s, size_t *n) {
    const PqLeafData *d = &lc->d;
    int def = d->def[lc->lv];
    *s = NULL;
    *n = 0;
    if (def < p->d_list) return def < p->d_row ? -1 : 0;
    if (def == d->max_def && lc->val < d->n_vals) {
        *s = d->strs[lc->val].s;
        *n = d->strs[lc->val].len;
        lc->val++;
    }
    return 1;
}

static int messages_value(ParquetReader *r, int c, PqValue *v, GtError *err) {
    const ColPlan *p = &r->files[r->file_i].plan[c];
    LeafCursor *a = &r->cur[2 * c], *b = &r->cur[2 * c + 1];
    memset(v, 0, sizeof *v);
    if (a->lv >= a->d.n_levels || b->lv >= b->d.n_levels)
        return row_fail(r, c, err, "expected the row's messages, found the end of the column chunk");
    if (a->d.rep[a->lv] != 0 || b->d.rep[b->lv] != 0)
        return row_fail(r, c, err, "expected a row's first message (repetition level 0), found a continuation");
    size_t n = 0;
    for (;;) {
        const char *rs, *cs;
        size_t rn, cn;
        int ea = msg_entry(p, a, &rs, &rn), eb = msg_entry(p, b, &cs, &cn);
        if (ea != eb) return row_fail(r, c, err, "expected the role and content fields to agree on the messages, found them apart");
        a->lv++;
        b->lv++;
        if (ea <= 0) {
            v->kind = ea < 0 ? PQ_NULL : PQ_MESSAGES;
            break;
        }
        if (n == r->cap_msgs[c]) {
            r->cap_msgs[c] = n ? 2 * n : 8;
            r->msgs[c] = gt_xrealloc(r->msgs[c], r->cap_msgs[c] * sizeof **r->msgs);
        }
        r->msgs[c][n++] = (PqMessage){.role = rs, .role_len = rn, .content = cs, .content_len = cn};
        int more_a = a->lv < a->d.n_levels && a->d.rep[a->lv] != 0, more_b = b->lv < b->d.n_levels && b->d.rep[b->lv] != 0;
        if (more_a != more_b) return row_fail(r, c, err, "expected the role and content fields to hold as many messages, found them apart");
        if (!more_a) {
            v->kind = PQ_MESSAGES;
            break;
        }
    }
    v->msgs = v->kind == PQ_MESSAGES ? r->msgs[c] : NULL;
    v->n_msgs = n;
    return 0;
}

int parquet_next_row(ParquetReader *r, PqValue *v, GtError *err) {
    while (r->rg < 0 || r->rg_row >= r->rg_rows) {
        /* the row group done: every level used */
        if (r->rg >= 0)
            for (int c = 0; c < r->n_columns; c++)
                for (int k = 0; k < r->files[r->file_i].plan[c].n_leaves; k++)
                    if (r->cur[2 * c + k].lv != r->cur[2 * c + k].d.n_levels)
                        return row_fail(r, c, err, "expected the column chunk to end with the row group's rows, found more values");
        int g = r->rg + 1;
        if (r->fd < 0 && !r->mem && r->file_i < r->n_files) {
            uint64_t size = 0;
            r->fd = gt_open_input(r->files[r->file_i].path, "parquet file", &size, err);
            if (r->fd < 0) return -1;
        }
        if (r->file_i >= r->n_files) return 0;
        if (g >= r->files[r->file_i].meta.n_row_groups) {
            if (r->fd >= 0) close(r->fd);
            r->fd = -1;
            clear_row_group(r);
            r->file_i++;
            r->rg = -1;
            r->rg_rows = r->rg_row = 0;
            r->file_row = 0;
            if (r->file_i >= r->n_files) return 0;
            continue;
        }
        if (r->n_columns == 0) { /* no columns: only the row counts */
            r->rg = g;
            r->rg_rows = r->files[r->file_i].meta.row_groups[g].num_rows;
            r->rg_row = 0;
            continue;
        }
        if (load_row_group(r, g, err)) return -1;
    }
    for (int c = 0; c < r->n_columns; c++) {
        int rc = r->kinds[c] == PQ_MESSAGES ? messages_value(r, c, &v[c], err) : flat_value(r, c, &v[c], err);
        if (rc) return -1;
    }
    r->cur_file = r->file_i;
    r->cur_row = r->file_row++;
    r->rg_row++;
    return 1;
}

void parquet_close(ParquetReader *r) {
    if (!r) return;
    for (int i = 0; i < r->n_files; i++) {
        free(r->files[i].path);
        free(r->files[i].plan);
        pq_meta_free(&r->files[i].meta);
    }
    free(r->files);
    if (r->cur) clear_row_group(r);
    for (int c = 0; c < r->n_columns; c++) {
        free(r->columns[c]);
        free(r->msgs[c]);
    }
    free(r->columns);
    free(r->kinds);
    free(r->cur);
    free(r->msgs);
    free(r->cap_msgs);
    if (r->fd >= 0) close(r->fd);
    free(r);
}
