// The references of bench/text_bench.sh: npm tiktoken (cl100k_base, tiktoken's Rust in
// WASM) and Hugging Face tokenizers (npm @anush008/tokenizers, native) encoding the same
// documents as build/tokenizer_bench. tiktoken: THREADS worker threads, each encoding
// every document, one call each (as build/tokenizer_bench's threads do). HF tokenizers:
// encodeBatch over 512 documents a call (one call per document would time the binding's
// promise per call, not the tokenizer), run by its own rayon pool: run with
// RAYON_NUM_THREADS=THREADS. Prints one JSON line: {ref, threads, tokens_per_s}.
//   NODE_PATH=$(npm root -g) node bench/text_bench.js tiktoken|hf_tokenizers THREADS TEXT TOKENIZER_JSON SECONDS
'use strict';
const { Worker, isMainThread, workerData, parentPort } = require('worker_threads');
const fs = require('fs');

function documents(text) {
  return text.split('\n\n').filter((d) => d.length > 0);
}

async function encodeFor(ref, docs, json, seconds) {
  let encode;
  if (ref === 'tiktoken') {
    const { get_encoding } = require('tiktoken');
    const enc = get_encoding('cl100k_base');
    encode = async (d) => enc.encode_ordinary(d).length;
  } else {
    const { Tokenizer } = require('@anush008/tokenizers');
    const tok = Tokenizer.fromFile(json);
    const batches = [];
    for (let i = 0; i < docs.length; i += 512) batches.push(docs.slice(i, i + 512));
    await tok.encodeBatch(batches[0], { addSpecialTokens: false });  // warm up
    let tokens = 0;
    const t0 = process.hrtime.bigint();
    let elapsed = 0;
    do {
      for (const b of batches)
        for (const e of await tok.encodeBatch(b, { addSpecialTokens: false })) tokens += e.getIds().length;
      elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
    } while (elapsed < seconds);
    return { tokens, elapsed };
  }
  for (const d of docs.slice(0, 50)) await encode(d);  // warm up
  let tokens = 0;
  const t0 = process.hrtime.bigint();
  let elapsed = 0;
  do {
    for (const d of docs) tokens += await encode(d);
    elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
  } while (elapsed < seconds);
  return { tokens, elapsed };
}

if (isMainThread) {
  const [ref, threadsArg, textFile, json, secondsArg] = process.argv.slice(2);
  const threads = Number(threadsArg), seconds = Number(secondsArg || 2);
  (async () => {
    let results;
    if (ref === 'tiktoken') {
      results = await Promise.all(Array.from({ length: threads }, () => new Promise((resolve, reject) => {
        const w = new Worker(__filename, { workerData: { ref, textFile, json, seconds } });
        w.on('message', resolve);
        w.on('error', reject);
      })));
    } else {
      results = [await encodeFor(ref, documents(fs.readFileSync(textFile, 'utf8')), json, seconds)];
    }
    const tokens = results.reduce((a, r) => a + r.tokens, 0);
    const slowest = Math.max(...results.map((r) => r.elapsed));
    console.log(JSON.stringify({ ref, threads, tokens_per_s: tokens / slowest }));
  })();
} else {
  const { ref, textFile, json, seconds } = workerData;
  encodeFor(ref, documents(fs.readFileSync(textFile, 'utf8')), json, seconds).then((r) => parentPort.postMessage(r));
}
