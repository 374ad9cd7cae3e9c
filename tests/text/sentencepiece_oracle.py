"""Test oracle for tests/text_exact_test.cc: trains a small SentencePiece model and
writes the ids SentencePiece gives for a corpus.
   python3 sentencepiece_oracle.py DIR CORPUS.json   (CORPUS: a JSON list of base64 byte strings)
Writes DIR/tiny.model (BPE, trained on the corpus texts and a fixed paragraph) and
DIR/sentencepiece_oracle.json: the ids of each text decoded with errors="replace".
Needs python3-sentencepiece.
"""
import base64
import io
import json
import sys

import sentencepiece as spm

out_dir, corpus_file = sys.argv[1], sys.argv[2]
texts = [base64.b64decode(b).decode("utf-8", errors="replace") for b in json.load(open(corpus_file))]
training = texts + [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Le cœur a ses raisons que la raison ne connaît point.",
    "Ничто не вечно под луной. 天下没有不散的筵席。 すべての道はローマに通ず。",
    "In 1969, 3 astronauts flew 384,400 km to the Moon and back again.",
] * 20
model = io.BytesIO()
spm.SentencePieceTrainer.train(
    sentence_iterator=iter(t for t in training if t.strip()), model_writer=model, vocab_size=1500, hard_vocab_limit=False,
    model_type="bpe", character_coverage=1.0, byte_fallback=True, minloglevel=2,
    control_symbols=["<ctrl>"], num_threads=1)
with open(f"{out_dir}/tiny.model", "wb") as f:
    f.write(model.getvalue())
sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
json.dump({"none": [sp.encode(t) for t in texts]}, open(f"{out_dir}/sentencepiece_oracle.json", "w"))
