// Test oracle for tests/text_exact_test.cc: writes the tokenizer files the C++ side
// opens and the ids the reference libraries give for a corpus.
//   node oracle.js DIR CORPUS.json   (CORPUS: a JSON list of base64 byte strings)
// Writes DIR/cl100k_base.tiktoken and DIR/o200k_base.tiktoken (the ranks npm's tiktoken
// ships), DIR/gpt2-bytelevel.json and DIR/split-bytelevel.json (tokenizer.json files
// made from GPT-2's ranks: merges from each token's first split into two lower-ranked
// tokens; prefix-bytelevel.json with add_prefix_space), and DIR/oracle.json: per tokenizer and special-token mode, the ids of each
// text as the reference gives them for the text decoded with replacement (TextDecoder).
// Needs the npm packages tiktoken and @anush008/tokenizers (NODE_PATH=$(npm root -g)).
'use strict';
const fs = require('fs');
const path = require('path');
const { Tiktoken } = require('tiktoken/lite');
const { Tokenizer } = require('@anush008/tokenizers');

const [dir, corpusFile] = process.argv.slice(2);
const encRoot = path.dirname(require.resolve('tiktoken/encoders/cl100k_base.json'));
const texts = JSON.parse(fs.readFileSync(corpusFile, 'utf8')).map(
  (b) => new TextDecoder('utf-8').decode(Buffer.from(b, 'base64')));

// npm's files hold the ranks as "<first> <offset> tok tok ...": consecutive ranks.
function ranksOf(enc) {
  const parts = enc.bpe_ranks.split(' ');
  const first = parseInt(parts[1], 10);
  return parts.slice(2).map((b64, i) => [b64, first + i]);
}

const out = {};
for (const name of ['cl100k_base', 'o200k_base']) {
  const enc = JSON.parse(fs.readFileSync(path.join(encRoot, name + '.json'), 'utf8'));
  fs.writeFileSync(path.join(dir, name + '.tiktoken'),
    ranksOf(enc).map(([b, r]) => b + ' ' + r + '\n').join(''));
  const t = new Tiktoken(enc.bpe_ranks, enc.special_tokens, enc.pat_str);
  out[name] = {
    none: texts.map((s) => Array.from(t.encode(s, [], []))),
    all: texts.map((s) => Array.from(t.encode(s, 'all', []))),
  };
  t.free();
}

// GPT-2's byte-to-unicode map (bytes_to_unicode in GPT-2's encoder.py).
const byteChar = [];
let extra = 0;
for (let b = 0; b < 256; b++) {
  const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  byteChar.push(String.fromCodePoint(printable ? b : 256 + extra++));
}
const gpt2 = JSON.parse(fs.readFileSync(path.join(encRoot, 'gpt2.json'), 'utf8'));
const vocab = {};
const rankOf = new Map();
const merges = [];
for (const [b64, rank] of ranksOf(gpt2)) {
  const bytes = Buffer.from(b64, 'base64');
  const key = bytes.toString('latin1');
  rankOf.set(key, rank);
  vocab[Array.from(bytes, (x) => byteChar[x]).join('')] = rank;
  if (bytes.length < 2) continue;
  for (let k = 1; k < bytes.length; k++) {
    const l = key.slice(0, k), r = key.slice(k);
    if (rankOf.has(l) && rankOf.has(r) && rankOf.get(l) < rank && rankOf.get(r) < rank) {
      const show = (s) => Array.from(Buffer.from(s, 'latin1'), (x) => byteChar[x]).join('');
      merges.push(show(l) + ' ' + show(r));
      break;
    }
  }
}
vocab['<|endoftext|>'] = 50256;
const added = [{ id: 50256, content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false,
  normalized: false, special: true }];
const model = { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
  end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab, merges };
const variants = {
  'gpt2-bytelevel': { pre: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true } },
  'prefix-bytelevel': { pre: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true } },
  'split-bytelevel': {
    pre: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: JSON.parse(fs.readFileSync(path.join(encRoot, 'cl100k_base.json'), 'utf8')).pat_str },
        behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] },
    ignore_merges: true,
  },
};
const pending = [];
for (const [name, v] of Object.entries(variants)) {
  const file = path.join(dir, name + '.json');
  fs.writeFileSync(file, JSON.stringify({
    version: '1.0', truncation: null, padding: null, added_tokens: added, normalizer: null,
    pre_tokenizer: v.pre, post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    model: v.ignore_merges ? { ...model, ignore_merges: true } : model,
  }));
  const tok = Tokenizer.fromFile(file);
  pending.push(Promise.all(texts.map((s) => tok.encode(s, null, { addSpecialTokens: false })))
    .then((encs) => { out[name] = { all: encs.map((e) => e.getIds()) }; }));
}
Promise.all(pending).then(() => fs.writeFileSync(path.join(dir, 'oracle.json'), JSON.stringify(out)));
