#!/usr/bin/env node
// hf_tokenize.js - the independent reference for gtrain's tokenizer: Hugging Face's own tokenizers
// library (the Rust crate through its napi binding, npm package `tokenizers`), nothing of gtrain's.
//
//   node hf_tokenize.js TOKENIZER_JSON [--add-special-tokens] [--decode] [--skip-special-tokens] < lines
//
// Reads stdin as lines (split on '\n' only; a final empty line after the last '\n' is not an input).
// Encode (the default): each line is a JSON string; prints one line of space-separated decimal ids
// per input line (an empty line for an empty string), the format of `gtrain tokenize --jsonl`.
// --decode: each line is a JSON array of ids; prints the decoded text as a JSON string per line
// (HF's decode(ids, skip_special_tokens), false unless --skip-special-tokens), the format of
// `gtrain tokenize --decode --jsonl`.
// The package is found through NODE_PATH or $GTRAIN_NPM_REFS/node_modules (scripts/npm-refs.sh).
// Exit 2 with one line naming the line on input that is not the expected JSON.
'use strict';

const fs = require('fs');
const path = require('path');

const { loadTokenizers, failer } = require('./hf_tokenizers');
const fail = failer('hf_tokenize');

// stdin as the list of its lines (no line terminator kept)
function readLines() {
  const text = fs.readFileSync(0).toString('utf8');
  if (text.length === 0) return [];
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

// One write of everything: process.stdout on a pipe is asynchronous, and many small writes are slow.
function writeAll(out) {
  fs.writeSync(1, out.join(''));
}

async function encodeAll(tok, lines, addSpecialTokens) {
  const texts = lines.map((line, i) => {
    let s;
    try {
      s = JSON.parse(line);
    } catch (e) {
      fail(`stdin:${i + 1}: not JSON: ${e.message}`, 2);
    }
    if (typeof s !== 'string') fail(`stdin:${i + 1}: expected a JSON string, found ${typeof s}`, 2);
    return s;
  });
  const out = [];
  // encodeBatch runs the whole batch in Rust (over rayon's threads unless TOKENIZERS_PARALLELISM
  // is false); chunks keep the memory of the Encoding objects bounded. Order is the input's.
  const chunk = 4096;
  for (let at = 0; at < texts.length; at += chunk) {
    const encs = await tok.encodeBatch(texts.slice(at, at + chunk), { addSpecialTokens });
    for (const e of encs) out.push(e.getIds().join(' ') + '\n');
  }
  writeAll(out);
}

async function decodeAll(tok, lines, skipSpecialTokens) {
  const batches = lines.map((line, i) => {
    let a;
    try {
      a = JSON.parse(line);
    } catch (e) {
      fail(`stdin:${i + 1}: not JSON: ${e.message}`, 2);
    }
    if (!Array.isArray(a) || !a.every((x) => Number.isInteger(x) && x >= 0 && x <= 0xffffffff))
      fail(`stdin:${i + 1}: expected a JSON array of non-negative integer ids`, 2);
    return a;
  });
  const out = [];
  const chunk = 4096;
  for (let at = 0; at < batches.length; at += chunk) {
    const texts = await tok.decodeBatch(batches.slice(at, at + chunk), skipSpecialTokens);
    for (const t of texts) out.push(JSON.stringify(t) + '\n');
  }
  writeAll(out);
}

async function main() {
  const args = process.argv.slice(2);
  let file = null;
  let addSpecialTokens = false;
  let decode = false;
  let skipSpecialTokens = false;
  for (const a of args) {
    if (a === '--add-special-tokens') addSpecialTokens = true;
    else if (a === '--decode') decode = true;
    else if (a === '--skip-special-tokens') skipSpecialTokens = true;
    else if (a.startsWith('--')) fail(`unknown option ${a}`, 2);
    else if (file === null) file = a;
    else fail(`a second tokenizer file ${a}`, 2);
  }
  if (file === null) fail('usage: hf_tokenize.js TOKENIZER_JSON [--add-special-tokens] [--decode] [--skip-special-tokens]', 2);
  if (fs.existsSync(file) && fs.statSync(file).isDirectory()) file = path.join(file, 'tokenizer.json');
  const { Tokenizer } = loadTokenizers();
  let tok;
  try {
    tok = Tokenizer.fromFile(file);
  } catch (e) {
    fail(`${file}: ${String(e.message || e).split('\n')[0]}`, 2);
  }
  const lines = readLines();
  if (decode) await decodeAll(tok, lines, skipSpecialTokens);
  else await encodeAll(tok, lines, addSpecialTokens);
}

main().catch((e) => fail(String((e && e.stack) || e).split('\n')[0], 1));
