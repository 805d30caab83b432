#!/usr/bin/env node
// hf_tokenize_bench.js - Hugging Face's tokenizers (npm `tokenizers`, the Rust library through
// napi) timed on a text, for scripts/bench-tokenizer.sh beside `gtrain tokenize`.
//
//   node hf_tokenize_bench.js TOKENIZER_JSON FILE doc|lines [--ids-out FILE]
//
// doc:   the whole file is one text: encode(text) (one sequence: one thread whatever the settings).
// lines: each line of the file (split on '\n', the newline not included) is one text, all of them
//        through encodeBatch: over rayon's threads, or one when RAYON_NUM_THREADS=1 /
//        TOKENIZERS_PARALLELISM=false.
// No special tokens are added. Prints one line: `tokens N seconds S load_seconds L` (S the encode
// alone, after the tokenizer is loaded and the file read). --ids-out writes the ids afterwards in
// the format of `gtrain tokenize` (one line of space-separated ids per text), untimed.
// The package is found through $GTRAIN_NPM_REFS/node_modules (scripts/npm-refs.sh) or NODE_PATH.
'use strict';

const fs = require('fs');

const { loadTokenizers, failer } = require('./hf_tokenizers');
const fail = failer('hf_tokenize_bench');

async function main() {
  const args = process.argv.slice(2);
  let idsOut = null;
  const pos = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--ids-out') idsOut = args[++i];
    else if (args[i].startsWith('--')) fail(`unknown option ${args[i]}`);
    else pos.push(args[i]);
  }
  if (pos.length !== 3 || (pos[2] !== 'doc' && pos[2] !== 'lines'))
    fail('usage: hf_tokenize_bench.js TOKENIZER_JSON FILE doc|lines [--ids-out FILE]');
  const [tokFile, textFile, mode] = pos;
  const { Tokenizer } = loadTokenizers();
  const t0 = process.hrtime.bigint();
  const tok = Tokenizer.fromFile(tokFile);
  const loadSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const text = fs.readFileSync(textFile).toString('utf8');
  let inputs;
  if (mode === 'doc') {
    inputs = [text];
  } else {
    inputs = text.split('\n');
    if (inputs.length && inputs[inputs.length - 1] === '') inputs.pop();
  }
  const t1 = process.hrtime.bigint();
  let encodings;
  if (mode === 'doc') {
    encodings = [await tok.encode(text, null, { addSpecialTokens: false })];
  } else {
    encodings = [];
    const chunk = 8192; // bounds the memory of the Encoding objects; each chunk is one encodeBatch
    for (let at = 0; at < inputs.length; at += chunk) {
      const encs = await tok.encodeBatch(inputs.slice(at, at + chunk), { addSpecialTokens: false });
      for (const e of encs) encodings.push(e.getIds());
    }
  }
  if (mode === 'doc') encodings = [encodings[0].getIds()];
  const seconds = Number(process.hrtime.bigint() - t1) / 1e9;
  let tokens = 0;
  for (const ids of encodings) tokens += ids.length;
  if (idsOut) {
    const fd = fs.openSync(idsOut, 'w');
    let buf = [];
    for (const ids of encodings) {
      buf.push(ids.join(' ') + '\n');
      if (buf.length >= 4096) {
        fs.writeSync(fd, buf.join(''));
        buf = [];
      }
    }
    fs.writeSync(fd, buf.join(''));
    fs.closeSync(fd);
  }
  process.stdout.write(`tokens ${tokens} seconds ${seconds.toFixed(4)} load_seconds ${loadSeconds.toFixed(4)}\n`);
}

main().catch((e) => fail(String((e && e.stack) || e).split('\n')[0]));
