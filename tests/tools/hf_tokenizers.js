// hf_tokenizers.js - what the Node programs of tests/tools share: Hugging Face's tokenizers package
// (npm `tokenizers`), found through $GTRAIN_NPM_REFS/node_modules (scripts/npm-refs.sh) or the
// usual resolution (NODE_PATH), and a one-line failure.
'use strict';

const path = require('path');

function loadTokenizers() {
  const refs = process.env.GTRAIN_NPM_REFS;
  if (refs) {
    try {
      return require(path.join(refs, 'node_modules', 'tokenizers'));
    } catch (e) {
      // fall through to NODE_PATH / the usual resolution
    }
  }
  return require('tokenizers');
}

// One line on stderr, prefixed with the program's name, and exit with code.
function failer(name) {
  return (msg, code = 2) => {
    process.stderr.write(name + ': ' + msg + '\n');
    process.exit(code);
  };
}

module.exports = { loadTokenizers, failer };
