"""pq_write.py - parquet files written by pyarrow for tests/test_parquet.c, and what pyarrow reads
back from each (the reference the C reader is compared against).

usage: python pq_write.py MODE DIR
  matrix  every codec (none/snappy/gzip/zstd) x data page v1/v2 x dictionary on/off, plus a
          dictionary that overflows into PLAIN pages and the DELTA encodings; small row groups and pages
  glob    part-000..003.parquet (one of them empty) whose rows concatenate
  bad     files for the bad-input tests: small.parquet (to truncate), codec/encoding bytes edited,
          codecs and encodings outside the reader's set, columns of other types, offsets.json
  seeds   small files for the fuzz corpus
  duckdb  the rows written by DuckDB instead (a second writer): every codec x PARQUET_VERSION V1/V2
Each NAME.parquet has NAME.json beside it: pyarrow's read back, a list of rows, integers and
booleans as strings (JSON numbers lose int64 precision). manifest.txt lists the names.
"""
import json
import os
import random
import sys

import pyarrow as pa
import pyarrow.parquet as pq

MSG = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
SCHEMA = pa.schema([("text", pa.string()), ("n32", pa.int32()), pa.field("n64", pa.int64(), nullable=False),
                    ("flag", pa.bool_()), ("category", pa.string()), ("messages", MSG)])
WORDS = ["a", "héllo wörld", "日本語のテキスト", "emoji 🎉🚀", "tab\tnew\nline", "quote\"back\\slash", "ÿ"]


def make_rows(n, seed):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        r = rng.random()
        if r < 0.1:
            text = None
        elif r < 0.2:
            text = ""
        elif r < 0.23:
            text = "long " + "ab" * rng.randint(1000, 40000)
        else:
            text = rng.choice(WORDS) + " " + str(i)
        n32 = None if rng.random() < 0.15 else rng.randint(-2**31, 2**31 - 1)
        n64 = rng.randint(-2**63, 2**63 - 1)
        flag = None if rng.random() < 0.2 else rng.random() < 0.5
        category = rng.choice(["math", "code", "chat", "", "ünï"])
        r = rng.random()
        if r < 0.1:
            msgs = None
        elif r < 0.2:
            msgs = []
        else:
            msgs = []
            for k in range(rng.randint(1, 4)):
                if rng.random() < 0.03:  # a null struct in the list
                    msgs.append(None)
                    continue
                c = rng.random()
                content = None if c < 0.1 else "" if c < 0.2 else rng.choice(WORDS) + " turn %d" % k
                role = None if rng.random() < 0.03 else rng.choice(["system", "user", "assistant"])
                msgs.append({"role": role, "content": content})
        rows.append({"text": text, "n32": n32, "n64": n64, "flag": flag, "category": category, "messages": msgs})
    return rows


def as_json(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return [as_json(x) for x in v]
    if isinstance(v, dict):
        return {k: as_json(x) for k, x in v.items()}
    return v


def dump(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        json.dump([as_json(r) for r in rows], f, ensure_ascii=False)


def write(d, name, rows, manifest, schema=SCHEMA, ref=True, **kw):
    path = os.path.join(d, name + ".parquet")
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, **kw)
    if ref:
        dump(os.path.join(d, name + ".json"), pq.read_table(path).to_pylist())
    manifest.append(name)
    return path


SMALL = dict(row_group_size=37, data_page_size=512, write_batch_size=16)


def matrix(d, m):
    rows = make_rows(200, 1)
    for comp in ["none", "snappy", "gzip", "zstd"]:
        for v in ["1.0", "2.0"]:
            for dic in [True, False]:
                write(d, "m_%s_v%s_%s" % (comp, v[0], "dict" if dic else "plain"), rows, m, compression=comp,
                      data_page_version=v, use_dictionary=dic, **SMALL)
    # a dictionary that outgrows its limit: dictionary pages, then PLAIN pages in the same chunk
    write(d, "m_fallback", make_rows(300, 2), m, compression="snappy", use_dictionary=True,
          dictionary_pagesize_limit=256, **SMALL)
    # the DELTA encodings (no dictionary), both page versions
    delta = {"text": "DELTA_LENGTH_BYTE_ARRAY", "category": "DELTA_BYTE_ARRAY", "n32": "DELTA_BINARY_PACKED",
             "n64": "DELTA_BINARY_PACKED", "messages.list.element.role": "DELTA_BYTE_ARRAY",
             "messages.list.element.content": "DELTA_LENGTH_BYTE_ARRAY"}
    for v in ["1.0", "2.0"]:
        write(d, "m_delta_v" + v[0], rows, m, compression="zstd", data_page_version=v, use_dictionary=False,
              column_encoding=delta, **SMALL)
    # the legacy list names (list/item), and a schema where the list, its structs and roles are required
    write(d, "m_item_names", rows, m, use_compliant_nested_type=False, **SMALL)
    req = pa.schema([f if f.name != "messages" else pa.field("messages", pa.list_(pa.field("element", pa.struct(
        [pa.field("role", pa.string(), nullable=False), ("content", pa.string())]), nullable=False)), nullable=False)
        for f in SCHEMA])
    rows_req = [dict(r, messages=[dict(x or {"content": None}, role=(x or {}).get("role") or "user")
                                  for x in r["messages"] or []]) for r in rows]
    write(d, "m_required", rows_req, m, schema=req, **SMALL)
    # one row group, default page sizes
    write(d, "m_defaults", make_rows(150, 3), m)


def glob_files(d, m):
    rows = []
    for i, (n, rg) in enumerate([(50, 20), (0, 10), (73, 73), (31, 7)]):
        part = make_rows(n, 10 + i)
        write(d, "part-%03d" % i, part, m, compression="zstd" if i % 2 else "snappy", row_group_size=rg,
              data_page_version="2.0" if i == 3 else "1.0")
        rows += part
    dump(os.path.join(d, "glob_expected.json"), rows)


def duckdb_files(d, m):
    """The same rows written by DuckDB (a second, independent writer), each codec x parquet version."""
    import duckdb
    rows = make_rows(2500, 8)
    for r in rows:
        if r["text"] and len(r["text"]) > 3000:
            r["text"] = r["text"][:3000]
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    con = duckdb.connect()
    con.register("t", table)
    for comp in ["uncompressed", "snappy", "gzip", "zstd"]:
        for ver in ["V1", "V2"]:
            name = "duck_%s_%s" % (comp, ver)
            path = os.path.join(d, name + ".parquet")
            con.execute("COPY t TO '%s' (FORMAT parquet, COMPRESSION %s, ROW_GROUP_SIZE 1000, PARQUET_VERSION %s)"
                        % (path, comp, ver))
            # the reference: DuckDB's own read back, which pyarrow's must equal where pyarrow reads the file
            # (pyarrow 26 refuses DuckDB's DELTA_BINARY_PACKED int32 pages: "InitBlock EOF")
            back = con.sql("SELECT * FROM read_parquet('%s')" % path).to_arrow_table().to_pylist()
            try:
                theirs = pq.read_table(path).to_pylist()
            except OSError:
                theirs = None
            if theirs is not None and theirs != back:
                sys.exit("%s: pyarrow and DuckDB read it differently" % path)
            dump(os.path.join(d, name + ".json"), back)
            m.append(name)


def varint(b, p):
    v = s = 0
    while True:
        x = b[p]
        p += 1
        v |= (x & 0x7F) << s
        s += 7
        if not x & 0x80:
            return v, p


def thrift(b, p, t):
    """A thrift compact value of type t at b[p]: (value, end, start); a struct is {id: (value, start)}."""
    start = p
    if t in (1, 2):
        return t == 1, p, start
    if t == 3:
        return b[p], p + 1, start
    if t in (4, 5, 6):
        v, p = varint(b, p)
        return (v >> 1) ^ -(v & 1), p, start
    if t == 7:
        return None, p + 8, start
    if t == 8:
        n, p = varint(b, p)
        return bytes(b[p:p + n]), p + n, start
    if t in (9, 10):
        h = b[p]
        p += 1
        n, et = h >> 4, h & 15
        if n == 15:
            n, p = varint(b, p)
        items = []
        for _ in range(n):
            if et in (1, 2):
                items.append((b[p] == 1, p))
                p += 1
            else:
                v, p, s = thrift(b, p, et)
                items.append((v, s))
        return items, p, start
    if t == 12:
        fields, last = {}, 0
        while True:
            h = b[p]
            p += 1
            if h == 0:
                return fields, p, start
            ft, dl = h & 15, h >> 4
            if dl:
                fid = last + dl
            else:
                v, p = varint(b, p)
                fid = (v >> 1) ^ -(v & 1)
            last = fid
            v, p, s = thrift(b, p, ft)
            fields[fid] = (v, s)
    raise ValueError("thrift type %d" % t)


def bad(d, m):
    rows = make_rows(12, 4)
    small = write(d, "small", rows, m, compression="none", use_dictionary=False, row_group_size=5)
    data = bytearray(open(small, "rb").read())
    flen = int.from_bytes(data[-8:-4], "little")
    footer, _, _ = thrift(data, len(data) - 8 - flen, 12)
    col0 = footer[4][0][0][0][1][0][0][0]  # row_groups[0].columns[0]
    meta = col0[3][0]
    # the codec edited to 9 (zigzag 18: one byte, as UNCOMPRESSED's 0 was)
    codec_pos = meta[4][1]
    assert data[codec_pos] == 0
    e = bytearray(data)
    e[codec_pos] = 18
    open(os.path.join(d, "bad_codec.parquet"), "wb").write(e)
    # the first data page's encoding edited to 63 (zigzag 126, one byte like PLAIN's 0)
    page, _, _ = thrift(data, meta[9][0], 12)
    enc_pos = page[5][0][2][1]
    assert data[enc_pos] == 0
    e = bytearray(data)
    e[enc_pos] = 126
    open(os.path.join(d, "bad_encoding.parquet"), "wb").write(e)
    # the footer length beyond the file
    e = bytearray(data)
    e[-8:-4] = (len(data) - 4).to_bytes(4, "little")
    open(os.path.join(d, "bad_footer_len.parquet"), "wb").write(e)
    e = bytearray(data)
    e[0:4] = b"PAR2"
    open(os.path.join(d, "bad_magic.parquet"), "wb").write(e)
    # codecs and encodings outside the reader's set
    write(d, "brotli", rows, m, compression="brotli")
    write(d, "lz4", rows, m, compression="lz4")
    write(d, "bss", rows, m, use_dictionary=False, column_encoding={"n64": "BYTE_STREAM_SPLIT"})
    # columns of other types
    other = pa.schema([("d", pa.float64()), ("tags", pa.list_(pa.string())), ("s", pa.struct([("x", pa.int32())])),
                       ("chat", pa.list_(pa.struct([("role", pa.string()), ("text", pa.string())]))),
                       ("blob", pa.binary()), ("dec", pa.decimal128(10, 2))])
    import decimal
    write(d, "types", [{"d": 1.5, "tags": ["a"], "s": {"x": 1}, "chat": [], "blob": b"\x00\x01",
                        "dec": decimal.Decimal("1.25")}], m, schema=other, ref=False)
    # unsigned integers (UINT_8/16/32 in INT32, UINT_64 in INT64), and a UINT_64 beyond int64
    us = pa.schema([("u8", pa.uint8()), ("u16", pa.uint16()), ("u32", pa.uint32()), ("u64", pa.uint64())])
    urows = [{"u8": 255, "u16": 65535, "u32": 2**32 - 1, "u64": 2**63 - 1}, {"u8": 0, "u16": None, "u32": 2**31, "u64": 0},
             {"u8": 7, "u16": 300, "u32": 5, "u64": 2**40}]
    write(d, "uints", urows, m, schema=us, ref=False)
    json.dump([{k: None if v is None else str(v) for k, v in r.items()} for r in pq.read_table(
        os.path.join(d, "uints.parquet")).to_pylist()], open(os.path.join(d, "uints.json"), "w"))
    write(d, "u64_big", [{"u8": 1, "u16": 1, "u32": 1, "u64": 2**63}], m, schema=us, ref=False)
    # where each column's chunks lie in a multi-row-group file (the lazy-read test spoils one column)
    lazy = write(d, "lazy", make_rows(90, 5), m, compression="snappy", row_group_size=30)
    md = pq.ParquetFile(lazy).metadata
    spans = {}
    for g in range(md.num_row_groups):
        for c in range(md.num_columns):
            cc = md.row_group(g).column(c)
            start = cc.dictionary_page_offset if cc.has_dictionary_page else cc.data_page_offset
            spans.setdefault(cc.path_in_schema.split(".")[0], []).append([start, cc.total_compressed_size])
    json.dump(spans, open(os.path.join(d, "lazy_spans.json"), "w"))


def seeds(d, m):
    rows = make_rows(6, 7)
    for r in rows:
        if r["text"] and len(r["text"]) > 40:
            r["text"] = r["text"][:40]
    i = 0
    for comp in ["none", "snappy", "gzip", "zstd"]:
        for v in ["1.0", "2.0"]:
            write(d, "seed%d" % i, rows, m, compression=comp, data_page_version=v, use_dictionary=i % 2 == 0,
                  row_group_size=3)
            i += 1
    delta = {"text": "DELTA_LENGTH_BYTE_ARRAY", "category": "DELTA_BYTE_ARRAY", "n64": "DELTA_BINARY_PACKED",
             "messages.list.element.content": "DELTA_BYTE_ARRAY"}
    for v in ["1.0", "2.0"]:
        write(d, "seed%d" % i, rows, m, compression="none", data_page_version=v, use_dictionary=False,
              column_encoding=delta, row_group_size=3)
        i += 1


def main():
    mode, d = sys.argv[1], sys.argv[2]
    os.makedirs(d, exist_ok=True)
    manifest = []
    {"matrix": matrix, "glob": glob_files, "bad": bad, "seeds": seeds, "duckdb": duckdb_files}[mode](d, manifest)
    with open(os.path.join(d, "manifest.txt"), "w") as f:
        f.write("".join(n + "\n" for n in manifest))


if __name__ == "__main__":
    main()
